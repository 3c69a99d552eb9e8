"""`caffe-lstm triton`: Triton model repositories, driven through the CLI on the samples.

What is checked here (a real server is started in tests/test_triton_server.py):
- configs parse with Triton's own schema (tritonclient's model_config_pb2; skipped without it)
  and agree with the model files' I/O;
- the Python backend's model.py, run with a stand-in for Triton's triton_python_backend_utils,
  serves interleaved sequences of different lengths step by step equal to `run --state io` of
  each whole sequence;
- a net that cannot be served: one line, exit 1, no repository left behind.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import caffe_lstm
from caffe_lstm.serving.config import model_config
from tests.helpers import ROOT, corpus_files, run_cli, sample

SAMPLES = ROOT / "samples"
TOL = 1e-5


# ---- a stand-in for Triton's triton_python_backend_utils -----------------------------------------


class _Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class _Request:
    def __init__(self, tensors: dict[str, np.ndarray], corrid: int) -> None:
        self.tensors, self.corrid = tensors, corrid

    def correlation_id(self) -> int:
        return self.corrid


class _Response:
    def __init__(self, output_tensors, error=None) -> None:
        self.outputs = {t.name(): t.as_numpy() for t in output_tensors}
        self.error = error


class _TritonError:
    def __init__(self, message: str) -> None:
        self._message = message

    def message(self) -> str:
        return self._message


def _fake_pb_utils() -> types.ModuleType:
    module = types.ModuleType("triton_python_backend_utils")
    module.Tensor = _Tensor
    module.InferenceResponse = _Response
    module.TritonError = _TritonError
    module.get_input_tensor_by_name = lambda request, name: (
        _Tensor(name, request.tensors[name]) if name in request.tensors else None)
    return module


def load_python_model(model_dir: Path, spec):
    """model.py of ``model_dir`` imported with the stand-in, initialized as Triton does."""
    pytest.importorskip("onnxruntime")
    spec_py = importlib.util.spec_from_file_location(f"triton_model_{model_dir.name}",
                                                     model_dir / "1" / "model.py")
    module = importlib.util.module_from_spec(spec_py)
    sys.modules["triton_python_backend_utils"] = _fake_pb_utils()
    try:
        spec_py.loader.exec_module(module)
    finally:
        del sys.modules["triton_python_backend_utils"]
    model = module.TritonPythonModel()
    model.initialize({"model_config": config_json(model_dir, spec),
                      "model_repository": str(model_dir), "model_version": "1"})
    return model


def config_json(model_dir: Path, spec) -> str:
    """The model config as Triton hands it to initialize(): JSON of the parsed config.pbtxt
    with every field, defaults included (``fp32_false_true: []`` on every control); without
    tritonclient, our own dict of it."""
    try:
        from google.protobuf import json_format, text_format
        from tritonclient.grpc import model_config_pb2
    except (ImportError, RuntimeError):
        return json.dumps(model_config(spec))
    message = text_format.Parse((model_dir / "config.pbtxt").read_text(),
                                model_config_pb2.ModelConfig())
    return json_format.MessageToJson(message, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)


# ---- the nets: the samples and the corpus's step-wise deploy nets --------------------------------

#: id -> (sample name or corpus file, static shapes making one step per request)
NETS = {
    "captioner": ("captioner", {"cont_sentence": (1, 2), "input_sentence": (1, 2)}),
    "seq_classifier": ("seq_classifier", {"data": (1, 2, 8), "cont": (1, 2)}),
    "deepspeech_relu": ("deepspeech_relu", {"frames": (1, 2, 161), "cont": (1, 2)}),
    "lstm_lm": ("examples__coco_caption__lstm_lm.deploy.prototxt", {}),
    "lrcn_word_to_preds": ("examples__coco_caption__lrcn_word_to_preds.deploy.prototxt",
                           {"cont_sentence": (1, 2), "input_sentence": (1, 2),
                            "image_features": (2, 1000)}),
    "scrc_word_to_preds": ("prototxt__scrc_word_to_preds_full.prototxt",
                           {"cont_sentence": (1, 2), "input_sentence": (1, 2),
                            "image_features": (2, 1008), "fc7_context": (2, 4096)}),
}
#: Synthetic weights of the corpus nets: small, so that float32 rounding stays far below 1e-5
#: in 1000-wide recurrences (tests/test_corpus_onnx.py explains the scale).
CORPUS_SCALE = 0.05


@pytest.fixture(scope="module")
def weights_dir(module_scratch) -> Path:
    return module_scratch.mktemp("weights")


def net_files(key: str, weights_dir: Path) -> tuple[Path, Path, dict[str, tuple[int, ...]]]:
    """(prototxt, caffemodel, static shapes) of a net of NETS; corpus nets get synthetic
    weights (skipped where the corpus is absent)."""
    source, shapes = NETS[key]
    if not source.endswith(".prototxt"):
        return (*sample(source), shapes)
    found = [path for path in corpus_files() if path.name == source]
    if not found:
        pytest.skip("the corpus of public prototxts is not beside this clone (CI has it)")
    weights = weights_dir / f"{key}.caffemodel"
    if not weights.exists():
        from caffe_lstm.frontend.caffe_writer import write_caffemodel
        from caffe_lstm.synthetic import synthetic_weights

        graph = caffe_lstm.load(found[0], shapes=shapes).graph
        write_caffemodel(weights, synthetic_weights(graph, seed=0, scale=CORPUS_SCALE))
    return found[0], weights, shapes


def shape_args(shapes: dict[str, tuple[int, ...]]) -> list[str]:
    return [arg for name, dims in shapes.items()
            for arg in ("--shape", f"{name}:{'x'.join(map(str, dims))}")]


def write_repo(key: str, weights_dir: Path, repo: Path, *args: str):
    """`caffe-lstm triton` on the net through the CLI; returns (net, spec, model folder), the
    spec being the API's for the same net and options (its config must equal the CLI's)."""
    prototxt, weights, shapes = net_files(key, weights_dir)
    result = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(repo), "--name", key,
                     "--max-batch", "4", *shape_args(shapes), *args)
    assert result.returncode == 0, result.stderr
    net = caffe_lstm.load(prototxt, weights, shapes=shapes)
    backend = args[args.index("--backend") + 1] if "--backend" in args else "python"
    written = net.to_triton(repo.parent / f"{repo.name}-api", name=key, max_batch=4,
                            backend=backend, cont_from_start="--cont-from-start" in args)
    assert written.config == (repo / key / "config.pbtxt").read_text()
    return net, written.spec, repo / key


# ---- sequences and their references --------------------------------------------------------------


def step_sequences(net, lengths: list[int], seed: int) -> list[dict[str, np.ndarray]]:
    """One whole sequence per length, Caffe's layout with N = 1: random data, cont 0 at t = 0
    and 1 after, valid Embed ids (``random_inputs`` of the net shaped for the longest, cut)."""
    axes = batch_axes(net)
    longest = max(lengths)
    shapes = {name: (longest, 1, *shape[2:]) if axes[name] == 1 else (1, *shape[1:])
              for name, shape in net.inputs.items()}
    sized = caffe_lstm.load(net.prototxt, net.weights, shapes=shapes)
    sequences = []
    for index, steps in enumerate(lengths):
        feeds = sized.random_inputs(seed + index)
        sequences.append({name: feeds[name][:steps] if axes[name] == 1 else feeds[name]
                          for name in net.inputs})
    return sequences


_REFERENCES: dict[tuple[str, str], tuple] = {}


def sequences_and_references(net) -> tuple[list[dict], list[dict]]:
    """The sequences of LENGTHS and `run --state io` of each whole one (cached per net)."""
    key = (str(net.prototxt), str(net.weights))
    if key not in _REFERENCES:
        sequences = step_sequences(net, LENGTHS, seed=3)
        _REFERENCES[key] = sequences, [net.run(s, state="io") for s in sequences]
    return _REFERENCES[key]


def batch_axes(net) -> dict[str, int]:
    from caffe_lstm.passes.batch_major import find_batch_axes

    return find_batch_axes(net.with_state_io().graph).inputs


def step_request(sequence: dict[str, np.ndarray], t: int, axes: dict[str, int]
                 ) -> dict[str, np.ndarray]:
    """Step t of a sequence as a batch-major request of batch 1 (T = 1)."""
    return {name: np.ascontiguousarray(np.moveaxis(array[t:t + 1], 1, 0)) if axes[name] == 1
            else array for name, array in sequence.items()}


def interleave(lengths: list[int]) -> list[list[tuple[int, int]]]:
    """Executions of (sequence, step): a round robin over the live sequences, up to 3 per
    execution, so that sequences start and end at different executions."""
    next_step, executions = [0] * len(lengths), []
    while any(s < n for s, n in zip(next_step, lengths)):
        live = [i for i, (s, n) in enumerate(zip(next_step, lengths)) if s < n]
        batch = (live[len(executions) % len(live):] + live)[:3]
        executions.append([(i, next_step[i]) for i in dict.fromkeys(batch)])
        for i in dict.fromkeys(batch):
            next_step[i] += 1
    return executions


LENGTHS = [5, 2, 7, 3, 1, 4]


def serve_and_compare(net, spec, execute, corrids=(100, 101, 102, 103, 104, 105)) -> None:
    """Interleaved sequences of LENGTHS, step by step through ``execute(steps)`` (a list of
    (correlation id, start, end, request tensors) -> a list of outputs by name); every step's
    outputs must equal `run --state io` of its whole sequence (Caffe's layout, N = 1)."""
    axes = batch_axes(net)
    sequences, references = sequences_and_references(net)
    controls = {t.name for t in spec.cont_controls}
    for execution in interleave(LENGTHS):
        steps = [(corrids[i], t == 0, t == LENGTHS[i] - 1,
                  {k: v for k, v in step_request(sequences[i], t, axes).items()
                   if k not in controls}) for i, t in execution]
        for (i, t), outputs in zip(execution, execute(steps)):
            for output in spec.outputs:
                expected = np.moveaxis(references[i][output.name][t:t + 1], 1, 0)
                np.testing.assert_allclose(outputs[output.name], expected, atol=TOL, rtol=0,
                                           err_msg=f"{output.name} of sequence {i} at step {t}")


# ---- the Python backend --------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(NETS))
@pytest.mark.parametrize("cont_from_start", [False, True], ids=["cont-sent", "cont-from-start"])
def test_python_backend_serves_interleaved_sequences(tmp_path, weights_dir, key,
                                                     cont_from_start):
    flags = ["--cont-from-start"] if cont_from_start else []
    net, spec, folder = write_repo(key, weights_dir, tmp_path / "repo", *flags)
    assert sorted(p.name for p in (folder / "1").iterdir()) == ["model.onnx", "model.py"]
    model = load_python_model(folder, spec)
    controls = [t.name for t in spec.cont_controls]

    def execute(steps):
        requests = []
        for corrid, start, end, tensors in steps:
            sent = {**tensors, **_flags(start, end, corrid)}
            # what Triton sends from START for cont (fp32_false_true: [1, 0])
            sent.update({c: np.array([[0.0 if start else 1.0]], np.float32) for c in controls})
            requests.append(_Request(sent, corrid))
        responses = model.execute(requests)
        for response in responses:
            assert response.error is None, response.error.message()
        return [response.outputs for response in responses]

    serve_and_compare(net, spec, execute)
    assert model.store == {}, "every sequence ended: no state may be left"
    # correlation ids reused after END start from zeros again
    serve_and_compare(net, spec, execute)


def _flags(start: bool, end: bool, corrid: int) -> dict[str, np.ndarray]:
    return {"START": np.array([[int(start)]], np.int32), "END": np.array([[int(end)]], np.int32),
            "READY": np.array([[1]], np.int32), "CORRID": np.array([[corrid]], np.uint64)}


def test_python_backend_answers_a_bad_request_alone(tmp_path):
    """A wrong shape, a wrong dtype and a missing input each get an error of their own; the
    good request in the same execute() is answered, and its sequence goes on."""
    prototxt, weights = sample("seq_classifier")
    net = caffe_lstm.load(prototxt, weights, shapes={"data": (1, 2, 8), "cont": (1, 2)})
    spec = net.to_triton(tmp_path / "repo", max_batch=4).spec
    model = load_python_model(tmp_path / "repo" / "seq_classifier", spec)
    good = {"data": np.ones((1, 1, 8), np.float32), "cont": np.zeros((1, 1), np.float32)}
    bad_shape = {**good, "data": np.ones((1, 1, 7), np.float32)}
    bad_dtype = {**good, "data": np.ones((1, 1, 8), np.float64)}
    missing = {"cont": good["cont"]}
    requests = [_Request({**tensors, **_flags(True, False, corrid)}, corrid)
                for corrid, tensors in enumerate([bad_shape, good, bad_dtype, missing], 1)]
    responses = model.execute(requests)
    errors = [r.error.message() if r.error is not None else None for r in responses]
    assert errors[1] is None
    assert "shape [1, 1, 7]" in errors[0] and "float64" in errors[2] and "missing" in errors[3]
    assert list(model.store) == [2]
    later = model.execute([_Request({**good, "cont": np.ones((1, 1), np.float32),
                                     **_flags(False, True, 2)}, 2)])
    assert later[0].error is None and model.store == {}
    # a sequence the model does not know (ended, or idled past the timeout) must restart
    orphan = model.execute([_Request({**good, **_flags(False, False, 9)}, 9)])
    assert "START" in orphan[0].error.message()


def test_python_backend_expires_idle_sequences(tmp_path, monkeypatch):
    prototxt, weights = sample("seq_classifier")
    net = caffe_lstm.load(prototxt, weights, shapes={"data": (1, 2, 8), "cont": (1, 2)})
    from caffe_lstm.serving.config import Batching

    spec = net.to_triton(tmp_path / "repo", max_batch=4,
                         batching=Batching(max_sequence_idle_us=2_000_000)).spec
    model = load_python_model(tmp_path / "repo" / "seq_classifier", spec)
    clock = [100.0]
    monkeypatch.setitem(type(model).execute.__globals__, "time",
                        types.SimpleNamespace(monotonic=lambda: clock[0]))
    step = {"data": np.ones((1, 1, 8), np.float32), "cont": np.zeros((1, 1), np.float32)}
    model.execute([_Request({**step, **_flags(True, False, 5)}, 5),
                   _Request({**step, **_flags(True, False, 6)}, 6)])
    clock[0] += 1.5
    model.execute([_Request({**step, **_flags(False, False, 6)}, 6)])
    clock[0] += 1.0  # 5 idle 2.5 s (past 2 s), 6 idle 1 s
    model.execute([_Request({**step, **_flags(False, False, 6)}, 6)])
    assert list(model.store) == [6]


# ---- nets that cannot be served ------------------------------------------------------------------


def test_unservable_net_one_line_no_repository(tmp_path):
    """fork_vision's rois (R, 5) have no batch axis: one line naming the input, exit 1, and
    the repository folder that did not exist before does not exist after."""
    prototxt, weights = sample("fork_vision")
    repo = tmp_path / "new" / "repo"
    result = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(repo))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "'rois'" in lines[0]
    assert "--batch-axis" in lines[0]
    assert not (tmp_path / "new").exists()


