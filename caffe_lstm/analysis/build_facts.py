"""What a model file says about how it was built: the state mode, opset, shapes, precision,
caffe-lstm's version and the hashes of the prototxt and caffemodel it came from.

Every artifact carries them: an ONNX model as ``metadata_props`` (``caffe_lstm.<fact>``), an
engine as the JSON file ``MODEL.engine.json`` beside it (TensorRT's plans hold no user
metadata: only per-layer ``ILayer.metadata``, readable through the engine inspector of a
deserialized engine, which needs a GPU), a Triton model as its config's ``parameters``.
``run`` takes the state mode from them and refuses a model given with another prototxt or
caffemodel than it was built from; ``inspect`` prints them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping, Sequence

from caffe_lstm.errors import CaffeLstmError, ModelLoadError
from caffe_lstm.ir.graph import Graph
from caffe_lstm.options import State

#: The prefix of the facts' keys in ONNX metadata_props and Triton config parameters.
KEY_PREFIX = "caffe_lstm."


def caffe_lstm_version() -> str:
    """The installed caffe-lstm's version (importlib.metadata, 20 ms: imported when asked)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("caffe-lstm")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB chunks (caffemodels may be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class BuildFacts:
    """How one model file was built. ``state``: the resolved state mode (``zero`` or ``io``)
    and ``state_reason`` (why ``auto`` chose it); ``inputs``: name -> dims as built (-1: a dim
    that varies); ``profiles``: the (min, opt, max) ranges asked for;
    ``prototxt``, ``caffemodel``: the source files' names, with their SHA-256."""

    state: str
    prototxt: str
    prototxt_sha256: str
    caffemodel: str | None
    caffemodel_sha256: str | None
    inputs: dict[str, list] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    profiles: dict[str, list] = field(default_factory=dict)
    opset: int | None = None
    fp16: bool = False
    runtime: str | None = None
    route: str | None = None
    lstm_op: str | None = None
    unroll: bool = False
    state_reason: str = ""
    version: str = field(default_factory=caffe_lstm_version)

    @classmethod
    def of_graph(cls, graph: Graph, state: tuple[State, str], prototxt: Path,
                 weights: Path | None,
                 profiles: Mapping[str, Sequence[Sequence[int]]] | None = None,
                 **facts: Any) -> BuildFacts:
        """The facts of a model of ``graph`` built with ``state`` (the resolved mode and why)
        from ``prototxt`` and ``weights`` (hashed here) with the (min, opt, max) ``profiles``:
        an input dim that differs between min and max is -1."""
        profiles = {name: [list(dims) for dims in triple]
                    for name, triple in (profiles or {}).items()}
        varying = {name: [lo if lo == hi else -1 for lo, hi in zip(low, high)]
                   for name, (low, _, high) in profiles.items()}
        return cls(state=state[0].value, state_reason=state[1], prototxt=prototxt.name,
                   prototxt_sha256=file_sha256(prototxt),
                   caffemodel=None if weights is None else weights.name,
                   caffemodel_sha256=None if weights is None else file_sha256(weights),
                   inputs={v.name: varying.get(v.name, list(v.shape)) for v in graph.inputs},
                   outputs=[v.name for v in graph.outputs], profiles=profiles, **facts)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def as_strings(self) -> dict[str, str]:
        """``caffe_lstm.<fact>`` -> its value (text facts as they are, the rest as JSON), for
        ONNX metadata_props and Triton's string parameters."""
        text = _text_facts()
        return {KEY_PREFIX + name: value if text[name] else json.dumps(value)
                for name, value in self.as_dict().items()}

    @classmethod
    def from_dict(cls, facts: Mapping[str, Any], where: str) -> BuildFacts:
        known = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{name: value for name, value in facts.items() if name in known})
        except TypeError as exc:  # a fact missing: not written by caffe-lstm, or edited
            raise ModelLoadError(f"the build facts are incomplete ({exc})", where,
                                 "build the model again with caffe-lstm") from None

    @classmethod
    def from_strings(cls, props: Mapping[str, str], where: str) -> BuildFacts | None:
        """The facts among ``props`` (see ``as_strings``); None when there are none."""
        text = _text_facts()
        facts = {}
        for key, value in props.items():
            name = key[len(KEY_PREFIX):]
            if key.startswith(KEY_PREFIX) and name in text:
                facts[name] = value if text[name] else _json(value, key, where)
        return cls.from_dict(facts, where) if facts else None

    def check_sources(self, prototxt: Path, weights: Path | None, where: str) -> None:
        """Refuses a prototxt or caffemodel whose bytes are not those the model was built
        from, in one line."""
        for kind, path, name, digest in (
                ("prototxt", prototxt, self.prototxt, self.prototxt_sha256),
                ("caffemodel", weights, self.caffemodel, self.caffemodel_sha256)):
            if path is not None and digest is not None and file_sha256(path) != digest:
                raise ModelLoadError(
                    f"the model was built from another {kind} ({name}, sha256 {digest[:12]}), "
                    f"not {path} (sha256 {file_sha256(path)[:12]})", where,
                    "give the prototxt and weights it was built from, or build it again")

    def lines(self) -> list[str]:
        """The facts as ``inspect`` prints them."""
        shapes = ", ".join(f"{name} {_dims(dims)}" for name, dims in self.inputs.items())
        ranges = ", ".join(f"{name} {':'.join(_dims(d) for d in triple)}"
                           for name, triple in self.profiles.items())
        lines = [f"built by caffe-lstm {self.version}",
                 f"  prototxt  {self.prototxt}  sha256 {self.prototxt_sha256}",
                 f"  caffemodel  {self.caffemodel or '-'}  sha256 {self.caffemodel_sha256 or '-'}",
                 f"  state  {self.state}" + (f" ({self.state_reason})" if self.state_reason
                                              else "")]
        for label, value in (("opset", self.opset), ("runtime", self.runtime),
                             ("route", self.route), ("lstm op", self.lstm_op)):
            if value is not None:
                lines.append(f"  {label}  {value}")
        lines.append(f"  precision  {'fp16' if self.fp16 else 'fp32'}"
                     + ("  unrolled" if self.unroll else ""))
        lines.append(f"  inputs  {shapes}")
        lines.append(f"  outputs  {', '.join(self.outputs)}")
        if ranges:
            lines.append(f"  ranges (min:opt:max)  {ranges}")
        return lines


