"""Fewer nodes per step in each exported Scan body: what onnxruntime runs T times.

The Loop's ONNX facet writes the step graph as the IR has it, one node (or a few) per IR node.
onnxruntime runs a Scan body once per step, and on a long sequence of small steps its cost is
the number of kernels launched, not the arithmetic (measured with onnxruntime's profiler:
benchmarks/cpu_runtimes.py). This pass, run on the exported graph, removes what needs no
running per step; every rewrite computes the same values:

- loop invariants leave the body: a node whose inputs all come from outside the body runs
  once, before the Scan; the Transpose of a recurrent weight for ``MatMul`` becomes the
  transposed weight itself, an initializer of the body: onnxruntime packs a ``MatMul``'s
  constant B once for its GEMMs when it is an initializer of the graph the node is in, and
  packs it again at every step when it comes from the outer scope (measured in CPU time on
  one thread, the 2-layer net of benchmarks/cpu_runtimes.py: 172 ms -> 142 ms, onnxruntime's
  own LSTM 147 ms; nothing measurable on a long sequence of N = 1, where kernel launches rule).
  ``weights_into_bodies`` does it last, on the finished model, in place: the protobuf holds
  these weights (the main graph's large weights are streamed past it), once, at most
  ``BODY_WEIGHT_BYTES`` of them;
- the same node twice (one ``Unsqueeze`` of cont_t for h and one for c) runs once;
- an ``Unsqueeze`` of a step slice becomes one ``Unsqueeze`` of the whole scanned input before
  the Scan, the body reading the slice already shaped (the cont column (1, N, 1));
- a ``Sum`` of two terms is an ``Add``: the same broadcasting sum, in the form onnxruntime's
  fusions look for (it makes MatMul + Add one Gemm in the main graph; in a Scan body, on the
  step's 3-D tensors, it did not in onnxruntime's profile).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: The most bytes of transposed recurrent weights copied into Scan bodies per model (the
#: protobuf holds them, where the main graph's large weights are streamed past it).
BODY_WEIGHT_BYTES = 256 << 20


def tune_scans(onnx: Any, nodes: list[Any], initializers: list[Any]) -> None:
    """Rewrites every Scan node of the main graph (its ``nodes`` and ``initializers``, lists
    changed in place) and its body; nodes hoisted out of a body go right before their Scan."""
    constants = {tensor.name: tensor for tensor in initializers}
    tuned = []
    for node in nodes:
        if node.op_type == "Scan":
            tuned += _tune_scan(onnx, node, initializers, constants)
        tuned.append(node)
    nodes[:] = tuned


def weights_into_bodies(onnx: Any, graph: Any, weight: Callable[[str], np.ndarray | None]
                        ) -> set[str]:
    """Each main-graph Transpose of a 2-D weight whose result only one Scan body reads becomes
    that result, an initializer of the body (``graph``, the finished model's, changed in place:
    nothing else is copied). ``weight(name)``: the array of a main-graph initializer, streamed
    or not, or None. Returns the names of the weights no node reads any more."""
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(None)
        for body in _bodies(node):
            for name in _names_read(body):
                readers.setdefault(name, []).append(body)
    budget, moved = BODY_WEIGHT_BYTES, set()
    for index in reversed(range(len(graph.node))):
        node = graph.node[index]
        perm = [list(a.ints) for a in node.attribute if a.name == "perm"]
        users = readers.get(node.output[0], []) if node.op_type == "Transpose" else []
        array = weight(node.input[0]) if len(users) == 1 and users[0] is not None and \
            perm in ([], [[1, 0]]) else None
        if array is None or array.ndim != 2 or array.nbytes > budget:
            continue
        budget -= array.nbytes
        _add_tensor(users[0].initializer, node.output[0],
                    np.ascontiguousarray(np.asarray(array, np.float32).T))
        readers[node.input[0]].remove(None)
        moved.add(node.input[0])
        del graph.node[index]
    return {name for name in moved if not readers[name]}


def _names_read(graph: Any) -> set[str]:
    """Every name the nodes of ``graph`` read, those of the graphs inside them included."""
    return {name for node in graph.node for name in node.input} | {
        name for node in graph.node for body in _bodies(node) for name in _names_read(body)}


def _bodies(node: Any) -> list[Any]:
    return [a.g for a in node.attribute if a.HasField("g")] + \
        [g for a in node.attribute for g in a.graphs]


def _add_tensor(field: Any, name: str, array: np.ndarray) -> None:
    """A float32 TensorProto made in place in ``field``: the array's bytes copied once."""
    tensor = field.add()
    tensor.name, tensor.data_type = name, 1  # 1 = TensorProto.FLOAT
    tensor.dims.extend(array.shape)
    tensor.raw_data = array.tobytes()