def test_cont_from_start_needs_one_step(tmp_path):
    prototxt, weights = sample("seq_classifier")
    result = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(tmp_path / "repo"),
                     "--cont-from-start")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "one step per request" in result.stderr
    assert not (tmp_path / "repo").exists()


# ---- the onnxruntime and TensorRT backends: Triton's implicit state, driven by hand -------------


def triton_schema():
    """Triton's ModelConfig schema from tritonclient, or a skip saying why."""
    try:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2
    except (ImportError, RuntimeError) as exc:
        pytest.skip(f"tritonclient[grpc] is not installed ({exc}): Triton's schema is missing")
    return model_config_pb2, text_format


def parsed_config(folder: Path) -> dict:
    """config.pbtxt parsed by Triton's schema, as a dict of field names (as Triton's Python
    backend receives it)."""
    from google.protobuf import json_format

    schema, text_format = triton_schema()
    message = text_format.Parse((folder / "config.pbtxt").read_text(), schema.ModelConfig())
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def model_io(config: dict) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """What the model file must read and write by the config: name -> dims after N (inputs,
    cont controls fed from START, state inputs; outputs, state outputs)."""
    inputs = {t["name"]: [int(d) for d in t["dims"]] for t in config["input"]}
    outputs = {t["name"]: [int(d) for d in t["dims"]] for t in config["output"]}
    sequence = config.get("sequence_batching", {})
    for control in sequence.get("control_input", []):
        if any("fp32_false_true" in c for c in control["control"]):
            inputs[control["name"]] = [1]
    states = sequence.get("state", [])
    if config["backend"] == "python" and "caffe_lstm" in config.get("parameters", {}):
        states = json.loads(config["parameters"]["caffe_lstm"]["string_value"])["states"]
        states = [{"input_name": s["input"], "output_name": s["output"], "dims": s["dims"]}
                  for s in states]
    for state in states:
        inputs[state["input_name"]] = [int(d) for d in state["dims"]]
        outputs[state["output_name"]] = [int(d) for d in state["dims"]]
    return inputs, outputs


