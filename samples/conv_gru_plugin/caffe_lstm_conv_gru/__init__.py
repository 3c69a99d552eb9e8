"""AzoresCabbage/caffe's ``ConvGRU`` as a caffe-lstm plugin: a recurrent layer type written as
ONE time step on caffe-lstm's step API (docs/ops.md, docs/plugins.md).

From AzoresCabbage/caffe@5102dc1 (src/caffe/layers/conv_gru_layer.cpp, Forward_cpu): x is
(T, C, H, W), one image per step; an optional second bottom h_0 is (1, D, H, W) (else h_0 = 0);
no cont. Both convolutions take the layer's ``convolution_param`` (one odd kernel_size, its
dilation and group) with stride 1 and "same" padding dilation·(k − 1)/2, and give the gates
r, z and the candidate in that order along the channels:

    [a_r | a_z | a_h] = W_x ⋆ x_t + b_x          (one convolution of x, with bias)
    [u_r | u_z | u_h] = W_h ⋆ h_{t−1}            (one convolution of h, without)
    r_t = σ(a_r + u_r),  z_t = σ(a_z + u_z)
    h̃_t = tanh(a_h + r_t ⊙ u_h)                  (the reset after the recurrent convolution)
    h_t = (1 − z_t) ⊙ h_{t−1} + z_t ⊙ h̃_t

Blobs W_x (3D, C/group, k, k), b_x (3D), W_h (3D, D/group, k, k). conv_gru_param
(num_output D, clipping_threshold, fillers, forward_direction) is not in caffe-lstm's schema:
its fields are declared here. clipping_threshold only clips gradients; forward_direction is
read by the fork's LayerSetUp and never by its Forward.

The ``expand`` facet is the whole recurrence: the x convolution of every step at once before
the loop, then one step (``gru_step`` with convolution gates); caffe-lstm makes the Loop, the
TensorRT ILoop, the ONNX Scan, ``--unroll``, ``--state io`` and Triton's sequence state of it.
"""

from __future__ import annotations

import numpy as np

from caffe_lstm.errors import ModelLoadError, ShapeError
from caffe_lstm.ops import (ConvolutionGates, Op, ParamField, RecurrentSpec, gru_step,
                            register_op)

#: caffe.proto's FillerParameter (the fillers only initialise training).
FILLER = {"type": ParamField(str, "constant"), "value": ParamField(float, 0.0),
          "min": ParamField(float, 0.0), "max": ParamField(float, 1.0),
          "mean": ParamField(float, 0.0), "std": ParamField(float, 1.0),
          "sparse": ParamField(int, -1),
          "variance_norm": ParamField(choices=("FAN_IN", "FAN_OUT", "AVERAGE"))}

#: The gate blocks along the channels of both convolutions, in the fork's order.
GATES = ("r", "z", "h")


def _state_shape(node):
    """h_0 and h_T: (1, D, H, W), H and W those of x."""
    _, _, height, width = node.inputs[0].shape
    return ((1, node.attrs["num_output"], height, width),)


def _exposable(node):
    """--state io exposes h of a ConvGRU whose h_0 the net does not give (or exposed it)."""
    return len(node.inputs) == 1 or node.attrs["expose_hidden"]


