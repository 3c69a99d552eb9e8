"""The recurrent layer types: LSTM, RNN and the fork type Lstm, each one class with every facet.

Each ``numpy`` call is one Forward from a zero initial state (or from the h_0/c_0 bottoms with
``expose_hidden``). Caffe without ``expose_hidden`` starts each Forward from the previous
Forward's h_T/c_T (recurrent_layer.cpp); ``--state io`` makes that carry-over explicit by
switching expose_hidden on (passes/expose_state.py). With cont_1 = 0 (the usual deploy case)
the two agree.

LSTM also takes the ``recurrent_param`` extension of docs/recurrent-extensions.md (candidate
and cell activations, peepholes, a recurrent projection, cell clipping): ``LstmVariant``.
RNN accepts none of its fields; the fork's ``lstm_param`` has none.

Their ``onnx`` facet is ONNX's own LSTM/RNN operator (``native``, export --lstm-op native),
with ``onnx_refusal`` naming what it cannot compute exactly; by default the rewrite expands
the layers (``expand``) and the exporter never sees them.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from caffe_lstm.errors import UnsupportedLayerError
from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.recurrent import expansion, native
from caffe_lstm.ops.recurrent.cell import CAFFE_GATES, PEEPHOLE_GATES, LstmVariant, LstmWeights
from caffe_lstm.ops.recurrent.equations import (as_float32, initial_state, project_inputs,
                                                project_static, rnn_step, run_lstm,
                                                split_arrays)
from caffe_lstm.ops.recurrent.fork_rules import fork_view
from caffe_lstm.ops.recurrent.rules import (check_stack, check_top_count, check_variant,
                                            has_static, is_one_level, lstm_states, num_layers,
                                            one_state_tops,
                                            parse_recurrent, recurrent_layout,
                                            reject_extensions, state_widths, write_recurrent)
from caffe_lstm.ops.registry import Op, RecurrentSpec, register_op

#: Why a recurrent op has no ``tensorrt`` facet: the rewrite replaces it by a Loop first.
EXPANDED_FIRST = "expanded by the recurrent rewrite first (run the default pipeline)"


class RecurrentOp(Op):
    """What Caffe's LSTM and RNN share: recurrent_param read and written by presence, and the
    bottoms x, cont, [x_static], [one initial state per carried state] with tops the sequence
    [and one final state per carried state]. Subclasses set ``recurrent`` (its ``states``)."""

    param: ClassVar[str | None] = "recurrent_param"
    tensorrt_missing_reason: ClassVar[str] = EXPANDED_FIRST

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        states = len(cls.recurrent.states)
        cls.n_bottoms = (2, 3 + states)  # x, cont, [x_static], [states]
        cls.n_tops = (1, 1 + states)

    @staticmethod
    def parse(ctx, p):
        return parse_recurrent(p)

    @staticmethod
    def caffe(ctx, node: Node) -> dict[str, Any]:
        return write_recurrent(node)


def _lstm_layout(node: Node, shapes: tuple[Shape, ...]) -> tuple[int, int, int, int | None]:
    """The stack's and the variant's rules, then the bottoms; returns T, N, I and S (or
    None)."""
    check_stack(node, shapes)
    check_variant(node)
    return recurrent_layout(node, shapes, lstm_states(node))


def _stack_blobs(inputs: int, hidden: int, levels: int) -> tuple[tuple[str, Shape], ...]:
    """W_xc, b_c, W_hc of every level in turn (suffix _l from level 1); level l > 0 reads the
    H-wide h of level l − 1."""
    gates = len(CAFFE_GATES) * hidden
    return tuple(blob for level in range(levels) for blob in (
        (f"W_xc{_level_suffix(level)}", (gates, inputs if level == 0 else hidden)),
        (f"b_c{_level_suffix(level)}", (gates,)),
        (f"W_hc{_level_suffix(level)}", (gates, hidden))))


def _level_suffix(level: int) -> str:
    return f"_{level}" if level else ""


def _run_stack(x: np.ndarray, cont: np.ndarray, blobs: list, hidden: int) -> np.ndarray:
    """h of the last level; each level is Caffe's LSTM from zeros on the h of the one below
    (dropout between levels is a training-time operation: none here)."""
    h = x
    for level in range(len(blobs) // 3):
        w_xc, b_c, w_hc = blobs[3 * level:3 * level + 3]
        zeros = np.zeros((x.shape[1], hidden))
        h, _, _ = run_lstm(project_inputs(h, w_xc, b_c), cont, zeros, zeros,
                           LstmWeights(w_xc, b_c, w_hc), LstmVariant())
    return h


def _lstm_roles(node: Node, blobs: list) -> LstmWeights:
    """The blobs (file order: W_xc, b_c, [W_xc_static], W_hc, [P], [W_hr]) by role."""
    if num_layers(node) > 1:
        raise UnsupportedLayerError(
            f"recurrent_param.num_layers is {num_layers(node)}: the weight layouts hold "
            "one level", node.label, "write the stack as one layer per level")
    return LstmWeights.split(list(blobs), has_static(node, 2), LstmVariant.of(node))


def in_file_order(node: Node, w) -> list:
    """The inverse of a ``roles``: the blobs that are set, in the layer's file order."""
    return w.in_file_order()