class ImplicitState:
    """Triton's sequence batcher with implicit state (its model configuration guide), by hand:
    the requests of one execution are stacked on dim 0 (a batch slot per sequence); a state
    input is the ``initial_state`` (zero_data) on a sequence's START request and the state
    output of its previous request after; a cont control input is ``fp32_false_true[1]`` on
    START and ``fp32_false_true[0]`` otherwise; END frees the slot."""

    def __init__(self, config: dict, run) -> None:
        sequence = config["sequence_batching"]
        self.run, self.inputs = run, [t["name"] for t in config["input"]]
        self.outputs = [t["name"] for t in config["output"]]
        self.states = sequence.get("state", [])
        assert all(i.get("zero_data") for s in self.states for i in s["initial_state"])
        self.conts = {c["name"]: [float(v) for v in item["fp32_false_true"]]
                      for c in sequence["control_input"] for item in c["control"]
                      if "fp32_false_true" in item}
        self.slots: dict[int, dict[str, np.ndarray]] = {}
        self.batched = int(config.get("max_batch_size", 0)) > 0  # 0: not printed

    def execute(self, steps) -> list[dict[str, np.ndarray]]:
        if not self.batched:  # max_batch_size 0: each request runs alone, full dims
            return [answer for step in steps for answer in self._execute([step])]
        return self._execute(steps)

    def _execute(self, steps) -> list[dict[str, np.ndarray]]:
        lead = (1,) if self.batched else ()
        feeds = {name: np.concatenate([tensors[name] for *_, tensors in steps])
                 for name in self.inputs}  # one step alone when unbatched: itself
        for name, (false, true) in self.conts.items():
            feeds[name] = np.array([[true if start else false] for _, start, _, _ in steps],
                                   np.float32)  # cont from START needs batching: (N, 1)
        for state in self.states:
            dims = [int(d) for d in state["dims"]]
            feeds[state["input_name"]] = np.concatenate([
                np.zeros((*lead, *dims), np.float32) if start
                else self.slots[corrid][state["output_name"]]
                for corrid, start, _, _ in steps])
        results = self.run(feeds)
        answers = []
        for row, (corrid, _, end, _) in enumerate(steps):
            rows = slice(row, row + 1) if self.batched else slice(None)
            self.slots[corrid] = {s["output_name"]: results[s["output_name"]][rows]
                                  for s in self.states}
            if end:
                del self.slots[corrid]
            answers.append({name: results[name][rows] for name in self.outputs})
        return answers


