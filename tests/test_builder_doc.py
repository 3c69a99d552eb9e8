"""docs/ops.md's builder section: the attrs table is what the registry's own ``parse`` facets
say (``python -m caffe_lstm.frontend.attrs_doc docs/ops.md``), and every public method of the
NodeBuilder and the Step is documented there."""

from __future__ import annotations

import inspect

from caffe_lstm.frontend import attrs_doc
from caffe_lstm.ops import NodeBuilder, Step, registered_types
from tests.helpers import ROOT

PAGE = ROOT / "docs" / "ops.md"


def _section(text: str) -> str:
    return text[text.index(attrs_doc.BEGIN):text.index(attrs_doc.END) + len(attrs_doc.END) + 1]


def test_the_attrs_table_is_what_the_registry_says():
    assert _section(PAGE.read_text(encoding="utf-8")) == attrs_doc.render(), \
        "docs/ops.md's attrs are stale: run python -m caffe_lstm.frontend.attrs_doc docs/ops.md"


def test_every_type_has_a_row():
    rows = [line for line in attrs_doc.render().splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == registered_types()
    assert "| `Eltwise` | `eltwise_param` | `operation` = 'SUM', `coeff` = [] |" in rows


def test_every_builder_and_step_method_is_documented():
    text = PAGE.read_text(encoding="utf-8")
    for cls in (NodeBuilder, Step):
        for name, member in vars(cls).items():
            if name.startswith("_") or not inspect.isfunction(member):
                continue
            assert f"`{name}(" in text, f"{cls.__name__}.{name} is not in docs/ops.md"


def test_one_way_in_every_loop_is_made_by_the_step_api():
    """No module but ops/builder.py makes a Loop node itself: the built-in recurrent types (LSTM,
    RNN, GRU, the forks' Lstm and LSTMSimple, num_layers stacks) and plugins all go through
    ``NodeBuilder.loop``; and the Op base has no facet of any cell's weights."""
    import ast

    from caffe_lstm.ops import FACETS, Op

    makers = []
    for path in (ROOT / "caffe_lstm").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Node"
                    and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value == "Loop"):
                makers.append(str(path.relative_to(ROOT)))
    assert makers == ["caffe_lstm/ops/builder.py"]
    assert not {"roles", "file_order"} & (set(FACETS) | set(vars(Op)))
