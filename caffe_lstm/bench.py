"""Timing a net's runs the way users compare runtimes (as trtexec and Polygraphy time theirs):
the model is prepared once (the rewritten graph shaped for the inputs, an onnxruntime session,
an engine loaded on the GPU), run ``warmup`` times untimed, then ``iterations`` times, each
run timed alone with ``time.perf_counter``. ``caffe-lstm bench`` prints what ``time_net``
returns; ``caffe_lstm.serving.load`` drives a running Triton server instead.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from caffe_lstm.analysis.build_facts import model_state
from caffe_lstm.api import Inputs, Net
from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.errors import CaffeLstmError
from caffe_lstm.ir.graph import Graph
from caffe_lstm.options import DEFAULT_OPSET, LstmOp, Runtime, State
from caffe_lstm.passes import DEFAULT_PIPELINE, run_passes
from caffe_lstm.passes.onnx_forms import onnx_rewrite

#: What ``time_net`` runs: numpy on the CPU, onnxruntime on the CPU, an engine on a GPU.
BACKENDS = ("numpy", "onnxruntime", "tensorrt")

#: One run of the prepared model on the prepared inputs.
Run = Callable[[], object]


@dataclass(frozen=True)
class Timing:
    """What ``time_net`` measured: the seconds of each timed run (``latencies``), after
    ``warmup`` untimed runs, and the peak resident memory of the process during the timed runs
    (``peak_memory``, bytes; None where the system does not say)."""

    backend: str
    model: str  #: what ran: "rewritten graph", "ONNX model m.onnx", "engine e.engine", ...
    inputs: dict[str, tuple[int, ...]]
    warmup: int
    latencies: tuple[float, ...]
    peak_memory: int | None

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile of the latencies, in milliseconds (linear interpolation)."""
        return float(np.percentile(self.latencies, q)) * 1e3

    @property
    def latency_ms(self) -> dict[str, float]:
        """min, median, p90, p99, max and mean of the latencies, in milliseconds."""
        return {"min": min(self.latencies) * 1e3, "median": self.percentile(50),
                "p90": self.percentile(90), "p99": self.percentile(99),
                "max": max(self.latencies) * 1e3,
                "mean": float(np.mean(self.latencies)) * 1e3}

    @property
    def throughput(self) -> float:
        """Runs per second over the timed runs (one run: one Forward call on all the
        inputs' sequences)."""
        return len(self.latencies) / sum(self.latencies)

    def as_dict(self) -> dict[str, Any]:
        """The JSON-ready summary (``bench --json``)."""
        return {"backend": self.backend, "model": self.model,
                "inputs": {name: list(shape) for name, shape in self.inputs.items()},
                "warmup": self.warmup, "iterations": len(self.latencies),
                "latency_ms": self.latency_ms, "throughput_per_s": self.throughput,
                "peak_memory_bytes": self.peak_memory}


def time_net(net: Net, backend: str = "numpy", *, inputs: Inputs = None, seed: int = 0,
             state: State | str | None = None, model: str | Path | None = None,
             runtime: Runtime | str = "auto", lstm_op: LstmOp | str = "auto",
             iterations: int = 10, warmup: int = 1) -> Timing:
    """Times ``iterations`` runs of ``net`` (after ``warmup`` untimed ones) on the inputs
    ``Net.run`` takes: ``backend`` numpy (the rewritten graph), onnxruntime (the ONNX file
    ``model``, or the net exported in memory for these inputs with ``lstm_op``, as
    ``Net.run_onnxruntime``) or tensorrt (the engine file ``model``, on a GPU: ``runtime`` as
    ``run_engine``). ``state``: as ``Net.run``; None: a model file's own (its build facts,
    which must name this net's files), else zero."""
    if backend not in BACKENDS:
        raise CaffeLstmError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}",
                             "backend=", "numpy and onnxruntime run on the CPU, tensorrt on a GPU")
    if iterations < 1 or warmup < 0:
        raise CaffeLstmError(f"iterations={iterations}, warmup={warmup}: iterations must be at "
                             "least 1 and warmup at least 0", "iterations=",
                             "time one run or more")
    if backend == "tensorrt" and model is None:
        raise CaffeLstmError("the tensorrt backend times a built engine; none was given",
                             "model=", "build one with Net.build_engine (caffe-lstm convert)")
    if backend == "numpy" and model is not None:
        raise CaffeLstmError(f"the numpy backend runs the net itself, not the model {model}",
                             "model=", "time the model with the onnxruntime or tensorrt backend")
    state = model_state(model, state, net.prototxt, net.weights, _onnx_metadata(backend))
    # as Net.run: io asked for refuses hidden states, auto is resolved (it ran as zero here)
    graph, feeds = _fed(net._stated(state), inputs, seed)
    shapes = {name: tuple(np.shape(array)) for name, array in feeds.items()}
    if backend == "tensorrt":
        return _time_engine(Path(model), feeds, Runtime.parse(runtime, "runtime"), shapes,
                            iterations, warmup)
    if backend == "onnxruntime":
        what, run = _onnxruntime_run(graph, feeds, model, lstm_op)
    else:
        executor = NumpyExecutor(run_passes(graph, DEFAULT_PIPELINE))
        what, run = "rewritten graph", lambda: executor.run(feeds)
    return _timed(backend, what, shapes, run, iterations, warmup)


