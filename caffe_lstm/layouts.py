"""One LSTM layer's weights in other frameworks' layouts: export from Caffe's blobs, and back.

Each layout is a small class named after the framework: ``export(blobs)`` gives the arrays the
framework stores, under its own names, and ``import_(arrays)`` is its exact inverse (a round trip
gives Caffe's blobs back bit for bit); ``import_arrays`` checks names and shapes first.

H = hidden size (num_output), I = input size, R = recurrent width (P with a projection, else H).
The candidate gate is g (Caffe's name); cuDNN, Keras and ONNX call it c, TensorFlow j.

===========  =======  ==========================  ========================  =============  =======
layout       gates    weights                     biases                    peepholes      proj.
===========  =======  ==========================  ========================  =============  =======
caffe        i f o g  out x in                    one                       rows i f o     P x H
pytorch      i f g o  out x in                    two (input, recurrent)    none           P x H
onnx         i o f g  out x in, direction axis    two, in one B = [Wb, Rb]  order i o f    none
keras        i f g o  in x out                    one                       none           none
keras-cudnn  i f g o  C-order reshape, see below  two, in one bias          none           none
cudnn        i f g o  out x in, one per gate      two per gate              none           P x H
tf           i g f o  in x out, [x; r] stacked    one (+ forget_bias)       one per gate   H x P
===========  =======  ==========================  ========================  =============  =======

The arrays (gate blocks stacked along the 4H axis in the layout's order):

- caffe: W_xc (4H, I), b_c (4H), [W_xc_static (4H, S)], W_hc (4H, R), [P (3, H)], [W_hr (P, H)].
- pytorch: weight_ih_l0 (4H, I), weight_hh_l0 (4H, R), bias_ih_l0, bias_hh_l0 (4H),
  [weight_hr_l0 (P, H)]: ``torch.nn.LSTM(I, H[, proj_size=P])``'s state_dict.
- onnx: W (1, 4H, I), R (1, 4H, H), B (1, 8H), [P (1, 3H)]: the LSTM node's inputs.
- keras: kernel (I, 4H), recurrent_kernel (H, 4H), bias (4H); y = x · kernel.
- keras-cudnn (legacy CuDNNLSTM): kernel (I, 4H), recurrent_kernel (H, 4H), bias (8H). cuDNN
  reads kernel block k (I, H) in C order as its row-major (H, I) matrix: a reshape, not a
  transpose; each recurrent_kernel block is cuDNN's (H, H) matrix as it is.
- cudnn: W_i W_f W_c W_o (H, I) and R_i R_f R_c R_o (H, R) (linLayerID 0-7), b_Wi .. b_Wo and
  b_Ri .. b_Ro (H), [W_proj (P, H)] (linLayerID 8).
- tf (LSTMCell, LSTMBlockCell): kernel (I + R, 4H) applied to [x, r], bias (4H), [w_i_diag,
  w_f_diag, w_o_diag (H)], [projection/kernel (H, P)] (LSTMCell only; r = m · it).

Two-bias layouts get b_c on the input (W) side and zeros on the recurrent (R) side; import sums
the two, since inference sees only the sum. TensorFlow adds the cell's ``forget_bias`` (default
1.0) to the f gate at run time, outside ``bias``: build the cell with ``forget_bias=0.0``.
Caffe's static input (x_static, W_xc_static (4H, S)) has no counterpart in any framework: its
columns are appended to the input weights, as if x_static were concatenated to every step's x,
and ``static_size`` splits them off again on import.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import ClassVar
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from caffe_lstm.errors import CaffeLstmError, ModelLoadError
from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.ops import recurrent_spec
from caffe_lstm.ops.recurrent import CAFFE_GATES, PEEPHOLE_GATES, LstmWeights
from caffe_lstm.ops.recurrent.cell import ONNX_GATES, ONNX_PEEPHOLES, onnx_lstm_arrays
from caffe_lstm.ops.recurrent.gru import GRU_GATES, GruWeights


class LayoutError(CaffeLstmError):
    """Weights that a layout cannot hold, or arrays that do not fit the layer."""


# ---- the blobs of a Caffe layer, in the layer's own order -------------------------------------


def layer_weights(node: Node, arrays: Sequence[np.ndarray]) -> LstmWeights:
    """A recurrent layer's blobs in file order, by role (its RecurrentSpec's ``roles``)."""
    return recurrent_spec(node.op).roles(node, list(arrays))


def layer_arrays(node: Node, weights: LstmWeights) -> list[np.ndarray]:
    """The inverse of ``layer_weights``: the blobs in the layer's file order."""
    return recurrent_spec(node.op).file_order(node, weights)


