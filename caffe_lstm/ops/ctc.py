"""caffe_ocr's CTCGreedyDecoder: best-path decoding of per-step class scores (its deploy form).

The fork's layer (ctc_decoder_layer.cpp, the CTC decoder of BVLC/caffe PR #4681 as caffe_ocr
adapted it) takes one bottom, the scores (T, N, C) (probabilities or logits: only the argmax
counts), and writes one top (N, T, 1, 1): per stream the decoded labels from the left, the rest
-1. Its two-bottom form (scores, labels) computes an edit-distance accuracy while training.

Engines and ONNX models compute the same fixed-shape top without loops or scatters: with
k_t = argmax_c x[t, n, c] and keep_t = (k_t ≠ blank) ∧ ¬(merge ∧ k_t = k_{t−1}), the kept
labels' slots are j_t = (Σ_{s≤t} keep_s) − 1 (a matrix product with the triangle s ≤ t), and
y[n, j] = Σ_t [keep_t ∧ j_t = j]·(k_t + 1) − 1, which is k_t at a kept label's slot and −1 at
every slot no label reaches (a one-hot (N, T, T) product; T is the sequence length, 35 for the
caffe_ocr nets). The labels are float32 even in an fp16 engine: half precision holds integers
exactly only up to 2048 (the caffe_ocr nets have 5990 classes).
"""

from __future__ import annotations

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, register_op, shape_error


def _blank(node: Node, classes: int) -> int:
    """The blank class: blank_index, or C − 1 when negative (as the fork's Reshape resolves it)."""
    blank = node.attrs["blank_index"]
    return classes - 1 if blank < 0 else blank


def _decode(scores: np.ndarray, blank: int, merge: bool) -> list[int]:
    """One stream's labels from its (T, C) scores: the first maximum per step, repeats merged
    (when ``merge``), blanks dropped; a blank between two equal labels keeps both."""
    labels, previous = [], -1
    for k in np.argmax(scores, axis=1):  # argmax takes the first of equal maxima, as Caffe
        if k != blank and not (merge and k == previous):
            labels.append(int(k))
        previous = k
    return labels


@register_op
class CTCGreedyDecoder(Op):
    """y[n, j] = the j-th label of stream n's best path, −1 after the last (ctc_decoder_param:
    blank_index, −1 = C − 1; ctc_merge_repeated, default true).

    Bottom: scores x (T, N, C). Top: (N, T, 1, 1). Per stream, k_t = argmax_c x[t, n, c] (the
    first maximum); k_t is emitted unless it is the blank or (with ctc_merge_repeated) equal to
    k_{t−1}; the emitted labels fill y[n, 0…] in order and −1 the rest. Engines and ONNX compute
    the same top with a one-hot product (see the module docstring); labels are float32.
    """

    type = "CTCGreedyDecoder"
    origin = "caffe_ocr, senlinuc/caffe_ocr@81642f6"
    param = "ctc_decoder_param"
    n_bottoms = (1, 2)

    @staticmethod
    def parse(ctx, p):
        return {"blank_index": p.blank_index, "ctc_merge_repeated": p.ctc_merge_repeated}

    @staticmethod
    def infer(ctx, node: Node, x: Shape, labels: Shape | None = None) -> tuple[Shape, ...]:
        if labels is not None:
            raise shape_error(node, "two bottoms (scores, labels) is the fork's accuracy form, "
                              "which only evaluates training", "decode with one bottom, the "
                              "scores (T, N, C), or cut the layer off with outputs=")
        if len(x) != 3 or min(x) < 1:
            raise shape_error(node, f"the scores must be (T, N, C), found {x}",
                              "bottom 0 holds one score per class, time step and stream")
        steps, batch, _ = x
        return ((batch, steps, 1, 1),)

    @staticmethod
    def numpy(ctx, node: Node, x):
        steps, batch, classes = x.shape
        blank, merge = _blank(node, classes), node.attrs["ctc_merge_repeated"]
        y = np.full((batch, steps, 1, 1), -1.0, np.float32)
        for n in range(batch):
            labels = _decode(x[:, n, :], blank, merge)
            y[n, :len(labels), 0, 0] = labels
        return (y,)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        return (_TrtDecoder(ctx, node).decode(x),)

    @staticmethod
    def onnx(ctx, node: Node, x: str) -> tuple[str, ...]:
        return (_OnnxDecoder(ctx, node).decode(x),)


