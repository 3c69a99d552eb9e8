"""What ``Net.verify`` found: one Column per implementation, checked or not (and why)."""

from __future__ import annotations

from dataclasses import dataclass, field

from caffe_lstm.compare import Comparison, Tolerance

#: How the table states the rule every comparison applies.
RULE = "|d| ≤ atol + rtol·|ref|"


@dataclass(frozen=True)
class Located:
    """Where a failing candidate first leaves the tolerance, in graph order: the Caffe
    ``layer`` (and its ``layer_type``) whose output ``value`` differs; inside a loop body, the
    step ``node`` of the rewrite and the time ``step``; ``comparison``: that value's errors."""

    layer: str
    layer_type: str
    value: str
    comparison: Comparison
    node: str = ""
    step: int | None = None
    #: why the search went no deeper (the loops' per-step values were not kept), or ""
    note: str = ""

    def describe(self) -> str:
        """``layer 'conv3' (Convolution): conv3 max abs err ...`` as the report prints it."""
        where = f"layer '{self.layer}' ({self.layer_type})"
        if self.node:
            where += f", step node {self.node}"
        if self.step is not None:
            where += f" at time step {self.step}"
        row = self.comparison
        return (f"{where}: {self.value} max abs err {row.max_abs:.3g}, max rel err "
                f"{row.max_rel:.3g} ({row.used:.3g}x the tolerance, decided by "
                f"{row.decided_by})" + (f"; {self.note}" if self.note else ""))


@dataclass
class Column:
    """One implementation compared with the equations: its ``title``, the ``tolerance`` it is
    held to (``atol``, ``rtol``), and either ``rows`` (one Comparison per output) or, not
    checked, ``reason``.
    ``located``: for a failing column searched with ``locate``, where it first diverges (or
    ``unlocated``: why no layer could be named)."""

    title: str
    tolerance: Tolerance
    kind: str = ""  # numpy, tensorrt, onnx or engine: which implementation
    rows: list[Comparison] | None = None
    reason: str = ""
    located: Located | None = None
    unlocated: str = ""

    @property
    def atol(self) -> float:
        return self.tolerance.atol

    @property
    def rtol(self) -> float:
        return self.tolerance.rtol

    @property
    def checked(self) -> bool:
        return self.rows is not None

    @property
    def failed(self) -> bool:
        return any(not row.ok for row in self.rows or ())


@dataclass
class Verification:
    """What ``Net.verify`` found. ``atol``, ``rtol``: the float32 columns' tolerances (each
    Column has its own: float16 ones for an fp16 TensorRT network); ``columns``: every
    implementation, checked or not; ``notes``: what else the user should know."""

    atol: float
    rtol: float
    columns: list[Column] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    allow_no_signal: bool = False

    @property
    def results(self) -> list[tuple[str, list[Comparison]]]:
        """(title, comparisons) of every checked column."""
        return [(column.title, column.rows) for column in self.columns if column.rows is not None]

    @property
    def not_checked(self) -> dict[str, str]:
        """title -> why, for every column that was not run."""
        return {column.title: column.reason for column in self.columns if not column.checked}

    @property
    def failures(self) -> list[str]:
        """``output (candidate)`` for every comparison beyond the tolerances."""
        return self._where("MISMATCH")

    @property
    def no_signal(self) -> list[str]:
        """``output (candidate)`` for every comparison whose output carries no signal."""
        return self._where("no signal")

    @property
    def ok(self) -> bool:
        """No mismatch, and every output carries signal (unless ``allow_no_signal``)."""
        return not self.failures and (self.allow_no_signal or not self.no_signal)

    def _where(self, verdict: str) -> list[str]:
        return [f"{row.name} ({title})" for title, rows in self.results for row in rows
                if row.verdict == verdict]
