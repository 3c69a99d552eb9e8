"""One home per layer type: no table keyed by Caffe layer type outside ``ops/``.

The recurrent layer types are named only by their op classes (everything else asks the
registry for ``recurrent`` metadata), their param messages only by their ops' ``param``, and
no module outside ``ops/`` keeps a table of layer types (a dict keyed by them, or a
set/tuple/list of them: per-type writers, per-type pattern matching): each op carries its own
facets. Every name comes from the registry, and the whole package is read (its syntax tree, so
a name in any expression counts, a word in a comment or docstring does not).
"""

from __future__ import annotations

import ast
from pathlib import Path

from caffe_lstm.ops import get_op, recurrent_types, registered_types

PACKAGE = Path(__file__).resolve().parents[1] / "caffe_lstm"

#: Tables of type names that are format facts, not per-type behaviour: Caffe's V1 LayerType
#: enum names (some equal type strings: BNLL, LRN) -> type strings.
FORMAT_TABLES = {("frontend/upgrade.py", "V1_TYPES")}
#: Known debt (file: what, without the line, so that edits above it do not move it), to be gone
#: with the one reading of cont (issue 16): feeds.py's pattern matching.
KNOWN = {"feeds.py: a table of layer types ['Slice', 'Reshape']"}


def _sources_outside_ops(root: Path) -> list[Path]:
    return [path for path in sorted(root.rglob("*.py"))
            if path.relative_to(root).parts[:1] not in (("ops",), ("proto",))]


def _table_name(tree: ast.AST, table: ast.AST) -> str:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is table:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            return ", ".join(t.id for t in targets if isinstance(t, ast.Name))
    return ""


def violations(root: Path) -> list[str]:
    """``file:line`` of every recurrent type string, recurrent param name and type table
    outside ``ops/``."""
    recurrent, types = set(recurrent_types()), set(registered_types())
    params = {get_op(t).param for t in recurrent} - {None}
    found = []
    for path in _sources_outside_ops(root):
        where = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in recurrent:
                found.append(f"{where}:{node.lineno}: names the recurrent type {node.value!r}")
            if isinstance(node, ast.Constant) and node.value in params:
                found.append(f"{where}:{node.lineno}: names the recurrent param {node.value!r}")
            if isinstance(node, (ast.Dict, ast.Set, ast.List, ast.Tuple)):
                items = node.keys if isinstance(node, ast.Dict) else node.elts
                named = [i.value for i in items if isinstance(i, ast.Constant) and i.value in types]
                if len(named) >= 2 and (where, _table_name(tree, node)) not in FORMAT_TABLES:
                    found.append(f"{where}:{node.lineno}: a table of layer types {named}")
    return found


def _without_line(violation: str) -> str:
    where, _line, what = violation.split(":", 2)
    return f"{where}:{what}"


def test_no_recurrent_type_name_nor_type_table_outside_ops():
    """Nothing outside ``ops/`` but the known debt (which may be paid off: then remove it)."""
    assert len(_sources_outside_ops(PACKAGE)) > 20, "is PACKAGE the package?"
    found = violations(PACKAGE)
    assert {_without_line(v) for v in found} <= KNOWN, found


def test_the_recurrent_types_are_the_three_caffe_knows():
    assert set(recurrent_types()) == {"LSTM", "RNN", "Lstm", "LSTMSimple", "GRU"}


def test_the_check_finds_planted_names_and_tables(tmp_path):
    """The check above is not vacuous: the same function finds every kind of thing it forbids,
    in any module outside ``ops/`` (and leaves ``ops/`` and Caffe's V1 enum table alone)."""
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "fine.py").write_text('TYPES = {"LSTM": 1, "RNN": 2}\n')
    (tmp_path / "frontend").mkdir()
    (tmp_path / "frontend" / "upgrade.py").write_text('V1_TYPES = {1: "Concat", 2: "Slice"}\n')
    (tmp_path / "backends").mkdir()
    (tmp_path / "backends" / "writer.py").write_text(
        'WRITERS = {"InnerProduct": print, "Concat": print}\n'           # 1: a dict by type
        'def is_cont(node):\n    return node.op in ("Slice", "Reshape")\n'  # 3: a tuple
        'KIND = "Lstm"\n'                                                  # 4: a recurrent type
        'def rnn(node):\n    return node.op == "RNN"\n'                  # 6: a comparison
        'FIELD = "lstm_param"\n'                                           # 7: a recurrent param
        'STACKED = {"Split", "Concat"}\n'                                  # 8: a set
        'ORDER = ["TanH", "Sigmoid"]\n')                                   # 9: a list
    found = violations(tmp_path)
    assert sorted((line.split(":")[0], int(line.split(":")[1])) for line in found) == [
        ("backends/writer.py", n) for n in (1, 3, 4, 6, 7, 8, 9)], found
