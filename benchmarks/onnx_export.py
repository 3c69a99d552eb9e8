"""The ONNX export: onnxruntime against numpy, and the cost of writing a large model.

    PYTHONPATH=. python benchmarks/onnx_export.py [--repeats N] [--quick]

1. **Run time**, whole processes (interpreter start, loading, the forward pass, writing the
   outputs): ``caffe-lstm run --backend onnxruntime`` (the net exported in memory, then run by
   onnxruntime) against ``caffe-lstm run`` (the numpy executor), on the same seeded inputs, on

   - the LRCN activity-recognition deploy net of the corpus (an AlexNet front end on 160
     frames of 3 × 227 × 227, then an LSTM; target: onnxruntime at least 3 × faster), and
   - an LSTM-only net (the corpus's SCRC net: three LSTMs, T = 20, N = 100),

   both with seeded synthetic weights (``caffe-lstm weights init``). The outputs of the two
   backends are compared (max difference relative to the largest output, printed).
2. **Export**, a ~200 MiB model (an LSTM of 1024 units on 2048 inputs, then InnerProduct
   layers of 1024 → 4096 → 4096 → 4096): the time of ``Net.export_onnx(path)`` and its extra
   peak memory (VmHWM during the export minus the resident set after loading, with VmHWM reset
   through /proc/self/clear_refs) against the caffemodel's size (target: ≤ 1.2 ×); for
   contrast the same export with the weights copied into the protobuf before writing (what
   saving a complete ModelProto costs: streaming switched off).

The corpus lives beside the repository (CI has it); without it part 1 is skipped with a note.
``--quick`` uses small nets: a smoke test of the script, the numbers mean little.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
LRCN = CORPUS / "LisaAnne__lisa-caffe-public" / \
    "examples__LRCN_activity_recognition__deploy_lstm.prototxt"
SCRC = CORPUS / "ronghanghu__natural-language-object-retrieval" / \
    "prototxt__scrc_word_to_preds_full.prototxt"
SAMPLE = ROOT / "samples" / "seq_classifier" / "seq_classifier.prototxt"

BIG_NET = """name: "big"
layer {{ name: "input" type: "Input" top: "x" top: "cont"
        input_param {{ shape {{ dim: 4 dim: 1 dim: {inputs} }} shape {{ dim: 4 dim: 1 }} }} }}
layer {{ name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param {{ num_output: {hidden} }} }}
layer {{ name: "fc1" type: "InnerProduct" bottom: "h" top: "fc1"
        inner_product_param {{ num_output: {width} axis: 2 }} }}
layer {{ name: "fc2" type: "InnerProduct" bottom: "fc1" top: "fc2"
        inner_product_param {{ num_output: {width} axis: 2 }} }}
layer {{ name: "fc3" type: "InnerProduct" bottom: "fc2" top: "fc3"
        inner_product_param {{ num_output: {width} axis: 2 }} }}
"""

#: The child process measuring one export: peak RSS during export_onnx minus RSS after load.
MEASURE_EXPORT = """
import json, sys, time
import caffe_lstm

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0

from caffe_lstm.backends.onnx import exporter
if sys.argv[4] == "copied":
    exporter.STREAM_BYTES = 1 << 62  # every weight copied into the model first
net = caffe_lstm.load(sys.argv[1], sys.argv[2])
sum(float(v.data.sum()) for v in net.graph.weight_values() if v.data is not None)  # page in
before = status("VmRSS:")
try:
    open("/proc/self/clear_refs", "w").write("5")  # resets VmHWM to the current RSS
except OSError:
    pass
started = time.perf_counter()
net.export_onnx(sys.argv[3])
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "extra": status("VmHWM:") - before}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small nets; a smoke test")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        run_times(work, args)
        export_cost(work, args)


# ---- 1. run time -------------------------------------------------------------------------------


def run_times(work: Path, args: argparse.Namespace) -> None:
    nets = [("LSTM-only (seq_classifier sample)", SAMPLE)] if args.quick else \
        [("LRCN activity recognition", LRCN), ("LSTM-only (SCRC, 3 LSTMs)", SCRC)]
    for title, net in nets:
        if not net.exists():
            print(f"{title}: skipped, the corpus is not beside the repository")
            continue
        weights = work / f"{net.stem}.caffemodel"
        _cli("weights", "init", net, "-o", weights, "--seed", "0")
        times = {"numpy": [], "onnxruntime": []}
        for _ in range(args.repeats):
            for backend in times:  # alternating, so that both see the same machine
                started = time.perf_counter()
                _cli("run", net, "-w", weights, "--seed", "1", "--backend", backend,
                     "-o", work / f"{backend}.npz")
                times[backend].append(time.perf_counter() - started)
        numpy_s, onnx_s = (statistics.median(times[b]) for b in ("numpy", "onnxruntime"))
        print(f"{title}: numpy {numpy_s:.2f} s, onnxruntime {onnx_s:.2f} s, "
              f"outputs differ by {_max_rel(work / 'numpy.npz', work / 'onnxruntime.npz'):.1e}")
        print(f"{title}: run time numpy / onnxruntime = {numpy_s / onnx_s:.3f}")


def _max_rel(a: Path, b: Path) -> float:
    with np.load(a) as left, np.load(b) as right:
        return max(float(np.abs(left[k] - right[k]).max() / max(np.abs(left[k]).max(), 1e-30))
                   for k in left.files)


# ---- 2. export cost ----------------------------------------------------------------------------


def export_cost(work: Path, args: argparse.Namespace) -> None:
    sizes = {"inputs": 256, "hidden": 128, "width": 256} if args.quick else \
        {"inputs": 2048, "hidden": 1024, "width": 4096}
    net = work / "big.prototxt"
    net.write_text(BIG_NET.format(**sizes))
    weights = work / "big.caffemodel"
    _cli("weights", "init", net, "-o", weights, "--seed", "0")
    size = weights.stat().st_size
    for mode in ("copied", "streamed"):
        runs = [_measure_export(net, weights, work / "big.onnx", mode)
                for _ in range(args.repeats)]
        seconds = statistics.median(r["seconds"] for r in runs)
        extra = statistics.median(r["extra"] for r in runs)
        print(f"export ({mode}) of a {size / 2**20:.0f} MiB caffemodel: {seconds:.2f} s "
              f"({size / 2**20 / seconds:.0f} MiB/s), extra peak memory "
              f"{extra / 2**20:.0f} MiB, model {(work / 'big.onnx').stat().st_size / 2**20:.0f} "
              "MiB")
    print(f"export: extra peak memory / caffemodel size = {extra / size:.3f}")


def _measure_export(net: Path, weights: Path, model: Path, mode: str) -> dict:
    """One export in a fresh process (its peak memory is its own)."""
    result = subprocess.run([sys.executable, "-c", MEASURE_EXPORT, str(net), str(weights),
                             str(model), mode], capture_output=True, text=True, cwd=ROOT)
    if result.returncode != 0:
        sys.exit(f"the export failed: {result.stderr.strip().splitlines()[-1]}")
    return json.loads(result.stdout)


def _cli(*args: object) -> None:
    subprocess.run([sys.executable, "-m", "caffe_lstm", *map(str, args)], check=True,
                   capture_output=True, cwd=ROOT)


if __name__ == "__main__":
    main()
