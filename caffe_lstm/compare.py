"""Comparing two sets of outputs: max abs / rel error per output, as ``verify`` prints it; and
telling a mismatch from a net too sensitive for any two float32 programs to agree."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from caffe_lstm.ir.graph import Graph, clone_graph


@dataclass(frozen=True)
class Comparison:
    """One output compared: ok iff |got - want| <= atol + rtol·|want| everywhere, or the
    output is ``sensitive``: the reference itself moves beyond that tolerance when the weights
    move by one float32 rounding, so no two correct float32 programs need agree there."""

    name: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    ok: bool
    sensitive: bool = False


def compare_outputs(reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray],
                    atol: float, rtol: float) -> list[Comparison]:
    """Compares every output of ``reference`` with the same-named one of ``candidate``."""
    rows = []
    for name, want in reference.items():
        got = candidate.get(name)
        if got is None or got.shape != want.shape:
            rows.append(Comparison(name, tuple(want.shape), float("inf"), float("inf"), False))
            continue
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        scale = np.abs(want.astype(np.float64))
        max_abs = float(diff.max()) if diff.size else 0.0
        max_rel = float((diff / np.maximum(scale, np.finfo(np.float32).tiny)).max()) \
            if diff.size else 0.0
        ok = bool(np.all(diff <= atol + rtol * scale)) and bool(np.isfinite(got).all())
        rows.append(Comparison(name, tuple(want.shape), max_abs, max_rel, ok))
    return rows

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


def mark_sensitive(report: Any, reference: Mapping[str, np.ndarray],
                   rerun: Callable[[], Mapping[str, np.ndarray]]) -> None:
    """Marks, in a verify report (``results``, ``notes``, ``atol``, ``rtol``), each failed
    comparison of an output that is sensitive (ok, ``sensitive``) and adds a note saying what
    that means.

    An output is sensitive when ``rerun()`` (the reference on ``nudged_weights``) differs from
    ``reference`` beyond the tolerance and by more than SENSITIVE of its largest magnitude:
    float32 rounding alone, amplified by the net, then moves it that far (a tolerance tighter
    than float32's own rounding is not enough: that stays a mismatch). It is run only when a
    comparison failed.
    """
    atol, rtol = report.atol, report.rtol
    failed = {row.name for _, rows in report.results for row in rows if not row.ok}
    if not failed:
        return
    moved = {row.name: row for row in compare_outputs(reference, rerun(), atol, rtol)
             if row.name in failed and not row.ok and row.max_abs > SENSITIVE * _peak(
                 reference[row.name])}
    if not moved:
        return
    report.results = [(title, [dataclasses.replace(row, ok=True, sensitive=True)
                               if not row.ok and row.name in moved else row for row in rows])
                      for title, rows in report.results]
    worst = max(moved.values(), key=lambda row: row.max_abs)
    report.notes.append(
        f"numerically sensitive at these weights: moving every weight by one float32 "
        f"rounding moves the original equations' {', '.join(sorted(moved))} by up to "
        f"{worst.max_abs:.3g} ({worst.name}), beyond atol {atol:g} + rtol {rtol:g}, so no two "
        f"correct float32 programs need agree there; those outputs are marked 'sensitive', "
        f"not mismatches (weights of a smaller scale, such as `weights init` gives, or fewer "
        f"steps make the comparison meaningful)")


def _peak(array: np.ndarray) -> float:
    return float(np.abs(array.astype(np.float64)).max(initial=0.0))
