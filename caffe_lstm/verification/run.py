"""``verify`` on a prepared net: the reference, every column, signal, sensitivity, location."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.compare import compare_outputs, mark_sensitive, nudged_weights, signal_problem
from caffe_lstm.ir.graph import Graph
from caffe_lstm.ir.walk import Progress, labelled
from caffe_lstm.verification.columns import Request, candidate_columns
from caffe_lstm.verification.prepared import Prepared
from caffe_lstm.verification.report import Column, Verification


def verify_prepared(prepared: Prepared, request: Request, *, allow_no_signal: bool = False,
                    locate: bool = True, progress: Progress | None = None) -> Verification:
    """Compares every column of ``request`` with the equations on ``prepared``'s inputs.

    Each output of each checked column is marked ``no signal`` when its reference could not
    tell a right candidate from a wrong one (``compare.signal_problem``, against inputs drawn
    again), ``sensitive`` when float32 rounding alone moves it beyond the tolerance; with
    ``locate``, each failing column is searched for the first layer that diverges.
    ``progress``: told of each numpy run, its phases named after the run ("equations:
    layers", "rewritten graph: __lstm1/loop: steps", ...).
    """
    from caffe_lstm.backends.tensorrt.cpu_walk import NotWalkableError

    reference = prepared.reference(progress=labelled(progress, "equations"))
    float32 = request.tolerances.of(False)
    report = Verification(float32.atol, float32.rtol, allow_no_signal=allow_no_signal)
    if request.fp16 and None in (request.tolerances.atol, request.tolerances.rtol):
        report.notes.append(f"fp16: the TensorRT columns use float16 tolerances "
                            f"({request.tolerances.of(True).describe()}); pass atol=, rtol= "
                            f"to choose others")
    for column, run in candidate_columns(prepared, request, progress):
        report.columns.append(column)
        if run is None:
            continue
        try:
            outputs = run()
        except NotWalkableError as exc:  # a column this machine cannot compute
            column.reason = exc.what
            continue
        column.rows = compare_outputs(reference, outputs, column.tolerance)
    checked = [column for column in report.columns if column.checked]
    _mark_signal(prepared, reference, checked, labelled(progress, "equations, inputs redrawn"))
    nudged = labelled(progress, "equations, weights nudged")
    mark_sensitive(checked, reference,
                   lambda: NumpyExecutor(nudged_weights(prepared.graph), nudged).run(
                       prepared.feeds), report.notes)
    if locate and any(column.failed for column in checked):
        from caffe_lstm.verification.locate import locate_columns

        locate_columns(prepared, request, [column for column in checked if column.failed])
    return report


def _mark_signal(prepared: Prepared, reference: Mapping[str, np.ndarray],
                 columns: list[Column], progress: Progress | None = None) -> None:
    """Each row gets ``no_signal``: why its output cannot catch a wrong candidate, or ""."""
    redrawn_feeds = prepared.redrawn_feeds()
    moved = {name for name, array in prepared.feeds.items()
             if name not in redrawn_feeds or not np.array_equal(array, redrawn_feeds[name])}
    reached = _reached_outputs(prepared.graph, moved)
    redrawn = prepared.reference(redrawn_feeds, progress=progress) if reached else {}
    for column in columns:
        column.rows = [dataclasses.replace(row, no_signal=signal_problem(
            reference[row.name], redrawn.get(row.name) if row.name in reached else None,
            column.tolerance)) for row in column.rows]


def _reached_outputs(graph: Graph, inputs: set[str]) -> set[str]:
    """The outputs of ``graph`` that depend on some of the net inputs ``inputs`` (an output
    no moved input reaches, a constant, is only checked for being finite and not tiny)."""
    reached = {id(value) for value in graph.inputs if value.name in inputs}
    for node in graph.nodes:
        if any(id(value) in reached for value in node.inputs):
            reached.update(id(value) for value in node.outputs)
    return {value.name for value in graph.outputs if id(value) in reached}
