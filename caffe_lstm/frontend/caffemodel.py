"""Read layer names and weight blobs from a binary ``.caffemodel``.

The file is one serialized ``NetParameter``. We walk its protobuf wire format by hand instead of
using the generated ``caffe_pb2`` module for two reasons:

* Caffe forks reuse ``LayerParameter`` field numbers for different messages, so only a layer's
  ``name`` and ``blobs`` can be trusted. Every other field is skipped by wire type, never decoded.
* Weight files are hundreds of MiB. The file is memory-mapped and packed float data becomes a
  read-only numpy view into the map: no per-element Python work and no copy.

Only structure (tags, lengths, names, dims) is decoded in Python. Every read is bounds-checked
against its enclosing message, so garbage input raises ``ModelLoadError`` and never hangs.

Example::

    for layer in read_caffemodel("lenet.caffemodel"):
        weight = layer.blobs[0].array((500, 800))
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from caffe_lstm.errors import ModelLoadError

__all__ = ["Blob", "LayerBlobs", "read_caffemodel"]

_HINT = "re-download the file or check that weights= points at a binary .caffemodel"

# Field numbers from BVLC caffe.proto. Only these are decoded; everything else is skipped.
_NET_LAYER, _NET_LAYERS = 100, 2  # LayerParameter (new style), V1LayerParameter (legacy)
_LAYER_NAME, _LAYER_BLOBS = 1, 7
_V1_NESTED_V0, _V1_NAME, _V1_BLOBS = 1, 4, 6
_V0_NAME, _V0_BLOBS = 1, 50
_BLOB_LEGACY_DIMS = (1, 2, 3, 4)  # num, channels, height, width
_BLOB_DATA, _BLOB_SHAPE, _BLOB_DOUBLE_DATA = 5, 7, 8
_SHAPE_DIM = 1

_VARINT, _FIXED64, _LEN, _START_GROUP, _END_GROUP, _FIXED32 = 0, 1, 2, 3, 4, 5
_MAX_FIELD_NUMBER = (1 << 29) - 1
_MAX_VARINT_BYTES = 10
_MAX_AXES = 32  # Caffe's kMaxBlobAxes; also bounds the work spent decoding garbage shapes.
_TEXT_PROBE_BYTES = 4096
# Bytes that never occur in a prototxt; a binary caffemodel has them within its first bytes.
_CONTROL_BYTES = bytes(range(0x09)) + b"\x0b\x0c" + bytes(range(0x0E, 0x20)) + b"\x7f"


@dataclass(frozen=True, eq=False)  # eq=False: comparing numpy arrays with == is ambiguous
class Blob:
    """One weight blob of a layer.

    Attributes:
        shape: the dims as stored; for a legacy blob (num, channels, height, width).
        data: 1-D values. float32 data is a read-only view into the mapped file when it was
            stored packed in one chunk (the usual case); ``double_data`` gives float64.
        legacy: True when the blob used num/channels/height/width instead of ``shape``.
    """

    shape: tuple[int, ...]
    data: np.ndarray
    legacy: bool

    def fits(self, expected: Sequence[int]) -> bool:
        """Whether this blob can be loaded into a parameter of shape ``expected``.

        Caffe's rule: a legacy blob fits when ``expected`` has at most 4 axes and, right-aligned
        and left-padded with 1s, equals the 4 stored dims; otherwise the dims must be equal.
        """
        want = tuple(int(dim) for dim in expected)
        if self.legacy:
            same = len(want) <= 4 and (1,) * (4 - len(want)) + want == self.shape
        else:
            same = want == self.shape
        return same and self.data.size == math.prod(want)

    def array(self, expected: Sequence[int]) -> np.ndarray:
        """The values as float32 reshaped to ``expected``; read-only when a view into the file.

        Raises:
            ModelLoadError: the blob does not ``fits(expected)``. Callers that know the layer
                should check ``fits`` first and report the mismatch with the layer's name.
        """
        want = tuple(int(dim) for dim in expected)
        if not self.fits(want):
            kind = "legacy blob" if self.legacy else "blob"
            raise ModelLoadError(
                f"weight {kind} of shape {self.shape} does not fit the expected shape {want}",
                "",
                "check that the caffemodel was trained with this prototxt",
            )
        # copy=False keeps the zero-copy view for float32; float64 data is converted.
        return self.data.astype(np.float32, copy=False).reshape(want)


@dataclass(frozen=True)
class LayerBlobs:
    """A layer's name and its blobs, in file order."""

    name: str
    blobs: tuple[Blob, ...]


