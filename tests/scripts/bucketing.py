"""A batch_sampler that groups items of one shape, so that the default collate can stack them."""

import random

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from common import arguments, trainer, train_step, work

SHAPES = [(3, 48, 80), (3, 80, 48), (3, 64, 64)]


class Pictures(Dataset):
    def __init__(self, n: int = 4000) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def shape(self, i: int) -> tuple:
        return SHAPES[i % len(SHAPES)]

    def __getitem__(self, i: int):
        work(20, i)
        return torch.full(self.shape(i), float(i % 5)), i % 10


class Buckets(Sampler):
    """Batches of indices of one shape each, shuffled."""

    def __init__(self, dataset: Pictures, batch_size: int, seed: int = 0) -> None:
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed

    def __iter__(self):
        rng = random.Random(self.seed)
        by_shape: dict[tuple, list[int]] = {}
        for i in range(len(self.dataset)):
            by_shape.setdefault(self.dataset.shape(i), []).append(i)
        batches = []
        for indices in by_shape.values():
            rng.shuffle(indices)
            batches += [indices[k:k + self.batch_size] for k in range(0, len(indices), self.batch_size)]
        rng.shuffle(batches)
        self.seed += 1
        return iter(batches)

    def __len__(self) -> int:
        return sum(-(-len([i for i in range(len(self.dataset)) if self.dataset.shape(i) == s]) // self.batch_size)
                   for s in SHAPES)


def main() -> None:
    args = arguments()
    data = Pictures()
    loader = DataLoader(data, batch_sampler=Buckets(data, args.batch_size), num_workers=args.workers)
    model, optimizer = trainer(64)
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            x = torch.nn.functional.adaptive_avg_pool2d(x, 4)[:, :, :4, :4].flatten(1)[:, :64]
            x = torch.nn.functional.pad(x, (0, 64 - x.shape[1]))
            loss = train_step(model, optimizer, x, y)
            if step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {loss:.3f}", flush=True)


if __name__ == "__main__":
    main()
