"""Notebook 06 (copy-on-write memory growth): wrong answers and delegations (see ``__init__.py``)."""

from wrong_answers import wrong

DELEGATIONS = {}

WRONG_ANSWERS = []
