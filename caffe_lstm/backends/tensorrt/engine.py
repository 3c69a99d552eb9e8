"""Running a serialized engine on a GPU (the only code here that needs one).

NVIDIA Polygraphy's ``TrtRunner`` does the device work (buffers, streams, shapes); it is
imported lazily so that the rest of the backend (building engines, the CPU walk) works
without it. Its tests carry the ``gpu`` marker and skip on machines without a GPU.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from caffe_lstm.backends.tensorrt.runtime import (BackendUnavailableError, LoadedRuntime, has_gpu,
                                                  logger)
from caffe_lstm.errors import CaffeLstmError, ModelLoadError

_INSTALL = "pip install 'caffe-lstm[gpu]'"

#: The module name Polygraphy imports, by ``LoadedRuntime.is_rtx`` (polygraphy/mod/trt_importer.py).
_POLYGRAPHY_TRT = {False: "tensorrt", True: "tensorrt_rtx"}

#: An engine input's shape, None for its dynamic dimensions.
Shape = tuple[int | None, ...]


class EngineRunError(CaffeLstmError):
    """The engine was loaded but did not run (Polygraphy's or TensorRT's reason, in one line)."""


#: One inference: the feeds by input name in, every output as float32 out.
Infer = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


def run_engine(runtime: LoadedRuntime, engine_path: str | Path,
               feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Runs the engine once on ``feeds`` (by input name); returns every output as float32.

    Engine inputs the feeds lack (e.g. the state inputs of ``--state io``) are fed zeros;
    feeds the engine lacks are ignored.

    Raises:
        BackendUnavailableError: no GPU, no Polygraphy or no CUDA runtime library.
        ModelLoadError: an unreadable engine, or one of another runtime or version.
        EngineRunError: the engine failed on the GPU.
    """
    with engine_session(runtime, engine_path) as infer:
        return infer(feeds)


@contextlib.contextmanager
def engine_session(runtime: LoadedRuntime, engine_path: str | Path) -> Iterator[Infer]:
    """The engine loaded on the GPU once, for many inferences (what ``run_engine`` does once,
    and a benchmark many times); raises as ``run_engine``."""
    where = str(engine_path)
    # The GPU is checked first: no install fixes its absence, so a user lacking both learns
    # at once that this machine cannot run engines (and that --backend numpy can), instead of
    # installing Polygraphy for nothing; on a GPU machine the missing install comes next.
    if not has_gpu():
        raise BackendUnavailableError("running an engine needs an NVIDIA GPU; none was found",
                                      where, "run on a GPU machine, or run with numpy (Net.run)")
    _import_polygraphy(runtime, where)
    from polygraphy.logger import G_LOGGER

    # Polygraphy prints its errors (and its progress) itself; above CRITICAL it prints
    # nothing, and the CLI shows its one line instead.
    with G_LOGGER.verbosity(G_LOGGER.CRITICAL + 1):
        _load_cuda(where)
        # TensorRT wants the runtime to outlive its engines: kept here until the run is over.
        trt_runtime = runtime.trt.Runtime(logger(runtime))
        engine = _deserialize(runtime, trt_runtime, engine_path)
        from polygraphy.backend.trt import TrtRunner

        with _engine_errors(runtime, where), TrtRunner(engine) as runner:
            declared = {name: _dims(shape) for name, (_, shape)
                        in runner.get_input_metadata(use_numpy_dtypes=False).items()}
            yield lambda feeds: _infer(runtime, runner, declared, feeds, where)


def _import_polygraphy(runtime: LoadedRuntime, where: str) -> None:
    """Imports Polygraphy's TensorRT backend, set up for ``runtime``'s module."""
    _select_module(runtime)
    try:
        import polygraphy.backend.trt  # noqa: F401
        from polygraphy import config
    except ImportError as exc:
        raise BackendUnavailableError(
            f"running an engine needs Polygraphy, which cannot be imported ({exc})", where,
            f"install it: {_INSTALL}") from None
    module = sys.modules.get(_POLYGRAPHY_TRT[runtime.is_rtx])
    if config.USE_TENSORRT_RTX != runtime.is_rtx or module is not runtime.trt:
        # Only when something else set Polygraphy up earlier in this process: its choice of
        # module is made once, when polygraphy.config is imported.
        raise BackendUnavailableError(
            f"Polygraphy is already set up for another TensorRT module than {runtime.name}'s",
            where, "run engines of one runtime per process")