@register_op
class LSTM(RecurrentOp):
    """Caffe's LSTM over T steps (recurrent_param: num_output H, expose_hidden, and the
    extension of docs/recurrent-extensions.md: candidate_activation g, cell_activation h,
    relu_clip κ, peephole, num_proj P, cell_clip).

    Bottoms x (T, N, ...), cont (T, N), [x_static (N, ...)], [r_0 (1, N, R), c_0 (1, N, H)];
    tops r (T, N, R) [, r_T (1, N, R), c_T (1, N, H)], R = P if num_proj else H (r is h
    without a projection). Blobs W_xc (4H, I), b_c (4H), [W_xc_static (4H, S)], W_hc (4H, R),
    [P (3, H): rows p_i, p_f, p_o], [W_hr (P, H)]; gate blocks i, f, o, g. Per step, with
    r̃ = cont_t·r_{t−1} and c̃ = cont_t·c_{t−1}:
    a_t = W_hc·r̃ + W_xc·x_t + b_c [+ W_xc_static·x_static]; i, f = σ(a_i,f + p_i,f ⊙ c̃);
    c_t = f_t ⊙ c̃ + i_t ⊙ g(a_g) [clamped to ±cell_clip]; o_t = σ(a_o + p_o ⊙ c_t);
    m_t = o_t ⊙ h(c_t); r_t = W_hr·m_t or m_t. Defaults: exactly Caffe's cell.
    Without expose_hidden each call starts from zeros (no carry-over between calls).

    recurrent_param.num_layers L > 1 (cuDNN-engine forks) is the stack written out: L levels
    of Caffe's cell, level l reading the h of level l − 1, all with the same cont; blobs W_xc,
    b_c, W_hc per level in turn; dropout_ratio (between levels) is training-only.
    """

    type = "LSTM"
    origin = ("BVLC Caffe; also MyCaffe's type \"Lstm\" (any case) configured by recurrent_param, "
              "MyCaffe/MyCaffe@b8922aa (param/LayerParameter.cs parseLayerType, "
              "layers/RecurrentLayer.cs)")
    limits = ("MyCaffe's engine: CUDNN reads cont at t = 0 only and ignores later zeros, where "
              "every cont here resets (the same on nets whose cont is 0 at t = 0 only)")
    # a num_layers stack keeps its states inside: each call starts from zeros
    recurrent = RecurrentSpec(states=("h", "c"), roles=_lstm_roles, file_order=in_file_order,
                              widths=state_widths,
                              exposable_if=is_one_level)
    expand = staticmethod(expansion.expand_lstm_or_stack)
    # ONNX's own LSTM operator where it is exact (export --lstm-op native; ``native``)
    onnx = staticmethod(native.lstm_onnx)
    onnx_refusal = staticmethod(native.lstm_refusal)


    @staticmethod
    def infer(ctx, node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        steps, batch, _, _ = _lstm_layout(node, shapes)
        variant, hidden = LstmVariant.of(node), node.attrs["num_output"]
        width, r = variant.recurrent_width(hidden), variant.recurrent_name
        if node.attrs["expose_hidden"]:
            check_top_count(node, 3, f"{r}, {r}_T, c_T")
            return (steps, batch, width), (1, batch, width), (1, batch, hidden)
        check_top_count(node, 1, r, f"{r}_T and c_T are tops only with expose_hidden")
        return ((steps, batch, width),)

    @staticmethod
    def blobs(ctx, node: Node, *shapes: Shape) -> tuple[tuple[str, Shape], ...]:
        _, _, inputs, static = _lstm_layout(node, shapes)
        variant, hidden = LstmVariant.of(node), node.attrs["num_output"]
        if num_layers(node) > 1:
            return _stack_blobs(inputs, hidden, num_layers(node))
        gates = len(CAFFE_GATES) * hidden
        static_blob = (("W_xc_static", (gates, static)),) if static is not None else ()
        peephole = (("P", (len(PEEPHOLE_GATES), hidden)),) if variant.peephole else ()
        projection = (("W_hr", (variant.num_proj, hidden)),) if variant.num_proj else ()
        return (("W_xc", (gates, inputs)), ("b_c", (gates,)), *static_blob,
                ("W_hc", (gates, variant.recurrent_width(hidden))), *peephole, *projection)

    @staticmethod
    def numpy(ctx, node: Node, *arrays):
        x, cont, x_static, exposed, blobs = split_arrays(node, arrays, 2)
        variant, hidden = LstmVariant.of(node), node.attrs["num_output"]
        if num_layers(node) > 1:
            return as_float32(_run_stack(x, cont, blobs, hidden))
        w = LstmWeights.split(blobs, x_static is not None, variant)
        batch = x.shape[1]
        # W_xc_x_t + W_xc_x_static: the static term is the same at every step
        x_proj = project_inputs(x, w.w_xc, w.b_c) + project_static(x_static, w.w_xc_static)
        r0 = initial_state(exposed, 0, batch, variant.recurrent_width(hidden))
        c0 = initial_state(exposed, 1, batch, hidden)
        r, r_last, c_last = run_lstm(x_proj, cont, r0, c0, w, variant)
        if node.attrs["expose_hidden"]:
            return as_float32(r, r_last[None], c_last[None])
        return as_float32(r)


@register_op
class RNN(RecurrentOp):
    """Caffe's vanilla RNN over T steps (recurrent_param: num_output H, expose_hidden).

    Bottoms x (T, N, ...), cont (T, N), [x_static (N, ...)], [h_0 (1, N, H)]; tops o (T, N, H)
    [, h_T (1, N, H)]. Blobs W_xh (H, I), b_h (H), [W_xh_static (H, S)], W_hh, W_ho (H, H),
    b_o (H). Per step:
    h_t = tanh(W_hh·(cont_t·h_{t-1}) + W_xh·x_t + b_h [+ W_xh_static·x_static]);
    o_t = tanh(W_ho·h_t + b_o). Without expose_hidden each call starts from zeros.
    The LSTM extension fields of recurrent_param are refused.
    """

    type = "RNN"
    recurrent = RecurrentSpec(states=("h",), widths=state_widths)
    expand = staticmethod(expansion.expand_rnn)
    # ONNX's own RNN operator plus the output layer where it is exact (``native``)
    onnx = staticmethod(native.rnn_onnx)
    onnx_refusal = staticmethod(native.rnn_refusal)

    @staticmethod
    def infer(ctx, node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        steps, batch, _, _ = _rnn_layout(node, shapes)
        return one_state_tops(node, steps, batch, "o")

    @staticmethod
    def blobs(ctx, node: Node, *shapes: Shape) -> tuple[tuple[str, Shape], ...]:
        _, _, inputs, static = _rnn_layout(node, shapes)
        hidden = node.attrs["num_output"]
        static_blob = (("W_xh_static", (hidden, static)),) if static is not None else ()
        return (("W_xh", (hidden, inputs)), ("b_h", (hidden,)), *static_blob,
                ("W_hh", (hidden, hidden)), ("W_ho", (hidden, hidden)), ("b_o", (hidden,)))

    @staticmethod
    def numpy(ctx, node: Node, *arrays):
        x, cont, x_static, exposed, blobs = split_arrays(node, arrays, 1)
        w_xh, b_h, *w_static, w_hh, w_ho, b_o = blobs
        # W_xh_x_t + W_xh_x_static: the static term is the same at every step
        x_proj = project_inputs(x, w_xh, b_h) + project_static(x_static, (w_static or [None])[0])
        h = initial_state(exposed, 0, x.shape[1], node.attrs["num_output"])
        outputs = []
        for x_proj_t, cont_t in zip(x_proj, cont):
            o, h = rnn_step(x_proj_t, cont_t, h, w_hh, w_ho, b_o)
            outputs.append(o)
        if node.attrs["expose_hidden"]:
            return as_float32(np.stack(outputs), h[None])
        return as_float32(np.stack(outputs))


def _rnn_layout(node: Node, shapes: tuple[Shape, ...]) -> tuple[int, int, int, int | None]:
    """No extension fields nor stack, then the bottoms; returns T, N, I and S (or None)."""
    check_stack(node, shapes)
    reject_extensions(node)
    return recurrent_layout(node, shapes, (("h_0", node.attrs["num_output"]),))


# ---- the forks' type "Lstm": junhyukoh/caffe-lstm (caffe_ocr, CTPN) and a hidden_size one ------


def _parse_fork(ctx: Any, p: Any) -> dict[str, Any]:
    """lstm_param, told apart by the fields a layer sets (the forks share the type "Lstm"):

    - ``num_output`` (with batch_size, None when not written: fork_rules says which Reshape
      applies): junhyukoh/caffe-lstm's, adopted by caffe_ocr and CTPN;
    - ``hidden_size`` (with sequence_len): fanchenyou/deepdiary's, a port of Karpathy's
      neuraltalk LSTM: rows t·N + n of x (T·N, …) with T = sequence_len + 1, width = H;
    - neither: a fork configured otherwise (by recurrent_param, say), whose math is unknown.
    """
    if p.has("num_output"):
        return {"num_output": p.num_output,
                "batch_size": p.batch_size if p.has("batch_size") else None}
    if p.has("hidden_size"):
        return {"hidden_size": p.hidden_size, "sequence_len": p.sequence_len}
    raise UnsupportedLayerError(
        "lstm_param sets neither num_output (the Lstm of junhyukoh/caffe-lstm, caffe_ocr and "
        "CTPN) nor hidden_size (the Lstm of fanchenyou/deepdiary), so it looks like a fork's "
        "Lstm configured otherwise (by recurrent_param, say), whose math is not known here", "",
        "set lstm_param.num_output for junhyukoh's layer, or type \"LSTM\" if the layer is "
        "BVLC's LSTM with recurrent_param")


def _fork_roles(node: Node, blobs: list) -> LstmWeights:
    """The fork's blobs W_x, W_h, b by role (W_xc, W_hc, b_c of Caffe's cell)."""
    w_x, w_h, b = blobs
    return LstmWeights(w_x, b, w_h)


def _fork_file_order(node: Node, w: LstmWeights) -> list:
    return [w.w_xc, w.w_hc, w.b_c]


def _expand_fork(b, node: Node) -> None:
    """Either schema as Caffe's cell on (T, N, I), rows reshaped there and back."""
    expansion.expand_fork_lstm(b, node, fork_view(node, tuple(v.shape for v in node.inputs)))


@register_op
class Lstm(Op):
    """The forks' LSTM type "Lstm": junhyukoh/caffe-lstm's (lstm_param: num_output H,
    batch_size), or fanchenyou/deepdiary's (lstm_param: hidden_size H, sequence_len).

    Same cell as ``LSTM`` with clip in the role of cont, and blobs W_x (4H, I), W_h (4H, H),
    b (4H) (gate blocks i, f, o, g). junhyukoh's Reshape (fork_rules: a 2-D x, batch_size
    written, or a clip of T·N values): x is T·N rows of I = count / num values, row t·N + n,
    N = batch_size (default 1), top (T·N, H), clip T·N values; otherwise caffe_ocr's and
    CTPN's: x (T, N, ...), top (T, N, H), clip (T, N). hidden_size: x (T·N, …) of width
    I = H, T = sequence_len + 1, N = rows / T, top (T·N, H), no clip. Without a clip bottom
    clip_t = 0 at t = 0 and 1 after. Each call starts from zeros (no carry-over).
    clipping_threshold only clips gradients and is ignored. An lstm_param with neither
    num_output nor hidden_size is refused (_parse_fork).
    """

    type = "Lstm"
    #: Whether the layer always reads junhyukoh's rows (fork_rules), never time-major.
    rows_only: ClassVar[bool] = False
    limits = ("the fork tests clip ≠ 0 where this multiplies by clip (the same for clips of "
              "0 and 1); with a clip bottom the fork carries the previous call's state in, "
              "here each call starts from zeros (exact where clip_0 = 0)")
    origin = ("junhyukoh/caffe-lstm@598d454 (adopted by senlinuc/caffe_ocr@81642f6 and "
              "tianzhi0549/CTPN@f77ec9e)")
    tensorrt_missing_reason = EXPANDED_FIRST
    param = "lstm_param"
    # clip plays cont; no static input; each call starts from zeros (no expose_hidden)
    recurrent = RecurrentSpec(states=("h", "c"), static_bottom=None, exposable=False,
                              roles=_fork_roles, file_order=_fork_file_order)
    expand = staticmethod(_expand_fork)
    # ONNX's own LSTM operator where it is exact (``native``)
    onnx = staticmethod(native.fork_onnx)
    onnx_refusal = staticmethod(native.fork_refusal)

    n_bottoms = (1, 2)

    parse = staticmethod(_parse_fork)

    @staticmethod
    def infer(ctx, node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        v = fork_view(node, shapes)
        if v.flat:
            return ((v.steps * v.batch, v.hidden),)
        return ((v.steps, v.batch, v.hidden),)

    @staticmethod
    def blobs(ctx, node: Node, *shapes: Shape) -> tuple[tuple[str, Shape], ...]:
        v = fork_view(node, shapes)
        gates = len(CAFFE_GATES) * v.hidden
        return ("W_x", (gates, v.inputs)), ("W_h", (gates, v.hidden)), ("b", (gates,))

    @staticmethod
    def numpy(ctx, node: Node, *arrays):
        x, *clip_bottom = [np.asarray(a, np.float64) for a in arrays[:len(node.inputs)]]
        w_x, w_h, b = [np.asarray(a, np.float64) for a in arrays[len(node.inputs):]]
        v = fork_view(node, tuple(a.shape for a in arrays[:len(node.inputs)]))
        clip = (clip_bottom[0].reshape(v.steps, v.batch) if clip_bottom
                else _fresh_clip(v.steps, v.batch))
        x_proj = project_inputs(x.reshape(v.steps, v.batch, v.inputs), w_x, b)
        zeros = np.zeros((v.batch, v.hidden))
        h, _, _ = run_lstm(x_proj, clip, zeros, zeros, LstmWeights(w_x, b, w_h), LstmVariant())
        return as_float32(h.reshape(v.steps * v.batch, v.hidden) if v.flat else h)


@register_op
class LSTMSimple(Lstm):
    """MyCaffe's LSTMSimple (lstm_simple_param: num_output H, batch_size N): a port of
    junhyukoh's Lstm with its Reshape (x is T·N rows of I = count / num, top (T·N, H), a clip
    of T·N values) and its blobs W_x (4H, I), W_h (4H, H), b (4H); so the same op, read with
    the rows reading always. enable_clockwork_forgetgate_bias only fills the bias at
    initialisation, clipping_threshold only clips gradients: both are ignored."""

    type = "LSTMSimple"
    origin = ("MyCaffe/MyCaffe@4245eef (LSTMSimpleLayer.cs: LayerSetUp, Reshape and blobs of "
              "junhyukoh/caffe-lstm's Lstm, whose Forward its lstm_fwd kernel ports); spelled "
              "LstmSimple or lstm_simple (any case) as MyCaffe@b8922aa's parseLayerType reads")
    limits = ("the clip is multiplied in, where the fork tests clip ≠ 0 (the same for 0 and 1); "
              "each call starts from zeros (exact where clip_0 = 0)")
    param = "lstm_simple_param"
    rows_only = True

    @staticmethod
    def parse(ctx, p):
        return {"num_output": p.num_output, "batch_size": p.batch_size}


def _fresh_clip(steps: int, batch: int) -> np.ndarray:
    """The fork's implicit clip without a clip bottom: 0 at t = 0, 1 afterwards."""
    clip = np.ones((steps, batch))
    clip[0] = 0.0
    return clip