def _tune_scan(onnx: Any, scan: Any, initializers: list[Any], constants: dict[str, Any]
               ) -> list[Any]:
    """Tunes ``scan``'s body in place; returns the nodes to run before the Scan (the body's
    initializers they read go to the main graph's ``initializers``)."""
    body = _attribute(scan, "body").g
    before = _hoist_invariants(body)
    _move_initializers(initializers, body, before, constants)
    inner = {**constants, **{tensor.name: tensor for tensor in body.initializer}}
    _merge_repeats(body, inner)
    before += _unsqueeze_before_scan(onnx, scan, body, inner)
    for node in body.node:
        if node.op_type == "Sum" and len(node.input) == 2:
            node.op_type = "Add"
    read = {name for node in body.node for name in node.input}
    _remove(body.initializer, {t.name for t in body.initializer} - read)
    return before


def _attribute(node: Any, name: str) -> Any:
    return next(a for a in node.attribute if a.name == name)


def _defined_in(body: Any) -> set[str]:
    """Names the body itself defines: its inputs, initializers and its nodes' outputs."""
    return ({i.name for i in body.input} | {t.name for t in body.initializer}
            | {out for node in body.node for out in node.output})


def _hoist_invariants(body: Any) -> list[Any]:
    """The body's nodes that read only constants and outer-scope names (no body input, no
    step value), removed from the body in order: they compute the same at every step."""
    inside = _defined_in(body) - {tensor.name for tensor in body.initializer}
    kept, hoisted = [], []
    for node in body.node:
        reads = [name for name in node.input if name]
        if reads and not any(name in inside for name in reads) and not _has_subgraph(node):
            hoisted.append(node)
            inside.difference_update(node.output)
        else:
            kept.append(node)
    if hoisted:
        _refill(body.node, kept)
    return hoisted


def _move_initializers(initializers: list[Any], body: Any, hoisted: list[Any],
                       constants: dict[str, Any]) -> None:
    """The body initializers the hoisted nodes read, into the main graph's ``initializers``
    (out of the body when no body node reads them any more)."""
    wanted = {name for node in hoisted for name in node.input}
    still_read = {name for node in body.node for name in node.input}
    for tensor in body.initializer:
        if tensor.name in wanted and tensor.name not in constants:
            moved = type(tensor)()
            moved.CopyFrom(tensor)
            initializers.append(moved)
            constants[tensor.name] = moved
    _remove(body.initializer, wanted - still_read)


def _has_subgraph(node: Any) -> bool:
    return any(a.HasField("g") or len(a.graphs) for a in node.attribute)


def _merge_repeats(body: Any, constants: dict[str, Any]) -> None:
    """Keeps the first of nodes alike (op, inputs, attributes; a small constant input counts by
    its value) and reads its outputs for the others' (unless a repeat's output is a body
    output, which keeps its own name)."""
    outputs = {o.name for o in body.output}
    small = {name: _value_key(tensor) for name, tensor in constants.items()
             if _count(tensor) <= _SMALL}
    first: dict[tuple, Any] = {}
    renamed: dict[str, str] = {}
    kept = []
    for node in body.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]
        key = (node.op_type, node.domain, tuple(small.get(name, name) for name in node.input),
               tuple(a.SerializeToString() for a in node.attribute))
        same = first.get(key)
        if same is not None and not _has_subgraph(node) and not outputs & set(node.output):
            renamed.update(zip(node.output, same.output))
            continue
        first.setdefault(key, node)
        kept.append(node)
    if len(kept) != len(body.node):
        _refill(body.node, kept)


