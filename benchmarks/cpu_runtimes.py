"""The CPU runtimes side by side: caffe-lstm's numpy executor and ONNX export against
onnxruntime's own LSTM operator, torch.nn.LSTM and a hand-written numpy loop.

    PYTHONPATH=. python benchmarks/cpu_runtimes.py [--repeats N] [--threads K] [--quick]
        [--pause SECONDS] [--caffe PATH/TO/build/tools/caffe [--only-caffe]]

Three shapes, each an LSTM stack whose cont comes from a ``ContinuationIndicator`` (0 at t = 0,
then 1), so that every runtime below computes exactly Caffe's layer:

- ``2-layer``: two LSTMs, T = 200, N = 16, I = 256, H = 512;
- ``long``: one LSTM, T = 10,000, N = 1, I = H = 256 (per-step overhead dominates);
- ``one step``: two LSTMs, T = 1, N = 64, I = 256, H = 512.

Runtimes, on the same seeded weights (``caffe-lstm weights init``) and input, in one process:

- **numpy**: caffe-lstm's numpy executor on the rewritten graph (``NumpyExecutor.run``: the
  executor's time, the graph rewritten once before);
- **hand numpy**: a hand-written numpy loop doing the same work (the input projection of all
  steps hoisted, one recurrent product, four activations and two updates per step), on
  aligned copies of the same arrays;
- **ort scan**: onnxruntime on the model ``export_onnx(lstm_op="scan")`` writes (each layer one
  Scan), with the session options ``run --backend onnxruntime`` uses;
- **ort auto**: the same with ``lstm_op="auto"`` (here: ONNX's own LSTM for each layer);
- **ort native**: onnxruntime on a model made by hand from the same blobs with ONNX's ``LSTM``
  operator (what a user would write instead of caffe-lstm's export);
- **torch**: ``torch.nn.LSTM`` (float32, CPU, ``torch.no_grad``);
- **scan floor**: the ``ort scan`` model with each Scan's body cut to its recurrent product
  (the step's product, h and c sliced from the gates, h copied out; ``product_only``): what
  any Scan computing this recurrence pays per step before its gate arithmetic. Not the
  layer's output, so compared with nothing; ``ort scan / scan floor`` is the cost of the
  body's gate arithmetic, ``scan floor / ort native`` how far onnxruntime's Scan alone is
  from its own LSTM operator.

Each repeat runs every runtime once, in turn (so that all see the same machine), in an order
shuffled per round, each after ``--pause`` seconds of idle time: a runtime's worker threads
keep spinning for a while after its last kernel (OpenBLAS's for about 0.1 s) and slow
whichever runtime comes next. A numpy product right before made the one step's ``ort scan``
3 % slower and ``ort native`` 10 %; in a fixed order without pauses one runtime paid for its
predecessor's threads every round (``ort scan`` after the hand numpy loop, torch after
onnxruntime's). The best of the repeats is printed (the machine is shared: the best is the
least disturbed), and each ratio twice: of the bests, and the median over the rounds of the
ratio within a round (this host has slow phases of tens of seconds in which every runtime is
1.3-1.35x slower; a best-of ratio can set one runtime's fast phase against another's slow
one, while two runs of one round share theirs). The median is no cleaner where a runtime's
own rounds spread more than the host's phases: torch's one step (T = 1) after the pause takes
~4x its best in most rounds (13.8 vs 3.5 ms), its threads woken from sleep. Each onnxruntime
model has three sessions that the rounds take in turn (one session can be steadily slower
than another of the same model). Every output is compared with the numpy executor's
(max |difference| / max |value|). The roofline: the machine's measured rates (GFLOP/s) on
the recurrent product's shape of ``x @ w.T`` and of ``(w @ x.T).T`` (the numpy executor's
form for fewer than 128 rows), and the time all the shape's products would take at the
better rate.

Printed ratios (the targets of issue 25): ``numpy / hand numpy`` (≤ 1.3 on 2-layer),
``ort scan / ort native`` (≤ 1.5 on long, ≤ 1.1 on the others), ``ort scan / torch`` (≤ 1.2),
``ort auto / ort native`` (≈ 1); and, for scale, ``scan floor / ort native`` and
``ort scan / scan floor``. ``--threads K`` gives onnxruntime (intra-op) and torch K
threads instead of their defaults (on a machine others load, one thread each compares the
runtimes' own work). ``--quick`` uses tiny shapes: a smoke test of the script.

``--caffe PATH/TO/build/tools/caffe`` (a real BVLC Caffe, CPU_ONLY is enough) adds the whole
process against real Caffe's on the 2-layer net: ``caffe-lstm run NET -w W --inputs x.npz -o
out.npz`` (a new Python process: start-up, load, rewrite, one numpy forward, the outputs
written) against ``caffe test -model M -weights W -iterations 1`` (one Forward of the same LSTM
layers with the same blobs; its input ``x`` and cont, 0 at t = 0 then 1, come from
``Parameter`` layers whose blobs are in the caffemodel, the last top goes to a ``Silence``
layer so that ``caffe test`` logs no output values; Caffe's logging below warnings is off, in
Caffe's favour). Each is the best of the repeats' wall times. One more Caffe run, its output
reduced to sum_h |h| per (t, n) by a ``Reduction`` layer that ``caffe test`` logs, is compared
with caffe-lstm's output. Printed: ``numpy run (whole process) / real Caffe (whole process)``
(issue 25's target: ≤ 0.33), and, for scale, a Python process that only imports numpy. The
Python processes have their modules' bytecode, as an installed caffe-lstm has it
(``installed_python``). Before each round the recurrent product ``(w @ x.T).T`` is timed and
printed: on a 2-vCPU VM whose host delays the second core, OpenBLAS's two threads make it
0.45-0.5 ms instead of 0.20 (its one-thread time is 0.34), for tens of seconds at a time, and
the whole process ~0.1 s slower; the line tells such rounds apart. ``--only-caffe`` skips
the in-process runtimes.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import caffe_lstm
from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.frontend.caffe_writer import write_caffemodel

#: name -> (T, N, I, H, layers)
SHAPES = {"2-layer": (200, 16, 256, 512, 2), "long": (10_000, 1, 256, 256, 1),
          "one step": (1, 64, 256, 512, 2)}
QUICK_SHAPES = {"2-layer": (8, 2, 6, 5, 2), "long": (50, 1, 4, 3, 1),
                "one step": (1, 3, 6, 5, 2)}
FLOOR = "scan floor"  # not the layer's output: compared with nothing


def prototxt(T: int, N: int, I: int, H: int, layers: int) -> str:
    text = (f'name: "lstm{layers}"\n'
            f'layer {{ name: "input" type: "Input" top: "x" '
            f'input_param {{ shape {{ dim: {T} dim: {N} dim: {I} }} }} }}\n'
            'layer { name: "indicator" type: "ContinuationIndicator" top: "cont" '
            f'continuation_indicator_param {{ time_step: {T} batch_size: {N} }} }}\n')
    bottom = "x"
    for k in range(1, layers + 1):
        text += (f'layer {{ name: "lstm{k}" type: "LSTM" bottom: "{bottom}" bottom: "cont" '
                 f'top: "h{k}" recurrent_param {{ num_output: {H} }} }}\n')
        bottom = f"h{k}"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0,
                        help="onnxruntime's and torch's threads (0: their defaults)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes; a smoke test")
    parser.add_argument("--pause", type=float, default=0.15, metavar="SECONDS",
                        help="idle time before each timed run (default 0.15)")
    parser.add_argument("--caffe", type=Path, metavar="PATH/TO/build/tools/caffe",
                        help="real Caffe's tool: also time the whole process against it")
    parser.add_argument("--only-caffe", action="store_true",
                        help="with --caffe: only the whole-process comparison")
    args = parser.parse_args()
    if args.only_caffe and not args.caffe:
        parser.error("--only-caffe needs --caffe")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        for name, dims in ({} if args.only_caffe else QUICK_SHAPES if args.quick
                           else SHAPES).items():
            measure(Path(folder), name, dims, 1 if args.quick else args.repeats, args.threads,
                    0 if args.quick else args.pause)
        if args.caffe:
            name = "2-layer"
            against_caffe(Path(folder), args.caffe, name,
                          (QUICK_SHAPES if args.quick else SHAPES)[name],
                          1 if args.quick else args.repeats)


SESSIONS = 3  # onnxruntime sessions per model, taken in turn by the rounds


def measure(folder: Path, name: str, dims: tuple[int, ...], repeats: int, threads: int,
            pause: float) -> None:
    T, N, I, H, layers = dims
    net_path, weights_path = folder / f"{layers}x{T}.prototxt", folder / f"{layers}x{T}.caffemodel"
    net_path.write_text(prototxt(*dims))
    caffe_lstm.load(net_path).write_synthetic_weights(weights_path, seed=0)
    net = caffe_lstm.load(net_path, weights_path)
    x = np.random.default_rng(1).normal(size=(T, N, I)).astype(np.float32)
    blobs = [[np.array(v.data) for v in net.graph.node(f"lstm{k}").weights]
             for k in range(1, layers + 1)]  # aligned copies: W_xc, b_c, W_hc per layer
    runs = runners(net, blobs, x, threads)
    times: dict[str, list[float]] = {runtime: [] for runtime in runs}
    outputs: dict[str, np.ndarray] = {}
    if T == 1:
        repeats *= 20  # milliseconds each: more rounds for the same confidence
    order = list(runs.items())
    shuffle = random.Random(0).shuffle
    for _ in range(repeats + 1):  # the first round warms up (sessions, aligned copies, pages)
        for runtime, run in order:
            time.sleep(pause)  # the runtime before stops spinning: this one starts on idle cores
            started = time.perf_counter()
            outputs[runtime] = run()
            times[runtime].append(time.perf_counter() - started)
        shuffle(order)
    best = {runtime: min(seconds[1:]) for runtime, seconds in times.items()}
    reference = outputs["numpy"]
    scale = max(float(np.abs(reference).max()), 1e-30)
    print(f"{name} (T={T}, N={N}, I={I}, H={H}, {layers} layer(s)); best of {repeats}:")
    for runtime in runs:
        error = float(np.abs(outputs[runtime] - reference).max()) / scale
        compared = "(the product alone)" if runtime == FLOOR else f"vs numpy {error:.1e}"
        print(f"  {runtime:<11} {best[runtime] * 1e3:10.2f} ms   {compared}")
    rates, floor = roofline(T, N, I, H, layers)
    print(f"  roofline: on ({N}, {H}) x ({H}, {4 * H}) "
          + ", ".join(f"{form} at {rate:.1f}" for form, rate in rates.items())
          + f" GFLOP/s; all products at the better {floor * 1e3:.2f} ms")
    for top, bottom in (("numpy", "hand numpy"), ("ort scan", "ort native"),
                        ("ort scan", "torch"), ("ort auto", "ort native"),
                        ("ort native", "torch"), (FLOOR, "ort native"), ("ort scan", FLOOR)):
        print(f"{name}: {top} / {bottom} = {best[top] / best[bottom]:.3f}")
        print(f"{name}: {top} / {bottom}, median of the rounds' = "
              f"{paired_ratio(times[top][1:], times[bottom][1:]):.3f}")


def paired_ratio(top: list[float], bottom: list[float]) -> float:
    """The median over the rounds of top / bottom within each round. The host has slow phases
    (every runtime 1.3-1.35x slower for tens of seconds): a best-of ratio then compares one
    runtime's fast phase with another's slow one, where two runs a second apart share it."""
    return float(np.median(np.array(top) / np.array(bottom)))


def runners(net, blobs: list[list[np.ndarray]], x: np.ndarray, threads: int
            ) -> dict[str, Callable]:
    """One callable per runtime, each returning the last layer's (T, N, H) output."""
    import onnxruntime as ort

    graph = net.rewritten().graph
    executor = NumpyExecutor(graph)
    top = graph.outputs[0].name
    feeds = {"x": x}

    def session(model: bytes) -> Callable:
        options = ort.SessionOptions()
        options.log_severity_level = 3  # what run --backend onnxruntime sets, nothing more
        options.intra_op_num_threads = threads  # 0: onnxruntime's default
        # A session's speed depends on where its buffers land: one session of the same model
        # runs 1-1.5 µs per step slower than another, for every model (measured on the long
        # shape). The rounds take SESSIONS sessions in turn, so that the best is no one
        # placement's luck.
        sessions = [ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
                    for _ in range(SESSIONS)]
        for each in sessions[1:]:  # warmed here; the first by the warm-up round
            each.run(None, feeds)
        turns = itertools.cycle(sessions)
        return lambda: next(turns).run(None, feeds)[0]

    return {
        "numpy": lambda: executor.run(feeds)[top],
        "hand numpy": lambda: hand_written(x, blobs),
        "ort scan": session(net.export_onnx(None, state="zero", lstm_op="scan").model),
        "ort auto": session(net.export_onnx(None, state="zero", lstm_op="auto").model),
        "ort native": session(native_model(x.shape, blobs)),
        "torch": torch_runner(x, blobs),
        FLOOR: session(product_only(net.export_onnx(None, state="zero", lstm_op="scan").model)),
    }


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def hand_written(x: np.ndarray, blobs: list[list[np.ndarray]]) -> np.ndarray:
    """Caffe's LSTM (gates i, f, o, g) with cont 0 at t = 0 then 1: from zeros, no resets."""
    for w_xc, b_c, w_hc in blobs:
        steps, batch, _ = x.shape
        hidden = w_hc.shape[1]
        projected = x @ w_xc.T + b_c
        recurrent = w_hc.T
        h = np.zeros((batch, hidden), np.float32)
        c = np.zeros((batch, hidden), np.float32)
        out = np.empty((steps, batch, hidden), np.float32)
        for t in range(steps):
            gates = projected[t] + h @ recurrent
            i, f, o = (_sigmoid(gates[:, k * hidden:(k + 1) * hidden]) for k in range(3))
            c = f * c + i * np.tanh(gates[:, 3 * hidden:])
            h = o * np.tanh(c)
            out[t] = h
        x = out
    return x


