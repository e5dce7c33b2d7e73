"""The real LFW's numbers, for the synthetic stand-in: people, names, images per person.

    person_names()          5,749 sorted fake names, "First_Last"
    lfw_image_counts()      images per person, in the same order, LFW's long tail

The totals (13,233 images, 5,749 people, 1,680 with two or more) and the head of the
long tail are the real data set's; the names are made from a seed.
"""

from __future__ import annotations

import random

import numpy as np

__all__ = [
    "LFW_N_IMAGES",
    "LFW_N_PEOPLE",
    "LFW_N_PEOPLE_2PLUS",
    "lfw_image_counts",
    "person_names",
]


LFW_N_IMAGES = 13233


LFW_N_PEOPLE = 5749


LFW_N_PEOPLE_2PLUS = 1680


# The real LFW's seven people with 70 or more images (scikit-learn's min_faces_per_person=70).
_TOP_COUNTS = (530, 236, 144, 121, 109, 77, 71)


_N_20PLUS, _IMAGES_20PLUS = 62, 3023  # people with 20 or more images, and their images


_COUNT_ORDER_SEED = 1233  # fixed: which name gets which count (see lfw_image_counts)


def _power_tail(first_rank: int, n: int, top: int, low: int, total: int) -> list[int]:
    """``n`` integer counts in ``[low, top]`` summing to ``total``, falling like a power law.

    The count of the person at rank ``r`` is ``max(low, top * (r / first_rank) ** -s)``,
    with the exponent ``s`` found by bisection so that the real-valued counts sum to
    ``total``; the largest remainders are then rounded up.
    """
    ranks = np.arange(first_rank, first_rank + n, dtype=np.float64)

    def values(s: float) -> np.ndarray:
        return np.maximum(low, top * (ranks / first_rank) ** -s)

    lo_s, hi_s = 0.0, 50.0  # the sum falls as s grows
    for _ in range(100):
        mid = (lo_s + hi_s) / 2
        lo_s, hi_s = (mid, hi_s) if values(mid).sum() > total else (lo_s, mid)
    real = values(hi_s)
    counts = np.floor(real).astype(np.int64)
    short = total - int(counts.sum())
    counts[np.argsort(-(real - counts), kind="stable")[:short]] += 1
    return sorted(counts.tolist(), reverse=True)


def lfw_image_counts() -> list[int]:
    """The number of images of each person, in the order of :func:`person_names`.

    The counts follow the real LFW's long tail: 5,749 people and 13,233 images; 1,680
    people have two or more images (so 4,069 have exactly one); the seven largest counts
    are LFW's own (530, 236, 144, 121, 109, 77, 71), so ``min_faces_per_person=70`` keeps
    7 people and 1,288 images, and 20 keeps 62 people and 3,023 images, as for the real
    data set. Between those fixed points the counts fall smoothly like a power law.

    The counts are given to the names by a permutation with a fixed seed, so the large
    people are spread over the alphabet rather than bunched at its start.

    Returns:
        ``LFW_N_PEOPLE`` positive counts summing to ``LFW_N_IMAGES``.
    """
    n_mid = _N_20PLUS - len(_TOP_COUNTS)  # ranks 8..62: 20 to 69 images each
    n_small = LFW_N_PEOPLE_2PLUS - _N_20PLUS  # ranks 63..1680: 2 to 19 images each
    n_single = LFW_N_PEOPLE - LFW_N_PEOPLE_2PLUS
    mid_total = _IMAGES_20PLUS - sum(_TOP_COUNTS)
    small_total = LFW_N_IMAGES - _IMAGES_20PLUS - n_single
    by_rank = (
        list(_TOP_COUNTS)
        + _power_tail(len(_TOP_COUNTS) + 1, n_mid, top=60, low=20, total=mid_total)
        + _power_tail(_N_20PLUS + 1, n_small, top=19, low=2, total=small_total)
        + [1] * n_single
    )
    order = np.random.default_rng(_COUNT_ORDER_SEED).permutation(LFW_N_PEOPLE)
    return [by_rank[i] for i in order]


