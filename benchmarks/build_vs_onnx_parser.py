"""Build time and engine size: caffe-lstm against TensorRT for RTX's own ONNX parser.

    python benchmarks/build_vs_onnx_parser.py [--quick] [--repeats N]

One LSTM net (engine_size_vs_T's Input -> LSTM -> InnerProduct axis 2, same seeded weights) is
built two ways with the same builder and the same default builder config:

(a) caffe-lstm: load prototxt + caffemodel, the recurrent rewrite, emission of the TensorRT
    network (one ILoop), then ``build_serialized_network`` (what ``build_engine`` does);
(b) an ONNX model holding one ONNX ``LSTM`` node (opset 17, layout 0; W/R/B from Caffe's blobs,
    gate blocks (i, f, o, g) -> (i, o, f, c)) then Squeeze, MatMul, Add for the InnerProduct,
    read by ``trt.OnnxParser`` and built.

The Caffe net takes cont as an input and is built with zero initial state; a caller feeding
cont = 0 at t = 0 and 1 after gets ONNX's zero state without resets (checked with onnxruntime
when it is installed). The caffe-lstm engine still multiplies h and c by cont_t each step.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.backends.tensorrt.build import BuildOptions, build_engine, create_network, emit
from caffe_lstm.backends.tensorrt.runtime import LoadedRuntime, load_runtime, logger
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.passes import run_passes
from engine_size_vs_T import FULL, QUICK, Dims, write_net

T_FULL, T_QUICK = 100, 20
#: Caffe's gate blocks (i, f, o, g) in ONNX's order (i, o, f, c).
CAFFE_TO_ONNX_BLOCKS = (0, 2, 1, 3)
ONNX_OPSET = 17
#: The IR version that goes with opset 17 (onnx 1.23 would write 14; onnxruntime reads <= 13).
ONNX_IR_VERSION = 8


def reorder_gates(blob: np.ndarray) -> np.ndarray:
    """A [4H, ...] Caffe LSTM blob with its four gate blocks in ONNX's order."""
    return np.concatenate([np.split(blob, 4)[k] for k in CAFFE_TO_ONNX_BLOCKS])


def caffe_blobs(prototxt: Path, caffemodel: Path) -> dict[str, np.ndarray]:
    """W_xc [4H,I], b_c [4H], W_hc [4H,H] of the LSTM and W [K,H], b [K] of the InnerProduct,
    as read back from the caffemodel."""
    graph = load_net(prototxt, caffemodel).graph
    by_op = {node.op: [w.data for w in node.weights] for node in graph.nodes if node.weights}
    (w_xc, b_c, w_hc), (w_fc, b_fc) = by_op["LSTM"], by_op["InnerProduct"]
    return {"W_xc": w_xc, "b_c": b_c, "W_hc": w_hc, "W_fc": w_fc, "b_fc": b_fc}


def onnx_model(blobs: dict[str, np.ndarray], t: int, d: Dims) -> onnx.ModelProto:
    """x [T,N,I] -> LSTM (layout 0) -> Y [T,1,N,H] -> Squeeze axis 1 -> ·W_fcᵀ + b_fc -> y."""
    h = d.h
    weights = {
        "W": reorder_gates(blobs["W_xc"])[None],                       # [1, 4H, I]
        "R": reorder_gates(blobs["W_hc"])[None],                       # [1, 4H, H]
        # B = [Wb, Rb]: Caffe has one bias, on the input side
        "B": np.concatenate([reorder_gates(blobs["b_c"]), np.zeros(4 * h, np.float32)])[None],
        "W_fc_T": np.ascontiguousarray(blobs["W_fc"].T),               # [H, K]
        "b_fc": blobs["b_fc"],
        "squeeze_axes": np.array([1], np.int64),
    }
    nodes = [
        helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y"], hidden_size=h, layout=0),
        helper.make_node("Squeeze", ["Y", "squeeze_axes"], ["h"]),
        helper.make_node("MatMul", ["h", "W_fc_T"], ["fc_mm"]),
        helper.make_node("Add", ["fc_mm", "b_fc"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "lstm_bench",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [t, d.n, d.i])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [t, d.n, d.k])],
        [numpy_helper.from_array(a, name) for name, a in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
                              ir_version=ONNX_IR_VERSION)
    onnx.checker.check_model(model)
    return model


def check_equivalence(prototxt: Path, caffemodel: Path, model_path: Path, t: int,
                      d: Dims) -> str:
    """Max |caffe-lstm numpy - onnxruntime| on y, with cont = 0 at t = 0 and 1 after."""
    try:
        import onnxruntime
    except ImportError:
        return "onnxruntime not installed: equivalence not checked"
    rng = np.random.default_rng(1)
    x = rng.standard_normal((t, d.n, d.i)).astype(np.float32)
    cont = np.ones((t, d.n), np.float32)
    cont[0] = 0
    caffe_y = NumpyExecutor(load_net(prototxt, caffemodel).graph).run({"x": x, "cont": cont})["y"]
    session = onnxruntime.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    onnx_y = session.run(["y"], {"x": x})[0]
    return f"max |caffe-lstm numpy - onnxruntime| on y = {np.abs(caffe_y - onnx_y).max():.2e}"


