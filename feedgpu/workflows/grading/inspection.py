"""Look at a submitted notebook before grading it: repair its test cells, flag tampering.

nbgrader already runs the instructor's version of every test cell it recognises (by the
cell's ``grade_id``), and can add back test cells that were deleted. What it cannot do is
grade a notebook where a test cell's id was changed or duplicated: it stops with an
error, and the student would get nothing. So before grading we:

* drop the nbgrader marks of cells whose id the assignment does not know, or that repeat
  an id, so nbgrader restores the instructor's cell in their place (and say so);
* put back every cell of the release that the student may not change (test cells,
  set-up and instructions: locked cells with an id) and every graded cell that is missing
  or out of place, where the release has it, and say so. nbgrader runs the instructor's
  version of each such cell, but adds back only deleted *graded* cells, next to a cell it
  may not find (its ``add_missing_cells`` stops with a ``KeyError`` when the cell before
  a deleted test is a locked helper cell), and never moves a cell: a test moved above its
  answer would fail. So a student who deletes, edits or reorders test cells is graded as
  if the tests were where the release has them;
* note test cells that were edited or unlocked (nbgrader runs the instructor's version);
* flag student code that tries to switch tests off or escape the grader: IPython input
  or AST transformers, builtins, redefined ``assert`` helpers, exception hooks, tracing,
  interrupt handlers, exiting the kernel, rebinding the course's test helpers.
  :func:`scan_code` reads each changed cell's syntax tree, so ``from os import _exit as e``
  or ``getattr(os, "_exit")`` are found as surely as ``os._exit``, and a comment that only
  mentions a name is not;
* flag an answer that uses the course's own code for the job
  (:data:`feedgpu.workflows.grading.testing.REFERENCES`): :func:`find_delegations` reads the answer cells
  with the imports and aliases of the whole notebook, so ``steady_state_time_per_batch``
  imported by the notebook's imports cell, ``lfw_dataset.find_classes``, or an alias made
  in another cell are all found. (The hidden tests already give such an answer no
  points: the references are unavailable while they run.)

Flags are for a person to read; they change no score.
"""

from __future__ import annotations

import ast
import copy
import logging
import re
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from feedgpu.workflows.grading.testing import REFERENCES

logger = logging.getLogger(__name__)

# What each finding means: one sentence per kind, in the order they are reported.
INPUT_TRANSFORMERS = "changes IPython's input transformers"
AST_TRANSFORMERS = "changes IPython's AST transformers"
HOOKS = "registers IPython hooks or magics"
ERROR_REPORTING = "changes how errors are reported"
BUILTINS = "modifies builtins"
ASSERTION_ERROR = "redefines AssertionError"
ASSERT_HELPER = "redefines an assert helper"
INTERPRETER = "tampers with the interpreter (trace, modules)"
INTERRUPTS = "ignores interrupts"
EXIT = "kills or exits the kernel"
TEST_HELPERS = "changes the course's test helpers (feedgpu.workflows.grading.testing)"
DELEGATES = "uses the course's reference {}: an answer must be the student's own"

#: The test helpers of :mod:`feedgpu.workflows.grading.testing` whose names the notebooks bind; an answer
#: that rebinds one could switch off what a test cell does with it.
_HELPER_NAMES = {"standing_in", "without_references"}
#: The roots of the course's own modules (a reference may be reached through any of them).
_COURSE_ROOTS = {"feedgpu", "lfw_dataset"}
#: The test helpers' module, and its old path, which students' ``work/`` copies still import.
_TESTING_MODULES = ("feedgpu.workflows.grading.testing", "feedgpu.testing")