def onnx_runner(path: Path):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(None, feeds)))


#: A build fact among the config's parameters (what `triton` adds beyond ``prepare``).
_BUILD_FACT = re.compile(r'parameters \{\n  key: "caffe_lstm\.[^"]*"\n  value \{\n'
                         r'    string_value: "(?:[^"\\]|\\.)*"\n  \}\n\}\n')


def repository_network(net, key: str, cont_from_start: bool, folder: Path):
    """The TensorRT network of the repository's model.plan, made as `triton` made it (the
    same graph, profile and config): (runtime, network, prepared, the weights' keeper)."""
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    from caffe_lstm.serving.config import to_pbtxt
    from caffe_lstm.serving.repository import TritonOptions, prepare, tensorrt_network

    stated = net.with_state_io() if net.needs_state_io else net.copy()
    prepared = prepare(stated.graph, key, TritonOptions(backend="tensorrt", max_batch=4,
                                                        cont_from_start=cont_from_start))
    written = (folder / "config.pbtxt").read_text()
    assert to_pbtxt(model_config(prepared.spec)) == re.sub(_BUILD_FACT, "", written)
    runtime, _, network, _, keep = tensorrt_network(prepared)
    return runtime, network, prepared, keep


def tensorrt_runner(net, key: str, cont_from_start: bool, folder: Path):
    """The repository's TensorRT network evaluated with numpy through the TensorRT API."""
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network

    runtime, network, _, keep = repository_network(net, key, cont_from_start, folder)
    return lambda feeds: (keep, evaluate_network(runtime.trt, network, feeds))[1]


def assert_network_agrees(network, profiles: dict, inputs: dict, outputs: dict) -> None:
    """Network inputs and outputs are the config's (float32, batch dim dynamic, the config's
    dims after it) and the profile spans batch 1..4."""
    found_in = [network.get_input(i) for i in range(network.num_inputs)]
    found_out = [network.get_output(i) for i in range(network.num_outputs)]
    assert {t.name for t in found_in} == set(inputs)
    assert {t.name for t in found_out} == set(outputs)
    for tensor in found_in + found_out:
        assert "FLOAT" in str(tensor.dtype).upper(), tensor.name
        assert list(tensor.shape) == [-1, *{**inputs, **outputs}[tensor.name]], tensor.name
    for name, dims in inputs.items():
        low, _, high = profiles[name]
        assert list(low) == [1, *dims] and list(high) == [4, *dims], name