@dataclass
class Timing:
    """One way's per-repeat seconds: network construction and the TensorRT build."""

    construct: list[float]
    build: list[float]
    size: int
    layers: int

    def median(self, which: str) -> float:
        if which == "total":
            return statistics.median(c + b for c, b in zip(self.construct, self.build))
        return statistics.median(getattr(self, which))


def build_plan(builder, network) -> tuple[float, int]:
    """Seconds in build_serialized_network with a default builder config (as build_engine
    uses for static shapes) and the plan size."""
    config = builder.create_builder_config()
    started = time.perf_counter()
    plan = builder.build_serialized_network(network, config)
    elapsed = time.perf_counter() - started
    if plan is None:
        raise RuntimeError("TensorRT could not build the engine (see the log above)")
    return elapsed, len(bytes(plan))


def caffe_lstm_once(runtime: LoadedRuntime, prototxt: Path, caffemodel: Path) -> tuple[float, float,
                                                                                   int, int]:
    """Construct (load, rewrite, emit) and build seconds, plan size, network layer count."""
    started = time.perf_counter()
    graph = run_passes(load_net(prototxt, caffemodel).graph, ["expand-recurrent"])
    builder, network, ctx = emit(runtime, graph, BuildOptions())
    construct = time.perf_counter() - started
    build, size = build_plan(builder, network)
    del ctx  # the emitted weights must outlive the build
    return construct, build, size, network.num_layers


def onnx_parser_once(runtime: LoadedRuntime, model_path: Path) -> tuple[float, float, int, int]:
    """Construct (read the file, parse) and build seconds, plan size, network layer count."""
    trt = runtime.trt
    started = time.perf_counter()
    builder, network = create_network(runtime)
    parser = trt.OnnxParser(network, logger(runtime))
    if not parser.parse(model_path.read_bytes()):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise RuntimeError(f"the ONNX parser refused the model: {errors}")
    construct = time.perf_counter() - started
    build, size = build_plan(builder, network)
    del parser  # the parser owns the weights: keep it until the build returns
    return construct, build, size, network.num_layers


def timing(runs: list[tuple[float, float, int, int]]) -> Timing:
    sizes, layers = {r[2] for r in runs}, {r[3] for r in runs}
    if len(sizes) > 1:
        print(f"note: plan sizes differ between repeats {sorted(sizes)}; reporting the max")
    return Timing([r[0] for r in runs], [r[1] for r in runs], max(sizes), max(layers))


def measure(ways: list[Callable[[], tuple[float, float, int, int]]], repeats: int) -> list[Timing]:
    """One untimed warm-up per way, then ``repeats`` rounds running the ways alternately (so
    that a slow spell of the machine hits both)."""
    for way in ways:
        way()
    rounds = [[way() for way in ways] for _ in range(repeats)]
    return [timing([r[k] for r in rounds]) for k in range(len(ways))]


def print_report(caffe: Timing, parser: Timing, repeats: int) -> None:
    print(f"{'way':<13} {'layers':>6} {'construct s':>11} {'build s':>8} {'(min)':>7} "
          f"{'total s':>8} {'engine bytes':>13} {'MiB':>6}   (medians of {repeats})")
    for name, t in (("caffe-lstm", caffe), ("onnx parser", parser)):
        print(f"{name:<13} {t.layers:>6} {t.median('construct'):>11.3f} {t.median('build'):>8.3f} "
              f"{min(t.build):>7.3f} {t.median('total'):>8.3f} {t.size:>13} "
              f"{t.size / 2**20:>6.2f}")
    print("construct: caffe-lstm loads prototxt + caffemodel, rewrites, emits the network; "
          "onnx reads the file and parses it")
    print(f"build time caffe-lstm / onnx parser = "
          f"{caffe.median('build') / parser.median('build'):.3f}")
    print(f"build time incl. network construction caffe-lstm / onnx parser = "
          f"{caffe.median('total') / parser.median('total'):.3f}")
    print(f"engine size caffe-lstm / onnx parser = {caffe.size / parser.size:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one build per way")
    parser.add_argument("--repeats", type=int, default=15, help="builds per way (median)")
    args = parser.parse_args()
    if args.repeats < 3:
        parser.error("--repeats: a median needs at least 3 builds (use --quick for one)")
    d, t = (QUICK, T_QUICK) if args.quick else (FULL, T_FULL)
    repeats = 1 if args.quick else args.repeats
    runtime = load_runtime("tensorrt-rtx")
    print(f"LSTM net T={t} N={d.n} I={d.i} H={d.h} K={d.k}, fp32, static shapes, "
          f"{runtime.trt.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        prototxt, caffemodel = write_net(Path(tmp), t, d)
        model_path = Path(tmp) / "lstm.onnx"
        onnx.save(onnx_model(caffe_blobs(prototxt, caffemodel), t, d), model_path)
        print(check_equivalence(prototxt, caffemodel, model_path, t, d))
        reference = build_engine(runtime, run_passes(load_net(prototxt, caffemodel).graph),
                                 BuildOptions())
        caffe, onnx_way = measure([lambda: caffe_lstm_once(runtime, prototxt, caffemodel),
                                   lambda: onnx_parser_once(runtime, model_path)], repeats)
    if len(reference) != caffe.size:
        print(f"note: build_engine gave {len(reference)} bytes, the timed replica {caffe.size}")
    print_report(caffe, onnx_way, repeats)


if __name__ == "__main__":
    main()
