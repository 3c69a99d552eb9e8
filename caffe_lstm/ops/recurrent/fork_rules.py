"""The shape rules of the forks' type "Lstm" (their Reshape), shared by the op (``layers``),
its rewrite and ONNX's operator (``native``).

Two readings of junhyukoh's schema (lstm_param.num_output), told apart per layer:

- rows, junhyukoh/caffe-lstm's own Reshape: N = batch_size (default 1), T = num / N,
  I = count / num; x is T·N rows (row t·N + n) of I values whatever its axes, the top is
  (T·N, H), and a clip holds T·N values with num == count (row t·N + n as x). It applies to a
  1-D or 2-D x, and to an x of more axes where the layer contradicts the time-major
  reading: a clip of x[0] values where a (T, N) clip would hold x[0]·x[1] (an x of shape
  (1, 256, 21, 1) with one clip value is one step of 5,376 features), or loaded W_x of
  count(x, 1) columns.
- time-major, the Reshape of caffe_ocr and CTPN (the same lstm_param, batch_size unread):
  x (T, N, ...) with I = count(2), top (T, N, H), clip (T, N). Every other x of 3 or more
  axes (where N = 1 and no clip the two differ only in the top's shape).

MyCaffe's LSTMSimple (a port of junhyukoh's layer) always reads rows. And
fanchenyou/deepdiary's (lstm_param.hidden_size): rows of width H, T = sequence_len + 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.recurrent.rules import (check_exact, check_num_output, check_top_count,
                                            check_x)
from caffe_lstm.ops.registry import count, get_op, shape_error


@dataclass(frozen=True)
class ForkView:
    """A fork Lstm's sizes: T, N, I, H, and whether x and the top are (T·N, …) rows."""

    steps: int
    batch: int
    inputs: int
    hidden: int
    flat: bool
    #: hidden_size's rows: T is fixed by sequence_len (N follows the rows), else N is fixed.
    time_fixed: bool = False

    def sequence_dims(self) -> list[int]:
        """Reshape dims taking the rows to (T, N, I), the fixed one of T and N spelled out."""
        if self.time_fixed:
            return [self.steps, -1, self.inputs]
        return [-1, self.batch, self.inputs]


def fork_view(node: Node, shapes: tuple[Shape, ...]) -> ForkView:
    """Checks the bottoms of either schema; returns its sizes."""
    if "hidden_size" in node.attrs:
        steps, batch, hidden = _hidden_size_layout(node, shapes)
        return ForkView(steps, batch, hidden, hidden, True, time_fixed=True)
    check_num_output(node, node.attrs["num_output"], "lstm_param")
    if len(shapes) not in (1, 2):
        raise shape_error(node, f"expected 1 or 2 bottoms (x, [clip]), found {len(shapes)}")
    check_top_count(node, 1, "h")
    if reads_rows(node, shapes):
        steps, batch, inputs = _rows_layout(node, shapes)
        return ForkView(steps, batch, inputs, node.attrs["num_output"], True)
    x = shapes[0]
    check_x(node, x)
    if len(shapes) == 2:
        check_exact(node, "clip", shapes[1], (x[0], x[1]))
    return ForkView(x[0], x[1], count(x, 2), node.attrs["num_output"], False)


def batch_size(node: Node) -> int:
    """lstm_param.batch_size as junhyukoh's Reshape reads it: 1 when the layer does not set it."""
    written = node.attrs.get("batch_size")
    return 1 if written is None else written


def reads_rows(node: Node, shapes: tuple[Shape, ...]) -> bool:
    """Whether junhyukoh's own Reshape applies (the module's rule): x has at most 2 axes, or
    the layer's clip or weights contradict the time-major reading of an x (T, N, ...): a clip
    of x[0] values (not x[0]·x[1]), or W_x loaded with count(x, 1) columns where time-major
    needs count(x, 2). (batch_size alone does not decide: caffe_ocr's and CTPN's nets write
    it too, and their layer ignores it.)"""
    x = shapes[0]
    if len(x) <= 2 or getattr(get_op(node.op), "rows_only", False):
        return True
    if len(shapes) == 2 and count(shapes[1]) == x[0] != x[0] * x[1]:
        return True
    w_x = node.weights[0].shape if node.weights else None
    return w_x is not None and len(w_x) == 2 and w_x[1] == count(x, 1) != count(x, 2)


def _rows_layout(node: Node, shapes: tuple[Shape, ...]) -> tuple[int, int, int]:
    """junhyukoh's Reshape: T = num / N, I = count / num; a clip of T·N values, num == count."""
    x, batch = shapes[0], batch_size(node)
    if batch <= 0:
        raise shape_error(node, f"batch_size is {batch}, expected > 0",
                          "set lstm_param.batch_size to the number of streams")
    if len(x) < 1 or x[0] < 1 or x[0] % batch:
        raise shape_error(
            node, f"x must be T·N rows with N = batch_size = {batch} (num a multiple of N), "
            f"found {tuple(x)}", "set lstm_param.batch_size to the number of streams")
    if len(shapes) == 2:
        clip = shapes[1]
        if count(clip) != x[0] or (len(clip) and clip[0] != count(clip)):
            raise shape_error(node, f"clip must hold T·N = {x[0]} values along its first axis "
                              f"(num == count), found shape {tuple(clip)}",
                              "junhyukoh's Lstm reads one clip value per row of x")
    return x[0] // batch, batch, count(x, 1)


def _hidden_size_layout(node: Node, shapes: tuple[Shape, ...]) -> tuple[int, int, int]:
    """The hidden_size schema (deepdiary's LayerSetUp): one bottom x (T·N, …) of width H,
    T = sequence_len + 1, N = rows / T; returns T, N, H."""
    hidden, steps = node.attrs["hidden_size"], node.attrs["sequence_len"] + 1
    if hidden <= 0:
        raise shape_error(node, f"hidden_size is {hidden}, expected > 0",
                          "set lstm_param.hidden_size")
    if len(shapes) != 1:
        raise shape_error(node, f"expected 1 bottom (x), found {len(shapes)}",
                          "the hidden_size Lstm has no clip bottom: each call starts from zeros")
    check_top_count(node, 1, "h")
    x = shapes[0]
    if len(x) < 2 or x[0] % steps or count(x, 1) != hidden:
        raise shape_error(node, f"x must be (T·N, H) with T = sequence_len + 1 = {steps} and H = "
                          f"hidden_size = {hidden}, found {tuple(x)}",
                          "this Lstm reads rows t·N + n as wide as its hidden state")
    return steps, x[0] // steps, hidden
