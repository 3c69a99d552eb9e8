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

import contextlib
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from caffe_lstm.analysis.shapes import shape_at_profile_sizes
from caffe_lstm.analysis.summary import summarize
from caffe_lstm.compare import Comparison, compare_outputs, judge_sensitivity, nudged_weights
from caffe_lstm.errors import CaffeLstmError, ModelLoadError, OutputError, ShapeError
from caffe_lstm.feeds import apply_feeds, random_feeds
from caffe_lstm.files import atomic_output, load_npz
from caffe_lstm.frontend.caffemodel import read_caffemodel
from caffe_lstm.frontend.caffemodel_writer import write_caffemodel
from caffe_lstm.frontend.loader import layer_types, load_net
from caffe_lstm.frontend.netstate import LayerSelection
from caffe_lstm.frontend.unknown import SkippedField
from caffe_lstm.ir.graph import Graph, Node, clone_graph
from caffe_lstm.ops import get_op, has_facet, recurrent_spec
from caffe_lstm.passes import DEFAULT_PIPELINE, run_passes
from caffe_lstm.passes.expose_state import expose_recurrent_state, needs_state_io, zero_states

#: ``(min, opt, max)`` shapes of one dynamic input.
Profile = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
#: Input arrays: a mapping by Caffe blob name, or the path of an .npz holding them.
Inputs = Mapping[str, np.ndarray] | str | Path | None

