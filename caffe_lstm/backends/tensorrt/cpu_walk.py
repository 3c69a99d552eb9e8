"""The emitted TensorRT network checked without a GPU: ``verify``'s TensorRT column."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from caffe_lstm.backends.tensorrt.build import BuildOptions, emit
from caffe_lstm.backends.tensorrt.network_eval import NotModeledError, Observer, evaluate_network
from caffe_lstm.backends.tensorrt.runtime import LoadedRuntime
from caffe_lstm.errors import UnsupportedLayerError
from caffe_lstm.ir.graph import Graph


class NotWalkableError(UnsupportedLayerError):
    """The emitted network has a layer the CPU walk does not model: its column of ``verify``
    cannot be computed here (the network itself may be fine)."""


def evaluate_emitted(runtime: LoadedRuntime, graph: Graph, feeds: Mapping[str, np.ndarray],
                     fp16: bool, observe: Observer | None = None) -> dict[str, np.ndarray]:
    """The network emitted for ``graph`` evaluated with numpy, walked through the TensorRT
    API; the outputs as float32. ``observe`` sees every tensor (``network_eval.Observer``).

    Raises:
        NotWalkableError: a layer the numpy walk does not model (a plugin's tensorrt facet
            may build any layer TensorRT has); the network itself may be fine.
    """
    _, network, _ = emit(runtime, graph, BuildOptions(fp16=fp16))
    try:
        results = evaluate_network(runtime.trt, network, dict(feeds), observe)
    except NotModeledError as exc:
        where = "; ".join(getattr(exc, "__notes__", []))  # the layer, when one was running
        raise NotWalkableError(
            f"the CPU walk of the TensorRT network does not model {exc}", where,
            "build the engine and run it on a GPU to check it") from exc
    return {name: array.astype(np.float32) for name, array in results.items()}
