"""The second route to an engine: TensorRT's own ``OnnxParser`` reads the exported ONNX model.

``convert --via onnx`` builds the engine from the model that ``export`` writes, with NVIDIA's
parser instead of our emitter: a user whose TensorRT version hits a bug on one route has the
other. The same parser-built network is what the tests evaluate with our network evaluator and
compare with onnxruntime, so that evaluator is checked against two programs we did not write.
"""

from __future__ import annotations

from typing import Any

from caffe_lstm.backends.onnx.exporter import build_model
from caffe_lstm.backends.tensorrt.build import (BuildOptions, EngineBuildError,
                                                create_network, serialize)
from caffe_lstm.backends.tensorrt.runtime import LoadedRuntime, logger
from caffe_lstm.options import Route, check_opset, check_route
from caffe_lstm.ir.graph import Graph


class OnnxParseError(EngineBuildError):
    """TensorRT's ONNX parser refused the exported model."""


def parse_onnx(runtime: LoadedRuntime, model: bytes, verbosity: int = 0) -> tuple[Any, Any, Any]:
    """The builder, the network TensorRT's ``OnnxParser`` fills from ``model`` (serialized ONNX),
    and the parser (which must outlive the network's use: it owns the weights).

    Raises:
        OnnxParseError: the parser's errors, all of them in one line.
    """
    trt = runtime.trt
    builder, network = create_network(runtime, verbosity)
    parser = trt.OnnxParser(network, logger(runtime, verbosity))
    if not parser.parse(model):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise OnnxParseError(f"TensorRT's ONNX parser refused the model: {'; '.join(errors)}",
                             runtime.name, "build through our emitter instead (via='caffe-lstm')")
    return builder, network, parser


def build_from_onnx(runtime: LoadedRuntime, model: bytes, options: BuildOptions) -> bytes:
    """The serialized engine of the ONNX ``model``, parsed by TensorRT.

    The model carries the precision (fp16 as explicit casts, since the network is strongly
    typed) and its symbolic dims; ``options.shapes`` gives their optimization profile.

    Raises:
        OnnxParseError, EngineBuildError: TensorRT's own errors, in one line.
    """
    builder, network, parser = parse_onnx(runtime, model, options.verbosity)
    plan = serialize(runtime, builder, network, options)
    del parser  # the weights may go once the build has returned
    return plan


def build_through_onnx(runtime: LoadedRuntime, graph: Graph, options: BuildOptions,
                       opset: int) -> bytes:
    """The engine of the rewritten ``graph`` exported to ONNX (``opset``, the options' shape
    ranges as symbolic dims) and parsed by TensorRT; float32 only for now (the exported model
    carries the precision, and it has no fp16 casts). The parser reads the model's int64
    indices as INT32: the export checks the tables gathered from at the profile's MAX."""
    check_opset(opset)
    check_route(Route.ONNX, options.fp16)
    model, _ = build_model(graph, opset, dict(options.shapes), for_tensorrt=True)
    return build_from_onnx(runtime, model.SerializeToString(), options)
