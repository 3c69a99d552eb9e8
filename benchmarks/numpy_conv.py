"""The numpy executor's convolution and pooling: `caffe-lstm run` on the LRCN activity net.

    PYTHONPATH=. python benchmarks/numpy_conv.py [--net PROTOTXT] [--repeats N] [--quick]

Times whole `caffe-lstm run` processes (interpreter start, loading, the forward pass, writing the
outputs) on the LRCN activity-recognition deploy net of the corpus (5 convolutions on 160 frames
of 3×227×227, Caffe's AlexNet front-end, then an LSTM), with seeded synthetic weights
(`caffe-lstm weights init`, seed 0) in a temporary folder:

- **new**: the code of the checkout (one matrix product per group over unfolded patches; one
  strided pass per kernel tap for pooling);
- **old**: the same process with ``ops/conv.py``'s ``_convolve`` and ``ops/pooling.py``'s
  window reductions replaced by the previous implementations, kept below as the anchor (one
  tensor product per kernel tap and group; a reduction over a strided view of every window).

Both write their outputs; the script checks they agree (max abs difference) and prints
``run time new / old = …`` (medians over ``--repeats`` runs, alternating) and the same ratio of
the fastest runs (the least disturbed by other jobs). ``--quick`` runs a
small convolution net instead (a smoke test: the numbers mean little).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# The corpus sits beside the checkout (../shared), as in CI; --net points elsewhere.
LRCN = (ROOT.parent / "shared" / "corpus" / "LisaAnne__lisa-caffe-public"
        / "examples__LRCN_activity_recognition__deploy_lstm.prototxt")
QUICK_NET = """name: "quick"
input: "data" input_shape { dim: 8 dim: 3 dim: 64 dim: 64 }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 32 kernel_size: 5 stride: 2 pad: 1 } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  convolution_param { num_output: 32 kernel_size: 3 pad: 1 group: 2 } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
  pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
"""


# ---- the previous implementation (the anchor) --------------------------------------------------


def old_convolve(x, w, g, group):
    """y[b, m, *o] = Σ_offset Σ_c W[m, c, offset] · x_tap[b, c, *o]: one tensordot per kernel
    tap and group (ops/conv.py before the unfolded matrix product)."""
    from caffe_lstm.ops.conv import _padded

    padded = _padded(x, g.pad)
    out = g.conv_dims(x.shape[2:])
    m_per, c_per = w.shape[0] // group, w.shape[1]
    y = np.zeros((x.shape[0], w.shape[0]) + out, np.float32)
    for offset in itertools.product(*(range(k) for k in g.kernel)):
        index = tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                      for o, d, s, n in zip(offset, g.dilation, g.stride, out))
        tap = padded[(slice(None), slice(None)) + index]
        for k in range(group):
            outs, ins = slice(k * m_per, (k + 1) * m_per), slice(k * c_per, (k + 1) * c_per)
            product = np.tensordot(w[(outs, slice(None)) + offset], tap[:, ins], axes=([1], [1]))
            y[:, outs] += np.moveaxis(product, 0, 1)
    return y


def old_windows(x, g, fill):
    """(N, C, OH, OW, kh, kw): every window of the grown input (a strided view)."""
    from caffe_lstm.ops.pooling import _grown

    views = np.lib.stride_tricks.sliding_window_view(_grown(x, g, fill), g.kernel, axis=(2, 3))
    return views[:, :, ::g.stride[0], ::g.stride[1]]


def old_max_pool(x, g):
    from caffe_lstm.ops.pooling import _FLT_LOWEST

    return np.maximum(old_windows(x, g, -np.inf).max(axis=(-2, -1)), _FLT_LOWEST)


def old_ave_pool(x, g):
    total = old_windows(x, g, 0.0).sum(axis=(-2, -1), dtype=np.float32)
    divisor = np.outer(g.divisor(0, x.shape[2]), g.divisor(1, x.shape[3]))
    return (total / divisor.astype(np.float32)).astype(np.float32)


def child(variant: str, argv: list[str]) -> None:
    """Runs the CLI in this process, with the old functions patched in for ``old``."""
    sys.path.insert(0, str(ROOT))   # this checkout's caffe_lstm
    if variant == "old":
        from caffe_lstm.ops import conv, pooling

        conv._convolve = old_convolve
        pooling._max_pool, pooling._ave_pool = old_max_pool, old_ave_pool
    from caffe_lstm.cli import main

    sys.argv = ["caffe-lstm", *argv]
    main()


# ---- the measurement --------------------------------------------------------------------------


def timed_run(variant: str, net: Path, weights: Path, output: Path) -> float:
    """Wall time of one whole `caffe-lstm run` process."""
    command = [sys.executable, __file__, "--child", variant, "run", str(net), "-w", str(weights),
               "-o", str(output)]
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def max_difference(a: Path, b: Path) -> float:
    """max |new − old| / max |old| over every output."""
    with np.load(a) as left, np.load(b) as right:
        return max(float(np.abs(left[k] - right[k]).max() / max(np.abs(left[k]).max(), 1e-30))
                   for k in left.files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--net", type=Path, default=LRCN)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", choices=("old", "new"))
    args, rest = parser.parse_known_args()
    if args.child:
        child(args.child, rest)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        net = args.net
        if args.quick:
            net = folder / "quick.prototxt"
            net.write_text(QUICK_NET)
        weights = folder / "net.caffemodel"
        subprocess.run([sys.executable, "-m", "caffe_lstm", "weights", "init", str(net), "-o",
                        str(weights)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(args.repeats):
            for variant in times:
                times[variant].append(timed_run(variant, net, weights,
                                                folder / f"{variant}.npz"))
        difference = max_difference(folder / "old.npz", folder / "new.npz")
    median = {variant: statistics.median(values) for variant, values in times.items()}
    print(f"net: {net.name}, {args.repeats} run(s) each, whole `caffe-lstm run` processes")
    for variant, values in times.items():
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"{variant}: median {median[variant]:.2f} s ({runs})")
    print(f"max |new − old| / max |old| of the outputs = {difference:.3g}")
    print(f"run time new / old = {median['new'] / median['old']:.3f}")
    # the fastest run of each is the one least disturbed by other jobs on the machine
    print(f"fastest run time new / old = {min(times['new']) / min(times['old']):.3f}")


if __name__ == "__main__":
    main()
