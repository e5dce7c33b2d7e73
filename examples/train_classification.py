"""Train a small face classifier, written the way torchvision's reference classification
script is (``references/classification/train.py``): argparse, ``ImageFolder``, a model,
the loop, a ``--workers`` flag. The course's example for ``feedgpu-diagnose run``::

    feedgpu-diagnose run -- python examples/train_classification.py --data-path data/lfw-synthetic --workers 0

It knows nothing of the diagnosis: the diagnosis finds its loop from outside.
"""

import argparse
import time

import torch
import torchvision
from torch import nn
from torchvision.transforms import v2


def get_args_parser():
    parser = argparse.ArgumentParser(description="Face classification training", add_help=True)
    parser.add_argument("--data-path", default="data/lfw-synthetic", type=str, help="an ImageFolder tree")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", type=str)
    parser.add_argument("-b", "--batch-size", default=32, type=int, help="images per batch")
    parser.add_argument("--epochs", default=3, type=int, metavar="N", help="number of total epochs to run")
    parser.add_argument("-j", "--workers", default=4, type=int, metavar="N", help="number of data loading workers")
    parser.add_argument("--lr", default=0.05, type=float, help="initial learning rate")
    parser.add_argument("--image-size", default=64, type=int, help="images are resized to this")
    parser.add_argument("--print-freq", default=20, type=int, help="print frequency")
    return parser


def load_data(path, image_size):
    transform = v2.Compose([v2.PILToTensor(), v2.Resize((image_size, image_size), antialias=True),
                            v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True)])
    return torchvision.datasets.ImageFolder(path, transform)


def make_model(num_classes):
    return nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))


def train_one_epoch(model, criterion, optimizer, data_loader, device, epoch, print_freq):
    model.train()
    start = time.time()
    for i, (image, target) in enumerate(data_loader):
        image, target = image.to(device, non_blocking=True), target.to(device, non_blocking=True)
        output = model(image)
        loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i % print_freq == 0:
            print(f"Epoch: [{epoch}]  [{i:4d}/{len(data_loader)}]  loss {loss.item():.4f}  "
                  f"{(time.time() - start) / (i + 1):.3f} s/it", flush=True)


def main(args):
    device = torch.device(args.device)
    dataset = load_data(args.data_path, args.image_size)
    data_loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                              num_workers=args.workers, pin_memory=device.type == "cuda")
    model = make_model(len(dataset.classes)).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    print(f"{len(dataset)} images of {len(dataset.classes)} people, {args.workers} workers", flush=True)
    for epoch in range(args.epochs):
        train_one_epoch(model, criterion, optimizer, data_loader, device, epoch, args.print_freq)


if __name__ == "__main__":
    main(get_args_parser().parse_args())