# ---- helpers shared by the layouts ------------------------------------------------------------


def _blocks(array: np.ndarray, order: Sequence[str], axis: int = 0) -> dict[str, np.ndarray]:
    """The equal blocks of ``array`` along ``axis``, by name (``order`` names them in order)."""
    return dict(zip(order, np.split(array, len(order), axis=axis)))


def _permute(array: np.ndarray, source: Sequence[str], target: Sequence[str],
             axis: int = 0) -> np.ndarray:
    """A block permutation: the blocks of ``array`` (named by ``source``) in ``target`` order.

    Whole H-wide blocks move, never single rows.
    """
    blocks = _blocks(array, source, axis)
    return np.concatenate([blocks[name] for name in target], axis=axis)


def _float32(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Exported arrays: contiguous float32 each."""
    return {name: np.ascontiguousarray(array, np.float32) for name, array in arrays.items()}


def _sum_biases(input_side: np.ndarray, recurrent_side: np.ndarray) -> np.ndarray:
    """b_W + b_R. Where b_R is exactly 0 the input side is kept as it is, bit for bit (a -0.0
    of Caffe's b_c survives export and import; the value is the same either way)."""
    return np.where(recurrent_side == 0, input_side, input_side + recurrent_side)


# ---- the layouts ------------------------------------------------------------------------------


class Layout(ABC):
    """A framework's arrays for one LSTM layer. Subclasses set the attributes and define
    ``_export`` / ``_import``; ``export`` and ``import_`` add the checks and float32."""

    name: ClassVar[str] = ""
    #: The gate blocks along the framework's 4H axis, in order.
    gates: ClassVar[tuple[str, ...]] = ()
    #: Whether the framework has diagonal peepholes / a recurrent projection.
    peephole: ClassVar[bool] = False
    projection: ClassVar[bool] = False

    @classmethod
    def export(cls, blobs: LstmWeights) -> dict[str, np.ndarray]:
        """The arrays the framework stores for ``blobs``, under its own names.

        Raises:
            LayoutError: the layer has peepholes or a projection and the framework has none.
        """
        _check_variant(cls, blobs)
        return _float32(cls._export(blobs))

    @classmethod
    def import_(cls, arrays: Mapping[str, np.ndarray], static_size: int = 0) -> LstmWeights:
        """Caffe's blobs from the framework's arrays (names and shapes as ``export`` gives them;
        ``import_arrays`` checks them). The last ``static_size`` input columns are W_xc_static."""
        return cls._import({name: np.asarray(a, np.float32) for name, a in arrays.items()},
                           static_size)

    @classmethod
    @abstractmethod
    def _export(cls, blobs: LstmWeights) -> dict[str, np.ndarray]:
        """The framework's arrays (each layout defines it)."""

    @classmethod
    @abstractmethod
    def _import(cls, arrays: dict[str, np.ndarray], static_size: int) -> LstmWeights:
        """Caffe's blobs from checked arrays (each layout defines it)."""


#: The optional parts of a layer: the Layout flag that says a layout has it, and its name.
_VARIANT_PARTS = (("peephole", "peephole connections (peephole: true)"),
                  ("projection", "recurrent projection (num_proj > 0)"))


def _check_variant(layout: type[Layout], blobs: LstmWeights) -> None:
    """Peepholes and projections go only to layouts that have them."""
    present = {"peephole": blobs.p is not None, "projection": blobs.w_hr is not None}
    needed = [flag for flag, _ in _VARIANT_PARTS if present[flag]]
    lacking = [what for flag, what in _VARIANT_PARTS if flag in needed
               and not getattr(layout, flag)]
    if lacking:
        able = [name for name, other in LAYOUTS.items()
                if all(getattr(other, flag) for flag in needed)]
        raise LayoutError(f"layout '{layout.name}' has no place for the layer's "
                          f"{' and '.join(lacking)}", "",
                          f"choose a layout that holds every part of this layer: "
                          f"{', '.join(able)}")


class Caffe(Layout):
    """Caffe's own blobs under the spec's blob names (W_xc, b_c, W_xc_static, W_hc, P, W_hr)."""

    name, gates, peephole, projection = "caffe", CAFFE_GATES, True, True

    @classmethod
    def _export(cls, blobs):
        named = {"W_xc": blobs.w_xc, "b_c": blobs.b_c, "W_xc_static": blobs.w_xc_static,
                 "W_hc": blobs.w_hc, "P": blobs.p, "W_hr": blobs.w_hr}
        return {name: array for name, array in named.items() if array is not None}

    @classmethod
    def _import(cls, arrays, static_size):
        return LstmWeights(arrays["W_xc"], arrays["b_c"], arrays["W_hc"],
                           arrays.get("W_xc_static"), arrays.get("P"), arrays.get("W_hr"))


class PyTorch(Layout):
    """``torch.nn.LSTM(I, H[, proj_size=P])``'s state_dict for one layer and direction."""

    name, gates, projection = "pytorch", ("i", "f", "g", "o"), True

    @classmethod
    def _export(cls, blobs):
        arrays = {
            "weight_ih_l0": _permute(blobs.input_weights(), CAFFE_GATES, cls.gates),
            "weight_hh_l0": _permute(blobs.w_hc, CAFFE_GATES, cls.gates),
            "bias_ih_l0": _permute(blobs.b_c, CAFFE_GATES, cls.gates),
            "bias_hh_l0": np.zeros_like(blobs.b_c),
        }
        if blobs.w_hr is not None:
            arrays["weight_hr_l0"] = blobs.w_hr  # (P, H), r = W_hr·m: Caffe's own orientation
        return arrays

    @classmethod
    def _import(cls, arrays, static_size):
        bias = _sum_biases(arrays["bias_ih_l0"], arrays["bias_hh_l0"])
        return LstmWeights.from_input_weights(
            _permute(arrays["weight_ih_l0"], cls.gates, CAFFE_GATES),
            _permute(bias, cls.gates, CAFFE_GATES),
            _permute(arrays["weight_hh_l0"], cls.gates, CAFFE_GATES),
            static_size, w_hr=arrays.get("weight_hr_l0"))


class Onnx(Layout):
    """The initializers of an ONNX ``LSTM`` node (one direction): W, R, B and optional P."""

    name, gates, peephole = "onnx", ONNX_GATES, True
    #: The order of the peephole vectors in P.
    peepholes: ClassVar[tuple[str, ...]] = ONNX_PEEPHOLES

    @classmethod
    def _export(cls, blobs):
        # the arrays that ``export --lstm-op native`` gives its LSTM node too
        return onnx_lstm_arrays(blobs)

    @classmethod
    def _import(cls, arrays, static_size):
        w_bias, r_bias = np.split(arrays["B"][0], 2)
        peephole = None
        if "P" in arrays:
            rows = _permute(arrays["P"][0], cls.peepholes, PEEPHOLE_GATES)
            peephole = rows.reshape(len(PEEPHOLE_GATES), -1)
        return LstmWeights.from_input_weights(
            _permute(arrays["W"][0], cls.gates, CAFFE_GATES),
            _permute(_sum_biases(w_bias, r_bias), cls.gates, CAFFE_GATES),
            _permute(arrays["R"][0], cls.gates, CAFFE_GATES),
            static_size, peephole)


class Keras(Layout):
    """``keras.layers.LSTM``'s weights: kernel, recurrent_kernel, bias (use_bias=True)."""

    name, gates = "keras", ("i", "f", "g", "o")

    @classmethod
    def _export(cls, blobs):
        # y = x · kernel: in x out, so each permuted out x in matrix is transposed
        return {"kernel": _permute(blobs.input_weights(), CAFFE_GATES, cls.gates).T,
                "recurrent_kernel": _permute(blobs.w_hc, CAFFE_GATES, cls.gates).T,
                "bias": _permute(blobs.b_c, CAFFE_GATES, cls.gates)}

    @classmethod
    def _import(cls, arrays, static_size):
        return LstmWeights.from_input_weights(
            _permute(arrays["kernel"].T, cls.gates, CAFFE_GATES),
            _permute(arrays["bias"], cls.gates, CAFFE_GATES),
            _permute(arrays["recurrent_kernel"].T, cls.gates, CAFFE_GATES), static_size)


class KerasCudnn(Layout):
    """The legacy ``CuDNNLSTM``'s weights: kernel, recurrent_kernel, bias (8H).

    Its gate blocks go to cuDNN flattened, not transposed: cuDNN reads the C-order values of
    kernel block k (I, H) as its row-major (H, I) matrix W_k, and recurrent_kernel block k as
    R_k (H_out, H_in) unchanged. At H = 1 both coincide with transposes, so only H >= 2 tells
    this layout from ``keras`` (peers.md §1.6).
    """

    name, gates = "keras-cudnn", ("i", "f", "g", "o")

    @classmethod
    def _export(cls, blobs):
        w_x = _blocks(blobs.input_weights(), CAFFE_GATES)
        w_h = _blocks(blobs.w_hc, CAFFE_GATES)
        bias = _permute(blobs.b_c, CAFFE_GATES, cls.gates)
        return {
            "kernel": np.hstack([w_x[g].reshape(w_x[g].shape[::-1]) for g in cls.gates]),
            "recurrent_kernel": np.hstack([w_h[g] for g in cls.gates]),
            "bias": np.concatenate([bias, np.zeros_like(bias)]),  # [input side, recurrent side]
        }

    @classmethod
    def _import(cls, arrays, static_size):
        kernel = _blocks(arrays["kernel"], cls.gates, axis=1)
        w_x = {g: block.reshape(block.shape[::-1]) for g, block in kernel.items()}
        w_h = _blocks(arrays["recurrent_kernel"], cls.gates, axis=1)
        w_bias, r_bias = np.split(arrays["bias"], 2)
        return LstmWeights.from_input_weights(
            np.concatenate([w_x[g] for g in CAFFE_GATES]),
            _permute(_sum_biases(w_bias, r_bias), cls.gates, CAFFE_GATES),
            np.concatenate([w_h[g] for g in CAFFE_GATES]), static_size)


class Cudnn(Layout):
    """cuDNN's canonical LSTM parameters: one matrix and two biases per gate (linLayerID 0-7:
    input side i, f, c, o, then recurrent side), and the projection (linLayerID 8)."""

    name, gates, projection = "cudnn", ("i", "f", "g", "o"), True
    #: cuDNN's letter for each gate in the array names ("c" is the candidate).
    letters: ClassVar[dict[str, str]] = {"i": "i", "f": "f", "g": "c", "o": "o"}

    @classmethod
    def _export(cls, blobs):
        w_x, w_h = _blocks(blobs.input_weights(), CAFFE_GATES), _blocks(blobs.w_hc, CAFFE_GATES)
        bias = _blocks(blobs.b_c, CAFFE_GATES)
        arrays = {f"W_{cls.letters[g]}": w_x[g] for g in cls.gates}
        arrays |= {f"R_{cls.letters[g]}": w_h[g] for g in cls.gates}
        arrays |= {f"b_W{cls.letters[g]}": bias[g] for g in cls.gates}
        arrays |= {f"b_R{cls.letters[g]}": np.zeros_like(bias[g]) for g in cls.gates}
        if blobs.w_hr is not None:
            arrays["W_proj"] = blobs.w_hr  # (P, H), r = W_proj·m
        return arrays

    @classmethod
    def _import(cls, arrays, static_size):
        def stacked(prefix: str) -> np.ndarray:
            return np.concatenate([arrays[f"{prefix}{cls.letters[g]}"] for g in CAFFE_GATES])

        return LstmWeights.from_input_weights(
            stacked("W_"), _sum_biases(stacked("b_W"), stacked("b_R")), stacked("R_"),
            static_size, w_hr=arrays.get("W_proj"))


class TensorFlow(Layout):
    """TF1 ``LSTMCell`` / ``LSTMBlockCell`` variables: kernel on [x, r], bias, peepholes
    w_i_diag / w_f_diag / w_o_diag, LSTMCell's projection/kernel. The cell must be built with
    ``forget_bias=0.0``: TF adds forget_bias to the f gate at run time, outside ``bias``."""

    name, gates, peephole, projection = "tf", ("i", "g", "f", "o"), True, True
    peephole_names: ClassVar[dict[str, str]] = {"i": "w_i_diag", "f": "w_f_diag",
                                                "o": "w_o_diag"}

    @classmethod
    def _export(cls, blobs):
        # [x, r] · kernel: in x out, the x rows first, then the recurrent rows
        w_x = _permute(blobs.input_weights(), CAFFE_GATES, cls.gates).T
        w_r = _permute(blobs.w_hc, CAFFE_GATES, cls.gates).T
        arrays = {"kernel": np.vstack([w_x, w_r]),
                  "bias": _permute(blobs.b_c, CAFFE_GATES, cls.gates)}
        if blobs.p is not None:
            arrays |= {cls.peephole_names[g]: row
                       for g, row in zip(PEEPHOLE_GATES, blobs.p)}
        if blobs.w_hr is not None:
            arrays["projection/kernel"] = blobs.w_hr.T  # (H, P): r = m · proj_kernel
        return arrays

    @classmethod
    def _import(cls, arrays, static_size):
        bias = arrays["bias"]
        w_hr = arrays["projection/kernel"].T if "projection/kernel" in arrays else None
        recurrent = w_hr.shape[0] if w_hr is not None else bias.shape[0] // len(cls.gates)
        kernel = arrays["kernel"]
        w_x, w_r = kernel[:kernel.shape[0] - recurrent], kernel[kernel.shape[0] - recurrent:]
        peephole = None
        if cls.peephole_names["i"] in arrays:
            peephole = np.stack([arrays[cls.peephole_names[g]] for g in PEEPHOLE_GATES])
        return LstmWeights.from_input_weights(
            _permute(w_x.T, cls.gates, CAFFE_GATES), _permute(bias, cls.gates, CAFFE_GATES),
            _permute(w_r.T, cls.gates, CAFFE_GATES), static_size, peephole, w_hr)


#: Every layout by its CLI name.
LAYOUTS: dict[str, type[Layout]] = {
    layout.name: layout for layout in (Caffe, PyTorch, Onnx, Keras, KerasCudnn, Cudnn, TensorFlow)
}


def import_arrays(layout: type[Layout], arrays: Mapping[str, np.ndarray],
                  template: LstmWeights) -> LstmWeights:
    """Caffe's blobs from ``arrays``, checked against what ``layout`` exports for a layer shaped
    like ``template`` (its values are not used).

    Raises:
        LayoutError: missing, unexpected, non-numeric or mis-shaped arrays (all listed at
            once), or a peephole/projection layer with a layout that has neither.
    """
    expected = {name: array.shape for name, array in layout.export(template).items()}
    problems = []
    missing = [name for name in expected if name not in arrays]
    unexpected = [name for name in arrays if name not in expected]
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if unexpected:
        problems.append(f"unexpected {', '.join(unexpected)}")
    for name in [name for name in expected if name in arrays]:
        array = np.asarray(arrays[name])
        if array.dtype.kind not in "fiu":
            problems.append(f"{name} holds {array.dtype} values, not numbers")
        elif array.shape != expected[name]:
            problems.append(f"{name} has shape {array.shape}, expected {expected[name]}")
    if problems:
        wanted = ", ".join(f"{name} {shape}" for name, shape in expected.items())
        raise LayoutError(f"the arrays do not fit layout '{layout.name}': {'; '.join(problems)}",
                          "", f"expected exactly: {wanted}")
    if isinstance(template, GruWeights):
        return layout.import_(arrays, template)
    return layout.import_(arrays, template.static_size)


# ---- a GRU's layouts ---------------------------------------------------------------------------
#
# caffe    W_xc (3H, I), b_c (3H), [W_xc_static (3H, S)], R_z, R_r, R_h (H, H), [Rb_h (H)]
# onnx     W (1, 3H, I + S), R (1, 3H, H), B (1, 6H) = [Wb, Rb]: the GRU node's inputs, gates
#          z, r, h; its linear_before_reset attribute is the layer's
# pytorch  weight_ih_l0 (3H, I + S), weight_hh_l0 (3H, H), bias_ih_l0, bias_hh_l0 (3H): the
#          state_dict of torch.nn.GRU, gates r, z, n; torch's form only (linear_before_reset 1)
# keras    kernel (I + S, 3H), recurrent_kernel (H, 3H), gates z, r, h; bias (2, 3H) with
#          reset_after=True (linear_before_reset 1), (3H,) with reset_after=False (0)
#
# Caffe's one bias b_c goes to the input side; the recurrent side holds Rb_h (its h block) and
# zeros; import sums what inference only sees summed (z and r's two biases).


class GruLayout(ABC):
    """A framework's arrays for one GRU layer; ``export`` and ``import_`` are exact inverses."""

    name: ClassVar[str] = ""
    #: The linear_before_reset values the framework's GRU computes.
    forms: ClassVar[tuple[int, ...]] = (0, 1)
    #: What the framework's GRU is, for the refusal of the other form.
    what: ClassVar[str] = ""

    @classmethod
    def export(cls, w: GruWeights) -> dict[str, np.ndarray]:
        cls._check_form(w)
        return _float32(cls._export(w))

    @classmethod
    def import_(cls, arrays: Mapping[str, np.ndarray], template: GruWeights) -> GruWeights:
        cls._check_form(template)
        return cls._import({name: np.asarray(a, np.float32) for name, a in arrays.items()},
                           template)

    @classmethod
    def _check_form(cls, w: GruWeights) -> None:
        form = int(w.linear_before_reset)
        if form not in cls.forms:
            raise LayoutError(
                f"layout '{cls.name}' holds {cls.what}, which cannot compute this layer's "
                f"recurrent_param.linear_before_reset {form}", "",
                "use layout onnx or keras (both forms), or caffe")

    @classmethod
    @abstractmethod
    def _export(cls, w: GruWeights) -> dict[str, np.ndarray]:
        """The framework's arrays (each layout defines it)."""

    @classmethod
    @abstractmethod
    def _import(cls, arrays: dict[str, np.ndarray], template: GruWeights) -> GruWeights:
        """The blobs from checked arrays (each layout defines it)."""


def _gru_recurrent(w: GruWeights, order: Sequence[str]) -> np.ndarray:
    blocks = {"z": w.r_z, "r": w.r_r, "h": w.r_h}
    return np.concatenate([blocks[gate] for gate in order])


def _gru_recurrent_bias(w: GruWeights) -> np.ndarray:
    """The recurrent side's bias, blocks z, r, h: zeros, zeros, Rb_h (or zeros)."""
    hidden = w.r_h.shape[0]
    rb_h = w.rb_h if w.rb_h is not None else np.zeros(hidden, np.float32)
    return np.concatenate([np.zeros(2 * hidden, np.float32), rb_h])


def _gru_from(template: GruWeights, w_x: np.ndarray, input_bias: np.ndarray,
              recurrent: np.ndarray, recurrent_bias: np.ndarray) -> GruWeights:
    """The blobs from the input weights and both biases (blocks z, r, h) and R (z, r, h)."""
    hidden = template.r_h.shape[0]
    r_z, r_r, r_h = np.split(recurrent, 3)
    if template.linear_before_reset:  # Rb_h stays apart, inside r ⊙ (...)
        rb_h, summed = recurrent_bias[2 * hidden:], np.concatenate(
            [recurrent_bias[:2 * hidden], np.zeros(hidden, np.float32)])
    else:
        rb_h, summed = None, recurrent_bias
    w = replace(template, b_c=_sum_biases(input_bias, summed), r_z=r_z, r_r=r_r, r_h=r_h,
                rb_h=rb_h)
    return w.with_input_weights(w_x, template.static_size)


class GruCaffe(GruLayout):
    name = "caffe"

    @classmethod
    def _export(cls, w):
        arrays = {"W_xc": w.w_xc, "b_c": w.b_c, "W_xc_static": w.w_xc_static, "R_z": w.r_z,
                  "R_r": w.r_r, "R_h": w.r_h, "Rb_h": w.rb_h}
        return {name: array for name, array in arrays.items() if array is not None}

    @classmethod
    def _import(cls, arrays, template):
        return replace(template, w_xc=arrays["W_xc"], b_c=arrays["b_c"],
                       w_xc_static=arrays.get("W_xc_static"), r_z=arrays["R_z"],
                       r_r=arrays["R_r"], r_h=arrays["R_h"], rb_h=arrays.get("Rb_h"))


class GruOnnx(GruLayout):
    name = "onnx"

    @classmethod
    def _export(cls, w):
        bias = np.concatenate([w.b_c, _gru_recurrent_bias(w)])
        return {"W": w.input_weights()[None], "R": _gru_recurrent(w, GRU_GATES)[None],
                "B": bias[None]}

    @classmethod
    def _import(cls, arrays, template):
        input_bias, recurrent_bias = np.split(arrays["B"][0], 2)
        return _gru_from(template, arrays["W"][0], input_bias, arrays["R"][0], recurrent_bias)


class GruPyTorch(GruLayout):
    name, forms, what = "pytorch", (1,), "torch.nn.GRU (the reset after the recurrent product)"
    gates = ("r", "z", "h")

    @classmethod
    def _export(cls, w):
        return {"weight_ih_l0": _permute(w.input_weights(), GRU_GATES, cls.gates),
                "weight_hh_l0": _gru_recurrent(w, cls.gates),
                "bias_ih_l0": _permute(w.b_c, GRU_GATES, cls.gates),
                "bias_hh_l0": _permute(_gru_recurrent_bias(w), GRU_GATES, cls.gates)}

    @classmethod
    def _import(cls, arrays, template):
        def ours(name: str) -> np.ndarray:
            return _permute(arrays[name], cls.gates, GRU_GATES)
        return _gru_from(template, ours("weight_ih_l0"), ours("bias_ih_l0"),
                         ours("weight_hh_l0"), ours("bias_hh_l0"))


class GruKeras(GruLayout):
    name = "keras"

    @classmethod
    def _export(cls, w):
        bias = (np.stack([w.b_c, _gru_recurrent_bias(w)]) if w.linear_before_reset
                else w.b_c)  # reset_after=True: (2, 3H); False: (3H,)
        return {"kernel": w.input_weights().T, "recurrent_kernel": _gru_recurrent(w, GRU_GATES).T,
                "bias": bias}

    @classmethod
    def _import(cls, arrays, template):
        bias = arrays["bias"]
        input_bias, recurrent_bias = ((bias[0], bias[1]) if template.linear_before_reset
                                      else (bias, np.zeros_like(bias)))
        return _gru_from(template, arrays["kernel"].T, input_bias,
                         arrays["recurrent_kernel"].T, recurrent_bias)


#: A GRU's layouts by CLI name (a subset of LAYOUTS' names).
GRU_LAYOUTS: dict[str, type[GruLayout]] = {
    layout.name: layout for layout in (GruCaffe, GruOnnx, GruPyTorch, GruKeras)}


def zeros_like_layer(node: Node) -> LstmWeights:
    """A template for ``import_arrays``: zeros shaped like the layer's blobs."""
    return layer_weights(node, [np.zeros(value.shape, np.float32) for value in node.weights])


# ---- one layer of a net ------------------------------------------------------------------------


def has_layouts(node: Node) -> bool:
    """Whether ``node``'s type has weight layouts (LSTM, the fork's Lstm)."""
    spec = recurrent_spec(node.op)
    return spec is not None and spec.has_layouts


def layout_layer(graph: Graph, name: str, where: str) -> Node:
    """The layer of ``graph`` called ``name``, whose type has weight layouts; ``where`` (the
    net's file) places the error when there is no such layer."""
    node = graph.node(name)
    able = [n.name for n in graph.nodes if has_layouts(n)]
    hint = (f"the LSTM layers of this net: {', '.join(able)}" if able
            else "this net has no LSTM layer")
    if node is None:
        raise CaffeLstmError(f"layer=: the net has no LSTM layer named '{name}'", where, hint)
    if not has_layouts(node):
        raise CaffeLstmError("layer= must name an LSTM layer", node.label, hint)
    return node


def layout_named(name: str, node: Node | None = None) -> type[Layout] | type[GruLayout]:
    """The layout called ``name`` for ``node``'s type (LAYOUTS, or a GRU's GRU_LAYOUTS), or a
    one-line error listing them."""
    gru = node is not None and isinstance(zeros_like_layer(node), GruWeights)
    layouts = GRU_LAYOUTS if gru else LAYOUTS
    if name not in layouts:
        raise CaffeLstmError(f"unknown layout '{name}'" + (f" for a {node.op}" if node else ""),
                             "layout=", f"use one of {', '.join(layouts)}")
    return layouts[name]


def export_layer(node: Node, layout: str, weights: str) -> dict[str, np.ndarray]:
    """``node``'s loaded blobs as the arrays ``layout`` stores, under its own names; the
    caffemodel ``weights`` is named when it lacks them."""
    if any(v.data is None for v in node.weights):
        raise ModelLoadError("the caffemodel has no weights for this layer",
                             f"{node.label}, weights {weights}",
                             "check that the weights are those of this net")
    with at_layer(node):
        return layout_named(layout, node).export(
            layer_weights(node, [v.data for v in node.weights]))


def import_layer(node: Node, layout: str, arrays: Mapping[str, np.ndarray],
                 source: str) -> list[np.ndarray]:
    """``node``'s blobs, in its file order, from ``arrays`` in ``layout`` (read from
    ``source``, which places an error beside the layer's name)."""
    with at_layer(node, source):
        weights = import_arrays(layout_named(layout, node), arrays, zeros_like_layer(node))
    return layer_arrays(node, weights)


@contextlib.contextmanager
def at_layer(node: Node, detail: str = "") -> Iterator[None]:
    """Gives a LayoutError raised inside the layer's name (and ``detail``) as its ``where``."""
    try:
        yield
    except LayoutError as exc:
        where = ", ".join(part for part in (node.label, detail) if part)
        raise LayoutError(exc.what, where, exc.hint) from None
