"""Serving the seq_classifier sample on a real Triton server: steps/s, latency per step and the
mean batch per execution at 1, 8 and 32 concurrent sequences.

    python benchmarks/serving.py [--seconds S] [--repeats N] [--quick]

The repository is written as `caffe-lstm triton --backend python` writes it (one step per
request: data 1x1x8, cont 1x1), served by `caffe_lstm.serve` (the tritonserver bundled in
nvidia-pytriton, on this machine's CPU), and driven by ``caffe_lstm.serving.load.load_test``,
what `caffe-lstm bench --triton` runs: each concurrent sequence is one client thread with its
own gRPC channel, streaming sequences of --length steps one synchronous request per step
(cont 0 at the first step), a new sequence with the same correlation id after each END. A
level streams --warmup sequences per client, then measures for --seconds; steps/s counts the
steps answered, the latencies are those of its requests, and the mean batch per execution is
Triton's own count (statistics extension: inference_count / execution_count over the
measurement). Needs `pip install 'caffe-lstm[serve]'`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "seq_classifier"
MODEL = "seq_classifier"
LEVELS = (1, 8, 32)
TARGET = 3.0


def write_repository(repository: Path, max_batch: int, delay_us: int, instances: int = 1) -> None:
    import caffe_lstm
    from caffe_lstm.serving.config import Batching

    net = caffe_lstm.load(SAMPLE / "seq_classifier.prototxt",
                          SAMPLE / "seq_classifier.caffemodel",
                          shapes={"data": (1, 1, 8), "cont": (1, 1)})
    batching = Batching(max_candidate_sequences=max(LEVELS), max_queue_delay_us=delay_us)
    net.to_triton(repository, backend="python", name=MODEL, max_batch=max_batch,
                  instances=instances, batching=batching)


def probabilities(outputs: dict[str, np.ndarray]) -> None:
    """Every answer must be a softmax over the 5 classes."""
    probs = outputs["probs"]
    if not abs(float(probs.sum()) - 1) < 1e-4:
        raise RuntimeError(f"a step answered {probs}, not probabilities")


def sequence(length: int) -> dict[str, np.ndarray]:
    """One sequence's requests, row t for step t: features N(0, 1), cont 0 then 1."""
    data = np.random.default_rng(0).standard_normal((length, 1, 1, 8)).astype(np.float32)
    cont = np.ones((length, 1, 1), np.float32)
    cont[0] = 0  # the state resets at each sequence's first step
    return {"data": data, "cont": cont}


def measure(server, args) -> list[dict]:
    """One round: each level in turn, through `caffe-lstm bench --triton`'s library."""
    from caffe_lstm.serving.load import load_test

    levels = load_test(server.grpc_url, MODEL, LEVELS, steps=args.length, seconds=args.seconds,
                       warmup=args.warmup, inputs=sequence(args.length), check=probabilities)
    return [level.as_dict() for level in levels]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured time per level")
    parser.add_argument("--warmup", type=int, default=5,
                        help="unmeasured sequences per client before each level's measurement")
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds over the levels; each level's median round is reported")
    parser.add_argument("--length", type=int, default=20, help="steps per sequence")
    parser.add_argument("--max-batch", type=int, default=32, help="the model's max_batch_size")
    parser.add_argument("--delay-us", type=int, default=0,
                        help="the sequence batcher's max_queue_delay_microseconds")
    parser.add_argument("--quick", action="store_true",
                        help="1 s per level, one round: a smoke run, the numbers mean little")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.warmup, args.repeats = 1.0, 1, 1

    import caffe_lstm

    with tempfile.TemporaryDirectory() as scratch:
        repository = Path(scratch) / "repo"
        write_repository(repository, args.max_batch, args.delay_us)
        with caffe_lstm.serve(repository) as server:
            rounds = {count: [] for count in LEVELS}
            for _ in range(args.repeats):
                for row in measure(server, args):  # the levels alternate within each round
                    rounds[row["concurrency"]].append(row)
    rows = {count: sorted(results, key=lambda r: r["steps_per_s"])[len(results) // 2]
            for count, results in rounds.items()}
    print(f"seq_classifier, python backend, max_batch {args.max_batch}, queue delay "
          f"{args.delay_us} us, sequences of {args.length} steps, {args.warmup} warm-up "
          f"sequence(s) per client, "
          f"{args.seconds:g} s per level, median of {args.repeats} round(s)")
    print(f"{'sequences':>9} {'steps/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'mean batch':>10}")
    for count, row in rows.items():
        print(f"{count:>9} {row['steps_per_s']:>9.0f} {row['p50_ms']:>8.2f} "
              f"{row['p99_ms']:>8.2f} {row['mean_batch'] or float('nan'):>10.2f}")
    for count in LEVELS:
        spread = [r["steps_per_s"] for r in rounds[count]]
        if len(spread) > 1:
            print(f"steps/s at {count}: {min(spread):.0f} ... {max(spread):.0f} over the rounds "
                  f"(stdev {statistics.stdev(spread):.0f})")
    ratio = rows[32]["steps_per_s"] / rows[1]["steps_per_s"]
    print(f"load average during the run: {os.getloadavg()[0]:.1f} (1 min)")
    print(f"throughput 32 / 1 = {ratio:.3f}")
    print(f"target throughput 32 / 1 >= {TARGET:g}: {'met' if ratio >= TARGET else 'not met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
