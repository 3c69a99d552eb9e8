"""Building a serialized engine from a rewritten graph: network, profile, progress, plan."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Mapping

from caffe_lstm.analysis.profiles import shape_at
from caffe_lstm.backends.tensorrt.context import EmitContext
from caffe_lstm.backends.tensorrt.emitter import emit_network
from caffe_lstm.backends.tensorrt.runtime import LoadedRuntime, logger
from caffe_lstm.errors import CaffeLstmError, ShapeError
from caffe_lstm.ir.graph import Graph, Shape


class EngineBuildError(CaffeLstmError):
    """TensorRT refused to build the engine."""


@dataclass
class BuildOptions:
    """How to build: precision, dynamic input ranges, TensorRT log level, progress callback."""

    fp16: bool = False
    #: input name -> (min, opt, max) shapes; those inputs become dynamic.
    shapes: Mapping[str, tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    verbosity: int = 0
    #: called as progress(phase, step, steps) from TensorRT's IProgressMonitor (any thread).
    progress: Callable[[str, int, int], None] | None = None


def create_network(runtime: LoadedRuntime, verbosity: int = 0) -> tuple[Any, Any]:
    """A builder and an empty strongly typed network (explicit fp16 casts, as TRT 11 and RTX
    require)."""
    trt = runtime.trt
    builder = trt.Builder(logger(runtime, verbosity))
    flags = 0 if runtime.is_rtx else 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return builder, builder.create_network(flags)


def emit(runtime: LoadedRuntime, graph: Graph, options: BuildOptions
         ) -> tuple[Any, Any, EmitContext]:
    """The builder, the filled network and the emission context (which keeps weights alive)."""
    builder, network = create_network(runtime, options.verbosity)
    errors = logger(runtime, options.verbosity).errors
    errors.clear()
    ctx = EmitContext(runtime.trt, network, options.fp16, errors,
                      largest_shapes(graph, options.shapes))
    emit_network(ctx, graph, _dynamic_dims(options.shapes))
    return builder, network, ctx


def largest_shapes(graph: Graph, shapes: Mapping[str, tuple[tuple[int, ...], ...]]
                   ) -> dict[int, Shape]:
    """Every value's shape at the MAX sizes of the profile ``shapes`` (input name -> (min,
    opt, max)), by id of the value: the network's dims are -1 where the profile varies, and a
    limit of TensorRT's (INT32 indices) holds only if it holds there. The graph is left shaped
    at OPT. Empty without a profile, and for one that a layer refuses at MAX: the API's
    ``checked_profiles`` refuses such a profile before any build, and the facets then see the
    network's own dims (the refusal of a caller that skipped it comes from them)."""
    if not shapes:
        return {}
    try:
        shape_at(graph, shapes, "MAX")
        return {id(value): value.shape for node in graph.all_nodes()
                for value in (*node.inputs, *node.outputs)}
    except ShapeError:
        return {}
    finally:
        shape_at(graph, shapes, "OPT")


def build_engine(runtime: LoadedRuntime, graph: Graph, options: BuildOptions) -> bytes:
    """The serialized engine (plan) of ``graph``.

    Raises:
        EngineBuildError: TensorRT's own errors, in one line.
    """
    builder, network, ctx = emit(runtime, graph, options)
    plan = serialize(runtime, builder, network, options)
    del ctx  # the weights may go once the build has returned
    return plan


def serialize(runtime: LoadedRuntime, builder: Any, network: Any, options: BuildOptions) -> bytes:
    """Builds a filled ``network`` into a plan: the optimization profile of ``options.shapes``,
    progress reports, and TensorRT's last error as the one-line message of a failure.

    Raises:
        EngineBuildError: TensorRT's own errors, in one line.
    """
    config = builder.create_builder_config()
    if options.shapes:
        config.add_optimization_profile(_profile(builder, options.shapes))
    if options.progress is not None:
        config.progress_monitor = _monitor(runtime.trt, options.progress)
    log = logger(runtime, options.verbosity)
    log.errors.clear()
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        reason = log.errors[-1] if log.errors else "no reason given (rerun with verbosity=1)"
        raise EngineBuildError(f"TensorRT could not build the engine: {reason}",
                               runtime.name, "rerun with verbosity=2 for TensorRT's log")
    return bytes(plan)


def _dynamic_dims(shapes: Mapping[str, tuple[tuple[int, ...], ...]]) -> dict[str, tuple]:
    """-1 where min and max differ."""
    return {name: tuple(lo if lo == hi else -1 for lo, hi in zip(low, high))
            for name, (low, _, high) in shapes.items()}


def _profile(builder: Any, shapes: Mapping[str, tuple[tuple[int, ...], ...]]) -> Any:
    profile = builder.create_optimization_profile()
    for name, (low, opt, high) in shapes.items():
        profile.set_shape(name, low, opt, high)
    return profile


def _monitor(trt: Any, progress: Callable[[str, int, int], None]) -> Any:
    """An IProgressMonitor forwarding to ``progress``; TensorRT may call it from several
    threads, hence the lock."""

    class _Monitor(trt.IProgressMonitor):
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)  # the pybind trampoline needs it
            self._lock = threading.Lock()
            self._steps: dict[str, int] = {}

        def phase_start(self, phase_name, parent_phase, num_steps) -> None:
            with self._lock:
                self._steps[phase_name] = num_steps
                progress(phase_name, 0, num_steps)

        def step_complete(self, phase_name, step) -> bool:
            with self._lock:
                progress(phase_name, step + 1, self._steps.get(phase_name, 0))
            return True

        def phase_finish(self, phase_name) -> None:
            with self._lock:
                self._steps.pop(phase_name, None)

    return _Monitor()
