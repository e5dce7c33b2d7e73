"""Look at a submitted notebook before grading it: repair its test cells, flag tampering.

nbgrader already runs the instructor's version of every test cell it recognises (by the
cell's ``grade_id``), and can add back test cells that were deleted. What it cannot do is
grade a notebook where a test cell's id was changed or duplicated: it stops with an
error, and the student would get nothing. So before grading we:

* drop the nbgrader marks of cells whose id the assignment does not know, or that repeat
  an id, so nbgrader restores the instructor's cell in their place (and say so);
* note test cells that were edited, unlocked or deleted (nbgrader restores them);
* flag student code that tries to switch tests off: IPython input or AST transformers,
  builtins, redefined ``assert`` helpers, exception hooks, tracing, interrupt handlers.

Flags are for a person to read; they change no score.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

#: Code that can switch tests off or escape the grader, with what it means.
TAMPER_PATTERNS: list[tuple[str, str]] = [
    (r"input_transformers|input_splitter|InputTransformer", "changes IPython's input transformers"),
    (r"ast_transformers|NodeTransformer", "changes IPython's AST transformers"),
    (r"\bevents\s*\.\s*register|register_(?:cell_|line_)?magic", "registers IPython hooks or magics"),
    (r"set_custom_exc|showtraceback|\brun_cell\b|excepthook", "changes how errors are reported"),
    (r"__builtins__|\bimport\s+builtins|\bbuiltins\s*\.", "modifies builtins"),
    (r"\bAssertionError\s*=(?!=)", "redefines AssertionError"),
    (r"(?m)^\s*def\s+(?:assert_\w+|assert[A-Z]\w*)\s*\(|\b(?:assert_\w+|assert[A-Z]\w*)\s*=(?!=)",
     "redefines an assert helper"),
    (r"sys\s*\.\s*(?:settrace|setprofile|modules\s*\[)", "tampers with the interpreter (trace, modules)"),
    (r"SIG_IGN|signal\s*\.\s*signal\s*\(\s*signal\s*\.\s*SIGINT", "ignores interrupts"),
    (r"os\s*\.\s*_exit|os\s*\.\s*kill|os\s*\.\s*abort", "kills or exits the kernel"),
]


@dataclass
class Inspection:
    """What we found in one notebook."""

    notes: list[str] = field(default_factory=list)  # repaired problems (no effect on the score)
    flags: list[str] = field(default_factory=list)  # suspected tampering, for a person to check
    changed: bool = False  # the notebook was rewritten


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _is_test(meta: dict) -> bool:
    return bool(meta.get("grade")) and not meta.get("solution")


def scan_code(source: str) -> list[str]:
    """The tamper patterns that ``source`` matches, as sentences."""
    return [what for pattern, what in TAMPER_PATTERNS if re.search(pattern, source)]


def inspect_and_repair(submitted: Path, release: Path) -> Inspection:
    """Check ``submitted`` against the released notebook; rewrite it if it needs repair.

    Args:
        submitted: the student's notebook (a copy: it may be rewritten).
        release: the notebook the students were given.
    """
    report = Inspection()
    try:
        nb = nbformat.read(submitted, as_version=4)
    except Exception as err:  # noqa: BLE001 (any unreadable file is the student's problem)
        report.notes.append(f"{submitted.name} is not a readable notebook: {err}")
        return report
    given = nbformat.read(release, as_version=4)
    known = {_nbgrader(c).get("grade_id"): c for c in given.cells if _nbgrader(c).get("grade_id")}
    tests = {gid for gid, c in known.items() if _is_test(_nbgrader(c))}
    given_code = {c.source for c in given.cells if c.cell_type == "code"}

    seen: set[str] = set()
    for cell in nb.cells:
        meta = _nbgrader(cell)
        gid = meta.get("grade_id")
        if meta and (gid not in known or gid in seen):
            why = "repeats" if gid in seen else "has an id the assignment does not know"
            report.notes.append(f"a cell {why} ({gid!r}): graded as an ordinary cell; "
                                "the instructor's cell was restored")
            cell.metadata.pop("nbgrader", None)
            report.changed = True
            meta, gid = {}, None
        if gid:
            seen.add(gid)
        if gid in tests:
            if cell.source != known[gid].source:
                report.notes.append(f"test cell {gid} was edited: the instructor's version was run")
            if not meta.get("locked", False):
                report.notes.append(f"test cell {gid} was unlocked")
        elif cell.cell_type == "code" and cell.source not in given_code:
            for what in scan_code(cell.source):
                label = gid or "an added cell"
                report.flags.append(f"{label}: {what}")
    for gid in sorted(set(known) - seen):
        kind = "test cell" if gid in tests else "graded cell"
        report.notes.append(f"{kind} {gid} was missing: restored from the assignment")
    if report.changed:
        nbformat.write(nb, submitted)
    return report
