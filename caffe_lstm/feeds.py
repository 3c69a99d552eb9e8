"""Input arrays for a run: checked user feeds, or seeded random ones that fit each input."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from caffe_lstm.analysis.limits import check_memory
from caffe_lstm.analysis.shapes import infer_shapes
from caffe_lstm.errors import ModelLoadError
from caffe_lstm.ir.graph import Graph, Node, Value
from caffe_lstm.ops.recurrent import read_cont
from caffe_lstm.ops.roi import reads_rois


def random_feeds(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs: cont is 0 at t = 0 and 1 after, Embed indices are valid, the rois of
    PSROIPooling and ROIPooling lie on their batch's image, others N(0, 1)."""
    check_memory(graph)  # before the arrays exist
    rng = np.random.default_rng(seed)
    return {value.name: _random_input(graph, value, rng) for value in graph.inputs}


def _random_input(graph: Graph, value: Value, rng: np.random.Generator) -> np.ndarray:
    shape = value.shape
    if _is_cont(graph, value):
        cont = np.ones(shape, np.float32)
        cont[:1] = 0  # a new sequence starts at t = 0 (the leading axis is time)
        return cont
    for node in graph.users(value):
        if node.op == "Embed":
            return rng.integers(0, node.attrs["input_dim"], size=shape).astype(np.float32)
        if reads_rois(node, value):
            return _random_rois(node, shape, rng)
    return rng.standard_normal(shape).astype(np.float32)


def _random_rois(node: Node, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Rows (batch index, x1, y1, x2, y2): an image of the feature maps' batch, corners ordered
    within the image the maps cover (their size / spatial_scale)."""
    maps = node.inputs[0].shape
    count = shape[0] if shape else 0
    scale = node.attrs["spatial_scale"] or 1.0
    size = np.array([maps[3], maps[2]] if len(maps) == 4 else [1, 1], np.float64) / abs(scale)
    corners = np.sort(rng.uniform(0, 1, (count, 2, 2)), axis=1) * size
    batch = rng.integers(0, max(maps[0], 1) if maps else 1, (count, 1))
    rois = np.concatenate([batch, corners.reshape(count, 4)], axis=1)
    return rois.astype(np.float32).reshape(shape)


def _is_cont(graph: Graph, value: Value) -> bool:
    """Whether ``value`` is a continuation indicator: the cont bottom of a recurrent layer (the
    one reading of cont, ``read_cont``), or, in a rewritten net read back from files, the
    factor of a delta node (two-bottom Scale on axis 0), possibly through the
    Slice/Reshape/Loop that hand it to the step."""
    for node in graph.users(value):
        position = next(i for i, v in enumerate(node.inputs) if v is value)
        reading = read_cont(node)
        if reading is not None and reading.value is value:
            return True
        if node.op == "Scale" and position == 1 and node.attrs.get("axis") == 0:
            return True
        if node.op in ("Slice", "Reshape") and any(_is_cont(graph, v) for v in node.outputs):
            return True
        if node.op == "Loop" and position < node.attrs["n_iterate"]:
            body = node.subgraphs[0]
            return _is_cont(body, body.inputs[position])
    return False


def apply_feeds(graph: Graph, feeds: Mapping[str, np.ndarray], source: str) -> dict[
        str, np.ndarray]:
    """Checks ``feeds`` against the net inputs and re-infers shapes where a feed's shape differs.

    Raises:
        ModelLoadError: a missing or unknown array, or one of the wrong rank.

    An array named like a DummyData top replaces that constant (the top becomes a net input),
    as pycaffe users overwrite placeholder blobs.
    """
    _feed_dummy_data(graph, set(feeds))
    names = [v.name for v in graph.inputs]
    missing = [n for n in names if n not in feeds]
    unknown = [n for n in feeds if n not in names]
    if missing or unknown:
        what = "; ".join(part for part in (
            f"missing input(s) {', '.join(missing)}" if missing else "",
            f"unknown array(s) {', '.join(unknown)}" if unknown else "") if part)
        raise ModelLoadError(what, source, f"the net's inputs are {', '.join(names)}")
    arrays = {n: _as_float32(n, feeds[n], source) for n in names}
    changed = False
    for value in graph.inputs:
        array = arrays[value.name]
        if array.ndim != len(value.shape):
            raise ModelLoadError(
                f"input '{value.name}' has shape {array.shape}, the net expects {value.shape}",
                source, "keep the number of axes; dims may differ where the layers allow")
        changed |= tuple(array.shape) != tuple(value.shape)
        value.shape = tuple(array.shape)
    if changed:
        infer_shapes(graph)
        check_memory(graph, source)  # the fed shapes may make the activations larger
    return arrays


def _as_float32(name: str, array, source: str) -> np.ndarray:
    """A fed array as float32; strings, dates, objects and complex numbers are refused."""
    array = np.asarray(array)
    if array.dtype.kind not in "biuf":
        raise ModelLoadError(f"input '{name}' has dtype {array.dtype}, expected numbers", source,
                             "save the inputs as float32 (or integer) arrays")
    return array.astype(np.float32, copy=False)


def _feed_dummy_data(graph: Graph, fed: set[str]) -> None:
    """DummyData nodes with a fed top are split: fed tops become inputs, the rest constants."""
    nodes = []
    for node in graph.nodes:
        if node.op != "DummyData" or not fed.intersection(v.name for v in node.outputs):
            nodes.append(node)
            continue
        values = node.attrs["values"] or [0.0]
        for index, value in enumerate(node.outputs):
            if value.name in fed:
                value.producer = None
                graph.inputs.append(value)
            else:
                fill = values[index] if len(values) > 1 else values[0]
                attrs = {"shapes": [list(value.shape)], "values": [fill]}
                nodes.append(Node(f"{node.name}/{value.name}", "DummyData", [], [value], attrs,
                                  origin=node.origin, where=node.where))
    graph.nodes = nodes
