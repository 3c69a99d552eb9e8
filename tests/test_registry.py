"""The op registry is complete: every layer type the foundation promises has every facet."""

from __future__ import annotations

import pytest

from caffe_lstm.ops import get_op, registered_types

# The layer types the foundation promises (Input becomes the net inputs in the importer).
PROMISED = ["InnerProduct", "Embed", "Eltwise", "Scale", "Bias", "Slice", "Concat", "Split",
            "Reshape", "Flatten", "Tile", "Sigmoid", "TanH", "ReLU", "Softmax", "Dropout",
            "Silence", "Reduction", "Power", "LSTM", "RNN", "Lstm",
            # the CNN front ends and the forks' layers
            "Convolution", "Deconvolution", "Im2col", "Pooling", "LRN", "BatchNorm", "PReLU",
            "ELU", "AbsVal", "BNLL", "Exp", "Log", "Clip", "Crop", "ArgMax", "Permute",
            "Transpose", "Reverse", "ContinuationIndicator",
            # issue 13: the layers real recurrent nets still missed
            "LSTMUnit", "CTCGreedyDecoder", "DenseBlock"]


def test_promised_types_are_registered():
    assert sorted(set(PROMISED) - set(registered_types())) == []


@pytest.mark.parametrize("op_type", registered_types())
def test_every_op_overrides_infer_and_numpy(op_type):
    op = get_op(op_type)
    assert op.type == op_type
    assert op.infer is not None, f"{op_type} has no infer facet"
    assert op.numpy is not None, f"{op_type} has no numpy facet"
    assert op.__doc__, f"{op_type} has no docstring with its formula"


@pytest.mark.parametrize("op_type", registered_types())
def test_every_op_has_every_facet(op_type):
    """parse, infer, blobs, numpy, the Caffe writer and the DOT drawing always; TensorRT and
    ONNX, or a reason why not; recurrent types their metadata, expansion and weight roles."""
    op = get_op(op_type)
    for facet in ("parse", "infer", "blobs", "numpy", "caffe", "dot"):
        assert callable(getattr(op, facet)), f"{op_type} has no {facet} facet"
    assert op.tensorrt is not None or op.tensorrt_missing_reason
    assert op.onnx is not None or op.onnx_missing_reason
    if op.param is not None:
        assert op.param.endswith("_param"), op.param
    if op.recurrent is not None:
        assert callable(op.expand), f"{op_type} is recurrent but cannot be expanded"
        assert op.tensorrt is None, "recurrent layers reach TensorRT only as their rewrite"
        if op.recurrent.has_layouts:
            assert callable(op.roles) and callable(op.file_order)


def test_ops_holding_a_subgraph_take_the_walker_as_context():
    holders = [t for t in registered_types() if get_op(t).needs_context]
    assert holders == ["Loop"]
