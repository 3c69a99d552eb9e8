"""The fillers a layer's param message gives its blobs (``weight_filler``, ``bias_filler``,
``filler``), format-free, for synthetic weights that follow the net's own initialisation."""

from __future__ import annotations

from caffe_lstm.frontend.params import Params, is_repeated, to_params
from caffe_lstm.ops import get_op
from caffe_lstm.proto import caffe_pb2


def filler_fields(layer: caffe_pb2.LayerParameter) -> dict[str, Params | None]:
    """Every singular FillerParameter field of the layer's param message -> the filler the
    prototxt gives there (None where it gives none); empty for a layer without such fields."""
    op = get_op(layer.type)
    if op is None or op.param is None or not hasattr(layer, op.param):
        return {}
    message = getattr(layer, op.param)
    return {field.name: to_params(getattr(message, field.name))
            if message.HasField(field.name) else None
            for field in message.DESCRIPTOR.fields
            if field.message_type is caffe_pb2.FillerParameter.DESCRIPTOR
            and not is_repeated(field)}  # DummyData's data_filler: values, not blobs
