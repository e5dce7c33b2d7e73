"""Tests of feedgpu.data: LFW's long tail of counts, fake names, painted faces, JPEG files."""

from __future__ import annotations

import random
import re
from collections import Counter
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

from feedgpu.data import faces, lfw_stats

pytestmark = pytest.mark.unit

# The real LFW (Huang et al. 2007; scikit-learn's fetch_lfw_people) in numbers.
LFW_IMAGES, LFW_PEOPLE, LFW_PEOPLE_2PLUS = 13233, 5749, 1680
LFW_TOP_SEVEN = [530, 236, 144, 121, 109, 77, 71]
NAME_PATTERN = re.compile(r"^[A-Z][A-Za-z-]*(_[A-Z][A-Za-z-]*)+$")


def face_vector(img: Image.Image) -> np.ndarray:
    """The middle of the frame (where the face is), shrunk to 10 x 15 pixels, as floats."""
    return np.asarray(img.crop((75, 50, 175, 200)).resize((10, 15), Image.BOX), dtype=np.float64)


# --------------------------------------------------------------------------- counts


@pytest.fixture(scope="module")
def counts() -> list[int]:
    return lfw_stats.lfw_image_counts()


def test_counts_match_lfw_totals(counts: list[int]) -> None:
    """5,749 people, 13,233 images, 1,680 people with two or more, nobody with none."""
    assert len(counts) == LFW_PEOPLE, f"expected {LFW_PEOPLE} people, got {len(counts)}"
    assert sum(counts) == LFW_IMAGES, f"expected {LFW_IMAGES} images, got {sum(counts)}"
    n_2plus = sum(c >= 2 for c in counts)
    assert n_2plus == LFW_PEOPLE_2PLUS, (
        f"expected {LFW_PEOPLE_2PLUS} people with >= 2 images, got {n_2plus}"
    )
    assert min(counts) >= 1, f"every person needs an image, smallest count is {min(counts)}"
    assert all(isinstance(c, int) for c in counts), "counts must be plain ints"


def test_counts_top_seven_are_lfws(counts: list[int]) -> None:
    """The seven largest counts are the real LFW's."""
    top = sorted(counts, reverse=True)[:7]
    assert top == LFW_TOP_SEVEN, f"expected the top seven {LFW_TOP_SEVEN}, got {top}"


@pytest.mark.parametrize(("min_faces", "people", "images"), [(70, 7, 1288), (20, 62, 3023)])
def test_counts_min_faces_per_person_like_lfw(
    counts: list[int], min_faces: int, people: int, images: int
) -> None:
    """scikit-learn's ``min_faces_per_person`` keeps as many people and images as on LFW."""
    kept = [c for c in counts if c >= min_faces]
    assert (len(kept), sum(kept)) == (people, images), (
        f"min_faces_per_person={min_faces}: expected {people} people / {images} images, "
        f"got {len(kept)} / {sum(kept)}"
    )


def test_counts_have_a_long_tail(counts: list[int]) -> None:
    """Fewer people have k + 1 images than k, for k = 1 .. 19: a falling histogram."""
    histogram = Counter(counts)
    people_with = [histogram[k] for k in range(1, 20)]
    assert all(a >= b for a, b in pairwise(people_with)), (
        f"people with 1..19 images should not increase: {people_with}"
    )
    assert people_with[0] > 2 * people_with[1] > 0, (
        f"most people should have a single image: {people_with[:3]}"
    )


