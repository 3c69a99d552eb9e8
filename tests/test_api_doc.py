"""docs/api.md's worked example runs as written, from a copy of the samples (so it stays true)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_worked_example_produces_an_engine(tmp_path, monkeypatch):
    pytest.importorskip("tensorrt_rtx_bindings", reason="the example builds with TensorRT for RTX")
    shutil.copytree(ROOT / "samples" / "captioner", tmp_path / "samples" / "captioner")
    monkeypatch.chdir(tmp_path)
    blocks = _python_blocks(DOC.read_text())
    assert len(blocks) >= 2, "the doc lost its worked example"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # our own document
    engine = tmp_path / "captioner.engine"
    assert engine.stat().st_size > 0
    assert namespace["engine"].plan == engine.read_bytes()


def test_every_public_name_is_documented():
    import caffe_lstm

    text = DOC.read_text()
    missing = [name for name in caffe_lstm.__all__ if name not in text]
    assert missing == []
