"""The ``Transpose`` layer with ``transposetype`` of Charleen777/caffecode@bd3648c (dev branch,
src/caffe/layers/transpose_layer.cpp), which turns a CNN's maps into rows for its hand-unrolled
grid LSTM (``LstmUnit`` layers) and back. The ``Transpose`` op (ops/fork.py) calls these when a
layer sets ``transposetype``; with ``dim`` it is caffe_ocr's permutation.

- LSTMINPUT: x (N, C, H, W) (Caffe's legacy num/channels/height/width: missing axes are 1)
  → (N·H·W, C), row n·H·W + s holding the C values of pixel s of image n.
- LSTMOUTPUT: rows (R, C) → (B, C, height, R / (B·height)), B = batch_size: the inverse.
- GRIDLSTM: rows (R, C), C = 8 blocks of E = C / 8 channels, S = R / B rows per image; with the
  offsets off = (−h−1, −h, −h+1, −1, +1, h−1, h, h+1), h = ``height``:
  y[b, i, block k] = x[b, i + off[k], block 7 − k] where 0 < i + off[k] < S, else 0.
  (The fork tests ``transIndex > 0``: row 0 is never a source, as written there.)

GRIDLSTM is one gather of rows: x with row 0 of every image zeroed, viewed (B, S·8, E), and the
constant index (i·8 + k) → (i + off[k])·8 + 7 − k, or 0·8 + 7 − k (a zero) outside the image.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caffe_lstm.errors import UnsupportedLayerError
from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import count, onnx_fixed_dims, shape_error, trt_fixed_dims

#: The fork's GRIDLSTM neighbourhood (local_connected_num must be 8).
NEIGHBOURS = 8


def parse(p: Any) -> dict[str, Any]:
    """transposetype and the fields its modes read."""
    return {"transposetype": p.transposetype, "batch_size": p.batch_size,
            "local_connected_num": p.local_connected_num, "height": p.height}


def infer(node: Node, x: Shape) -> Shape:
    kind = node.attrs["transposetype"]
    if kind == "LSTMINPUT":
        num, channels, height, width = _legacy(node, x)
        return (num * height * width, channels)
    rows, channels = _rows(node, x)
    batch, height = node.attrs["batch_size"], node.attrs["height"]
    if kind == "LSTMOUTPUT":
        if batch <= 0 or height <= 0 or rows % (batch * height):
            raise shape_error(node, f"{rows} rows are not batch_size {batch} × height {height} "
                              "× a width", "set transpose_param.batch_size and height")
        return (batch, channels, height, rows // (batch * height))
    if kind == "GRIDLSTM":
        if node.attrs["local_connected_num"] != NEIGHBOURS:
            raise shape_error(node, f"local_connected_num is {node.attrs['local_connected_num']},"
                              " the fork supports only 8", "set local_connected_num: 8")
        if batch <= 0 or rows % batch or channels % NEIGHBOURS:
            raise shape_error(node, f"GRIDLSTM needs rows ({rows}) divisible by batch_size "
                              f"({batch}) and channels ({channels}) divisible by 8",
                              "check the Concat of the 8 neighbours before this layer")
        return (rows, channels)
    raise UnsupportedLayerError(
        f"transpose_param.transposetype {kind} is not implemented (no public net uses it)",
        node.label, "use LSTMINPUT, LSTMOUTPUT or GRIDLSTM, or a plugin (docs/plugins.md)")


def _legacy(node: Node, x: Shape) -> tuple[int, int, int, int]:
    """num, channels, height, width as Caffe's legacy accessors read them (missing axes 1)."""
    if len(x) > 4:
        raise shape_error(node, f"LSTMINPUT reads num/channels/height/width of at most 4 "
                          f"axes, found {tuple(x)}", "reshape the maps to (N, C, H, W)")
    num, channels, height, width = (tuple(x) + (1, 1, 1, 1))[:4]
    return num, channels, height, width


def _rows(node: Node, x: Shape) -> tuple[int, int]:
    """(R, C) of a bottom read as rows: shape(0) and shape(1), the rest of size 1."""
    if len(x) < 2 or count(x, 2) != 1:
        raise shape_error(node, f"expected rows (R, C), found {tuple(x)}",
                          "this mode reads the rows LSTMINPUT makes")
    return x[0], x[1]


# ---- the index of GRIDLSTM -------------------------------------------------------------------


def _offsets(height: int) -> list[int]:
    return [-height - 1, -height, -height + 1, -1, 1, height - 1, height, height + 1]


def grid_index(rows_per_image: int, height: int) -> np.ndarray:
    """The gather index over the (S·8) blocks of one image (see the module docstring)."""
    index = np.empty((rows_per_image, NEIGHBOURS), np.int64)
    for k, offset in enumerate(_offsets(height)):
        source = np.arange(rows_per_image) + offset
        inside = (source > 0) & (source < rows_per_image)
        index[:, k] = np.where(inside, source, 0) * NEIGHBOURS + (NEIGHBOURS - 1 - k)
    return index.reshape(-1)


def _row_mask(rows_per_image: int) -> np.ndarray:
    """(1, S, 1): 0 for row 0 of an image (never a source), 1 elsewhere."""
    mask = np.ones((1, rows_per_image, 1), np.float32)
    mask[0, 0, 0] = 0
    return mask