def test_counts_are_deterministic_and_spread_over_names(counts: list[int]) -> None:
    """Two calls agree; large counts are not bunched at the start of the alphabet."""
    assert lfw_stats.lfw_image_counts() == counts, "two calls gave different counts"
    assert counts != sorted(counts, reverse=True), (
        "counts should not simply follow alphabetical order"
    )
    first_half = sum(counts[: LFW_PEOPLE // 2])
    assert 0.25 < first_half / LFW_IMAGES < 0.75, (
        f"first half of the names has {first_half} of the images"
    )


# --------------------------------------------------------------------------- names


def test_names_are_unique_sorted_and_lfw_like() -> None:
    """5,749 distinct names, sorted, each like ``First_Last``."""
    names = lfw_stats.person_names()
    assert len(names) == LFW_PEOPLE, f"expected {LFW_PEOPLE} names, got {len(names)}"
    assert len(set(names)) == len(names), "names repeat"
    assert names == sorted(names), "names are not sorted"
    bad = [n for n in names if not NAME_PATTERN.match(n)]
    assert not bad, f"names not like LFW's First_Last: {bad[:5]}"


def test_names_are_deterministic_and_seeded() -> None:
    """The same seed gives the same names, another seed other names."""
    assert lfw_stats.person_names(40, seed=1) == lfw_stats.person_names(40, seed=1), (
        "same seed, different names"
    )
    assert lfw_stats.person_names(40, seed=1) != lfw_stats.person_names(40, seed=2), (
        "different seeds, same names"
    )
    assert lfw_stats.person_names(0) == [], "n=0 should give no names"
    with pytest.raises(ValueError, match="n must be"):
        lfw_stats.person_names(-1)


# --------------------------------------------------------------------------- painting


def test_paint_face_is_a_250_rgb_image() -> None:
    """A 250 x 250 RGB PIL image."""
    img = faces.paint_face(0, 0)
    assert isinstance(img, Image.Image), f"expected a PIL image, got {type(img)}"
    assert (img.size, img.mode) == ((250, 250), "RGB"), f"got size {img.size}, mode {img.mode}"


def test_paint_face_is_deterministic_and_seeded() -> None:
    """Same seeds give the same pixels; another image seed gives another photo."""
    a = np.asarray(faces.paint_face(3, 7))
    assert np.array_equal(a, np.asarray(faces.paint_face(3, 7))), "same seeds, different pixels"
    b = np.asarray(faces.paint_face(3, 8))
    assert np.abs(a.astype(int) - b).mean() > 2, "another image_seed should change the photo"


def test_paint_face_leaves_global_random_state_alone() -> None:
    """Painting neither reads nor moves the global ``random`` and ``numpy.random`` streams."""
    random.seed(5)
    np.random.seed(5)
    faces.paint_face(11, 2)
    lfw_stats.person_names(10)
    assert random.random() == random.Random(5).random(), "the global random stream moved"
    assert np.random.random() == np.random.RandomState(5).random_sample(), (
        "numpy's global stream moved"
    )


def test_paint_face_identities_look_like_themselves() -> None:
    """Photos of one person are closer to each other than to photos of other people."""
    ids, shots = range(6), range(4)
    vec = {(i, k): face_vector(faces.paint_face(i, 100 + k)) for i in ids for k in shots}
    same = np.mean(
        [np.abs(vec[i, a] - vec[i, b]).mean() for i in ids for a in shots for b in shots if a < b]
    )
    other = np.mean(
        [np.abs(vec[i, k] - vec[j, k]).mean() for k in shots for i in ids for j in ids if i < j]
    )
    assert same < 0.75 * other, (
        f"same person {same:.1f} grey levels apart, different people {other:.1f}"
    )


def test_paint_face_rejects_negative_seeds() -> None:
    """Negative seeds are refused with a ValueError that names the seed."""
    with pytest.raises(ValueError, match="identity_seed"):
        faces.paint_face(-1, 0)
    with pytest.raises(ValueError, match="image_seed"):
        faces.paint_face(0, -1)


# --------------------------------------------------------------------------- files


def test_write_person_writes_lfw_layout(tmp_path: Path) -> None:
    """``name/name_0001.jpg`` .. ``name_NNNN.jpg``: readable 250 x 250 JPEGs, 4:2:0."""
    paths = faces.write_person(tmp_path, "Ana_Del_Marvik", 4, 3)
    expected = [tmp_path / "Ana_Del_Marvik" / f"Ana_Del_Marvik_000{k}.jpg" for k in (1, 2, 3)]
    assert paths == expected, f"expected {expected}, got {paths}"
    on_disk = sorted((tmp_path / "Ana_Del_Marvik").iterdir())
    assert on_disk == expected, f"the folder holds {on_disk}"
    for path in paths:
        with Image.open(path) as img:
            assert img.format == "JPEG", f"{path.name} is {img.format}, not JPEG"
            assert (img.size, img.mode) == ((250, 250), "RGB"), (
                f"{path.name}: {img.size} {img.mode}"
            )
            assert JpegImagePlugin.get_sampling(img) == 2, f"{path.name} is not 4:2:0 subsampled"


def test_write_person_is_deterministic_and_seeded(tmp_path: Path) -> None:
    """The same arguments write the same bytes; another data-set seed other photos."""
    first = faces.write_person(tmp_path / "a", "Bo_Ek", 9, 2, seed=0)
    again = faces.write_person(tmp_path / "b", "Bo_Ek", 9, 2, seed=0)
    other = faces.write_person(tmp_path / "c", "Bo_Ek", 9, 2, seed=1)
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in again], (
        "same arguments, other bytes"
    )
    assert first[0].read_bytes() != other[0].read_bytes(), "seed=1 wrote the same photo as seed=0"
    assert first[0].read_bytes() != first[1].read_bytes(), "two photos of one person are identical"


def test_write_person_files_are_lfw_sized(tmp_path: Path) -> None:
    """The mean JPEG over 60 photos of 12 people is 9 to 20 KB, like LFW's 13 KB."""
    paths = [p for i in range(12) for p in faces.write_person(tmp_path, f"P_{i}", 100 + i, 5)]
    mean_kb = np.mean([p.stat().st_size for p in paths]) / 1024
    assert 9 <= mean_kb <= 20, f"mean file size {mean_kb:.1f} KB, expected 9 to 20 KB"


@pytest.mark.parametrize(
    ("name", "n_images"), [("Ok_Name", 0), ("Ok_Name", 10_000), ("../Up", 1), ("a/b", 1), ("", 1)]
)
def test_write_person_rejects_bad_arguments(tmp_path: Path, name: str, n_images: int) -> None:
    """Bad names and image counts raise ValueError before anything is written."""
    with pytest.raises(ValueError):
        faces.write_person(tmp_path, name, 0, n_images)
    assert not any(tmp_path.iterdir()), "nothing should be written on bad arguments"
