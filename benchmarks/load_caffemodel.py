"""Loading a 192 MiB caffemodel: time and peak memory against numpy, onnx.load and protobuf.

    PYTHONPATH=. python benchmarks/load_caffemodel.py [--quick] [--repeats N]

The net is VGG's classifier shape: Input (1, 4096) -> three InnerProduct layers of 4096 outputs
(3 x 64 MiB of weights plus biases), with seeded weights written three ways to a temporary
folder: the caffemodel (``write_caffemodel``), the same floats as one raw file, and an ONNX model
holding them as initializers. Each measurement runs in a fresh child process, so its peak memory
is its own: the peak resident set (VmHWM, reset through /proc/self/clear_refs after the imports;
else ru_maxrss) minus the resident set just before the load. Every method ends by summing each
weight array, so the bytes are really read (a memory map pages in only when touched):

- caffe-lstm: ``load_net(prototxt, caffemodel)`` (memory-mapped, blobs are views of the file);
- numpy: ``np.fromfile`` of the raw floats;
- onnx: ``onnx.load`` + ``numpy_helper.to_array`` of every initializer;
- protobuf: ``caffe_pb2.NetParameter().ParseFromString`` + ``np.array(blob.data)`` (the naive
  path, for contrast).

Every file is read once before the runs, so all methods find it in the page cache. Methods
alternate within each repeat; the medians over the repeats give the ratios printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

WIDTH, LAYERS = 4096, 3  # 3 x 4096 x 4096 float32 = 192 MiB
QUICK_WIDTH = 1024  # 12 MiB: a smoke test of the script, not a measurement
METHODS = ("caffe-lstm", "numpy", "onnx", "protobuf")
SEED = 0


# ---- the files -------------------------------------------------------------------------------


def write_files(folder: Path, width: int) -> dict[str, Path]:
    """The prototxt, caffemodel, raw floats and ONNX model of the same seeded weights."""
    from caffe_lstm.frontend.caffe_writer import write_caffemodel

    rng = np.random.default_rng(SEED)
    names = [f"fc{6 + i}" for i in range(LAYERS)]
    blobs = {name: (rng.standard_normal((width, width), np.float32),
                    rng.standard_normal(width, np.float32)) for name in names}
    paths = {"prototxt": folder / "net.prototxt", "caffemodel": folder / "net.caffemodel",
             "raw": folder / "weights.f32", "onnx": folder / "net.onnx"}
    paths["prototxt"].write_text(_prototxt(names, width))
    write_caffemodel(paths["caffemodel"], [(n, "InnerProduct", list(b)) for n, b in blobs.items()])
    with open(paths["raw"], "wb") as raw:
        for weight, bias in blobs.values():
            raw.write(weight.tobytes())
            raw.write(bias.tobytes())
    _write_onnx(paths["onnx"], blobs, width)
    return paths


def _prototxt(names: list[str], width: int) -> str:
    text = (f'name: "fc_stack"\nlayer {{ name: "data" type: "Input" top: "data" '
            f"input_param {{ shape {{ dim: 1 dim: {width} }} }} }}\n")
    bottom = "data"
    for name in names:
        text += (f'layer {{ name: "{name}" type: "InnerProduct" bottom: "{bottom}" top: "{name}" '
                 f"inner_product_param {{ num_output: {width} }} }}\n")
        bottom = name
    return text


def _write_onnx(path: Path, blobs: dict, width: int) -> None:
    """y = Gemm(x, W, b, transB=1) per layer, the weights as initializers (raw_data)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    initializers, nodes, bottom = [], [], "data"
    for name, (weight, bias) in blobs.items():
        initializers += [numpy_helper.from_array(weight, f"{name}_W"),
                         numpy_helper.from_array(bias, f"{name}_b")]
        nodes.append(helper.make_node("Gemm", [bottom, f"{name}_W", f"{name}_b"], [name],
                                      transB=1))
        bottom = name
    graph = helper.make_graph(
        nodes, "fc_stack", [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info(bottom, TensorProto.FLOAT, [1, width])], initializers)
    onnx.save(helper.make_model(graph), str(path))


def warm_page_cache(paths: dict[str, Path]) -> None:
    """Read every file once, so that each method finds it in the page cache."""
    for path in paths.values():
        with open(path, "rb") as file:
            while file.read(1 << 24):
                pass


# ---- one measurement, in a child process -----------------------------------------------------


def load_caffe_lstm(paths: dict) -> list[np.ndarray]:
    from caffe_lstm.frontend.loader import load_net

    graph = load_net(paths["prototxt"], paths["caffemodel"]).graph
    return [value.data for node in graph.nodes for value in node.weights]


def load_numpy(paths: dict) -> list[np.ndarray]:
    return [np.fromfile(paths["raw"], dtype=np.float32)]


