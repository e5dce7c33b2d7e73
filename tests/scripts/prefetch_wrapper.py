"""The loader wrapped in a prefetching iterator of its own, as timm's PrefetchLoader is."""

import torch
from torch.utils.data import DataLoader, Dataset

from common import arguments, trainer, train_step, work


class Images(Dataset):
    def __init__(self, n: int = 4000) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        work(20, i)
        return torch.full((3, 16, 16), float(i % 3), dtype=torch.uint8), i % 10


class PrefetchLoader:
    """Normalises each batch and, on a GPU, copies the next one on a side stream meanwhile."""

    def __init__(self, loader: DataLoader, mean: float = 1.0, std: float = 0.8) -> None:
        self.loader, self.mean, self.std = loader, mean, std
        self.device = "cuda" if torch.cuda.is_available() else "cpu"

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        stream = torch.cuda.Stream() if self.device == "cuda" else None
        first, held = True, None
        for x, y in self.loader:
            if stream is not None:
                with torch.cuda.stream(stream):
                    x = x.to(self.device, non_blocking=True).float().sub_(self.mean).div_(self.std)
                    y = y.to(self.device, non_blocking=True)
            else:
                x = x.float().sub_(self.mean).div_(self.std)
            if not first:
                yield held
            else:
                first = False
            if stream is not None:
                torch.cuda.current_stream().wait_stream(stream)
            held = (x, y)
        if held is not None:
            yield held


def main() -> None:
    args = arguments()
    loader = PrefetchLoader(DataLoader(Images(), batch_size=args.batch_size, shuffle=True,
                                       num_workers=args.workers, pin_memory=torch.cuda.is_available()))
    model, optimizer = trainer(3 * 16 * 16)
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            loss = train_step(model, optimizer, x.cpu(), y.cpu())
            if step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {loss:.3f}", flush=True)


if __name__ == "__main__":
    main()
