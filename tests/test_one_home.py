"""One home per layer type: no table keyed by Caffe layer type outside ``ops/``.

The recurrent layer types are named only by their op classes (everything else asks the
registry for ``recurrent`` metadata), and the Caffe writer has no table of per-type writers:
each op writes its own param message (its ``caffe`` facet).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from caffe_lstm.ops import recurrent_types

PACKAGE = Path(__file__).resolve().parents[1] / "caffe_lstm"


def _sources_outside_ops() -> list[Path]:
    return [path for path in sorted(PACKAGE.rglob("*.py"))
            if "ops" not in path.relative_to(PACKAGE).parts[:1]
            and path.relative_to(PACKAGE).parts[:1] != ("proto",)]


@pytest.mark.parametrize("type_name", recurrent_types())
def test_recurrent_type_names_appear_only_in_ops(type_name):
    pattern = re.compile(rf"""["']{re.escape(type_name)}["']""")
    hits = [f"{path.relative_to(PACKAGE)}:{number}"
            for path in _sources_outside_ops()
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if pattern.search(line)]
    assert hits == [], f"'{type_name}' is named outside ops/: {hits}"


def test_the_recurrent_types_are_the_three_caffe_knows():
    assert set(recurrent_types()) == {"LSTM", "RNN", "Lstm"}


def test_no_writer_table_outside_ops():
    hits = [str(path.relative_to(PACKAGE)) for path in _sources_outside_ops()
            if "PARAM_WRITERS" in path.read_text()]
    assert hits == []


def test_the_grep_finds_a_planted_table(tmp_path):
    """The check above is not vacuous: a type table written outside ops/ is found."""
    planted = tmp_path / "feeds.py"
    planted.write_text('_CONT_BOTTOMS = {("LSTM", 1), ("RNN", 1)}\n')
    pattern = re.compile(r"""["']LSTM["']""")
    assert any(pattern.search(line) for line in planted.read_text().splitlines())