@pytest.mark.parametrize("key", sorted(NETS))
@pytest.mark.parametrize("backend", ["onnxruntime", "tensorrt", "python"])
def test_config_parses_with_triton_schema_and_agrees_with_model_file(tmp_path, weights_dir,
                                                                      key, backend):
    if backend == "tensorrt":
        pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    triton_schema()
    net, spec, folder = write_repo(key, weights_dir, tmp_path / "repo", "--backend", backend)
    config = parsed_config(folder)
    assert config["name"] == key and config["max_batch_size"] == 4
    inputs, outputs = model_io(config)
    if backend == "tensorrt":
        assert (folder / "1" / "model.plan").read_bytes()[:4] in (b"vtrt", b"ftrt")
        _, network, prepared, _ = repository_network(net, key, False, folder)
        assert_network_agrees(network, prepared.profiles, inputs, outputs)
        return
    onnx = pytest.importorskip("onnx")
    model = onnx.load(str(folder / "1" / "model.onnx"))
    declared_in = {i.name: i for i in model.graph.input}
    declared_out = {o.name: o for o in model.graph.output}
    assert set(declared_in) == set(inputs) and set(declared_out) == set(outputs)
    for name, info in {**declared_in, **declared_out}.items():
        dims = [d.dim_param or d.dim_value for d in info.type.tensor_type.shape.dim]
        assert info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
        assert isinstance(dims[0], str), f"{name}: the batch dim must be symbolic"
        assert dims[1:] == {**inputs, **outputs}[name], name


@pytest.mark.parametrize("key", sorted(NETS))
@pytest.mark.parametrize("backend", ["onnxruntime", "tensorrt"])
@pytest.mark.parametrize("cont_from_start", [False, True], ids=["cont-sent", "cont-from-start"])
def test_implicit_state_serves_interleaved_sequences(tmp_path, weights_dir, key, backend,
                                                     cont_from_start):
    flags = ["--cont-from-start"] if cont_from_start else []
    if backend == "tensorrt":
        pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    net, spec, folder = write_repo(key, weights_dir, tmp_path / "repo", "--backend", backend,
                                   *flags)
    try:
        config = parsed_config(folder)
    except pytest.skip.Exception:
        config = json.loads(json.dumps(model_config(spec)))  # our own dict, same field names
    run = (onnx_runner(folder / "1" / "model.onnx") if backend == "onnxruntime"
           else tensorrt_runner(net, key, cont_from_start, folder))
    driver = ImplicitState(config, run)
    serve_and_compare(net, spec, driver.execute)
    assert driver.slots == {}


# ---- a net without carried state: dynamic batching -----------------------------------------------

STATELESS = """
name: "scorer"
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 2 dim: 3 dim: 6 dim: 6 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "fc" type: "InnerProduct" bottom: "conv" top: "fc"
        inner_product_param { num_output: 5 } }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
"""


def test_net_without_state_gets_dynamic_batching(tmp_path):
    """A CNN: batch-first already (no transposes), dynamic_batching, no sequence controls;
    model.py answers requests of different batch sizes in one execute(), each equal to
    `run` of its own arrays, and model.onnx (onnxruntime backend) the same."""
    from caffe_lstm.frontend.caffe_writer import write_caffemodel
    from caffe_lstm.synthetic import synthetic_weights

    prototxt, weights = tmp_path / "scorer.prototxt", tmp_path / "scorer.caffemodel"
    prototxt.write_text(STATELESS)
    write_caffemodel(weights, synthetic_weights(caffe_lstm.load(prototxt).graph, seed=1))
    for backend in ("python", "onnxruntime"):
        result = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(tmp_path / "repo"),
                         "--backend", backend, "--name", f"scorer_{backend}",
                         "--preferred-batch-size", "4")
        assert result.returncode == 0, result.stderr
        assert "dynamic batching" in result.stdout
    net = caffe_lstm.load(prototxt, weights)
    spec = net.to_triton(tmp_path / "api", name="scorer_python").spec
    text = (tmp_path / "repo" / "scorer_python" / "config.pbtxt").read_text()
    assert "dynamic_batching" in text and "sequence_batching" not in text
    assert [(t.name, t.dims) for t in spec.inputs] == [("data", (3, 6, 6))]
    model = load_python_model(tmp_path / "repo" / "scorer_python", spec)
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((n, 3, 6, 6)).astype(np.float32) for n in (2, 1, 3)]
    responses = model.execute([_Request({"data": batch}, 0) for batch in batches])
    session = onnx_runner(tmp_path / "repo" / "scorer_onnxruntime" / "1" / "model.onnx")
    for batch, response in zip(batches, responses):
        assert response.error is None
        expected = net.run({"data": batch})["prob"]
        np.testing.assert_allclose(response.outputs["prob"], expected, atol=TOL, rtol=0)
        np.testing.assert_allclose(session({"data": batch})["prob"], expected, atol=TOL, rtol=0)


# ---- batch axes ----------------------------------------------------------------------------------

SQUARE = """
name: "square"
layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 2 dim: 2 } } }
layer { name: "prob" type: "Softmax" bottom: "x" top: "prob" }
"""


