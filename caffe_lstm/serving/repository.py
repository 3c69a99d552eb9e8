"""Writing a Triton model repository: ``REPO/NAME/config.pbtxt`` and ``REPO/NAME/1/`` with the
model file (``model.plan``, ``model.onnx``, or ``model.py`` + ``model.onnx``).

The net's tensors are made batch-major first (passes/batch_major.py): Triton with
``max_batch_size > 0`` puts the batch on dim 0 of every input, output and state. Carried
states become Triton sequence state; the config is checked against Triton's schema and the
model file's own I/O before anything is written, and the model folder appears whole (written
in a hidden folder of REPO, then renamed) or not at all.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from caffe_lstm.analysis.build_facts import BuildFacts, sidecar_path, write_sidecar
from caffe_lstm.analysis.profiles import checked_profiles
from caffe_lstm.errors import CaffeLstmError, OutputError, ShapeError
from caffe_lstm.options import DEFAULT_OPSET, Backend, LstmOp, Runtime
from caffe_lstm.ir.graph import Graph, Value
from caffe_lstm.ops import recurrent_spec
from caffe_lstm.ops.recurrent import read_cont
from caffe_lstm.passes.onnx_forms import onnx_rewrite
from caffe_lstm.passes.batch_major import find_batch_axes, make_batch_major
from caffe_lstm.serving.check import check_network_io, check_onnx_io
from caffe_lstm.serving.config import (MODEL_FILES, Batching, ModelSpec, State,
                                       Tensor, check_structure, model_config, parse_with_triton,
                                       to_pbtxt)

#: The version folder every repository gets.
VERSION = "1"
#: The Python backend's model, shipped in this package and written as ``1/model.py``.
PYTHON_MODEL = "python_model.py"

Profile = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True)
class TritonOptions:
    """How to serve: the backend, batching, instances and the sequence batcher's options.

    Attributes:
        backend: ``python``, ``onnxruntime`` or ``tensorrt`` (a ``Backend`` or its value).
        max_batch: Triton's max_batch_size (the batch range of the model file is 1..max);
            0: no batching, the tensors keep Caffe's layout and their full dims (a net whose
            layers fix N).
        instances: model instances (``instance_group`` count).
        cont_from_start: Caffe's cont comes from Triton's START flag (1 step per request).
        batch_axes: input name -> its batch axis, where the net leaves it ambiguous.
        batching: the sequence (or dynamic) batcher's options.
        opset: the ONNX opset of ``model.onnx``.
        runtime: the TensorRT runtime building ``model.plan`` (``auto``, ``tensorrt``,
            ``tensorrt-rtx``).
        lstm_op: how ``model.onnx`` writes each recurrent layer (an ``LstmOp`` or its value,
            as for ``export_onnx``); ``model.plan`` takes ``scan`` only.
    """

    backend: Backend | str = Backend.PYTHON
    max_batch: int = 8
    instances: int = 1
    cont_from_start: bool = False
    batch_axes: Mapping[str, int] = field(default_factory=dict)
    batching: Batching = field(default_factory=Batching)
    opset: int = DEFAULT_OPSET
    runtime: Runtime | str = Runtime.AUTO
    lstm_op: LstmOp | str = LstmOp.SCAN

    def __post_init__(self) -> None:  # a value becomes its member; another one is refused
        object.__setattr__(self, "backend", Backend.parse(self.backend, "backend"))
        object.__setattr__(self, "lstm_op", LstmOp.parse(self.lstm_op, "lstm_op"))


@dataclass
class Prepared:
    """The graph as the model file computes it (rewritten, batch-major, shaped at the
    maximum batch), the profile of every input, and the config's description of it."""

    graph: Graph
    profiles: dict[str, Profile]
    spec: ModelSpec


@dataclass
class TritonModel:
    """A model written into a repository.

    Attributes:
        path: ``REPO/NAME``.
        config: the text of ``config.pbtxt``.
        spec: what the config declares (inputs, outputs, states, batching).
        files: the files written, relative to ``path``.
        schema_checked: whether Triton's own schema (tritonclient) parsed the config.
    """

    path: Path
    config: str
    spec: ModelSpec
    files: list[str]
    schema_checked: bool


