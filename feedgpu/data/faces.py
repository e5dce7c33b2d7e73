"""Paint the offline, synthetic stand-in for LFW (Labeled Faces in the Wild).

Nothing here is downloaded: names, the number of images per person and every face are
made from seeds, with numpy and Pillow only, so the same seeds give the same bytes on
every machine. The pieces are small functions that :mod:`lfw_dataset` wires together::

    person_names()          5,749 sorted fake names (feedgpu.data.lfw_stats)
    lfw_image_counts()      images per person, LFW's long tail (feedgpu.data.lfw_stats)
    write_person(folder, name, identity_seed, n_images)
        folder/
            <name>/
                <name>_0001.jpg     250 x 250 RGB JPEG, about 13 KB
                <name>_0002.jpg
                ...

A face is drawn from two seeds: ``identity_seed`` fixes the person (face shape, skin,
hair, eyes, brows, nose, mouth, glasses, beard, wardrobe) and ``image_seed`` fixes the
photo (pose, light, colour cast, expression, clothes, a cluttered news-photo
background, film grain). Shapes are drawn at twice the size with :mod:`PIL.ImageDraw`
and halved (cheap antialiasing); the head is then lit as an ellipsoid, and exposure,
colour cast and grain are applied with Pillow's C routines. Painting, encoding and
writing one image costs about 4 to 5 ms of CPU, so the whole tree takes about half a
minute on two cores.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageChops, ImageDraw, ImageFilter

__all__ = [
    "IMAGE_SIZE",
    "JPEG_QUALITY",
    "Identity",
    "make_identity",
    "paint_identity",
    "paint_face",
    "image_seeds",
    "write_person",
]


logger = logging.getLogger(__name__)


IMAGE_SIZE = 250


JPEG_QUALITY = 83  # with the grain below: about 13 KB a file, like the real LFW


Colour = tuple[float, float, float]


_IDENTITY_TAG, _PHOTO_TAG = 0x1D, 0xF0  # keep identity and photo random streams apart


_SKIN_TONES = np.array(
    [
        (242, 208, 184),
        (226, 182, 150),
        (200, 148, 112),
        (172, 121, 86),
        (128, 86, 60),
        (86, 57, 42),
    ],
    dtype=np.float64,
)


_HAIR_COLOURS = {
    "black": (24, 21, 20),
    "dark brown": (52, 36, 27),
    "brown": (92, 62, 40),
    "light brown": (138, 104, 70),
    "blond": (196, 164, 108),
    "red": (142, 66, 36),
    "grey": (132, 130, 128),
    "white": (208, 206, 202),
}


_IRIS_COLOURS = (
    (52, 32, 22),
    (88, 55, 32),
    (104, 88, 46),
    (70, 100, 66),
    (70, 108, 152),
    (100, 112, 124),
)


_JACKETS = (
    (28, 32, 52),
    (46, 46, 50),
    (20, 20, 24),
    (92, 94, 100),
    (78, 58, 44),
    (140, 118, 92),
    (60, 70, 50),
    (128, 30, 36),
    (40, 70, 120),
)


_SHIRTS = ((236, 236, 232), (188, 204, 226), (226, 208, 210), (212, 212, 206), (240, 236, 220))


_TIES = ((150, 24, 30), (30, 50, 120), (120, 110, 40), (70, 20, 60), (20, 90, 70), (180, 170, 160))


_HAIR_STYLES = ("bald", "buzz", "short", "parted", "receding", "long", "bob", "curly")


@dataclass(frozen=True, eq=False)
class Identity:
    """Everything that stays the same across the photos of one person.

    Lengths are in the head's own frame, in units of about 1.25 output pixels (the
    photo's scale): the origin is midway between the eyes, ``x`` to the image's right,
    ``y`` down. The arrays are shared by every photo of the person: treat them as
    read-only.

    Attributes:
        seed: the ``identity_seed`` this person was made from.
        female: picks hair styles, beards and clothes.
        skin, hair, iris, brow, lip: colours (RGB floats).
        face_w: half the face's width; head_up: eye line to top of skull;
            head_low: eye line to chin; jaw: how much the jaw narrows (0 to 1).
        eye_dx, eye_w, eye_h: eye centre offset, half width, half height.
        brow_y, brow_t, brow_arch: brow height (negative), thickness, arch.
        nose_y, nose_w: nostril line and half width; mouth_y, mouth_w, lip_t: the mouth.
        ear_h: half height of an ear; age: 0 (young) to 1 (old), for lines.
        hair_style: one of ``_HAIR_STYLES``; hair_polys, back_hair: polygons (N x 2),
            strands: polylines of hair texture; curls: rows of x, y, radius, or None.
        beard: "none", "stubble", "full" or "goatee"; moustache: bool;
            glasses: the frame's colour, or None.
        jackets, shirts, tie: the wardrobe the photos choose from.
    """

    seed: int
    female: bool
    skin: Colour
    hair: Colour
    iris: Colour
    brow: Colour
    lip: Colour
    face_w: float
    head_up: float
    head_low: float
    jaw: float
    eye_dx: float
    eye_w: float
    eye_h: float
    brow_y: float
    brow_t: float
    brow_arch: float
    nose_y: float
    nose_w: float
    mouth_y: float
    mouth_w: float
    lip_t: float
    ear_h: float
    age: float
    hair_style: str
    hair_polys: tuple[np.ndarray, ...]
    back_hair: np.ndarray | None
    strands: tuple[np.ndarray, ...]
    curls: np.ndarray | None
    beard: str
    moustache: bool
    glasses: Colour | None
    jackets: tuple[Colour, ...]
    shirts: tuple[Colour, ...]
    tie: Colour | None


def _mix(a: Colour, b: Colour, t: float) -> Colour:
    return (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t)


def _scale(c: Colour, k: float) -> Colour:
    return (c[0] * k, c[1] * k, c[2] * k)


def _rgb(c: Colour, alpha: int | None = None) -> tuple[int, ...]:
    """An integer colour for ImageDraw, clipped to 0..255, with an optional alpha."""
    out = tuple(min(255, max(0, int(v + 0.5))) for v in c)
    return out if alpha is None else (*out, alpha)


@functools.lru_cache(maxsize=4096)  # a person's ears, cheeks, nostrils... recur in every photo
def _ellipse(cx: float, cy: float, rx: float, ry: float, n: int = 24) -> np.ndarray:
    """``n`` points around an ellipse, as a read-only ``n x 2`` array."""
    t = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
    pts = np.column_stack([cx + rx * np.cos(t), cy + ry * np.sin(t)])
    pts.flags.writeable = False
    return pts


def _face_outline(w: float, up: float, low: float, jaw: float, n: int = 44) -> np.ndarray:
    """The face's outline: an ellipse on top, narrowing towards the chin below."""
    t = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
    c, s = np.cos(t), np.sin(t)
    lower = s > 0
    x = w * c * np.where(lower, 1 - jaw * s**2, 1.0)
    y = np.where(lower, low * (1 - 0.08 * s**8), up) * s  # a slightly flat chin
    return np.column_stack([x, y])


