"""Engine size and build time of one LSTM net against the sequence length T (static shapes).

    python benchmarks/engine_size_vs_T.py [--quick] [--repeats N]

The net is Input (x: T x N x I, cont: T x N) -> LSTM (H) -> InnerProduct (K, axis 2) with
seeded synthetic weights, written as prototxt + caffemodel to a temporary directory. It is built
with TensorRT for RTX (CPU AOT build) in the loop form (one ILoop: the engine should not grow
with T), in the loop form with T dynamic (a profile 1..T, as `convert --shape` makes), and, for
contrast, unrolled (T copies of the step). The time is a median of
``time.perf_counter`` around ``build_engine`` (emission + TensorRT build; loading and the
rewrite are outside it), after one untimed warm-up build.

The unrolled net at T = 1000 is first tried once in a child process; when that takes longer
than --unroll-budget seconds the unrolled contrast uses T = 100 instead, and says so.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from caffe_lstm.backends.tensorrt.build import BuildOptions, build_engine
from caffe_lstm.backends.tensorrt.runtime import LoadedRuntime, load_runtime
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.ir.graph import Graph
from caffe_lstm.passes import run_passes
from caffe_lstm.synthetic import synthetic_weights

SEED = 0
SHORT_T, LONG_T, UNROLL_FALLBACK_T, QUICK_UNROLL_T = 10, 1000, 100, 50
#: --sweep: the loop-form sizes over a wide range of T (one build each).
SWEEP_T = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


@dataclass(frozen=True)
class Dims:
    """Batch N, input features I, hidden units H, classifier outputs K."""

    n: int = 1
    i: int = 64
    h: int = 128
    k: int = 32


FULL, QUICK = Dims(), Dims(n=1, i=16, h=32, k=8)


def net_prototxt(t: int, d: Dims) -> str:
    """Input (x, cont) -> LSTM -> InnerProduct on axis 2, time-major, static shapes."""
    return f"""name: "lstm_bench"
layer {{ name: "input" type: "Input" top: "x" top: "cont"
        input_param {{ shape {{ dim: {t} dim: {d.n} dim: {d.i} }}
                       shape {{ dim: {t} dim: {d.n} }} }} }}
layer {{ name: "lstm1" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param {{ num_output: {d.h} }} }}
layer {{ name: "fc" type: "InnerProduct" bottom: "h" top: "y"
        inner_product_param {{ num_output: {d.k} axis: 2 }} }}
