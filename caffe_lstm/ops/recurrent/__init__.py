"""The recurrent layers LSTM, RNN and the fork's Lstm, in one package: what the cell is
(``cell``), its rules (``rules``), its numpy equations (``equations``), its rewrite into
primitive layers (``expansion``) and the op classes that tie them together (``layers``)."""

from caffe_lstm.ops.recurrent import layers  # noqa: F401  registers LSTM, RNN, Lstm
from caffe_lstm.ops.recurrent.cell import (CAFFE_GATES, EXTENSION_FIELDS, PEEPHOLE_GATES,
                                           RECURRENT_ACTIVATIONS, LstmVariant, LstmWeights)
from caffe_lstm.ops.recurrent.rules import state_widths

__all__ = ["CAFFE_GATES", "EXTENSION_FIELDS", "PEEPHOLE_GATES", "RECURRENT_ACTIVATIONS",
           "LstmVariant", "LstmWeights", "state_widths"]