def read_caffemodel(path: str | Path) -> list[LayerBlobs]:
    """Read every layer's name and blobs from a binary caffemodel.

    Args:
        path: the ``.caffemodel`` file.

    Returns:
        One entry per ``layer`` (new style) or ``layers`` (V1/V0) entry in file order, including
        layers without blobs.

    Raises:
        ModelLoadError: the file is missing, unreadable, empty, text, or not a valid NetParameter.
    """
    buf = _map_file(path)
    try:
        return _read_net(_Walker(buf, str(path)))
    except ModelLoadError:
        if _looks_like_text(buf):  # a prototxt passed as weights deserves a clearer message
            raise ModelLoadError(
                "not a binary caffemodel: the file looks like text (a prototxt?)", str(path), _HINT
            ) from None
        raise
    finally:
        _close_unless_viewed(buf)


def _map_file(path: str | Path) -> mmap.mmap:
    """Map ``path`` read-only; the map outlives the file object and lives as long as its views."""
    try:
        with open(path, "rb") as file:
            if os.fstat(file.fileno()).st_size == 0:  # mmap refuses empty files
                raise ModelLoadError("empty caffemodel: the file has 0 bytes", str(path), _HINT)
            return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as err:  # missing, a directory, unreadable, or not mappable
        reason = getattr(err, "strerror", None) or str(err)
        raise ModelLoadError(
            f"cannot read caffemodel: {reason}",
            str(path),
            "check that weights= names an existing, readable binary .caffemodel",
        ) from None


def _close_unless_viewed(buf: mmap.mmap) -> None:
    """Release the map now if no array views it; otherwise the views keep it alive."""
    try:
        buf.close()
    except BufferError:  # exported views exist: numpy's base chain (memoryview -> mmap) owns it
        pass


def _looks_like_text(buf: mmap.mmap) -> bool:
    """Whether the file starts like a text file (no control bytes besides tab/newline/CR)."""
    head = buf[:_TEXT_PROBE_BYTES]
    return len(head.translate(None, _CONTROL_BYTES)) == len(head)


class _Field(NamedTuple):
    """One field of a message: payload bytes [start, end); ``value`` is set for varints."""

    number: int
    wire: int
    start: int
    end: int
    value: int = 0


@dataclass
class _Scope:
    """The message being read, for error messages."""

    label: str  # e.g. "the net", "layer #3", "blob 0 of layer 'ip1'"
    layer: str | None = None  # the layer's name once read, for ``where``


class _Walker:
    """Iterates protobuf fields of the mapped file; every read is bounds-checked."""

    def __init__(self, buf: mmap.mmap, path: str) -> None:
        self.buf, self.path, self.size = buf, path, len(buf)

    def error(self, what: str, scope: _Scope) -> ModelLoadError:
        """A ``ModelLoadError`` naming the file and, when known, the layer."""
        where = self.path if scope.layer is None else f"layer '{scope.layer}' in {self.path}"
        return ModelLoadError(what, where, _HINT)

    def past_end(self, what: str, need: int, end: int, scope: _Scope) -> ModelLoadError:
        """The error for ``what`` needing bytes up to ``need`` in a message ending at ``end``."""
        container = "the file" if end == self.size else "its enclosing message"
        return self.error(
            f"truncated caffemodel: {what} of {scope.label} runs past the end of {container}"
            f" (needs byte {need}, ends at byte {end})",
            scope,
        )

    def varint(self, pos: int, end: int, scope: _Scope) -> tuple[int, int]:
        """Decode the varint at ``pos``; returns (unsigned 64-bit value, position after it)."""
        buf, result, shift = self.buf, 0, 0
        for at in range(pos, min(end, pos + _MAX_VARINT_BYTES)):
            byte = buf[at]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result & 0xFFFF_FFFF_FFFF_FFFF, at + 1  # protobuf truncates to 64 bits
            shift += 7
        if end - pos >= _MAX_VARINT_BYTES:
            raise self.error(f"corrupt caffemodel: varint at byte {pos} of {scope.label} "
                             f"is longer than {_MAX_VARINT_BYTES} bytes", scope)
        raise self.past_end(f"the varint at byte {pos}", end + 1, end, scope)

    def tag(self, pos: int, end: int, scope: _Scope) -> tuple[int, int, int]:
        """Decode a field tag at ``pos``; returns (field number, wire type, position after)."""
        key, after = self.varint(pos, end, scope)
        number, wire = key >> 3, key & 7
        if not 1 <= number <= _MAX_FIELD_NUMBER:
            raise self.error(
                f"corrupt caffemodel: invalid field number {number} at byte {pos} of {scope.label}",
                scope,
            )
        return number, wire, after

    def payload(self, number: int, wire: int, pos: int, end: int, scope: _Scope) -> _Field:
        """Locate the payload of a non-group field whose tag ends at ``pos``."""
        if wire == _VARINT:
            value, after = self.varint(pos, end, scope)
            return _Field(number, wire, pos, after, value)
        if wire == _LEN:
            size, pos = self.varint(pos, end, scope)
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
        else:  # 4 (an end-group without its start), 6 and 7 do not exist
            raise self.error(f"corrupt caffemodel: invalid wire type {wire} for field {number} "
                             f"at byte {pos} of {scope.label}", scope)
        if pos + size > end:  # also rejects absurd lengths before anything is touched
            raise self.past_end(f"field {number}", pos + size, end, scope)
        return _Field(number, wire, pos, pos + size)

    def skip_group(self, number: int, pos: int, end: int, scope: _Scope) -> int:
        """Skip a deprecated group up to its matching end tag; returns the position after it."""
        open_groups = [number]  # a list, not recursion: nested garbage cannot overflow the stack
        while open_groups:
            if pos >= end:
                raise self.past_end(f"group field {number}", end + 1, end, scope)
            inner, wire, pos = self.tag(pos, end, scope)
            if wire == _START_GROUP:
                open_groups.append(inner)
            elif wire == _END_GROUP:
                if inner != open_groups.pop():
                    raise self.error(f"corrupt caffemodel: group end tag {inner} does not match "
                                     f"its start in {scope.label} at byte {pos}", scope)
            else:
                pos = self.payload(inner, wire, pos, end, scope).end
        return pos

    def fields(self, start: int, end: int, scope: _Scope) -> Iterator[_Field]:
        """Yield the fields of the message in bytes [start, end); groups are skipped."""
        pos = start
        while pos < end:
            number, wire, pos = self.tag(pos, end, scope)
            if wire == _START_GROUP:
                pos = self.skip_group(number, pos, end, scope)
                continue
            item = self.payload(number, wire, pos, end, scope)
            pos = item.end
            yield item

    def text(self, item: _Field) -> str:
        """A string field; undecodable bytes are replaced because names only label things."""
        return self.buf[item.start:item.end].decode("utf-8", errors="replace")


