"""The TensorRT emitter's walker, which is what an op's ``tensorrt`` facet gets as ``ctx``: the
network, constants kept alive, shape helpers, names, and ``run_subgraph`` for a Loop's body.

Op modules never import tensorrt; they reach it through ``ctx.trt``. Everything here works
with dynamic dims (-1), so the same facets serve static and dynamic shapes.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import numpy as np

from caffe_lstm.ir.graph import Graph, Node, Shape, Value
from caffe_lstm.ir.walk import GraphWalker
from caffe_lstm.ops import get_op, refused_result
from caffe_lstm.ops.plugins import built_fault, checked_results


class EmitContext(GraphWalker[Any]):
    """The state of one network emission, and the walk calling each node's ``tensorrt`` facet.

    Args:
        trt: the tensorrt (or tensorrt_rtx_bindings) module.
        network: the INetworkDefinition being filled (strongly typed).
        fp16: compute in float16 (weights and activations), float32 otherwise.
        errors: the list TensorRT's logger appends its errors to (the reason of a refused
            layer); None: none are kept.
        largest: the shapes of the graph's values at the profile's MAX sizes, by id of the
            value (``largest_shapes``); empty without a profile.
    """

    facet = "tensorrt"

    def __init__(self, trt: Any, network: Any, fp16: bool = False,
                 errors: list[str] | None = None, largest: dict[int, Shape] | None = None
                 ) -> None:
        self.trt, self.network, self.fp16 = trt, network, fp16
        self._largest = largest or {}
        self.errors = errors if errors is not None else []
        self.float_np = np.float16 if fp16 else np.float32
        self.float_trt = trt.DataType.HALF if fp16 else trt.DataType.FLOAT
        # trt.Weights does not own memory: every array handed over lives until the build returns.
        self.keep_alive: list[np.ndarray] = []
        self.node: Node | None = None
        # TensorRT refuses a layer name already in use: repeats get _1, _2...
        self._names: set[str] = set()
        #: fp16: the name of each HALF tensor cast from a FLOAT network input -> that input.
        self.half_inputs: dict[str, Any] = {}

    def largest_shape(self, value: Value) -> Shape:
        """The shape ``value`` takes at the profile's MAX sizes; its shape without a profile."""
        return self._largest.get(id(value), value.shape)

    def run_subgraph(self, graph: Graph, tensors: Sequence[Any]) -> list[Any]:
        """Emits ``graph`` (the net, or a loop body) on ``tensors`` for its inputs; returns its
        output tensors."""
        return self.walk(graph, tensors)

    def visit(self, node: Node, tensors: list[Any]) -> tuple[Any, ...]:
        """The node's layers, from its ``tensorrt`` facet on its bottoms then its blob arrays;
        each top tensor takes the name of its value."""
        arrays = [value.data for value in node.weights]
        outer, self.node = self.node, node
        try:
            results = get_op(node.op).tensorrt(self, node, *tensors, *arrays)
        except Exception as exc:
            if (fault := built_fault(node, "tensorrt", exc)) is not None:
                raise fault from exc  # bad attrs a plugin gave b.add
            exc.add_note(f"while emitting {node.name} ({node.op})")
            raise
        finally:
            self.node = outer
        results = checked_results(node, "tensorrt", results,
                                  lambda item: isinstance(item, self.trt.ITensor), "ITensor")
        self._check_shaped(node, results)
        taken = {tensor.name for tensor in tensors}
        for value, tensor in zip(node.outputs, results):
            if tensor.name not in taken:  # an identity op hands its input through: keep that name
                tensor.name = value.name
        return results

    def _check_shaped(self, node: Node, results: Sequence[Any]) -> None:
        """TensorRT hands back a layer even for operands it refuses (a wrong rank, an einsum
        equation that does not fit) and only logs why; the output then has no shape. Stop at
        the node that built it, with TensorRT's reason, not at the next layer that reads it."""
        for value, tensor in zip(node.outputs, results):
            try:
                _ = tensor.shape
            except RuntimeError:
                reason = self.errors[-1] if self.errors else "TensorRT logged no reason"
                raise refused_result(node, "tensorrt", f"a layer TensorRT refuses (output "
                                     f"'{value.name}')", reason) from None

    # ---- naming ----------------------------------------------------------------------------

    def layer_name(self, suffix: str = "") -> str:
        """``lstm1/gate_input`` for node ``__lstm1/gate_input``: TRT names trace back to Caffe."""
        base = self.node.name[2:] if self.node.name.startswith("__") else self.node.name
        name = wanted = f"{base}/{suffix}" if suffix else base
        repeat = 0
        while name in self._names:
            repeat += 1
            name = f"{wanted}_{repeat}"
        self._names.add(name)
        return name

    def named(self, layer: Any, suffix: str = "") -> Any:
        """Names ``layer`` after the current node (plus ``suffix``) and returns it."""
        layer.name = self.layer_name(suffix)
        return layer

    def out(self, layer: Any, suffix: str = "") -> Any:
        """Names ``layer`` and returns its first output."""
        return self.named(layer, suffix).get_output(0)

    def float32_source(self, tensor: Any) -> Any:
        """The FLOAT network input a HALF ``tensor`` was cast from, else ``tensor``: for values
        fp16 cannot hold exactly, such as word ids above 2048."""
        return self.half_inputs.get(tensor.name, tensor)

    # ---- constants -------------------------------------------------------------------------

    def constant(self, array: np.ndarray, suffix: str = "const") -> Any:
        """A constant tensor; float arrays take the network's float type."""
        data = np.asarray(array)
        data = np.array(data, dtype=self.float_np if data.dtype.kind == "f" else data.dtype,
                        order="C", copy=True)  # not ascontiguousarray: it turns 0-D into 1-D
        self.keep_alive.append(data)
        layer = self.network.add_constant(data.shape, self.trt.Weights(data))
        return self.out(layer, suffix)

    def ints(self, values: Sequence[int] | int, suffix: str = "ints") -> Any:
        """An INT64 constant: a 0-D scalar for an int, a 1-D vector for a sequence."""
        return self.constant(np.array(values, dtype=np.int64), suffix)

    # ---- shapes ----------------------------------------------------------------------------

    def shape(self, tensor: Any) -> Any:
        """The runtime shape of ``tensor`` as a 1-D INT64 tensor."""
        return self.out(self.network.add_shape(tensor), "shape")

    def dim(self, tensor: Any, axis: int) -> Any:
        """Dim ``axis`` of ``tensor`` at run time, as a 0-D INT64 tensor."""
        index = self.constant(np.array(axis, dtype=np.int32), "axis")
        return self.out(self.network.add_gather(self.shape(tensor), index, 0), f"dim{axis}")

    def dims(self, tensor: Any, start: int, stop: int | None = None) -> Any:
        """Dims [start, stop) of ``tensor`` at run time, as a 1-D INT64 tensor."""
        stop = len(tensor.shape) if stop is None else stop
        index = self.constant(np.arange(start, stop, dtype=np.int32), "axes")
        return self.out(self.network.add_gather(self.shape(tensor), index, 0), "dims")

    def concat_shape(self, parts: Sequence[Any]) -> Any:
        """A 1-D INT64 shape from pieces: ints and 1-D INT64 tensors."""
        tensors = [self.ints([p]) if isinstance(p, (int, np.integer)) else p for p in parts]
        if len(tensors) == 1:
            return tensors[0]
        layer = self.network.add_concatenation(tensors)
        layer.axis = 0
        return self.out(layer, "shape")

    def reshape(self, tensor: Any, dims: Sequence[int] | Any, suffix: str = "reshape") -> Any:
        """IShuffleLayer reshape: static dims (0 copies the input dim, -1 is inferred) or a
        1-D INT64 shape tensor."""
        layer = self.network.add_shuffle(tensor)
        if isinstance(dims, (list, tuple)):
            layer.reshape_dims = tuple(int(d) for d in dims)
        else:
            layer.set_input(1, dims)
        return self.out(layer, suffix)

    def transpose(self, tensor: Any, order: Sequence[int], suffix: str = "transpose") -> Any:
        layer = self.network.add_shuffle(tensor)
        layer.first_transpose = tuple(order)
        return self.out(layer, suffix)

    def unsqueeze(self, tensor: Any, axis: int, suffix: str = "unsqueeze") -> Any:
        """Inserts a size-1 axis at ``axis``."""
        layer = self.network.add_unsqueeze(tensor, self.ints([axis], "axes"))
        return self.out(layer, suffix)

    def squeeze(self, tensor: Any, axis: int, suffix: str = "squeeze") -> Any:
        """Removes the size-1 axis ``axis``."""
        layer = self.network.add_squeeze(tensor, self.ints([axis], "axes"))
        return self.out(layer, suffix)

    def zeros(self, shape: Any, suffix: str = "zeros") -> Any:
        """Zeros of a run-time shape (1-D INT64 tensor), in the network's float type.

        IFillLayer cannot make HALF directly, so fp16 fills float32 and casts.
        """
        trt = self.trt
        layer = self.network.add_fill((0,), trt.FillOperation.LINSPACE, trt.DataType.FLOAT)
        layer.set_input(0, shape)
        layer.set_input(1, self._scalar_f32(0.0))
        layer.set_input(2, self._delta_f32(shape))
        zeros = self.out(layer, suffix)
        return self.cast(zeros, self.float_trt) if self.fp16 else zeros

    def cast(self, tensor: Any, dtype: Any, suffix: str = "cast") -> Any:
        return self.out(self.network.add_cast(tensor, dtype), suffix)

    def _scalar_f32(self, value: float) -> Any:
        data = np.array(value, dtype=np.float32)
        self.keep_alive.append(data)
        return self.out(self.network.add_constant((), self.trt.Weights(data)), "alpha")

    def _delta_f32(self, shape: Any) -> Any:
        """LINSPACE's delta: one zero per output axis (a rank-sized FLOAT vector)."""
        rank = shape.shape[0]
        data = np.zeros(rank, dtype=np.float32)
        self.keep_alive.append(data)
        return self.out(self.network.add_constant((rank,), self.trt.Weights(data)), "beta")
