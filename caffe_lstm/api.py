"""The Python API (docs/api.md): what every ``caffe-lstm`` command does, as calls a notebook
or a build pipeline can make; the CLI is argument parsing over these calls, and printing. User
mistakes raise ``CaffeLstmError`` subclasses (``error.line()``: the one line the CLI prints);
nothing here prints or exits. A ``Net`` is not changed by its methods: each works on its own
copy of the graph (the weight arrays are shared, not copied).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from caffe_lstm.analysis.checks import require_layers, require_weights
from caffe_lstm.analysis.profiles import checked_profiles
from caffe_lstm.analysis.summary import summarize
from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.errors import ModelLoadError
from caffe_lstm.feeds import apply_feeds, random_feeds
from caffe_lstm.files import (arrays_from, nothing_left_on_error,
                              refuse_to_overwrite)
from caffe_lstm.frontend.loader import layer_fillers, load_net
from caffe_lstm.frontend.netstate import LayerSelection
from caffe_lstm.frontend.unknown import SkippedField
from caffe_lstm.ir.graph import Graph, clone_graph
from caffe_lstm.ir.walk import Progress
from caffe_lstm.ops import recurrent_spec
from caffe_lstm.options import (DEFAULT_OPSET, Backend, BuildRequest, LstmOp, Profile, Route,
                                Runtime, State)
from caffe_lstm.passes import DEFAULT_PIPELINE, refuse_hidden_states, run_passes
from caffe_lstm.passes.onnx_forms import engine_rewrite, lstm_op_choices, onnx_rewrite
from caffe_lstm.passes.expose_state import (carried_states, expose_recurrent_state,
                                            needs_state_io, resolve_state, zero_states)


if TYPE_CHECKING:  # loaded on first use (serving, verify, building, writing caffemodels,
    # layouts): a process pays for what it calls, `run` for the reader and numpy's executor only
    from caffe_lstm.analysis.build_facts import BuildFacts
    from caffe_lstm.built import Engine, OnnxExport
    from caffe_lstm.serving.config import Batching
    from caffe_lstm.serving.repository import TritonModel
    from caffe_lstm.verification import Prepared, Verification

#: Input arrays: a mapping by Caffe blob name, or the path of an .npz holding them.
Inputs = Mapping[str, np.ndarray] | str | Path | None


def load(prototxt: str | Path, weights: str | Path | None = None, *,
         outputs: Sequence[str] = (), phase: str = "TEST", stages: Sequence[str] = (),
         shapes: Mapping[str, Sequence[int]] | None = None, allow_unknown_shapes: bool = False,
         plugins: Sequence[str | Path | type] = (), python_path: str | Path | None = None) -> Net:
    """Reads a Caffe net (any version) and its .caffemodel (or None: shapes only) into a
    shaped ``Net``; a train/test net as its deploy graph (``Net.notes`` says what changed).
    ``outputs``: the blobs kept as outputs (layers not needed are dropped); ``phase``, ``stages``:
    Caffe's layer selection; ``shapes``: input name -> dims; ``allow_unknown_shapes``: unshaped
    inputs stay None; ``plugins``, ``python_path``: layer types from outside (docs/plugins.md).
    Unknown fields are skipped unless one could change a converted layer. Raises CaffeLstmError."""
    loaded = load_net(prototxt, weights, selection=LayerSelection(phase, stages=frozenset(stages)),
                      outputs=list(outputs), shapes=shapes, plugins=plugins,
                      allow_unknown_shapes=allow_unknown_shapes, python_path=python_path)
    return Net(loaded.graph, Path(prototxt), None if weights is None else Path(weights),
               loaded.missing_weights, loaded.notes, loaded.skipped)


@dataclass
class Net:
    """A loaded Caffe net: its ``graph`` (format-free IR, recurrent layers intact, shaped),
    the ``prototxt`` and ``weights`` it was read from, the layers the caffemodel has no weights
    for (``missing_weights``), what loading changed (``notes``) and the prototxt's fields the
    schema does not know, skipped (``unknown_fields``: ``frontend.unknown.SkippedField``)."""

    graph: Graph
    prototxt: Path
    weights: Path | None = None
    missing_weights: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unknown_fields: list[SkippedField] = field(default_factory=list)

    @property
    def inputs(self) -> dict[str, tuple[int, ...]]:
        """Net input name -> shape (time-major, as Caffe)."""
        return {v.name: tuple(v.shape) for v in self.graph.inputs}

    @property
    def outputs(self) -> dict[str, tuple[int, ...]]:
        """Net output name -> shape."""
        return {v.name: tuple(v.shape) for v in self.graph.outputs}

    @property
    def recurrent_layers(self) -> list[str]:
        """The layers the rewrite expands (LSTM, RNN, the fork's Lstm)."""
        return [node.name for node in self.graph.nodes if recurrent_spec(node.op)]

    def summary(self, rewritten: bool = False) -> dict[str, Any]:
        """What ``inspect --json`` prints (``rewritten``: after the rewrite, loop bodies nested
        under ``body``): inputs, outputs, layers with their shapes, the recurrent layers."""
        return summarize(self.rewritten().graph if rewritten else self.graph)

    # ---- transformations (each returns a new Net) ----------------------------------------------

    def copy(self) -> Net:
        """A Net with its own graph (the weight arrays are shared, not copied)."""
        return dataclasses.replace(self, graph=clone_graph(self.graph),
                                   missing_weights=list(self.missing_weights))

    def rewritten(self, unroll: bool = False) -> Net:
        """The recurrent rewrite: every recurrent layer becomes primitive layers and one Loop
        (``unroll``: then T step blocks of plain Caffe layers)."""
        net = self.copy()
        _rewrite(net.graph, unroll)
        return net

    def with_state_io(self) -> Net:
        """Caffe's state carry-over between Forward calls made explicit: every LSTM/RNN gets
        inputs ``<layer>/h_0`` (``c_0``) and outputs ``<layer>/h_T`` (``c_T``)."""
        net = self.copy()
        expose_recurrent_state(net.graph)
        return net

    @property
    def needs_state_io(self) -> bool:
        """Whether some recurrent layer's cont could be non-zero at t = 0, so that Caffe would
        carry the previous call's state in (what ``state="auto"`` looks at)."""
        return needs_state_io(self.graph)

    def carried_state(self, previous: Inputs) -> dict[str, np.ndarray]:
        """A ``state="io"`` call's outputs ``<layer>/h_T``, ``c_T`` (a mapping or .npz) as the
        next call's inputs ``<layer>/h_0``, ``c_0``: Caffe's carry-over between calls."""
        return carried_states(self.graph, previous)

    # ---- running ------------------------------------------------------------------------------

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded inputs that fit the net: cont 0 at t = 0 and 1 after, valid Embed ids, others
        N(0, 1); initial states of exposed recurrent layers are zeros."""
        return {**random_feeds(self.graph, seed), **zero_states(self.graph, {})}

    def run(self, inputs: Inputs = None, *, seed: int = 0, original: bool = False,
            state: State | str = "zero", progress: Progress | None = None) -> dict[str, np.ndarray]:
        """One Caffe Forward call on the CPU with numpy; returns every output by name.

        ``inputs``: arrays by Caffe blob name (time-major; dims may differ from the
        prototxt's), or an .npz path; None: random ones from ``seed``. ``original``: the
        recurrent layers from their equations, not the rewritten graph. ``state``: a ``State``
        or its value (io: the states are inputs and outputs, see ``with_state_io``).
        ``progress(phase, done, total)``: told of the layers done and a loop's steps done."""
        graph, feeds = self._stated(state)._fed_graph(inputs, seed)
        return NumpyExecutor(graph if original else _rewrite(graph), progress).run(feeds)

    def run_engine(self, engine: str | Path, inputs: Inputs = None, *, seed: int = 0,
                   state: State | str | None = None, runtime: Runtime | str = "auto"
                   ) -> dict[str, np.ndarray]:
        """Runs a built engine on a GPU (through Polygraphy) on the same inputs ``run`` takes.
        ``state`` None: the engine's own (its build facts; else zero); an engine built from
        other files than this net's is refused."""
        from caffe_lstm.analysis.build_facts import model_state

        state = model_state(engine, state, self.prototxt, self.weights)
        _, feeds = self._stated(state)._fed_graph(inputs, seed)
        return run_engine(engine, feeds, runtime=runtime)

    def prepare(self, inputs: Inputs = None, *, seed: int = 0) -> Prepared:
        """The net shaped for the inputs (random ones from ``seed`` without any) and its
        rewrite, built once: what every column of ``verify`` runs from (a ``Prepared``:
        ``graph``, ``rewritten``, ``feeds``, ``seed``)."""
        from caffe_lstm.verification import Prepared

        graph, feeds = self._fed_graph(inputs, seed)
        return Prepared(graph, _rewrite(clone_graph(graph)), feeds, seed)

    def verify(self, inputs: Inputs = None, *, seed: int = 0, engine: str | Path | None = None,
               runtime: Runtime | str = "auto", fp16: bool = False, tensorrt: bool = True,
               atol: float | None = None, rtol: float | None = None,
               onnxruntime: bool | None = None, progress: Progress | None = None,
               allow_no_signal: bool = False, locate: bool = True,
               prepared: Prepared | None = None) -> Verification:
        """Compares the recurrent equations, output by output, with the rewritten graph, the
        emitted TensorRT network (evaluated on the CPU: no GPU needed), the exported ONNX model
        run by onnxruntime (``onnxruntime``; None: when it imports) and, with ``engine`` on
        a GPU, the engine. ``atol``, ``rtol``: None takes the default of the column's
        precision (``fp16``: float16 ones for the TensorRT columns). ``progress(phase, done,
        total)``: told of each numpy run ("equations: layers", ...). An output whose reference
        carries no signal fails unless ``allow_no_signal``; ``locate``: a failing column is
        searched for the first layer that diverges. ``prepared``: from ``prepare`` (default:
        made here from ``inputs`` and ``seed``). Returns the report (``report.ok``)."""
        from caffe_lstm.analysis.build_facts import checked_facts
        from caffe_lstm.verification.columns import Request, Tolerances
        from caffe_lstm.verification.run import verify_prepared

        if engine is not None:  # an engine built from other files is refused, GPU or not
            checked_facts(engine, self.prototxt, self.weights)
        request = Request(Tolerances(atol, rtol), None if engine is None else Path(engine),
                          Runtime.parse(runtime, "runtime"), fp16, tensorrt, onnxruntime)
        return verify_prepared(prepared or self.prepare(inputs, seed=seed), request,
                               allow_no_signal=allow_no_signal, locate=locate,
                               progress=progress)

    # ---- writing ------------------------------------------------------------------------------

    def to_dot(self, original: bool = False) -> str:
        """The Graphviz DOT text of the rewritten graph (``original``: of the net as loaded)."""
        from caffe_lstm.backends.dot import write_dot

        return write_dot(self.graph if original else self.rewritten().graph)

    def save_caffe(self, outdir: str | Path, *, unroll: bool = False) -> list[Path]:
        """Writes the rewritten net as ``outdir/<stem>.prototxt`` (and ``.caffemodel`` when
        weights were loaded): the loop form with caffe-lstm's Loop layer, or with ``unroll``
        plain upstream Caffe. Nothing is left behind on an error; returns the files written."""
        from caffe_lstm.frontend.caffe_writer import (to_net_parameter, write_caffemodel,
                                                      write_prototxt)

        self._require_layers()
        outdir, stem = Path(outdir), self.prototxt.stem
        graph = self.rewritten(unroll).graph
        definition, blobs = to_net_parameter(graph)
        prototxt, caffemodel = outdir / f"{stem}.prototxt", outdir / f"{stem}.caffemodel"
        refuse_to_overwrite([prototxt, caffemodel], [self.prototxt, self.weights])
        form = "unrolled: plain Caffe" if unroll else "recurrences as caffe-lstm Loop layers"
        with nothing_left_on_error(outdir) as written:
            write_prototxt(prototxt, definition,
                           f"Rewritten by caffe-lstm from {self.prototxt.name} ({form}).")
            written.append(prototxt)
            if self.weights is not None:
                write_caffemodel(caffemodel, blobs, net_name=graph.name)
                written.append(caffemodel)
        return written

    def build_engine(self, path: str | Path | None = None, *, runtime: Runtime | str = "auto",
                     fp16: bool = False, shapes: Mapping[str, Profile] | None = None,
                     state: State | str = "auto", unroll: bool = False, verbosity: int = 0,
                     progress: Callable[[str, int, int], None] | None = None,
                     via: Route | str = "caffe-lstm", opset: int = DEFAULT_OPSET,
                     lstm_op: LstmOp | str = "scan", request: BuildRequest | None = None
                     ) -> Engine:
        """Builds a serialized TensorRT engine with the recurrence inside (one ILoop per layer).

        ``path``: written atomically (None: only returned); ``runtime``, ``state``, ``via``: a
        ``Runtime``, ``State``, ``Route`` or its value; ``fp16``: float16 math, float32 I/O;
        ``shapes``: input name -> (min, opt, max), checked against the layers; ``unroll``: T
        step blocks, no ILoop; ``verbosity``: TensorRT's log level on stderr; ``progress(phase,
        step, steps)``: called during the build; ``opset``, ``lstm_op``: of the model
        ``via="onnx"`` builds (as for ``export_onnx``); ``request``: a ``BuildRequest`` for them.
        """
        from caffe_lstm.backends.tensorrt.build import BuildOptions, build_engine
        from caffe_lstm.backends.tensorrt.onnx_route import build_through_onnx
        from caffe_lstm.backends.tensorrt.runtime import load_runtime
        from caffe_lstm.built import Engine

        r = request or BuildRequest(runtime, via, state, fp16, opset, shapes, (), lstm_op, unroll)
        trt_runtime, onnx = load_runtime(r.runtime), r.route is Route.ONNX
        r.check_outputs(list(self.outputs))
        self._require_weights("build an engine")
        net = self._stated(r.state)
        profiles = checked_profiles(net.graph, r.profiles)
        graph = engine_rewrite(net.graph, onnx, r.unroll, r.lstm_op)
        options = BuildOptions(r.fp16, profiles, verbosity, progress)
        started = time.perf_counter()
        plan = (build_through_onnx(trt_runtime, graph, options, r.opset) if onnx
                else build_engine(trt_runtime, graph, options))
        facts = self._facts(r.state, graph, profiles=profiles, fp16=r.fp16, unroll=r.unroll,
                            runtime=trt_runtime.name, route=r.route.value,
                            **({"opset": r.opset, "lstm_op": r.lstm_op.value} if onnx else {}))
        engine = Engine(plan, trt_runtime.name, r.fp16, [v.name for v in graph.inputs],
                        [v.name for v in graph.outputs], time.perf_counter() - started, facts)
        return engine if path is None else engine.save(path)

    # ---- ONNX: export and onnxruntime -----------------------------------------------------------

    def export_onnx(self, path: str | Path | None, *, opset: int = DEFAULT_OPSET,
                    shapes: Mapping[str, Profile] | None = None,
                    state: State | str = "auto", lstm_op: LstmOp | str = "scan",
                    progress: Progress | None = None, request: BuildRequest | None = None
                    ) -> OnnxExport:
        """Writes the rewritten net as an ONNX model: each recurrent layer one ``Scan``, its
        input projection one MatMul before it, inputs and outputs named after the Caffe blobs.
        ``path``: written atomically (initializers of 2 GiB or more to ``<path>.data``; None:
        only the bytes); ``opset``: 13 to 21; ``shapes``: input name -> (min, opt, max), the
        dims that vary become symbolic; ``state``, ``lstm_op``: a ``State``, ``LstmOp`` or its
        value (native: ONNX's own LSTM/RNN, refused where not exact: ops/recurrent/native.py).
        ``progress(phase, done, total)``: of the layers exported; ``request``: a BuildRequest."""
        from caffe_lstm.backends.onnx.exporter import (build_model, save_model, set_metadata,
                                                       value_dims)
        from caffe_lstm.built import OnnxExport

        r = request or BuildRequest(state=state, opset=opset, profiles=shapes, lstm_op=lstm_op)
        r.check_outputs(list(self.outputs))
        self._require_weights("export to ONNX")
        net = self._stated(r.state)
        profiles = checked_profiles(net.graph, r.profiles)
        graph = onnx_rewrite(net.graph, r.lstm_op)
        # written to a file, the large weights go from the caffemodel's memory map to the file
        # without a copy in between (build_model's stream)
        model, streamed = build_model(graph, r.opset, profiles, stream=path is not None,
                                      progress=progress)
        facts = self._facts(r.state, graph, profiles=profiles, opset=r.opset, lstm_op=r.lstm_op)
        set_metadata(model, facts.as_strings())
        written = path is not None
        return OnnxExport(Path(path) if written else None,
                          save_model(model, path, streamed) if written else None, r.opset,
                          value_dims(model.graph.input), value_dims(model.graph.output),
                          len(model.graph.node), None if written else model.SerializeToString(),
                          facts)

    def run_onnxruntime(self, inputs: Inputs = None, *, seed: int = 0,
                        state: State | str | None = None, model: str | Path | None = None,
                        lstm_op: LstmOp | str = "auto") -> dict:
        """Runs the net with onnxruntime on the inputs ``run`` takes: the model file ``model``
        (``state`` None: its own, as ``run_engine``), or the net exported in memory for these
        inputs' shapes with ``lstm_op`` (auto: ONNX's own LSTM where exact, the fastest)."""
        from caffe_lstm.backends.onnx.exporter import build_model, read_metadata
        from caffe_lstm.analysis.build_facts import model_state
        from caffe_lstm.backends.onnx.runtime import require_onnxruntime, run_model

        require_onnxruntime()
        state = model_state(model, state, self.prototxt, self.weights, read_metadata)
        graph, feeds = self._stated(state)._fed_graph(inputs, seed)
        if model is not None:
            return run_model(Path(model), feeds, str(model))
        self._require_weights("run with onnxruntime")
        # shaped for the feeds; the weights go from the caffemodel's memory map (no protobuf)
        model, streamed = build_model(onnx_rewrite(graph, lstm_op), DEFAULT_OPSET, {}, stream=True)
        return run_model(model, feeds, streamed=streamed)

    def onnx_lstm_ops(self, lstm_op: LstmOp | str = "auto", *, state: State | str = "auto") -> dict:
        """How the ONNX export with ``lstm_op`` writes each recurrent layer: name -> (``NATIVE``
        or ``SCAN``; why, for auto's Scans), passes/onnx_forms.py."""
        return lstm_op_choices(self._stated(state).graph, lstm_op)

    def to_triton(self, repository: str | Path, *, backend: Backend | str = "python",
                  name: str | None = None, max_batch: int = 8, instances: int = 1,
                  cont_from_start: bool = False, batch_axes: Mapping[str, int] | None = None,
                  batching: Batching | None = None, opset: int = DEFAULT_OPSET,
                  runtime: Runtime | str = "auto", state: State | str = "auto",
                  lstm_op: LstmOp | str = "scan") -> TritonModel:
        """Writes the Triton model ``repository/<name>`` (default: the prototxt's stem):
        ``config.pbtxt`` and ``1/model.plan`` (``backend="tensorrt"``), ``1/model.onnx``
        (``"onnxruntime"``) or ``1/model.py`` + ``model.onnx`` (``"python"``; ``lstm_op`` as
        for ``export_onnx``); tensors batch-major, ``state`` as Triton sequence state;
        ``batch_axes``: input -> its batch axis; ``batching``: a ``serving.config.Batching``."""
        from caffe_lstm.serving.config import Batching
        from caffe_lstm.serving.repository import TritonOptions, write_repository

        self._require_weights("write a Triton model")
        net = self._stated(State.parse(state, "state"))
        options = TritonOptions(backend, max_batch, instances, cont_from_start,
                                dict(batch_axes or {}), batching or Batching(), opset,
                                Runtime.parse(runtime, "runtime"), lstm_op)
        plan = options.backend is Backend.TENSORRT  # else model.onnx
        facts = self._facts(state, net.graph, **({"runtime": options.runtime.value} if plan
                                                 else {"opset": opset}))
        return write_repository(net.graph, repository, name or self.prototxt.stem, options,
                                facts.as_strings())

    # ---- weights ------------------------------------------------------------------------------

    def export_weights(self, layer: str, layout: str) -> dict[str, np.ndarray]:
        """One LSTM layer's weights in another framework's layout (``caffe``, ``pytorch``,
        ``onnx``, ``keras``, ``keras-cudnn``, ``cudnn``, ``tf``), under its own array names."""
        from caffe_lstm.layouts import export_layer, layout_layer

        node = layout_layer(self.graph, layer, str(self.prototxt))
        return export_layer(node, layout, str(self.weights))

    def import_weights(self, layer: str, layout: str, arrays: Inputs, output: str | Path) -> int:
        """Writes ``output``, a copy of the loaded caffemodel with ``layer``'s blobs replaced
        by ``arrays`` (by name, in ``layout``; an .npz path or a mapping). Two-bias layouts are
        summed into Caffe's one bias. Returns the number of other layers copied."""
        from caffe_lstm.frontend.caffemodel_edit import write_with_layer_replaced
        from caffe_lstm.layouts import import_layer, layout_layer

        node = layout_layer(self.graph, layer, str(self.prototxt))
        if self.weights is None:
            raise ModelLoadError("no caffemodel was loaded to import weights into",
                                 str(self.prototxt), "load the net with its weights")
        source = f"arrays {arrays}" if isinstance(arrays, (str, Path)) else "the arrays"
        blobs = import_layer(node, layout, arrays_from(arrays), source)
        return write_with_layer_replaced(output, self.weights, self.prototxt, self.graph, node,
                                         blobs)

    def write_synthetic_weights(self, output: str | Path, seed: int = 0, *,
                                fillers: bool = False) -> int:
        """Writes ``weights init``'s weights (docs/api.md) to ``output``; returns the layers."""
        from caffe_lstm.backends.unit_scale import unit_scaled
        from caffe_lstm.frontend.caffe_writer import write_caffemodel
        from caffe_lstm.synthetic import synthetic_weights

        self._require_layers()
        drawn = synthetic_weights(self.graph, seed, fillers=layer_fillers(self.prototxt))
        # without blobs there is nothing to scale: no forward, no inputs allocated
        layers = drawn if fillers or not drawn else unit_scaled(
            self.graph, drawn, self.random_inputs(seed), seed)
        write_caffemodel(output, layers, net_name=self.graph.name)
        return len(layers)

    def _stated(self, state: State | str) -> Net:
        """A copy, with the states as inputs and outputs when ``state`` (resolved) is io."""
        if State.parse(state, "state") is State.IO:
            refuse_hidden_states(self.graph)  # asked for: no layer may keep its states inside
        state, _ = resolve_state(self.graph, state)
        return self.with_state_io() if state is State.IO else self.copy()

    def _facts(self, state: State | str, graph: Graph, **facts: Any) -> BuildFacts:
        from caffe_lstm.analysis.build_facts import BuildFacts

        return BuildFacts.of_graph(graph, resolve_state(self.graph, state), self.prototxt,
                                   self.weights, **facts)  # of a model of ``graph``

    def _fed_graph(self, inputs: Inputs, seed: int) -> tuple[Graph, dict[str, np.ndarray]]:
        """A copy of the graph shaped for the inputs, and the inputs (random without any); a
        net with nothing to compute is refused first (what every run starts from)."""
        self._require_layers()
        net = self.copy()
        if inputs is None:
            return net.graph, net.random_inputs(seed)
        source = str(inputs) if isinstance(inputs, (str, Path)) else "the inputs"
        feeds = arrays_from(inputs)
        return net.graph, apply_feeds(net.graph, {**zero_states(net.graph, feeds), **feeds},
                                      source)

    def _require_layers(self) -> None:  # nothing to compute: refused by every producer
        require_layers(self.graph, str(self.prototxt))

    def _require_weights(self, purpose: str) -> None:  # and something to compute
        self._require_layers()
        require_weights(self.missing_weights, str(self.weights or self.prototxt), purpose)


def run_engine(engine: str | Path, inputs: Mapping[str, np.ndarray], *,
               runtime: Runtime | str = "auto") -> dict[str, np.ndarray]:
    """Runs a serialized engine once on a GPU, through NVIDIA Polygraphy's TrtRunner; inputs
    it lacks (the states of ``state="io"``) are zeros. Needs ``pip install 'caffe-lstm[gpu]'``."""
    from caffe_lstm.backends.tensorrt.engine import run_engine as run
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    return run(load_runtime(runtime), engine, inputs)


def build_facts(model: str | Path) -> BuildFacts:
    """How a model file was built (its metadata_props, an engine's ENGINE.json), or raises."""
    from caffe_lstm.analysis.build_facts import read_facts
    from caffe_lstm.backends.onnx.exporter import read_metadata

    return read_facts(model, read_metadata)


def _rewrite(graph: Graph, unroll: bool = False) -> Graph:
    """The rewrite in place on a graph this module owns."""
    return run_passes(graph, DEFAULT_PIPELINE + (("unroll",) if unroll else ()))
