"""Running an exported ONNX model with onnxruntime on the CPU (imported lazily, so every other
command works without it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from caffe_lstm.backends.onnx.exporter import Streamed, import_module, remove_initializer
from caffe_lstm.errors import CaffeLstmError, ExecutionError, ModelLoadError


def require_onnxruntime() -> str:
    """onnxruntime's version, or a one-line error with the install hint."""
    return import_module("onnxruntime").__version__


def onnxruntime_available() -> bool:
    """Whether onnxruntime imports (what ``verify`` looks at by default)."""
    try:
        require_onnxruntime()
    except CaffeLstmError:
        return False
    return True


def wants_onnxruntime(choice: bool | None) -> bool:
    """verify's onnxruntime column: asked for (True: onnxruntime must import), refused, or
    None: when it imports."""
    if choice is None:
        return onnxruntime_available()
    if choice:
        require_onnxruntime()
    return choice


def run_model(model: str | Path | bytes | Any, feeds: Mapping[str, np.ndarray],
              source: str = "the exported model", streamed: Sequence[Streamed] = ()
              ) -> dict[str, np.ndarray]:
    """Runs ``model`` (a path, serialized bytes, or a ModelProto with the ``streamed`` weights
    of ``build_model(stream=True)`` left out) once on ``feeds`` (float32 arrays by input name);
    returns every output by name.

    Raises:
        ModelLoadError: a file onnxruntime cannot load.
        ExecutionError: inputs the model lacks or does not declare, or a run that fails.
    """
    return session_runner(model, source, streamed)(feeds)


def session_runner(model: str | Path | bytes | Any, source: str = "the exported model",
                   streamed: Sequence[Streamed] = ()
                   ) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]:
    """``run_model`` in two halves: the onnxruntime session made once (here), the function
    running it on feeds as often as wanted (a benchmark's runs); raises as ``run_model``."""
    ort = import_module("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: warnings would clutter the CLI's output
    model_arg = str(model) if isinstance(model, Path) else model
    if not isinstance(model, (str, Path, bytes)):
        model_arg = _hand_over_weights(ort, options, model, streamed)
    try:
        session = ort.InferenceSession(model_arg, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
        raise ModelLoadError(f"onnxruntime cannot load the model ({_first_line(exc)})",
                             source, "export it again with `caffe-lstm export`") from None
    return lambda feeds: _run_session(session, feeds, source)


def _run_session(session: Any, feeds: Mapping[str, np.ndarray], source: str
                 ) -> dict[str, np.ndarray]:
    names = [i.name for i in session.get_inputs()]
    _check_feeds(names, feeds, source)
    arrays = {name: np.ascontiguousarray(feeds[name], dtype=np.float32) for name in names}
    try:
        results = session.run(None, arrays)
    except Exception as exc:
        raise ExecutionError(f"onnxruntime failed ({_first_line(exc)})", source,
                             "check the input shapes against those the model was exported "
                             "for (export with shapes= to make T and N vary)") from None
    return {o.name: np.asarray(r, dtype=np.float32)
            for o, r in zip(session.get_outputs(), results)}


def _hand_over_weights(ort: Any, options: Any, model: Any, streamed: Sequence[Streamed]
                       ) -> bytes:
    """The bytes of ``model`` with each streamed weight a placeholder marked as external data,
    and the weights handed to onnxruntime as OrtValues over their arrays
    (``SessionOptions.add_external_initializers`` replaces such placeholders before the graph
    is optimized): the memory-mapped weights skip protobuf, which would copy them into the
    ModelProto, again into its bytes, and once more when onnxruntime parses them."""
    names, values = [], []
    for item in streamed:
        placeholder = model.graph.initializer.add()
        placeholder.CopyFrom(item.header)
        placeholder.data_location = placeholder.EXTERNAL
        placeholder.external_data.add(key="location", value="caffe-lstm-in-memory")
        array = np.ascontiguousarray(item.array, np.float32).reshape(tuple(item.header.dims))
        names.append(item.header.name)
        values.append(ort.OrtValue.ortvalue_from_numpy(array))
    try:
        data = model.SerializeToString()
    finally:
        for item in streamed:   # the model is the caller's again, without the placeholders
            remove_initializer(model.graph, item.header.name)
    if names:
        options.add_external_initializers(names, values)
    return data


def _check_feeds(names: list[str], feeds: Mapping[str, np.ndarray], source: str) -> None:
    missing = [name for name in names if name not in feeds]
    extra = [name for name in feeds if name not in names]
    if missing or extra:
        found = "; ".join(part for part in (
            f"it lacks {', '.join(missing)}" if missing else "",
            f"the model has no input {', '.join(extra)}" if extra else "") if part)
        raise ExecutionError(f"the inputs do not fit the model's inputs {', '.join(names)}: "
                             f"{found}", source,
                             "use the state= the model was exported with (io adds the "
                             "<layer>/h_0, c_0 inputs)")


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__
