"""The op registry is complete: every layer type the foundation promises is registered and
defines every facet it claims."""

from __future__ import annotations

import re

import pytest

from caffe_lstm.ir.graph import Node
from caffe_lstm.ops import (MissingFacetError, Op, RecurrentSpec, claimed_facets, get_op,
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


def expected_claims(op: type[Op]) -> set[str]:
    """The facets an op must define, by the rule of docs/ops.md written out here (not read from
    the registry): infer and numpy always; tensorrt and onnx unless the op gives a reason why
    not; expand when recurrent (a recurrent type's weight roles are its RecurrentSpec's)."""
    claims = {"infer", "numpy"}
    claims |= {f for f in ("tensorrt", "onnx") if not getattr(op, f"{f}_missing_reason")}
    if op.recurrent is not None:
        claims.add("expand")
    return claims


def _function(member):
    return getattr(member, "__func__", member)


def overrides(op: type[Op], facet: str) -> bool:
    """Whether ``op`` has a callable ``facet`` of its own: not Op's default (which raises
    MissingFacetError), however it got it (defined, inherited from another op, or assigned)."""
    member = getattr(op, facet, None)
    return callable(member) and _function(member) is not _function(getattr(Op, facet))


def assert_defines_its_claims(op: type[Op]) -> None:
    """What the registry test asks of every op's facets."""
    claims = expected_claims(op)
    assert set(claimed_facets(op)) == claims, f"{op.type}: the registry claims otherwise"
    lacking = sorted(facet for facet in claims if not overrides(op, facet))
    assert lacking == [], f"{op.type} lacks {lacking}"
    assert missing_facets(op) == [], f"{op.type}: the registry's own check disagrees"


@pytest.mark.parametrize("op_type", registered_types())
def test_every_op_defines_the_facets_it_claims(op_type):
    """infer and numpy always; TensorRT and ONNX, or a reason why not; recurrent types their
    expansion, and their weight roles where weights have layouts."""
    op = get_op(op_type)
    assert op.type == op_type
    assert op.__doc__, f"{op_type} has no docstring with its formula"
    assert_defines_its_claims(op)
    for facet in ("tensorrt", "onnx"):
        reason = getattr(op, f"{facet}_missing_reason")
        assert overrides(op, facet) != bool(reason), \
            f"{op_type}: a {facet} facet or a reason why not, not both or neither"
    if op.param is not None:
        assert op.param.endswith("_param"), op.param
    if op.recurrent is not None:
        assert not overrides(op, "tensorrt"), "recurrent layers reach TensorRT as their rewrite"


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


FACETS = ("infer", "numpy", "tensorrt", "onnx")


def _planted_without(facet: str, **more):
    return _test_op(**{f: staticmethod(_identity) for f in FACETS if f != facet}, **more)


@pytest.mark.parametrize("facet", FACETS)
def test_the_facet_check_fails_an_op_missing_a_claimed_facet(facet):
    """The check every registered op passes can fail: Op's defaults do not count as the op's
    own facets, nor does a facet set back to Op's or to None."""
    assert_defines_its_claims(_planted_without(None))
    for planted in (_planted_without(facet), _planted_without(facet, **{facet: getattr(Op, facet)}),
                    _planted_without(facet, **{facet: None})):
        with pytest.raises(AssertionError, match=f"Planted lacks \\['{facet}'\\]"):
            assert_defines_its_claims(planted)


def test_the_facet_check_fails_a_recurrent_op_without_its_expansion():
    recurrent = _planted_without("tensorrt", tensorrt_missing_reason="a reason",
                                 recurrent=RecurrentSpec(("h",), roles=list, file_order=list))
    with pytest.raises(AssertionError, match=r"lacks \['expand'\]"):
        assert_defines_its_claims(recurrent)


def test_an_op_missing_a_claimed_facet_is_refused():
    """register_op refuses what the check above fails."""
    complete = _planted_without(None)
    assert missing_facets(complete) == []
    for facet in FACETS:
        assert missing_facets(_planted_without(facet)) == [facet]
        with pytest.raises(TypeError, match=f"does not define: {facet}"):
            register_op(_planted_without(facet))
    no_trt = _planted_without("tensorrt", tensorrt_missing_reason="a reason")
    assert missing_facets(no_trt) == []
    assert_defines_its_claims(no_trt)
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
