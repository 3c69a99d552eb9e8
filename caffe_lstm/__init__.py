"""caffe-lstm: take Caffe nets with recurrent layers (LSTM, RNN, the forks' Lstm) to TensorRT.

The Python API (docs/api.md); the ``caffe-lstm`` command line calls the same functions::

    import caffe_lstm
    net = caffe_lstm.load("net.prototxt", "net.caffemodel")
    net.verify().ok
    net.build_engine("net.engine")
    net.export_onnx("net.onnx")
"""

from importlib.metadata import PackageNotFoundError, version

from caffe_lstm.api import Engine, Net, OnnxExport, Verification, build_facts, load, run_engine
from caffe_lstm.errors import (CaffeLstmError, ExecutionError, GraphError, ModelLoadError,
                               OutputError, ShapeError, UnsupportedLayerError, VerificationError)
from caffe_lstm.ops.plugins import PluginError
from caffe_lstm.options import (DEFAULT_OPSET, Backend, BuildRequest, LstmOp, Profile, Route,
                                Runtime, State)
from caffe_lstm.serving.server import ServingError, TritonServer, serve

try:
    __version__ = version("caffe-lstm")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["CaffeLstmError", "Engine", "ExecutionError", "GraphError", "ModelLoadError", "Net",
           "OnnxExport", "OutputError", "PluginError", "ShapeError", "UnsupportedLayerError",
           "Verification", "VerificationError", "build_facts", "load", "run_engine",
           "DEFAULT_OPSET", "Backend", "BuildRequest", "LstmOp", "Profile", "Route", "Runtime",
           "State"]
__all__ += ["ServingError", "TritonServer", "serve"]
