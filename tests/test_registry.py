"""The op registry is complete: every layer type the foundation promises is registered and
defines every facet it claims."""

from __future__ import annotations

import re

import pytest

from caffe_lstm.ir.graph import Node
from caffe_lstm.ops import (MissingFacetError, Op, RecurrentSpec, claimed_facets, get_op, has_facet,
                            missing_facets, register_op, registered_types)

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
def test_every_op_defines_the_facets_it_claims(op_type):
    """infer and numpy always; TensorRT and ONNX, or a reason why not; recurrent types their
    expansion, and their weight roles where weights have layouts (registry.claimed_facets)."""
    op = get_op(op_type)
    assert op.type == op_type
    assert op.__doc__, f"{op_type} has no docstring with its formula"
    assert {"infer", "numpy"} <= set(claimed_facets(op))
    assert missing_facets(op) == [], f"{op_type} lacks {missing_facets(op)}"
    for facet in ("tensorrt", "onnx"):
        reason = getattr(op, f"{facet}_missing_reason")
        assert has_facet(op, facet) != bool(reason), \
            f"{op_type}: a {facet} facet or a reason why not, not both or neither"
    if op.param is not None:
        assert op.param.endswith("_param"), op.param
    if op.recurrent is not None:
        assert "expand" in claimed_facets(op)
        assert not has_facet(op, "tensorrt"), "recurrent layers reach TensorRT as their rewrite"
        if op.recurrent.has_layouts:
            assert {"roles", "file_order"} <= set(claimed_facets(op))


@pytest.mark.parametrize("op_type", registered_types())
def test_every_op_says_where_it_comes_from(op_type):
    op = get_op(op_type)
    fork = re.search(r"[\w.-]+/[\w.-]+@[0-9a-f]{7}", op.origin)
    assert op.origin in ("BVLC Caffe", get_op("Loop").origin) or fork, \
        f"{op_type}: a fork layer names its repository and commit, not {op.origin!r}"
    assert "\n" not in op.limits


def _test_op(**facets):
    """An op class (not registered) with the given members on top of a bare op's."""
    return type("Planted", (Op,), {"type": "Planted", "__doc__": "y = x", **facets})


def _identity(ctx, node, *xs):
    return xs


def test_an_op_missing_a_claimed_facet_is_refused():
    """The checks above can fail: Op's defaults do not count as the op's own facets."""
    complete = _test_op(infer=staticmethod(_identity), numpy=staticmethod(_identity),
                        tensorrt=staticmethod(_identity), onnx=staticmethod(_identity))
    assert missing_facets(complete) == []
    for facet in ("infer", "numpy", "tensorrt", "onnx"):
        members = {f: staticmethod(_identity) for f in ("infer", "numpy", "tensorrt", "onnx")
                   if f != facet}
        assert missing_facets(_test_op(**members)) == [facet]
        with pytest.raises(TypeError, match=f"does not define: {facet}"):
            register_op(_test_op(**members))
    no_trt = _test_op(infer=staticmethod(_identity), numpy=staticmethod(_identity),
                      onnx=staticmethod(_identity), tensorrt_missing_reason="a reason")
    assert missing_facets(no_trt) == []
    recurrent = _test_op(infer=staticmethod(_identity), numpy=staticmethod(_identity),
                         onnx=staticmethod(_identity), tensorrt_missing_reason="a reason",
                         recurrent=RecurrentSpec(("h",), has_layouts=True))
    assert missing_facets(recurrent) == ["expand", "roles", "file_order"]
    assert "Planted" not in registered_types()


def test_a_bare_op_facet_raises_instead_of_computing():
    node = Node("n", "Planted", [], [], {})
    for call in (lambda: Op.infer(None, node), lambda: Op.numpy(None, node),
                 lambda: Op.tensorrt(None, node), lambda: Op.onnx(None, node),
                 lambda: Op.expand(None, node)):
        with pytest.raises(MissingFacetError, match="Planted node n has no"):
            call()


def test_ops_holding_a_subgraph():
    holders = [t for t in registered_types() if get_op(t).holds_subgraph]
    assert holders == ["Loop"]