# Given names from many languages, and invented surnames built from a head and a tail
# syllable, so that no real person is named on purpose.
_GIVEN = (
    "Aaron Abel Adil Adriana Agnes Ahmed Aiko Alan Alba Aleksei Alina Amara Amir Ana Anders "
    "Andrea Anika Anton Arjun Astrid Aziz Beatriz Benedikt Bianca Bjorn Boris Bruno Camila "
    "Carlos Carmen Chen Chiara Claire Colin Dalia Daniel Dario Dmitri Elena Elif Emeka Emil "
    "Emma Enrique Erik Esther Fatima Felix Fiona Franco Gabriel Giulia Goran Grace Hamid "
    "Hana Hans Helga Henri Hiro Hugo Ibrahim Ida Igor Ines Ingrid Isaac Ivan Jamal Jana Jorge "
    "Jonas Joao Julia Kai Karim Katya Kenji Kofi Lars Laura Leila Lena Leon Lina Luca Lucia "
    "Luis Magnus Malik Marco Marta Mateo Maya Mei Milan Mira Nadia Naomi Nikos Nina Noor "
    "Olga Omar Oskar Pablo Paolo Petra Pierre Priya Rafael Rania Ravi Rosa Ruth Sami Sara "
    "Sergei Silvia Sofia Stefan Sven Tamar Tariq Teresa Tomas Ulla Valeria Victor Vera "
    "Viktor Walter Wen Yara Yusuf Zara Zoltan"
).split()


_HYPHEN_GIVEN = "Jean Anne Marie Hans Karl Ana Jose Li".split()


_SURNAME_HEADS = (
    "Al Bar Bel Ber Bran Cal Cas Cor Dal Del Dor Ed Fal Fen Gal Gar Gol Hal Har Hol Is Jan "
    "Kal Kel Kor Kov Lan Lis Lor Mal Mar Mir Mon Nav Nes Nor Ol Or Pel Pin Pra Rad Ren Ros "
    "Sal Sor Stan Tam Tor Tre Ul Val Ver Vol Wal Wen Yar Zan Zel"
).split()


_SURNAME_TAILS = (
    "ani ard as berg by ci dal ek ello enko escu eira ez field ford haus ian ic ides ier "
    "ikov in inen ino ison ka kov ley mann moto ner oglu ova os quist sen shi ski stein "
    "ston ton ura vik wick yan zadeh"
).split()


_PARTICLES = ("Van", "Van_Der", "De", "Da", "Del", "Von", "El", "Al", "Di", "Le", "Bin")


def _fake_name(rng: random.Random) -> str:
    """One invented name, ``First_Last`` or a longer LFW-like variant."""

    def surname() -> str:
        return rng.choice(_SURNAME_HEADS) + rng.choice(_SURNAME_TAILS)

    given = rng.choice(_GIVEN)
    roll = rng.random()
    if roll < 0.04:
        given = f"{rng.choice(_HYPHEN_GIVEN)}-{rng.choice(_GIVEN)}"
    elif roll < 0.12:
        given = f"{given}_{rng.choice(_GIVEN)}"  # a middle name
    elif roll < 0.16:
        given = f"{given}_{rng.choice('ABCDEFGHJKLMNPRSTW')}"  # a middle initial
    roll = rng.random()
    if roll < 0.05:
        return f"{given}_{rng.choice(_PARTICLES)}_{surname()}"
    if roll < 0.09:
        return f"{given}_{surname()}-{surname()}"
    if roll < 0.13:
        return f"{given}_{surname()}_{surname()}"
    return f"{given}_{surname()}"


def person_names(n: int = LFW_N_PEOPLE, seed: int = 0) -> list[str]:
    """``n`` unique, invented person names in LFW's style, sorted.

    Names look like LFW's folder names: parts joined by underscores, each part starting
    with a capital ASCII letter, hyphens allowed (``Ana-Sofia_Del_Marvik``). They are made
    from lists of given names and invented surname syllables, not from real people.

    Args:
        n: how many names.
        seed: the seed; the same ``(n, seed)`` always gives the same list.

    Returns:
        ``n`` distinct names in sorted (code point) order, the order a sorted directory
        listing of the tree gives.

    Raises:
        ValueError: if ``n`` is negative.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    names: set[str] = set()
    while len(names) < n:
        names.add(_fake_name(rng))
    return sorted(names)
