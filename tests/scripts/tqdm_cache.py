"""tqdm around the loader, over a dataset that caches each decoded item in its worker."""

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from common import arguments, trainer, train_step, work


class Cached(Dataset):
    def __init__(self, n: int = 4000) -> None:
        self.n = n
        self.cache: dict[int, np.ndarray] = {}  # filled in each worker: every worker keeps its own

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i not in self.cache:
            work(20, i)  # decoding, once per item and worker
            self.cache[i] = np.full((3, 64, 64), i % 7, dtype=np.float32)  # 48 KB an item
        return torch.from_numpy(self.cache[i]), i % 10


def main() -> None:
    args = arguments()
    loader = DataLoader(Cached(), batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    model, optimizer = trainer(3 * 64 * 64)
    for epoch in range(args.epochs):
        for x, y in tqdm(loader, desc=f"epoch {epoch}"):
            train_step(model, optimizer, x, y)


if __name__ == "__main__":
    main()
