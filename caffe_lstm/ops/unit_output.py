"""Unit output for a layer linear in its matrix with a per-channel bias (Convolution,
Deconvolution, InnerProduct): the ``calibrate`` rule those ops share for ``weights init``.

The layer computes y = A + b, A linear in its matrix W and b its bias broadcast along the
channel axis. Its blobs become [s·W, b′] with y′ = s·A + b′ of unit standard deviation, one
closed-form step from the output y the drawn blobs give (no further run of the layer):

- A's per-channel means a_c are an offset that does not depend on the input (a ReLU's output
  is positive, so every channel of the next layer is shifted by its row of W's sum times the
  input's mean). Where they dominate (carry more of A's power than A's centred part Ã = A − a)
  they are taken out through the bias, b′ = b − s·a, as data-dependent initialisations do
  (Krähenbühl et al., ICLR 2016): each channel's mean becomes its drawn bias, and
  var(y′) = s²·E[Ã²] + var(b) gives s. Otherwise b′ = b and s solves std(s·A + b) = 1
  (``unit_factor``). Without the offsets removed, a deep net of random weights maps every
  input to about the same output.
"""

from __future__ import annotations

import math

import numpy as np

#: Below this the layer's output carries nothing to scale (a zero input, dead units).
NO_SPREAD = 1e-30


def unit_output_blobs(output: np.ndarray, blobs: list[np.ndarray],
                      axis: int) -> list[np.ndarray] | None:
    """[s·W, b′, …] for the layer whose drawn ``blobs`` [W, b (if any), …] gave ``output``,
    its channel axis ``axis`` (see the module's docstring); None where the output carries no
    spread that depends on the input."""
    y = output.astype(np.float64)
    bias = (blobs[1].astype(np.float64).reshape(-1) if len(blobs) > 1
            else np.zeros(y.shape[axis]))
    along = [1] * y.ndim
    along[axis] = -1
    linear = y - bias.reshape(along)  # A
    offset = linear.mean(axis=tuple(i for i in range(y.ndim) if i != axis), keepdims=True)
    centred_power = float(np.mean(np.square(linear - offset)))
    if not math.isfinite(centred_power) or centred_power < NO_SPREAD ** 2:
        return None
    if len(blobs) > 1 and float(np.mean(np.square(offset))) > centred_power:
        remaining = 1.0 - float(np.var(bias))  # the bias's own spread counts towards 1
        factor = math.sqrt((remaining if remaining > 0 else 1.0) / centred_power)
        bias = bias - factor * offset.reshape(-1)
    else:
        factor = unit_factor(linear, np.broadcast_to(bias.reshape(along), y.shape))
        if factor is None:  # the bias alone spreads the output by 1 or more
            factor = 1 / math.sqrt(float(np.var(linear)))
    scaled = [blobs[0] * factor] + ([bias] if len(blobs) > 1 else [])
    return [np.asarray(blob, np.float32) for blob in scaled] + list(blobs[2:])


def unit_factor(slope: np.ndarray, offset: np.ndarray) -> float | None:
    """The s > 0 with std(s·slope + offset) = 1: s²·var(A) + 2s·cov(A, B) + var(B) − 1 = 0;
    None when there is none (the offset alone spreads the output by 1 or more)."""
    slope, offset = slope - slope.mean(), offset - offset.mean()
    a, b = float(np.mean(slope ** 2)), 2 * float(np.mean(slope * offset))
    c = float(np.mean(offset ** 2)) - 1
    if a <= 0 or c >= 0:
        return None
    return (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)  # c < 0: one root is positive
