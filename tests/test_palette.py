"""The course's palette: every pair of colours stays apart for red-green colour-blind readers,
and no figure of the course sets a colour outside it."""

from __future__ import annotations

import ast
import colorsys
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from feedgpu.palette import MIN_DISTANCE, PALETTE, SERIES

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]

# Machado, Oliveira and Fernandes (2009), "A physiologically-based model for simulation of
# color vision deficiency", severity 1.0: linear RGB in, linear RGB out.
PROTANOPIA = np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                       [-0.003882, -0.048116, 1.051998]])
DEUTERANOPIA = np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                         [-0.011820, 0.042940, 0.968881]])
VISIONS = {"normal vision": np.eye(3), "protanopia": PROTANOPIA, "deuteranopia": DEUTERANOPIA}


def linear_rgb(hex_colour: str) -> np.ndarray:
    srgb = np.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def cielab(linear: np.ndarray) -> np.ndarray:
    """CIELAB of a linear sRGB colour (D65)."""
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    t = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def seen(hex_colour: str, vision: np.ndarray) -> np.ndarray:
    return cielab(np.clip(vision @ linear_rgb(hex_colour), 0, 1))


def test_the_simulation_confuses_red_and_green():
    """The control: tab10's red and green, far apart for normal vision, come close without
    one kind of cone (so the test below can fail)."""
    red, green = "#d62728", "#2ca02c"
    assert np.linalg.norm(seen(red, np.eye(3)) - seen(green, np.eye(3))) > 60
    assert np.linalg.norm(seen(red, DEUTERANOPIA) - seen(green, DEUTERANOPIA)) < MIN_DISTANCE


@pytest.mark.parametrize("vision", VISIONS)
def test_every_pair_of_colours_stays_apart(vision):
    matrix = VISIONS[vision]
    distances = {(a, b): float(np.linalg.norm(seen(PALETTE[a], matrix) - seen(PALETTE[b], matrix)))
                 for a, b in itertools.combinations(PALETTE, 2)}
    close = {pair: round(d, 1) for pair, d in distances.items() if d < MIN_DISTANCE}
    assert not close, f"under {vision}, closer than {MIN_DISTANCE} CIELAB units: {close}"


def test_the_palette_has_no_green_to_pair_with_red():
    greens = [name for name, colour in PALETTE.items()
              if (lambda h, s, v: 75 / 360 <= h <= 165 / 360 and s > 0.3 and v > 0.2)(
                  *colorsys.rgb_to_hsv(*(int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))))]
    assert greens == []
    assert set(SERIES) <= set(PALETTE.values())


COLOUR_KEYWORDS = {"color", "colors", "facecolor", "facecolors", "edgecolor", "edgecolors", "markerfacecolor",
                   "markeredgecolor", "ecolor", "c"}
ALLOWED = {c.lower() for c in PALETTE.values()} | {"black", "white", "none"}


def colours_outside(source: str) -> list[str]:
    """Every colour literal in ``source`` that is not the palette's: a string given to a colour
    keyword, and anywhere matplotlib's tab10 names (``"tab:red"``, ``"C2"``, ``f"C{i}"``)."""
    def tab10(value: str) -> bool:
        return value.startswith("tab:") or (len(value) == 2 and value[0] == "C" and value[1].isdigit())

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg in COLOUR_KEYWORDS:
            value = node.value.value if isinstance(node.value, ast.Constant) else None
            if isinstance(value, str) and value.lower() not in ALLOWED and not tab10(value):
                found.append(value)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and tab10(node.value):
            found.append(node.value)
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) \
                and node.values[0].value == "C":
            found.append("f'C{...}'")
    return found


def test_the_scan_finds_colours_outside_the_palette():
    planted = ('ax.plot(x, y, color="tab:red")\nax.bar(x, y, color="green")\nax.plot(x, y, "o", color=f"C{i}")\n'
               'colors = ["C2"]\nax.plot(x, y, color=BLUE, markerfacecolor="none")\n')
    assert sorted(colours_outside(planted)) == sorted(["tab:red", "green", "f'C{...}'", "C2"])


def test_the_course_s_plots_keep_to_the_palette():
    assert colours_outside((ROOT / "feedgpu" / "plots.py").read_text()) == []


def test_the_notebooks_plots_keep_to_the_palette():
    outside = {}
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        for i, cell in enumerate(cells):
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
            found = colours_outside(source)
            if found:
                outside[f"{path.parent.name} cell {i}"] = found
    assert not outside, f"colours outside feedgpu.palette: {outside}"


def test_figures_that_name_no_colour_take_the_palette():
    import matplotlib as mpl

    import feedgpu.plots  # noqa: F401 - importing the course's plots sets the cycle

    assert [c.lower() for c in mpl.rcParams["axes.prop_cycle"].by_key()["color"]] == [c.lower() for c in SERIES]