def _select_module(runtime: LoadedRuntime) -> None:
    """Points Polygraphy at ``runtime.trt`` before it imports a TensorRT module.

    Polygraphy imports ``tensorrt``, or ``tensorrt_rtx`` when POLYGRAPHY_USE_TENSORRT_RTX is
    set (read once, when polygraphy.config is imported). The tensorrt-rtx wheels name their
    module ``tensorrt_rtx_bindings``, so it is registered under the name Polygraphy asks for.
    It must be that very module anyway: the engine is deserialized with it and TrtRunner
    checks ``isinstance(engine, trt.ICudaEngine)``.
    """
    os.environ["POLYGRAPHY_USE_TENSORRT_RTX"] = "1" if runtime.is_rtx else "0"
    sys.modules.setdefault(_POLYGRAPHY_TRT[runtime.is_rtx], runtime.trt)


def _load_cuda(where: str) -> None:
    """Loads the CUDA runtime library Polygraphy copies and synchronizes with (libcudart),
    so that its absence is named here rather than deep inside the run."""
    from polygraphy import cuda
    from polygraphy.exception import PolygraphyException

    try:
        cuda.wrapper()
    except (OSError, PolygraphyException) as exc:
        raise BackendUnavailableError(
            f"the CUDA runtime library (libcudart) cannot be loaded ({exc})", where,
            f"{_INSTALL}, or put the CUDA toolkit's lib64 on LD_LIBRARY_PATH") from None


def _deserialize(runtime: LoadedRuntime, trt_runtime: Any, path: str | Path) -> Any:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ModelLoadError(f"cannot read the engine ({exc.strerror})", str(path),
                             "check the path") from None
    logger(runtime).errors.clear()
    engine = trt_runtime.deserialize_cuda_engine(data)
    if engine is None:
        errors = logger(runtime).errors  # TensorRT's reason, e.g. a version mismatch
        reason = f": {errors[-1]}" if errors else ""
        raise ModelLoadError(f"the engine cannot be deserialized{reason}", str(path),
                             f"build it with this runtime ({runtime.name}) and version")
    return engine


def _infer(runtime: LoadedRuntime, runner: Any, declared: Mapping[str, Shape],
           feeds: Mapping[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    """One inference with an active TrtRunner; the outputs copied to float32 host arrays."""
    with _engine_errors(runtime, where):
        outputs = runner.infer(_complete_feeds(declared, feeds))
        # Copies: the runner reuses its host buffers for the next inference.
        return {name: np.array(array, dtype=np.float32) for name, array in outputs.items()}


@contextlib.contextmanager
def _engine_errors(runtime: LoadedRuntime, where: str) -> Iterator[None]:
    """Polygraphy's failures as one EngineRunError line."""
    from polygraphy.exception import PolygraphyException

    try:
        yield
    except PolygraphyException as exc:
        # TensorRT's own error, when it logged one, says more than Polygraphy's.
        errors = logger(runtime).errors
        reason = errors[-1] if errors else (str(exc).splitlines() or ["no reason given"])[0]
        raise EngineRunError(f"the engine failed to run: {reason}", where,
                             "check that it was built for this GPU and runtime version") from None


def _dims(shape: Any) -> Shape:
    """A Polygraphy shape as a tuple, None for its dynamic dimensions (-1 or None)."""
    return tuple(d if isinstance(d, int) and d >= 0 else None for d in shape)


def _complete_feeds(declared: Mapping[str, Shape],
                   feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The float32 arrays for every engine input (``declared``: name -> shape): the feeds
    the engine takes, and zeros for the inputs they lack."""
    given = {name: np.ascontiguousarray(feeds[name], dtype=np.float32)
             for name in declared if name in feeds}
    return {name: given[name] if name in given
            else np.zeros(_zero_shape(shape, declared, given), np.float32)
            for name, shape in declared.items()}


def _zero_shape(shape: Shape, declared: Mapping[str, Shape],
                given: Mapping[str, np.ndarray]) -> tuple[int, ...]:
    """``shape`` with each dynamic dimension taken from a feed that is dynamic on the same
    axis, else 1: the batch N sits on axis 1 of both Caffe's (T, N, ...) sequence inputs and
    the (1, N, H) states, so a state of a dynamic batch gets the batch of the data."""
    def size(axis: int) -> int:
        for name, array in given.items():
            if axis < len(declared[name]) and declared[name][axis] is None:
                return array.shape[axis]
        return 1

    return tuple(size(axis) if dim is None else dim for axis, dim in enumerate(shape))
