"""The Python API: what every ``caffe-lstm`` command does, as calls a notebook or a build
pipeline can make (the CLI is argument parsing over these calls, and printing).

    import caffe_lstm
    net = caffe_lstm.load("captioner.prototxt", "captioner.caffemodel")
    outputs = net.run(seed=0)                     # the rewritten graph, with numpy
    report = net.verify(seed=0)                   # equations vs rewrite vs TensorRT network
    engine = net.build_engine("captioner.engine", fp16=True)

User mistakes raise ``caffe_lstm.CaffeLstmError`` subclasses (``error.line()`` is the one-line
message the CLI prints); nothing here prints or exits. A ``Net`` is not changed by its methods:
each works on its own copy of the graph (weights are shared, not copied). See docs/api.md.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from caffe_lstm.analysis.profiles import checked_profiles
from caffe_lstm.analysis.summary import summarize
from caffe_lstm.compare import Comparison, compare_outputs
from caffe_lstm.errors import CaffeLstmError, ModelLoadError
from caffe_lstm.feeds import apply_feeds, random_feeds
from caffe_lstm.files import (atomic_output, load_npz, maybe_atomic, nothing_left_on_error,
                              refuse_to_overwrite)
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.frontend.netstate import LayerSelection
from caffe_lstm.frontend.unknown import SkippedField
from caffe_lstm.ir.graph import Graph, Node, clone_graph
from caffe_lstm.ops import get_op, has_facet, recurrent_spec
from caffe_lstm.options import DEFAULT_OPSET, LstmOp, Profile, Route, Runtime, State
from caffe_lstm.passes import DEFAULT_PIPELINE, run_passes
from caffe_lstm.passes.expose_state import expose_recurrent_state, needs_state_io, zero_states

#: Input arrays: a mapping by Caffe blob name, or the path of an .npz holding them.
Inputs = Mapping[str, np.ndarray] | str | Path | None



def load(prototxt: str | Path, weights: str | Path | None = None, *,
         outputs: Sequence[str] = (), phase: str = "TEST", stages: Sequence[str] = (),
         shapes: Mapping[str, Sequence[int]] | None = None,
         allow_unknown_shapes: bool = False) -> Net:
    """Reads a Caffe net (and its trained weights) into a shaped ``Net``.

    A train/test net is read as its deploy graph: loss, accuracy and Silence layers are dropped
    and data layers become net inputs (``Net.notes`` says what changed). Fields the schema does
    not know are skipped (``Net.unknown_fields``) unless one could change a converted layer.

    Args:
        prototxt: the net definition (any Caffe version: V0/V1 layers are upgraded).
        weights: the .caffemodel, or None (shapes are still known; running needs weights).
        outputs: blob names to make the outputs; layers not needed for them are dropped
            (how to cut off a post-processing layer). Empty: Caffe's own outputs (a train net:
            its predictions).
        phase: ``"TEST"`` or ``"TRAIN"``, selecting layers by their include/exclude rules.
        stages: stage names, selecting layers as Caffe's NetState does.
        shapes: net input name -> dims, replacing the prototxt's shape or giving one a data
            layer leaves open (``--shape NAME:DIMS``).
        allow_unknown_shapes: let net inputs stay unshaped (their values' shapes are None),
            as ``inspect`` shows them; otherwise an unshaped input is an error.

    Raises:
        CaffeLstmError: an unreadable or invalid net or caffemodel (one-line message).
    """
    selection = LayerSelection(phase=phase, stages=frozenset(stages))
    loaded = load_net(prototxt, weights, selection=selection, outputs=list(outputs),
                      shapes=shapes, allow_unknown_shapes=allow_unknown_shapes)
    return Net(loaded.graph, Path(prototxt), None if weights is None else Path(weights),
               loaded.missing_weights, loaded.notes, loaded.skipped)


@dataclass
class Net:
    """A loaded Caffe net: its graph (format-free IR) and where it came from.

    Attributes:
        graph: the net as loaded (recurrent layers intact), shapes inferred.
        prototxt: the net definition it was read from.
        weights: the caffemodel it was read with, or None.
        missing_weights: layers that need weights the caffemodel lacks.
        notes: what loading changed, one line each (a train net's dropped training layers,
            its data layers read as inputs).
        unknown_fields: the fields, enum values and messages of the prototxt that the schema
            does not know and that were skipped (``frontend.unknown.SkippedField``).
    """

    graph: Graph
    prototxt: Path
    weights: Path | None = None
    missing_weights: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unknown_fields: list[SkippedField] = field(default_factory=list)

    # ---- what it is --------------------------------------------------------------------------

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
        """What ``inspect --json`` prints: inputs, outputs, layers with shapes and blob shapes,
        the recurrent layers; ``rewritten``: of the graph after the rewrite (loop bodies nested
        under ``body``)."""
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
        run_passes(net.graph, DEFAULT_PIPELINE + (("unroll",) if unroll else ()))
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
        carry the previous call's state in (what ``--state auto`` looks at)."""
        return needs_state_io(self.graph)

    # ---- running ------------------------------------------------------------------------------

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded inputs that fit the net: cont 0 at t = 0 and 1 after, valid Embed ids, others
        N(0, 1); initial states of exposed recurrent layers are zeros."""
        return {**random_feeds(self.graph, seed), **zero_states(self.graph, {})}

    def run(self, inputs: Inputs = None, *, seed: int = 0, original: bool = False,
            state: State | str = "zero") -> dict[str, np.ndarray]:
        """One Caffe Forward call on the CPU with numpy; returns every output by name.

        Args:
            inputs: arrays by Caffe blob name (time-major), or an .npz path; None: random ones
                from ``seed``. Dims may differ from the prototxt's (another T or N).
            original: execute the recurrent layers from their equations instead of the
                rewritten graph.
            state: ``"zero"`` (start from zero state), ``"io"`` (states are inputs and
                outputs, see ``with_state_io``) or ``"auto"`` (io when a cont could be 1 at
                t = 0); a ``State`` or its value.
        """
        net = self._stated(state)
        graph, feeds = net._fed_graph(inputs, seed)
        return _executor(graph if original else _rewrite(graph)).run(feeds)

    def run_engine(self, engine: str | Path, inputs: Inputs = None, *, seed: int = 0,
                   state: State | str = "zero", runtime: Runtime | str = "auto"
                   ) -> dict[str, np.ndarray]:
        """Runs a built engine on a GPU (through Polygraphy) on the same inputs ``run`` takes."""
        _, feeds = self._stated(state)._fed_graph(inputs, seed)
        return run_engine(engine, feeds, runtime=runtime)

    def verify(self, inputs: Inputs = None, *, seed: int = 0, engine: str | Path | None = None,
               runtime: Runtime | str = "auto", fp16: bool = False, tensorrt: bool = True,
               atol: float = 1e-5, rtol: float = 1e-4,
               onnxruntime: bool | None = None) -> Verification:
        """Compares the recurrent equations, output by output, with the rewritten graph, the
        emitted TensorRT network (evaluated on the CPU: no GPU needed), the exported ONNX model
        run by onnxruntime (``onnxruntime``; None: when it imports) and, with ``engine`` on
        a GPU, the engine. Returns the report; ``report.ok`` says whether all agree."""
        graph, feeds = self._fed_graph(inputs, seed)
        reference = _executor(graph).run(feeds)
        report = Verification(atol, rtol)
        candidates = self._candidates(report, feeds, engine, Runtime.parse(runtime, "runtime"),
                                      fp16, tensorrt)
        if _wants_onnxruntime(onnxruntime):
            candidates += self._onnx_candidate(report, feeds, required=bool(onnxruntime))
        for title, candidate in candidates:
            report.results.append((title, compare_outputs(reference, candidate(), atol, rtol)))
        return report

    # ---- writing ------------------------------------------------------------------------------

    def to_dot(self, original: bool = False) -> str:
        """The Graphviz DOT text of the rewritten graph (``original``: of the net as loaded)."""
        from caffe_lstm.backends.dot import write_dot

        return write_dot(self.graph if original else self.rewritten().graph)

    def save_caffe(self, outdir: str | Path, *, unroll: bool = False) -> list[Path]:
        """Writes the rewritten net as ``outdir/<stem>.prototxt`` (and ``.caffemodel`` when
        weights were loaded): the loop form with caffe-lstm's Loop layer, or with ``unroll``
        plain upstream Caffe. Nothing is left behind on an error; returns the files written."""
        from caffe_lstm.frontend.caffe_writer import to_net_parameter, write_prototxt

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
                     via: Route | str = "caffe-lstm", opset: int = DEFAULT_OPSET) -> Engine:
        """Builds a serialized TensorRT engine with the recurrence inside (one ILoop per layer).

        Args:
            path: where to write it (atomically; opened before the build, so an unwritable
                path fails first); None: only return it.
            runtime: ``"auto"``, ``"tensorrt"`` or ``"tensorrt-rtx"`` (builds without a GPU).
            fp16: compute in float16 (explicit casts; inputs and outputs stay float32).
            shapes: input name -> (min, opt, max) shapes: those inputs become dynamic (the
                ranges are checked against the layers first).
            state: ``"zero"``, ``"io"`` or ``"auto"`` (io when a cont could be 1 at t = 0).
            unroll: T step blocks instead of one ILoop per recurrent layer.
            verbosity: TensorRT's log level on stderr (0: errors are raised, not printed).
            progress: called as ``progress(phase, step, steps)`` during the build.
            via: ``"caffe-lstm"`` (our emitter) or ``"onnx"``: the net is exported to ONNX
                (``opset``) and TensorRT's own ``OnnxParser`` builds the network, a second
                route for a TensorRT version that trips over one of them.
        """
        from caffe_lstm.backends.tensorrt.build import BuildOptions
        from caffe_lstm.backends.tensorrt.runtime import load_runtime

        route = Route.parse(via, "via")
        trt_runtime = load_runtime(Runtime.parse(runtime, "runtime").value)
        self._require_weights("build an engine")
        net = self._stated(state)
        profiles = checked_profiles(net.graph, shapes)
        graph = _rewrite(net.graph, unroll)
        options = BuildOptions(fp16=fp16, shapes=profiles, verbosity=verbosity, progress=progress)
        started = time.perf_counter()
        with maybe_atomic(path) as tmp:
            plan = _build_plan(trt_runtime, graph, options, route, opset)
            if tmp is not None:
                tmp.write_bytes(plan)
        return Engine(plan, trt_runtime.name, fp16, [v.name for v in graph.inputs],
                      [v.name for v in graph.outputs], time.perf_counter() - started)

    # ---- ONNX: export and onnxruntime -----------------------------------------------------------

    def export_onnx(self, path: str | Path | None, *, opset: int = DEFAULT_OPSET,
                    shapes: Mapping[str, Profile] | None = None,
                    state: State | str = "auto", lstm_op: LstmOp | str = "scan") -> OnnxExport:
        """Writes the rewritten net as an ONNX model: each recurrent layer one ``Scan``, its
        input projection one MatMul before it, inputs and outputs named after the Caffe blobs
        (``lstm_op="native"``: ONNX's own LSTM/RNN operator instead, where it is exact).

        Args:
            path: the .onnx file (atomically; initializers of 2 GiB or more go to
                ``<path>.data`` beside it); None: only return the model bytes.
            opset: the ONNX opset, 13 to 21.
            shapes: input name -> (min, opt, max) shapes: the dims that vary become symbolic
                (``<input>_dim<axis>``); the ranges are checked against the layers first.
            state: ``"zero"``, ``"io"`` or ``"auto"`` (io when a cont could be 1 at t = 0).
            lstm_op: ``"scan"`` (every recurrent layer one Scan: always exact) or
                ``"native"``: each LSTM, RNN and fork Lstm one ONNX ``LSTM`` / ``RNN`` node;
                a layer that operator would compute differently (a cont input, x_static,
                clipped ReLU, cell_clip, num_proj...) is refused, naming it and why
                (ops/recurrent/native.py has the rules).
        """
        from caffe_lstm.backends.onnx.exporter import build_model, check_opset, save_model

        check_opset(opset)
        lstm_op = LstmOp.parse(lstm_op, "lstm_op")
        self._require_weights("export to ONNX")
        graph, profiles = self._onnx_graph(shapes, state, lstm_op)
        # written to a file, the large weights go from the caffemodel's memory map to the file
        # without a copy in between (build_model's stream)
        model, streamed = build_model(graph, opset, profiles, stream=path is not None)
        data = save_model(model, path, streamed) if path is not None else None
        return OnnxExport(None if path is None else Path(path), data, opset,
                          _onnx_dims(model.graph.input), _onnx_dims(model.graph.output),
                          len(model.graph.node),
                          model.SerializeToString() if path is None else None)

    def run_onnxruntime(self, inputs: Inputs = None, *, seed: int = 0,
                        state: State | str = "zero",
                        model: str | Path | None = None) -> dict[str, np.ndarray]:
        """Runs the net with onnxruntime on the inputs ``run`` takes: the model file ``model``
        (from ``export_onnx``), or the net exported in memory for these inputs' shapes."""
        from caffe_lstm.backends.onnx.exporter import build_model
        from caffe_lstm.backends.onnx.runtime import require_onnxruntime, run_model

        require_onnxruntime()
        net = self._stated(state)
        graph, feeds = net._fed_graph(inputs, seed)
        if model is not None:
            return run_model(Path(model), feeds, str(model))
        fed = Net(graph, self.prototxt, self.weights, list(self.missing_weights))
        fed._require_weights("run with onnxruntime")
        onnx_graph, profiles = fed._onnx_graph(None, State.ZERO)    # io: already in
        # the large weights go to onnxruntime from the caffemodel's memory map (no protobuf)
        model, streamed = build_model(onnx_graph, DEFAULT_OPSET, profiles, stream=True)
        return run_model(model, feeds, streamed=streamed)

    def _onnx_graph(self, shapes: Mapping[str, Profile] | None, state: State | str,
                    lstm_op: LstmOp = LstmOp.SCAN) -> tuple[Graph, dict[str, Profile]]:
        """The rewritten graph to export (with the state inputs and outputs when asked) and
        the shape profiles checked against its layers. ``lstm_op="native"``: the layers whose
        op has an ``onnx`` facet (the recurrent ones: ONNX's own operators) stay whole."""
        net = self._stated(state)
        profiles = checked_profiles(net.graph, shapes)
        if lstm_op is LstmOp.NATIVE:
            return run_passes(net.graph, DEFAULT_PIPELINE, keep=_has_onnx_form), profiles
        return _rewrite(net.graph), profiles

    def _onnx_candidate(self, report: Verification, feeds: dict,
                        required: bool) -> list[tuple[str, Callable]]:
        """``verify``'s onnxruntime column, (title, run): the net exported for the feeds' shapes,
        run by onnxruntime. Unless ``required``, a net with layers that have no ONNX form gets
        a note instead."""
        from caffe_lstm.backends.onnx.exporter import check_exportable
        from caffe_lstm.errors import UnsupportedLayerError

        if not required:
            try:
                check_exportable(self.rewritten().graph)
            except UnsupportedLayerError as exc:
                report.notes.append(f"the ONNX model is not checked: {exc.what}")
                return []
        return [("ONNX model (onnxruntime)", lambda: self.run_onnxruntime(feeds))]

    # ---- Triton ---------------------------------------------------------------------------------

    def to_triton(self, repository: str | Path, *, backend: str = "python",
                  name: str | None = None, max_batch: int = 8, instances: int = 1,
                  cont_from_start: bool = False, batch_axes: Mapping[str, int] | None = None,
                  batching: Any = None, opset: int = DEFAULT_OPSET, runtime: str = "auto") -> Any:
        """Writes ``repository/<name>`` (default: the prototxt's stem), a Triton model:
        ``config.pbtxt`` and ``1/model.plan`` (``backend="tensorrt"``), ``1/model.onnx``
        (``"onnxruntime"``) or ``1/model.py`` + ``1/model.onnx`` (``"python"``). The tensors
        are batch-major (N first); carried states become Triton sequence state (see
        docs/cli.md#triton). ``batch_axes``: input name -> batch axis where the net is
        ambiguous; ``batching``: a ``caffe_lstm.serving.config.Batching``. Returns a
        ``caffe_lstm.serving.repository.TritonModel``."""
        from caffe_lstm.serving.config import Batching
        from caffe_lstm.serving.repository import TritonOptions, write_repository

        self._require_weights("write a Triton model")
        net = self._stated("io" if self.needs_state_io else "zero")
        options = TritonOptions(backend, max_batch, instances, cont_from_start,
                                dict(batch_axes or {}), batching or Batching(), opset, runtime)
        return write_repository(net.graph, repository, name or self.prototxt.stem, options)

    # ---- weights ------------------------------------------------------------------------------

    def export_weights(self, layer: str, layout: str) -> dict[str, np.ndarray]:
        """One LSTM layer's weights in another framework's layout (``caffe``, ``pytorch``,
        ``onnx``, ``keras``, ``keras-cudnn``, ``cudnn``, ``tf``), under its own array names."""
        from caffe_lstm.layouts import export_layer

        node = self._layout_layer(layer)
        if node.name in self.missing_weights or any(v.data is None for v in node.weights):
            raise ModelLoadError("the caffemodel has no weights for this layer",
                                 f"{node.label}, weights {self.weights}",
                                 "check that the weights are those of this net")
        return export_layer(node, layout)

    def import_weights(self, layer: str, layout: str, arrays: Inputs,
                       output: str | Path) -> int:
        """Writes ``output``, a copy of the loaded caffemodel with ``layer``'s blobs replaced
        by ``arrays`` (by name, in ``layout``; an .npz path or a mapping). Two-bias layouts are
        summed into Caffe's one bias. Returns the number of other layers copied."""
        from caffe_lstm.frontend.caffemodel_edit import write_with_layer_replaced
        from caffe_lstm.layouts import import_layer

        node = self._layout_layer(layer)
        self._require_weights_file("import weights")
        source = f"arrays {arrays}" if isinstance(arrays, (str, Path)) else "the arrays"
        blobs = import_layer(node, layout, _arrays(arrays), source)
        return write_with_layer_replaced(output, self.weights, self.prototxt, self.graph, node,
                                         blobs)

    def write_synthetic_weights(self, output: str | Path, seed: int = 0) -> int:
        """Writes seeded synthetic weights (uniform in [-0.5, 0.5)) for every learnable layer
        to ``output``; returns the number of layers written."""
        from caffe_lstm.synthetic import synthetic_weights

        layers = synthetic_weights(self.graph, seed)
        write_caffemodel(output, layers, net_name=self.graph.name)
        return len(layers)

    # ---- helpers --------------------------------------------------------------------------------

    def _stated(self, state: State | str) -> Net:
        """A copy, with the states as inputs and outputs when ``state`` (resolved) is io."""
        state = State.parse(state, "state")
        if state is State.AUTO:
            state = state.resolve(self.needs_state_io)
        return self.with_state_io() if state is State.IO else self.copy()

    def _fed_graph(self, inputs: Inputs, seed: int) -> tuple[Graph, dict[str, np.ndarray]]:
        """A copy of the graph shaped for the inputs, and the inputs (random without any)."""
        net = self.copy()
        if inputs is None:
            return net.graph, net.random_inputs(seed)
        source = str(inputs) if isinstance(inputs, (str, Path)) else "the inputs"
        feeds = _arrays(inputs)
        return net.graph, apply_feeds(net.graph, {**zero_states(net.graph, feeds), **feeds},
                                      source)

    def _candidates(self, report: Verification, feeds: dict, engine: str | Path | None,
                    runtime: Runtime, fp16: bool, tensorrt: bool) -> list[tuple[str, Callable]]:
        """(title, run) for each implementation to compare with the equations."""
        def rewritten() -> tuple[Graph, dict]:
            graph, fed = self._fed_graph(feeds, 0)
            return _rewrite(graph), fed

        def numpy_run() -> dict[str, np.ndarray]:
            graph, fed = rewritten()
            return _executor(graph).run(fed)

        candidates = [("rewritten graph (numpy)", numpy_run)]
        trt_runtime = _runtime_or_none(runtime) if (tensorrt or engine) else None
        if trt_runtime is None:
            return candidates
        from caffe_lstm.backends.tensorrt.runtime import has_gpu

        if engine is not None and has_gpu():
            candidates.append((f"engine {Path(engine).name} (GPU)",
                               lambda: run_engine(engine, feeds, runtime=trt_runtime.name)))
        elif engine is not None:
            report.notes.append("no GPU here: the engine cannot run; its TensorRT network is "
                                "checked on the CPU")
        title = f"TensorRT network, {'fp16' if fp16 else 'fp32'} (CPU walk)"
        candidates.append((title, lambda: _walk_network(trt_runtime, *rewritten(), fp16)))
        return candidates

    def _require_weights(self, purpose: str) -> None:
        if self.missing_weights:
            raise ModelLoadError(
                f"the caffemodel has no weights for layer(s) {', '.join(self.missing_weights)}",
                str(self.weights or self.prototxt),
                f"to {purpose}, pass the caffemodel trained for this prototxt (or make "
                "synthetic ones with `caffe-lstm weights init`)")

    def _require_weights_file(self, purpose: str) -> None:
        if self.weights is None:
            raise ModelLoadError(f"no caffemodel was loaded to {purpose} into", str(self.prototxt),
                                 "load the net with its weights")

    def _layout_layer(self, name: str) -> Node:
        """The layer called ``name``, whose type has weight layouts (LSTM, the fork's Lstm)."""
        from caffe_lstm.layouts import layout_layer

        return layout_layer(self.graph, name, str(self.prototxt))


@dataclass
class Verification:
    """What ``Net.verify`` found: per candidate, one Comparison per output."""

    atol: float
    rtol: float
    results: list[tuple[str, list[Comparison]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        """``output (candidate)`` for every comparison beyond the tolerances."""
        return [f"{row.name} ({title})" for title, rows in self.results for row in rows
                if not row.ok]

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass
class OnnxExport:
    """An exported ONNX model: where it went and what it declares.

    Attributes:
        path: the .onnx file (None: not written, see ``model``).
        data: the external-data file beside it (initializers of 2 GiB or more), or None.
        opset: the default-domain opset.
        inputs, outputs: name -> dims (ints, or the names of symbolic dims).
        nodes: the number of nodes of the main graph (a Scan body counts as one).
        model: the serialized model when no path was given.
    """

    path: Path | None
    data: Path | None
    opset: int
    inputs: dict[str, tuple[int | str, ...]]
    outputs: dict[str, tuple[int | str, ...]]
    nodes: int
    model: bytes | None = None


@dataclass
class Engine:
    """A built engine: the serialized plan and what it was built as."""

    plan: bytes
    runtime: str
    fp16: bool
    inputs: list[str]
    outputs: list[str]
    seconds: float

    def save(self, path: str | Path) -> None:
        """Writes the plan to ``path`` atomically."""
        with atomic_output(path) as tmp:
            tmp.write_bytes(self.plan)


def run_engine(engine: str | Path, inputs: Mapping[str, np.ndarray], *,
               runtime: Runtime | str = "auto") -> dict[str, np.ndarray]:
    """Runs a serialized engine once on a GPU, through NVIDIA Polygraphy's TrtRunner; inputs
    it lacks (the states of ``state="io"``) are zeros. Needs ``pip install 'caffe-lstm[gpu]'``."""
    from caffe_lstm.backends.tensorrt.engine import run_engine as run
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    return run(load_runtime(Runtime.parse(runtime, "runtime").value), engine, inputs)


# ---- module helpers ------------------------------------------------------------------------------


def _wants_onnxruntime(choice: bool | None) -> bool:
    """verify's onnxruntime column: asked for (True: onnxruntime must import), refused, or
    None: when it imports."""
    from caffe_lstm.backends.onnx.runtime import onnxruntime_available, require_onnxruntime

    if choice is None:
        return onnxruntime_available()
    if choice:
        require_onnxruntime()
    return choice


def _onnx_dims(infos) -> dict[str, tuple[int | str, ...]]:
    """name -> dims of ONNX ValueInfoProtos (a symbolic dim by its name, "?" unnamed)."""
    return {info.name: tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                             for d in info.type.tensor_type.shape.dim) for info in infos}


def _build_plan(runtime, graph: Graph, options, via: Route, opset: int) -> bytes:
    """The plan of the rewritten ``graph``, through our emitter or through ONNX and TensorRT's
    parser (the model carries the precision: fp16 as explicit casts)."""
    from caffe_lstm.backends.tensorrt.build import build_engine

    if via is Route.CAFFE_LSTM:
        return build_engine(runtime, graph, options)
    from caffe_lstm.backends.onnx.exporter import build_model, check_opset
    from caffe_lstm.backends.tensorrt.onnx_route import build_from_onnx

    check_opset(opset)
    if options.fp16:
        raise CaffeLstmError("--fp16 is not available through the ONNX route yet", "--via onnx",
                             "build fp16 through our emitter (--via caffe-lstm), or fp32 via onnx")
    model, _ = build_model(graph, opset, dict(options.shapes))
    return build_from_onnx(runtime, model.SerializeToString(), options)


def _executor(graph: Graph):
    from caffe_lstm.backends.numpy_exec import NumpyExecutor

    return NumpyExecutor(graph)


def _rewrite(graph: Graph, unroll: bool = False) -> Graph:
    """The rewrite in place on a graph this module owns."""
    return run_passes(graph, DEFAULT_PIPELINE + (("unroll",) if unroll else ()))


def _has_onnx_form(node: Node) -> bool:
    """Whether the exporter takes ``node`` whole (an LSTM's ONNX LSTM operator)."""
    return has_facet(get_op(node.op), "onnx")


def _arrays(inputs: Mapping[str, np.ndarray] | str | Path) -> dict[str, np.ndarray]:
    return load_npz(inputs) if isinstance(inputs, (str, Path)) else dict(inputs)


def _runtime_or_none(choice: Runtime):
    from caffe_lstm.backends.tensorrt.runtime import BackendUnavailableError, load_runtime

    try:
        return load_runtime(choice.value)
    except BackendUnavailableError:
        if choice is not Runtime.AUTO:
            raise
        return None


def _walk_network(runtime, graph: Graph, feeds: dict, fp16: bool) -> dict[str, np.ndarray]:
    """The emitted TensorRT network evaluated with numpy, walked through the TensorRT API."""
    from caffe_lstm.backends.tensorrt.build import BuildOptions, emit
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network

    _, network, _ = emit(runtime, graph, BuildOptions(fp16=fp16))
    results = evaluate_network(runtime.trt, network, feeds)
    return {name: array.astype(np.float32) for name, array in results.items()}