def _grid_sizes(node: Node, x: Shape) -> tuple[int, int, int, int]:
    """(B, S, C, E) of a GRIDLSTM node on rows ``x``."""
    batch = node.attrs["batch_size"]
    return batch, x[0] // batch, x[1], x[1] // NEIGHBOURS


# ---- facets ----------------------------------------------------------------------------------

def _built_for_one_size(node: Node, rank: int) -> tuple[range, str, str]:
    """The axes whose size a mode's TensorRT and ONNX forms bake into their reshapes (and
    GRIDLSTM's index), what to call them and the hint: every axis after the first for
    LSTMINPUT, the first two (R, C) for the modes that read rows."""
    if node.attrs["transposetype"] == "LSTMINPUT":
        return range(1, rank), "C, H or W", "give the maps fixed channels, height and width"
    return range(min(rank, 2)), "the rows R or the channels C", \
        "give the rows a fixed count and width"


def numpy(node: Node, x: np.ndarray) -> np.ndarray:
    kind = node.attrs["transposetype"]
    if kind == "LSTMINPUT":
        num, channels, height, width = _legacy(node, x.shape)
        return x.reshape(num, channels, height * width).transpose(0, 2, 1).reshape(-1, channels)
    if kind == "LSTMOUTPUT":
        shape = infer(node, x.shape)
        rows_per_image = x.shape[0] // shape[0]
        return x.reshape(shape[0], rows_per_image, shape[1]).transpose(0, 2, 1).reshape(shape)
    batch, rows_per_image, channels, block = _grid_sizes(node, x.shape)
    masked = x.reshape(batch, rows_per_image, channels) * _row_mask(rows_per_image)
    blocks = masked.reshape(batch, rows_per_image * NEIGHBOURS, block)
    gathered = blocks[:, grid_index(rows_per_image, node.attrs["height"]), :]
    return gathered.reshape(x.shape).astype(np.float32)


def tensorrt(ctx: Any, node: Node, x: Any) -> Any:
    kind = node.attrs["transposetype"]
    axes, what, hint = _built_for_one_size(node, len(x.shape))
    trt_fixed_dims(node, [x.shape[axis] for axis in axes], what, hint)
    if kind == "LSTMINPUT":
        _, channels, height, width = _legacy(node, node.inputs[0].shape)
        per_image = ctx.reshape(x, [-1, channels, height * width], "images")
        return ctx.reshape(ctx.transpose(per_image, (0, 2, 1)), [-1, channels], "")
    if kind == "LSTMOUTPUT":
        shape = node.outputs[0].shape
        rows = ctx.reshape(x, [shape[0], -1, shape[1]], "images")
        return ctx.reshape(ctx.transpose(rows, (0, 2, 1)), list(shape), "")
    batch, rows_per_image, channels, block = _grid_sizes(node, node.inputs[0].shape)
    images = ctx.reshape(x, [batch, rows_per_image, channels], "images")
    masked = ctx.out(ctx.network.add_elementwise(
        images, ctx.constant(_row_mask(rows_per_image), "row_mask"),
        ctx.trt.ElementWiseOperation.PROD), "masked")
    blocks = ctx.reshape(masked, [batch, rows_per_image * NEIGHBOURS, block], "blocks")
    index = ctx.constant(grid_index(rows_per_image, node.attrs["height"]).astype(np.int32),
                         "index")
    gathered = ctx.out(ctx.network.add_gather(blocks, index, 1), "gather")
    return ctx.reshape(gathered, list(node.inputs[0].shape), "")


def onnx(ctx: Any, node: Node, x: str) -> str:
    kind = node.attrs["transposetype"]
    onnx_fixed_dims(ctx, node, node.inputs[0], *_built_for_one_size(
        node, len(node.inputs[0].shape)))
    if kind == "LSTMINPUT":
        _, channels, height, width = _legacy(node, node.inputs[0].shape)
        per_image = ctx.add("Reshape", [x, ctx.ints([-1, channels, height * width], "images")],
                            suffix="images")[0]
        moved = ctx.add("Transpose", [per_image], suffix="transpose", perm=[0, 2, 1])[0]
        return ctx.add("Reshape", [moved, ctx.ints([-1, channels], "rows")])[0]
    if kind == "LSTMOUTPUT":
        shape = node.outputs[0].shape
        rows = ctx.add("Reshape", [x, ctx.ints([shape[0], -1, shape[1]], "images")],
                       suffix="images")[0]
        moved = ctx.add("Transpose", [rows], suffix="transpose", perm=[0, 2, 1])[0]
        return ctx.add("Reshape", [moved, ctx.ints(list(shape), "maps")])[0]
    batch, rows_per_image, channels, block = _grid_sizes(node, node.inputs[0].shape)
    images = ctx.add("Reshape", [x, ctx.ints([batch, rows_per_image, channels], "images")],
                     suffix="images")[0]
    masked = ctx.add("Mul", [images, ctx.constant(_row_mask(rows_per_image), "row_mask")],
                     suffix="masked")[0]
    blocks = ctx.add("Reshape", [masked, ctx.ints([batch, rows_per_image * NEIGHBOURS, block],
                                                  "blocks")], suffix="blocks")[0]
    index = ctx.constant(grid_index(rows_per_image, node.attrs["height"]), "index")
    gathered = ctx.add("Gather", [blocks, index], suffix="gather", axis=1)[0]
    return ctx.add("Reshape", [gathered, ctx.ints(list(node.inputs[0].shape), "rows")])[0]
