"""docs/ops.md is the public op contract: every facet it names exists on ``Op`` with the
documented parameters, every facet of ``Op`` is documented, and every walker offers what its
context Protocol (ops/contexts.py) lists, with the same parameters."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from caffe_lstm.analysis.shapes import ShapeInference
from caffe_lstm.frontend.caffe_writer import CaffeWriter
from caffe_lstm.backends.dot import DotWriter
from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.backends.onnx.context import OnnxContext
from caffe_lstm.backends.tensorrt.context import EmitContext
from caffe_lstm.frontend.importer import Importer
from caffe_lstm.ops import FACETS, Op, contexts
from caffe_lstm.ops.builder import NodeBuilder

OPS_DOC = Path(__file__).resolve().parents[1] / "docs" / "ops.md"
HEADING = re.compile(r"^### `(\w+)\((.*)\) -> (.+)`$")


def _documented() -> dict[str, list[str]]:
    """Facet name -> its documented parameter names (``*shapes`` kept with its star)."""
    found = {}
    for line in OPS_DOC.read_text().splitlines():
        if match := HEADING.match(line):
            found[match[1]] = [p.strip() for p in match[2].split(",") if p.strip()]
    return found


def _parameters(function) -> list[str]:
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [stars.get(p.kind, "") + name
            for name, p in inspect.signature(function).parameters.items()]


def test_every_documented_facet_is_on_op_with_its_signature():
    documented = _documented()
    assert documented, "docs/ops.md documents no facet headings"
    for name, params in documented.items():
        assert name in FACETS, f"docs/ops.md documents '{name}', which is no facet of Op"
        assert _parameters(getattr(Op, name)) == params, \
            f"Op.{name}{inspect.signature(getattr(Op, name))} differs from docs/ops.md {params}"


def test_every_facet_of_op_is_documented():
    assert sorted(_documented()) == sorted(FACETS)


def test_the_documented_return_types_are_the_annotations():
    for line in OPS_DOC.read_text().splitlines():
        if match := HEADING.match(line):
            annotation = inspect.signature(getattr(Op, match[1])).return_annotation
            assert annotation == match[3], (match[1], annotation, match[3])


def test_the_heading_pattern_finds_a_wrong_signature(tmp_path):
    """The check is not vacuous: a heading with other parameters than Op's is caught."""
    match = HEADING.match("### `infer(node, *shapes) -> tuple[Shape, ...]`")
    assert match is not None
    assert [p.strip() for p in match[2].split(",")] != _parameters(Op.infer)


# ---- every walker is the context it hands to the facets --------------------------------------

WALKERS = [
    (contexts.ImportContext, Importer),
    (contexts.ShapeContext, ShapeInference),
    (contexts.NumpyContext, NumpyExecutor),
    (contexts.TensorRTContext, EmitContext),
    (contexts.OnnxContext, OnnxContext),
    (contexts.CaffeContext, CaffeWriter),
    (contexts.DotContext, DotWriter),
    (contexts.ExpandContext, NodeBuilder),
]


def _members(protocol) -> list[str]:
    return [name for name, value in vars(protocol).items()
            if not name.startswith("_") and callable(value)]


@pytest.mark.parametrize(("protocol", "walker"), WALKERS, ids=lambda x: x.__name__)
def test_each_walker_offers_its_context(protocol, walker):
    for name in _members(protocol):
        assert callable(getattr(walker, name, None)), f"{walker.__name__} has no {name}"
        assert _parameters(getattr(walker, name)) == _parameters(getattr(protocol, name)), \
            f"{walker.__name__}.{name} differs from {protocol.__name__}.{name}"
    attributes = getattr(protocol, "__annotations__", {})
    source = inspect.getsource(walker)
    for name in attributes:
        assert re.search(rf"self\.{name}\b|\b{name}:", source), \
            f"{walker.__name__} sets no attribute {name}"


def test_every_context_is_documented():
    text = OPS_DOC.read_text()
    for protocol, _ in WALKERS:
        assert f"`{protocol.__name__}`" in text
        for name in _members(protocol):
            assert f"`{name}" in text, f"docs/ops.md does not list {protocol.__name__}.{name}"
