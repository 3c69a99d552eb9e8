"""The op registry is complete: every layer type the foundation promises has every facet."""

from __future__ import annotations

import pytest

from caffe_lstm.ops import get_op, registered_types

# The layer types issue #2 promises (Input and DummyData become net inputs in the importer).
PROMISED = ["InnerProduct", "Embed", "Eltwise", "Scale", "Bias", "Slice", "Concat", "Split",
            "Reshape", "Flatten", "Tile", "Sigmoid", "TanH", "ReLU", "Softmax", "Dropout",
            "Silence", "Reduction", "Power", "LSTM", "RNN", "Lstm",
            # issue #6: the CNN front ends and the forks' layers
            "Convolution", "Deconvolution", "Im2col", "Pooling", "LRN", "BatchNorm", "PReLU",
            "ELU", "AbsVal", "BNLL", "Exp", "Log", "Clip", "Crop", "ArgMax", "Permute",
            "Transpose", "Reverse", "ContinuationIndicator"]


def test_promised_types_are_registered():
    assert sorted(set(PROMISED) - set(registered_types())) == []


@pytest.mark.parametrize("op_type", registered_types())
def test_every_op_overrides_infer_and_numpy(op_type):
    op = get_op(op_type)
    assert op.type == op_type
    assert op.infer is not None, f"{op_type} has no infer facet"
    assert op.numpy is not None, f"{op_type} has no numpy facet"
    assert op.__doc__, f"{op_type} has no docstring with its formula"