def prepare(graph: Graph, name: str, options: TritonOptions,
            parameters: Mapping[str, str] | None = None) -> Prepared:
    """The batch-major, rewritten copy-free form of ``graph`` (changed in place) and the
    config's ModelSpec (``parameters``: its string parameters, the build facts). ``graph``
    has its carried states exposed (``--state io``) when the net
    carries state between calls; each exposed recurrent layer's states become sequence state.

    Raises:
        CaffeLstmError: bad options, an input whose batch axis is unknown, a cont that Triton
            cannot feed, shapes the layers refuse at batch 1 or at the maximum.
    """
    _check_options(name, options)
    states = _state_pairs(graph)
    conts = _cont_inputs(graph) if options.cont_from_start else []
    if options.cont_from_start and not states:
        raise CaffeLstmError("cont_from_start: the net carries no state between calls", name,
                             "serve it without cont_from_start")
    if options.cont_from_start and len(conts) != 1:
        raise CaffeLstmError(
            f"cont_from_start: the recurrent layers read {len(conts)} cont net inputs "
            f"({', '.join(conts) or 'none'}), Triton fills one from START", name,
            "serve it without cont_from_start (clients send cont)")
    if options.max_batch == 0 and conts:
        raise CaffeLstmError("cont_from_start needs batching: without it Triton's control "
                             "tensor is [1], Caffe's cont (T, N)", name,
                             "serve it with batching (max_batch=8, say), or clients send cont")
    profiles = _batch_major(graph, options) if options.max_batch else {}
    skip = 1 if options.max_batch else 0  # Triton's dims leave out the batch dim
    shapes = {v.name: tuple(v.shape[skip:]) for v in (*graph.inputs, *graph.outputs)}
    for cont in conts:
        if shapes[cont] != (1,):
            raise CaffeLstmError(
                f"cont_from_start needs one step per request, net input '{cont}' is "
                f"(N, {', '.join(map(str, shapes[cont]))}) batch-major", name,
                f"shape the net for one step (its time axis 1, e.g. shapes={{{cont!r}: (1, N)}})")
    spec = ModelSpec(
        name=name, backend=options.backend, max_batch=options.max_batch,
        instances=options.instances,
        inputs=tuple(Tensor(v.name, shapes[v.name]) for v in graph.inputs
                     if v.name not in conts and v.name not in dict(states)),
        outputs=tuple(Tensor(v.name, shapes[v.name]) for v in graph.outputs
                      if v.name not in dict(states).values()),
        states=tuple(State(i, o, shapes[i]) for i, o in states),
        cont_controls=tuple(Tensor(c, shapes[c]) for c in conts),
        batching=options.batching, parameters=tuple((parameters or {}).items()))
    onnx_rewrite(graph, options.lstm_op)  # with scan, the rewrite model.plan is built from too
    return Prepared(graph, profiles, spec)


def _batch_major(graph: Graph, options: TritonOptions) -> dict[str, Profile]:
    """N first on every input and output (passes/batch_major.py), checked at batch 1 and at
    the maximum; returns the profile of every input (batch 1..max)."""
    make_batch_major(graph, find_batch_axes(graph, options.batch_axes))
    try:  # every layer takes batch 1 and the maximum; left at the maximum (OPT)
        return checked_profiles(graph, {v.name: _batch_profile(v, options.max_batch)
                                        for v in graph.inputs})
    except ShapeError as exc:
        raise ShapeError(f"the net does not take every batch size from 1 to "
                         f"{options.max_batch}: {exc.what}", exc.where,
                         "serve it with a max_batch it takes") from None


