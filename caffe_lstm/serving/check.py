"""The config against its model file: every tensor the model reads or writes is in the config
(as an input, an output, a state or a control input) with the same name, data type and dims,
the batch dim first. Checked on the ONNX graph's inputs and outputs, and on the TensorRT
network's I/O and its optimization profile, before anything is written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from caffe_lstm.serving.config import ModelSpec, TritonConfigError

_ONNX_FLOAT = 1  # TensorProto.FLOAT


def expected_io(spec: ModelSpec) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """The model file's inputs and outputs the config implies: name -> dims without N."""
    inputs = {t.name: t.dims for t in (*spec.inputs, *spec.cont_controls)}
    inputs.update({s.input: s.dims for s in spec.states})
    outputs = {t.name: t.dims for t in spec.outputs}
    outputs.update({s.output: s.dims for s in spec.states})
    return inputs, outputs


def check_onnx_io(spec: ModelSpec, model: Any, where: str) -> None:
    """``model`` (an ONNX ModelProto) declares exactly the config's tensors: float32, a batch
    dim first (symbolic, or 1 when the maximum batch is 1), then the config's dims."""
    inputs, outputs = expected_io(spec)
    found_in = {info.name: info for info in model.graph.input}
    found_out = {info.name: info for info in model.graph.output}
    _same_names(inputs, found_in, "inputs", where)
    _same_names(outputs, found_out, "outputs", where)
    for name, info in {**found_in, **found_out}.items():
        dims = {**inputs, **outputs}[name]
        tensor = info.type.tensor_type
        if tensor.elem_type != _ONNX_FLOAT:
            _fail(f"ONNX tensor '{name}' has element type {tensor.elem_type}, the config "
                  "TYPE_FP32", where)
        shape = [d.dim_param or d.dim_value for d in tensor.shape.dim]
        if not _dims_ok(shape, dims, spec.max_batch):
            _fail(f"ONNX tensor '{name}' has dims {shape}, the config [N] + {list(dims)} "
                  f"with N up to {spec.max_batch}", where)


def check_network_io(spec: ModelSpec, network: Any, profiles: Mapping[str, Any],
                     where: str) -> None:
    """The TensorRT ``network`` and the profile it is built with (input -> (min, opt, max))
    agree with the config: names, float32, dims after the batch dim, batch 1..max."""
    inputs, outputs = expected_io(spec)
    found_in = {network.get_input(i).name: network.get_input(i)
                for i in range(network.num_inputs)}
    found_out = {network.get_output(i).name: network.get_output(i)
                 for i in range(network.num_outputs)}
    _same_names(inputs, found_in, "inputs", where)
    _same_names(outputs, found_out, "outputs", where)
    for name, tensor in {**found_in, **found_out}.items():
        dims = {**inputs, **outputs}[name]
        shape = tuple(tensor.shape)
        if "FLOAT" not in str(tensor.dtype).upper():
            _fail(f"TensorRT tensor '{name}' is {tensor.dtype}, the config TYPE_FP32", where)
        if not _dims_ok(list(shape), dims, spec.max_batch):
            _fail(f"TensorRT tensor '{name}' has dims {list(shape)}, the config [N] + "
                  f"{list(dims)}", where)
    for name, dims in inputs.items():
        if not spec.max_batch:
            continue  # static shapes: no profile
        low, _, high = profiles[name]
        if tuple(low) != (1, *dims) or tuple(high) != (spec.max_batch, *dims):
            _fail(f"the engine profile of '{name}' spans {low}..{high}, the config batch "
                  f"1..{spec.max_batch} of {list(dims)}", where)


def _dims_ok(shape: list, dims: tuple[int, ...], max_batch: int) -> bool:
    """The model's ``shape`` is the config's ``dims`` after a batch dim (max_batch > 0), or
    equal to them (no batching)."""
    if not max_batch:
        return tuple(shape) == tuple(dims)
    return len(shape) == len(dims) + 1 and tuple(shape[1:]) == tuple(dims) and \
        _batch_dim_ok(shape[0], max_batch)


def _batch_dim_ok(dim: Any, max_batch: int) -> bool:
    """A batch dim the config allows: varying (symbolic, -1), or fixed at 1 = max batch."""
    if isinstance(dim, str):
        return bool(dim)
    return dim == -1 if max_batch > 1 else dim in (-1, 1)


def _same_names(expected: Mapping[str, Any], found: Mapping[str, Any], kind: str,
                where: str) -> None:
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    if missing or extra:
        _fail(f"the model's {kind} differ from the config's (missing {missing}, "
              f"not in the config {extra})", where)


def _fail(what: str, where: str) -> None:
    raise TritonConfigError(what, where, "report this as a caffe-lstm bug")
