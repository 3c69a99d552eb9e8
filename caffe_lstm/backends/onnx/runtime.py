"""Running an exported ONNX model with onnxruntime on the CPU (imported lazily, so every other
command works without it)."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Mapping

import numpy as np

from caffe_lstm.backends.onnx.exporter import import_module
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


def run_model(model: str | Path | bytes, feeds: Mapping[str, np.ndarray],
              source: str = "the exported model") -> dict[str, np.ndarray]:
    """Runs ``model`` (a path, or serialized bytes) once on ``feeds`` (float32 arrays by input
    name); returns every output by name.

    Raises:
        ModelLoadError: a file onnxruntime cannot load.
        ExecutionError: inputs the model lacks or does not declare, or a run that fails.
    """
    ort = import_module("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: warnings would clutter the CLI's output
    model_arg = str(model) if isinstance(model, Path) else model
    try:
        session = ort.InferenceSession(model_arg, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
        raise ModelLoadError(f"onnxruntime cannot load the model ({_first_line(exc)})",
                             source, "export it again with `caffe-lstm export`") from None
    names = [i.name for i in session.get_inputs()]
    _check_feeds(names, feeds, source)
    arrays = {name: np.ascontiguousarray(feeds[name], dtype=np.float32) for name in names}
    try:
        results = session.run(None, arrays)
    except Exception as exc:
        raise ExecutionError(f"onnxruntime failed ({_first_line(exc)})", source,
                             "check the input shapes against those the model was exported "
                             "for (export with --shape to make T and N vary)") from None
    return {o.name: np.asarray(r, dtype=np.float32)
            for o, r in zip(session.get_outputs(), results)}


def _check_feeds(names: list[str], feeds: Mapping[str, np.ndarray], source: str) -> None:
    missing = [name for name in names if name not in feeds]
    extra = [name for name in feeds if name not in names]
    if missing or extra:
        found = "; ".join(part for part in (
            f"it lacks {', '.join(missing)}" if missing else "",
            f"the model has no input {', '.join(extra)}" if extra else "") if part)
        raise ExecutionError(f"the inputs do not fit the model's inputs {', '.join(names)}: "
                             f"{found}", source,
                             "use the --state the model was exported with (io adds the "
                             "<layer>/h_0, c_0 inputs)")


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__
