"""Limits checked before anything is allocated: sane dims, and the memory a net's shapes imply.

A net whose blobs (activations and weights, float32) need more than the limit is rejected with
the number, before weights are attached or inputs are made. The limit is ``DEFAULT_MAX_BYTES``,
or the environment variable ``CAFFE_LSTM_MAX_BYTES``, or the CLI's ``--max-memory`` (which sets
it for one command through ``memory_limit``).

Example::

    with memory_limit(parse_size("512M")):
        check_memory(graph, "net.prototxt")
"""

from __future__ import annotations

import contextlib
import os
import re
from contextvars import ContextVar
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from caffe_lstm.errors import CaffeLstmError, ShapeError, layer_where

if TYPE_CHECKING:  # annotations only: the CLI's global options read limits without numpy
    from caffe_lstm.ir.graph import Graph, Node, Value

__all__ = ["DEFAULT_MAX_BYTES", "ENV_VAR", "MAX_DIM", "check_dims", "check_memory",
           "format_size", "max_bytes", "memory_limit", "parse_size"]

DEFAULT_MAX_BYTES = 8 << 30
ENV_VAR = "CAFFE_LSTM_MAX_BYTES"
#: Caffe's dims are int32 (blob.hpp), so anything larger is a corrupt or mistyped shape.
MAX_DIM = 2**31 - 1
#: numpy indexes with int64: a product of dims beyond this cannot even be described.
MAX_COUNT = 2**63 - 1
_FLOAT32_BYTES = 4
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?\s*", re.IGNORECASE)
_override: ContextVar[int | None] = ContextVar("caffe_lstm_max_bytes", default=None)


def parse_size(text: str) -> int:
    """``"4G"``, ``"512M"``, ``"1.5GiB"`` or a plain byte count -> bytes (binary units).

    Raises:
        ValueError: ``text`` is not a size.
    """
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"'{text}' is not a size (e.g. 4G, 512M or a byte count)")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def format_size(size: int) -> str:
    """Bytes for a message: ``37.2 GiB``, ``8 GiB``, ``512 MiB``, ``96 bytes``."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale  # 3 significant digits, never in exponent notation
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:.0f} {unit}"
    return f"{size} bytes"


@contextlib.contextmanager
def memory_limit(size: int) -> Iterator[None]:
    """Within the block the limit is ``size`` bytes, whatever the environment says."""
    token = _override.set(size)
    try:
        yield
    finally:
        _override.reset(token)


def max_bytes() -> int:
    """The limit in force: ``memory_limit``'s, else ``$CAFFE_LSTM_MAX_BYTES``, else 8 GiB."""
    override = _override.get()
    if override is not None:
        return override
    text = os.environ.get(ENV_VAR, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(text)
    except ValueError as exc:
        raise CaffeLstmError(f"{ENV_VAR}: {exc}", "the environment",
                             f"set {ENV_VAR} to a size like 4G, or unset it") from None


def check_dims(shape: Sequence[int], what: str, where: str) -> None:
    """Rejects negative dims, dims beyond int32 and counts beyond int64, before any allocation.

    Args:
        shape: the dims to check.
        what: what has the shape, e.g. ``net input 'data'`` or ``top 'fc6'``.
        where: the layer or file, for the message.

    Raises:
        ShapeError: the shape cannot be real.
    """
    dims = tuple(int(dim) for dim in shape)  # Python ints: a numpy product would wrap around
    if any(dim < 0 for dim in dims):
        raise ShapeError(f"{what} has shape {dims}, a negative dim", where, "fix the shape")
    if any(dim > MAX_DIM for dim in dims):
        raise ShapeError(f"{what} has shape {dims}, a dim above 2^31 - 1", where,
                         "Caffe's dims are int32; fix the shape")
    total = 1
    for dim in dims:
        total *= dim
    if total > MAX_COUNT:
        raise ShapeError(f"{what} has shape {dims}, more than 2^63 - 1 elements", where,
                         "fix the shape")


def check_memory(graph: Graph, where: str = "") -> None:
    """Rejects a shaped graph whose blobs (activations + weights, float32) exceed ``max_bytes``.

    Raises:
        ShapeError: the total, the limit, and the largest layer's share.
    """
    limit = max_bytes()
    total, node, largest = _blob_bytes(graph)
    if total <= limit:
        return
    what = f"the net needs {format_size(total)} for its blobs (limit {format_size(limit)})"
    if node is not None:
        what += f", {layer_where(node.name, node.op)} alone {format_size(largest)}"
    raise ShapeError(what, where, "raise the memory limit or reduce the input shapes")


def _blob_bytes(graph: Graph) -> tuple[int, Node | None, int]:
    """Bytes of every value of ``graph`` (a loop body's once: one step's worth), and the
    largest node with its own bytes (its tops and weights)."""
    total = sum(_value_bytes(value) for value in graph.values())
    largest_node, largest = None, 0
    for node in graph.nodes:
        candidates = [(node, sum(_value_bytes(v) for v in (*node.outputs, *node.weights)))]
        for body in node.subgraphs:  # a Loop's step
            body_total, body_node, body_largest = _blob_bytes(body)
            total += body_total
            candidates.append((body_node, body_largest))
        for candidate, size in candidates:
            if candidate is not None and (largest_node is None or size > largest):
                largest_node, largest = candidate, size
    return total, largest_node, largest


def _value_bytes(value: Value) -> int:
    """float32 bytes of a value; 0 while its shape is unknown."""
    if value.shape is None:
        return 0
    size = _FLOAT32_BYTES
    for dim in value.shape:
        size *= max(int(dim), 0)
    return size
