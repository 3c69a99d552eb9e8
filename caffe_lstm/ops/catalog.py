"""docs/layers.md from the op registry: every layer type, where it comes from, its facets and
its limits, in one table.

    python -m caffe_lstm.ops.catalog docs/layers.md     # rewrite the page
    python -m caffe_lstm.ops.catalog                    # print it

``tests/test_layers_doc.py`` checks that the page is what this module writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from caffe_lstm.ops.registry import Op, get_op, has_facet, registered_types

HEADER = """# Layer types

Every layer type caffe-lstm reads, generated from the op registry by
`python -m caffe_lstm.ops.catalog docs/layers.md` (`tests/test_layers_doc.py` keeps this page in
sync). **Origin** is where the semantics come from: BVLC Caffe, or a fork's repository and the
commit its source was read at. The facet columns say how each backend computes the layer:
**numpy** runs it (`run`, `verify`), **TensorRT** builds it (`convert`), **ONNX** exports it
(`export`), **Caffe** writes it back (`rewrite`). "via the rewrite" means the layer is first
replaced by primitive layers (a recurrent layer by a loop), which the backend then takes.
`Input` layers become the net's inputs and are not listed.

A layer type missing here can be added without changing caffe-lstm: a plugin
([plugins.md](plugins.md)) defines it with the same facets, and Caffe's `Python` layer runs
with numpy given the directory of its module (`python_path`, see plugins.md). The facets are
the contract of [ops.md](ops.md).

| Type | Origin | numpy | TensorRT | ONNX | Caffe | Limits |
|---|---|---|---|---|---|---|
"""


def render() -> str:
    """The page: HEADER, then one row per registered type (sorted)."""
    rows = [_row(get_op(op_type)) for op_type in registered_types()]
    return HEADER + "".join(rows)


def _row(op: type[Op]) -> str:
    cells = [f"`{op.type}`", op.origin, _numpy(op), _backend(op, "tensorrt"),
             _backend(op, "onnx"), _caffe(op), op.limits or "-"]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |\n"


def _numpy(op: type[Op]) -> str:
    return "yes, given python_path" if op.type == "Python" else "yes"


def _backend(op: type[Op], facet: str) -> str:
    """yes; via the rewrite (the op expands); or no, with the op's reason."""
    if has_facet(op, facet):
        return "yes"
    if has_facet(op, "expand"):
        return "via the rewrite"
    return f"no: {getattr(op, f'{facet}_missing_reason')}"


def _caffe(op: type[Op]) -> str:
    return "via the rewrite" if has_facet(op, "expand") else "yes"


def main(argv: list[str]) -> int:
    text = render()
    if not argv:
        sys.stdout.write(text)
        return 0
    Path(argv[0]).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