class _LayerParts(NamedTuple):
    """Where a layer's name and blobs live; numbers differ between message versions."""

    name: int
    blobs: int
    nested_v0: int | None = None


_NEW_STYLE = _LayerParts(_LAYER_NAME, _LAYER_BLOBS)
_V1_STYLE = _LayerParts(_V1_NAME, _V1_BLOBS, _V1_NESTED_V0)
_V0_STYLE = _LayerParts(_V0_NAME, _V0_BLOBS)


def _read_net(walker: _Walker) -> list[LayerBlobs]:
    """Read every ``layer`` and ``layers`` entry of the NetParameter, in file order."""
    layers: list[LayerBlobs] = []
    for item in walker.fields(0, walker.size, _Scope("the net")):
        if item.wire != _LEN:  # a known number with another wire type is unknown to protobuf too
            continue
        if item.number == _NET_LAYER:
            layers.append(_read_layer(walker, item, len(layers), _NEW_STYLE))
        elif item.number == _NET_LAYERS:
            layers.append(_read_layer(walker, item, len(layers), _V1_STYLE))
    return layers


def _read_layer(walker: _Walker, item: _Field, index: int, parts: _LayerParts) -> LayerBlobs:
    """Read one layer entry: find its name and blob spans first, then decode the blobs."""
    scope = _Scope(f"layer #{index}")
    name, spans = _find_name_and_blobs(walker, item, scope, parts)
    if name:
        scope = _Scope(f"layer '{name}'", name)
    blobs = tuple(
        _read_blob(walker, span, _Scope(f"blob {k} of {scope.label}", scope.layer))
        for k, span in enumerate(spans)
    )
    return LayerBlobs(name, blobs)


def _find_name_and_blobs(
    walker: _Walker, item: _Field, scope: _Scope, parts: _LayerParts
) -> tuple[str, list[_Field]]:
    """The layer's name and blob fields, falling back to a nested V0 layer's (for V0 nets)."""
    name, v0_name = "", ""
    spans: list[_Field] = []
    v0_spans: list[_Field] = []
    for sub in walker.fields(item.start, item.end, scope):
        if sub.wire != _LEN:
            continue
        if sub.number == parts.name:
            name = walker.text(sub)  # protobuf: the last occurrence wins
            scope.label, scope.layer = f"layer '{name}'", name
        elif sub.number == parts.blobs:
            spans.append(sub)
        elif sub.number == parts.nested_v0:
            nested = _Scope(f"the V0 layer inside {scope.label}", scope.layer)
            found, found_spans = _find_name_and_blobs(walker, sub, nested, _V0_STYLE)
            v0_name, v0_spans = found or v0_name, v0_spans + found_spans  # messages merge
    return name or v0_name, spans or v0_spans