def test_ambiguous_batch_axis_is_refused_then_given(tmp_path):
    """x (2, 2) through a Softmax: N may be either axis. Refused naming x; --batch-axis x:1
    takes axis 1 (the model's input is then x transposed)."""
    prototxt = tmp_path / "square.prototxt"
    prototxt.write_text(SQUARE)
    weights = tmp_path / "square.caffemodel"
    from caffe_lstm.frontend.caffe_writer import write_caffemodel

    write_caffemodel(weights, [])
    result = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(tmp_path / "repo"))
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "'x'" in result.stderr and "ambiguous" in result.stderr
    assert not (tmp_path / "repo").exists()
    result = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(tmp_path / "repo"),
                     "--backend", "onnxruntime", "--batch-axis", "x:1")
    assert result.returncode == 0, result.stderr
    run = onnx_runner(tmp_path / "repo" / "square" / "1" / "model.onnx")
    x = np.random.default_rng(1).standard_normal((3, 2)).astype(np.float32)  # (N, 2)
    expected = caffe_lstm.load(prototxt, weights).run({"x": x.T})["prob"].T
    np.testing.assert_allclose(run({"x": x})["prob"], expected, atol=TOL, rtol=0)


def s2vt_files(tmp_path: Path) -> tuple[Path, Path]:
    """S2VT's step-wise deploy net (it reshapes to explicit dims (1, 1, 500): N is fixed) with
    synthetic weights, or a skip where the corpus is absent."""
    found = [p for p in corpus_files() if p.name == "examples__s2vt__s2vt.words_to_preds"
             ".deploy.prototxt"]
    if not found:
        pytest.skip("the corpus of public prototxts is not beside this clone (CI has it)")
    from caffe_lstm.frontend.caffe_writer import write_caffemodel
    from caffe_lstm.synthetic import synthetic_weights

    weights = tmp_path / "s2vt.caffemodel"
    write_caffemodel(weights, synthetic_weights(caffe_lstm.load(found[0]).graph, 0, 0.05))
    return found[0], weights


def test_corpus_net_that_fixes_n_is_refused_naming_the_layer(tmp_path):
    prototxt, weights = s2vt_files(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    result = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(repo))
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "'reshape_frames' (Reshape)" in result.stderr and "--max-batch 0" in result.stderr
    assert list(repo.iterdir()) == [], "nothing may be left in the repository"


def test_fixed_n_net_served_without_batching(tmp_path):
    """--max-batch 0: S2VT keeps Caffe's layout and full dims; model.py runs each request
    alone and carries the states by correlation id. Every step equals Caffe's step-wise
    decoding: `run --state io` of that step fed the previous step's h_T, c_T."""
    prototxt, weights = s2vt_files(tmp_path)
    result = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(tmp_path / "repo"),
                     "--max-batch", "0", "--name", "s2vt")
    assert result.returncode == 0, result.stderr
    assert "no batching" not in result.stdout and "sequence batching" in result.stdout
    net = caffe_lstm.load(prototxt, weights)
    spec = net.to_triton(tmp_path / "api", name="s2vt", max_batch=0).spec
    assert spec.max_batch == 0 and dict((t.name, t.dims) for t in spec.inputs)[
        "cont_sentence"] == (1, 1)
    model = load_python_model(tmp_path / "repo" / "s2vt", spec)
    lengths = [3, 1, 4]
    steps = [[_s2vt_step(net, 10 * i + t, t) for t in range(n)] for i, n in enumerate(lengths)]
    expected = [_chained(net, sequence) for sequence in steps]
    for execution in interleave(lengths):
        requests = [_Request({**steps[i][t], **_flags(t == 0, t == lengths[i] - 1, 7 + i)},
                             7 + i) for i, t in execution]
        for (i, t), response in zip(execution, model.execute(requests)):
            assert response.error is None, response.error.message()
            np.testing.assert_allclose(response.outputs["probs"], expected[i][t], atol=TOL,
                                       rtol=0, err_msg=f"sequence {i} step {t}")
    assert model.store == {}


def _s2vt_step(net, seed: int, t: int) -> dict[str, np.ndarray]:
    feeds = {k: v for k, v in net.random_inputs(seed).items() if k in net.inputs}
    feeds["cont_sentence"] = np.full((1, 1), 0.0 if t == 0 else 1.0, np.float32)
    return feeds


def _chained(net, steps: list[dict]) -> list[np.ndarray]:
    """Caffe's step-wise decoding: each Forward fed the previous one's final states."""
    states: dict[str, np.ndarray] = {}
    probs = []
    for feeds in steps:
        out = net.run({**feeds, **states}, state="io")
        states = {name.replace("_T", "_0"): value for name, value in out.items()
                  if name.endswith(("/h_T", "/c_T"))}
        probs.append(out["probs"])
    return probs


# ---- the model folder ----------------------------------------------------------------------------


def test_model_folder_is_replaced_whole_and_other_folders_are_refused(tmp_path):
    prototxt, weights = sample("seq_classifier")
    repo = tmp_path / "repo"
    first = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(repo))
    assert first.returncode == 0, first.stderr
    again = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(repo),
                    "--backend", "onnxruntime", "--max-batch", "2")
    assert again.returncode == 0, again.stderr
    folder = repo / "seq_classifier"
    assert sorted(p.name for p in (folder / "1").iterdir()) == ["model.onnx"]
    assert "max_batch_size: 2" in (folder / "config.pbtxt").read_text()
    assert sorted(p.name for p in repo.iterdir()) == ["seq_classifier"]
    (repo / "notes").mkdir()
    refused = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(repo), "--name",
                      "notes")
    assert refused.returncode == 1 and "not a Triton model" in refused.stderr
    assert list((repo / "notes").iterdir()) == []


# ---- the structural check (what Triton refuses at load time and its parser lets through) --------


def _stateful_config() -> dict:
    from caffe_lstm.serving.config import ModelSpec, State, Tensor

    spec = ModelSpec("m", "onnxruntime", 4, 1, (Tensor("x", (1, 3)),), (Tensor("y", (1, 2)),),
                     (State("l/h_0", "l/h_T", (1, 5)),))
    return model_config(spec)