def _hairline(
    w: float, up: float, depth: float, side: float, sweep: float, n: int = 15
) -> np.ndarray:
    """The lower edge of the hair, from the right temple to the left one.

    ``depth`` is how far above the eyes the hair starts in the middle (as a fraction of
    ``head_up``), ``side`` the height at the temples, ``sweep`` tilts a fringe sideways.
    """
    x = np.linspace(w * 1.02, -w * 1.02, n)
    u = np.abs(x) / w
    y = -up * depth + (side + up * depth) * np.minimum(u, 1.0) ** 3 + sweep * x / w
    return np.column_stack([x, y])


def _zigzags(strands: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Join strands, sorted left to right, into two polylines (every other strand each).

    Each strand is walked alternately up and down, so a polyline only steps between
    neighbours: two draw calls instead of dozens.
    """
    strands = sorted(strands, key=lambda st: float(st[0, 0]))
    return tuple(
        np.vstack([st if k % 2 == 0 else st[::-1] for k, st in enumerate(strands[i::2])])
        for i in (0, 1)
        if strands[i::2]
    )


def _hair_geometry(
    style: str, w: float, up: float, rng: np.random.Generator
) -> tuple[tuple[np.ndarray, ...], np.ndarray | None, tuple[np.ndarray, ...], np.ndarray | None]:
    """The hair's shapes in the head frame, for a face of half width ``w``.

    Returns:
        ``(polygons over the skull, polygon behind the head or None, strand polylines,
        curls as rows of x, y, radius or None)``.
    """
    if style == "bald":  # a horseshoe of short hair above the ears, the crown bare
        right = np.array([[w * 1.04, -22], [w * 1.06, -2], [w * 0.9, 6], [w * 0.95, -20]])
        return (right, right * (-1, 1)), None, (), None
    volume = {
        "buzz": 1.02,
        "short": 1.07,
        "parted": 1.09,
        "receding": 1.05,
        "long": 1.10,
        "bob": 1.12,
        "curly": 1.16,
    }[style] + rng.uniform(-0.02, 0.03)
    depth = {
        "buzz": 0.62,
        "short": 0.55,
        "parted": 0.5,
        "receding": 0.8,
        "long": 0.45,
        "bob": 0.38,
        "curly": 0.55,
    }[style] + rng.uniform(-0.06, 0.06)
    sweep = rng.choice([-1, 1]) * rng.uniform(4, 10) if style in ("parted", "long", "bob") else 0.0
    t = np.linspace(np.pi, 2 * np.pi, 25)
    ragged = (
        1
        + 0.025 * np.sin(t * rng.integers(5, 9) + rng.uniform(0, 6))
        + rng.normal(0, 0.008, t.size)
    )
    crown = np.column_stack([w * volume * ragged * np.cos(t), up * volume * ragged * np.sin(t) - 2])
    groups: list[list[np.ndarray]] = [[]]  # strand groups; each group is joined separately
    if style in ("long", "bob"):
        drop = 46.0 if style == "long" else 26.0
        right_side = np.array(
            [[w * volume + 2, drop * 0.5], [w * 1.02, drop], [w * 0.88, drop - 6], [w * 0.86, 0.0]]
        )
        hairline = _hairline(w * 0.86, up, depth, -6.0, sweep, n=13)
        poly = np.vstack([crown, right_side, hairline, right_side[::-1] * (-1, 1)])
        back = np.array(
            [
                [-w * volume, -10],
                [-w * volume - 6, drop + 20],
                [-w * 0.5, drop + 28],
                [w * 0.5, drop + 28],
                [w * volume + 6, drop + 20],
                [w * volume, -10],
            ]
        )
        back[:, 1] += rng.uniform(-4, 12)
        for side in (-1, 1):  # strands falling down the sides
            x = side * w * rng.uniform(0.88, volume - 0.02, (8, 1)) + rng.normal(0, 1.0, (8, 4))
            ends = drop * rng.uniform(0.6, 1.0, (8, 1))
            ys = -up * 0.3 + (ends + up * 0.3) * np.linspace(0.0, 1.0, 4)
            groups.append(list(np.stack([x, ys], axis=-1)))
    else:
        side_y = -4.0 if style != "receding" else -8.0
        side = np.array([[w * volume, side_y], [w * 1.01, side_y + 4]])
        hairline = _hairline(w * 1.01, up, depth, side_y, sweep)
        poly = np.vstack([crown, side, hairline, side[::-1] * (-1, 1)])
        back = None
    n = 36 if style != "buzz" else 16  # strands from the hairline towards the crown
    x0 = rng.uniform(-0.95, 0.95, n) * w
    y0 = np.interp(-x0, -hairline[:, 0], hairline[:, 1]) - rng.uniform(0, 6, n)
    x1 = x0 * rng.uniform(0.3, 0.8, n) + sweep * 1.5
    y1 = (
        -up
        * volume
        * np.sqrt(np.clip(1 - (x1 / (w * volume)) ** 2, 0, None))
        * rng.uniform(0.75, 0.95, n)
    )
    along = np.linspace(0.0, 1.0, 4)
    xs = x0[:, None] + (x1 - x0)[:, None] * along + rng.normal(0, 1.2, (n, 4))
    ys = y0[:, None] + (y1 - y0)[:, None] * along
    groups[0].extend(np.stack([xs, ys], axis=-1))
    curls = None
    if style == "curly":
        a = rng.uniform(np.pi * 0.9, np.pi * 2.1, 60)
        r = rng.uniform(0.85, 1.12, 60)
        curls = np.column_stack(
            [w * volume * r * np.cos(a), up * volume * r * np.sin(a), rng.uniform(4, 8, 60)]
        )
    strands = tuple(line for group in groups for line in _zigzags(group))
    return (poly,), back, strands, curls


@functools.lru_cache(maxsize=64)
def make_identity(identity_seed: int) -> Identity:
    """The looks of one person, drawn from ``identity_seed``.

    Args:
        identity_seed: a non-negative integer; the same seed is the same person.

    Returns:
        An :class:`Identity`, to paint with :func:`paint_identity`.

    Raises:
        ValueError: if ``identity_seed`` is negative.
    """
    if identity_seed < 0:
        raise ValueError(f"identity_seed must be >= 0, got {identity_seed}")
    rng = np.random.default_rng([_IDENTITY_TAG, identity_seed])
    female = bool(rng.random() < 0.3)
    age = float(rng.beta(2.2, 1.6))

    tone = float(np.clip(rng.beta(1.2, 2.4) * (len(_SKIN_TONES) - 1), 0, len(_SKIN_TONES) - 1.001))
    i = int(tone)
    skin_arr = (
        _SKIN_TONES[i] + (_SKIN_TONES[i + 1] - _SKIN_TONES[i]) * (tone - i) + rng.normal(0, 5, 3)
    )
    skin: Colour = tuple(float(v) for v in skin_arr)  # type: ignore[assignment]

    hair_names = list(_HAIR_COLOURS)
    if tone > 2.6:
        weights = [0.75, 0.2, 0.03, 0, 0, 0, 0.02, 0]
    else:
        weights = [0.22, 0.25, 0.2, 0.1, 0.1 if not female else 0.18, 0.04, 0.06, 0.03]
    weights = np.array(weights) + (age > 0.8) * np.array([0, 0, 0, 0, 0, 0, 0.35, 0.12])
    hair_name = hair_names[rng.choice(len(hair_names), p=weights / weights.sum())]
    hair: Colour = tuple(
        float(v) for v in np.array(_HAIR_COLOURS[hair_name]) * rng.uniform(0.88, 1.12)
    )  # type: ignore[assignment]

    if female:
        style = str(
            rng.choice(["long", "bob", "curly", "parted", "short"], p=[0.5, 0.22, 0.1, 0.12, 0.06])
        )
    else:
        style_p = [0.05, 0.12, 0.33, 0.24, 0.14, 0.03, 0.0, 0.09]
        if age > 0.7:
            style_p = [0.22, 0.12, 0.2, 0.16, 0.26, 0.0, 0.0, 0.04]
        style = str(rng.choice(_HAIR_STYLES, p=style_p))

    face_w = rng.uniform(38, 46) - 2.5 * female
    head_up = rng.uniform(58, 66)
    head_low = rng.uniform(54, 62) - 2 * female
    jaw = rng.uniform(0.28, 0.48) + 0.06 * female
    eye_w = rng.uniform(7.5, 9.5)
    iris_i = (
        rng.choice(len(_IRIS_COLOURS), p=[0.3, 0.25, 0.12, 0.1, 0.15, 0.08]) if tone < 2.6 else 0
    )
    brow_dark = 0.55 if hair_name not in ("grey", "white") else 0.9
    hair_polys, back_hair, strands, curls = _hair_geometry(style, face_w, head_up, rng)

    beard, moustache = "none", False
    if not female:
        beard = str(rng.choice(["none", "stubble", "full", "goatee"], p=[0.62, 0.16, 0.14, 0.08]))
        moustache = bool(beard in ("full", "goatee") or rng.random() < 0.12)
    if beard == "full":  # a little texture along the jaw
        t = np.sort(rng.uniform(0.12 * np.pi, 0.88 * np.pi, 30))
        r = rng.uniform(0.82, 0.98, t.size)
        x = face_w * r * np.cos(t) * (1 - jaw * np.sin(t) ** 2)
        y = head_low * r * np.sin(t)
        beard_strands = [
            np.array([[x[k], y[k] - 2.5], [x[k] * 1.04, y[k] + 2.5]]) for k in range(t.size)
        ]
        strands = strands + _zigzags(beard_strands)
    glasses = None
    if rng.random() < 0.18 + 0.2 * age:
        glasses = _rgb(
            ((24, 22, 20), (120, 110, 96), (80, 50, 34), (150, 150, 158))[rng.integers(4)]
        )
    jackets = tuple(_JACKETS[j] for j in rng.choice(len(_JACKETS), 3, replace=False))
    shirts = tuple(_SHIRTS[j] for j in rng.choice(len(_SHIRTS), 2, replace=False))
    tie = None if female or rng.random() < 0.25 else _TIES[rng.integers(len(_TIES))]
    lip_target = (170, 40, 60) if female and rng.random() < 0.6 else (150, 70, 70)
    return Identity(
        seed=identity_seed,
        female=female,
        skin=skin,
        hair=hair,
        iris=_IRIS_COLOURS[iris_i],
        brow=_mix(_scale(hair, brow_dark), skin, 0.25 if female else 0.1),
        lip=_mix(_scale(skin, 0.85), lip_target, rng.uniform(0.3, 0.5)),
        face_w=face_w,
        head_up=head_up,
        head_low=head_low,
        jaw=jaw,
        eye_dx=face_w * rng.uniform(0.40, 0.46),
        eye_w=eye_w,
        eye_h=eye_w * rng.uniform(0.36, 0.48),
        brow_y=-rng.uniform(9, 13),
        brow_t=rng.uniform(1.6, 3.2) - 0.5 * female,
        brow_arch=rng.uniform(1.0, 4.0),
        nose_y=head_low * rng.uniform(0.42, 0.5),
        nose_w=rng.uniform(6.5, 9.5),
        mouth_y=head_low * rng.uniform(0.64, 0.7),
        mouth_w=rng.uniform(11, 15),
        lip_t=rng.uniform(2.2, 3.8) + 0.6 * female,
        ear_h=rng.uniform(10, 13),
        age=age,
        hair_style=style,
        hair_polys=hair_polys,
        back_hair=back_hair,
        strands=strands,
        curls=curls,
        beard=beard,
        moustache=moustache,
        glasses=glasses,
        jackets=jackets,
        shirts=shirts,
        tie=tie,
    )


_SS = 2  # supersampling: shapes are drawn at twice the size, then halved


_HEAD_SCALE = 1.25  # head frame -> image: a face about 100 pixels wide, as in LFW


_GRAIN_TILE = 512


_GRAIN_SIGMAS = (3.5, 4.5, 5.5)  # grey levels; with JPEG_QUALITY they set the file size


@dataclass(frozen=True)
class _Photo:
    """What changes from one photo of a person to the next."""

    centre: tuple[float, float]  # where the eye line's middle lands in the image
    scale: float  # image pixels per head-frame unit
    angle: float  # head roll, radians
    yaw: float  # features shift sideways by yaw * depth (head turn)
    pitch: float  # and up or down by pitch * depth (nod)
    light: tuple[float, float, float]  # unit vector towards the light
    ambient: float  # brightness of the side facing away from the light
    smile: float  # 0 (neutral) to 1
    open_mouth: bool
    openness: float  # of the eyes
    gaze: tuple[float, float]
    brow_raise: float
    jacket: Colour
    shirt: Colour
    shoulders: float  # half width of the shoulders, in face widths
    gain: tuple[float, float, float]  # exposure and colour cast
    grain_sigma: float
    grain_at: tuple[int, int]


def _photo(who: Identity, rng: np.random.Generator) -> _Photo:
    """Draw the pose, light, expression and clothes of one photo."""
    light_x = math.sin(rng.uniform(-1.2, 1.2)) * 0.8
    norm = math.sqrt(light_x**2 + 0.35**2 + 1)
    smile = float(np.clip(rng.normal(0.35, 0.35), 0, 1))
    exposure = rng.uniform(0.9, 1.2)
    cast = 1 + rng.normal(0, 0.04, 3)
    return _Photo(
        centre=(125 + rng.normal(0, 4), 108 + rng.normal(0, 4)),
        scale=_HEAD_SCALE * rng.uniform(0.92, 1.08),
        angle=math.radians(rng.normal(0, 4.5)),
        yaw=float(rng.normal(0, 4)),
        pitch=float(rng.normal(0, 2)),
        light=(light_x / norm, -0.35 / norm, 1 / norm),
        ambient=rng.uniform(0.5, 0.7),
        smile=smile,
        open_mouth=bool(smile > 0.55 and rng.random() < 0.6),
        openness=float(np.clip(rng.normal(1.0, 0.12), 0.6, 1.15)) * (1 - 0.15 * smile),
        gaze=(float(rng.normal(0, 0.8)), float(rng.normal(0, 0.4))),
        brow_raise=float(rng.normal(0, 1.0)),
        jacket=who.jackets[rng.integers(len(who.jackets))],
        shirt=who.shirts[rng.integers(len(who.shirts))],
        shoulders=rng.uniform(2.3, 2.6),
        gain=tuple(float(v) for v in exposure * cast),  # type: ignore[arg-type]
        grain_sigma=_GRAIN_SIGMAS[rng.integers(len(_GRAIN_SIGMAS))],
        grain_at=tuple(int(v) for v in rng.integers(0, _GRAIN_TILE - IMAGE_SIZE, 2)),  # type: ignore[arg-type]
    )


class _Painter:
    """Draws head-frame shapes on the supersampled canvas, placed by the photo's pose.

    A colour with an ``alpha`` is blended; without one it is drawn opaque, which is about
    four times faster, so large shapes are opaque and only small ones are blended.
    """

    def __init__(self, canvas: Image.Image, photo: _Photo) -> None:
        c = math.cos(photo.angle) * photo.scale * _SS
        s = math.sin(photo.angle) * photo.scale * _SS
        self._a = np.array([[c, s], [-s, c]])  # row vectors: p @ a
        self._b = np.array(photo.centre) * _SS
        self._turn = np.array([photo.yaw, photo.pitch])
        self.size = photo.scale * _SS  # canvas pixels per head-frame unit
        self._solid = ImageDraw.Draw(canvas)
        self._blend = ImageDraw.Draw(canvas, "RGBA")

    def place(self, pts: np.ndarray, depth: float = 0.0) -> list[float]:
        """Head-frame points (N x 2) -> flat canvas coordinates; ``depth`` for the turn."""
        if depth:
            pts = pts + self._turn * depth
        return (pts @ self._a + self._b).ravel().tolist()

    def _draw(
        self, colour: Colour, alpha: int | None
    ) -> tuple[ImageDraw.ImageDraw, tuple[int, ...]]:
        return (self._solid if alpha is None else self._blend), _rgb(colour, alpha)

    def polygon(
        self, pts: np.ndarray, colour: Colour, depth: float = 0.0, alpha: int | None = None
    ) -> None:
        draw, ink = self._draw(colour, alpha)
        draw.polygon(self.place(pts, depth), fill=ink)

    def outline(self, pts: np.ndarray, colour: Colour, width: float, depth: float = 0.0) -> None:
        """A closed outline, ``width`` head-frame units wide."""
        self._solid.polygon(
            self.place(pts, depth), outline=_rgb(colour), width=max(1, round(width * self.size))
        )

    def line(
        self,
        pts: np.ndarray,
        colour: Colour,
        width: float,
        depth: float = 0.0,
        alpha: int | None = None,
    ) -> None:
        """A polyline, ``width`` head-frame units wide."""
        draw, ink = self._draw(colour, alpha)
        draw.line(self.place(pts, depth), fill=ink, width=max(1, round(width * self.size)))

    def discs(self, centres: np.ndarray, radii: np.ndarray, colours: list[Colour]) -> None:
        """Opaque discs, cycling through ``colours``."""
        xy = self.place(centres)
        inks = [_rgb(c) for c in colours]
        for k, r in enumerate((radii * self.size).tolist()):
            x, y = xy[2 * k], xy[2 * k + 1]
            self._solid.ellipse([x - r, y - r, x + r, y + r], fill=inks[k % len(inks)])


def _muted(rng: np.random.Generator, low: float = 25, high: float = 225) -> tuple[int, int, int]:
    """A greyish colour, like walls, suits and crowds in news photos."""
    r, g, b, sat = rng.random(4).tolist()
    r, g, b = (low + (high - low) * v for v in (r, g, b))
    mean = (r + g + b) / 3
    sat = 0.15 + 0.45 * sat
    return (
        int(mean + (r - mean) * sat),
        int(mean + (g - mean) * sat),
        int(mean + (b - mean) * sat),
    )


def _background(rng: np.random.Generator) -> Image.Image:
    """A cluttered, out-of-focus news-photo background, at canvas size.

    Drawn at half the output size and blurred (out of focus), then enlarged with nearest
    neighbours: the blur hides the blocks, and the grain added later hides the rest.
    """
    n = IMAGE_SIZE // 2
    base = np.array([[_muted(rng) for _ in range(3)] for _ in range(3)], dtype=np.uint8)
    img = Image.fromarray(base, "RGB").resize((n, n), Image.BILINEAR)
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(4, 12))):
        kind, x, y, a, b = rng.random(5).tolist()
        x, y = x * (n + 20) - 20, y * (n + 20) - 20
        colour = _muted(rng)
        if kind < 0.35:  # a panel, a sign or a window
            draw.rectangle([x, y, x + 8 + 52 * a, y + 8 + 52 * b], fill=colour)
        elif kind < 0.45:  # a flag or a striped banner
            h, second = 4 + 5 * a, _muted(rng, 60, 240)
            for k in range(2 + int(3 * b)):
                draw.rectangle(
                    [x, y + k * h, x + 40, y + (k + 1) * h], fill=colour if k % 2 == 0 else second
                )
        elif kind < 0.75:  # another person in the crowd
            r = 7 + 7 * a
            tone = _rgb(_SKIN_TONES[int(b * len(_SKIN_TONES))] * (0.6 + 0.4 * a))
            draw.ellipse([x - 2.2 * r, y + 1.5 * r, x + 2.2 * r, y + 6 * r], fill=colour)
            draw.ellipse([x - r, y - 1.2 * r, x + r, y + 1.2 * r], fill=tone)
            draw.chord([x - r, y - 1.3 * r, x + r, y + 0.6 * r], 180, 360, fill=_muted(rng, 10, 90))
        else:  # a lamp, a microphone, text on a board
            for k in range(2 + int(4 * a)):
                draw.line([x, y + 4 * k, x + 8 + 32 * b, y + 4 * k], fill=colour, width=2)
    img = img.filter(ImageFilter.BoxBlur(1.0 + 2.0 * rng.random()))
    return img.resize((IMAGE_SIZE * _SS, IMAGE_SIZE * _SS), Image.NEAREST)


def _body(p: _Painter, who: Identity, photo: _Photo) -> None:
    """Neck, shirt, jacket and tie (or a plain top)."""
    neck_w, skin = who.face_w * 0.52, who.skin
    neck = np.array([[-neck_w, 10], [neck_w, 10], [neck_w * 1.05, 100], [-neck_w * 1.05, 100]])
    p.polygon(neck, _scale(skin, 0.8))
    p.polygon(
        _ellipse(0.0, who.head_low * 0.8, neck_w * 1.1, 16, 14), _scale(skin, 0.62)
    )  # chin's shadow
    sh, top = who.face_w * photo.shoulders, who.head_low + 22
    shoulders = np.array(
        [
            [-neck_w - 4, top],
            [-sh * 0.7, top + 8],
            [-sh, top + 22],
            [-sh * 1.15, 200],
            [sh * 1.15, 200],
            [sh, top + 22],
            [sh * 0.7, top + 8],
            [neck_w + 4, top],
        ]
    )
    if who.female:
        p.polygon(shoulders, photo.jacket)
        p.polygon(_ellipse(0.0, top - 2, neck_w * 1.5, 14, 16)[:9], _scale(skin, 0.82))  # neckline
        return
    p.polygon(shoulders, photo.shirt)
    collar = np.array(
        [
            [-neck_w - 3, top - 4],
            [0, top + 12],
            [neck_w + 3, top - 4],
            [neck_w + 6, top + 6],
            [0, top + 22],
            [-neck_w - 6, top + 6],
        ]
    )
    p.polygon(collar, _scale(photo.shirt, 0.88))
    if who.tie is not None:
        p.polygon(np.array([[-4, top + 10], [4, top + 10], [7, 200], [-7, 200]]), who.tie)
    v_neck = np.array(
        [[neck_w + 4, top], [neck_w * 0.3, top + 55], [-neck_w * 0.3, top + 55], [-neck_w - 4, top]]
    )
    p.polygon(np.vstack([shoulders, v_neck]), photo.jacket)
    lapel = np.array([[neck_w + 6, top + 4], [neck_w * 1.6, top + 30], [neck_w * 0.3, top + 55]])
    p.line(lapel, _scale(photo.jacket, 0.6), width=1.2)
    p.line(lapel * (-1, 1), _scale(photo.jacket, 0.6), width=1.2)


def _head(p: _Painter, who: Identity) -> None:
    """Ears, the face's skin and a little colour on the cheeks."""
    w = who.face_w
    for side in (-1, 1):
        p.polygon(
            _ellipse(side * (w - 1), 8.0, 6.5, who.ear_h, 14), _scale(who.skin, 0.9), depth=-0.4
        )
        p.polygon(
            _ellipse(side * (w + 1), 8.0, 3.0, who.ear_h * 0.6, 10),
            _scale(who.skin, 0.72),
            depth=-0.4,
        )
    p.polygon(_face_outline(w, who.head_up, who.head_low, who.jaw), who.skin)
    for side in (-1, 1):
        cheek = _ellipse(side * w * 0.55, who.nose_y - 2, w * 0.22, 7.0, 12)
        p.polygon(cheek, (200, 80, 70), depth=0.4, alpha=22 + 14 * who.female)


def _eye(p: _Painter, who: Identity, side: int, photo: _Photo) -> None:
    """One eye: socket, lid crease, white, iris and pupil clipped to the lids, lashes, glint."""
    cx, w, h = side * who.eye_dx, who.eye_w, who.eye_h * photo.openness
    u = np.linspace(0.0, 1.0, 13)
    xs = cx - w + 2 * w * u
    tilt = side * 0.6 * (u - 0.5)  # outer corners a little higher
    upper = -h * np.sin(np.pi * u) ** 0.8 - tilt
    lower = h * 0.75 * np.sin(np.pi * u) - tilt
    p.polygon(
        _ellipse(cx, -1.5, w * 1.35, who.eye_h * 1.9 + 1, 16), _scale(who.skin, 0.9), 0.5, alpha=70
    )
    p.line(
        np.column_stack([xs, upper * 1.2 - 3.2])[2:-1], _scale(who.skin, 0.72), 0.8, 0.5, alpha=150
    )
    almond = np.column_stack([np.r_[xs, xs[::-1]], np.r_[upper, lower[::-1]]])
    p.polygon(almond, _mix((236, 232, 226), who.skin, 0.2), 0.5)
    r = who.eye_w * 0.5
    ix, iy = cx + photo.gaze[0], photo.gaze[1] - 0.3

    def clipped(rad: float, n: int) -> np.ndarray:  # a disc, cut by the lids
        disc = _ellipse(0.0, 0.0, rad, rad, n) + (ix, iy)
        disc[:, 1] = np.clip(
            disc[:, 1], np.interp(disc[:, 0], xs, upper), np.interp(disc[:, 0], xs, lower)
        )
        return disc

    p.polygon(clipped(r, 16), who.iris, 0.5)
    p.polygon(clipped(r * 0.45, 10), (12, 10, 10), 0.5)
    p.line(np.column_stack([xs, upper]), _scale(who.brow, 0.35), 1.2, 0.5)
    p.line(np.column_stack([xs, lower])[3:], _scale(who.skin, 0.55), 0.4, 0.5, alpha=110)
    glint = _ellipse(0.0, 0.0, 0.9, 0.9, 6) + (ix - photo.light[0] * r * 0.4, iy - r * 0.35)
    p.polygon(glint, (250, 250, 250), 0.5)


def _brow(p: _Painter, who: Identity, side: int, raise_: float) -> None:
    u = np.linspace(0.0, 1.0, 9)
    xs = side * (who.eye_dx - who.eye_w * 1.1 + u * who.eye_w * 2.35)
    mid = who.brow_y - raise_ - who.brow_arch * np.sin(np.pi * np.clip(u * 0.8, 0, 1)) + u * 1.5
    t = who.brow_t * (1.2 - 0.6 * u)  # thick inside, thin outside
    p.polygon(
        np.column_stack([np.r_[xs, xs[::-1]], np.r_[mid - t, (mid + t)[::-1]]]), who.brow, 0.5
    )


def _nose(p: _Painter, who: Identity, light_x: float) -> None:
    """A shadow along the bridge on the far side from the light, wings, nostrils, a lit tip."""
    y, nw, skin = who.nose_y, who.nose_w, who.skin
    side = -1 if light_x > 0 else 1
    bridge = np.array([[side * 3.5, 2], [side * 4.5, y * 0.6], [side * nw * 0.7, y - 3]])
    p.line(bridge, _scale(skin, 0.7), 1.6, 1.0, alpha=120)
    p.polygon(_ellipse(0.0, y + 2.5, nw * 0.9, 3.0, 12), _scale(skin, 0.8), 0.9, alpha=110)
    for side in (-1, 1):
        p.polygon(
            _ellipse(side * nw * 0.75, y - 1, nw * 0.38, 4.0, 10),
            _scale(skin, 0.82),
            0.9,
            alpha=150,
        )
        p.polygon(
            _ellipse(side * nw * 0.4, y + 0.5, 2.2, 1.2, 8), _scale(skin, 0.4), 1.0, alpha=200
        )
    tip = _ellipse(0.0, y - 4, nw * 0.4, 3.0, 10) - (light_x * 1.5, 0)
    p.polygon(tip, _mix(skin, (255, 245, 235), 0.35), 1.0, alpha=140)


def _mouth(p: _Painter, who: Identity, smile: float, open_: bool) -> None:
    """Lips (corners up with ``smile``), teeth when open, and the chin's shadow."""
    y, mw, lt = who.mouth_y, who.mouth_w * (1 + 0.15 * smile), who.lip_t
    u = np.linspace(-1.0, 1.0, 11)
    x = u * mw
    line = y - smile * 3.5 * u**2 + smile * 1.2
    gap = (2.5 + 2.5 * smile) * (1 - u**2) if open_ else np.zeros_like(u)
    bow = y - lt * (1 - u**2) ** 0.6 + 0.8 * np.exp(-((u * 6) ** 2))  # the dip of the upper lip
    lower_edge = line + gap + lt * 1.35 * (1 - u**2) ** 0.7
    both = np.r_[x, x[::-1]]
    if open_:
        p.polygon(np.column_stack([both, np.r_[line, (line + gap)[::-1]]]), (50, 24, 24), 0.6)
        p.polygon(
            np.column_stack([both * 0.8, np.r_[line, (line + gap * 0.55)[::-1]]]),
            (228, 222, 210),
            0.6,
        )
    p.polygon(np.column_stack([both, np.r_[bow, line[::-1]]]), _scale(who.lip, 0.88), 0.6)
    p.polygon(np.column_stack([both, np.r_[line + gap, lower_edge[::-1]]]), who.lip, 0.6)
    p.line(np.column_stack([x, line]), _scale(who.lip, 0.45), 0.8, 0.6, alpha=200)
    shine = _ellipse(0.0, 0.0, mw * 0.35, lt * 0.25, 8) + (0, line[5] + gap[5] + lt * 0.6)
    p.polygon(shine, _mix(who.lip, (255, 255, 255), 0.3), 0.6, alpha=90)
    chin = _ellipse(0.0, 0.0, mw * 0.6, 2.2, 10) + (0, lower_edge[5] + 5)
    p.polygon(chin, _scale(who.skin, 0.8), 0.5, alpha=80)


def _lines(p: _Painter, who: Identity, smile: float) -> None:
    """Smile lines and, with age, forehead lines."""
    alpha = min(int(40 + 90 * max(smile, who.age - 0.3)), 150)
    for side in (-1, 1):
        fold = np.array(
            [
                [side * (who.nose_w + 2), who.nose_y - 2],
                [side * (who.mouth_w + 3), who.mouth_y - 2],
                [side * (who.mouth_w + 3.5), who.mouth_y + 5],
            ]
        )
        p.line(fold, _scale(who.skin, 0.68), 0.8, 0.6, alpha=alpha)
    if who.age > 0.6:
        for k in range(2 + int(who.age > 0.85)):
            y = who.brow_y - 9 - 5 * k
            p.line(
                np.array([[-16, y + 1], [0, y - 1], [16, y + 1]]),
                _scale(who.skin, 0.78),
                0.8,
                0.3,
                alpha=90,
            )


def _beard(p: _Painter, who: Identity) -> None:
    dark = _scale(who.hair, 0.9)
    if who.beard in ("stubble", "full"):
        t = np.linspace(0.08 * np.pi, 0.92 * np.pi, 17)
        s = np.sin(t)
        jaw = np.column_stack(
            [who.face_w * 1.02 * np.cos(t) * (1 - who.jaw * s**2), who.head_low * 1.03 * s]
        )
        top = np.array(
            [
                [-who.mouth_w - 4, who.mouth_y - 7],
                [0, who.mouth_y - 9],
                [who.mouth_w + 4, who.mouth_y - 7],
            ]
        )
        p.polygon(np.vstack([jaw, top]), dark, 0.3, alpha=80 if who.beard == "stubble" else None)
    elif who.beard == "goatee":
        p.polygon(_ellipse(0.0, who.mouth_y + 12, who.mouth_w * 0.7, 9.0, 14), dark, 0.5)


def _moustache(p: _Painter, who: Identity) -> None:
    """A moustache along the upper lip: thick in the middle, thin and drooping at the ends."""
    if who.moustache:
        u = np.linspace(-1, 1, 13)
        x = u * (who.mouth_w + 2.5)
        bottom = who.mouth_y - who.lip_t * (1 - u**2) ** 0.6 + 0.5 + 2 * u**2
        top = bottom - 1.5 - 3.5 * np.sqrt(1 - u**2)
        p.polygon(
            np.column_stack([np.r_[x, x[::-1]], np.r_[top, bottom[::-1]]]),
            _scale(who.hair, 0.9),
            0.7,
            alpha=225,
        )


def _hair(p: _Painter, who: Identity) -> None:
    thin = who.hair_style in ("buzz", "bald")  # skin shows through
    for poly in who.hair_polys:
        p.polygon(poly, who.hair, alpha=110 if thin else None)
    if who.curls is not None:
        shades = [_scale(who.hair, k) for k in (0.7, 0.9, 1.15)]
        p.discs(who.curls[:, :2], who.curls[:, 2], shades)
    colours = (_scale(who.hair, 0.6), _mix(who.hair, (255, 240, 220), 0.22))
    for k, zigzag in enumerate(who.strands):
        p.line(zigzag, colours[k % 2], 0.8, alpha=150)


def _glasses(p: _Painter, who: Identity) -> None:
    if who.glasses is None:
        return
    rx, ry = who.eye_w * 1.45, who.eye_h * 1.6 + 3
    for side in (-1, 1):
        cx = side * who.eye_dx
        t = np.linspace(0, 2 * np.pi, 20, endpoint=False)
        c, s = np.cos(t), np.sin(t)
        frame = np.column_stack(
            [cx + rx * np.sign(c) * np.abs(c) ** 0.5, 1.5 + ry * np.sign(s) * np.abs(s) ** 0.5]
        )
        p.outline(frame, who.glasses, 1.2, 0.55)
        p.line(
            np.array([[side * (who.eye_dx + rx), -1], [side * who.face_w, -3]]),
            who.glasses,
            1.2,
            0.3,
        )
    bridge = np.array([[-who.eye_dx + rx, 0], [0, -1.5], [who.eye_dx - rx, 0]])
    p.line(bridge, who.glasses, 1.2, 0.6)


@functools.lru_cache(maxsize=len(_GRAIN_SIGMAS))
def _grain_tile(sigma: float) -> Image.Image:
    """Film grain around grey 128, made once with a fixed seed; each photo crops it.

    The same grain in R, G and B: luminance noise, like a camera's, which survives JPEG's
    halved colour resolution.
    """
    noise = np.random.default_rng(20240).normal(128.0, sigma, (_GRAIN_TILE, _GRAIN_TILE))
    return Image.fromarray(np.clip(noise, 0, 255).astype(np.uint8), "L").convert("RGB")


def _head_light(who: Identity, photo: _Photo, step: int = 5) -> tuple[tuple[int, int], Image.Image]:
    """Light the head as an ellipsoid (Lambert's law): a brightness factor as an image.

    The factor (255 = 1) fades to 1 at the head's edge. It is computed every ``step``
    pixels and interpolated, since light varies slowly.

    Returns:
        The top-left corner of the factor image in the photo (may be negative), and the
        factor as an RGB image, ready for :func:`PIL.ImageChops.multiply`.
    """
    scale, (cx, cy), light = photo.scale, photo.centre, photo.light
    cols = int(who.face_w * scale * 2.5 / step) + 1
    rows = int((who.head_up + who.head_low) * scale * 1.25 / step) + 1
    x0 = int(cx) - cols * step // 2
    y0 = int(cy - (who.head_up - who.head_low) * scale / 2) - rows * step // 2
    dx = (np.arange(cols, dtype=np.float32) + 0.5) * step + (x0 - cx)
    dy = (np.arange(rows, dtype=np.float32) + 0.5) * step + (y0 - cy)
    c, s = math.cos(photo.angle) / scale, math.sin(photo.angle) / scale
    u = (c * dx[None, :] + s * dy[:, None]) / who.face_w  # image -> head frame
    v = -s * dx[None, :] + c * dy[:, None]
    below = v > 0
    v = v / np.where(below, who.head_low, who.head_up)
    u = np.where(below, u / (1 - who.jaw * np.minimum(v, 1) ** 2), u)
    r2 = u * u + v * v
    z = np.sqrt(np.clip(1 - r2, 0, 1))
    lambert = np.clip((u * light[0] + v * light[1] + z * light[2]) / light[2], 0, 1)
    weight = np.clip((1.15 - np.sqrt(r2)) / 0.15, 0, 1)
    factor = 1 - (1 - photo.ambient) * (1 - lambert) * weight
    coarse = Image.fromarray((factor * 255 + 0.5).astype(np.uint8), "L")
    return (x0, y0), coarse.resize((cols * step, rows * step), Image.BILINEAR).convert("RGB")


def _multiply_at(img: Image.Image, corner: tuple[int, int], factor: Image.Image) -> None:
    """Multiply ``img`` by ``factor`` (255 = 1) placed at ``corner``, in place."""
    x0, y0 = corner
    box = (
        max(x0, 0),
        max(y0, 0),
        min(x0 + factor.width, img.width),
        min(y0 + factor.height, img.height),
    )
    if box[0] < box[2] and box[1] < box[3]:
        inside = factor.crop((box[0] - x0, box[1] - y0, box[2] - x0, box[3] - y0))
        img.paste(ImageChops.multiply(img.crop(box), inside), box[:2])


def paint_identity(who: Identity, image_seed: int) -> Image.Image:
    """One photo of ``who``: :func:`paint_face` with the identity already made.

    The order of work: background; the person drawn at twice the size, back to front;
    halved; the head lit; exposure and colour cast; grain.

    Args:
        who: the person, from :func:`make_identity`.
        image_seed: a non-negative integer that fixes pose, light, expression, clothes,
            background and grain.

    Returns:
        A 250 x 250 RGB image.

    Raises:
        ValueError: if ``image_seed`` is negative.
    """
    if image_seed < 0:
        raise ValueError(f"image_seed must be >= 0, got {image_seed}")
    rng = np.random.default_rng([_PHOTO_TAG, who.seed, image_seed])
    photo = _photo(who, rng)
    canvas = _background(rng)
    p = _Painter(canvas, photo)
    if who.back_hair is not None:
        p.polygon(who.back_hair, _scale(who.hair, 0.8))
    _body(p, who, photo)
    _head(p, who)
    _beard(p, who)
    _lines(p, who, photo.smile)
    _nose(p, who, photo.light[0])
    _mouth(p, who, photo.smile, photo.open_mouth)
    _moustache(p, who)
    for side in (-1, 1):
        _eye(p, who, side, photo)
        _brow(p, who, side, photo.brow_raise)
    _hair(p, who)
    _glasses(p, who)

    img = canvas.reduce(_SS)
    _multiply_at(img, *_head_light(who, photo))
    lut = np.clip(np.arange(256)[None, :] * np.array(photo.gain)[:, None], 0, 255).astype(np.uint8)
    img = img.point(lut.ravel().tolist())
    (ox, oy), grain = photo.grain_at, _grain_tile(photo.grain_sigma)
    return ImageChops.add(img, grain.crop((ox, oy, ox + IMAGE_SIZE, oy + IMAGE_SIZE)), 1.0, -128)


def paint_face(identity_seed: int, image_seed: int) -> Image.Image:
    """A 250 x 250 RGB photo of a synthetic face.

    The same ``identity_seed`` is the same person (face shape, skin tone, hair colour and
    style, eye colour, brows, nose, mouth, glasses, beard); ``image_seed`` varies the
    photo (pose, light and colour cast, expression, clothes, background, grain). The head
    sits in the middle third of the frame, shoulders below, like LFW's news photos.

    Args:
        identity_seed: a non-negative integer that fixes the person.
        image_seed: a non-negative integer that fixes the photo.

    Returns:
        A new 250 x 250 RGB :class:`PIL.Image.Image`; the same seeds give the same pixels.

    Raises:
        ValueError: if a seed is negative.
    """
    return paint_identity(make_identity(identity_seed), image_seed)


def image_seeds(seed: int, identity_seed: int, n_images: int) -> list[int]:
    """The ``image_seed`` of each of a person's ``n_images`` photos.

    Args:
        seed: the data set's seed.
        identity_seed: the person's seed.
        n_images: how many photos.

    Returns:
        ``n_images`` non-negative integers, from ``numpy.random.SeedSequence((seed,
        identity_seed, k))`` for ``k = 1 .. n_images``.
    """
    return [
        int(np.random.SeedSequence((seed, identity_seed, k)).generate_state(1)[0])
        for k in range(1, n_images + 1)
    ]


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def write_person(
    folder: Path, name: str, identity_seed: int, n_images: int, seed: int = 0
) -> list[Path]:
    """Write one person's photos as LFW does: ``folder/name/name_0001.jpg`` and on.

    ::

        folder/
            <name>/
                <name>_0001.jpg
                ...
                <name>_<n_images, 4 digits>.jpg

    The person is made once from ``identity_seed``; photo ``k`` is painted from
    ``image_seeds(seed, identity_seed, n_images)[k - 1]`` and saved as a baseline JPEG of
    quality ``JPEG_QUALITY`` with 4:2:0 chroma subsampling.

    Args:
        folder: the tree's root; ``folder/name`` is created if missing.
        name: the person's name, a single folder name (letters, digits, ``_ . -``).
        identity_seed: the person's seed (non-negative).
        n_images: how many photos, 1 to 9,999.
        seed: the data set's seed; it varies the photos, not the person.

    Returns:
        The paths written, in order.

    Raises:
        ValueError: if ``name`` is not a plain folder name, ``n_images`` is out of range
            or a seed is negative.
    """
    if not _NAME.match(name):
        raise ValueError(
            f"name must be a plain folder name (letters, digits, '_', '.', '-'), got {name!r}"
        )
    if not 1 <= n_images <= 9999:
        raise ValueError(
            f"n_images must be between 1 and 9999 (4-digit file numbers), got {n_images}"
        )
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    who = make_identity(identity_seed)
    person = Path(folder) / name
    person.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, image_seed in enumerate(image_seeds(seed, identity_seed, n_images), start=1):
        path = person / f"{name}_{k:04d}.jpg"
        paint_identity(who, image_seed).save(
            path, "JPEG", quality=JPEG_QUALITY, subsampling="4:2:0"
        )
        paths.append(path)
    logger.debug("wrote %d images of %s to %s", n_images, name, person)
    return paths
