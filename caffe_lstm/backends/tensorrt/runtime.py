"""Choosing and importing the TensorRT runtime: NVIDIA TensorRT or TensorRT for RTX.

Both expose the same Python network API under different module names; the emitter uses only
what they share (strongly typed networks, ILoop, IFillLayer...).
"""

from __future__ import annotations

import importlib
import shutil
from dataclasses import dataclass
from types import ModuleType

from caffe_lstm.errors import CaffeLstmError
from caffe_lstm.options import Runtime

#: runtime choice (``options.Runtime``) -> Python module name.
MODULES = {"tensorrt": "tensorrt", "tensorrt-rtx": "tensorrt_rtx_bindings"}
_INSTALL = {"tensorrt": "pip install 'caffe-lstm[tensorrt]'",
            "tensorrt-rtx": "pip install 'caffe-lstm[rtx]'"}


class BackendUnavailableError(CaffeLstmError):
    """The requested TensorRT runtime (or a GPU for running engines) is not available."""


@dataclass(frozen=True)
class LoadedRuntime:
    """An imported runtime: its name (an ``options.Runtime`` value) and its module."""

    name: str
    trt: ModuleType

    @property
    def is_rtx(self) -> bool:
        return self.name == "tensorrt-rtx"


def has_gpu() -> bool:
    """Whether an NVIDIA GPU seems present (nvidia-smi on PATH and a /dev/nvidia0 device)."""
    import os

    return shutil.which("nvidia-smi") is not None and os.path.exists("/dev/nvidia0")


def load_runtime(choice: Runtime = Runtime.AUTO) -> LoadedRuntime:
    """Imports the runtime for ``choice`` (a ``Runtime``; its value is taken too): ``AUTO``
    takes tensorrt when it imports and a GPU is present, else TensorRT for RTX (which builds
    engines on a machine without a GPU)."""
    choice = Runtime.parse(choice, "runtime")
    if choice is Runtime.AUTO:
        return load_runtime(Runtime.TENSORRT if has_gpu() and _importable("tensorrt")
                            else Runtime.TENSORRT_RTX)
    try:
        return LoadedRuntime(choice.value, importlib.import_module(MODULES[choice]))
    except ImportError as exc:
        raise BackendUnavailableError(
            f"the {choice} Python module ({MODULES[choice]}) cannot be imported ({exc})",
            "runtime=", f"install it: {_INSTALL[choice]}") from None


def load_runtime_if_any(choice: Runtime = Runtime.AUTO) -> LoadedRuntime | None:
    """``load_runtime(choice)``, or None when ``auto`` finds no runtime installed (a runtime
    named explicitly must import)."""
    try:
        return load_runtime(choice)
    except BackendUnavailableError:
        if Runtime.parse(choice, "runtime") is not Runtime.AUTO:
            raise
        return None


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


_LOGGERS: dict[str, object] = {}


def logger(runtime: LoadedRuntime, verbosity: int = 0):
    """The one process-wide logger per runtime (TensorRT ignores a second one), routing
    TensorRT's messages to stderr by -v level and dropping the spurious CUDA-driver errors
    that every API error brings on a machine without a GPU."""
    if runtime.name not in _LOGGERS:
        _LOGGERS[runtime.name] = _make_logger(runtime.trt)
    log = _LOGGERS[runtime.name]
    log.verbosity = verbosity
    return log


def _make_logger(trt: ModuleType):
    import sys

    class _Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.verbosity = 0
            self.errors: list[str] = []

        def log(self, severity, msg) -> None:
            if "CUDA driver version is insufficient" in msg or "catchCudaError" in msg:
                return
            if severity <= trt.ILogger.ERROR:
                self.errors.append(msg)
            limit = {0: trt.ILogger.ERROR, 1: trt.ILogger.WARNING, 2: trt.ILogger.INFO}.get(
                self.verbosity, trt.ILogger.VERBOSE)
            if self.verbosity > 0 and severity <= limit:
                print(f"[tensorrt] {msg}", file=sys.stderr)

    return _Logger()
