"""docs/ops.md is the public op contract: every facet it names exists on ``Op`` with the
documented signature (parameter names, their types and the return type), every facet of ``Op``
is documented with the errors it raises and typed for a type checker, and every walker offers
what its context Protocol (ops/contexts.py) lists, with the same parameters."""

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
from caffe_lstm.frontend.params import Params
from caffe_lstm.ops import FACETS, Op, contexts
from caffe_lstm.ops.builder import NodeBuilder

OPS_DOC = Path(__file__).resolve().parents[1] / "docs" / "ops.md"
HEADING = re.compile(r"^### `(\w+)\((.*)\) -> (.+)`$")


def _split_parameters(text: str) -> list[str]:
    """``a: X, b: dict[str, int]`` -> ``["a: X", "b: dict[str, int]"]``: commas inside
    brackets belong to a type."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [part for part in [*parts, current.strip()] if part]


def _documented() -> dict[str, list[str]]:
    """Facet name -> its documented parameters, ``name: type`` (``*shapes: Shape`` with its
    star)."""
    found = {}
    for line in OPS_DOC.read_text().splitlines():
        if match := HEADING.match(line):
            found[match[1]] = _split_parameters(match[2])
    return found


def _parameters(function, typed: bool = False) -> list[str]:
    """The parameters of ``function`` as docs/ops.md writes them; ``typed``: with their
    annotations (strings: the package uses postponed annotations)."""
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [stars.get(p.kind, "") + name + (f": {p.annotation}" if typed else "")
            for name, p in inspect.signature(function).parameters.items()]


def test_every_documented_facet_is_on_op_with_its_signature():
    documented = _documented()
    assert documented, "docs/ops.md documents no facet headings"
    for name, params in documented.items():
        assert name in FACETS, f"docs/ops.md documents '{name}', which is no facet of Op"
        assert _parameters(getattr(Op, name), typed=True) == params, \
            f"Op.{name}{inspect.signature(getattr(Op, name))} differs from docs/ops.md {params}"


def _sections() -> dict[str, str]:
    """Facet name -> the text of its docs/ops.md section (up to the next heading)."""
    sections, current = {}, None
    for line in OPS_DOC.read_text().splitlines():
        if line.startswith("#"):
            match = HEADING.match(line)
            current = match[1] if match else None
            if current:
                sections[current] = ""
        elif current:
            sections[current] += line + "\n"
    return sections


def test_every_facet_documents_its_errors():
    for name, text in _sections().items():
        assert "\nErrors: " in "\n" + text, f"docs/ops.md: {name} says nothing of its errors"


@pytest.mark.parametrize("facet", FACETS)
def test_every_facet_is_typed_for_a_type_checker(facet):
    """Every parameter and the return of every facet are annotated; the walker (or builder)
    that a facet takes first is typed with its context Protocol, never ``Any``."""
    signature = inspect.signature(getattr(Op, facet))
    assert signature.return_annotation is not inspect.Signature.empty, facet
    for name, parameter in signature.parameters.items():
        assert parameter.annotation is not inspect.Parameter.empty, f"{facet}: {name}"
        if name in ("ctx", "b"):
            protocols = {n for n, v in vars(contexts).items()
                         if isinstance(v, type) and v.__module__ == contexts.__name__}
            assert parameter.annotation.split(" | ")[0] in protocols, (facet, parameter)


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
    assert _split_parameters(match[2]) != _parameters(Op.infer, typed=True)
    retyped = HEADING.match(
        "### `infer(ctx: Any, node: Node, *shapes: Shape) -> tuple[Shape, ...]`")
    assert _split_parameters(retyped[2]) != _parameters(Op.infer, typed=True)
    assert _split_parameters("a: dict[str, Any], *b: X") == ["a: dict[str, Any]", "*b: X"]


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
    (contexts.ParamView, Params),
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


# ---- every context's members, with their signatures, in docs/ops.md ---------------------------


def _rendered(name: str, member) -> str:
    """``name(a: X, b: int = 0) -> Y`` (``self`` left out) or, for an attribute, its
    annotation ``name: X``: a context member as docs/ops.md's context reference lists it."""
    if not callable(member):
        return f"{name}: {member}"
    parts, keyword_only = [], False
    for parameter in list(inspect.signature(member).parameters.values())[1:]:
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and not keyword_only:
            parts.append("*")
        keyword_only = keyword_only or parameter.kind in (inspect.Parameter.KEYWORD_ONLY,
                                                          inspect.Parameter.VAR_POSITIONAL)
        text = {inspect.Parameter.VAR_POSITIONAL: "*",
                inspect.Parameter.VAR_KEYWORD: "**"}.get(parameter.kind, "") + parameter.name
        if parameter.annotation is not inspect.Parameter.empty:
            text += f": {parameter.annotation}"
        if parameter.default is not inspect.Parameter.empty:
            text += f" = {parameter.default!r}"
        parts.append(text)
    return f"{name}({', '.join(parts)}) -> {inspect.signature(member).return_annotation}"


def context_reference(protocol) -> list[str]:
    """The lines docs/ops.md gives ``protocol``: its attributes, then its methods, each with
    the first line of its docstring."""
    lines = [f"- `{_rendered(name, annotation)}`"
             for name, annotation in getattr(protocol, "__annotations__", {}).items()]
    for name in _members(protocol):
        method = getattr(protocol, name)
        summary = " ".join((inspect.getdoc(method) or "").split("\n\n")[0].split())
        lines.append(f"- `{_rendered(name, method)}`: {summary}")
    return lines


@pytest.mark.parametrize(("protocol", "walker"), WALKERS, ids=lambda x: x.__name__)
def test_every_context_member_is_documented_with_its_signature(protocol, walker):
    """docs/ops.md lists every member of every context with the Protocol's own signature
    (the attributes ``keep_alive``, ``trt``, ... with their types)."""
    text = OPS_DOC.read_text()
    section = text.split(f"#### `{protocol.__name__}`\n", 1)
    assert len(section) == 2, f"docs/ops.md has no reference section for {protocol.__name__}"
    listed = section[1].split("\n\n")[0].splitlines()
    assert [re.match(r"- `([^`]*)`", line)[1] for line in listed if line.startswith("- ")] == \
        [re.match(r"- `([^`]*)`", line)[1] for line in context_reference(protocol)], \
        protocol.__name__