def _onnx_metadata(backend: str) -> Callable | None:
    """How an ONNX model's build facts are read (for onnxruntime: an engine's are beside it)."""
    if backend != "onnxruntime":
        return None
    from caffe_lstm.backends.onnx.exporter import read_metadata

    return read_metadata


def _fed(net: Net, inputs: Inputs, seed: int) -> tuple[Graph, dict[str, np.ndarray]]:
    """A copy of the net's graph shaped for the inputs, and the inputs: those ``Net.run``
    takes, checked alike (``Net._fed_graph``), the weights required first."""
    net._require_weights("time the net")
    return net._fed_graph(inputs, seed)


def _onnxruntime_run(graph: Graph, feeds: dict[str, np.ndarray], model: str | Path | None,
                     lstm_op: LstmOp | str) -> tuple[str, Run]:
    """An onnxruntime session of the model file, or of the graph exported in memory (its
    weights handed over from the caffemodel's memory map, as ``Net.run_onnxruntime``)."""
    from caffe_lstm.backends.onnx.exporter import build_model
    from caffe_lstm.backends.onnx.runtime import require_onnxruntime, session_runner

    require_onnxruntime()
    if model is not None:
        run = session_runner(Path(model), str(model))
        return f"ONNX model {Path(model).name}", lambda: run(feeds)
    exported, streamed = build_model(onnx_rewrite(graph, lstm_op), DEFAULT_OPSET, {},
                                     stream=True)
    run = session_runner(exported, streamed=streamed)
    return "the net exported to ONNX in memory", lambda: run(feeds)


def _time_engine(engine: Path, feeds: dict[str, np.ndarray], runtime: Runtime,
                 shapes: dict[str, tuple[int, ...]], iterations: int, warmup: int) -> Timing:
    """The engine loaded on the GPU once, then timed (raises without a GPU, as run_engine)."""
    from caffe_lstm.backends.tensorrt.engine import engine_session
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    with engine_session(load_runtime(runtime), engine) as infer:
        return _timed("tensorrt", f"engine {engine.name}", shapes, lambda: infer(feeds),
                      iterations, warmup)


def _timed(backend: str, what: str, shapes: dict[str, tuple[int, ...]], run: Run,
           iterations: int, warmup: int) -> Timing:
    for _ in range(warmup):
        run()
    reset_peak_memory()
    latencies = []
    for _ in range(iterations):
        started = time.perf_counter()
        run()
        latencies.append(time.perf_counter() - started)
    return Timing(backend, what, shapes, warmup, tuple(latencies), peak_memory())


# ---- the process's peak resident memory -------------------------------------------------------


def reset_peak_memory() -> bool:
    """Resets the kernel's peak resident set of this process to its current one (Linux:
    ``/proc/self/clear_refs``), so that ``peak_memory`` covers what follows; whether it could."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def peak_memory() -> int | None:
    """The peak resident set of this process in bytes: VmHWM (Linux), else ``getrusage``'s
    ru_maxrss (kilobytes on Linux, bytes on macOS); None when neither says."""
    try:
        with open(f"/proc/{os.getpid()}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource  # Unix only

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak * (1 if sys.platform == "darwin" else 1024) or None