"""


def write_net(directory: Path, t: int, d: Dims, seed: int = SEED) -> tuple[Path, Path]:
    """The prototxt and caffemodel for sequence length ``t``. The blob shapes do not depend on
    T, so every T gets the same weights from the same seed."""
    prototxt = directory / f"lstm_T{t}.prototxt"
    prototxt.write_text(net_prototxt(t, d))
    caffemodel = prototxt.with_suffix(".caffemodel")
    write_caffemodel(caffemodel, synthetic_weights(load_net(prototxt).graph, seed))
    return prototxt, caffemodel


def rewritten(prototxt: Path, caffemodel: Path, unroll: bool) -> Graph:
    """The loaded net after the recurrent rewrite (and the unrolling), as `convert` builds it
    with ``--state zero`` (the caller feeds cont = 0 at t = 0)."""
    graph = load_net(prototxt, caffemodel).graph
    return run_passes(graph, ["expand-recurrent"] + (["unroll"] if unroll else []))


def dynamic_time(t: int, d: Dims) -> dict:
    """A profile where T ranges over 1..t (opt = max = t): `convert --shape x:1x..:t..:t..`."""
    return {"x": ((1, d.n, d.i), (t, d.n, d.i), (t, d.n, d.i)),
            "cont": ((1, d.n), (t, d.n), (t, d.n))}


def timed_build(runtime: LoadedRuntime, graph: Graph,
                shapes: dict | None = None) -> tuple[float, int]:
    """Seconds spent in build_engine and the plan size in bytes."""
    started = time.perf_counter()
    plan = build_engine(runtime, graph, BuildOptions(shapes=shapes or {}))
    return time.perf_counter() - started, len(plan)


@dataclass
class Row:
    """One table row: the builds of one form at one T."""

    form: str
    t: int
    seconds: list[float]
    size: int

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def measure(runtime: LoadedRuntime, directory: Path, form: str, ts: tuple[int, ...], d: Dims,
            repeats: int) -> list[Row]:
    """One row per T: ``repeats`` rounds that build every T in turn (so that a slow spell of
    the machine hits all of them), each build from a freshly loaded and rewritten graph."""
    files = {t: write_net(directory, t, d) for t in ts}
    seconds: dict[int, list[float]] = {t: [] for t in ts}
    sizes: dict[int, set[int]] = {t: set() for t in ts}
    for _ in range(repeats):
        for t in ts:
            shapes = dynamic_time(t, d) if form == "loop-dynT" else None
            graph = rewritten(*files[t], unroll=form == "unroll")
            elapsed, size = timed_build(runtime, graph, shapes)
            seconds[t].append(elapsed)
            sizes[t].add(size)
    for t in ts:
        if len(sizes[t]) > 1:
            print(f"note: {form} T={t} gave different plan sizes {sorted(sizes[t])}; "
                  "reporting the max")
    return [Row(form, t, seconds[t], max(sizes[t])) for t in ts]


def unrolled_long_fits(directory: Path, d: Dims, budget: float) -> bool:
    """Whether one unrolled build at T = LONG_T (load, unroll, build) finishes within
    ``budget`` seconds; tried in a child process so that it can be stopped."""
    prototxt, caffemodel = write_net(directory, LONG_T, d)
    command = [sys.executable, __file__, "--probe", str(prototxt), str(caffemodel)]
    started = time.perf_counter()
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=budget)
    except subprocess.TimeoutExpired:  # subprocess.run kills its own child on timeout
        print(f"unrolled T={LONG_T}: not finished after {budget:.0f} s "
              f"-> the unrolled contrast uses T={UNROLL_FALLBACK_T}")
        return False
    except subprocess.CalledProcessError as exc:
        reason = (exc.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
        print(f"unrolled T={LONG_T}: the probe build failed ({reason}) "
              f"-> the unrolled contrast uses T={UNROLL_FALLBACK_T}")
        return False
    print(f"unrolled T={LONG_T}: one probe (load, unroll, build) took "
          f"{time.perf_counter() - started:.1f} s")
    return True


def print_table(rows: list[Row]) -> None:
    print(f"{'form':<7} {'T':>5} {'build s (median)':>17} {'min':>7} {'max':>7} "
          f"{'engine bytes':>13} {'MiB':>7}")
    for r in rows:
        print(f"{r.form:<7} {r.t:>5} {r.median:>17.3f} {min(r.seconds):>7.3f} "
              f"{max(r.seconds):>7.3f} {r.size:>13} {r.size / 2**20:>7.2f}")


def print_ratios(form: str, short: Row, long: Row) -> None:
    print(f"{form}: size T={long.t} / T={short.t} = {long.size / short.size:.3f}")
    print(f"{form}: build time T={long.t} / T={short.t} = {long.median / short.median:.3f}")


def run(args: argparse.Namespace) -> None:
    d = QUICK if args.quick else FULL
    repeats = 1 if args.quick else args.repeats
    runtime = load_runtime("tensorrt-rtx")
    print(f"LSTM net N={d.n} I={d.i} H={d.h} K={d.k}, fp32, static shapes, "
          f"{runtime.trt.__version__}, {repeats} build(s) per row")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        measure(runtime, directory, "loop", (SHORT_T,), d, 1)  # warm-up: first-build overheads
        loop = measure(runtime, directory, "loop", (SHORT_T, LONG_T), d, repeats)
        # the same loop with T dynamic (a profile 1..T): the engine no longer specialises on T
        dynamic = measure(runtime, directory, "loop-dynT", (SHORT_T, LONG_T), d, repeats)
        if args.quick:
            unroll_t = QUICK_UNROLL_T
            print(f"--quick: unrolled contrast at T={unroll_t} (no T={LONG_T} probe)")
        else:
            fits = unrolled_long_fits(directory, d, args.unroll_budget)
            unroll_t = LONG_T if fits else UNROLL_FALLBACK_T
        unroll = measure(runtime, directory, "unroll", (SHORT_T, unroll_t), d, repeats)
    print_table(loop + dynamic + unroll)
    print_ratios("loop", *loop)
    print_ratios("loop-dynT", *dynamic)
    print_ratios("unroll", *unroll)
    within = all(0.95 <= r <= 1.05 for r in (loop[1].size / loop[0].size,
                                             loop[1].median / loop[0].median))
    print(f"loop target (both ratios within 0.95..1.05): {'met' if within else 'NOT met'}")
    within = all(0.95 <= r <= 1.05 for r in (dynamic[1].size / dynamic[0].size,
                                             dynamic[1].median / dynamic[0].median))
    print(f"loop-dynT target (both ratios within 0.95..1.05): {'met' if within else 'NOT met'}")


def sweep(d: Dims) -> None:
    """One loop-form build per T of SWEEP_T: build seconds and plan size."""
    runtime = load_runtime("tensorrt-rtx")
    with tempfile.TemporaryDirectory() as tmp:
        measure(runtime, Path(tmp), "loop", (SHORT_T,), d, 1)  # warm-up
        rows = measure(runtime, Path(tmp), "loop", SWEEP_T, d, 1)
    print_table(rows)


def probe(prototxt: str, caffemodel: str) -> None:
    """The child of unrolled_long_fits: one unrolled build."""
    elapsed, size = timed_build(load_runtime("tensorrt-rtx"),
                                rewritten(Path(prototxt), Path(caffemodel), unroll=True))
    print(f"{elapsed:.3f} {size}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one build per row")
    parser.add_argument("--repeats", type=int, default=9, help="builds per row (median)")
    parser.add_argument("--unroll-budget", type=float, default=60.0,
                        help="seconds the unrolled T=1000 probe build may take")
    parser.add_argument("--sweep", action="store_true",
                        help=f"only the loop form, one build at each T of {SWEEP_T}")
    parser.add_argument("--probe", nargs=2, metavar=("PROTOTXT", "CAFFEMODEL"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 3:
        parser.error("--repeats: a median needs at least 3 builds (use --quick for one)")
    if args.probe:
        probe(*args.probe)
    elif args.sweep:
        sweep(QUICK if args.quick else FULL)
    else:
        run(args)


if __name__ == "__main__":
    main()
