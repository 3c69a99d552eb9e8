"""Shared pieces of the network evaluator: its errors, dtypes, the evaluator registry and the
helpers both evaluator modules use."""

from __future__ import annotations

from typing import Any
from collections.abc import Callable, MutableMapping

import numpy as np


class NetworkEvalError(Exception):
    """The network cannot be evaluated as built: a bug in the emitter or in this evaluator."""


class NotModeledError(NotImplementedError):
    """A layer type, mode or dtype this evaluator has no numpy form for. The network may be
    fine (TensorRT builds and runs it); only its CPU check cannot be made. A plugin's tensorrt
    facet can reach it with any layer TensorRT offers."""


#: TensorRT DataType name -> numpy dtype (the types a strongly typed LSTM network uses).
DTYPES = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "UINT8": np.uint8,
           "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_}

Env = MutableMapping[str, np.ndarray]
#: evaluate(layer, inputs, the loop run (network_eval._LoopRun) or None) -> outputs; absent
#: optional inputs are None.
Evaluate = Callable[[Any, list, "Any"], list]

#: LayerType name -> (name of the layer's own interface class, evaluate function).
EVALUATORS: dict[str, tuple[str, Evaluate]] = {}


def numpy_dtype(trt_dtype: Any) -> np.dtype:
    """The numpy dtype of a TensorRT ``DataType``."""
    if trt_dtype.name not in DTYPES:
        raise NotModeledError(f"the TensorRT dtype {trt_dtype.name}")
    return np.dtype(DTYPES[trt_dtype.name])



def evaluates(kind: str, interface: str) -> Callable[[Evaluate], Evaluate]:
    """Registers the evaluator of one LayerType (by name) read through `interface`."""
    def register(evaluate: Evaluate) -> Evaluate:
        EVALUATORS[kind] = (interface, evaluate)
        return evaluate
    return register


def wide(x: np.ndarray) -> np.ndarray:
    """float16 is computed in float32 (then rounded back), like TensorRT's fp32 accumulation."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def axes_of(bitmask: int, rank: int) -> tuple[int, ...]:
    """The axes set in a TensorRT axes bitmask (bit k: axis k)."""
    return tuple(axis for axis in range(rank) if bitmask >> axis & 1)
