"""What each walker offers the op facets it calls: the walker is the context (``ctx``), first
argument of every facet called during a walk (docs/ops.md).

These Protocols are the public surface of the walkers for op authors: a facet may call what is
listed here and nothing else. ``tests/test_ops_contract.py`` checks that every walker has each
member of its Protocol with the same parameters. Tensors of TensorRT and ONNX are ``Any``
because ``ops/`` never imports either library.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from caffe_lstm.ir.graph import Graph, Node, Shape, Value


class ParamView(Protocol):
    """A layer's param message as ``parse`` reads it (``frontend/params.py``): ``p.axis`` is the
    field's value, or the schema default when it was not written; a nested message is a
    ParamView, a repeated field a list, an enum value its name (``"SUM"``)."""

    def has(self, name: str) -> bool:
        """Whether the field was written (a repeated field: whether it has any entry)."""
        ...

    def __getattr__(self, name: str) -> Any:
        ...


class ImportContext(Protocol):
    """The importer, handed to ``parse`` (``frontend/importer.py``)."""

    def import_subgraph(self, inputs: Sequence[str], outputs: Sequence[str]) -> Graph:
        """The layers of the op's param message (``loop_param.layer``) as a graph whose
        ``inputs`` are values the op feeds, in order, and whose ``outputs`` are blobs its
        layers produce."""
        ...

    def layer_param(self, field: str) -> ParamView:
        """Another param message of the layer being parsed, one in caffe-lstm's schema (a
        fork's layer reading ``convolution_param`` beside its own message), viewed as ``p``."""
        ...


class ShapeContext(Protocol):
    """Shape inference, handed to ``infer`` and ``blobs`` (``analysis/shapes.py``)."""

    def run_subgraph(self, graph: Graph, input_shapes: list[Shape]) -> list[Shape]:
        """Shapes ``graph`` from its inputs' shapes; returns its outputs' shapes."""
        ...


