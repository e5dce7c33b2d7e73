"""A map dataset of dicts of token ids of varying length, padded by a collate of its own."""

import torch
from torch.utils.data import DataLoader, Dataset

from common import arguments, trainer, train_step, work


class Tokens(Dataset):
    def __init__(self, n: int = 4000) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        work(20, i)  # tokenising
        length = 8 + (i * 7919) % 56
        return {"input_ids": torch.arange(length) % 1000, "label": i % 10}


def pad_collate(features: list[dict]) -> dict:
    longest = max(len(f["input_ids"]) for f in features)
    ids = torch.zeros(len(features), longest, dtype=torch.long)
    mask = torch.zeros(len(features), longest, dtype=torch.long)
    for row, f in enumerate(features):
        ids[row, :len(f["input_ids"])] = f["input_ids"]
        mask[row, :len(f["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([f["label"] for f in features])}


def main() -> None:
    args = arguments()
    loader = DataLoader(Tokens(), batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        collate_fn=pad_collate)
    model, optimizer = trainer(64)
    for epoch in range(args.epochs):
        for step, batch in enumerate(loader):
            x = torch.nn.functional.pad(batch["input_ids"] * batch["attention_mask"], (0, 64))[:, :64]
            loss = train_step(model, optimizer, x, batch["labels"])
            if step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {loss:.3f}", flush=True)


if __name__ == "__main__":
    main()