def _gates(a: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """Caffe's gate blocks (i, f, o, g) of a (4H, ...) array in another ``order``."""
    blocks = np.split(a, 4, axis=0)
    return np.concatenate([blocks[k] for k in order], axis=0)


def native_model(shape: tuple[int, ...], blobs: list[list[np.ndarray]]) -> bytes:
    """ONNX's LSTM operator per layer (gates i, o, f, c; B = [W_b, R_b]), written by hand."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    steps, batch, inputs = shape
    nodes, initializers, bottom = [], [], "x"
    for k, (w_xc, b_c, w_hc) in enumerate(blobs):
        hidden = w_hc.shape[1]
        order = (0, 2, 1, 3)  # Caffe i, f, o, g -> ONNX i, o, f, c
        arrays = {f"W{k}": _gates(w_xc, order)[None], f"R{k}": _gates(w_hc, order)[None],
                  f"B{k}": np.concatenate([_gates(b_c, order), np.zeros_like(b_c)])[None]}
        initializers += [numpy_helper.from_array(a.astype(np.float32), n)
                         for n, a in arrays.items()]
        initializers.append(numpy_helper.from_array(np.array([1], np.int64), f"axis{k}"))
        nodes += [helper.make_node("LSTM", [bottom, f"W{k}", f"R{k}", f"B{k}"], [f"Y{k}"],
                                   hidden_size=hidden),
                  helper.make_node("Squeeze", [f"Y{k}", f"axis{k}"], [f"h{k}"])]
        bottom = f"h{k}"
    graph = helper.make_graph(
        nodes, "native", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(bottom, TensorProto.FLOAT, (steps, batch, hidden))],
        initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def product_only(model: bytes) -> bytes:
    """The exported model with each Scan's body cut to its recurrent product: the body's nodes
    up to its first Gemm or MatMul (the gates), then h and c taken as the gates' first two
    quarters and h copied out as the step's output. What any Scan computing this recurrence
    pays per step before its gate arithmetic: the Scan's own iteration, one product, a Split
    and a copy (the floor that ``ort scan`` is measured against)."""
    import onnx
    from onnx import helper

    cut = onnx.load_from_string(model)
    for scan in (node for node in cut.graph.node if node.op_type == "Scan"):
        body = next(a.g for a in scan.attribute if a.name == "body")
        products = [k for k, node in enumerate(body.node) if node.op_type in ("Gemm", "MatMul")]
        kept = list(body.node[:products[0] + 1])
        h, c, step = (value.name for value in body.output)  # states h, c; the step's output
        gates = kept[-1].output[0]
        kept += [helper.make_node("Split", [gates], [h, c, f"{gates}/2", f"{gates}/3"], axis=-1),
                 helper.make_node("Identity", [h], [step])]
        read = {name for node in kept for name in node.input}
        initializers = [each for each in body.initializer if each.name in read]
        del body.node[:], body.initializer[:]
        body.node.extend(kept)
        body.initializer.extend(initializers)
    return cut.SerializeToString()


def torch_runner(x: np.ndarray, blobs: list[list[np.ndarray]]) -> Callable:
    import torch

    inputs, hidden = x.shape[2], blobs[0][2].shape[1]
    lstm = torch.nn.LSTM(inputs, hidden, num_layers=len(blobs))
    order = (0, 1, 3, 2)  # Caffe i, f, o, g -> torch i, f, g, o
    with torch.no_grad():
        for k, (w_xc, b_c, w_hc) in enumerate(blobs):
            getattr(lstm, f"weight_ih_l{k}").copy_(torch.from_numpy(_gates(w_xc, order)))
            getattr(lstm, f"weight_hh_l{k}").copy_(torch.from_numpy(_gates(w_hc, order)))
            getattr(lstm, f"bias_ih_l{k}").copy_(torch.from_numpy(_gates(b_c, order)))
            getattr(lstm, f"bias_hh_l{k}").zero_()
    tensor = torch.from_numpy(x)

    def run() -> np.ndarray:
        with torch.no_grad():
            return lstm(tensor)[0].numpy()

    return run


def roofline(T: int, N: int, I: int, H: int, layers: int) -> tuple[dict[str, float], float]:
    """(GFLOP/s of the recurrent product's shape in each form, ``x @ w.T`` and ``(w @ x.T).T``
    (the numpy executor's for fewer than 128 rows); the seconds every product of the net would
    take at the better rate: the input projections and T recurrent products per layer)."""
    rates = {form: 2 * N * H * 4 * H / seconds / 1e9
             for form, seconds in product_seconds(N, H, trials=30).items()}
    flops = sum(2 * T * N * ((I if k == 0 else H) + H) * 4 * H for k in range(layers))
    return rates, flops / max(rates.values()) / 1e9


def product_seconds(N: int, H: int, trials: int) -> dict[str, float]:
    """The best time of the recurrent product (N, H) x (H, 4H) in each form over ``trials``
    trials of ~10 ms (the best trial: the one others' jobs disturbed least)."""
    rng = np.random.default_rng(0)
    h = rng.normal(size=(N, H)).astype(np.float32)
    w = rng.normal(size=(4 * H, H)).astype(np.float32)
    repeats = max(5, min(500, int(2e8 / (2 * N * H * 4 * H))))
    forms = {"x @ w.T": lambda: h @ w.T, "(w @ x.T).T": lambda: (w @ h.T).T}
    best = dict.fromkeys(forms, float("inf"))
    for _ in range(trials):
        for form, product in forms.items():
            started = time.perf_counter()
            for _ in range(repeats):
                product()
            best[form] = min(best[form], (time.perf_counter() - started) / repeats)
    return best


# ---- the whole process against real Caffe's (--caffe) ----------------------------------------

def against_caffe(folder: Path, caffe: Path, name: str, dims: tuple[int, ...],
                  repeats: int) -> None:
    """Prints both whole processes' best wall time, the outputs' agreement and the ratio."""
    T, N, I, H, layers = dims
    net_path, weights_path = folder / "whole.prototxt", folder / "whole.caffemodel"
    net_path.write_text(prototxt(*dims))
    caffe_lstm.load(net_path).write_synthetic_weights(weights_path, seed=0)
    x = np.random.default_rng(1).normal(size=(T, N, I)).astype(np.float32)
    np.savez(folder / "x.npz", x=x)
    net = caffe_lstm.load(net_path, weights_path)
    cont = np.ones((T, N), np.float32)
    cont[0] = 0  # what the ContinuationIndicator makes: a new sequence at t = 0
    write_caffemodel(folder / "caffe.caffemodel",
                     [("x", "Parameter", [x]), ("cont", "Parameter", [cont])]
                     + [(f"lstm{k}", "LSTM", [v.data for v in net.graph.node(f"lstm{k}").weights])
                        for k in range(1, layers + 1)])
    ours = [sys.executable, "-m", "caffe_lstm", "run", str(net_path), "-w", str(weights_path),
            "--inputs", str(folder / "x.npz"), "-o", str(folder / "out.npz")]
    theirs = [str(caffe), "test", "-weights", str(folder / "caffe.caffemodel"), "-iterations", "1"]
    quiet = {**os.environ, "GLOG_minloglevel": "1"}  # Caffe's INFO log off: in its favour
    (folder / "timed.prototxt").write_text(caffe_prototxt(dims, "silence"))
    (folder / "check.prototxt").write_text(caffe_prototxt(dims, "check"))
    python = installed_python(folder)
    products: list[float] = []  # the executor's recurrent product before each round
    best_ours, best_theirs, best_floor = best_ms(
        [(ours, python), ([*theirs, "-model", str(folder / "timed.prototxt")], quiet),
         ([sys.executable, "-c", "import numpy"], python)],
        repeats, lambda: products.append(product_seconds(N, H, trials=3)["(w @ x.T).T"]))
    logged = run_process([*theirs, "-model", str(folder / "check.prototxt")], os.environ)
    caffe_sums = np.array([float(v) for v in re.findall(r"Batch 0, abs_sum = (\S+)", logged)])
    our_sums = np.abs(np.load(folder / "out.npz")[f"h{layers}"]).sum(axis=-1).ravel()
    if caffe_sums.shape != our_sums.shape:
        sys.exit(f"error: real Caffe logged {caffe_sums.size} sums, expected {our_sums.size}")
    error = float(np.abs(caffe_sums - our_sums).max()) / max(float(our_sums.max()), 1e-30)
    print(f"{name} whole process (T={T}, N={N}, I={I}, H={H}); best of {repeats}:")
    print(f"  caffe-lstm run (numpy) {best_ours:10.1f} ms   (Python + numpy start-up alone "
          f"{best_floor:.1f} ms)")
    print(f"  real Caffe (caffe test) {best_theirs:9.1f} ms   sum_h |h| per (t, n) vs "
          f"caffe-lstm {error:.1e}")
    print("  the recurrent product (w @ x.T).T before each round: "
          + " ".join(f"{seconds * 1e3:.3f}" for seconds in products[1:]) + " ms")
    print(f"{name}: numpy run (whole process) / real Caffe (whole process) = "
          f"{best_ours / best_theirs:.3f}   (target ≤ 0.33)")


def installed_python(folder: Path) -> dict[str, str]:
    """The environment of a Python whose modules have their bytecode, as a pip-installed
    caffe-lstm has it (pip compiles it at install): caches are written, under ``folder``
    (not into the checkout), by the warm-up round. Without them (``PYTHONDONTWRITEBYTECODE``,
    which some sandboxes set) every process compiles ~140 modules from source, +0.15 s here."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(folder / "pycache")}


def caffe_prototxt(dims: tuple[int, ...], ending: str) -> str:
    """The LSTM layers of ``prototxt(*dims)`` in BVLC Caffe's words (it has no
    ContinuationIndicator): x and cont from ``Parameter`` layers, the last top silenced
    (``ending="silence"``) or reduced to sum_h |h| per (t, n) for ``caffe test`` to log."""
    T, N, I, H, layers = dims
    text = (f'name: "lstm{layers}"\n'
            f'layer {{ name: "x" type: "Parameter" top: "x" '
            f'parameter_param {{ shape {{ dim: {T} dim: {N} dim: {I} }} }} }}\n'
            f'layer {{ name: "cont" type: "Parameter" top: "cont" '
            f'parameter_param {{ shape {{ dim: {T} dim: {N} }} }} }}\n')
    text += "".join(line for line in prototxt(*dims).splitlines(keepends=True)
                    if 'type: "LSTM"' in line)
    if ending == "silence":
        return text + f'layer {{ name: "silence" type: "Silence" bottom: "h{layers}" }}\n'
    return text + (f'layer {{ name: "abs_sum" type: "Reduction" bottom: "h{layers}" '
                   'top: "abs_sum" reduction_param { operation: ASUM axis: 2 } }\n')


def best_ms(commands: list[tuple[list[str], dict[str, str]]], repeats: int,
            probe: Callable[[], None]) -> list[float]:
    """Each ``(command, environment)``'s least wall time over ``repeats`` rounds, each round
    running every command once in turn (after one round to warm the caches); ``probe`` is
    called before each round."""
    times: list[list[float]] = [[] for _ in commands]
    for _ in range(repeats + 1):
        probe()
        for (command, env), seconds in zip(commands, times, strict=True):
            started = time.perf_counter()
            run_process(command, env)
            seconds.append(time.perf_counter() - started)
    return [min(seconds[1:]) * 1e3 for seconds in times]


def run_process(command: list[str], env: dict[str, str]) -> str:
    """Runs ``command``; its stderr (Caffe logs there), or exits with it on failure."""
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode:
        sys.exit(f"error: {' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return result.stderr


if __name__ == "__main__":
    main()
