"""Items that do numpy matrix products (numpy's BLAS keeps a thread per core), with 2 workers."""

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from common import arguments, trainer, train_step


class Features(Dataset):
    def __init__(self, n: int = 4000, size: int = 96) -> None:
        self.n, self.size = n, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        x = np.random.default_rng(i).standard_normal((self.size, self.size), dtype=np.float32)
        for _ in range(3):
            x = np.tanh(x @ x / self.size)
        return torch.from_numpy(x[:8].copy()), i % 10


def main() -> None:
    args = arguments(workers=2)
    loader = DataLoader(Features(), batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    model, optimizer = trainer(8 * 96)
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            loss = train_step(model, optimizer, x, y)
            if step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {loss:.3f}", flush=True)


if __name__ == "__main__":
    main()