class _TrtDecoder:
    """The fixed-shape decoder in TensorRT layers (float32 after the argmax)."""

    def __init__(self, ctx, node: Node) -> None:
        self.ctx, self.node, self.trt = ctx, node, ctx.trt
        self.ops = ctx.trt.ElementWiseOperation

    def decode(self, x):
        ctx, ops = self.ctx, self.ops
        classes = self.node.inputs[0].shape[2]
        # k[t, n] = argmax_c x[t, n, c], as (N, T) float32
        topk = ctx.named(ctx.network.add_topk(x, self.trt.TopKOperation.MAX, 1, 1 << 2), "argmax")
        k = ctx.squeeze(ctx.transpose(ctx.cast(topk.get_output(1), self.trt.DataType.FLOAT,
                                               "label"), (1, 0, 2), "by_stream"), 2, "k")
        t_row, t_col = self._positions(x)
        # keep_t = (k_t ≠ blank) ∧ ¬(merge ∧ k_t = k_{t−1})
        keep = self._not(self._op(k, self._scalar(_blank(self.node, classes), 2), ops.EQUAL,
                                  "is_blank"), "not_blank")
        if self.node.attrs["ctc_merge_repeated"]:
            repeat = self._op(k, self._previous(k, t_row, t_col), ops.EQUAL, "repeat")
            keep = self._op(keep, self._not(repeat, "new"), ops.AND, "keep")
        keep = ctx.cast(keep, self.trt.DataType.FLOAT, "keep_f")
        # j_t = Σ_{s≤t} keep_s − 1: keep (N, T) · [s ≤ t] (T, T)
        upper = self._float(self._not(self._op(t_col, t_row, ops.GREATER, "s_after_t"), "s_le_t"),
                            "triangle")
        slot = self._op(self._matmul(keep, upper, "count"), self._scalar(1, 2), ops.SUB, "slot")
        # onehot[n, t, j] = keep_t ∧ j_t = j   (N, T, T)
        hit = self._op(ctx.unsqueeze(slot, 2, "slot_col"), ctx.unsqueeze(t_row, 0, "j_row"),
                       ops.EQUAL, "at_slot")
        onehot = self._op(self._float(hit, "at_slot_f"), ctx.unsqueeze(keep, 2, "keep_col"),
                          ops.PROD, "onehot")
        # y[n, j] = Σ_t onehot[n, t, j]·(k_t + 1) − 1
        shifted = ctx.unsqueeze(self._op(k, self._scalar(1, 2), ops.SUM, "k_plus_1"), 1, "k_row")
        y = self._op(self._matmul(shifted, onehot, "placed"), self._scalar(1, 3), ops.SUB,
                     "labels")
        return ctx.unsqueeze(ctx.transpose(y, (0, 2, 1), "steps_first"), 3, "")

    def _positions(self, x):
        """t as a (1, T) row and a (T, 1) column of float32 (constants for a fixed T)."""
        ctx, steps = self.ctx, self.node.inputs[0].shape[0]
        if x.shape[0] >= 0:
            return (self._constant(np.arange(steps, dtype=np.float32)[None], "t_row"),
                    self._constant(np.arange(steps, dtype=np.float32)[:, None], "t_col"))
        trt = self.trt
        layer = ctx.network.add_fill((0,), trt.FillOperation.LINSPACE, trt.DataType.FLOAT)
        layer.set_input(0, ctx.concat_shape([1, ctx.dims(x, 0, 1)]))
        layer.set_input(1, self._constant(np.array(0.0, np.float32), "zero"))
        layer.set_input(2, self._constant(np.array([0.0, 1.0], np.float32), "step"))
        row = ctx.out(layer, "t_row")
        return row, ctx.transpose(row, (1, 0), "t_col")

    def _previous(self, k, t_row, t_col):
        """k_{t−1} (N, T), −1 at t = 0: k · [s = t − 1] minus [t = 0]."""
        ops = self.ops
        shift = self._float(self._op(t_col, self._op(t_row, self._scalar(1, 2), ops.SUB,
                                                     "t_minus_1"), ops.EQUAL, "s_is_t_minus_1"),
                            "shift")
        first = self._float(self._op(t_row, self._scalar(0, 2), ops.EQUAL, "t_is_0"), "first")
        return self._op(self._matmul(k, shift, "k_shifted"), first, ops.SUB, "k_prev")

    def _scalar(self, value: float, rank: int):
        return self._constant(np.full((1,) * rank, value, np.float32), "value")

    def _constant(self, array: np.ndarray, suffix: str):
        """A FLOAT constant whatever the network's float type (the labels stay float32)."""
        self.ctx.keep_alive.append(array)
        layer = self.ctx.network.add_constant(array.shape, self.trt.Weights(array))
        return self.ctx.out(layer, suffix)

    def _op(self, a, b, kind, suffix: str):
        return self.ctx.out(self.ctx.network.add_elementwise(a, b, kind), suffix)

    def _not(self, a, suffix: str):
        return self.ctx.out(self.ctx.network.add_unary(a, self.trt.UnaryOperation.NOT), suffix)

    def _float(self, a, suffix: str):
        return self.ctx.cast(a, self.trt.DataType.FLOAT, suffix)

    def _matmul(self, a, b, suffix: str):
        none = self.trt.MatrixOperation.NONE
        return self.ctx.out(self.ctx.network.add_matrix_multiply(a, none, b, none), suffix)


