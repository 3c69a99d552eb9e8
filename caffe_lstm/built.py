"""What the builders return (``Net.export_onnx``, ``Net.build_engine``): an exported ONNX
model and a built engine, each with its build facts (``analysis.build_facts``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from caffe_lstm.analysis.build_facts import BuildFacts, sidecar_path, write_sidecar
from caffe_lstm.files import atomic_output


@dataclass
class OnnxExport:
    """An exported ONNX model: its ``path`` (None: not written, the bytes are ``model``), the
    external-data file beside it (``data``: initializers of 2 GiB or more, or None), the
    ``opset``, the ``inputs`` and ``outputs`` (name -> dims: ints, or symbolic dims by name)
    and the number of ``nodes`` of the main graph (a Scan body counts as one)."""

    path: Path | None
    data: Path | None
    opset: int
    inputs: dict[str, tuple[int | str, ...]]
    outputs: dict[str, tuple[int | str, ...]]
    nodes: int
    model: bytes | None = None
    #: how it was built (also in the model's metadata_props): docs/api.md, BuildFacts
    facts: BuildFacts | None = None


@dataclass
class Engine:
    """A built engine: the serialized plan and what it was built as (``facts``)."""

    plan: bytes
    runtime: str
    fp16: bool
    inputs: list[str]
    outputs: list[str]
    seconds: float
    facts: BuildFacts | None = None

    def save(self, path: str | Path) -> Engine:
        """Writes the plan to ``path`` and its build facts to ``path.json`` beside it, both
        atomically (the facts are in place before the plan appears); returns the engine."""
        with atomic_output(path) as tmp:
            tmp.write_bytes(self.plan)
            if self.facts is not None:
                with atomic_output(sidecar_path(path)) as tmp_facts:
                    write_sidecar(tmp_facts, self.facts)
        return self