#: Constants of up to this many values are compared by value (axes, split sizes, shapes).
_SMALL = 64


def _count(tensor: Any) -> int:
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count


def _value_key(tensor: Any) -> tuple:
    """What a constant holds, without its name."""
    copy = type(tensor)()
    copy.CopyFrom(tensor)
    copy.name = ""
    return ("constant", copy.SerializeToString())


def _unsqueeze_before_scan(onnx: Any, scan: Any, body: Any, constants: dict[str, Any]
                           ) -> list[Any]:
    """Each body ``Unsqueeze`` of a step slice that nothing else reads, with constant axes, as
    one ``Unsqueeze`` of the whole scanned input before the Scan (its axes moved past the scan
    axis 0); the body input takes the Unsqueeze's output name and shape."""
    n_scanned = _attribute(scan, "num_scan_inputs").i
    if any(a.name in ("scan_input_axes", "scan_input_directions") for a in scan.attribute):
        return []  # written by the exporter without them: slices along axis 0, forward
    first_scanned = len(body.input) - n_scanned
    readers: dict[str, int] = {}
    for node in body.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    before, kept = [], []
    for node in body.node:
        index = _scanned_input_index(body, node, first_scanned)
        axes = _constant_ints(onnx, node.input[1], constants) if index is not None else None
        if axes is None or readers.get(node.input[0]) != 1:
            kept.append(node)
            continue
        slice_info = body.input[index]
        rank = len(slice_info.type.tensor_type.shape.dim) + len(axes)
        axes = sorted(axis % rank for axis in axes)
        outer = scan.input[index]
        shaped = f"{node.output[0]}/steps"
        axes_name = f"{shaped}/axes"
        moved = onnx.numpy_helper.from_array(_int64([axis + 1 for axis in axes]), axes_name)
        before += [onnx.helper.make_node("Constant", [], [axes_name], value=moved),
                   onnx.helper.make_node("Unsqueeze", [outer, axes_name], [shaped],
                                         name=f"{node.name or shaped}/before_scan")]
        scan.input[index] = shaped
        slice_info.name = node.output[0]
        dims = slice_info.type.tensor_type.shape.dim
        for axis in axes:
            dims.insert(axis, onnx.TensorShapeProto.Dimension(dim_value=1))
    if len(kept) != len(body.node):
        _refill(body.node, kept)
    return before


def _scanned_input_index(body: Any, node: Any, first_scanned: int) -> int | None:
    """Which scanned body input ``node`` unsqueezes (its index among the body's inputs)."""
    if node.op_type != "Unsqueeze" or len(node.input) != 2:
        return None
    names = [i.name for i in body.input]
    index = names.index(node.input[0]) if node.input[0] in names else -1
    return index if index >= first_scanned else None


def _constant_ints(onnx: Any, name: str, constants: dict[str, Any]) -> list[int] | None:
    tensor = constants.get(name)
    if tensor is None:
        return None
    return [int(v) for v in onnx.numpy_helper.to_array(tensor).reshape(-1)]


def _int64(values: list[int]) -> Any:
    import numpy as np

    return np.array(values, dtype=np.int64)


def _remove(field: Any, names: set[str]) -> None:
    """Deletes the messages called ``names`` from a repeated field, in place (an initializer
    may be a large weight: no copies)."""
    for index in reversed(range(len(field))):
        if field[index].name in names:
            del field[index]


def _refill(field: Any, items: list[Any]) -> None:
    """A repeated message field holding copies of ``items`` (messages taken out of a repeated
    field are not to be used again, hence the copies)."""
    copies = [type(item)() for item in items]
    for copy, item in zip(copies, items):
        copy.CopyFrom(item)
    del field[:]
    field.extend(copies)
