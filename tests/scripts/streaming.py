"""An IterableDataset that splits its stream between the workers by get_worker_info()."""

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from common import arguments, trainer, train_step, work


class Stream(IterableDataset):
    def __init__(self, n: int = 4000) -> None:
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            work(20, i)  # parsing a record
            yield torch.full((32,), float(i % 7)), i % 10


def main() -> None:
    args = arguments()
    loader = DataLoader(Stream(), batch_size=args.batch_size, num_workers=args.workers)
    model, optimizer = trainer(32)
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            loss = train_step(model, optimizer, x, y)
            if step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {loss:.3f}", flush=True)


if __name__ == "__main__":
    main()
