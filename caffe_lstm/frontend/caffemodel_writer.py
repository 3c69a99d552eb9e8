"""Writing a .caffemodel: one NetParameter whose layers carry a name, a type and blobs.

The bytes are those protobuf would produce (every blob as packed float ``data`` then ``shape``,
as Caffe saves them), but the float data goes from numpy to the file as one buffer per blob:
no per-float Python work, so vocabulary-sized weights write in a moment.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO
from collections.abc import Sequence

import numpy as np

from caffe_lstm.files import atomic_output
from caffe_lstm.proto import caffe_pb2

# Field numbers from caffe.proto: NetParameter.layer, LayerParameter.blobs, BlobProto.data/shape.
_NET_LAYER, _LAYER_BLOBS, _BLOB_DATA, _BLOB_SHAPE = 100, 7, 5, 7
_LEN = 2  # the length-delimited wire type


def write_caffemodel(path: str | Path, layers: Sequence[tuple[str, str, Sequence[np.ndarray]]],
                     net_name: str = "") -> None:
    """Writes ``(layer name, layer type, blobs)`` entries as Caffe does (shape + float data).

    The file is written beside ``path`` first and renamed onto it when complete.
    """
    with atomic_output(path) as tmp, open(tmp, "wb") as stream:
        stream.write(caffe_pb2.NetParameter(name=net_name).SerializeToString())
        for name, layer_type, blobs in layers:
            _write_layer(stream, name, layer_type, blobs)


def _write_layer(stream: BinaryIO, name: str, layer_type: str,
                 blobs: Sequence[np.ndarray]) -> None:
    """One ``layer`` entry: its name and type, then one ``blobs`` entry per array."""
    head = caffe_pb2.LayerParameter(name=name, type=layer_type).SerializeToString()
    parts = [head]
    for array in blobs:
        blob = _blob_parts(_float32_c_order(array))
        parts += [_tag_and_length(_LAYER_BLOBS, sum(len(p) for p in blob)), *blob]
    stream.write(_tag_and_length(_NET_LAYER, sum(len(p) for p in parts)))
    for part in parts:
        stream.write(part)


def _blob_parts(data: np.ndarray) -> list:
    """A BlobProto as byte chunks: packed ``data`` (a view of the array), then ``shape``."""
    shape = caffe_pb2.BlobShape(dim=[int(d) for d in data.shape]).SerializeToString()
    raw = memoryview(data).cast("B") if data.size else b""
    data_field = [_tag_and_length(_BLOB_DATA, len(raw)), raw] if data.size else []
    return data_field + [_tag_and_length(_BLOB_SHAPE, len(shape)), shape]


def _float32_c_order(array: np.ndarray) -> np.ndarray:
    """Little-endian float32 in C order; a 0-axis (scalar) blob keeps its empty shape."""
    data = np.asarray(array, dtype="<f4")
    return data if data.flags.c_contiguous else data.copy(order="C")


def _tag_and_length(number: int, length: int) -> bytes:
    """The key of a length-delimited field followed by its payload length."""
    return _varint((number << 3) | _LEN) + _varint(length)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