#: Code that can switch tests off or escape the grader, with what it means. These regexes
#: are the fallback for a cell that does not parse as Python even after its magics are
#: removed; :func:`scan_code` reads every other cell's syntax tree (see :func:`_scan_tree`).
TAMPER_PATTERNS: list[tuple[str, str]] = [
    (r"input_transformers|input_splitter|InputTransformer", INPUT_TRANSFORMERS),
    (r"ast_transformers|NodeTransformer", AST_TRANSFORMERS),
    (r"\bevents\s*\.\s*register|register_(?:cell_|line_)?magic", HOOKS),
    (r"set_custom_exc|showtraceback|\brun_cell\b|excepthook", ERROR_REPORTING),
    (r"__builtins__|\bimport\s+builtins|\bbuiltins\s*\.", BUILTINS),
    (r"\bAssertionError\s*=(?!=)", ASSERTION_ERROR),
    (r"(?m)^\s*def\s+(?:assert_\w+|assert[A-Z]\w*)\s*\(|\b(?:assert_\w+|assert[A-Z]\w*)\s*=(?!=)",
     ASSERT_HELPER),
    (r"sys\s*\.\s*(?:settrace|setprofile|modules\s*\[)", INTERPRETER),
    (r"SIG_IGN|signal\s*\.\s*signal\s*\(\s*signal\s*\.\s*SIGINT", INTERRUPTS),
    (r"os\s*\.\s*_exit|os\s*\.\s*kill|os\s*\.\s*abort", EXIT),
    (r"\b(?:standing_in|without_references)\s*=(?!=)|feedgpu\s*\.\s*(?:workflows\s*\.\s*grading\s*\.\s*)?testing\s*\.\s*\w+\s*=(?!=)|"
     r"\bREFERENCES\s*(?:\[[^\]]*\]\s*=(?!=)|\.\s*(?:pop|popitem|clear|update|setdefault)\b)", TEST_HELPERS),
]

_ORDER = [what for _, what in TAMPER_PATTERNS]

#: Identifiers (variables, attributes, imported names, string keys of getattr and
#: subscripts) that only code reaching into IPython's or Python's machinery uses.
_NAME_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"input_transformers\w*|input_splitter|input_transformer_manager|\w*InputTransformer\w*"),
     INPUT_TRANSFORMERS),
    (re.compile(r"ast_transformers|NodeTransformer"), AST_TRANSFORMERS),
    (re.compile(r"register_(?:line_|cell_|line_cell_)?magic\w*"), HOOKS),
    (re.compile(r"set_custom_exc|showtraceback|run_cell|\w*excepthook\w*"), ERROR_REPORTING),
    (re.compile(r"__builtins__"), BUILTINS),
]

#: Fully qualified names (imports and aliases resolved) and what using them means.
_QUALIFIED: dict[str, str] = {
    **{f"{module}.{name}": EXIT for module in ("os", "posix", "nt")
       for name in ("_exit", "kill", "killpg", "abort")},
    **{f"{module}.{name}": INTERPRETER for module in ("sys", "threading")
       for name in ("settrace", "setprofile")},
    "signal.SIG_IGN": INTERRUPTS,
}

#: Methods that change a dict in place (for ``sys.modules``).
_MUTATORS = {"pop", "popitem", "update", "clear", "setdefault", "__setitem__", "__delitem__"}

_ASSERT_HELPER_NAME = re.compile(r"assert_\w+|assert[A-Z]\w*")
_MAGIC_LINE = re.compile(r"^(\s*)[%!]")


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


def _without_magics(source: str) -> str:
    """``source`` with IPython's magic and shell lines (``%...``, ``%%...``, ``!...``)
    replaced by ``pass`` at the same indentation, so the rest parses as Python."""
    return "\n".join(_MAGIC_LINE.sub(r"\1pass  # ", line) for line in source.splitlines())