@register_op
class ConvGRU(Op):
    """A convolutional GRU over T steps of one image each (conv_gru_param, convolution_param)."""

    type = "ConvGRU"
    param = "conv_gru_param"
    param_fields = {"num_output": ParamField(int, 0),
                    "clipping_threshold": ParamField(float, 0.0),
                    "weight_filler": ParamField(fields=FILLER),
                    "bias_filler": ParamField(fields=FILLER),
                    "forward_direction": ParamField(bool, True)}
    origin = "AzoresCabbage/caffe@5102dc1 (conv_gru_layer.cpp)"
    limits = ("one top: the fork's optional second top (the gates) is refused; each Forward "
              "starts from zeros or the h_0 bottom, as the fork's")
    n_bottoms = (1, 2)  # x, [h_0]
    n_tops = (1, 2)  # h, [h_T with --state io]
    # one state h of shape (1, D, H, W): no batch axis, no cont, no carry-over between calls;
    # --state io gives a ConvGRU without an h_0 bottom one, and its h_T as a top
    recurrent = RecurrentSpec(states=("h",), cont_bottom=None, static_bottom=None,
                              shapes=_state_shape, carries_state=False,
                              exposable_if=_exposable)
    tensorrt_missing_reason = onnx_missing_reason = "expanded into one loop step by the rewrite"

    @staticmethod
    def parse(ctx, p):
        conv = ctx.layer_param("convolution_param")
        if p.num_output <= 0:
            raise ModelLoadError(f"conv_gru_param.num_output is {p.num_output}, expected > 0",
                                 "", "set conv_gru_param.num_output (the hidden channels D)")
        if len(conv.kernel_size) != 1 or conv.kernel_size[0] % 2 != 1:
            raise ModelLoadError(f"convolution_param.kernel_size is {list(conv.kernel_size)}, "
                                 "the fork takes one odd size", "",
                                 "give one kernel_size: 1, 3, 5, ...")
        kernel, dilation = conv.kernel_size[0], (list(conv.dilation) or [1])[0]
        return {"num_output": p.num_output, "kernel": kernel, "dilation": dilation,
                "group": conv.group, "expose_hidden": False}

    @staticmethod
    def caffe(ctx, node):
        return {"num_output": node.attrs["num_output"]}

    @staticmethod
    def infer(ctx, node, x, *h_0):
        hidden, group = node.attrs["num_output"], node.attrs["group"]
        if len(x) != 4 or x[0] < 1:
            raise ShapeError(f"x must be (T, C, H, W) with T >= 1, found {x}", node.label,
                             "the fork reads one image (C, H, W) per step")
        if x[1] % group or hidden % group:
            raise ShapeError(f"group {group} divides neither C = {x[1]} nor D = {hidden}",
                             node.label, "use a group that divides both")
        state = (1, hidden, x[2], x[3])
        if h_0 and tuple(h_0[0]) != state:
            raise ShapeError(f"h_0 must have shape {state}, found {h_0[0]}", node.label,
                             "h_0 is (1, num_output, H, W)")
        top = (x[0], hidden, x[2], x[3])
        if node.attrs["expose_hidden"]:
            return top, state
        if len(node.outputs) != 1:
            raise ShapeError("the fork's second top (the gates) is not supported", node.label,
                             "remove the second top")
        return (top,)

    @staticmethod
    def blobs(ctx, node, x, *h_0):
        hidden, group, k = node.attrs["num_output"], node.attrs["group"], node.attrs["kernel"]
        return (("W_x", (3 * hidden, x[1] // group, k, k)), ("b_x", (3 * hidden,)),
                ("W_h", (3 * hidden, hidden // group, k, k)))

    @staticmethod
    def numpy(ctx, node, x, *rest):
        """The fork's Forward_cpu, step by step, in float64."""
        *h_0, w_x, b_x, w_h = (np.asarray(a, np.float64) for a in rest)
        hidden, group = node.attrs["num_output"], node.attrs["group"]
        pad = node.attrs["dilation"] * (node.attrs["kernel"] - 1) // 2
        conv = _conv2d_factory(pad, node.attrs["dilation"], group)
        h = h_0[0].copy() if h_0 else np.zeros((1, hidden) + x.shape[2:])
        a_all = conv(np.asarray(x, np.float64), w_x) + b_x[None, :, None, None]
        steps = []
        for a in a_all:
            a_r, a_z, a_h = np.split(a[None], 3, axis=1)
            u_r, u_z, u_h = np.split(conv(h, w_h), 3, axis=1)
            r, z = _sigmoid(a_r + u_r), _sigmoid(a_z + u_z)
            h = (1 - z) * h + z * np.tanh(a_h + r * u_h)
            steps.append(h)
        outputs = (np.concatenate(steps),) + ((h,) if node.attrs["expose_hidden"] else ())
        return tuple(o.astype(np.float32) for o in outputs)

    @staticmethod
    def expand(b, node):
        """W_x ⋆ x + b_x for all steps before the loop; one step of gru_step inside."""
        x, *h_0 = node.inputs
        w_x, b_x, w_h = node.weights
        hidden, dilation = node.attrs["num_output"], node.attrs["dilation"]
        geometry = {"pad": dilation * (node.attrs["kernel"] - 1) // 2, "dilation": dilation,
                    "group": node.attrs["group"]}
        # [a_r | a_z | a_h] of every step at once: (T, 3D, H, W)
        x_gates = ConvolutionGates(w_x, b_x, **geometry).apply(b, "x_conv", x, top="W_x_x")
        s = b.step()
        x_t = s.sequence(x_gates, "W_x_x_t")
        # h_{t−1}: (1, D, H, W), H and W those of the sequence (0 copies them); no cont
        h = s.state("h", (hidden, 0, 0), initial=h_0[0] if h_0 else None)
        h_t = gru_step(s, x_t, h, ConvolutionGates(w_h, **geometry), order=GATES,
                       linear_before_reset=True, z_keeps="candidate")
        s.update("h", h_t)
        s.output(h_t)
        b.loop(s, [node.outputs[0]], node.outputs[1:] or None)


def _sigmoid(x):
    return 0.5 * np.tanh(0.5 * x) + 0.5


def _conv2d_factory(pad, dilation, group):
    """A same-size 2-D convolution (stride 1) of (B, C, H, W) by W (M, C/group, k, k)."""
    def conv(x, w):
        k = w.shape[-1]
        padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        height, width = x.shape[2:]
        # taps[b, c, i, j, y, x] = padded[b, c, y + i·dilation, x + j·dilation]
        taps = np.stack([np.stack([padded[:, :, i * dilation:i * dilation + height,
                                          j * dilation:j * dilation + width]
                                   for j in range(k)], axis=2) for i in range(k)], axis=2)
        ins, outs = x.shape[1] // group, w.shape[0] // group
        return np.concatenate([
            np.einsum("bcijyx,mcij->bmyx", taps[:, g * ins:(g + 1) * ins],
                      w[g * outs:(g + 1) * outs]) for g in range(group)], axis=1)
    return conv