class NumpyContext(Protocol):
    """The numpy executor, handed to ``numpy`` (``backends/numpy_exec.py``)."""

    def run_subgraph(self, graph: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Runs ``graph`` (same weights, own inputs) on ``inputs``; returns its outputs."""
        ...


class TensorRTContext(Protocol):
    """The TensorRT emitter, handed to ``tensorrt`` (``backends/tensorrt/context.py``).

    Attributes: ``trt`` (the tensorrt module), ``network`` (the INetworkDefinition),
    ``fp16``, ``float_np`` and ``float_trt`` (the network's float type), ``keep_alive`` (arrays
    handed to TensorRT as weights must be appended here: trt.Weights does not own memory).
    """

    trt: Any
    network: Any
    fp16: bool
    float_np: Any
    float_trt: Any
    keep_alive: list[np.ndarray]

    def run_subgraph(self, graph: Graph, tensors: Sequence[Any]) -> list[Any]:
        """Emits ``graph`` on ``tensors`` for its inputs; returns its outputs."""
        ...

    def layer_name(self, suffix: str = "") -> str:
        """The current node's name (plus ``suffix``), unique in the network."""
        ...

    def named(self, layer: Any, suffix: str = "") -> Any:
        """Names ``layer`` after the current node and returns it."""
        ...

    def out(self, layer: Any, suffix: str = "") -> Any:
        """Names ``layer`` and returns its first output."""
        ...

    def float32_source(self, tensor: Any) -> Any:
        """The FLOAT network input a HALF ``tensor`` was cast from, else ``tensor``."""
        ...

    def largest_shape(self, value: Value) -> Shape:
        """The shape the graph's ``value`` takes at the profile's MAX sizes (a limit of
        TensorRT's is checked there); its shape when no input is dynamic."""
        ...

    def constant(self, array: np.ndarray, suffix: str = "const") -> Any:
        """A constant tensor; float arrays take the network's float type."""
        ...

    def ints(self, values: Sequence[int] | int, suffix: str = "ints") -> Any:
        """An INT64 constant: 0-D for an int, 1-D for a sequence."""
        ...

    def shape(self, tensor: Any) -> Any:
        """The run-time shape of ``tensor`` (1-D INT64)."""
        ...

    def dim(self, tensor: Any, axis: int) -> Any:
        """Dim ``axis`` of ``tensor`` at run time (0-D INT64)."""
        ...

    def dims(self, tensor: Any, start: int, stop: int | None = None) -> Any:
        """Dims [start, stop) of ``tensor`` at run time (1-D INT64)."""
        ...

    def concat_shape(self, parts: Sequence[Any]) -> Any:
        """A 1-D INT64 shape from ints and 1-D INT64 tensors."""
        ...

    def reshape(self, tensor: Any, dims: Sequence[int] | Any, suffix: str = "reshape") -> Any:
        """Reshape to static dims (0 copies, -1 is inferred) or a run-time shape tensor."""
        ...

    def transpose(self, tensor: Any, order: Sequence[int], suffix: str = "transpose") -> Any:
        """Output axis i is input axis ``order[i]``."""
        ...

    def unsqueeze(self, tensor: Any, axis: int, suffix: str = "unsqueeze") -> Any:
        """Inserts a size-1 axis at ``axis``."""
        ...

    def squeeze(self, tensor: Any, axis: int, suffix: str = "squeeze") -> Any:
        """Removes the size-1 axis ``axis``."""
        ...

    def zeros(self, shape: Any, suffix: str = "zeros") -> Any:
        """Zeros of a run-time shape, in the network's float type."""
        ...

    def cast(self, tensor: Any, dtype: Any, suffix: str = "cast") -> Any:
        """``tensor`` cast to the TensorRT ``dtype``."""
        ...


class OnnxContext(Protocol):
    """The ONNX exporter, handed to ``onnx`` (``backends/onnx/context.py``).

    Attributes: ``onnx`` (the onnx module), ``opset`` (the default-domain opset),
    ``keep_alive`` (arrays referenced by initializers until the model is written),
    ``int32_indices`` (TensorRT's ONNX parser reads the model: int64 indices become INT32).
    """

    onnx: Any
    opset: int
    keep_alive: list[np.ndarray]
    int32_indices: bool

    def run_subgraph(self, graph: Graph, inputs: Sequence[Any], outputs: Sequence[Any],
                     name: str, input_order: Sequence[int] | None = None) -> Any:
        """Exports ``graph`` as a GraphProto (a Scan's body) and returns it."""
        ...

    def largest_shape(self, value: Value) -> Shape:
        """The shape the graph's ``value`` takes at the profile's MAX sizes (a limit of
        TensorRT's parser is checked there); its shape when no input is dynamic."""
        ...

    def unique(self, wanted: str) -> str:
        """``wanted``, or ``wanted_1``, ``wanted_2``... when taken."""
        ...

    def reserve(self, name: str) -> None:
        """Marks ``name`` as taken."""
        ...

    def base_name(self) -> str:
        """The current node's name as the tensors' prefix."""
        ...

    def add(self, op_type: str, inputs: Sequence[str], outputs: int | Sequence[str] = 1,
            suffix: str = "", **attrs: Any) -> list[str]:
        """Appends one node; returns its output tensor names."""
        ...

    def constant(self, array: np.ndarray, suffix: str = "const") -> str:
        """An initializer holding ``array``; returns its name."""
        ...

    def ints(self, values: Sequence[int] | int, suffix: str = "ints") -> str:
        """An int64 initializer; a bare int gives a scalar."""
        ...

    def tensor_header(self, name: str, array: np.ndarray) -> Any:
        """A TensorProto with the dtype and dims of ``array`` and no data."""
        ...

    def initializer(self, name: str, array: np.ndarray) -> Any:
        """A TensorProto whose raw bytes come from ``array``."""
        ...

    def static_dim(self, value: Value, axis: int) -> int | None:
        """Dim ``axis`` of ``value`` when the exported model fixes it, else None."""
        ...

    def tensor_info(self, name: str, value: Value) -> Any:
        """A float32 ValueInfoProto with the dims of ``value``."""
        ...

    def shape_of(self, x: str) -> str:
        """The run-time shape of tensor ``x``."""
        ...

    def dim_parts(self, x: str, value: Value, axes: Sequence[int]) -> list[int | str]:
        """Dims ``axes`` of ``x``: an int where fixed, else a 1-D int64 tensor name."""
        ...

    def shape_tensor(self, parts: Sequence[int | str], suffix: str = "shape") -> str:
        """A 1-D int64 shape from ints and 1-D int64 tensors."""
        ...

    def scalar(self, value: float, suffix: str = "value") -> str:
        """A float32 scalar."""
        ...

    def unsqueeze(self, x: str, axes: Sequence[int], suffix: str = "unsqueeze") -> str:
        """``x`` with size-1 axes inserted at ``axes``."""
        ...

    def squeeze(self, x: str, axes: Sequence[int], suffix: str = "squeeze") -> str:
        """``x`` without its size-1 axes ``axes``."""
        ...

    def reduce(self, op_type: str, x: str, axes: Sequence[int], suffix: str = "") -> str:
        """``op_type`` (ReduceSum, ReduceMean, ...) over ``axes``, the axes kept."""
        ...

    def zeros(self, shape: str, suffix: str = "zeros") -> str:
        """float32 zeros of the run-time shape ``shape``."""
        ...

    def require_opset(self, opset: int, what: str) -> None:
        """Refuses an export whose opset is below ``opset``, which ``what`` needs."""
        ...

    def rename(self, old: str, new: str) -> None:
        """Gives the tensor ``old`` the name ``new``."""
        ...


class CaffeContext(Protocol):
    """The Caffe writer, handed to ``caffe`` (``frontend/caffe_writer.py``)."""

    def run_subgraph(self, graph: Graph) -> list[Any]:
        """The layers of ``graph``, for a repeated LayerParameter field."""
        ...


class DotContext(Protocol):
    """The DOT writer, handed to ``dot`` (``backends/dot.py``)."""

    def draw_record(self, node: Node) -> None:
        """One record ``{name | op | output shapes}`` with an edge from every bottom."""
        ...

    def draw_cluster(self, node: Node, label: str, body: Graph, *, input_roles: list[str],
                     entries: list[tuple[Value, Value]], output_roles: list[str],
                     exits: list[Value],
                     back_edges: list[tuple[Value, Value, str]]) -> None:
        """A cluster holding ``body`` with its entries, exits and back edges."""
        ...


class ExpandContext(Protocol):
    """The rewrite's NodeBuilder, handed to ``expand`` (``ops/builder.py``): ``add`` appends a
    node; its other methods (inner_product, eltwise, slice, ...) are shorthands for ``add``;
    ``step`` and ``loop`` write a recurrence as one time step (docs/ops.md)."""

    def step(self) -> Any:
        """A new time step of the layer's recurrence (a ``Step``: a builder on the body)."""
        ...

    def loop(self, step: Any, sequences: Sequence[Value],
             finals: Sequence[Value] | None = None) -> list[Value]:
        """Appends the Loop running ``step`` over time; returns the final states."""
        ...

    def add(self, op: str, name: str, inputs: Sequence[Value],
            attrs: dict[str, Any] | None = None, weights: Sequence[Value] = (),
            tops: Sequence[str] | None = None,
            outputs: Sequence[Value] | None = None) -> list[Value]:
        """Appends one node of type ``op``; returns its output values."""
        ...