def write_repository(graph: Graph, repository: str | Path, name: str,
                     options: TritonOptions, parameters: Mapping[str, str] | None = None
                     ) -> TritonModel:
    """Writes ``repository/name`` for ``graph`` (see ``prepare``); an existing model folder of
    that name (one with a config.pbtxt) is replaced, anything else there is refused.
    ``parameters``: the build facts, as the config's string parameters and, in model.onnx,
    as its metadata_props.

    Raises:
        CaffeLstmError: as ``prepare``; a config that Triton's schema or the model file
            refuses; an output folder that cannot be written.
    """
    repository = Path(repository)
    target = repository / name
    _check_target(target)
    prepared = prepare(graph, name, options, parameters)
    config = model_config(prepared.spec)
    text = to_pbtxt(config)
    where = str(target / "config.pbtxt")
    check_structure(config, where)
    schema_checked = parse_with_triton(text, where)
    model_file = f"{VERSION}/{MODEL_FILES[options.backend]}"
    writer = _model_writer(prepared, options, str(target / model_file))
    facts = _plan_facts(options, parameters, where)
    files = ["config.pbtxt", model_file]
    if options.backend == "python":
        files.append(f"{VERSION}/model.py")
    if facts is not None:
        files.append(str(sidecar_path(model_file)))
    with _staged_folder(repository, target) as staging:
        (staging / "config.pbtxt").write_text(text, encoding="utf-8")
        (staging / VERSION).mkdir()
        writer(staging / model_file)
        if options.backend == "python":
            (staging / VERSION / "model.py").write_text(python_model_source(), "utf-8")
        if facts is not None:
            write_sidecar(sidecar_path(staging / model_file), facts)
    return TritonModel(target, text, prepared.spec, files, schema_checked)


def _plan_facts(options: TritonOptions, parameters: Mapping[str, str] | None, where: str
                ) -> BuildFacts | None:
    """The build facts for ``model.plan.json`` beside the plan, as beside any engine (a plan
    holds none that can be read without a GPU; model.onnx holds its own): what ``inspect`` and
    ``run --engine`` read. Triton loads model.plan only and leaves the file alone."""
    if options.backend != "tensorrt" or not parameters:
        return None
    return BuildFacts.from_strings(parameters, where)


def python_model_source() -> str:
    """The Python backend's model.py (this package's ``python_model.py``)."""
    return resources.files("caffe_lstm.serving").joinpath(PYTHON_MODEL).read_text("utf-8")


# ---- options and the net -------------------------------------------------------------------------


def _check_options(name: str, options: TritonOptions) -> None:
    def refuse(what: str, hint: str) -> None:
        raise CaffeLstmError(what, f"model '{name}'", hint)

    if not name or "/" in name or name.startswith("."):
        refuse("a model name must be non-empty, without '/', not starting with '.'",
               "choose another name")
    if options.backend == Backend.TENSORRT and options.lstm_op != LstmOp.SCAN:
        refuse(f"lstm_op={options.lstm_op.value!r} is for model.onnx, and the tensorrt "
               "backend writes model.plan", "give lstm_op='scan', or serve with the "
               "onnxruntime or python backend")
    if options.max_batch < 0 or options.instances < 1:
        refuse("max_batch must be at least 0 and instances at least 1",
               "give other numbers (max_batch 0: no batching)")
    batching = options.batching
    if any(not 1 <= size <= options.max_batch for size in batching.preferred_batch_sizes):
        refuse(f"preferred batch sizes {list(batching.preferred_batch_sizes)} must lie in "
               f"1..max_batch {options.max_batch}", "give sizes up to max_batch")
    if batching.max_queue_delay_us < 0 or batching.max_sequence_idle_us < 1 or \
            (batching.max_candidate_sequences is not None and
             batching.max_candidate_sequences < 1):
        refuse("the queue delay must be >= 0, the idle time and candidate sequences >= 1",
               "give other numbers")


def _state_pairs(graph: Graph) -> list[tuple[str, str]]:
    """(state input, state output) of every recurrent layer with exposed states whose
    initial states are net inputs."""
    inputs = {id(v) for v in graph.inputs}
    pairs = []
    for node in graph.nodes:
        spec = recurrent_spec(node.op)
        if spec is None or not spec.exposable or not spec.is_exposed(node):
            continue
        count = len(spec.states)
        for initial, final in zip(node.inputs[-count:], node.outputs[-count:]):
            if id(initial) in inputs:
                pairs.append((initial.name, final.name))
    return pairs


