"""caffe-lstm: take Caffe nets with recurrent layers (LSTM, RNN, the forks' Lstm) to TensorRT.

The Python API (docs/api.md); the ``caffe-lstm`` command line calls the same functions::

    import caffe_lstm
    net = caffe_lstm.load("net.prototxt", "net.caffemodel")
    net.verify().ok
    net.build_engine("net.engine")
    net.export_onnx("net.onnx")

Every public name is imported on first use (PEP 562), not by ``import caffe_lstm``: a process
pays only for what it touches (``caffe-lstm run`` never loads the serving stack, and
``__version__`` reads the installed metadata only when asked for).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Public name -> the module it comes from, imported when the name is first used.
_HOMES = {
    **dict.fromkeys(("Net", "build_facts", "load", "run_engine"), "caffe_lstm.api"),
    **dict.fromkeys(("Engine", "OnnxExport"), "caffe_lstm.built"),
    "Verification": "caffe_lstm.verification",
    **dict.fromkeys(("CaffeLstmError", "ExecutionError", "GraphError", "ModelLoadError",
                     "OutputError", "ShapeError", "UnsupportedLayerError", "VerificationError"),
                    "caffe_lstm.errors"),
    "PluginError": "caffe_lstm.ops.plugins",
    **dict.fromkeys(("DEFAULT_OPSET", "Backend", "BuildRequest", "LstmOp", "Profile", "Route",
                     "Runtime", "State"), "caffe_lstm.options"),
    **dict.fromkeys(("ServingError", "TritonServer", "serve"), "caffe_lstm.serving.server"),
}

__all__ = ["CaffeLstmError", "Engine", "ExecutionError", "GraphError", "ModelLoadError", "Net",
           "OnnxExport", "OutputError", "PluginError", "ShapeError", "UnsupportedLayerError",
           "Verification", "VerificationError", "build_facts", "load", "run_engine",
           "DEFAULT_OPSET", "Backend", "BuildRequest", "LstmOp", "Profile", "Route", "Runtime",
           "State"]
__all__ += ["ServingError", "TritonServer", "serve"]


def __getattr__(name: str) -> Any:
    """A public name (or ``__version__``, or a subpackage such as ``caffe_lstm.ops``) on first
    use; kept in the module afterwards."""
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    elif name == "__version__":  # the installed distribution's metadata
        value = importlib.import_module("caffe_lstm.analysis.build_facts").caffe_lstm_version()
    else:
        value = _subpackage(name)
    globals()[name] = value
    return value


def _subpackage(name: str) -> Any:
    """``caffe_lstm.<name>``: ``import caffe_lstm`` loaded the subpackages as a side effect
    (``caffe_lstm.ops.Op`` worked without ``import caffe_lstm.ops``), it still does on use."""
    missing = AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name.startswith("_"):
        raise missing
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        raise missing from None


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})


if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports them
    from caffe_lstm.api import Net, build_facts, load, run_engine
    from caffe_lstm.built import Engine, OnnxExport
    from caffe_lstm.errors import (CaffeLstmError, ExecutionError, GraphError, ModelLoadError,
                                   OutputError, ShapeError, UnsupportedLayerError,
                                   VerificationError)
    from caffe_lstm.ops.plugins import PluginError
    from caffe_lstm.options import (DEFAULT_OPSET, Backend, BuildRequest, LstmOp, Profile, Route,
                                    Runtime, State)
    from caffe_lstm.serving.server import ServingError, TritonServer, serve
    from caffe_lstm.verification import Verification

    __version__: str
