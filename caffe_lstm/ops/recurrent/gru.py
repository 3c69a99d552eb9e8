"""Caffe's GRU as foss-for-synopsys-dwc-arc-processors/synopsys-caffe@1f0101e writes it
(src/caffe/layers/gru_layer.cpp, FillUnrolledNet, on Caffe's RecurrentLayer): bottoms x, cont,
[x_static], [h_0 with expose_hidden]; recurrent_param num_output H, linear_before_reset,
activations (f, g as Caffe layer types, default Sigmoid, TanH). Per step, with
h̃_{t−1} = cont_t · h_{t−1} (the fork's h_conted, used everywhere below):

    [x_z | x_r | x_h] = W_xc·x_t + b_c [+ W_xc_static·x_static]
    z_t = f(x_z + R_z·h̃_{t−1}),  r_t = f(x_r + R_r·h̃_{t−1})
    linear_before_reset 0:  n_t = g(x_h + R_h·(r_t ⊙ h̃_{t−1}))             (ONNX's default)
    linear_before_reset 1:  n_t = g(x_h + r_t ⊙ (R_h·h̃_{t−1} + Rb_h))      (torch's form)
    h_t = n_t + z_t ⊙ (h̃_{t−1} − n_t)

Blobs (the unrolled net's params in order): W_xc (3H, I), b_c (3H), [W_xc_static (3H, S)],
R_z, R_r, R_h (H, H), [Rb_h (H) with linear_before_reset]. The x gate blocks are z, r, h.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.builder import COPY_DIM, NodeBuilder
from caffe_lstm.ops.recurrent.cell import StaticInputWeights
from caffe_lstm.ops.recurrent.cells import ACTIVATIONS, InnerProductGates, gru_step
from caffe_lstm.ops.recurrent.equations import (as_float32, initial_state, project_inputs,
                                                project_static, sigmoid, split_arrays)
from caffe_lstm.ops.recurrent.layers import RecurrentOp, in_file_order
from caffe_lstm.ops.recurrent.rules import (check_stack, has_static, one_state_tops,
                                            parse_recurrent, recurrent_layout,
                                            reject_extensions, write_recurrent)
from caffe_lstm.ops.registry import RecurrentSpec, register_op, shape_error

#: The gate blocks along W_xc's and b_c's 3H axis (the fork's wx_slice tops), and ONNX's order.
GRU_GATES = ("z", "r", "h")


@dataclass(frozen=True, eq=False)
class GruWeights(StaticInputWeights):
    """A GRU's weights by role, as the fork stores them (arrays, or the rewrite's Values).

    Attributes:
        w_xc: (3H, I) input weights, blocks z, r, h.  b_c: (3H,) their bias.
        r_z, r_r, r_h: (H, H) recurrent weights.   rb_h: (H,) the candidate's recurrent bias
        (linear_before_reset 1 only, else None).  w_xc_static: (3H, S) or None.
        linear_before_reset: the form (which layouts can hold it).
    """

    w_xc: Any
    b_c: Any
    r_z: Any
    r_r: Any
    r_h: Any
    rb_h: Any = None
    w_xc_static: Any = None
    linear_before_reset: bool = False

    @staticmethod
    def split(blobs: list, has_static: bool, linear_before_reset: bool) -> GruWeights:
        """The blobs in file order: W_xc, b_c, [W_xc_static], R_z, R_r, R_h, [Rb_h]."""
        it = iter(blobs)
        w_xc, b_c = next(it), next(it)
        static = next(it) if has_static else None
        r_z, r_r, r_h = next(it), next(it), next(it)
        rb_h = next(it) if linear_before_reset else None
        return GruWeights(w_xc, b_c, r_z, r_r, r_h, rb_h, static, linear_before_reset)

    def in_file_order(self) -> list:
        ordered = [self.w_xc, self.b_c, self.w_xc_static, self.r_z, self.r_r, self.r_h,
                   self.rb_h]
        return [blob for blob in ordered if blob is not None]

    def with_input_weights(self, w_x: np.ndarray, static_size: int) -> GruWeights:
        """The inverse of ``input_weights``: the last ``static_size`` columns are static."""
        if static_size == 0:
            return replace(self, w_xc=w_x, w_xc_static=None)
        inputs = w_x.shape[1] - static_size
        return replace(self, w_xc=w_x[:, :inputs], w_xc_static=w_x[:, inputs:])


def _form(node: Node) -> bool:
    return bool(node.attrs["linear_before_reset"])


def _activations(node: Node) -> tuple[str, str]:
    """(f, g): recurrent_param.activations, default Sigmoid and TanH (the fork's defaults)."""
    given = list(node.attrs.get("activations", []))
    return tuple(given[i] if len(given) > i else default
                 for i, default in enumerate(("Sigmoid", "TanH")))


def _layout(node: Node, shapes: tuple[Shape, ...]) -> tuple[int, int, int, int | None]:
    check_stack(node, shapes)
    reject_extensions(node)
    if node.attrs["linear_before_reset"] not in (0, 1):
        raise shape_error(node, "recurrent_param.linear_before_reset is "
                          f"{node.attrs['linear_before_reset']}", "use 0 (ONNX's default form) "
                          "or 1 (the reset after the recurrent product, torch's form)")
    for kind in (*node.attrs.get("activations", []),):
        if kind not in ACTIVATIONS:
            raise shape_error(node, f"recurrent_param.activations names {kind!r}",
                              f"use Caffe layer types: {', '.join(ACTIVATIONS)}")
    if len(node.attrs.get("activations", [])) > 2:
        raise shape_error(node, "recurrent_param.activations has more than 2 entries (f, g)",
                          "give the gate activation, then the candidate's")
    return recurrent_layout(node, shapes, (("h_0", node.attrs["num_output"]),))


def _activate(kind: str, x: np.ndarray) -> np.ndarray:
    if kind == "Sigmoid":
        return sigmoid(x)
    if kind == "TanH":
        return np.tanh(x)
    return np.maximum(x, 0.0)  # ReLU


def gru_steps(x_proj: np.ndarray, cont: np.ndarray, h: np.ndarray, w: GruWeights,
              activations: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """All T steps from h_0 (N, H), float64: returns the stacked h (T, N, H) and h_T."""
    f, g = activations
    outputs = []
    for x_t, cont_t in zip(x_proj, cont):
        # h̃_{t−1} = cont_t · h_{t−1}
        h_conted = cont_t[:, None] * h
        x_z, x_r, x_h = np.split(x_t, 3, axis=-1)
        # z_t = f(x_z + R_z·h̃), r_t = f(x_r + R_r·h̃)
        z = _activate(f, x_z + h_conted @ w.r_z.T)
        r = _activate(f, x_r + h_conted @ w.r_r.T)
        if w.linear_before_reset:
            # n_t = g(x_h + r_t ⊙ (R_h·h̃ + Rb_h))
            n = _activate(g, x_h + r * (h_conted @ w.r_h.T + w.rb_h))
        else:
            # n_t = g(x_h + R_h·(r_t ⊙ h̃))
            n = _activate(g, x_h + (r * h_conted) @ w.r_h.T)
        # h_t = n_t + z_t ⊙ (h̃ − n_t)
        h = n + z * (h_conted - n)
        outputs.append(h)
    return np.stack(outputs), h


def _expand(b: NodeBuilder, node: Node) -> None:
    """The input projection (and the static one) before the loop; one step of gru_step with
    inner-product gates (R_z, R_r on h̃; R_h [+ Rb_h] for the candidate) inside."""
    x, cont, *rest = node.inputs
    exposed = rest[-1:] if node.attrs["expose_hidden"] else []
    x_static = rest[0] if len(rest) > len(exposed) else None
    w = GruWeights.split(node.weights, x_static is not None, _form(node))
    hidden = node.attrs["num_output"]
    # W_xc_x = x · W_xcᵀ + b_c, all T steps at once   (T, N, 3H)
    x_proj = b.inner_product("x_transform", x, w.w_xc, w.b_c, top="W_xc_x")
    static = None
    if x_static is not None:
        # W_xc_x_static = x_static · W_xc_staticᵀ as (1, N, 3H)
        projected = b.inner_product("W_xc_x_static_preshape", x_static, w.w_xc_static, axis=1)
        static = b.reshape("W_xc_x_static", projected, [1, -1, w.w_xc_static.shape[0]])
    s = b.step()
    x_t, cont_t = s.sequence(x_proj, "W_xc_x_t"), s.sequence(cont, "cont_t")
    # h_conted = cont_t · h_{t−1}
    h = s.state("h", (COPY_DIM, hidden), exposed[0] if exposed else None, cont_t)
    if static is not None:
        x_t = s.eltwise("XW_X_static", "SUM", x_t, s.invariant(static, "W_xc_x_static"))
    f, g = _activations(node)
    h_t = gru_step(s, x_t, h, [InnerProductGates(w.r_z), InnerProductGates(w.r_r)],
                   InnerProductGates(w.r_h, w.rb_h), order=GRU_GATES,
                   linear_before_reset=_form(node), gate_activation=f, candidate_activation=g)
    s.update("h", h_t)
    s.output(h_t)
    b.loop(s, [node.outputs[0]], list(node.outputs[1:]) if exposed else None)


def _roles(node: Node, blobs: list) -> GruWeights:
    """The blobs (W_xc, b_c, [W_xc_static], R_z, R_r, R_h, [Rb_h]) by role."""
    return GruWeights.split(list(blobs), has_static(node, 1), _form(node))


def _widths(node: Node) -> tuple[int, ...]:
    return (node.attrs["num_output"],)


@register_op
class GRU(RecurrentOp):
    """The GRU of synopsys-caffe (gru_layer.cpp) over T steps; see the module's equations.

    Bottoms x (T, N, ...), cont (T, N), [x_static (N, ...)], [h_0 (1, N, H)]; tops h
    (T, N, H) [, h_T (1, N, H)]. Without expose_hidden each call starts from zeros.
    """

    type = "GRU"
    origin = ("foss-for-synopsys-dwc-arc-processors/synopsys-caffe@1f0101e (gru_layer.cpp "
              "FillUnrolledNet)")
    limits = ("recurrent_param's tf_rnn, direction, continue_recur, default_initial and "
              "activation_alpha/beta are not read; activations: Sigmoid, TanH or ReLU; "
              "wss321/video-caffe@404110e's GRU (gru_param, no cont, blobs W_zr_x, W_zr_h, "
              "W_om, W_ox, b_zr, b_o; the reset before W_om) is not read: its Forward_cpu adds "
              "batch row 0's W_om·(r ⊙ h) to every row and reads W_ox, an (H, H) blob, as "
              "(H, I)")
    recurrent = RecurrentSpec(states=("h",), widths=_widths, roles=_roles,
                              file_order=in_file_order)
    onnx_missing_reason = "expanded by the recurrent rewrite first (run the default pipeline)"
    expand = staticmethod(_expand)

    @staticmethod
    def parse(ctx, p):
        return {**parse_recurrent(p), "linear_before_reset": p.linear_before_reset,
                "activations": list(p.activations)}

    @staticmethod
    def caffe(ctx, node: Node) -> dict[str, Any]:
        fields = write_recurrent(node)
        if not fields.get("activations"):
            fields.pop("activations", None)
        return fields

    @staticmethod
    def infer(ctx, node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        steps, batch, _, _ = _layout(node, shapes)
        return one_state_tops(node, steps, batch, "h")

    @staticmethod
    def blobs(ctx, node: Node, *shapes: Shape) -> tuple[tuple[str, Shape], ...]:
        _, _, inputs, static = _layout(node, shapes)
        hidden = node.attrs["num_output"]
        gates = len(GRU_GATES) * hidden
        static_blob = (("W_xc_static", (gates, static)),) if static is not None else ()
        bias = (("Rb_h", (hidden,)),) if _form(node) else ()
        return (("W_xc", (gates, inputs)), ("b_c", (gates,)), *static_blob,
                ("R_z", (hidden, hidden)), ("R_r", (hidden, hidden)), ("R_h", (hidden, hidden)),
                *bias)

    @staticmethod
    def numpy(ctx, node: Node, *arrays):
        x, cont, x_static, exposed, blobs = split_arrays(node, arrays, 1)
        w = GruWeights.split(blobs, x_static is not None, _form(node))
        # W_xc_x_t + W_xc_x_static: the static term is the same at every step
        x_proj = project_inputs(x, w.w_xc, w.b_c) + project_static(x_static, w.w_xc_static)
        h_0 = initial_state(exposed, 0, x.shape[1], node.attrs["num_output"])
        h, h_last = gru_steps(x_proj, cont, h_0, w, _activations(node))
        if node.attrs["expose_hidden"]:
            return as_float32(h, h_last[None])
        return as_float32(h)



__all__ = ["GRU", "GRU_GATES", "GruWeights", "gru_steps"]
