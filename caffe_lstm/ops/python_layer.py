"""Caffe's ``Python`` layer, run with numpy through a shim of pycaffe's ``caffe.Layer``.

A Python layer names a class: ``python_param { module: "proposal" layer: "ProposalLayer"
param_str: "..." }``. Caffe imports ``module`` from PYTHONPATH, instantiates ``layer``, sets
``param_str``, calls ``setup(bottom, top)`` once, then ``reshape(bottom, top)`` and
``forward(bottom, top)`` on every Forward (python_layer.hpp). Here the same calls are made on
blobs with pycaffe's surface (``.data``, ``.reshape(*shape)``, ``.shape``, ``.count``,
``.num``/``.channels``/``.height``/``.width``), with ``import caffe`` answered by the shim
module below while the user's module is imported.

User code is imported only when asked for: the directory holding the module is given to the
API as ``python_path`` (bound to the layer's node by the frontend, attribute ``python_path``);
without it the layer is refused when its shapes are needed, naming the way. Shapes come from
``setup`` + ``reshape`` on zero-filled bottoms of the loaded shapes.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from caffe_lstm.errors import CaffeLstmError, UnsupportedLayerError
from caffe_lstm.ir.graph import Graph, Node, Shape
from caffe_lstm.ops.plugins import failure
from caffe_lstm.ops.registry import Op, register_op

#: The node attribute holding the directory the user's module is imported from.
PATH_ATTR = "python_path"
#: pycaffe's phase constants (caffe.TRAIN, caffe.TEST); a converted net runs the TEST phase.
TRAIN, TEST = 0, 1
_WAYS = ("write the layer type as a plugin with that facet (plugins=[...], docs/plugins.md), "
         "or cut the Python layer off with outputs=[NAME, ...]")


class Blob:
    """pycaffe's Blob as a Python layer sees it: ``data`` (float32 ndarray, writable in place),
    ``diff``, ``reshape(*shape)``, ``shape`` and the legacy 4-D accessors."""

    def __init__(self, data: np.ndarray | None = None) -> None:
        self.data = np.zeros((0,), np.float32) if data is None else data
        self.diff = np.zeros_like(self.data)

    def reshape(self, *shape: int) -> None:
        """Caffe's Blob::Reshape: the new shape; contents are undefined (zeros here) unless
        the shape is the same."""
        dims = tuple(int(d) for d in shape)
        if any(d < 0 for d in dims):
            raise ValueError(f"negative dim in reshape{dims}")
        if dims != self.data.shape:
            self.data = np.zeros(dims, np.float32)
            self.diff = np.zeros(dims, np.float32)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def count(self) -> int:
        return int(self.data.size)

    def _legacy(self, axis: int) -> int:  # Blob::LegacyShape: 1 past the last axis
        return int(self.data.shape[axis]) if axis < self.data.ndim else 1

    num = property(lambda self: self._legacy(0))
    channels = property(lambda self: self._legacy(1))
    height = property(lambda self: self._legacy(2))
    width = property(lambda self: self._legacy(3))


class Layer:
    """The base of a user's Python layer (pycaffe's ``caffe.Layer``): ``param_str``, ``phase``
    and ``blobs`` (always empty here); every method does nothing unless overridden."""

    def __init__(self, param: Any = None) -> None:
        self.param_str = ""
        self.phase = TEST
        self.blobs: list[Blob] = []

    def setup(self, bottom: list[Blob], top: list[Blob]) -> None:
        """Called once, before the first reshape."""

    def reshape(self, bottom: list[Blob], top: list[Blob]) -> None:
        """Sets the tops' shapes from the bottoms'."""

    def forward(self, bottom: list[Blob], top: list[Blob]) -> None:
        """Writes the tops' data."""

    def backward(self, top: list[Blob], propagate_down: list[bool], bottom: list[Blob]) -> None:
        """Never called: conversion is inference."""


def shim_module() -> ModuleType:
    """The module ``import caffe`` gives the user's code while it is imported."""
    module = ModuleType("caffe", "caffe-lstm's shim of pycaffe for Python layers")
    module.Layer, module.Blob, module.TRAIN, module.TEST = Layer, Blob, TRAIN, TEST
    return module