STATE_MODES = ("zero", "io")
#: How ``export_onnx`` writes a recurrent layer: one Scan, or ONNX's own LSTM/RNN operator.
LSTM_OPS = ("scan", "native")
#: The routes ``build_engine`` takes to a TensorRT network: our emitter, or the ONNX export
#: read by TensorRT's own OnnxParser.
VIA_ROUTES = ("caffe-lstm", "onnx")


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
            state: str = "zero") -> dict[str, np.ndarray]:
        """One Caffe Forward call on the CPU with numpy; returns every output by name.

        Args:
            inputs: arrays by Caffe blob name (time-major), or an .npz path; None: random ones
                from ``seed``. Dims may differ from the prototxt's (another T or N).
            original: execute the recurrent layers from their equations instead of the
                rewritten graph.
            state: ``"zero"`` (start from zero state) or ``"io"`` (states are inputs and
                outputs, see ``with_state_io``).
        """
        net = self._stated(state)
        graph, feeds = net._fed_graph(inputs, seed)
        return _executor(graph if original else _rewrite(graph)).run(feeds)

    def run_engine(self, engine: str | Path, inputs: Inputs = None, *, seed: int = 0,
                   state: str = "zero", runtime: str = "auto") -> dict[str, np.ndarray]:
        """Runs a built engine on a GPU (through Polygraphy) on the same inputs ``run`` takes."""
        _, feeds = self._stated(state)._fed_graph(inputs, seed)
        return run_engine(engine, feeds, runtime=runtime)

    def verify(self, inputs: Inputs = None, *, seed: int = 0, engine: str | Path | None = None,
               runtime: str = "auto", fp16: bool = False, tensorrt: bool = True,
               atol: float = 1e-5, rtol: float = 1e-4,
               onnxruntime: bool | None = None) -> Verification:
        """Compares the recurrent equations, output by output, with the rewritten graph, the
        emitted TensorRT network (evaluated on the CPU: no GPU needed), the exported ONNX model
        run by onnxruntime (``onnxruntime``; None: when it imports) and, with ``engine`` on
        a GPU, the engine. Returns the report; ``report.ok`` says whether all agree."""
        graph, feeds = self._fed_graph(inputs, seed)
        reference = _executor(graph).run(feeds)
        report = Verification(atol, rtol)
        candidates = self._candidates(report, feeds, engine, runtime, fp16, tensorrt)
        if _wants_onnxruntime(onnxruntime):
            candidates += self._onnx_candidate(report, feeds, required=bool(onnxruntime))
        for title, candidate in candidates:
            report.results.append((title, compare_outputs(reference, candidate(), atol, rtol)))
        report.results, note = judge_sensitivity(  # float32 rounding alone, or a mismatch?
            report.results, reference, lambda: _executor(nudged_weights(graph)).run(feeds),
            atol, rtol)
        report.notes += [note] if note else []
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
        from caffe_lstm.backends.caffe_writer import to_net_parameter, write_prototxt

        outdir, stem = Path(outdir), self.prototxt.stem
        graph = self.rewritten(unroll).graph
        definition, blobs = to_net_parameter(graph)
        prototxt, caffemodel = outdir / f"{stem}.prototxt", outdir / f"{stem}.caffemodel"
        _refuse_to_overwrite([prototxt, caffemodel], [self.prototxt, self.weights])
        form = "unrolled: plain Caffe" if unroll else "recurrences as caffe-lstm Loop layers"
        with _nothing_left_on_error(outdir) as written:
            write_prototxt(prototxt, definition,
                           f"Rewritten by caffe-lstm from {self.prototxt.name} ({form}).")
            written.append(prototxt)
            if self.weights is not None:
                write_caffemodel(caffemodel, blobs, net_name=graph.name)
                written.append(caffemodel)
        return written

    def build_engine(self, path: str | Path | None = None, *, runtime: str = "auto",
                     fp16: bool = False, shapes: Mapping[str, Profile] | None = None,
                     state: str = "auto", unroll: bool = False, verbosity: int = 0,
                     progress: Callable[[str, int, int], None] | None = None,
                     via: str = "caffe-lstm", opset: int = 17) -> Engine:
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

        if via not in VIA_ROUTES:
            raise CaffeLstmError(f"unknown route '{via}'", "--via",
                                 f"use one of {', '.join(VIA_ROUTES)}")
        trt_runtime = load_runtime(runtime)
        self._require_weights("build an engine")
        net = self._stated(_resolve_state(state, self.needs_state_io))
        profiles = _profiles(net.graph, dict(shapes or {}))
        _check_profiles(net.graph, profiles)
        graph = _rewrite(net.graph, unroll)
        options = BuildOptions(fp16=fp16, shapes=profiles, verbosity=verbosity, progress=progress)
        started = time.perf_counter()
        with _maybe_atomic(path) as tmp:
            plan = _build_plan(trt_runtime, graph, options, via, opset)
            if tmp is not None:
                tmp.write_bytes(plan)
        return Engine(plan, trt_runtime.name, fp16, [v.name for v in graph.inputs],
                      [v.name for v in graph.outputs], time.perf_counter() - started)

    # ---- ONNX: export and onnxruntime -----------------------------------------------------------

    def export_onnx(self, path: str | Path | None, *, opset: int = 17,
                    shapes: Mapping[str, Profile] | None = None,
                    state: str = "auto", lstm_op: str = "scan") -> OnnxExport:
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
        _check_lstm_op(lstm_op)
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

    def run_onnxruntime(self, inputs: Inputs = None, *, seed: int = 0, state: str = "zero",
                        model: str | Path | None = None) -> dict[str, np.ndarray]:
        """Runs the net with onnxruntime on the inputs ``run`` takes: the model file ``model``
        (from ``export_onnx``), or the net exported in memory for these inputs' shapes."""
        from caffe_lstm.backends.onnx.exporter import DEFAULT_OPSET, build_model
        from caffe_lstm.backends.onnx.runtime import require_onnxruntime, run_model

        require_onnxruntime()
        net = self._stated(state)
        graph, feeds = net._fed_graph(inputs, seed)
        if model is not None:
            return run_model(Path(model), feeds, str(model))
        fed = Net(graph, self.prototxt, self.weights, list(self.missing_weights))
        fed._require_weights("run with onnxruntime")
        onnx_graph, profiles = fed._onnx_graph(None, "zero")    # io: already in
        # the large weights go to onnxruntime from the caffemodel's memory map (no protobuf)
        model, streamed = build_model(onnx_graph, DEFAULT_OPSET, profiles, stream=True)
        return run_model(model, feeds, streamed=streamed)

    def _onnx_graph(self, shapes: Mapping[str, Profile] | None, state: str,
                    lstm_op: str = "scan") -> tuple[Graph, dict[str, Profile]]:
        """The rewritten graph to export (with --state io's inputs and outputs when asked) and
        the shape profiles checked against its layers. ``lstm_op="native"``: the layers whose
        op has an ``onnx`` facet (the recurrent ones: ONNX's own operators) stay whole."""
        net = self._stated("io" if state == "auto" and self.needs_state_io else
                           ("zero" if state == "auto" else state))
        profiles = _profiles(net.graph, dict(shapes or {}))
        _check_profiles(net.graph, profiles)
        if lstm_op == "native":
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

    # ---- weights ------------------------------------------------------------------------------

    def export_weights(self, layer: str, layout: str) -> dict[str, np.ndarray]:
        """One LSTM layer's weights in another framework's layout (``caffe``, ``pytorch``,
        ``onnx``, ``keras``, ``keras-cudnn``, ``cudnn``, ``tf``), under its own array names."""
        from caffe_lstm.layouts import LAYOUTS, layer_weights

        node = self._layout_layer(layer)
        if node.name in self.missing_weights or any(v.data is None for v in node.weights):
            raise ModelLoadError("the caffemodel has no weights for this layer",
                                 f"{node.label}, weights {self.weights}",
                                 "check that the weights are those of this net")
        with _at_layer(node):
            return LAYOUTS[_layout(layout)].export(
                layer_weights(node, [v.data for v in node.weights]))

    def import_weights(self, layer: str, layout: str, arrays: Inputs,
                       output: str | Path) -> int:
        """Writes ``output``, a copy of the loaded caffemodel with ``layer``'s blobs replaced
        by ``arrays`` (by name, in ``layout``; an .npz path or a mapping). Two-bias layouts are
        summed into Caffe's one bias. Returns the number of other layers copied."""
        from caffe_lstm.layouts import LAYOUTS, import_arrays, layer_arrays, zeros_like_layer

        node = self._layout_layer(layer)
        self._require_weights_file("import weights")
        source = f"arrays {arrays}" if isinstance(arrays, (str, Path)) else "the arrays"
        with _at_layer(node, source):
            weights = import_arrays(LAYOUTS[_layout(layout)], _arrays(arrays),
                                    zeros_like_layer(node))
        layers = _replace_layer(read_caffemodel(self.weights), self.graph, node,
                                layer_arrays(node, weights),
                                layer_types(self.prototxt) | _graph_types(self.graph))
        write_caffemodel(output, layers, net_name=self.graph.name)
        return len(layers) - 1

    def write_synthetic_weights(self, output: str | Path, seed: int = 0) -> int:
        """Writes seeded synthetic weights for every learnable layer to ``output`` (the
        prototxt's own fillers where it gives them, else values scaled by each blob's fan-in;
        ``caffe_lstm.synthetic``); returns the number of layers written."""
        from caffe_lstm.frontend.fillers import layer_fillers
        from caffe_lstm.synthetic import synthetic_weights

        layers = synthetic_weights(self.graph, seed, fillers=layer_fillers(self.prototxt))
        write_caffemodel(output, layers, net_name=self.graph.name)
        return len(layers)

    # ---- helpers --------------------------------------------------------------------------------

    def _stated(self, state: str) -> Net:
        if state not in STATE_MODES:
            raise CaffeLstmError(f"state must be one of {', '.join(STATE_MODES)}, not {state!r}")
        return self.with_state_io() if state == "io" else self.copy()

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
                    runtime: str, fp16: bool, tensorrt: bool) -> list[tuple[str, Callable]]:
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
        node = self.graph.node(name)
        able = [n.name for n in self.graph.nodes if _has_layouts(n)]
        hint = (f"the LSTM layers of this net: {', '.join(able)}" if able
                else "this net has no LSTM layer")
        if node is None:
            raise CaffeLstmError(f"--layer: the net has no LSTM layer named '{name}'",
                                 str(self.prototxt), hint)
        if not _has_layouts(node):
            raise CaffeLstmError("--layer must name an LSTM layer", node.label, hint)
        return node


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


