"""How the ONNX export writes each recurrent layer (``LstmOp``): one Scan of the rewritten step,
or ONNX's own LSTM/RNN operator (the layer's ``onnx`` facet, ops/recurrent/native.py).

``auto`` takes the operator wherever it computes exactly what the layer computes (the layers
``native`` accepts: the op's ``onnx_refusal`` is None) and the Scan elsewhere: onnxruntime
runs its own operator faster than any Scan body, on long sequences by far.
"""

from __future__ import annotations

from caffe_lstm.errors import CaffeLstmError
from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.ops import get_op, has_facet
from caffe_lstm.options import LstmOp
from caffe_lstm.passes.manager import DEFAULT_PIPELINE, run_passes


def onnx_rewrite(graph: Graph, lstm_op: LstmOp | str) -> Graph:
    """The rewrite (in place) for the ONNX export: every recurrent layer expanded for its Scan
    (``scan``), or left whole for ONNX's operator: all that have one (``native``, the exporter
    refusing those it would compute differently), those it computes exactly (``auto``)."""
    lstm_op = LstmOp.parse(lstm_op, "lstm_op")
    if lstm_op is LstmOp.SCAN:
        return run_passes(graph, DEFAULT_PIPELINE)
    keep = has_onnx_operator if lstm_op is LstmOp.NATIVE else _exact_as_onnx_operator
    return run_passes(graph, DEFAULT_PIPELINE, keep=keep)


def engine_rewrite(graph: Graph, through_onnx: bool, unroll: bool, lstm_op: LstmOp | str
                   ) -> Graph:
    """The rewrite (in place) for a TensorRT engine: ``onnx_rewrite`` for the one TensorRT's
    ONNX parser builds, the recurrent layers expanded (and unrolled) for our emitter, which
    takes no ``lstm_op`` but ``scan``."""
    lstm_op = LstmOp.parse(lstm_op, "lstm_op")
    if lstm_op is not LstmOp.SCAN and (not through_onnx or unroll):
        raise CaffeLstmError(f"lstm_op={lstm_op.value!r} applies to the ONNX route only",
                             "lstm_op=", "give via='onnx' (without unroll), or "
                             "lstm_op='scan'")
    if through_onnx and not unroll:
        return onnx_rewrite(graph, lstm_op)
    return run_passes(graph, DEFAULT_PIPELINE + (("unroll",) if unroll else ()))


def lstm_op_choices(graph: Graph, lstm_op: LstmOp | str) -> dict[str, tuple[LstmOp, str]]:
    """Layer name -> (``NATIVE`` or ``SCAN``, why) for each recurrent layer of ``graph`` (as
    loaded): what ``onnx_rewrite`` does with it; why is, for ``auto``'s Scans, the reason ONNX's
    operator would compute something else."""
    lstm_op, choices = LstmOp.parse(lstm_op, "lstm_op"), {}
    for node in graph.nodes:
        if not (has_facet(get_op(node.op), "expand") and has_onnx_operator(node)):
            continue  # not a layer the export can write either way
        reason = get_op(node.op).onnx_refusal(node) if lstm_op is LstmOp.AUTO else None
        native = lstm_op is LstmOp.NATIVE or (lstm_op is LstmOp.AUTO and reason is None)
        choices[node.name] = (LstmOp.NATIVE, "") if native else (LstmOp.SCAN, reason or "")
    return choices


def has_onnx_operator(node: Node) -> bool:
    """Whether the exporter can take ``node`` whole (an LSTM as ONNX's LSTM operator)."""
    return has_facet(get_op(node.op), "onnx")


def _exact_as_onnx_operator(node: Node) -> bool:
    return has_onnx_operator(node) and get_op(node.op).onnx_refusal(node) is None
