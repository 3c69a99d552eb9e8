"""Comparing two sets of outputs: max abs / rel error per output, as ``verify`` prints it;
telling a mismatch from a net too sensitive for any two float32 programs to agree; and telling
an output that carries signal from one no candidate could get wrong."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from caffe_lstm.ir.graph import Graph, clone_graph


@dataclass(frozen=True)
class Tolerance:
    """What a comparison allows: |d| ≤ atol + rtol·|ref| per element. With ``of_peak`` the
    absolute term is ``atol`` times the output's largest magnitude: float16 rounds relative to
    the values' scale, so its absolute errors grow with the output's."""

    atol: float
    rtol: float
    of_peak: bool = False

    def absolute(self, want: np.ndarray) -> float:
        """The absolute term for the reference ``want``."""
        return self.atol * _peak(want) if self.of_peak else self.atol

    def describe(self) -> str:
        """``atol 1e-05, rtol 0.0001`` (``atol 0.002·max|ref|`` with ``of_peak``)."""
        return f"atol {self.atol:g}{'·max|ref|' if self.of_peak else ''}, rtol {self.rtol:g}"


#: verify's tolerance for float32 candidates: a few hundred float32 roundings of unit values.
FLOAT32_TOLERANCE = Tolerance(1e-5, 1e-4)
#: ... and for a float16 TensorRT network: float16 keeps 11 bits (a rounding is up to 4.9e-4
#: relative), and a few dozen layers of them add up to some 1e-3 of the output's scale.
FLOAT16_TOLERANCE = Tolerance(2e-3, 5e-3, of_peak=True)


@dataclass(frozen=True)
class Comparison:
    """One output compared: ok iff |got - want| <= atol + rtol·|want| everywhere, or the
    output is ``sensitive``: the reference itself moves beyond that tolerance when the weights
    move by one float32 rounding, so no two correct float32 programs need agree there.

    ``used``: the largest |got - want| / (atol + rtol·|want|) (ok iff at most 1);
    ``decided_by``: the term of the tolerance that is larger where ``used`` peaks (``atol`` or
    ``rtol``); ``no_signal``: why the output cannot tell a right candidate from a wrong one
    (``signal_problem``), "" when it can."""

    name: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    ok: bool
    sensitive: bool = False
    used: float = 0.0
    decided_by: str = ""
    no_signal: str = ""

    @property
    def verdict(self) -> str:
        """``MISMATCH``, ``sensitive``, ``no signal`` or ``ok`` (a mismatch outranks the rest:
        a candidate that differs has been caught, whatever the reference's signal)."""
        if not self.ok:
            return "MISMATCH"
        return "sensitive" if self.sensitive else "no signal" if self.no_signal else "ok"


def compare_outputs(reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray],
                    tolerance: Tolerance) -> list[Comparison]:
    """Compares every output of ``reference`` with the same-named one of ``candidate``."""
    rows = []
    for name, want in reference.items():
        got = candidate.get(name)
        if got is None or got.shape != want.shape:
            rows.append(Comparison(name, tuple(want.shape), float("inf"), float("inf"), False,
                                   used=float("inf")))
            continue
        rows.append(compare_arrays(name, want, got, tolerance))
    return rows


def compare_arrays(name: str, want: np.ndarray, got: np.ndarray,
                   tolerance: Tolerance) -> Comparison:
    """One array against its reference (same shape): the errors, and which term decided."""
    atol, rtol = tolerance.absolute(want), tolerance.rtol
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    scale = np.abs(want.astype(np.float64))
    if not diff.size:
        return Comparison(name, tuple(want.shape), 0.0, 0.0, True, decided_by="atol")
    max_abs = float(np.nan_to_num(diff, nan=np.inf).max())
    max_rel = float(np.nan_to_num(diff / np.maximum(scale, np.finfo(np.float32).tiny),
                                  nan=np.inf).max())
    used = tolerance_used(diff, scale, atol, rtol)
    worst = np.unravel_index(int(np.argmax(used)), used.shape)
    decided_by = "atol" if atol >= rtol * scale[worst] else "rtol"
    ok = bool(np.all(used <= 1.0)) and bool(np.isfinite(got).all())
    return Comparison(name, tuple(want.shape), max_abs, max_rel, ok, used=float(used[worst]),
                      decided_by=decided_by)


def tolerance_used(diff: np.ndarray, scale: np.ndarray, atol: float,
                   rtol: float) -> np.ndarray:
    """|d| / (atol + rtol·|ref|) per element (inf where a zero tolerance meets a difference,
    NaN differences count as inf): at most 1 passes."""
    bound = atol + rtol * scale
    with np.errstate(divide="ignore", invalid="ignore"):
        used = np.where(bound > 0, diff / np.where(bound > 0, bound, 1.0),
                        np.where(diff > 0, np.inf, 0.0))
    return np.nan_to_num(used, nan=np.inf, posinf=np.inf)


#: An output carries signal when redrawing the inputs moves it, somewhere, by at least this
#: many times the comparison's tolerance there: a candidate that ignored its inputs (or
#: computed something else of the same scale) then cannot pass.
SIGNAL_MARGIN = 4.0