def write_dot_file(text: str, path: str | Path, svg: Path | None = None) -> None:
    """Writes DOT ``text`` to ``path`` atomically and, with ``svg``, renders it there with
    Graphviz."""
    from caffe_lstm.backends.dot import render_svg

    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    if svg is not None:
        render_svg(Path(path), svg)


def require_onnxruntime() -> str:
    """onnxruntime's version; a one-line error with the install hint when it cannot be
    imported (checked before any work)."""
    from caffe_lstm.backends.onnx.runtime import require_onnxruntime as require

    return require()


def run_engine(engine: str | Path, inputs: Mapping[str, np.ndarray], *,
               runtime: str = "auto") -> dict[str, np.ndarray]:
    """Runs a serialized engine once on a GPU, through NVIDIA Polygraphy's TrtRunner; inputs
    it lacks (the states of ``state="io"``) are zeros. Needs ``pip install 'caffe-lstm[gpu]'``."""
    from caffe_lstm.backends.tensorrt.engine import run_engine as run
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    return run(load_runtime(runtime), engine, inputs)


# ---- module helpers ------------------------------------------------------------------------------


def _wants_onnxruntime(choice: bool | None) -> bool:
    """verify's onnxruntime column: asked for (True: onnxruntime must import), refused, or
    None: when it imports."""
    from caffe_lstm.backends.onnx.runtime import onnxruntime_available

    if choice is None:
        return onnxruntime_available()
    if choice:
        require_onnxruntime()
    return choice


