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
  step's 3-D tensors, it did not in onnxruntime's profile);
- neighbouring pieces of a ``Split`` that each go to the same activation alone are activated
  as one piece, split after: Caffe's gates come in the order i, f, o, g, so the LSTM step's
  four activations after a four-way Split become one Sigmoid over the i, f, o block (3H) and
  one Tanh over g, the Sigmoid's result split three ways (the same elementwise values, one
  node fewer per step). A body output's value is never one of them;
- the states a step multiplies by cont_t first (Caffe's cont_t · h_{t-1} and cont_t · c_{t-1})
  are multiplied at the end of the step before, by cont_{t+1}: the same products, carried.
  The step's own h_t is then no state output, so the step output is h_t itself instead of a
  copy (an Identity: ONNX's Scan computes a body that lists one name twice among its outputs
  wrongly). Before the Scan, once: cont shifted by one step with a 1 after its last (the
  final states are h_T, c_T themselves) and the initial states times cont_0. 12 nodes per
  LSTM step instead of 13, and 3-4 % less CPU time per step on a long sequence of N = 1
  (benchmarks/cpu_runtimes.py's, one thread). A cont the main graph computes from constants
  (a ``ContinuationIndicator``'s) that is 1 at every step after the first carries the states
  as they are: no product, no scanned cont, only the initial states times cont_0 (11 nodes,
  the step output a copy of h; 2-8 % less time on that long sequence);
- a body whose every value is (1, ...) — the LSTM step's (1, N, ·) — drops that unit axis: the
  Scan runs on (N, ·) slices, a Squeeze before and an Unsqueeze after it (once per sequence),
  and the step's recurrent ``MatMul`` + ``Add`` of the input projection, now 2-D, is one
  ``Gemm`` (h · W + x_t, the same sum; onnxruntime adds x_t into the product's accumulator).
  Only bodies of elementwise nodes, Splits/Concats on another axis and MatMuls by a 2-D
  weight are rewritten; any other body is left as it is. The Unsqueeze after such a Scan and
  the layer output's Squeeze of the same axis cancel: both go, and the Scan writes the blob
  (onnxruntime copies a graph output a Squeeze computes).

One rewrite is of the main graph: the sequence a Scan scans that is x · W + b (an LSTM's input
projection of all steps) is one MatMul [x, 1] · [W; b], b summed inside the product (the last
bits may differ); onnxruntime adds a broadcast bias in a pass of its own over the product.

Last, on the finished model of a model for onnxruntime (``inputs_into_steps``): where a step has
16 rows or more, that projection moves into the step, [x_t, 1, h_{t-1}] · [W; b; U] one product
by a body initializer, and the Scan scans [x, 1]: the (T, N, 4H) projection of all steps is a
round trip through memory that the step's Gemm pays in a single-threaded copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: The most bytes of transposed recurrent weights copied into Scan bodies per model (the
#: protobuf holds them, where the main graph's large weights are streamed past it).
BODY_WEIGHT_BYTES = 256 << 20


def tune_scans(onnx: Any, nodes: list[Any], initializers: list[Any],
               streamed_ranks: dict[str, int] | None = None, outputs: Sequence[str] = ()
               ) -> None:
    """Rewrites every Scan node of the main graph (its ``nodes`` and ``initializers``, lists
    changed in place) and its body; nodes hoisted out of a body go right before their Scan.
    ``streamed_ranks``: the rank of each main-graph weight left out of ``initializers``;
    ``outputs``: the graph's outputs (kept by name)."""
    constants = {tensor.name: tensor for tensor in initializers}
    producers = {out: node for node in nodes for out in node.output}
    tuned = []
    for node in nodes:
        after: list[Any] = []
        if node.op_type == "Scan":
            hoisted = _tune_scan(onnx, node, initializers, constants, producers)
            producers.update({out: step for step in hoisted for out in step.output})
            tuned += hoisted
            ranks = _weight_ranks(_attribute(node, "body").g, producers, {
                **(streamed_ranks or {}),  # and the weights hoisted out of bodies so far:
                **{name: len(tensor.dims) for name, tensor in constants.items()}})
            before, after = _drop_unit_axis(onnx, node, _attribute(node, "body").g, ranks)
            tuned += before
        tuned.append(node)
        tuned += after
    nodes[:] = _drop_axis_round_trips(onnx, tuned, constants, set(outputs))
    _biases_into_projections(onnx, nodes, {
        **(streamed_ranks or {}), **{t.name: len(t.dims) for t in initializers}}, set(outputs))


def _biases_into_projections(onnx: Any, nodes: list[Any], weight_ranks: dict[str, int],
                             outputs: set[str]) -> None:
    """Each sequence a Scan scans that is x · W + b (a MatMul by a 2-D weight, then an Add of
    a 1-D one: an LSTM's input projection of all steps at once) becomes one MatMul: x with a
    column of ones appended, times W with b appended as one more row, [x, 1] · [W; b]. The
    same sums, b joining the product's accumulator (the last bits may differ). onnxruntime
    adds a broadcast bias in a pass of its own over the (T, N, 4H) product: 2-3 ms per layer
    on the 2-layer net of benchmarks/cpu_runtimes.py, where the column of ones costs a copy
    of x (0.2-0.4 ms); [W; b] is a constant that runtimes fold once."""
    producers = {out: node for node in nodes for out in node.output}
    readers = _readers(nodes, through_bodies=True)
    gone: set[int] = set()
    for scan in [node for node in nodes if node.op_type == "Scan"]:
        first = len(scan.input) - _attribute(scan, "num_scan_inputs").i
        for name in scan.input[first:]:
            add = _projection_sum(name, producers, readers, outputs)
            product = _weighted_product(add, producers, readers, weight_ranks)
            if product is None or id(add) in gone:
                continue
            bias = next(term for term in add.input if term != product.output[0])
            replacement = _ones_column_product(onnx, product.input[0], product.input[1], bias,
                                               add.output[0])
            at = next(k for k, node in enumerate(nodes) if node is product)
            nodes[at:at + 1] = replacement
            gone.add(id(add))
    nodes[:] = [node for node in nodes if id(node) not in gone]


def _projection_sum(name: str, producers: dict[str, Any], readers: dict[str, list[Any]],
                    outputs: set[str]) -> Any:
    """The Add a Scan's scanned input comes from through axis-only nodes (Unsqueeze,
    Squeeze, Identity) that nothing else reads, or None."""
    found = _through_axis_nodes(name, ("Unsqueeze", "Squeeze", "Identity"), producers, readers,
                                outputs)
    node = found[1] if found is not None else None
    if node is None or node.op_type != "Add" or node.domain or len(set(node.input)) != 2:
        return None
    return node


def _through_axis_nodes(name: str, axis_ops: Sequence[str], producers: dict[str, Any],
                        readers: dict[str, list[Any]], outputs: set[str]
                        ) -> tuple[list[Any], Any] | None:
    """The nodes of ``axis_ops`` that ``name`` comes from (in the order they run) and the node
    before them (None: a graph input or initializer); None when a value between them is read
    by anything else or is a graph output."""
    chain, node = [], producers.get(name)
    while node is not None and not node.domain and node.op_type in axis_ops:
        if len(readers.get(node.input[0], [])) != 1 or node.input[0] in outputs:
            return None
        chain.insert(0, node)
        node = producers.get(node.input[0])
    return chain, node


def _weighted_product(add: Any, producers: dict[str, Any], readers: dict[str, list[Any]],
                      weight_ranks: dict[str, int]) -> Any:
    """The MatMul that ``add`` adds a 1-D weight to, when only ``add`` reads it and its B is
    a 2-D weight or a Transpose of one; else None."""
    if add is None:
        return None
    for term, bias in (add.input, reversed(add.input)):
        product = producers.get(term)
        if product is None or product.op_type != "MatMul" or product.domain or \
                weight_ranks.get(bias) != 1 or len(readers.get(term, [])) != 1:
            continue
        weight = producers.get(product.input[1])
        if weight is not None and weight.op_type == "Transpose" and \
                all(list(a.ints) == [1, 0] for a in weight.attribute if a.name == "perm"):
            weight = weight.input[0]
        else:
            weight = product.input[1]
        if weight_ranks.get(weight) == 2:
            return product
    return None


def _ones_column_product(onnx: Any, x: str, w: str, b: str, y: str) -> list[Any]:
    """Nodes computing y = [x, 1] · [w; b] for x (..., K), w (K, M), b (M): the ones are
    shaped from x's own shape, so any rank and any dims, known or not."""
    make = onnx.helper.make_node
    one = onnx.helper.make_tensor(f"{y}/one", 1, [1], [1.0])  # 1 = TensorProto.FLOAT
    return [_int_constant(onnx, f"{y}/zero", [0]), _int_constant(onnx, f"{y}/last", [-1]),
            _int_constant(onnx, f"{y}/unit", [1]),
            make("Shape", [x], [f"{y}/x_shape"]),
            make("Slice", [f"{y}/x_shape", f"{y}/zero", f"{y}/last"], [f"{y}/leading"]),
            make("Concat", [f"{y}/leading", f"{y}/unit"], [f"{y}/ones_shape"], axis=0),
            make("ConstantOfShape", [f"{y}/ones_shape"], [f"{y}/ones"], value=one),
            make("Concat", [x, f"{y}/ones"], [f"{y}/x_ones"], axis=-1),
            make("Unsqueeze", [b, f"{y}/zero"], [f"{y}/bias_row"]),
            make("Concat", [w, f"{y}/bias_row"], [f"{y}/weight_bias"], axis=0),
            make("MatMul", [f"{y}/x_ones", f"{y}/weight_bias"], [y], name=y)]


def _drop_axis_round_trips(onnx: Any, nodes: list[Any], constants: dict[str, Any],
                           outputs: set[str]) -> list[Any]:
    """An ``Unsqueeze`` of a Scan's output whose result only a ``Squeeze`` of the same
    constant axes reads (the unit axis the body dropped given back, then the layer's output
    taking it off again) is no node: the Scan writes the Squeeze's output (the blob) itself.
    onnxruntime copies a graph output that a Squeeze computes (10 MB per run on a long
    sequence); the axes constants nothing else reads go too."""
    readers = _readers(nodes, through_bodies=True)
    producers = {out: node for node in nodes for out in node.output}
    gone: set[int] = set()
    for node in nodes:
        after = readers.get(node.output[0], []) if node.op_type == "Unsqueeze" else []
        source = node.input[0] if len(node.input) == 2 else ""
        if len(after) != 1 or after[0].op_type != "Squeeze" or len(after[0].input) != 2 or \
                source not in producers or producers[source].op_type != "Scan" or \
                len(readers[source]) != 1 or {source, node.output[0]} & outputs:
            continue
        axes = [_constant_value(onnx, name, producers, _arrays(onnx, constants))
                for name in (node.input[1], after[0].input[1])]
        if axes[0] is None or axes[1] is None or axes[0].tolist() != axes[1].tolist():
            continue
        outs = producers[source].output
        outs[list(outs).index(source)] = after[0].output[0]
        gone.update((id(node), id(after[0])))
    kept = [node for node in nodes if id(node) not in gone]
    read = {name for node in kept for name in node.input} | outputs | {
        name for node in kept for body in _bodies(node) for name in _names_read(body)}
    return [node for node in kept
            if node.op_type != "Constant" or node.output[0] in read]


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


def _readers(nodes: list[Any], through_bodies: bool = False) -> dict[str, list[Any]]:
    """Value name -> the nodes reading it (``through_bodies``: a node also reads what the
    graphs inside it read)."""
    readers: dict[str, list[Any]] = {}
    for node in nodes:
        inside = [n for body in _bodies(node) for n in _names_read(body)] if through_bodies \
            else []
        for name in [*node.input, *inside]:
            readers.setdefault(name, []).append(node)
    return readers


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


def _tune_scan(onnx: Any, scan: Any, initializers: list[Any], constants: dict[str, Any],
               producers: dict[str, Any]) -> list[Any]:
    """Tunes ``scan``'s body in place; returns the nodes to run before the Scan (the body's
    initializers they read go to the main graph's ``initializers``; ``producers``: the main
    graph's nodes by output)."""
    body = _attribute(scan, "body").g
    before = _hoist_invariants(body)
    _move_initializers(initializers, body, before, constants)
    inner = {**constants, **{tensor.name: tensor for tensor in body.initializer}}
    _merge_repeats(body, inner)
    before += _unsqueeze_before_scan(onnx, scan, body, inner)
    for node in body.node:
        if node.op_type == "Sum" and len(node.input) == 2:
            node.op_type = "Add"
    _group_activations(onnx, body, inner)
    before += _cont_after_step(onnx, scan, body, {
        **producers, **{out: node for node in before for out in node.output}}, constants)
    read = {name for node in body.node for name in node.input}
    _remove(body.initializer, {t.name for t in body.initializer} - read)
    return before


def _cont_after_step(onnx: Any, scan: Any, body: Any, producers: dict[str, Any],
                     constants: dict[str, Any]) -> list[Any]:
    """The states a step multiplies by a scanned input (Caffe's cont_t · h_{t-1}, cont_t ·
    c_{t-1}) multiplied at the end of the step before instead, by cont_{t+1}: the carried
    state is cont_{t+1} · h_t, the same product, and the step's own h_t is no longer a state
    output, so the step output needs no copy (an Identity) of it. Before the Scan: the cont
    sequence shifted by one step with a 1 after its last step (so the final states are h_T,
    c_T themselves) and the initial states times cont_0. A cont the main graph computes from
    constants alone (a ``ContinuationIndicator``'s: 0, then 1) whose every step after the
    first is 1 carries the states as they are: cont_{t+1} · h_t = h_t exactly, so there is
    no product and no scanned cont, only the initial states times cont_0. Returns the nodes
    before the Scan (none when the body is left as it is)."""
    if any(a.name in ("scan_input_axes", "scan_input_directions") for a in scan.attribute):
        return []  # written by the exporter without them: slices along axis 0, forward
    n_states = len(body.input) - _attribute(scan, "num_scan_inputs").i
    conted = _cont_products(body, n_states)
    if conted is None:
        return []
    cont, products = conted
    index = [i.name for i in body.input].index(cont)
    conted_states = [k for k, i in enumerate(body.input[:n_states]) if i.name in products]
    sequence = _constant_value(onnx, scan.input[index], producers, _arrays(onnx, constants))
    if sequence is not None and sequence.shape[:1] and bool(np.all(sequence[1:] == 1)):
        return _cont_before_scan_only(onnx, scan, body, index, products, conted_states)
    step_outputs = {o.name: k for k, o in enumerate(body.output)}
    kept, renamed = _states_unconted(body, products)
    following = f"{cont}/next"
    for state in products:
        output = body.output[[i.name for i in body.input].index(state)]
        after = f"{output.name}/conted"
        kept.append(onnx.helper.make_node("Mul", [output.name, following], [after], name=after))
        output.name = after
    body.input[index].name = following
    outputs = {o.name for o in body.output}
    for node in list(kept):  # a step output copying a value that is no state output any more
        if node.op_type == "Identity" and node.output[0] in step_outputs and \
                node.input[0] not in outputs and node.input[0] not in renamed.values():
            body.output[step_outputs[node.output[0]]].name = node.input[0]
            kept.remove(node)
    _refill(body.node, kept)
    dtype = body.input[index].type.tensor_type.elem_type
    return _shifted_cont(onnx, scan, index, dtype, conted_states)


def _cont_products(body: Any, n_states: int) -> tuple[str, dict[str, Any]] | None:
    """The scanned input whose every reader is a ``Mul`` of it and a state that nothing else
    reads, and those Muls by state; None when there is no such input."""
    readers = _readers(body.node)
    states = {i.name for i in body.input[:n_states]}
    outputs = {o.name for o in body.output}
    for scanned in body.input[n_states:]:
        products = {}
        for node in readers.get(scanned.name, []):
            state = _other_factor(node, scanned.name)
            if state not in states or len(readers[state]) != 1 or \
                    node.output[0] in outputs or state in outputs:
                break
            products[state] = node
        else:
            if products and scanned.name not in outputs:
                return scanned.name, products
    return None


def _other_factor(node: Any, name: str) -> str | None:
    """The other input of a ``Mul`` of ``name`` and something else, else None."""
    if node.op_type != "Mul" or node.domain or len(node.input) != 2:
        return None
    others = [other for other in node.input if other != name]
    return others[0] if len(others) == 1 else None


def _states_unconted(body: Any, products: dict[str, Any]) -> tuple[list[Any], dict[str, str]]:
    """The body's nodes without ``products`` (each state times cont_t), their readers reading
    the state itself instead; and the map product -> state."""
    renamed = {product.output[0]: state for state, product in products.items()}
    kept = [node for node in body.node if node.output[0] not in renamed]
    for node in kept:
        node.input[:] = [renamed.get(name, name) for name in node.input]
    return kept, renamed


def _cont_before_scan_only(onnx: Any, scan: Any, body: Any, index: int,
                           products: dict[str, Any], states: list[int]) -> list[Any]:
    """The body without its scanned input ``index`` (cont) and its ``products`` (each state
    times cont_t): the step reads each previous state as it is, and before the Scan each
    initial state is multiplied by cont_0 once. Returns those nodes."""
    _refill(body.node, _states_unconted(body, products)[0])
    first = scan.input[index]
    del body.input[index]
    del scan.input[index]
    _attribute(scan, "num_scan_inputs").i -= 1
    make, base = onnx.helper.make_node, f"{scan.output[0]}/cont"
    zero = f"{base}/zero"  # a scalar index: Gather drops the time axis
    nodes = [_int_constant(onnx, zero, 0), make("Gather", [first, zero], [f"{base}/0"], axis=0)]
    return nodes + _initial_states_conted(onnx, scan, base, states)


def _constant_value(onnx: Any, name: str, producers: dict[str, Any],
                    known: Callable[[str], np.ndarray | None]) -> np.ndarray | None:
    """The value of ``name`` when the main graph computes it from constants alone: ``known``
    (an initializer's or weight's array by name, else None) or a ``Constant``, then
    ``Identity``, ``Unsqueeze`` / ``Squeeze`` by constant axes (the nodes written around a
    constant cont), a 2-D ``Transpose`` and ``Concat`` (the bias fold's [Wᵀ; b]); else None.
    The inputs of any other node are not looked at."""
    array = known(name)
    node = producers.get(name)
    if array is not None or node is None or node.domain:
        return array
    if node.op_type == "Constant":
        values = [a.t for a in node.attribute if a.name == "value"]
        return onnx.numpy_helper.to_array(values[0]) if values else None
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Transpose":
        data = _constant_value(onnx, node.input[0], producers, known)
        return data.T if data is not None and data.ndim == 2 and \
            list(attributes.get("perm", [1, 0])) == [1, 0] else None
    if node.op_type == "Concat":
        parts = [_constant_value(onnx, each, producers, known) for each in node.input]
        try:
            return None if any(part is None for part in parts) else \
                np.concatenate(parts, axis=attributes["axis"])
        except ValueError:  # parts the axis cannot join: not known
            return None
    if node.op_type not in ("Identity", "Unsqueeze", "Squeeze"):
        return None
    data = _constant_value(onnx, node.input[0], producers, known)
    if data is None or node.op_type == "Identity":
        return data
    axes = _constant_value(onnx, node.input[1], producers, known) \
        if len(node.input) == 2 else None
    if axes is None:
        return None
    axes = tuple(int(axis) for axis in axes.reshape(-1))
    try:
        return np.expand_dims(data, axes) if node.op_type == "Unsqueeze" \
            else np.squeeze(data, axis=axes)
    except ValueError:  # axes the data cannot take (numpy's AxisError is one): not known
        return None


def _arrays(onnx: Any, constants: dict[str, Any]) -> Callable[[str], np.ndarray | None]:
    """name -> the array of the initializer ``constants`` holds by that name, or None."""
    return lambda name: onnx.numpy_helper.to_array(constants[name]) if name in constants \
        else None


def _shifted_cont(onnx: Any, scan: Any, index: int, dtype: int, states: list[int]
                  ) -> list[Any]:
    """Before the Scan: its input ``index`` (cont, T steps) replaced by cont_1 ... cont_{T-1},
    1, and each initial state in ``states`` by its product with cont_0."""
    make, base, sequence = onnx.helper.make_node, f"{scan.output[0]}/cont", scan.input[index]
    one = onnx.helper.make_tensor(f"{base}/one", dtype, [1], [1])
    zero, first_end, end = (f"{base}/{name}" for name in ("zero", "first_end", "end"))
    nodes = [_int_constant(onnx, name, [value]) for name, value in
             ((zero, 0), (first_end, 1), (end, np.iinfo(np.int64).max))]
    nodes += [make("Slice", [sequence, zero, first_end, zero], [f"{base}/first"]),
              make("Slice", [sequence, first_end, end, zero], [f"{base}/rest"]),
              make("Shape", [f"{base}/first"], [f"{base}/step_shape"]),
              make("ConstantOfShape", [f"{base}/step_shape"], [f"{base}/ones"], value=one),
              make("Concat", [f"{base}/rest", f"{base}/ones"], [f"{base}/next"], axis=0),
              make("Squeeze", [f"{base}/first", zero], [f"{base}/0"])]
    scan.input[index] = f"{base}/next"
    return nodes + _initial_states_conted(onnx, scan, base, states)


def _initial_states_conted(onnx: Any, scan: Any, base: str, states: list[int]) -> list[Any]:
    """Each initial state in ``states`` (the Scan's inputs by index) replaced by its product
    with cont_0 (``<base>/0``): Caffe's cont_0 · h_{-1} before the first step."""
    nodes = []
    for k in states:
        conted = f"{base}/{k}/initial"
        nodes.append(onnx.helper.make_node("Mul", [scan.input[k], f"{base}/0"], [conted],
                                           name=conted))
        scan.input[k] = conted
    return nodes


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
        before += [_int_constant(onnx, axes_name, [axis + 1 for axis in axes]),
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


#: Elementwise activations without attributes, which commute with a Split.
_ACTIVATIONS = ("Sigmoid", "Tanh", "Relu")


def _group_activations(onnx: Any, body: Any, constants: dict[str, Any]) -> None:
    """Each Split (sizes a constant input) whose neighbouring pieces each go alone to the same
    activation: the Split cut into runs, one activation per run, a run of two or more pieces
    split again after its activation (act(x)[a:b] == act(x[a:b]), elementwise)."""
    readers = _readers(body.node)
    outputs = {o.name for o in body.output}
    gone: set[int] = set()
    rewritten: list[Any] = []
    for node in body.node:
        runs = _activation_runs(onnx, node, readers, outputs, constants)
        if runs is None or all(len(run) == 1 for run, _ in runs):
            rewritten.append(node)
            continue
        rewritten += _split_by_runs(onnx, body, node, runs)
        gone.update(id(act) for run, _ in runs for act in run)
    if gone:
        _refill(body.node, [node for node in rewritten if id(node) not in gone])


def _activation_runs(onnx: Any, split: Any, readers: dict[str, list[Any]], outputs: set[str],
                     constants: dict[str, Any]) -> list[tuple[list[Any], list[int]]] | None:
    """The Split's pieces as runs of neighbours with the same activation: (activation nodes,
    piece sizes) per run; None unless every piece goes to one activation alone."""
    sizes = _constant_ints(onnx, split.input[1], constants) \
        if split.op_type == "Split" and len(split.input) == 2 else None
    if sizes is None or len(sizes) != len(split.output) or outputs & set(split.output):
        return None
    acts = [readers.get(name, []) for name in split.output]
    if any(len(a) != 1 or a[0].op_type not in _ACTIVATIONS or a[0].domain or
           len(a[0].input) != 1 or outputs & set(a[0].output) for a in acts):
        return None
    runs: list[tuple[list[Any], list[int]]] = []
    for (act,), size in zip(acts, sizes):
        if runs and runs[-1][0][-1].op_type == act.op_type:
            runs[-1][0].append(act)
            runs[-1][1].append(size)
        else:
            runs.append(([act], [size]))
    return runs


def _split_by_runs(onnx: Any, body: Any, split: Any, runs: list[tuple[list[Any], list[int]]]
                   ) -> list[Any]:
    """The nodes replacing ``split`` and its activations: one Split into the runs, then per run
    its activation (and a Split into its pieces, for a run of more than one)."""
    make, base = onnx.helper.make_node, split.output[0]
    pieces = [f"{base}/run{k}" for k in range(len(runs))]
    nodes = [make("Split", [split.input[0], _sizes(onnx, body, f"{base}/runs",
                                                   [sum(sizes) for _, sizes in runs])],
                  pieces, name=f"{split.name or base}/runs", domain=split.domain)]
    nodes[0].attribute.extend(split.attribute)
    for piece, (acts, sizes) in zip(pieces, runs):
        if len(acts) == 1:
            nodes.append(make(acts[0].op_type, [piece], list(acts[0].output), name=acts[0].name))
            continue
        active = f"{piece}/{acts[0].op_type.lower()}"
        nodes.append(make(acts[0].op_type, [piece], [active], name=active))
        nodes.append(make("Split", [active, _sizes(onnx, body, f"{active}/split", sizes)],
                          [act.output[0] for act in acts], name=f"{active}/split"))
        nodes[-1].attribute.extend(split.attribute)
    return nodes


def _sizes(onnx: Any, body: Any, name: str, sizes: list[int]) -> str:
    """A Split's sizes, a new int64 initializer of the body; returns its name."""
    body.initializer.append(onnx.numpy_helper.from_array(_int64(sizes), name))
    return name


#: Ops whose output is their inputs' broadcast, elementwise: a unit leading axis comes off alike.
_ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "Neg", "Identity") + _ACTIVATIONS


def _weight_ranks(body: Any, producers: dict[str, Any], weight_ranks: dict[str, int]
                  ) -> dict[str, int]:
    """The rank of each outer name a body node reads that is a weight or a Transpose of one
    (the recurrent weight, hoisted), by name; other outer names are not known."""
    ranks = {}
    for name in _names_read(body):
        node = producers.get(name)
        source = node.input[0] if node is not None and node.op_type == "Transpose" else name
        if source in weight_ranks:
            ranks[name] = weight_ranks[source]
    return ranks


def _drop_unit_axis(onnx: Any, scan: Any, body: Any, outer_ranks: dict[str, int]
                    ) -> tuple[list[Any], list[Any]]:
    """The body on slices without their unit leading axis (see the module's docstring), when
    every body input and output is (1, ...) of one rank and every node allows it; returns the
    nodes to run before and after the Scan (none when the body is left as it is)."""
    if any(a.name.startswith("scan_") and a.name.endswith("_axes") for a in scan.attribute):
        return [], []
    infos = list(body.input) + list(body.output)
    shapes = [info.type.tensor_type.shape.dim for info in infos]
    rank = len(shapes[0])
    if rank < 2 or len(body.value_info) or any(
            len(dims) != rank or dims[0].dim_value != 1 for dims in shapes):
        return [], []
    ranks = {**outer_ranks, **{t.name: len(t.dims) for t in body.initializer}}
    inside = _defined_in(body) - {t.name for t in body.initializer}
    if not all(_unit_axis_drops(node, inside, ranks, rank) for node in body.node):
        return [], []
    for node in body.node:  # a Split's or Concat's axis, counted from the front, moves down
        for attribute in node.attribute:
            if attribute.name == "axis" and attribute.i > 0:
                attribute.i -= 1
    if rank == 3:
        _gemms(onnx, body)
    for dims in shapes:
        del dims[0]
    return _squeezes(onnx, scan, body)


def _unit_axis_drops(node: Any, inside: set[str], ranks: dict[str, int], rank: int) -> bool:
    """Whether ``node`` computes the same on its inputs' unit leading axis dropped: elementwise
    on body values and constants of lower rank, a Split or Concat on another axis (given),
    a MatMul by a 2-D weight."""
    values = [name for name in node.input if name in inside]
    others = [name for name in node.input if name and name not in inside]
    if node.domain or _has_subgraph(node) or not values:
        return False
    if node.op_type == "MatMul":
        return node.input[0] in inside and ranks.get(node.input[1]) == 2
    axis = [a.i for a in node.attribute if a.name == "axis"]
    on_another_axis = bool(axis) and axis[0] not in (0, -rank)
    if node.op_type == "Concat":
        return on_another_axis and not others
    if node.op_type == "Split":  # of a body value, by constant sizes or evenly
        return on_another_axis and node.input[1:] == others and len(others) <= 1
    return node.op_type in _ELEMENTWISE and all(ranks.get(name, rank) < rank for name in others)


def _gemms(onnx: Any, body: Any) -> None:
    """Each MatMul read only by an Add of a body input (a step's slice), with it, becomes one
    Gemm (all 2-D now)."""
    readers = _readers(body.node)
    scanned = {i.name for i in body.input}
    outputs = {o.name for o in body.output}
    fused: set[int] = set()
    kept = []
    for node in body.node:
        add = readers.get(node.output[0], [None]) if node.op_type == "MatMul" else [None]
        if len(add) != 1 or add[0] is None or add[0].op_type != "Add" or \
                node.output[0] in outputs or len(set(add[0].input)) != 2:
            kept.append(node)
            continue
        (bias,) = [name for name in add[0].input if name != node.output[0]]
        if bias not in scanned:  # the step's slice (N, K): Gemm's C, as wide as the product
            kept.append(node)
            continue
        kept.append(onnx.helper.make_node("Gemm", [*node.input, bias], list(add[0].output),
                                          name=add[0].name or node.name))
        fused.add(id(add[0]))
    kept = [node for node in kept if id(node) not in fused]
    if fused:
        _refill(body.node, kept)


def _squeezes(onnx: Any, scan: Any, body: Any) -> tuple[list[Any], list[Any]]:
    """A Squeeze of each Scan input's unit axis (0 for a state, 1 for a sequence) before the
    Scan, an Unsqueeze of each output's after it, the Scan's own names kept outside."""
    n_states = len(body.input) - _attribute(scan, "num_scan_inputs").i
    before, after, squeezed = [], [], {}
    for index, name in enumerate(scan.input):
        axis = 0 if index < n_states else 1
        if (name, axis) not in squeezed:  # one Squeeze of an input the Scan reads twice
            squeezed[name, axis] = f"{scan.output[0]}/input{index}"  # unique: another Scan
            # may squeeze the same input
            before += _axis_op(onnx, "Squeeze", name, squeezed[name, axis], axis)
        scan.input[index] = squeezed[name, axis]
    for index, name in enumerate(scan.output):
        scan.output[index] = f"{name}/squeezed"
        after += _axis_op(onnx, "Unsqueeze", scan.output[index], name, int(index >= n_states))
    return before, after


def _axis_op(onnx: Any, op_type: str, source: str, target: str, axis: int) -> list[Any]:
    """A Squeeze or Unsqueeze of one axis (axes an input: opset 13 and later)."""
    axes = f"{target}/axes"
    return [_int_constant(onnx, axes, [axis]),
            onnx.helper.make_node(op_type, [source, axes], [target], name=target)]


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
    return np.array(values, dtype=np.int64)


def _int_constant(onnx: Any, name: str, values: int | list[int]) -> Any:
    """A ``Constant`` node of INT64 ``values`` called ``name`` (0-D for an int)."""
    return onnx.helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(
        np.array(values, dtype=np.int64), name))


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


#: The input projection moves into the step (``inputs_into_steps``) when a step has at least
#: this many rows: below, the step's product is bound by reading its weights, and more of them
#: cost more than the round trip saves (benchmarks/README.md: N = 1 took 1.4x the time, N = 8
#: 1.04x; N = 12 0.98x, N = 16 to 64 0.92-0.94x).
STEP_INPUT_ROWS = 16
#: ... and when the step's joint matrix [B; U] is at most this many bytes: the step reads it
#: from the cache every step (25 MB, H = 1024 and I = 512, took 1.35x the time; 21 MB 0.93x).
STEP_INPUT_BYTES = 16 << 20


def inputs_into_steps(onnx: Any, graph: Any, weight: Callable[[str], np.ndarray | None],
                      rows: Callable[[str], int | None]) -> set[str]:
    """Each Scan whose scanned input is a product of all steps' inputs by a constant matrix,
    x · B (an LSTM's input projection, [x, 1] · [W; b] after the bias fold), that the body
    adds into its step's product, Gemm(h, U, x_t), computes that projection inside the step:
    the Scan scans x itself, and the step is one MatMul [x_t, h] · [B; U] by a body
    initializer. The same terms in one product (the last bits may differ).

    Why: the projection of all steps is a (T, N, 4H) tensor written once and read back a step
    at a time; past the last-level cache that is a round trip through memory, which
    onnxruntime's Gemm pays in a single-threaded copy of x_t into its output before the
    product (the 2-layer net of benchmarks/cpu_runtimes.py, T = 200, N = 16, H = 512: 0.93x
    the time; T = 1000: 0.89x; T = 50, in the cache: the same). Done where the product is
    bound by arithmetic, not by reading its weights: ``rows(name)``, the rows of a step of the
    scanned sequence ``name`` (None: not known), at least ``STEP_INPUT_ROWS``, and [B; U] at
    most ``STEP_INPUT_BYTES``; B's bytes count against ``BODY_WEIGHT_BYTES``. ``graph``: the
    finished model's, changed in place, after ``weights_into_bodies`` (U an initializer of the
    body); ``weight``: as there. Returns the names of the main graph's weights no node reads
    any more."""
    producers = {out: node for node in graph.node for out in node.output}
    readers = _readers(list(graph.node), through_bodies=True)
    outputs = {output.name for output in graph.output}
    budget = BODY_WEIGHT_BYTES - sum(len(tensor.raw_data) for node in graph.node
                                     for body in _bodies(node) for tensor in body.initializer)
    unread: set[str] = set()
    for scan in [node for node in graph.node if node.op_type == "Scan"]:
        body = _attribute(scan, "body").g
        first = len(scan.input) - _attribute(scan, "num_scan_inputs").i
        for index in range(first, len(scan.input)):
            found = _step_product(onnx, scan, body, index, producers, readers, outputs, weight,
                                  rows)
            if found is not None and found[2].nbytes <= budget:
                budget -= found[2].nbytes
                unread |= _product_into_step(onnx, graph, scan, body, index, *found)
                producers = {out: node for node in graph.node for out in node.output}
                readers = _readers(list(graph.node), through_bodies=True)
    return {name for name in unread if name not in readers}


def _step_product(onnx: Any, scan: Any, body: Any, index: int, producers: dict[str, Any],
                  readers: dict[str, list[Any]], outputs: set[str],
                  weight: Callable[[str], np.ndarray | None], rows: Callable[[str], int | None]
                  ) -> tuple[Any, list[Any], np.ndarray, Any] | None:
    """For the Scan's scanned input ``index``: the main graph's product x · B it comes from
    (through Squeeze / Unsqueeze nodes that only it reads), those nodes, B, and the body's
    Gemm(h, U, x_t) that alone reads the slice; None when anything differs or it would not
    pay (see ``inputs_into_steps``)."""
    name = scan.input[index]  # renamed with the chain's nodes: read by the Scan alone
    found = _through_axis_nodes(name, ("Squeeze", "Unsqueeze"), producers, readers, outputs)
    if found is None or len(readers.get(name, [])) != 1 or name in outputs:
        return None
    chain, node = found
    if node is None or node.op_type != "MatMul" or node.domain:
        return None
    name = node.output[0]
    step = body.input[index].name
    users = [n for n in body.node if step in n.input]
    gemm = users[0] if len(users) == 1 else None
    weights = {tensor.name: tensor for tensor in body.initializer}
    if gemm is None or gemm.op_type != "Gemm" or gemm.attribute or len(gemm.input) != 3 or \
            gemm.input[2] != step or gemm.input[1] not in weights or \
            step in {o.name for o in body.output}:
        return None
    recurrent = weights[gemm.input[1]]
    matrix = _constant_matrix(onnx, node.input[1], producers, weight)
    if matrix is None or len(recurrent.dims) != 2 or matrix.shape[1] != recurrent.dims[1] or \
            (rows(name) or 0) < STEP_INPUT_ROWS or \
            (matrix.shape[0] + recurrent.dims[0]) * recurrent.dims[1] * 4 > STEP_INPUT_BYTES:
        return None
    return node, chain, matrix, gemm


def _product_into_step(onnx: Any, graph: Any, scan: Any, body: Any, index: int, product: Any,
                       chain: list[Any], matrix: np.ndarray, gemm: Any) -> set[str]:
    """Rewrites what ``_step_product`` found; returns the main-graph names the gone nodes
    read (the weights among them may be read by nothing now)."""
    source = product.input[0]
    for k, node in enumerate(chain):  # the same axis nodes, on x
        node.input[0] = source
        node.output[0] = source = f"{product.input[0]}/steps{k}"
    scan.input[index] = source
    state, recurrent = gemm.input[0], gemm.input[1]
    tensors = {tensor.name: tensor for tensor in body.initializer}
    weights, joined = f"{gemm.output[0]}/weights", f"{gemm.output[0]}/step_input"
    _add_tensor(body.initializer, weights, np.concatenate(  # B's rows, then U's
        [matrix, onnx.numpy_helper.to_array(tensors[recurrent])]))
    step = body.input[index].name = f"{product.input[0]}_t"  # the step's slice of x now
    nodes = list(body.node)
    at = nodes.index(gemm)
    nodes[at:at + 1] = [
        onnx.helper.make_node("Concat", [step, state], [joined], name=joined, axis=-1),
        onnx.helper.make_node("MatMul", [joined, weights], list(gemm.output), name=gemm.name)]
    _refill(body.node, nodes)
    if recurrent not in _names_read(body):
        _remove(body.initializer, {recurrent})
    dims = body.input[index].type.tensor_type.shape.dim
    dims[-1].Clear()
    dims[-1].dim_value = matrix.shape[0]
    return _remove_unread(graph, product)


def _remove_unread(graph: Any, product: Any) -> set[str]:
    """Removes ``product`` and then, one by one, each main-graph node that computed what a
    removed node read and whose outputs nothing reads any more; returns the names the removed
    nodes read."""
    outputs = {output.name for output in graph.output}
    node, read_by_gone = product, set()
    while node is not None:
        read_by_gone.update(node.input)
        del graph.node[next(k for k, each in enumerate(graph.node) if each is node)]
        read = _readers(list(graph.node), through_bodies=True)
        node = next((each for each in graph.node if set(each.output) & read_by_gone and not
                     any(out in read or out in outputs for out in each.output)), None)
    return read_by_gone


def _constant_matrix(onnx: Any, name: str, producers: dict[str, Any],
                     weight: Callable[[str], np.ndarray | None]) -> np.ndarray | None:
    """The 2-D float32 value of ``name`` when the main graph computes it from weights and
    constants (the bias fold's [Wᵀ; b]); else None."""
    value = _constant_value(onnx, name, producers, weight)
    return value if value is not None and value.ndim == 2 and value.dtype == np.float32 \
        else None
