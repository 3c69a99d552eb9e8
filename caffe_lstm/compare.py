"""Comparing two sets of outputs: max abs / rel error per output, as ``verify`` prints it."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping

import numpy as np


@dataclass(frozen=True)
class Comparison:
    """One output compared: ok iff |got - want| <= atol + rtol·|want| everywhere."""

    name: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    ok: bool


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