def load_onnx(paths: dict) -> list[np.ndarray]:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(paths["onnx"]))
    return [numpy_helper.to_array(tensor) for tensor in model.graph.initializer]


def load_protobuf(paths: dict) -> list[np.ndarray]:
    from caffe_lstm.proto import caffe_pb2

    net = caffe_pb2.NetParameter()
    net.ParseFromString(Path(paths["caffemodel"]).read_bytes())
    return [np.array(blob.data, dtype=np.float32) for layer in net.layer for blob in layer.blobs]


LOADERS = {"caffe-lstm": load_caffe_lstm, "numpy": load_numpy, "onnx": load_onnx,
           "protobuf": load_protobuf}


def measure(method: str, paths: dict) -> dict:
    """Seconds and extra peak bytes of one load plus touching every weight byte."""
    _import_for(method)
    peak_resettable = _reset_peak()
    before = _status_kib("VmRSS")
    started = time.perf_counter()
    arrays = LOADERS[method](paths)
    checksum = float(sum(float(array.sum()) for array in arrays))  # touches every byte
    seconds = time.perf_counter() - started
    if peak_resettable:
        peak = _status_kib("VmHWM")
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "extra_peak_bytes": (peak - before) * 1024,
            "bytes": int(sum(array.nbytes for array in arrays)), "checksum": checksum}


def _import_for(method: str) -> None:
    """Imports outside the timed part (a user's process has them loaded already)."""
    import caffe_lstm.frontend.loader
    import caffe_lstm.proto.caffe_pb2  # noqa: F401

    if method == "onnx":
        import onnx  # noqa: F401
        from onnx import numpy_helper  # noqa: F401


def _reset_peak() -> bool:
    """Linux: writing 5 to clear_refs resets VmHWM to the current resident set."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


# ---- the parent ------------------------------------------------------------------------------


def run_child(method: str, paths: dict[str, Path]) -> dict:
    command = [sys.executable, __file__, "--child", method, "--paths", json.dumps(
        {key: str(path) for key, path in paths.items()})]
    out = subprocess.run(command, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": _pythonpath()})
    return json.loads(out.stdout)


def _pythonpath() -> str:
    root = str(Path(__file__).resolve().parents[1])
    return os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))


def benchmark(width: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        paths = write_files(Path(folder), width)
        size = paths["caffemodel"].stat().st_size
        print(f"caffemodel {size / 2**20:.1f} MiB, raw floats "
              f"{paths['raw'].stat().st_size / 2**20:.1f} MiB, onnx "
              f"{paths['onnx'].stat().st_size / 2**20:.1f} MiB; {repeats} runs per method")
        warm_page_cache(paths)
        runs: dict[str, list[dict]] = {method: [] for method in METHODS}
        for _ in range(repeats):
            for method in METHODS:
                runs[method].append(run_child(method, paths))
        _report(runs, size)


def _report(runs: dict[str, list[dict]], size: int) -> None:
    checksums = {round(run["checksum"], 1) for method in runs for run in runs[method]}
    if len(checksums) != 1:
        raise SystemExit(f"the methods loaded different weights: checksums {checksums}")
    seconds = {m: statistics.median(r["seconds"] for r in runs[m]) for m in runs}
    memory = {m: statistics.median(r["extra_peak_bytes"] for r in runs[m]) for m in runs}
    for method in METHODS:
        times = [run["seconds"] * 1000 for run in runs[method]]
        print(f"{method:<11} {seconds[method] * 1000:8.1f} ms (runs {min(times):.1f} … "
              f"{max(times):.1f})   extra peak {memory[method] / 2**20:7.1f} MiB = "
              f"{memory[method] / size:.3f} x file")
    print(f"load time caffe-lstm / numpy raw read = "
          f"{seconds['caffe-lstm'] / seconds['numpy']:.3f}")
    print(f"load time caffe-lstm / onnx.load = {seconds['caffe-lstm'] / seconds['onnx']:.3f}")
    print(f"load time protobuf / caffe-lstm = {seconds['protobuf'] / seconds['caffe-lstm']:.3f}")
    print(f"extra peak memory caffe-lstm / file size = {memory['caffe-lstm'] / size:.3f}")
    print(f"extra peak memory numpy / file size = {memory['numpy'] / size:.3f}")
    print(f"extra peak memory onnx / file size = {memory['onnx'] / size:.3f}")
    print(f"extra peak memory protobuf / file size = {memory['protobuf'] / size:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12 MiB of weights, 1 run each.")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--paths", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        paths = {key: Path(value) for key, value in json.loads(args.paths).items()}
        print(json.dumps(measure(args.child, paths)))
        return
    benchmark(QUICK_WIDTH if args.quick else WIDTH, 1 if args.quick else args.repeats)


if __name__ == "__main__":
    main()
