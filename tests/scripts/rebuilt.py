"""A loader made again every epoch, the images growing from epoch to epoch (progressive resizing)."""

import torch
from torch.utils.data import DataLoader, Dataset

from common import arguments, trainer, train_step, work


class Resized(Dataset):
    def __init__(self, size: int, n: int = 512) -> None:
        self.size, self.n = size, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        work(20, i)  # decoding and resizing
        return torch.full((3, self.size, self.size), float(i % 3)), i % 10


def make_loader(epoch: int, workers: int, batch_size: int) -> DataLoader:
    size = 16 + 4 * min(epoch, 4)
    return DataLoader(Resized(size), batch_size=batch_size, shuffle=True, num_workers=workers)


def main() -> None:
    args = arguments(epochs=20)
    model, optimizer = trainer(3 * 16 * 16)
    for epoch in range(args.epochs):
        loader = make_loader(epoch, args.workers, args.batch_size)
        for step, (x, y) in enumerate(loader):
            x = torch.nn.functional.adaptive_avg_pool2d(x, 16)
            loss = train_step(model, optimizer, x, y)
        print(f"epoch {epoch} loss {loss:.3f}", flush=True)


if __name__ == "__main__":
    main()
