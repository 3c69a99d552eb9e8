"""Triton's model configuration (config.pbtxt) for a caffe-lstm model: built as a dict that
mirrors the ``ModelConfig`` protobuf message, written as protobuf text, and checked.

Two checks run before anything is written: the text parses with Triton's own schema
(``tritonclient.grpc.model_config_pb2``) when tritonclient imports, and a structural check of
our own always (it also catches what the schema's parser lets through: unknown data types,
a state listed as an input, a duplicated name, a preferred batch size above the maximum).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from caffe_lstm.errors import CaffeLstmError
from caffe_lstm.options import Backend

#: The model file in the version folder, per backend (python: beside model.py).
MODEL_FILES = {Backend.PYTHON: "model.onnx", Backend.ONNXRUNTIME: "model.onnx",
               Backend.TENSORRT: "model.plan"}
#: Triton's control input names (the names its client examples use).
START, END, READY, CORRID = "START", "END", "READY", "CORRID"
#: The parameter that hands model.py what the config cannot say (the carried states).
PYTHON_PARAMETER = "caffe_lstm"

_DATA_TYPES = {"TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64",
               "TYPE_INT8", "TYPE_INT16", "TYPE_INT32", "TYPE_INT64", "TYPE_FP16",
               "TYPE_FP32", "TYPE_FP64", "TYPE_STRING", "TYPE_BF16"}
_CONTROL_KINDS = {"CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_READY", "CONTROL_SEQUENCE_END",
                  "CONTROL_SEQUENCE_CORRID"}


class TritonConfigError(CaffeLstmError):
    """A model configuration Triton would refuse, or one that disagrees with its model file."""


class Enum(str):
    """An enum value: written bare (``TYPE_FP32``), not quoted."""


@dataclass(frozen=True)
class Tensor:
    """One tensor as the config declares it: dims without the batch dim."""

    name: str
    dims: tuple[int, ...]
    data_type: str = "TYPE_FP32"


@dataclass(frozen=True)
class State:
    """A carried state: the model reads ``input`` and writes ``output`` (dims without N)."""

    input: str
    output: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class Batching:
    """The sequence batcher's options (Triton's ``oldest`` strategy) and the idle timeout."""

    max_candidate_sequences: int | None = None
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    max_sequence_idle_us: int = 10_000_000


@dataclass(frozen=True)
class ModelSpec:
    """Everything the config says about one model."""

    name: str
    backend: Backend | str
    max_batch: int
    instances: int
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    states: tuple[State, ...] = ()
    #: inputs Triton fills from the START flag (Caffe's cont: 0 at the start, 1 after)
    cont_controls: tuple[Tensor, ...] = ()
    batching: Batching = field(default_factory=Batching)
    #: string parameters of the config: the build facts (``caffe_lstm.<fact>``)
    parameters: tuple[tuple[str, str], ...] = ()

    @property
    def stateful(self) -> bool:
        return bool(self.states)


# ---- the dict ------------------------------------------------------------------------------------


def model_config(spec: ModelSpec) -> dict[str, Any]:
    """The ``ModelConfig`` of ``spec`` as a dict of protobuf field names.

    A stateful model gets ``sequence_batching``: the control inputs START/END/READY/CORRID,
    the ``oldest`` strategy and, for the onnxruntime and TensorRT backends, one implicit
    ``state`` per carried state (zeros at START). The Python backend keeps the states itself
    (Triton hands it only the initial state), so its config lists them in a parameter. A model
    without state gets ``dynamic_batching``.
    """
    config: dict[str, Any] = {"name": spec.name, "backend": Backend(spec.backend).value,
                              "max_batch_size": spec.max_batch,
                              "input": [_tensor(t) for t in spec.inputs],
                              "output": [_tensor(t) for t in spec.outputs],
                              "instance_group": [{"count": spec.instances,
                                                  "kind": Enum(_instance_kind(spec.backend))}]}
    if spec.backend == "tensorrt":
        config["default_model_filename"] = MODEL_FILES[Backend.TENSORRT]
    if spec.stateful:
        config["sequence_batching"] = _sequence_batching(spec)
    elif spec.max_batch:  # without batching a stateless model needs no batcher
        config["dynamic_batching"] = _dynamic_batching(spec.batching)
    parameters = {key: {"string_value": value} for key, value in spec.parameters}
    if spec.backend == "python":
        parameters[PYTHON_PARAMETER] = {"string_value": _python_parameter(spec)}
    if parameters:
        config["parameters"] = parameters
    return config


def _instance_kind(backend: str) -> str:
    return "KIND_GPU" if backend == "tensorrt" else "KIND_CPU"


def _tensor(tensor: Tensor) -> dict[str, Any]:
    return {"name": tensor.name, "data_type": Enum(tensor.data_type), "dims": list(tensor.dims)}


def _sequence_batching(spec: ModelSpec) -> dict[str, Any]:
    flags = [(START, "CONTROL_SEQUENCE_START"), (END, "CONTROL_SEQUENCE_END"),
             (READY, "CONTROL_SEQUENCE_READY")]
    if spec.cont_controls:  # Triton takes one START control: the cont it fills then is START
        flags = flags[1:]
    controls = [{"name": name, "control": [{"kind": Enum(kind), "int32_false_true": [0, 1]}]}
                for name, kind in flags]
    controls.append({"name": CORRID, "control": [{"kind": Enum("CONTROL_SEQUENCE_CORRID"),
                                                  "data_type": Enum("TYPE_UINT64")}]})
    # Caffe's cont: 0 on the first step of a sequence (state reset), 1 after
    controls += [{"name": cont.name, "control": [{"kind": Enum("CONTROL_SEQUENCE_START"),
                                                  "fp32_false_true": [1, 0]}]}
                 for cont in spec.cont_controls]
    batching = spec.batching
    oldest: dict[str, Any] = {"max_candidate_sequences":
                              batching.max_candidate_sequences or 4 * max(spec.max_batch, 1),
                              "max_queue_delay_microseconds": batching.max_queue_delay_us}
    if batching.preferred_batch_sizes:
        oldest["preferred_batch_size"] = list(batching.preferred_batch_sizes)
    sequence: dict[str, Any] = {
        "max_sequence_idle_microseconds": batching.max_sequence_idle_us,
        "control_input": controls, "oldest": oldest}
    if spec.backend != "python":
        sequence["state"] = [_state(state) for state in spec.states]
    return sequence


def _state(state: State) -> dict[str, Any]:
    return {"input_name": state.input, "output_name": state.output,
            "data_type": Enum("TYPE_FP32"), "dims": list(state.dims),
            # repeated in the schema; one zero-filled tensor
            "initial_state": [{"name": "zeros", "data_type": Enum("TYPE_FP32"),
                               "dims": list(state.dims), "zero_data": True}]}


def _dynamic_batching(batching: Batching) -> dict[str, Any]:
    dynamic: dict[str, Any] = {"max_queue_delay_microseconds": batching.max_queue_delay_us}
    if batching.preferred_batch_sizes:
        dynamic["preferred_batch_size"] = list(batching.preferred_batch_sizes)
    return dynamic


def _python_parameter(spec: ModelSpec) -> str:
    import json

    return json.dumps({"onnx": MODEL_FILES["python"],
                       "states": [{"input": s.input, "output": s.output, "dims": list(s.dims)}
                                  for s in spec.states]}, sort_keys=True)


# ---- protobuf text -------------------------------------------------------------------------------


def to_pbtxt(config: Mapping[str, Any]) -> str:
    """``config`` as protobuf text format, one field per line."""
    return "".join(_fields(config, 0))


def _fields(message: Mapping[str, Any], depth: int) -> list[str]:
    pad, lines = "  " * depth, []
    for key, value in message.items():
        if key == "parameters":  # a map<string, ModelParameter>: one entry per key
            for name, parameter in value.items():
                lines.append(f"{pad}parameters {{\n{pad}  key: {_scalar(name)}\n"
                             f"{pad}  value {{\n")
                lines += _fields(parameter, depth + 2)
                lines.append(f"{pad}  }}\n{pad}}}\n")
        elif isinstance(value, Mapping):
            lines.append(f"{pad}{key} {{\n")
            lines += _fields(value, depth + 1)
            lines.append(f"{pad}}}\n")
        elif isinstance(value, list) and value and isinstance(value[0], Mapping):
            for item in value:
                lines.append(f"{pad}{key} {{\n")
                lines += _fields(item, depth + 1)
                lines.append(f"{pad}}}\n")
        elif isinstance(value, list):
            lines.append(f"{pad}{key}: [ {', '.join(_scalar(v) for v in value)} ]\n")
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}\n")
    return lines


def _scalar(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


# ---- checks --------------------------------------------------------------------------------------


def parse_with_triton(text: str, where: str) -> bool:
    """Parses ``text`` with Triton's ModelConfig schema; False when tritonclient is missing.

    Raises:
        TritonConfigError: the schema refuses the text (a bug in the writer, or a name it
            cannot hold).
    """
    try:
        schema = importlib.import_module("tritonclient.grpc.model_config_pb2")
        text_format = importlib.import_module("google.protobuf.text_format")
    except (ImportError, RuntimeError):  # tritonclient without its grpc extra raises the latter
        return False
    try:
        text_format.Parse(text, schema.ModelConfig())
    except text_format.ParseError as exc:
        raise TritonConfigError(f"Triton's schema refuses the model configuration ({exc})",
                                where, "report this as a caffe-lstm bug") from None
    return True


def check_structure(config: Mapping[str, Any], where: str) -> None:
    """What Triton checks at load time and its schema parser does not.

    Raises:
        TritonConfigError: the first problem found.
    """
    def fail(what: str) -> None:
        raise TritonConfigError(what, where, "report this as a caffe-lstm bug")

    if not config.get("name") or "/" in config["name"]:
        fail(f"the model name {config.get('name')!r} is empty or holds '/'")
    if config.get("max_batch_size", 0) < 0:
        fail("max_batch_size is negative")
    tensors = list(config.get("input", [])) + list(config.get("output", []))
    if not config.get("input") or not config.get("output"):
        fail("the model needs at least one input and one output")
    for tensor in tensors:
        _check_tensor(tensor, fail)
    names = [t["name"] for t in config.get("input", [])]
    _check_unique(names, "input", fail)
    _check_unique([t["name"] for t in config.get("output", [])], "output", fail)
    sequence = config.get("sequence_batching")
    if sequence is not None:
        _check_sequence(sequence, set(names), set(t["name"] for t in config["output"]),
                        config["max_batch_size"], fail)
    dynamic = config.get("dynamic_batching")
    if dynamic is not None:
        _check_preferred(dynamic.get("preferred_batch_size", []), config["max_batch_size"], fail)


def _check_tensor(tensor: Mapping[str, Any], fail) -> None:
    if not tensor.get("name"):
        fail("a tensor has no name")
    if tensor.get("data_type") not in _DATA_TYPES:
        fail(f"tensor '{tensor['name']}' has data type {tensor.get('data_type')!r}")
    dims = tensor.get("dims", [])
    if not dims or any(not isinstance(d, int) or (d < 1 and d != -1) for d in dims):
        fail(f"tensor '{tensor['name']}' has dims {dims}")


def _check_unique(names: Sequence[str], kind: str, fail) -> None:
    seen = set()
    for name in names:
        if name in seen:
            fail(f"{kind} '{name}' is declared twice")
        seen.add(name)


def _check_sequence(sequence: Mapping[str, Any], inputs: set[str], outputs: set[str],
                    max_batch: int, fail) -> None:
    kinds = []
    for control in sequence.get("control_input", []):
        if control["name"] in inputs:
            fail(f"control input '{control['name']}' is also a model input")
        for item in control["control"]:
            if item["kind"] not in _CONTROL_KINDS:
                fail(f"control '{control['name']}' has kind {item['kind']!r}")
            if item["kind"] == "CONTROL_SEQUENCE_CORRID" and \
                    item.get("data_type") not in {"TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32",
                                                  "TYPE_INT32", "TYPE_STRING"}:
                fail("the CORRID control needs a data_type (Triton refuses the model without)")
            kinds.append(item["kind"])
    if kinds.count("CONTROL_SEQUENCE_START") != 1:
        fail("the sequence batcher needs exactly one START control (Triton refuses more)")
    for state in sequence.get("state", []):
        if state["input_name"] in inputs or state["output_name"] in outputs:
            fail(f"state '{state['input_name']}' is also listed as a model input or output")
        _check_tensor({"name": state["input_name"], **state}, fail)
        if any(initial["dims"] != state["dims"] for initial in state["initial_state"]):
            fail(f"the initial state of '{state['input_name']}' has other dims")
    if sequence.get("max_sequence_idle_microseconds", 1) < 1:
        fail("max_sequence_idle_microseconds must be positive")
    oldest = sequence.get("oldest", {})
    if oldest.get("max_candidate_sequences", 1) < 1:
        fail("max_candidate_sequences must be positive")
    _check_preferred(oldest.get("preferred_batch_size", []), max_batch, fail)


def _check_preferred(sizes: Sequence[int], max_batch: int, fail) -> None:
    for size in sizes:
        if not 1 <= size <= max_batch:
            fail(f"preferred batch size {size} is outside 1..max_batch_size {max_batch}")
