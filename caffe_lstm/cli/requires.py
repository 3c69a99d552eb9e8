"""What some commands check before any work (a runtime, a program), and the DOT file writer."""

from __future__ import annotations

from pathlib import Path

from caffe_lstm.files import atomic_output


def require_tensorrt(runtime: str = "auto") -> str:
    """Imports the TensorRT runtime ``runtime`` names (``auto``, ``tensorrt``,
    ``tensorrt-rtx``) and returns its name; a one-line error with the install hint when it
    cannot be imported (checked before any work)."""
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    return load_runtime(runtime).name


def require_graphviz() -> str:
    """The path of Graphviz's ``dot`` program (needed to render SVG), or a one-line error."""
    from caffe_lstm.backends.dot import graphviz_program

    return graphviz_program()


def require_onnxruntime() -> str:
    """onnxruntime's version; a one-line error with the install hint when it cannot be
    imported (checked before any work)."""
    from caffe_lstm.backends.onnx.runtime import require_onnxruntime as require

    return require()


def write_dot_file(text: str, path: str | Path, svg: Path | None = None) -> None:
    """Writes DOT ``text`` to ``path`` atomically and, with ``svg``, renders it there with
    Graphviz."""
    from caffe_lstm.backends.dot import render_svg

    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    if svg is not None:
        render_svg(Path(path), svg)