def signal_problem(want: np.ndarray, redrawn: np.ndarray | None,
                   tolerance: Tolerance) -> str:
    """Why the reference ``want`` cannot tell a right candidate from a wrong one, or "".

    ``redrawn``: the reference on inputs drawn again (another seed), None for an output that
    no redrawn input reaches (a constant: only finiteness and size are checked). Refused: a
    reference that is not finite; one whose largest magnitude is within SIGNAL_MARGIN·atol
    (any candidate near zero passes); one that redrawing the inputs moves by less than
    SIGNAL_MARGIN times the tolerance everywhere (a candidate ignoring its inputs passes).
    """
    want64 = want.astype(np.float64)
    atol, rtol = tolerance.absolute(want), tolerance.rtol
    if not np.isfinite(want64).all():
        return "the reference is not finite (inf or NaN): nothing can be compared with it"
    peak = float(np.abs(want64).max(initial=0.0))
    if peak <= SIGNAL_MARGIN * atol:
        return (f"the reference is vanishingly small (largest magnitude {peak:.3g}, within "
                f"{SIGNAL_MARGIN:g}x atol {atol:g}): any candidate near zero would pass; "
                f"{_SHRUNK}")
    if redrawn is None:
        return ""
    moved = tolerance_used(np.abs(redrawn.astype(np.float64) - want64), np.abs(want64),
                           atol, rtol)
    most = float(moved.max(initial=0.0))
    if most >= SIGNAL_MARGIN:
        return ""
    return (f"the output does not depend on the input: inputs drawn again move it by at most "
            f"{most:.3g}x the tolerance (signal needs {SIGNAL_MARGIN:g}x), so a candidate that "
            f"ignored its inputs would pass; {_SHRUNK}")


_SHRUNK = ("random weights lose the input over many layers: the prototxt's fillers as written "
           "(fillers=True) shrink the signal to nothing, and even unit-scaled synthetic weights "
           "can map every input to about the same output; real trained weights avoid this")


#: An output is sensitive when one float32 rounding of the weights moves it by more than this
#: fraction of its largest magnitude (some 10⁴ float32 epsilons: amplified, not just rounded).
SENSITIVE = 1e-3


def nudged_weights(graph: Graph, seed: int = 0) -> Graph:
    """A copy of ``graph`` whose every weight is one float32 step away from its own, up or down
    at random: a change of the size a correct float32 program's own rounding makes."""
    nudged = clone_graph(graph)
    rng = np.random.default_rng(seed)
    for node in nudged.all_nodes():
        for value in node.weights:
            if value.data is not None:
                data = np.asarray(value.data, np.float32)
                away = np.where(rng.random(data.shape) < 0.5, -np.inf, np.inf)
                value.data = np.nextafter(data, away.astype(np.float32))
    return nudged


def mark_sensitive(columns: Sequence[Any], reference: Mapping[str, np.ndarray],
                   rerun: Callable[[], Mapping[str, np.ndarray]], notes: list[str]) -> None:
    """Marks, in verify's checked columns (each with ``rows``, replaced, and its
    ``tolerance``), each failed comparison of an output that is sensitive (ok, ``sensitive``) and
    adds to ``notes`` what that means.

    An output is sensitive when ``rerun()`` (the reference on ``nudged_weights``) differs from
    ``reference`` beyond the column's tolerance and by more than SENSITIVE of its largest
    magnitude: float32 rounding alone, amplified by the net, then moves it that far (a
    tolerance tighter than float32's own rounding is not enough: that stays a mismatch). It
    is run only when a comparison failed.
    """
    if all(row.ok for column in columns for row in column.rows):
        return
    nudged = rerun()
    worst: tuple[Comparison, Tolerance] | None = None
    moved_names: set[str] = set()
    for column in columns:
        failed = {row.name: reference[row.name] for row in column.rows if not row.ok}
        moved = {row.name: row for row in compare_outputs(failed, nudged, column.tolerance)
                 if not row.ok and row.max_abs > SENSITIVE * _peak(reference[row.name])}
        column.rows = [dataclasses.replace(row, ok=True, sensitive=True)
                       if not row.ok and row.name in moved else row for row in column.rows]
        moved_names |= set(moved)
        for row in moved.values():
            if worst is None or row.max_abs > worst[0].max_abs:
                worst = (row, column.tolerance)
    if worst is None:
        return
    row, tolerance = worst
    notes.append(
        f"numerically sensitive at these weights: moving every weight by one float32 "
        f"rounding moves the original equations' {', '.join(sorted(moved_names))} by up to "
        f"{row.max_abs:.3g} ({row.name}), beyond {tolerance.describe()}, so no two "
        f"correct float32 programs need agree there; those outputs are marked 'sensitive', "
        f"not mismatches (weights of a smaller scale, such as `weights init` gives, or fewer "
        f"steps make the comparison meaningful)")


def _peak(array: np.ndarray) -> float:
    return float(np.abs(array.astype(np.float64)).max(initial=0.0))
