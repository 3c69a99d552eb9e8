"""What an LSTM cell is, shared by its equations, its shape rules, the rewrite and the weight
layouts: the gate order, the variant of docs/recurrent-extensions.md and the weights by role."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from caffe_lstm.ir.graph import Node

#: The gate blocks along every 4H axis of Caffe's LSTM blobs, in order (lstm_unit_layer.cpp).
CAFFE_GATES = ("i", "f", "o", "g")
#: The rows of the peephole blob P (3, H), in order (docs/recurrent-extensions.md).
PEEPHOLE_GATES = ("i", "f", "o")
#: The gate blocks of ONNX's LSTM operator along its 4H axes, and the order of its peepholes P.
ONNX_GATES = ("i", "o", "f", "g")
ONNX_PEEPHOLES = ("i", "o", "f")
#: The values of the extension's enum RecurrentActivation.
RECURRENT_ACTIVATIONS = ("TANH", "SIGMOID", "RELU", "CLIPPED_RELU", "IDENTITY")


@dataclass(frozen=True)
class LstmVariant:
    """An LSTM cell's variant: the extension fields, each at its default unless set.

    With every field at its default the cell is exactly Caffe's LSTM.
    """

    candidate_activation: str = "TANH"  # g
    cell_activation: str = "TANH"  # h in m_t = o_t ⊙ h(c_t)
    relu_clip: float = 20.0  # κ of CLIPPED_RELU: min(max(x, 0), κ)
    peephole: bool = False  # adds P (3, H)
    num_proj: int = 0  # P > 0 adds W_hr (P, H); the recurrent output r is then P wide
    cell_clip: float = 0.0  # > 0: the stored cell is clamped to [−cell_clip, cell_clip]

    @staticmethod
    def of(node: Node) -> LstmVariant:
        """The variant of an LSTM node, from the fields its recurrent_param sets."""
        return LstmVariant(**node.attrs.get("extensions", {}))

    def recurrent_width(self, hidden: int) -> int:
        """R, the width of the recurrent output r: num_proj if set, else H."""
        return self.num_proj or hidden

    @property
    def recurrent_name(self) -> str:
        """The recurrent output's name: the spec's ``r`` with a projection, else Caffe's ``h``."""
        return "r" if self.num_proj else "h"

    @property
    def uses_clipped_relu(self) -> bool:
        return "CLIPPED_RELU" in (self.candidate_activation, self.cell_activation)


#: The extension's field names, in the spec's order.
EXTENSION_FIELDS = tuple(f.name for f in fields(LstmVariant))


class StaticInputWeights:
    """What a recurrent layer's weights with Caffe's static input share: W_xc (G, I) and
    W_xc_static (G, S) or None; other frameworks see x_static as columns joined to every x_t."""

    w_xc: object
    w_xc_static: object

    @property
    def static_size(self) -> int:
        return 0 if self.w_xc_static is None else self.w_xc_static.shape[1]

    def input_weights(self) -> np.ndarray:
        """(G, I + S): W_xc with W_xc_static's columns appended (x_static joins every x_t)."""
        if self.w_xc_static is None:
            return self.w_xc
        return np.concatenate([self.w_xc, self.w_xc_static], axis=1)


@dataclass(frozen=True, eq=False)
class LstmWeights(StaticInputWeights):
    """An LSTM's weights by role, as Caffe stores them (arrays, or the rewrite's weight Values);
    gate blocks i, f, o, g along every 4H axis. The one type the equations, the rewrite and the
    weight layouts share; each recurrent op's RecurrentSpec maps its blobs to it (``roles``) and
    back (``file_order``).

    Attributes:
        w_xc: (4H, I) input weights (the fork's W_x).
        b_c: (4H,) the one bias (the fork's b).
        w_hc: (4H, R) recurrent weights (R = num_proj with a projection, else H; the fork's W_h).
        w_xc_static: (4H, S) weights of the static input, or None.
        p: (3, H) peephole rows p_i, p_f, p_o, or None.
        w_hr: (P, H) the recurrent projection r_t = W_hr·m_t, or None.
    """

    w_xc: object
    b_c: object
    w_hc: object
    w_xc_static: object = None
    p: object = None
    w_hr: object = None

    @staticmethod
    def split(blobs: list, has_static: bool, variant: LstmVariant) -> LstmWeights:
        """Caffe's LSTM blobs in file order: W_xc, b_c, [W_xc_static], W_hc, [P], [W_hr]."""
        it = iter(blobs)
        w_xc, b_c = next(it), next(it)
        static = next(it) if has_static else None
        w_hc = next(it)
        p = next(it) if variant.peephole else None
        w_hr = next(it) if variant.num_proj else None
        return LstmWeights(w_xc, b_c, w_hc, static, p, w_hr)

    def in_file_order(self) -> list:
        """The inverse of ``split``: the blobs that are set, in Caffe's LSTM order."""
        ordered = [self.w_xc, self.b_c, self.w_xc_static, self.w_hc, self.p, self.w_hr]
        return [blob for blob in ordered if blob is not None]

    @staticmethod
    def from_input_weights(w_x: np.ndarray, b_c: np.ndarray, w_hc: np.ndarray, static_size: int,
                           p: np.ndarray | None = None,
                           w_hr: np.ndarray | None = None) -> LstmWeights:
        """The inverse of ``input_weights``: the last ``static_size`` columns are W_xc_static."""
        if static_size == 0:
            return LstmWeights(w_x, b_c, w_hc, None, p, w_hr)
        inputs = w_x.shape[1] - static_size
        return LstmWeights(w_x[:, :inputs], b_c, w_hc, w_x[:, inputs:], p, w_hr)


def permute_gates(array: np.ndarray, source: tuple[str, ...], target: tuple[str, ...],
                  axis: int = 0) -> np.ndarray:
    """A block permutation: the equal blocks of ``array`` along ``axis`` (named by ``source``)
    in ``target`` order. Whole H-wide blocks move, never single rows."""
    blocks = dict(zip(source, np.split(array, len(source), axis=axis)))
    return np.concatenate([blocks[name] for name in target], axis=axis)


def onnx_lstm_arrays(w: LstmWeights) -> dict[str, np.ndarray]:
    """The inputs of ONNX's LSTM node (one direction) for Caffe's weights ``w``: W (1, 4H, I+S)
    = W_xc [and W_xc_static], R (1, 4H, H) = W_hc, B (1, 8H) = [Wb = b_c, Rb = 0], and P
    (1, 3H) with peepholes, every gate axis in ONNX's order i, o, f, c. The one place this
    mapping lives: the ``onnx`` weight layout and ONNX's LSTM operator in the export use it."""
    bias = permute_gates(w.b_c, CAFFE_GATES, ONNX_GATES)
    arrays = {  # [None]: the num_directions axis
        "W": permute_gates(w.input_weights(), CAFFE_GATES, ONNX_GATES)[None],
        "R": permute_gates(w.w_hc, CAFFE_GATES, ONNX_GATES)[None],
        "B": np.concatenate([bias, np.zeros_like(bias)])[None],  # [Wb, Rb]
    }
    if w.p is not None:
        arrays["P"] = permute_gates(np.reshape(w.p, -1), PEEPHOLE_GATES, ONNX_PEEPHOLES)[None]
    return arrays