def model_state(model: str | Path | None, state: State | str | None, prototxt: Path,
                weights: Path | None,
                onnx_metadata: Callable[[Path], Mapping[str, str]] | None = None) -> State:
    """The state the model file ``model`` runs with: the one it was built with (its facts,
    after checking that it was built from ``prototxt`` and ``weights``), else ``state``
    (None: zero); no ``model`` (the net exported in memory): ``state``."""
    facts = None if model is None else checked_facts(model, prototxt, weights, onnx_metadata)
    where = str(model)
    if facts is None:
        return State.ZERO if state is None else State.parse(state, "state")
    if state is not None and State.parse(state, "state") is not State(facts.state):
        raise CaffeLstmError(f"the model was built with state {facts.state!r}, not "
                             f"{State.parse(state, 'state').value!r}", where,
                             "leave out state=: the model's own is taken")
    return State(facts.state)


#: The file suffixes read as built models (``read_facts``), not as Caffe nets.
MODEL_SUFFIXES = (".onnx", ".engine", ".plan")


def checked_facts(model: str | Path, prototxt: Path, weights: Path | None,
                  onnx_metadata: Callable[[Path], Mapping[str, str]] | None = None
                  ) -> BuildFacts | None:
    """``facts_of(model)``, after refusing a ``prototxt`` or ``weights`` other than those the
    model was built from; None for a model without facts (built elsewhere)."""
    facts = facts_of(model, onnx_metadata)
    if facts is not None:
        facts.check_sources(prototxt, weights, str(model))
    return facts


def facts_of(model: str | Path, onnx_metadata: Callable[[Path], Mapping[str, str]] | None
             ) -> BuildFacts | None:
    """The facts of a model file, or None: an ONNX model's (``.onnx``: its metadata_props,
    read by ``onnx_metadata``), an engine's (its sidecar)."""
    model = Path(model)
    if model.suffix == ".onnx" and onnx_metadata is not None:
        return BuildFacts.from_strings(onnx_metadata(model), str(model))
    return read_sidecar(model)


def read_facts(model: str | Path, onnx_metadata: Callable[[Path], Mapping[str, str]]
               ) -> BuildFacts:
    """``facts_of``, and a ModelLoadError for a model without them."""
    facts = facts_of(model, onnx_metadata)
    if facts is None:
        where = ("its metadata_props" if Path(model).suffix == ".onnx"
                 else f"{sidecar_path(model).name} beside it")
        raise ModelLoadError(f"the model has no caffe-lstm build facts (none in {where})",
                             str(model), "build it with caffe-lstm to have them")
    return facts


def write_sidecar(path: Path, facts: BuildFacts) -> None:
    """Writes ``facts`` as the JSON of ``sidecar_path`` (to ``path``: the caller's temporary
    file, renamed onto the sidecar with the engine)."""
    path.write_text(json.dumps(facts.as_dict(), indent=2) + "\n", encoding="utf-8")


def sidecar_path(engine: str | Path) -> Path:
    """Where an engine's facts are: ``MODEL.engine.json`` beside it."""
    return Path(f"{engine}.json")


def read_sidecar(engine: str | Path) -> BuildFacts | None:
    """The facts beside an engine, or None when it has none (built elsewhere)."""
    path = sidecar_path(engine)
    if not path.is_file():
        return None
    try:
        facts = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read the engine's build facts ({exc})", str(path),
                             "remove the file or build the engine again") from None
    if not isinstance(facts, dict):
        raise ModelLoadError("the engine's build facts are not a JSON object", str(path),
                             "remove the file or build the engine again")
    return BuildFacts.from_dict(facts, str(path))


def _text_facts() -> dict[str, bool]:
    """Fact name -> whether it is always a string (kept as it is, not as JSON)."""
    return {f.name: f.type == "str" for f in dataclasses.fields(BuildFacts)}


def _json(value: str, key: str, where: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        raise ModelLoadError(f"the build fact {key} is not JSON ({value[:40]!r})", where,
                             "build the model again with caffe-lstm") from None


def _dims(dims: list) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ")"
