"""The cross-check that makes the TensorRT path trustworthy without a GPU.

TensorRT's own ``OnnxParser`` builds the network of an exported model, our network evaluator
(``backends/tensorrt/network_eval``) evaluates that parser-built network, and the result is
compared with onnxruntime's: the evaluator (which ``verify`` uses on our emitter's networks) is
then checked against two programs we did not write.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

PARSER_RTOL = 1e-5


def parser_outputs(model: Path | bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The parser-built network of ``model`` evaluated with numpy on ``feeds``."""
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network
    from caffe_lstm.backends.tensorrt.onnx_route import parse_onnx
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    runtime = load_runtime("tensorrt-rtx")
    data = model if isinstance(model, bytes) else _model_bytes(Path(model))
    _, network, parser = parse_onnx(runtime, data)
    names = [network.get_input(i).name for i in range(network.num_inputs)]
    results = evaluate_network(runtime.trt, network,
                               {name: feeds[_fed_name(name, feeds)] for name in names})
    del parser
    return {name: np.asarray(array, np.float32) for name, array in results.items()}


def onnxruntime_outputs(model: Path | bytes, feeds: dict[str, np.ndarray]) -> dict:
    import onnxruntime

    data = model if isinstance(model, bytes) else _model_bytes(Path(model))
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    outputs = session.run(None, {k: np.asarray(v, np.float32) for k, v in feeds.items()
                                 if k in wanted})
    return {o.name: array for o, array in zip(session.get_outputs(), outputs)}


def assert_parser_matches_onnxruntime(model: Path | bytes, feeds: dict[str, np.ndarray]) -> None:
    """Every output of the parser-built network equals onnxruntime's to PARSER_RTOL of its
    largest magnitude."""
    expected = onnxruntime_outputs(model, feeds)
    got = parser_outputs(model, feeds)
    assert got.keys() == expected.keys()
    for name, reference in expected.items():
        assert got[name].shape == reference.shape, name
        scale = max(float(np.abs(reference).max(initial=0)), 1e-30)
        error = float(np.abs(got[name] - reference).max(initial=0))
        assert error <= PARSER_RTOL * scale, \
            f"{name}: parser network vs onnxruntime {error:.3g} (max |value| {scale:.3g})"


def _fed_name(name: str, feeds: dict) -> str:
    """The feed of a network input: TensorRT's parser renames a graph input that is also a graph
    output (a network input cannot be an output) to ``__<name>``."""
    if name not in feeds and name.startswith("__") and name[2:] in feeds:
        return name[2:]
    return name


def _model_bytes(path: Path) -> bytes:
    """The model's bytes, external data folded in (the parser reads one buffer)."""
    import onnx

    return onnx.load(str(path), load_external_data=True).SerializeToString()
