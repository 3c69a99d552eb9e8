"""Fields that forks put on known messages and that our schema now reads (proto/caffe.proto,
Part B): each is honoured where its meaning is what caffe-lstm computes anyway, and refused
with the way out where it selects math that is not implemented.

- ``recurrent_param.engine``: which implementation (Caffe, cuDNN) runs the same math: any value
  converts.
- ``recurrent_param.num_layers``: read by the recurrent ops (a stack of LSTM levels,
  ops/recurrent/rules.py ``check_stack``).
- ``continuation_indicator_param.axis``: 0 is the layer's own time-major (T, N) top; another
  axis is refused with the plugin route: no public source of a fork says what it selects
  (searched: BVLC-derived forks, warpctc-caffe, crnn.caffe; jolibrain's ncnn port of the layer
  reads ``axis`` and never uses it).
"""

from __future__ import annotations

from collections.abc import Sequence

from caffe_lstm.errors import UnsupportedLayerError, layer_where
from caffe_lstm.frontend.upgrade import SourceLayer


def check_fork_fields(layers: Sequence[SourceLayer], file: str) -> None:
    """Refuses a converted layer whose fork field selects math that is not implemented.

    Raises:
        UnsupportedLayerError: naming the layer, the field and its value, with a hint.
    """
    for source in layers:
        layer = source.layer
        where = f"{layer_where(layer.name, layer.type)} at {file}:{source.line}" if source.line \
            else layer_where(layer.name, layer.type)
        indicator = layer.continuation_indicator_param
        if layer.HasField("continuation_indicator_param") and indicator.axis != 0:
            raise UnsupportedLayerError(
                f"continuation_indicator_param.axis is {indicator.axis}: no public source of "
                "the fork that writes this field says what it selects (jolibrain's ncnn port "
                "reads it and ignores it); only axis 0, the time-major (time_step, batch_size) "
                "top, is implemented", where,
                "drop the field, or implement the fork's layer as a plugin (docs/plugins.md)")