def _two_starts(config):
    config["sequence_batching"]["control_input"].append(
        {"name": "cont", "control": [{"kind": "CONTROL_SEQUENCE_START",
                                      "fp32_false_true": [1, 0]}]})


def _state_as_input(config):
    config["input"].append({"name": "l/h_0", "data_type": "TYPE_FP32", "dims": [1, 5]})


def _bad_type(config):
    config["output"][0]["data_type"] = "TYPE_FLOAT"


def _corrid_untyped(config):
    del config["sequence_batching"]["control_input"][3]["control"][0]["data_type"]


def _preferred_too_big(config):
    config["sequence_batching"]["oldest"]["preferred_batch_size"] = [8]


@pytest.mark.parametrize("break_it", [_two_starts, _state_as_input, _bad_type, _corrid_untyped,
                                      _preferred_too_big])
def test_structural_check_refuses_what_triton_refuses(break_it):
    from caffe_lstm.serving.config import TritonConfigError, check_structure

    config = _stateful_config()
    check_structure(config, "m/config.pbtxt")
    break_it(config)
    with pytest.raises(TritonConfigError):
        check_structure(config, "m/config.pbtxt")


# ---- Triton core loads the onnxruntime and TensorRT configs (state blocks included) -------------

#: Stands in for Triton's onnxruntime and TensorRT backends, which only the NGC containers ship:
#: a Python-based backend of that name makes Triton core load and validate the whole config
#: (inputs, outputs, sequence batching, control inputs, implicit state) without the model file.
STAND_IN = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        refusal = pb_utils.TritonError("a stand-in backend: it only loads")
        return [pb_utils.InferenceResponse(output_tensors=[], error=refusal) for _ in requests]