class _OnnxDecoder:
    """The same decoder in ONNX operators."""

    def __init__(self, ctx, node: Node) -> None:
        self.ctx, self.node = ctx, node

    def decode(self, x: str) -> str:
        ctx = self.ctx
        classes = self.node.inputs[0].shape[2]
        # k[t, n] = argmax_c x[t, n, c] (the first maximum), as (N, T) float32
        argmax = self._one("ArgMax", [x], "argmax", axis=2, keepdims=0, select_last_index=0)
        k = self._one("Transpose", [self._one("Cast", [argmax], "label", to=1)], "k", perm=[1, 0])
        t_row, t_col = self._positions(x)
        # keep_t = (k_t ≠ blank) ∧ ¬(merge ∧ k_t = k_{t−1})
        keep = self._one("Not", [self._one("Equal", [k, ctx.scalar(_blank(self.node, classes))],
                                           "is_blank")], "not_blank")
        if self.node.attrs["ctc_merge_repeated"]:
            repeat = self._one("Equal", [k, self._previous(k, t_row, t_col)], "repeat")
            keep = self._one("And", [keep, self._one("Not", [repeat], "new")], "keep")
        keep = self._one("Cast", [keep], "keep_f", to=1)
        # j_t = Σ_{s≤t} keep_s − 1: keep (N, T) · [s ≤ t] (T, T)
        upper = self._one("Cast", [self._one("Not", [self._one("Greater", [t_col, t_row],
                                                               "s_after_t")], "s_le_t")],
                          "triangle", to=1)
        slot = self._one("Sub", [self._one("MatMul", [keep, upper], "count"), ctx.scalar(1.0)],
                         "slot")
        # onehot[n, t, j] = keep_t ∧ j_t = j   (N, T, T)
        hit = self._one("Equal", [ctx.unsqueeze(slot, [2], "slot_col"), t_row], "at_slot")
        onehot = self._one("Mul", [self._one("Cast", [hit], "at_slot_f", to=1),
                                   ctx.unsqueeze(keep, [2], "keep_col")], "onehot")
        # y[n, j] = Σ_t onehot[n, t, j]·(k_t + 1) − 1
        shifted = ctx.unsqueeze(self._one("Add", [k, ctx.scalar(1.0)], "k_plus_1"), [1], "k_row")
        y = self._one("Sub", [self._one("MatMul", [shifted, onehot], "placed"), ctx.scalar(1.0)],
                      "labels")
        return ctx.unsqueeze(self._one("Transpose", [y], "steps_first", perm=[0, 2, 1]), [3])

    def _positions(self, x: str) -> tuple[str, str]:
        """t as a (1, T) row and a (T, 1) column of float32 (T read at run time if it varies)."""
        ctx = self.ctx
        (steps,) = ctx.dim_parts(x, self.node.inputs[0], [0])
        if isinstance(steps, int):
            return (ctx.constant(np.arange(steps, dtype=np.float32)[None], "t_row"),
                    ctx.constant(np.arange(steps, dtype=np.float32)[:, None], "t_col"))
        count = self._one("Cast", [ctx.squeeze(steps, [0], "steps")], "steps_f", to=1)
        t = self._one("Range", [ctx.scalar(0.0), count, ctx.scalar(1.0)], "t")
        return ctx.unsqueeze(t, [0], "t_row"), ctx.unsqueeze(t, [1], "t_col")

    def _previous(self, k: str, t_row: str, t_col: str) -> str:
        """k_{t−1} (N, T), −1 at t = 0: k · [s = t − 1] minus [t = 0]."""
        ctx = self.ctx
        shift = self._one("Cast", [self._one("Equal", [t_col, self._one(
            "Sub", [t_row, ctx.scalar(1.0)], "t_minus_1")], "s_is_t_minus_1")], "shift", to=1)
        first = self._one("Cast", [self._one("Equal", [t_row, ctx.scalar(0.0)], "t_is_0")],
                          "first", to=1)
        return self._one("Sub", [self._one("MatMul", [k, shift], "k_shifted"), first], "k_prev")

    def _one(self, op_type: str, inputs: list[str], suffix: str, **attrs) -> str:
        return self.ctx.add(op_type, inputs, suffix=suffix, **attrs)[0]