@register_op
class Python(Op):
    """Caffe's Python layer: tops = the user class's forward(bottom, top) after setup and
    reshape, with numpy (python_param.module, .layer, .param_str)."""

    type = "Python"
    param = "python_param"
    n_bottoms = (0, None)
    n_tops = (1, None)
    limits = ("numpy only, imported from python_path; forward only: the layer's own blobs "
              "(self.blobs) stay empty and top shapes come from reshape on the loaded shapes")
    tensorrt_missing_reason = f"a Python layer runs Python code, which TensorRT cannot: {_WAYS}"
    onnx_missing_reason = f"a Python layer runs Python code, which ONNX cannot: {_WAYS}"

    @staticmethod
    def parse(ctx, p) -> dict[str, Any]:
        return {"module": p.module, "layer": p.layer, "param_str": p.param_str}

    @staticmethod
    def infer(ctx, node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        bottoms = [Blob(np.zeros(shape, np.float32)) for shape in shapes]
        tops = _call(node, ("setup", "reshape"), bottoms)
        return tuple(top.shape for top in tops)

    @staticmethod
    def numpy(ctx, node: Node, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        bottoms = [Blob(np.array(array, np.float32)) for array in arrays]
        tops = _call(node, ("setup", "reshape", "forward"), bottoms)
        return tuple(np.asarray(top.data, np.float32) for top in tops)

    @classmethod
    def caffe(cls, ctx, node: Node) -> dict[str, Any] | None:
        return {key: node.attrs[key] for key in ("module", "layer", "param_str")}


def bind_python_path(graph: Graph, python_path: str | Path | None) -> None:
    """Gives every Python layer of ``graph`` (loop bodies included) the directory its module
    is imported from; None leaves them unbound (refused when their shapes are needed)."""
    if python_path is None:
        return
    for node in graph.all_nodes():
        if node.op == Python.type:
            node.attrs[PATH_ATTR] = str(python_path)


def _call(node: Node, methods: tuple[str, ...], bottoms: list[Blob]) -> list[Blob]:
    """A new instance of the node's class, ``methods`` called in order as Caffe does."""
    layer_class = user_class(node)
    tops = [Blob() for _ in node.outputs]
    step = "instantiating"
    try:
        layer = layer_class(None)
        layer.param_str, layer.phase = node.attrs["param_str"], TEST
        for step in methods:
            getattr(layer, step)(bottoms, tops)
    except CaffeLstmError:
        raise
    except Exception as exc:
        raise UnsupportedLayerError(
            f"the Python layer class {_qualified(node)} failed in {step}: "
            f"{failure(exc, [node.attrs[PATH_ATTR]])}", node.label,
            "a bug of the Python layer, not of caffe-lstm (the traceback is the error's "
            "__cause__)") from exc
    for index, top in enumerate(tops):
        if not isinstance(top.data, np.ndarray) or top.data.size == 0:
            raise UnsupportedLayerError(
                f"the Python layer class {_qualified(node)} left top {index} "
                f"({node.outputs[index].name}) empty after {step}", node.label,
                "its reshape must give every top its shape (top[i].reshape(...))")
    return tops


def user_class(node: Node) -> type:
    """The class the node names, imported from its ``python_path`` under the caffe shim."""
    directory = node.attrs.get(PATH_ATTR)
    module, name = node.attrs["module"], node.attrs["layer"]
    if directory is None:
        raise UnsupportedLayerError(
            f"the layer runs the Python class {_qualified(node)}, and caffe-lstm imports user "
            "code only when asked", node.label,
            f"give the directory holding {module or 'its module'} as python_path=DIR (Caffe "
            "reads PYTHONPATH), or cut the layer off with outputs=[NAME, ...]")
    if not module or not name:
        raise UnsupportedLayerError("python_param names no module or no layer class",
                                    node.label, "set python_param.module and .layer")
    imported = _import(module, Path(directory), node)
    layer_class = getattr(imported, name, None)
    if not isinstance(layer_class, type):
        raise UnsupportedLayerError(
            f"module {module} ({imported.__file__}) has no class {name}", node.label,
            "check python_param.layer")
    return layer_class


def _import(module: str, directory: Path, node: Node) -> ModuleType:
    """Imports ``module`` from ``directory`` (first on sys.path) with the caffe shim; the
    module must come from that directory."""
    if not directory.is_dir():
        raise UnsupportedLayerError(f"python_path {directory} is not a directory", node.label,
                                    "give the directory holding the layer's module")
    try:
        with _shimmed(directory):
            imported = importlib.import_module(module)
    except CaffeLstmError:
        raise
    except Exception as exc:
        raise UnsupportedLayerError(
            f"cannot import the Python layer's module {module}: {failure(exc, [str(directory)])}",
            node.label, f"check python_param.module and that {directory} holds it") from exc
    source = Path(getattr(imported, "__file__", "") or "").resolve()
    if directory.resolve() not in source.parents:
        raise UnsupportedLayerError(
            f"module {module} is imported from {source or 'a built-in'}, not from {directory}",
            node.label, "rename the layer's module: another one of that name comes first")
    return imported


@contextlib.contextmanager
def _shimmed(directory: Path) -> Iterator[None]:
    """``directory`` first on sys.path and the shim as ``caffe`` during the import."""
    previous = sys.modules.get("caffe")
    sys.modules["caffe"] = shim_module()
    sys.path.insert(0, str(directory))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(directory))
        if previous is None:
            sys.modules.pop("caffe", None)
        else:
            sys.modules["caffe"] = previous


def _qualified(node: Node) -> str:
    return f"{node.attrs['module']}.{node.attrs['layer']}"
