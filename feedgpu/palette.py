"""The course's colours: one palette for every figure, readable with the common colour-vision deficiencies.

About one man in twelve sees red and green poorly (protanopia, deuteranopia and their
milder forms). The palette is Okabe and Ito's set of colours for such readers (*Color
Universal Design*, 2008), without its bluish green, so that no figure can pair a red with
a green, plus black, white and two greys. ``tests/test_palette.py`` holds it to that: every
pair of its colours stays at least :data:`MIN_DISTANCE` apart (CIELAB, CIE76) for normal
vision and under simulated protanopia and deuteranopia, and no figure of the course
(``feedgpu/plots.py``, the code cells of ``solutions/``) sets a colour outside it.

Colour is never the only cue where two series are compared: the figures also give them
different markers, line styles or hatches.

Use the names, not the hex codes::

    from feedgpu.palette import BLUE, VERMILLION
    ax.plot(x, y, "o-", color=BLUE, label="measured")
    ax.plot(x, model, "s--", color=VERMILLION, label="model")

:func:`use_palette` makes :data:`SERIES` matplotlib's colour cycle (``feedgpu.plots`` does
so when imported), so a figure that names no colour uses the palette too.
"""

from __future__ import annotations

__all__ = ["BLUE", "ORANGE", "SKY", "VERMILLION", "PURPLE", "YELLOW", "BLACK", "GREY", "LIGHT", "WHITE",
           "PALETTE", "SERIES", "MIN_DISTANCE", "use_palette"]

BLUE = "#0072B2"
ORANGE = "#E69F00"
SKY = "#56B4E9"
VERMILLION = "#D55E00"
PURPLE = "#CC79A7"
YELLOW = "#F0E442"
BLACK = "#000000"
GREY = "#666666"
LIGHT = "#CCCCCC"
WHITE = "#FFFFFF"

#: Every colour of the course by name.
PALETTE: dict[str, str] = {"blue": BLUE, "orange": ORANGE, "sky": SKY, "vermillion": VERMILLION,
                           "purple": PURPLE, "yellow": YELLOW, "black": BLACK, "grey": GREY,
                           "light": LIGHT, "white": WHITE}
#: The colours for series, in the order a figure takes them (matplotlib's cycle).
SERIES: tuple[str, ...] = (BLUE, ORANGE, SKY, VERMILLION, PURPLE, YELLOW)
#: The colour of loading (the workers, waiting for data) and of the step, in every figure.
LOAD_COLOR = ORANGE
STEP_COLOR = BLUE
#: The least CIELAB distance (CIE76) between any two colours of the palette, for normal
#: vision and under simulated protanopia and deuteranopia (2.3 is a just-noticeable difference).
MIN_DISTANCE = 15.0


def use_palette() -> None:
    """Make :data:`SERIES` matplotlib's colour cycle for every figure made from now on."""
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams["axes.prop_cycle"] = cycler(color=list(SERIES))
