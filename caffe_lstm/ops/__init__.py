"""Every op family, imported explicitly so that registration is greppable."""

from caffe_lstm.ops.registry import (FACETS, MissingFacetError, Op, RecurrentSpec, check_facet,
                                     claimed_facets, get_op, has_facet, missing_facets,
                                     recurrent_spec, recurrent_types, registered_types)

# Each import registers the op classes of one family.
from caffe_lstm.ops import linear  # noqa: F401  InnerProduct, Embed
from caffe_lstm.ops import recurrent  # noqa: F401  LSTM, RNN, Lstm (fork)
from caffe_lstm.ops.recurrent import lstm_unit  # noqa: F401  LSTMUnit
from caffe_lstm.ops import elementwise  # noqa: F401  Eltwise, Scale, Bias, Power
# activation: Sigmoid, TanH, ReLU, Dropout, Softmax, ELU, AbsVal, BNLL, Exp, Log, Clip
from caffe_lstm.ops import activation  # noqa: F401
# shape: Slice, Concat, Split, Reshape, Flatten, Tile, Silence, Reduction, Crop, ArgMax
from caffe_lstm.ops import shape  # noqa: F401
from caffe_lstm.ops import data  # noqa: F401  DummyData (constants made by rewrites), ZerosData
from caffe_lstm.ops import loop  # noqa: F401  Loop (the recurrence made by the rewrite)
from caffe_lstm.ops import conv  # noqa: F401  Convolution, Deconvolution, Im2col
from caffe_lstm.ops import pooling  # noqa: F401  Pooling, LRN
from caffe_lstm.ops import norm  # noqa: F401  BatchNorm, PReLU
# fork: Permute, Transpose, Reverse, ContinuationIndicator, Convert
from caffe_lstm.ops import fork  # noqa: F401
from caffe_lstm.ops import caption_input  # noqa: F401  CaptionInput (deepdiary)
from caffe_lstm.ops import ctc  # noqa: F401  CTCGreedyDecoder (caffe_ocr)
from caffe_lstm.ops import dense_block  # noqa: F401  DenseBlock (caffe_ocr)
# resample: Interp (DeepLab v2), SpatialTransformer (STN forks)
from caffe_lstm.ops import resample  # noqa: F401
from caffe_lstm.ops import roi  # noqa: F401  PSROIPooling (R-FCN), ROIPooling (Fast R-CNN)
from caffe_lstm.ops import repeat  # noqa: F401  Repeat (christopher5106/last_caffe_with_stn)
from caffe_lstm.ops import python_layer  # noqa: F401  Python (Caffe's, through a pycaffe shim)
# The step API (docs/ops.md): a recurrent type writes one time step, the Loop is built from it.
from caffe_lstm.ops.builder import COPY_DIM, NodeBuilder, Step
from caffe_lstm.ops.recurrent.cells import (ConvolutionGates, InnerProductGates, gru_step,
                                            lstm_step, rnn_step)
# Layer types from outside: plugins register through this register_op (docs/plugins.md).
from caffe_lstm.ops.plugins import (ParamField, PluginError, load_plugins,
                                   refused_result, register_op)

__all__ = ["COPY_DIM", "FACETS", "ConvolutionGates", "InnerProductGates", "MissingFacetError",
           "NodeBuilder", "Op", "ParamField", "PluginError", "RecurrentSpec", "Step",
           "check_facet", "claimed_facets", "get_op", "gru_step", "has_facet", "load_plugins",
           "lstm_step", "missing_facets", "recurrent_spec",
           "recurrent_types", "refused_result", "register_op", "registered_types", "rnn_step"]
