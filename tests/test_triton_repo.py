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
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import caffe_lstm
from caffe_lstm.serving.config import model_config
from tests.project import ROOT

SAMPLES = ROOT / "samples"
TOL = 1e-5


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "caffe_lstm", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def sample(name: str) -> tuple[Path, Path]:
    return SAMPLES / name / f"{name}.prototxt", SAMPLES / name / f"{name}.caffemodel"


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
    model.initialize({"model_config": json.dumps(model_config(spec)),
                      "model_repository": str(model_dir), "model_version": "1"})
    return model


# ---- sequences and their references --------------------------------------------------------------


def step_sequences(net, lengths: list[int], seed: int) -> list[dict[str, np.ndarray]]:
    """One whole sequence per length, time-major with N = 1 (Caffe's layout): random data,
    cont 0 at t = 0 and 1 after, valid Embed ids (from ``random_inputs``)."""
    sequences = []
    for index, steps in enumerate(lengths):
        sized = caffe_lstm.load(net.prototxt, net.weights, shapes=_sized(net, steps))
        feeds = sized.random_inputs(seed + index)
        sequences.append({k: v for k, v in feeds.items() if not k.endswith(("/h_0", "/c_0"))})
    return sequences


def _sized(net, steps: int) -> dict[str, tuple[int, ...]]:
    """Every input shaped for one sequence: time-major ones (T, 1, ...), batch-first (1, ...)."""
    from caffe_lstm.passes.batch_major import find_batch_axes

    axes = find_batch_axes(net.with_state_io().graph)
    shapes = {}
    for name, shape in net.inputs.items():
        axis = axes.inputs[name]
        shapes[name] = (steps, 1, *shape[2:]) if axis == 1 else (1, *shape[1:])
    return shapes


def reference(net, sequence: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`run --state io` of the whole sequence (zero initial state), time-major."""
    return net.run(sequence, state="io")


def step_request(sequence: dict[str, np.ndarray], t: int, axes: dict[str, int]
                 ) -> dict[str, np.ndarray]:
    """Step t of a sequence as a batch-major request of batch 1 (T = 1)."""
    request = {}
    for name, array in sequence.items():
        if axes[name] == 1:
            request[name] = np.ascontiguousarray(np.moveaxis(array[t:t + 1], 1, 0))
        else:
            request[name] = array
    return request


def interleave(lengths: list[int]) -> list[list[tuple[int, int]]]:
    """Executions of (sequence, step): a round robin over the live sequences, up to 3 per
    execution, so that sequences start and end at different executions."""
    next_step, executions = [0] * len(lengths), []
    while any(s < n for s, n in zip(next_step, lengths)):
        live = [i for i, (s, n) in enumerate(zip(next_step, lengths)) if s < n]
        batch = live[len(executions) % len(live):][:3] or live[:3]
        executions.append([(i, next_step[i]) for i in batch])
        for i in batch:
            next_step[i] += 1
    return executions


# ---- the Python backend --------------------------------------------------------------------------


STEP_WISE = {"captioner": {"cont_sentence": "1x2", "input_sentence": "1x2"},
             "seq_classifier": {"data": "1x2x8", "cont": "1x2"},
             "deepspeech_relu": {"frames": "1x2x161", "cont": "1x2"}}


@pytest.mark.parametrize("name", sorted(STEP_WISE))
@pytest.mark.parametrize("cont_from_start", [False, True])
def test_python_backend_serves_interleaved_sequences(tmp_path, name, cont_from_start):
    prototxt, weights = sample(name)
    shapes = [arg for blob, dims in STEP_WISE[name].items() for arg in ("--shape",
                                                                       f"{blob}:{dims}")]
    flags = ["--cont-from-start"] if cont_from_start else []
    result = cli("triton", str(prototxt), "-w", str(weights), "-o", str(tmp_path / "repo"),
                 "--max-batch", "4", *shapes, *flags)
    assert result.returncode == 0, result.stderr
    net = caffe_lstm.load(prototxt, weights)
    spec = _spec_of(prototxt, weights, STEP_WISE[name], cont_from_start, tmp_path)
    model = load_python_model(tmp_path / "repo" / name, spec)
    lengths = [5, 2, 7, 3, 1, 4]
    sequences = step_sequences(net, lengths, seed=3)
    axes = _axes(net)
    references = [reference(net, s) for s in sequences]
    controls = {t.name for t in spec.cont_controls}
    for execution in interleave(lengths):
        requests = []
        for index, t in execution:
            tensors = {k: v for k, v in step_request(sequences[index], t, axes).items()
                       if k not in controls}
            tensors.update(_flags(t == 0, t == lengths[index] - 1, 100 + index))
            tensors.update({c: np.array([[0.0 if t == 0 else 1.0]], np.float32)
                            for c in controls})  # what Triton sends from START
            requests.append(_Request(tensors, 100 + index))
        responses = model.execute(requests)
        for (index, t), response in zip(execution, responses):
            assert response.error is None, response.error.message()
            for output in spec.outputs:
                expected = np.moveaxis(references[index][output.name][t:t + 1], 1, 0)
                np.testing.assert_allclose(response.outputs[output.name], expected, atol=TOL,
                                           rtol=0, err_msg=f"{output.name} of sequence "
                                           f"{index} at step {t}")
    assert model.store == {}, "every sequence ended: no state may be left"


def _flags(start: bool, end: bool, corrid: int) -> dict[str, np.ndarray]:
    return {"START": np.array([[int(start)]], np.int32), "END": np.array([[int(end)]], np.int32),
            "READY": np.array([[1]], np.int32), "CORRID": np.array([[corrid]], np.uint64)}


def _axes(net) -> dict[str, int]:
    from caffe_lstm.passes.batch_major import find_batch_axes

    return find_batch_axes(net.with_state_io().graph).inputs


def _spec_of(prototxt, weights, shapes, cont_from_start, tmp_path):
    """The ModelSpec the CLI wrote, made again through the API (same net, same options)."""
    static = {blob: tuple(int(d) for d in dims.split("x")) for blob, dims in shapes.items()}
    net = caffe_lstm.load(prototxt, weights, shapes=static)
    written = net.to_triton(tmp_path / "api", max_batch=4, cont_from_start=cont_from_start)
    cli_text = (tmp_path / "repo" / prototxt.stem / "config.pbtxt").read_text()
    assert written.config == cli_text
    return written.spec


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
    result = cli("triton", str(prototxt), "-w", str(weights), "-o", str(repo))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "'rois'" in lines[0]
    assert "--batch-axis" in lines[0]
    assert not (tmp_path / "new").exists()


def test_cont_from_start_needs_one_step(tmp_path):
    prototxt, weights = sample("seq_classifier")
    result = cli("triton", str(prototxt), "-w", str(weights), "-o", str(tmp_path / "repo"),
                 "--cont-from-start")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "one step per request" in result.stderr
    assert not (tmp_path / "repo").exists()
