"""The recurrent layers LSTM, RNN and the fork's Lstm, in one package: what the cell is
(``cell``), its rules (``rules``, the fork's ``fork_rules``), its numpy equations
(``equations``), its rewrite into primitive layers (``expansion``), ONNX's own operators
(``native``), the one reading of cont (``cont``) and the op classes that tie them together
(``layers``). The modules name their shared API publicly; names with ``_`` stay in their
module."""

from caffe_lstm.ops.recurrent import layers  # noqa: F401  registers LSTM, RNN, Lstm, LSTMSimple
from caffe_lstm.ops.recurrent import apollo_unit  # noqa: F401  registers LstmUnit (apollocaffe)
from caffe_lstm.ops.recurrent import gru  # noqa: F401  registers GRU (synopsys-caffe)
from caffe_lstm.ops.recurrent.cell import (CAFFE_GATES, EXTENSION_FIELDS, PEEPHOLE_GATES,
                                           RECURRENT_ACTIVATIONS, LstmVariant, LstmWeights)
from caffe_lstm.ops.recurrent.cont import ContReading, constant_value, read_cont
from caffe_lstm.ops.recurrent.rules import state_widths

__all__ = ["CAFFE_GATES", "EXTENSION_FIELDS", "PEEPHOLE_GATES", "RECURRENT_ACTIVATIONS",
           "ContReading", "LstmVariant", "LstmWeights", "constant_value", "read_cont",
           "state_widths"]
