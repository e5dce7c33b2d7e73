"""A training loop that runs a validation pass over a loader of its own every few steps."""

import torch
from torch.utils.data import DataLoader, Dataset

from common import arguments, trainer, train_step, work

VALIDATE_EVERY = 10


class Images(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        work(20, i)  # decoding
        return torch.full((3, 8, 8), float(i % 5)), i % 10


def main() -> None:
    args = arguments()
    train = DataLoader(Images(4000), batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    val = DataLoader(Images(200), batch_size=args.batch_size, num_workers=0)
    model, optimizer = trainer(3 * 8 * 8)
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(train):
            loss = train_step(model, optimizer, x, y)
            if step % VALIDATE_EVERY == VALIDATE_EVERY - 1:
                with torch.no_grad():
                    correct = sum(int((model(vx.flatten(1)).argmax(1) == vy).sum()) for vx, vy in val)
                print(f"epoch {epoch} step {step} loss {loss:.3f} val accuracy {correct / 200:.3f}", flush=True)


if __name__ == "__main__":
    main()
