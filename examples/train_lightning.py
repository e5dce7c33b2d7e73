"""Train the same small face classifier with Lightning: a ``LightningDataModule`` that makes
the loaders and a ``Trainer`` that runs the loop. The course's Lightning example for
``feedgpu-diagnose run``, which finds the loop Lightning runs from outside::

    feedgpu-diagnose run -- python examples/train_lightning.py --data-path data/lfw-synthetic --workers 0
"""

import argparse

import lightning as L
import torch
import torchvision
from torch import nn
from torch.utils.data import DataLoader
from torchvision.transforms import v2


class FacesDataModule(L.LightningDataModule):
    def __init__(self, data_path, batch_size=32, workers=4, image_size=64):
        super().__init__()
        self.data_path, self.batch_size, self.workers, self.image_size = data_path, batch_size, workers, image_size

    def setup(self, stage=None):
        transform = v2.Compose([v2.PILToTensor(), v2.Resize((self.image_size, self.image_size), antialias=True),
                                v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True)])
        self.train_set = torchvision.datasets.ImageFolder(self.data_path, transform)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.workers)


class FaceClassifier(L.LightningModule):
    def __init__(self, num_classes, lr=0.05):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                 nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))
        self.criterion = nn.CrossEntropyLoss()

    def training_step(self, batch, batch_idx):
        image, target = batch
        loss = self.criterion(self.net(image), target)
        self.log("loss", loss, prog_bar=False)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def main():
    parser = argparse.ArgumentParser(description="Face classification with Lightning")
    parser.add_argument("--data-path", default="data/lfw-synthetic")
    parser.add_argument("-b", "--batch-size", default=32, type=int)
    parser.add_argument("-j", "--workers", default=4, type=int)
    parser.add_argument("--epochs", default=1, type=int)
    args = parser.parse_args()
    data = FacesDataModule(args.data_path, args.batch_size, args.workers)
    data.setup()
    model = FaceClassifier(len(data.train_set.classes))
    trainer = L.Trainer(max_epochs=args.epochs, accelerator="auto", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, datamodule=data)


if __name__ == "__main__":
    main()