def _read_blob(walker: _Walker, item: _Field, scope: _Scope) -> Blob:
    """Decode one BlobProto: its shape (new or legacy) and its float or double data."""
    legacy: dict[int, int] = {}
    dims: list[int] = []
    floats, doubles = _Numbers("<f4", "<f", _FIXED32), _Numbers("<f8", "<d", _FIXED64)
    for sub in walker.fields(item.start, item.end, scope):
        if sub.number in _BLOB_LEGACY_DIMS and sub.wire == _VARINT:
            legacy[sub.number] = _as_signed(sub.value, 32)  # presence matters, not the value
        elif sub.number == _BLOB_SHAPE and sub.wire == _LEN:
            dims += _read_dims(walker, sub, scope)  # repeated occurrences merge: dims concatenate
        elif sub.number == _BLOB_DATA:
            floats.add(walker, sub, scope)
        elif sub.number == _BLOB_DOUBLE_DATA:
            doubles.add(walker, sub, scope)
    if legacy:  # Caffe: any of num/channels/height/width present -> 4-D, ``shape`` ignored
        shape = tuple(legacy.get(number, 0) for number in _BLOB_LEGACY_DIMS)
    else:
        shape = tuple(dims)
    data = doubles.array() if doubles.count else floats.array()
    _check_shape(walker, shape, data.size, scope)
    return Blob(shape, data, bool(legacy))


def _read_dims(walker: _Walker, item: _Field, scope: _Scope) -> list[int]:
    """The ``dim`` values of one BlobShape, packed or not."""
    dims: list[int] = []
    for sub in walker.fields(item.start, item.end, scope):
        if sub.number != _SHAPE_DIM:
            continue
        if sub.wire == _VARINT:
            dims.append(_as_signed(sub.value, 64))
        elif sub.wire == _LEN:
            if sub.end - sub.start > _MAX_AXES * _MAX_VARINT_BYTES:  # bound Python work on garbage
                raise walker.error(f"corrupt caffemodel: the shape of {scope.label} has more "
                                   f"than {_MAX_AXES} axes", scope)
            pos = sub.start
            while pos < sub.end:
                value, pos = walker.varint(pos, sub.end, scope)
                dims.append(_as_signed(value, 64))
    return dims


def _check_shape(walker: _Walker, shape: tuple[int, ...], count: int, scope: _Scope) -> None:
    """Reject shapes Caffe would reject: too many axes, negative dims, a wrong value count."""
    if len(shape) > _MAX_AXES:
        raise walker.error(f"corrupt caffemodel: {scope.label} has {len(shape)} axes, "
                           f"Caffe allows at most {_MAX_AXES}", scope)
    if any(dim < 0 for dim in shape):
        raise walker.error(f"corrupt caffemodel: {scope.label} has a negative dimension "
                           f"in its shape {shape}", scope)
    if math.prod(shape) != count:
        raise walker.error(f"corrupt caffemodel: {scope.label} holds {count} values but its "
                           f"shape {shape} needs {math.prod(shape)}", scope)


def _as_signed(value: int, bits: int) -> int:
    """Two's-complement reinterpretation of a varint as int32/int64 (protobuf truncates int32)."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


class _Numbers:
    """Collects one repeated float/double field across packed chunks and unpacked entries."""

    def __init__(self, dtype: str, struct_format: str, unpacked_wire: int) -> None:
        self.dtype, self.format, self.unpacked_wire = np.dtype(dtype), struct_format, unpacked_wire
        self.parts: list[np.ndarray] = []
        self.loose: list[float] = []  # unpacked values not yet moved into ``parts``
        self.count = 0

    def add(self, walker: _Walker, item: _Field, scope: _Scope) -> None:
        """Add a packed chunk (as a view) or one unpacked value; other wire types are unknown."""
        size = self.dtype.itemsize
        if item.wire == self.unpacked_wire:
            self.loose.append(struct.unpack_from(self.format, walker.buf, item.start)[0])
            self.count += 1
        elif item.wire == _LEN:
            length = item.end - item.start
            if length % size:
                raise walker.error(f"corrupt caffemodel: field {item.number} of {scope.label} "
                                   f"has {length} bytes, not a multiple of {size}", scope)
            if length:
                self._flush()  # keep file order when packed and unpacked entries mix
                self.parts.append(np.frombuffer(
                    walker.buf, self.dtype, count=length // size, offset=item.start))
                self.count += length // size

    def array(self) -> np.ndarray:
        """All values in file order: the view itself when there was a single packed chunk."""
        self._flush()
        if not self.parts:
            return np.frombuffer(b"", self.dtype)
        return self.parts[0] if len(self.parts) == 1 else np.concatenate(self.parts)

    def _flush(self) -> None:
        """Move pending unpacked values into ``parts`` as one small array."""
        if self.loose:
            self.parts.append(np.array(self.loose, dtype=self.dtype))
            self.loose = []