def _onnx_dims(infos) -> dict[str, tuple[int | str, ...]]:
    """name -> dims of ONNX ValueInfoProtos (a symbolic dim by its name, "?" unnamed)."""
    return {info.name: tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                             for d in info.type.tensor_type.shape.dim) for info in infos}


def _resolve_state(state: str, needs_io: bool) -> str:
    """``auto``: io when some cont could be non-zero at t = 0, else zero."""
    if state == "auto":
        return "io" if needs_io else "zero"
    return state


def _build_plan(runtime, graph: Graph, options, via: str, opset: int) -> bytes:
    """The plan of the rewritten ``graph``, through our emitter or through ONNX and TensorRT's
    parser (the model carries the precision: fp16 as explicit casts)."""
    from caffe_lstm.backends.tensorrt.build import build_engine

    if via == "caffe-lstm":
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


def _check_lstm_op(lstm_op: str) -> None:
    if lstm_op not in LSTM_OPS:
        raise CaffeLstmError(f"lstm_op {lstm_op!r} is not one of {', '.join(LSTM_OPS)}",
                             "--lstm-op", "scan: one Scan per layer; native: ONNX's LSTM/RNN")


def _arrays(inputs: Mapping[str, np.ndarray] | str | Path) -> dict[str, np.ndarray]:
    return load_npz(inputs) if isinstance(inputs, (str, Path)) else dict(inputs)


def _runtime_or_none(choice: str):
    from caffe_lstm.backends.tensorrt.runtime import BackendUnavailableError, load_runtime

    try:
        return load_runtime(choice)
    except BackendUnavailableError:
        if choice != "auto":
            raise
        return None


def _walk_network(runtime, graph: Graph, feeds: dict, fp16: bool) -> dict[str, np.ndarray]:
    """The emitted TensorRT network evaluated with numpy, walked through the TensorRT API."""
    from caffe_lstm.backends.tensorrt.build import BuildOptions, emit
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network

    _, network, _ = emit(runtime, graph, BuildOptions(fp16=fp16))
    results = evaluate_network(runtime.trt, network, feeds)
    return {name: array.astype(np.float32) for name, array in results.items()}


def _profiles(graph: Graph, shapes: dict[str, Profile]) -> dict[str, Profile]:
    """The shape profiles checked against the net inputs, plus matching ranges for exposed
    state inputs ((1, N, H): N follows the batch range of the dynamic inputs)."""
    inputs = {v.name: v for v in graph.inputs}
    for name, (low, _, _) in shapes.items():
        if name not in inputs:
            raise ShapeError(f"--shape names '{name}', which is not a net input",
                             "--shape", f"the net inputs are {', '.join(inputs)}")
        if len(low) != len(inputs[name].shape):
            raise ShapeError(f"--shape {name} has {len(low)} dims, the input has "
                             f"{len(inputs[name].shape)} {inputs[name].shape}", "--shape",
                             "give one dim per axis")
    profiles = dict(shapes)
    batch = next(((p[0][1], p[1][1], p[2][1]) for p in shapes.values() if len(p[0]) > 1), None)
    for value in graph.inputs:
        if value.name not in profiles and shapes:
            profiles[value.name] = _state_profile(value.shape, batch)
    return profiles


