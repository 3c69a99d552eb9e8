"""The fillers a prototxt gives its layers' blobs (``weight_filler``, ``bias_filler``,
``filler``), for synthetic weights that follow the net's own initialisation."""

from __future__ import annotations

from pathlib import Path

from caffe_lstm.frontend.params import Params, to_params
from caffe_lstm.frontend.prototxt import read_prototxt
from caffe_lstm.frontend.upgrade import upgrade_net
from caffe_lstm.ops import get_op
from caffe_lstm.proto import caffe_pb2


def layer_fillers(prototxt: str | Path) -> dict[str, dict[str, Params | None]]:
    """Layer name -> every FillerParameter field of the layer's param message -> the filler
    the prototxt gives there (None where it gives none), for the layers whose param message
    has such fields (V1 layers upgraded first)."""
    read = read_prototxt(prototxt)
    _, layers = upgrade_net(read.net, read.layers, str(prototxt))
    found: dict[str, dict[str, Params | None]] = {}
    for source in layers:
        fields = _filler_fields(source.layer)
        if fields:
            found.setdefault(source.layer.name, fields)
    return found


def _filler_fields(layer) -> dict[str, Params | None]:
    op = get_op(layer.type)
    if op is None or op.param is None or not hasattr(layer, op.param):
        return {}
    message = getattr(layer, op.param)
    return {field.name: to_params(getattr(message, field.name))
            if message.HasField(field.name) else None
            for field in message.DESCRIPTOR.fields
            if field.message_type is caffe_pb2.FillerParameter.DESCRIPTOR
            and not _repeated(field)}  # DummyData's data_filler: values, not blobs


def _repeated(field) -> bool:
    # Newer protobuf runtimes expose is_repeated and dropped label.
    if hasattr(type(field), "is_repeated"):
        return bool(field.is_repeated)
    return field.label == field.LABEL_REPEATED
