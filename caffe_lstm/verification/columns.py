"""verify's columns: each implementation of the prepared graph, runnable here or not (and why).

Every column runs from the one ``Prepared``: the numpy executor on its rewritten graph, the
TensorRT network emitted for it and walked on the CPU, an engine on a GPU, the ONNX model
exported from it and run by onnxruntime. A column that cannot run here is kept, with its
reason, so the report always says what was not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.compare import FLOAT16_TOLERANCE, FLOAT32_TOLERANCE, Tolerance
from caffe_lstm.errors import CaffeLstmError, UnsupportedLayerError
from caffe_lstm.ir.walk import Progress, labelled
from caffe_lstm.ops import check_facet
from caffe_lstm.options import DEFAULT_OPSET, Runtime
from caffe_lstm.verification.prepared import Prepared
from caffe_lstm.verification.report import Column

#: A column's run: the candidate's outputs by name.
Run = Callable[[], Mapping[str, np.ndarray]]


@dataclass(frozen=True)
class Tolerances:
    """The tolerances asked for; one left None takes the default of the column's precision
    (FLOAT32_TOLERANCE, or FLOAT16_TOLERANCE for a float16 TensorRT network, whose absolute
    term scales with each output's largest magnitude; an atol given is absolute)."""

    atol: float | None = None
    rtol: float | None = None

    def __post_init__(self) -> None:
        # |d| <= atol + rtol·|ref| with a negative or NaN term is never or always met.
        for name, value in (("atol", self.atol), ("rtol", self.rtol)):
            if value is not None and not 0 <= value < float("inf"):
                raise CaffeLstmError(f"the tolerance {name} {value:g} is not a finite number "
                                     f">= 0", f"{name}=", "give 0 or more")

    def of(self, fp16: bool) -> Tolerance:
        default = FLOAT16_TOLERANCE if fp16 else FLOAT32_TOLERANCE
        return Tolerance(default.atol if self.atol is None else self.atol,
                         default.rtol if self.rtol is None else self.rtol,
                         default.of_peak and self.atol is None)


@dataclass(frozen=True)
class Request:
    """Which columns the caller asked for (``Net.verify``'s parameters)."""

    tolerances: Tolerances
    engine: Path | None = None
    runtime: Runtime = Runtime.AUTO
    fp16: bool = False
    tensorrt: bool = True
    onnxruntime: bool | None = None


def candidate_columns(prepared: Prepared, request: Request, progress: Progress | None = None
                      ) -> list[tuple[Column, Run | None]]:
    """(column, run) per implementation, in the report's order; run None: not checked (the
    column says why). ``progress``: told of the numpy column's run."""
    numpy_column = Column("rewritten graph (numpy)", request.tolerances.of(False), "numpy")
    walk, engine = _tensorrt_columns(prepared, request)
    executor = NumpyExecutor(prepared.rewritten, labelled(progress, "rewritten graph"))
    return [(numpy_column, lambda: executor.run(prepared.feeds)),
            walk, _onnx_column(prepared, request), engine]


def _tensorrt_columns(prepared: Prepared, request: Request) -> list[tuple[Column, Run | None]]:
    """The engine on a GPU and the emitted network walked on the CPU."""
    from caffe_lstm.backends.tensorrt.runtime import has_gpu, load_runtime_if_any

    tolerances = request.tolerances.of(request.fp16)
    engine = request.engine
    engine_column = Column(f"engine {engine.name} (GPU)" if engine else "engine (GPU)",
                           request.tolerances.of(request.fp16 or _built_fp16(engine)), "engine")
    walk = Column(f"TensorRT network, {'fp16' if request.fp16 else 'fp32'} (CPU walk)",
                  tolerances, "tensorrt")
    runtime = load_runtime_if_any(request.runtime) if (request.tensorrt or engine) else None
    if runtime is None:
        missing = ("no TensorRT runtime is installed (pip install 'caffe-lstm[rtx]' walks the "
                   "network without a GPU)")
        walk.reason = missing if request.tensorrt or engine else "turned off (tensorrt=False)"
        engine_column.reason = missing if engine else "no engine given (engine=PATH)"
        return [(walk, None), (engine_column, None)]
    engine_run: Run | None = None
    if engine is None:
        engine_column.reason = "no engine given (engine=PATH)"
    elif not has_gpu():
        engine_column.reason = "no GPU here to run the engine"
    else:
        from caffe_lstm.backends.tensorrt.engine import run_engine

        def engine_run() -> Mapping[str, np.ndarray]:
            return run_engine(runtime, engine, prepared.feeds)
    try:
        check_facet(prepared.rewritten, "tensorrt", "some layers have no TensorRT form")
    except UnsupportedLayerError as exc:
        walk.reason = exc.what
        return [(walk, None), (engine_column, engine_run)]
    from caffe_lstm.backends.tensorrt.cpu_walk import evaluate_emitted

    return [(walk, lambda: evaluate_emitted(runtime, prepared.rewritten, prepared.feeds,
                                            request.fp16)),
            (engine_column, engine_run)]


def _built_fp16(engine: Path | None) -> bool:
    """Whether the engine's build facts (its sidecar) say it computes in float16."""
    from caffe_lstm.analysis.build_facts import read_sidecar

    facts = read_sidecar(engine) if engine is not None else None
    return facts is not None and facts.fp16


def _onnx_column(prepared: Prepared, request: Request) -> tuple[Column, Run | None]:
    """The net exported to ONNX for the feeds' shapes, run by onnxruntime; asked for
    (``onnxruntime=True``), a missing onnxruntime or a layer without an ONNX form is an
    error, not a reason."""
    from caffe_lstm.backends.onnx.exporter import build_model, check_exportable
    from caffe_lstm.backends.onnx.runtime import require_onnxruntime, run_model

    column = Column("ONNX model (onnxruntime)", request.tolerances.of(False), "onnx")
    if request.onnxruntime is False:
        column.reason = "turned off (onnxruntime=False)"
        return column, None
    try:
        require_onnxruntime()
        check_exportable(prepared.rewritten)
    except CaffeLstmError as exc:
        if request.onnxruntime:
            raise
        column.reason = exc.what
        return column, None

    def run() -> Mapping[str, np.ndarray]:
        # shaped for the feeds; the weights go from the caffemodel's memory map (no protobuf)
        model, streamed = build_model(prepared.rewritten, DEFAULT_OPSET, {}, stream=True)
        return run_model(model, prepared.feeds, streamed=streamed)

    return column, run
