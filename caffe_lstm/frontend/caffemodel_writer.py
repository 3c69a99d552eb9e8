"""Writing a .caffemodel: one NetParameter whose layers carry a name, a type and blobs."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from caffe_lstm.files import atomic_output
from caffe_lstm.proto import caffe_pb2


def write_caffemodel(path: str | Path, layers: Sequence[tuple[str, str, Sequence[np.ndarray]]],
                     net_name: str = "") -> None:
    """Writes ``(layer name, layer type, blobs)`` entries as Caffe does (shape + float data).

    The file is written beside ``path`` first and renamed onto it when complete.
    """
    net = caffe_pb2.NetParameter(name=net_name)
    for name, layer_type, blobs in layers:
        layer = net.layer.add(name=name, type=layer_type)
        for array in blobs:
            blob = layer.blobs.add()
            blob.shape.dim.extend(int(d) for d in np.shape(array))
            blob.data.extend(np.asarray(array, dtype=np.float32).ravel().tolist())
    with atomic_output(path) as tmp:
        tmp.write_bytes(net.SerializeToString())