class _Resolver:
    """Fully qualified names of expressions, through imports and simple aliases.

    ``import os as o``, ``from os import _exit as e`` and ``k = os`` make ``o._exit``,
    ``e`` and ``k._exit`` all resolve to ``"os._exit"``; so do ``getattr(os, "_exit")``,
    ``os.__dict__["_exit"]``, ``vars(os)["_exit"]`` and ``__import__("os")._exit``.
    Names never imported resolve to themselves (the import may be in another cell); the
    result of another call is written ``"f()"``, so ``get_ipython().events`` resolves to
    ``"get_ipython().events"``.
    """

    def __init__(self, tree: ast.AST) -> None:
        self.aliases: dict[str, str] = {}
        self.star_modules: list[str] = []  # ``from os import *`` brings ``_exit`` in unnamed
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:  # ``import a.b`` binds ``a``
                        top = alias.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name == "*":
                        self.star_modules.append(node.module)
                    else:
                        self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in ast.walk(tree):  # then ``k = os``, ``e = os._exit``
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target = node.targets[0].id
                value = self.qualified(node.value)
                if value is not None and value != target:
                    self.aliases[target] = value

    def qualified(self, node: ast.AST) -> str | None:
        """The dotted name ``node`` stands for, or None when it cannot be told."""
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            starred = [f"{module}.{node.id}" for module in self.star_modules]
            return next((name for name in starred if name in _QUALIFIED), node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualified(node.value)
            return None if base is None else f"{base}.{node.attr}"
        if isinstance(node, ast.Call) and node.args:
            func = self.qualified(node.func)
            first = _string(node.args[0])
            if func == "getattr" and len(node.args) >= 2 and _string(node.args[1]) is not None:
                base = self.qualified(node.args[0])
                return None if base is None else f"{base}.{_string(node.args[1])}"
            if func in ("__import__", "importlib.import_module") and first is not None:
                return first
            if func == "vars":
                return self.qualified(node.args[0])
            return None if func is None else f"{func}()"
        if isinstance(node, ast.Call):
            func = self.qualified(node.func)
            return None if func is None else f"{func}()"  # ``get_ipython().events`` can still be told
        if isinstance(node, ast.Subscript) and _string(node.slice) is not None:
            # ``os.__dict__["_exit"]`` and ``vars(os)["_exit"]`` (``vars`` resolves to its argument)
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr == "__dict__":
                value = value.value
            elif not (isinstance(value, ast.Call) and self.qualified(value.func) == "vars"):
                return None
            base = self.qualified(value)
            return None if base is None else f"{base}.{_string(node.slice)}"
        return None


def _string(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _identifiers(node: ast.AST) -> Iterator[str]:
    """Names that ``node`` itself spells: a variable, an attribute, an imported name, a
    definition, or a string used as an attribute or item name."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, ast.alias):
        yield from node.name.split(".")
        if node.asname:
            yield node.asname
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name
    elif isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(node.func, ast.Name) \
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr"):
        name = _string(node.args[1])
        if name is not None:
            yield name
    elif isinstance(node, ast.Subscript) and _string(node.slice) is not None:
        yield _string(node.slice)  # type: ignore[misc]


def _bound_names(node: ast.AST) -> Iterator[str]:
    """Names that ``node`` binds or rebinds (assignments, definitions, ``import ... as``,
    ``setattr``), including attributes and string keys assigned to."""
    targets: list[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
        targets = [node.target]
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        targets = [node.optional_vars]
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name
    elif isinstance(node, ast.alias) and node.asname and node.asname != node.name.split(".")[-1]:
        yield node.asname  # ``from x import y as assert_close`` rebinds; a plain import does not
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
            and len(node.args) >= 2 and _string(node.args[1]) is not None:
        yield _string(node.args[1])  # type: ignore[misc]
    while targets:
        target = targets.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
        elif isinstance(target, ast.Starred):
            targets.append(target.value)
        elif isinstance(target, ast.Name):
            yield target.id
        elif isinstance(target, ast.Attribute):
            yield target.attr
        elif isinstance(target, ast.Subscript) and _string(target.slice) is not None:
            yield _string(target.slice)  # type: ignore[misc]


def _names_used(node: ast.AST, resolve: _Resolver) -> list[str]:
    """The fully qualified names ``node`` imports or uses (imports and aliases resolved)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [f"{node.module}.{alias.name}" for alias in node.names]
    if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
        return [resolve.qualified(node) or ""]
    return []


def _scan_tree(tree: ast.AST) -> set[str]:
    """What the code in ``tree`` does that can switch tests off (see :func:`scan_code`)."""
    resolve = _Resolver(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        for name in _identifiers(node):
            found.update(what for pattern, what in _NAME_RULES if pattern.fullmatch(name))
        for name in _bound_names(node):
            if name == "AssertionError":
                found.add(ASSERTION_ERROR)
            elif _ASSERT_HELPER_NAME.fullmatch(name):
                found.add(ASSERT_HELPER)
            elif name in _HELPER_NAMES:
                found.add(TEST_HELPERS)
        if _changes_test_helpers(node, resolve):
            found.add(TEST_HELPERS)
        used = _names_used(node, resolve)
        for qualified in used:
            if qualified in _QUALIFIED:
                found.add(_QUALIFIED[qualified])
            if qualified == "builtins" or qualified.startswith("builtins."):
                found.add(BUILTINS)
        if isinstance(node, ast.Attribute) and node.attr == "register" \
                and _last_name(node.value, resolve) == "events":
            found.add(HOOKS)
        if isinstance(node, ast.Subscript) and resolve.qualified(node.value) == "sys.modules":
            found.add(INTERPRETER)
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in _MUTATORS and \
                    resolve.qualified(func.value) == "sys.modules":
                found.add(INTERPRETER)
            name = resolve.qualified(func)
            if name == "signal.signal" and node.args and _is_sigint(node.args[0], resolve):
                found.add(INTERRUPTS)
            if name in ("exec", "eval", "compile") and node.args and _string(node.args[0]) is not None:
                found.update(scan_code(_string(node.args[0])))  # type: ignore[arg-type]
    return found


def _in_testing(node: ast.AST, resolve: _Resolver) -> bool:
    qualified = resolve.qualified(node) or ""
    return any(qualified == module or qualified.startswith(module + ".") for module in _TESTING_MODULES)


def _changes_test_helpers(node: ast.AST, resolve: _Resolver) -> bool:
    """Whether ``node`` assigns to, deletes from or changes in place :mod:`feedgpu.workflows.grading.testing`
    or one of its objects (``testing.without_references = ...``, ``REFERENCES.clear()``)."""
    targets: list[ast.AST] = []
    if isinstance(node, (ast.Assign, ast.Delete)):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    for target in targets:
        if isinstance(target, (ast.Attribute, ast.Subscript)) and _in_testing(target.value, resolve):
            return True
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
            return _in_testing(node.args[0], resolve)
        if isinstance(func, ast.Attribute) and func.attr in _MUTATORS:
            return _in_testing(func.value, resolve)
    return False


def _last_name(node: ast.AST, resolve: _Resolver) -> str | None:
    """The last part of what ``node`` names: ``"events"`` for ``get_ipython().events``,
    for ``ip.events`` and for ``ev`` after ``ev = ip.events``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    qualified = resolve.qualified(node)
    return None if qualified is None else qualified.split(".")[-1]


def _is_sigint(node: ast.AST, resolve: _Resolver) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == 2  # SIGINT's number on every platform Python runs on
    return _last_name(node, resolve) == "SIGINT"


#: ``ast.parse`` is not safe in two threads at once on CPython 3.11: its AST depth counter
#: is shared, and a race raises ``SystemError: AST constructor recursion depth mismatch``
#: (python/cpython#106905, fixed in 3.12). ``feedgpu-grade --jobs N`` inspects in N threads.
_PARSING = threading.Lock()


def _parse(source: str) -> ast.Module | None:
    try:
        with _PARSING:
            return ast.parse(_without_magics(source))
    except (SyntaxError, ValueError):
        return None


def _matches(qualified: str, module: str, attr: str) -> bool:
    """Whether the dotted name ``qualified`` is the reference ``module:attr``: written out,
    through an instance (``LinearCost(...).time_s``), through another module of the
    course that imported it (``feedgpu.workflows.grading.testing.steady_state_time_per_batch``), or through
    another module of the reference's own package that re-exports it
    (``torch.utils.data.DistributedSampler`` for ``torch.utils.data.distributed``)."""
    if qualified.endswith("()"):  # what a call returned, not the reference: its call is found where it is
        return False
    name = qualified.replace("()", "")
    if name == f"{module}.{attr}":
        return True
    root, own = name[: -len(attr) - 1].split(".")[0], module.split(".")[0]
    return name.endswith(f".{attr}") and (root == own or {root, own} <= _COURSE_ROOTS)


def find_delegations(source: str, references: Sequence[str], context: Sequence[str] = (),
                     answers: Collection[str] = ()) -> list[str]:
    """The course's references (``"module:attribute"``) that the code ``source`` uses.

    A use is an import, a call, a subclass or any other mention of the reference's object,
    under its own name or an alias, through ``getattr``, ``__import__`` or ``importlib``,
    or from another of the course's modules that re-exports it. The imports and aliases of
    the ``context`` cells (the rest of the notebook: its imports cell above all) count too,
    so a bare ``steady_state_time_per_batch`` that the imports cell brought in is found,
    and so is a name that an added cell bound to a reference. The names of ``answers``
    (functions the notebook asks for) are not followed: an answer that calls another
    answer is not flagged for how that one was written (the cell that bound it to a
    reference is).

    Returns:
        The references used, each once, written ``module.attribute``, in the order given.
    """
    tree = _parse(source)
    if tree is None:
        return []
    body = [stmt for cell in (*context, source) for stmt in (getattr(_parse(cell), "body", None) or [])
            if not set(_top_level_names(stmt)) & set(answers)]
    resolve = _Resolver(ast.Module(body=body, type_ignores=[]))
    used: set[str] = set()
    for node in ast.walk(tree):
        names = _names_used(node, resolve)
        if isinstance(node, ast.Name) and names == [node.id]:  # ``from module import *``
            names += [f"{module}.{node.id}" for module in resolve.star_modules]
        used.update(names)
    pairs = [ref.partition(":")[::2] for ref in references]
    return [f"{module}.{attr}" for module, attr in pairs
            if any(_matches(name, module, attr) for name in used if name)]


def _top_level_names(stmt: ast.stmt) -> Iterator[str]:
    """The names a top-level statement binds by import or plain assignment."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        for alias in stmt.names:
            yield alias.asname or alias.name.split(".")[0]
    elif isinstance(stmt, ast.Assign):
        yield from (target.id for target in stmt.targets if isinstance(target, ast.Name))


def _defined_names(source: str) -> set[str]:
    """The functions and classes a cell defines at its top level (an answer's names)."""
    tree = _parse(source)
    return {node.name for node in getattr(tree, "body", [])
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _binds_any(source: str, names: set[str]) -> bool:
    tree = _parse(source)
    return tree is not None and any(name in names for node in tree.body for stmt in ast.walk(node)
                                    for name in _bound_names(stmt))


def scan_code(source: str) -> list[str]:
    """What ``source`` does that can switch tests off or escape the grader, as sentences.

    The code is read as a Python syntax tree (after IPython's ``%`` and ``!`` lines are
    set aside), so a finding does not depend on spelling: ``from os import _exit as e``,
    ``getattr(os, "_exit")`` and ``import os as o; o._exit(1)`` are all found, and a
    comment or a string that only mentions a name is not. A cell that still does not
    parse is searched with the regexes of :data:`TAMPER_PATTERNS` instead.

    Args:
        source: the code of one cell.

    Returns:
        The sentences of :data:`TAMPER_PATTERNS` that apply, each once, in that order.
    """
    try:
        with _PARSING:
            tree = ast.parse(_without_magics(source))
    except (SyntaxError, ValueError) as err:  # ValueError: a null byte in the source
        logger.debug("cell does not parse (%s): searching it with regexes", err)
        return [what for pattern, what in TAMPER_PATTERNS if re.search(pattern, source)]
    found = _scan_tree(tree)
    return [what for what in _ORDER if what in found]


def _must_stay(cell) -> bool:
    """A cell of the release the student may not change, or a graded one: each must be in
    the submission, where the release has it (tests, set-up, instructions, written answers)."""
    meta = _nbgrader(cell)
    return bool(meta.get("grade_id")) and (bool(meta.get("grade")) or
                                           (bool(meta.get("locked")) and not meta.get("solution")))


def _common_subsequence(a: Sequence[str], b: Sequence[str]) -> set[str]:
    """The items of a longest common subsequence of ``a`` and ``b`` (items are unique in each)."""
    lengths = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) - 1, -1, -1):
        for j in range(len(b) - 1, -1, -1):
            lengths[i][j] = (lengths[i + 1][j + 1] + 1 if a[i] == b[j]
                             else max(lengths[i + 1][j], lengths[i][j + 1]))
    common, i, j = set(), 0, 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            common.add(a[i])
            i, j = i + 1, j + 1
        elif lengths[i + 1][j] >= lengths[i][j + 1]:
            i += 1
        else:
            j += 1
    return common


def _restore_layout(nb: nbformat.NotebookNode, given: nbformat.NotebookNode) -> tuple[list[str], list[str]]:
    """Put back, in ``nb``, each cell of the release ``given`` that must stay (:func:`_must_stay`)
    and is missing or out of place; returns the ids restored and the ids moved.

    The cells with an id that are in the same order in both notebooks (a longest common
    subsequence of their ids) stay where they are, and so does every ordinary cell and
    every answer. Each missing or out-of-place cell goes back after the cell that precedes
    it in the release: the nearest ordinary cell of the release that the student left
    unchanged (a check that prints, a demonstration) or else the nearest cell with an id,
    never past the next cell with an id that stayed. So a notebook whose test cells were
    deleted or moved gets them back exactly where the release has them, around cells the
    student did not touch. A missing cell is the release's copy; a moved one keeps the
    student's (nbgrader runs the instructor's source either way).
    """
    release_ids = [_nbgrader(c)["grade_id"] for c in given.cells if _nbgrader(c).get("grade_id")]
    must = {_nbgrader(c)["grade_id"]: c for c in given.cells if _must_stay(c)}
    mine = {_nbgrader(c).get("grade_id"): c for c in nb.cells if _nbgrader(c).get("grade_id")}
    stay = _common_subsequence([gid for gid in mine if gid in set(release_ids)], release_ids)
    restored = [gid for gid in release_ids if gid in must and gid not in mine]
    moved = [gid for gid in mine if gid in must and gid not in stay]
    if not restored and not moved:
        return [], []
    nb.cells = [c for c in nb.cells if _nbgrader(c).get("grade_id") not in moved]
    placed = set(stay)
    for index, cell in enumerate(given.cells):
        gid = _nbgrader(cell).get("grade_id")
        if gid not in restored and gid not in moved:
            continue
        ids = [_nbgrader(c).get("grade_id") for c in nb.cells]
        before = next((i for i in range(index - 1, -1, -1) if _nbgrader(given.cells[i]).get("grade_id") in placed),
                      None)
        after = next((_nbgrader(c)["grade_id"] for c in given.cells[index + 1:]
                      if _nbgrader(c).get("grade_id") in stay), None)
        low = 0 if before is None else ids.index(_nbgrader(given.cells[before])["grade_id"]) + 1
        high = len(nb.cells) if after is None else ids.index(after)
        at = low
        for ordinary in reversed(given.cells[(-1 if before is None else before) + 1:index]):  # the closest untouched one
            same = [i for i in range(low, high) if not ids[i] and nb.cells[i].cell_type == ordinary.cell_type
                    and nb.cells[i].source == ordinary.source]
            if same:
                at = same[-1] + 1
                break
        nb.cells.insert(at, mine[gid] if gid in moved else copy.deepcopy(must[gid]))
        placed.add(gid)
    return restored, [gid for gid in release_ids if gid in moved]


def inspect_and_repair(submitted: Path, release: Path,
                       references: Mapping[str, Sequence[str]] = REFERENCES) -> Inspection:
    """Check ``submitted`` against the released notebook; rewrite it if it needs repair.

    Every code cell that is neither a test cell nor unchanged from the release is scanned
    with :func:`scan_code` (a test cell is not: nbgrader runs the instructor's version).
    Every answer cell, and every changed cell that rebinds an answer's name, is searched
    with :func:`find_delegations` for the course's references of the notebook's answers
    (``references``: answer grade id -> ``"module:attribute"``, by default
    :data:`feedgpu.workflows.grading.testing.REFERENCES`).

    Args:
        submitted: the student's notebook (a copy: it may be rewritten).
        release: the notebook the students were given.

    Returns:
        An :class:`Inspection`: ``notes`` for what was repaired or restored (a cell whose
        id is unknown or repeated, a test cell edited, unlocked or missing), ``flags``
        (``"<grade id or 'an added cell'>: <what the code does>"``, a delegation as
        ``"<grade id>: uses the course's reference <module.attribute>: ..."``), and ``changed`` when
        ``submitted`` was rewritten. An unreadable notebook gives one note and no rewrite.
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
    answers = {gid for gid, c in known.items() if c.cell_type == "code" and _nbgrader(c).get("solution")}
    refs = list(dict.fromkeys(ref for gid in sorted(answers) for ref in references.get(gid, ())))
    answer_names = {name for gid in answers for name in _defined_names(known[gid].source)}
    code_cells = [c.source for c in nb.cells if c.cell_type == "code"]

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
            label = gid or "an added cell"
            for what in scan_code(cell.source):
                report.flags.append(f"{label}: {what}")
            if refs and (gid in answers or _binds_any(cell.source, answer_names)):
                others = [source for source in code_cells if source is not cell.source]
                for used in find_delegations(cell.source, refs, others, answer_names):
                    report.flags.append(f"{label}: {DELEGATES.format(used)}")
    restored, moved = _restore_layout(nb, given)
    for gid in sorted(set(known) - seen):
        if gid in restored:
            kind = ("test cell" if gid in tests else "graded cell" if _nbgrader(known[gid]).get("grade")
                    else "locked cell")
            report.notes.append(f"{kind} {gid} was missing: restored from the assignment")
        else:  # the student's own answer: there is nothing to restore it from
            report.notes.append(f"answer cell {gid} was missing: its tests ran without it")
    for gid in moved:
        kind = "test cell" if gid in tests else "locked cell"
        report.notes.append(f"{kind} {gid} was out of place: put back where the assignment has it")
    report.changed = report.changed or bool(restored or moved)
    if report.changed:
        nbformat.write(nb, submitted)
    return report