def _check_profiles(graph: Graph, profiles: dict[str, Profile]) -> None:
    """Every layer must accept the MIN and the MAX shapes (e.g. weights fix a feature dim);
    the graph is left shaped for OPT."""
    for _ in shape_at_profile_sizes(graph, profiles):
        pass


def _state_profile(shape: tuple[int, ...], batch: tuple[int, int, int] | None) -> Profile:
    """A static input keeps its shape; a (1, N, H) state input follows the batch range."""
    if batch is None or len(shape) != 3 or shape[0] != 1:
        return shape, shape, shape
    return tuple((1, n, shape[2]) for n in batch)


@contextlib.contextmanager
def _maybe_atomic(path: str | Path | None) -> Iterator[Path | None]:
    if path is None:
        yield None
        return
    with atomic_output(path) as tmp:
        yield tmp


def _refuse_to_overwrite(targets: list[Path], sources: list[Path | None]) -> None:
    """The outputs must not replace the files being read (OUTDIR = the net's own folder)."""
    for target in targets:
        if any(source is not None and target.resolve() == source.resolve()
               for source in sources):
            raise OutputError("the output would overwrite an input file", str(target),
                              "choose another -o directory")


@contextlib.contextmanager
def _nothing_left_on_error(outdir: Path) -> Iterator[list[Path]]:
    """Creates ``outdir`` (and missing parents); on an error removes the files written so far
    (the yielded list) and the directories it created, then re-raises."""
    created = [p for p in (outdir, *outdir.parents) if not p.exists()]
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the output directory ({exc.strerror})", str(outdir),
                          "choose a directory that can be created and written") from None
    written: list[Path] = []
    try:
        yield written
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        for folder in created:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _has_layouts(node: Node) -> bool:
    spec = recurrent_spec(node.op)
    return spec is not None and spec.has_layouts


def _layout(name: str) -> str:
    from caffe_lstm.layouts import LAYOUTS

    if name not in LAYOUTS:
        raise CaffeLstmError(f"unknown layout '{name}'", "--layout",
                             f"use one of {', '.join(LAYOUTS)}")
    return name


@contextlib.contextmanager
def _at_layer(node: Node, detail: str = "") -> Iterator[None]:
    """Gives a LayoutError raised inside the layer's name (and ``detail``) as its ``where``."""
    from caffe_lstm.layouts import LayoutError

    try:
        yield
    except LayoutError as exc:
        where = ", ".join(part for part in (node.label, detail) if part)
        raise LayoutError(exc.what, where, exc.hint) from None


def _graph_types(graph: Graph) -> dict[str, str]:
    return {node.name: node.op for node in graph.all_nodes()}


def _replace_layer(stored: list, graph: Graph, target: Node, new_blobs: list[np.ndarray],
                   types: dict[str, str]) -> list[tuple[str, str, list[np.ndarray]]]:
    """Every layer of the caffemodel in file order, ``target``'s blobs replaced (or appended
    when the file lacks it).

    Layers of the net keep the blobs loaded for them, reshaped to the net's shapes (a legacy
    4-D blob becomes e.g. (4H, I)); Caffe reads only the first layer of a name, so later
    duplicates and layers the net does not use keep their stored dims.
    """
    loaded = {node.name: node for node in graph.all_nodes() if node.weights}
    layers, seen = [], set()
    for layer in stored:
        first = layer.name not in seen
        seen.add(layer.name)
        if first and layer.name == target.name:
            blobs = new_blobs
        elif first and layer.name in loaded:
            blobs = [value.data for value in loaded[layer.name].weights]
        else:
            blobs = [blob.data.reshape(blob.shape) for blob in layer.blobs]
        layers.append((layer.name, types.get(layer.name, ""), blobs))
    if target.name not in seen:
        layers.append((target.name, target.op, new_blobs))
    return layers
