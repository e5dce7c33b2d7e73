"""Shared fixtures: tiny LFW-layout trees built in a temporary folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]

# people in an order that differs from sorted order, with mixed case
TINY_PEOPLE = {"zoe_Last": 1, "Bob_B": 3, "alice_A": 2, "Carl_C": 1}


def write_face(path: Path, seed: int, mode: str = "RGB", size: int = 32) -> None:
    """A small random image in ``mode``, saved by its file ending."""
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = rng.integers(0, 256, size=(size, size, channels), dtype=np.uint8)
    img = Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels, mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)


@pytest.fixture
def tiny_lfw(tmp_path: Path) -> Path:
    """A 4-person tree of 8 images (one grayscale JPEG, one RGBA PNG), stray files and a hidden folder."""
    root = tmp_path / "lfw"
    seed = 0
    for person, n in TINY_PEOPLE.items():  # created in non-sorted order on purpose
        for k in range(n, 0, -1):
            seed += 1
            write_face(root / person / f"{person}_{k:04d}.jpg", seed)
    write_face(root / "Bob_B" / "Bob_B_0002.jpg", 99, mode="L")
    write_face(root / "alice_A" / "alice_A_0003.png", 98, mode="RGBA")
    (root / "Bob_B" / "notes.txt").write_text("not an image")
    (root / "Bob_B" / ".DS_Store").write_bytes(b"\0\1")
    (root / ".hidden_person").mkdir()
    write_face(root / ".hidden_person" / "x_0001.jpg", 97)
    (root / "README.txt").write_text("a stray file at the top level")
    return root
