"""docs/layers.md is the op registry's own table (``python -m caffe_lstm.ops.catalog``), and
the README links it."""

from __future__ import annotations

import subprocess
import sys

from caffe_lstm.ops import Op, catalog, get_op, plugins, registered_types
from tests.helpers import ROOT

PAGE = ROOT / "docs" / "layers.md"


def test_the_page_is_what_the_registry_says():
    assert PAGE.read_text(encoding="utf-8") == catalog.render(), \
        "docs/layers.md is stale: run python -m caffe_lstm.ops.catalog docs/layers.md"


def test_every_type_has_one_row_with_its_origin_and_limits():
    rows = [line for line in PAGE.read_text().splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == registered_types()
    for row in rows:
        op = get_op(row.split("`")[1])
        assert op.origin in row and (op.limits or "-") in row


def test_a_new_type_changes_the_page():
    """The sync test can fail: a type registered by a plugin is a row the page lacks."""
    class Swish(Op):
        """y = x·σ(x)"""
        type = "Swish"

        @staticmethod
        def infer(ctx, node, x):
            return (x,)

        @staticmethod
        def numpy(ctx, node, x):
            return (x,)

    with plugins.isolated():
        plugins.load_plugins([Swish])
        text = catalog.render()
    assert text != PAGE.read_text()
    assert "| `Swish` | plugin tests.test_layers_doc." in text  # no origin: the plugin's name
    assert "| yes | no: the plugin" in text


def test_the_module_writes_the_page(tmp_path):
    target = tmp_path / "layers.md"
    done = subprocess.run([sys.executable, "-m", "caffe_lstm.ops.catalog", str(target)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert target.read_text() == catalog.render()


def test_the_readme_links_the_layer_table_and_the_plugin_guide():
    readme = (ROOT / "README.md").read_text()
    assert "docs/layers.md" in readme and "docs/plugins.md" in readme