def _cont_inputs(graph: Graph) -> list[str]:
    """The net inputs that recurrent layers read as their cont, once each."""
    inputs = {id(v): v for v in graph.inputs}
    names: list[str] = []
    for node in graph.nodes:
        cont = read_cont(node)
        if cont is not None and id(cont.value) in inputs and cont.value.name not in names:
            names.append(cont.value.name)
    return names


def _batch_profile(value: Value, max_batch: int) -> Profile:
    rest = tuple(value.shape[1:])
    return (1, *rest), (max_batch, *rest), (max_batch, *rest)


# ---- model files ---------------------------------------------------------------------------------


def _model_writer(prepared: Prepared, options: TritonOptions, where: str):
    """Builds the model file in memory, checks it against the config, and returns the
    function that writes it (called inside the staging folder)."""
    if options.backend == "tensorrt":
        plan = _tensorrt_plan(prepared, options, where)
        return lambda path: path.write_bytes(plan)
    from caffe_lstm.backends.onnx.exporter import build_model, save_model, set_metadata

    model, streamed = build_model(prepared.graph, options.opset, prepared.profiles, stream=True)
    set_metadata(model, dict(prepared.spec.parameters))
    check_onnx_io(prepared.spec, model, where)
    return lambda path: save_model(model, path, streamed)


def _tensorrt_plan(prepared: Prepared, options: TritonOptions, where: str) -> bytes:
    """The engine; its network and profile are checked against the config first."""
    from caffe_lstm.backends.tensorrt.build import serialize

    runtime, builder, network, build, keep = tensorrt_network(prepared, options.runtime)
    check_network_io(prepared.spec, network, prepared.profiles, where)
    plan = serialize(runtime, builder, network, build)
    del keep  # the weights may go once the build has returned
    return plan


def tensorrt_network(prepared: Prepared, runtime: str = "auto") -> tuple[Any, ...]:
    """The TensorRT network ``model.plan`` is built from: (runtime, builder, network, build
    options, the emission context that keeps the weights alive)."""
    from caffe_lstm.backends.tensorrt.build import BuildOptions, emit
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    trt_runtime = load_runtime(runtime)
    build = BuildOptions(shapes=prepared.profiles)
    builder, network, ctx = emit(trt_runtime, prepared.graph, build)
    return trt_runtime, builder, network, build, ctx


# ---- the folder ----------------------------------------------------------------------------------


def _check_target(target: Path) -> None:
    if target.exists() and not (target / "config.pbtxt").is_file():
        raise OutputError("the model folder exists and is not a Triton model (no config.pbtxt)",
                          str(target), "choose another repository or model name")


@contextlib.contextmanager
def _staged_folder(repository: Path, target: Path) -> Iterator[Path]:
    """Yields a hidden folder in ``repository`` that becomes ``target`` on success (an older
    model folder there is replaced); on an error nothing is left, not even the repository
    folder when it was made here."""
    created = [p for p in (repository, *repository.parents) if not p.exists()]
    try:
        repository.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=repository))
    except OSError as exc:
        raise OutputError(f"cannot create the model repository ({exc.strerror})",
                          str(repository), "choose a folder that can be written") from None
    try:
        os.chmod(staging, 0o777 & ~_umask())
        try:
            yield staging
        except OSError as exc:  # writing the files: a full disk, a quota, the user's to fix
            raise OutputError(f"cannot write the model ({exc.strerror})", str(target),
                              "check the free space and the permissions") from None
        _swap_in(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in created:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _swap_in(staging: Path, target: Path) -> None:
    """Renames ``staging`` to ``target``; an older ``target`` is moved aside first and removed
    after (a server polling the repository never sees a half-written model)."""
    old = None
    try:
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
            os.replace(target, old / target.name)
        os.replace(staging, target)
    except OSError as exc:
        if old is not None and not target.exists():
            os.replace(old / target.name, target)
        raise OutputError(f"cannot write the model folder ({exc.strerror})", str(target),
                          "check the permissions and free space") from None
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