'''


def bundled_triton() -> Path:
    """nvidia-pytriton's tritonserver folder, or a skip saying why."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or spec.origin is None:
        pytest.skip("nvidia-pytriton (the bundled tritonserver) is not installed")
    folder = Path(spec.origin).parent / "tritonserver"
    stub = folder / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}"
    if not (folder / "bin" / "tritonserver").is_file() or not stub.is_dir():
        pytest.skip(f"nvidia-pytriton has no tritonserver or stub for this Python in {folder}")
    return folder


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def load_with_triton_core(repo: Path, workdir: Path) -> dict[str, str]:
    """Starts the bundled tritonserver on ``repo`` with the stand-in backends; returns each
    model's state (READY, or the reason it is not) once every model has settled."""
    import os
    import shutil
    import time
    import urllib.request

    folder = bundled_triton()
    backends = workdir / "backends"
    shutil.copytree(folder / "backends" / "python", backends / "python")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    shutil.copy(folder / "python_backend_stubs" / version / "triton_python_backend_stub",
                backends / "python")
    for name in ("onnxruntime", "tensorrt"):
        (backends / name).mkdir()
        (backends / name / "model.py").write_text(STAND_IN)
    port = _free_port()
    libs = folder.parent.parent / "nvidia_pytriton.libs"
    env = {**os.environ, "LD_LIBRARY_PATH": str(libs),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [str(folder / "bin" / "tritonserver"), f"--model-repository={repo}",
               f"--backend-directory={backends}", "--exit-on-error=false",
               "--allow-grpc=false", "--allow-metrics=false", "--http-address=127.0.0.1",
               f"--http-port={port}"]
    log = open(workdir / "triton.log", "w")
    server = subprocess.Popen(command, cwd=workdir, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.poll() is None:
            time.sleep(1)
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/repository/index",
                                                 data=b"{}", method="POST")
                with urllib.request.urlopen(request, timeout=5) as answer:
                    index = json.loads(answer.read())
            except OSError:
                continue
            if index and all(m.get("state") in ("READY", "UNAVAILABLE") for m in index):
                return {m["name"]: m["state"] if m["state"] == "READY" else m.get("reason", "")
                        for m in index}
        pytest.fail(f"tritonserver did not settle: {(workdir / 'triton.log').read_text()[-2000:]}")
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_triton_core_loads_onnxruntime_and_tensorrt_configs(tmp_path, weights_dir):
    """The configs `triton` writes for the onnxruntime and TensorRT backends (sequence state,
    control inputs, cont from START) are accepted by Triton itself. The TensorRT configs ask
    for KIND_GPU, which a machine without a GPU refuses: the copy loaded here asks for CPU."""
    bundled_triton()
    repo = tmp_path / "repo"
    for key in ("captioner", "lstm_lm"):
        prototxt, weights, shapes = net_files(key, weights_dir)
        for backend in ("onnxruntime", "tensorrt"):
            if backend == "tensorrt" and importlib.util.find_spec("tensorrt_rtx_bindings") is None:
                continue
            for flags in ((), ("--cont-from-start",)):
                name = f"{key}_{backend}" + ("_cfs" if flags else "")
                result = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(repo),
                                 "--backend", backend, "--name", name, *shape_args(shapes), *flags)
                assert result.returncode == 0, result.stderr
                config = repo / name / "config.pbtxt"
                config.write_text(config.read_text().replace("KIND_GPU", "KIND_CPU"))
    # without batching (max_batch_size 0), sequence state included; python: model.py loads
    prototxt, weights, _ = net_files("lstm_lm", weights_dir)
    for backend in ("onnxruntime", "python"):
        result = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(repo), "--backend",
                         backend, "--name", f"lstm_lm_{backend}_unbatched", "--max-batch", "0")
        assert result.returncode == 0, result.stderr
    states = load_with_triton_core(repo, tmp_path)
    assert states and all(state == "READY" for state in states.values()), states


def test_batch_axes_of_a_corpus_net_at_n_1():
    """SCRC at N = 1: ten inputs (four data, six states) whose size-1 axes could each be N;
    the recurrent layers' own inputs are time-major, the image features batch-first."""
    from caffe_lstm.passes.batch_major import find_batch_axes

    found = [p for p in corpus_files() if p.name == "prototxt__scrc_word_to_preds_full.prototxt"]
    if not found:
        pytest.skip("the corpus of public prototxts is not beside this clone (CI has it)")
    net = caffe_lstm.load(found[0], shapes={"cont_sentence": (1, 1), "input_sentence": (1, 1),
                                            "image_features": (1, 1008),
                                            "fc7_context": (1, 4096)})
    axes = find_batch_axes(net.with_state_io().graph)
    assert axes.batch == 1
    assert axes.inputs == {"cont_sentence": 1, "input_sentence": 1, "image_features": 0,
                           "fc7_context": 0, **{f"{layer}/{s}_0": 1 for layer in
                                                ("lstm1", "lstm2-extended", "lstm2_context")
                                                for s in "hc"}}
    assert axes.outputs["probs"] == 1


def test_implicit_state_without_batching(tmp_path, weights_dir):
    """--max-batch 0 with the onnxruntime backend: full dims, each request alone, the state
    carried by Triton's implicit-state contract (lstm_lm: N = 1 and T = 1, so Caffe's layout
    and the batch-major one hold the same arrays)."""
    net, spec, folder = write_repo_unbatched("lstm_lm", weights_dir, tmp_path / "repo")
    try:
        config = parsed_config(folder)
    except pytest.skip.Exception:
        config = json.loads(json.dumps(model_config(spec)))
    assert int(config.get("max_batch_size", 0)) == 0
    driver = ImplicitState(config, onnx_runner(folder / "1" / "model.onnx"))
    serve_and_compare(net, spec, driver.execute)
    assert driver.slots == {}


def write_repo_unbatched(key: str, weights_dir: Path, repo: Path):
    prototxt, weights, shapes = net_files(key, weights_dir)
    result = run_cli("triton", str(prototxt), "-w", str(weights), "-o", str(repo), "--name", key,
                     "--max-batch", "0", "--backend", "onnxruntime", *shape_args(shapes))
    assert result.returncode == 0, result.stderr
    net = caffe_lstm.load(prototxt, weights, shapes=shapes)
    spec = net.to_triton(repo.parent / "api", name=key, max_batch=0, backend="onnxruntime").spec
    return net, spec, repo / key


def test_a_full_disk_is_one_error_and_leaves_nothing(tmp_path, monkeypatch):
    """An OSError while the model folder is written (ENOSPC here) is the user's OutputError,
    and the staged folder and the repository made for it are gone."""
    import errno
    from pathlib import Path as PathType

    from caffe_lstm.errors import OutputError

    prototxt, weights = sample("seq_classifier")
    net = caffe_lstm.load(prototxt, weights, shapes={"data": (1, 2, 8), "cont": (1, 2)})

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(PathType, "write_text", full)
    with pytest.raises(OutputError, match="No space left on device"):
        net.to_triton(tmp_path / "repo", max_batch=4)
    assert list(tmp_path.iterdir()) == []


# ---- --lstm-op of model.onnx ---------------------------------------------------------------------

INDICATED = """
name: "indicated"
layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 4 dim: 2 dim: 3 } } }
layer { name: "cont" type: "ContinuationIndicator" top: "cont"
        continuation_indicator_param { time_step: 4 batch_size: 2 } }
layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param { num_output: 5 } }
"""


def test_lstm_op_auto_writes_onnx_own_lstm_where_exact(tmp_path):
    """A cont from a ContinuationIndicator (a net that fixes N: served without batching):
    model.onnx holds ONNX's LSTM and computes what numpy does; a cont clients send stays a
    Scan, each choice printed; model.plan takes scan only."""
    onnx = pytest.importorskip("onnx")
    from caffe_lstm.frontend.caffe_writer import write_caffemodel
    from caffe_lstm.synthetic import synthetic_weights

    prototxt, weights = tmp_path / "indicated.prototxt", tmp_path / "indicated.caffemodel"
    prototxt.write_text(INDICATED)
    write_caffemodel(weights, synthetic_weights(caffe_lstm.load(prototxt).graph, seed=2))
    net = caffe_lstm.load(prototxt, weights)
    written = net.to_triton(tmp_path / "repo", backend="onnxruntime", max_batch=0,
                            lstm_op="auto")
    model = written.path / "1" / "model.onnx"
    assert "LSTM" in [node.op_type for node in onnx.load(model).graph.node]
    x = np.random.default_rng(3).standard_normal((4, 2, 3)).astype(np.float32)
    got = onnx_runner(model)({"x": x})["h"]
    np.testing.assert_allclose(got, net.run({"x": x})["h"], atol=TOL, rtol=0)

    prototxt_sent, weights_sent = sample("seq_classifier")
    result = run_cli("triton", prototxt_sent, "-w", weights_sent, "-o", tmp_path / "sent",
                     "--backend", "onnxruntime", "--lstm-op", "auto")
    assert result.returncode == 0, result.stderr
    assert any(": one Scan, since its cont 'cont' is a net input" in line
               for line in result.stdout.splitlines()), result.stdout
    result = run_cli("triton", prototxt, "-w", weights, "-o", tmp_path / "plan",
                     "--backend", "tensorrt", "--lstm-op", "auto", "--max-batch", "0")
    assert result.returncode == 1 and "--lstm-op auto is for model.onnx" in result.stderr
