"""Serving on a real Triton server: repositories written by ``caffe-lstm triton --backend python``
for the samples and the corpus's step-wise deploy nets, served by ``caffe-lstm serve`` (the
``tritonserver`` bundled in nvidia-pytriton), driven with tritonclient over gRPC and HTTP.

Every step a client gets back must equal ``caffe-lstm run --state io`` of the whole sequence
(one run per model, the sequences side by side along N, cont 0 at each sequence's first step).
The tests skip, with the reason, only where nvidia-pytriton or tritonclient is missing (the
``[serve]`` extra); a server that is installed but does not start fails them.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from caffe_lstm.cli import cli
from caffe_lstm.serving.server import ServingError, TritonServer, find_triton, free_port
from tests.helpers import CORPUS, ROOT, SAMPLES

ATOL = 1e-5
THREADS = 32
#: Seconds a whole client-driven phase may take before the test gives up on it.
PHASE_TIMEOUT = 180


# ---- what is served -------------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """A net served one step per request: its time-major inputs (word ids or features), its
    batch-first static inputs and its cont (sent by the client, or fed by Triton from START)."""

    name: str
    prototxt: Path
    weights: Path | None  # None: synthetic weights (`caffe-lstm weights init`)
    cont: str
    words: dict[str, int] = field(default_factory=dict)  # time-major word ids < vocabulary
    features: dict[str, int] = field(default_factory=dict)  # time-major feature vectors
    static: dict[str, int] = field(default_factory=dict)  # batch-first (N, width) inputs
    lengths: tuple[int, int] = (2, 10)  # sequence lengths drawn from this range
    sequences: int = 40
    options: tuple[str, ...] = ()  # more `caffe-lstm triton` options

    def step_shapes(self) -> list[str]:
        """--shape for one step of one sequence (T = 1, N = 1)."""
        shapes = [f"{self.cont}:1x1"] + [f"{name}:1x1" for name in self.words]
        shapes += [f"{name}:1x1x{width}" for name, width in self.features.items()]
        shapes += [f"{name}:1x{width}" for name, width in self.static.items()]
        return [arg for shape in shapes for arg in ("--shape", shape)]

    def whole_shapes(self, steps: int, n: int) -> list[str]:
        """--shape for ``n`` sequences of up to ``steps`` steps side by side."""
        shapes = [f"{self.cont}:{steps}x{n}"] + [f"{name}:{steps}x{n}" for name in self.words]
        shapes += [f"{name}:{steps}x{n}x{width}" for name, width in self.features.items()]
        shapes += [f"{name}:{n}x{width}" for name, width in self.static.items()]
        return [arg for shape in shapes for arg in ("--shape", shape)]


_CORPUS_LM = CORPUS / "jeffdonahue__caffe-1" / "examples__coco_caption__lstm_lm.deploy.prototxt"
_CORPUS_LRCN = (CORPUS / "jeffdonahue__caffe-1"
                / "examples__coco_caption__lrcn_word_to_preds.deploy.prototxt")

SERVED = [
    Served("seq_classifier", SAMPLES / "seq_classifier" / "seq_classifier.prototxt",
           SAMPLES / "seq_classifier" / "seq_classifier.caffemodel", cont="cont",
           features={"data": 8}, sequences=64),
    # Triton feeds cont_sentence from START: the clients send words and image features only.
    Served("captioner", SAMPLES / "captioner" / "captioner.prototxt",
           SAMPLES / "captioner" / "captioner.caffemodel", cont="cont_sentence",
           words={"input_sentence": 50}, static={"image_features": 32},
           options=("--cont-from-start",)),
    # The corpus's step-wise deploy nets (T = 1 in the prototxt, state carried between calls):
    # a language model and the LRCN captioner. Synthetic weights make their 1000-wide
    # recurrences chaotic, so the sequences stay short (float32 rounding grows every step).
    Served("coco_lstm_lm", _CORPUS_LM, None, cont="cont_sentence",
           words={"input_sentence": 8801}, lengths=(2, 4), sequences=12),
    Served("coco_lrcn_captioner", _CORPUS_LRCN, None, cont="cont_sentence",
           words={"input_sentence": 8801}, static={"image_features": 1000}, lengths=(2, 4),
           sequences=12),
]


def _available(served: Served) -> bool:
    return served.prototxt.is_file()


# ---- skips ----------------------------------------------------------------------------------


def _require_triton():
    """tritonclient's two clients, or a skip naming what is missing."""
    for module in ("tritonclient.grpc", "tritonclient.http"):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            pytest.skip("tritonclient is not installed: pip install 'caffe-lstm[serve]'")
    try:
        find_triton()
    except ServingError as exc:
        pytest.skip(f"the bundled Triton server cannot start here: {exc.line()}")
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    return grpcclient, httpclient


def _cli(*args: object) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output + (result.stderr or "")
    return result.stdout


# ---- sequences and their references ----------------------------------------------------------


@dataclass
class Model:
    """A served net with its sequences (inputs per sequence) and the reference outputs."""

    served: Served
    inputs: list[str]  # what the config asks clients for
    outputs: list[str]
    lengths: list[int]
    arrays: dict[str, np.ndarray]  # Caffe layout: time-major (T, S, ...), static (S, ...)
    reference: dict[str, np.ndarray]  # `run --state io` of all sequences: (T, S, ...)

    def step(self, s: int, t: int) -> dict[str, np.ndarray]:
        """The request of sequence ``s``, step ``t``: batch-major (N = 1, T = 1, ...)."""
        feeds = {}
        for name in self.inputs:
            array = self.arrays[name]
            if name in self.served.static:
                feeds[name] = np.ascontiguousarray(array[s:s + 1])
            else:
                feeds[name] = np.ascontiguousarray(array[t:t + 1, s:s + 1].swapaxes(0, 1))
        return feeds

    def expected(self, name: str, s: int, t: int) -> np.ndarray:
        return self.reference[name][t, s]


def _sequences(served: Served, rng: np.random.Generator) -> tuple[list[int], dict]:
    lengths = [int(n) for n in rng.integers(served.lengths[0], served.lengths[1] + 1,
                                            served.sequences)]
    steps, n = max(lengths), served.sequences
    arrays = {served.cont: np.ones((steps, n), np.float32)}
    arrays[served.cont][0] = 0  # every sequence starts at t = 0
    for name, vocabulary in served.words.items():
        arrays[name] = rng.integers(0, vocabulary, (steps, n)).astype(np.float32)
    for name, width in served.features.items():
        arrays[name] = rng.standard_normal((steps, n, width)).astype(np.float32)
    for name, width in served.static.items():
        arrays[name] = rng.standard_normal((n, width)).astype(np.float32)
    return lengths, arrays


def _write_model(served: Served, repository: Path, scratch: Path, name: str | None = None,
                 options: tuple[str, ...] = ()) -> Path:
    """``caffe-lstm triton --backend python`` for one step; returns the caffemodel used."""
    weights = served.weights
    if weights is None:
        weights = scratch / f"{served.name}.caffemodel"
        if not weights.exists():
            _cli("weights", "init", served.prototxt, "-o", weights, "--seed", 3)
    _cli("triton", served.prototxt, "-w", weights, "-o", repository, "--backend", "python",
         "--name", name or served.name, *served.step_shapes(), *served.options, *options)
    return weights


def _model(served: Served, repository: Path, weights: Path, scratch: Path,
           rng: np.random.Generator) -> Model:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse((repository / served.name / "config.pbtxt").read_text(),
                               model_config_pb2.ModelConfig())
    lengths, arrays = _sequences(served, rng)
    inputs_npz = scratch / f"{served.name}_in.npz"
    np.savez(inputs_npz, **arrays)
    out = scratch / f"{served.name}_ref.npz"
    _cli("run", served.prototxt, "-w", weights, "--state", "io",
         *served.whole_shapes(max(lengths), served.sequences), "--inputs", inputs_npz, "-o", out)
    with np.load(out) as loaded:
        reference = {name: loaded[name] for name in loaded.files}
    outputs = [o.name for o in config.output]
    assert outputs and all(name in reference for name in outputs), (outputs, list(reference))
    return Model(served, [i.name for i in config.input], outputs, lengths, arrays, reference)


@pytest.fixture(scope="module")
def served_models(module_scratch):
    """One repository holding every servable net, and each net's sequences and references."""
    _require_triton()
    scratch = module_scratch.mktemp("serving")
    repository = scratch / "repo"
    rng = np.random.default_rng(18)
    models = {}
    for served in SERVED:
        if not _available(served):
            continue  # the corpus is not beside this clone: the samples are still served
        weights = _write_model(served, repository, scratch)
        models[served.name] = _model(served, repository, weights, scratch, rng)
    return repository, models


@pytest.fixture(scope="module")
def server(served_models):
    repository, _ = served_models
    with TritonServer(repository) as running:
        yield running


# ---- the clients ----------------------------------------------------------------------------


def _client(protocol: str, server: TritonServer):
    grpcclient, httpclient = _require_triton()
    if protocol == "grpc":
        return grpcclient, grpcclient.InferenceServerClient(server.grpc_url)
    return httpclient, httpclient.InferenceServerClient(server.http_url,
                                                        network_timeout=120.0)


def _infer(module, client, model: Model, s: int, t: int, corrid: int, *,
           start: bool, end: bool, feeds: dict[str, np.ndarray] | None = None):
    """One step of one sequence; returns the outputs by name."""
    feeds = model.step(s, t) if feeds is None else feeds
    inputs = []
    for name, array in feeds.items():
        tensor = module.InferInput(name, list(array.shape), _triton_dtype(array))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    requested = [module.InferRequestedOutput(name) for name in model.outputs]
    result = client.infer(model.served.name, inputs, outputs=requested, sequence_id=corrid,
                          sequence_start=start, sequence_end=end)
    return {name: result.as_numpy(name) for name in model.outputs}


def _triton_dtype(array: np.ndarray) -> str:
    return {np.float32: "FP32", np.float64: "FP64", np.int32: "INT32"}[array.dtype.type]


def _stream(module, client, model: Model, s: int, corrid: int) -> float:
    """Streams sequence ``s`` step by step; the largest difference from the reference."""
    worst = 0.0
    steps = model.lengths[s]
    for t in range(steps):
        got = _infer(module, client, model, s, t, corrid, start=t == 0, end=t == steps - 1)
        for name in model.outputs:
            worst = max(worst, float(np.max(np.abs(
                got[name].reshape(-1) - model.expected(name, s, t).reshape(-1)))))
    return worst


def _run_threads(work, count: int = THREADS) -> list[BaseException]:
    """Runs ``work(k)`` in ``count`` threads; the exceptions they raised."""
    errors: list[BaseException] = []

    def body(k: int) -> None:
        try:
            work(k)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PHASE_TIMEOUT)
    assert not any(thread.is_alive() for thread in threads), "clients still running"
    return errors


def _counts(server: TritonServer, name: str) -> tuple[int, int]:
    """(inference_count, execution_count) from Triton's statistics extension."""
    stats = server.statistics(name)["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


# ---- the load test ---------------------------------------------------------------------------


def test_interleaved_sequences_from_32_threads_equal_run_state_io(server, served_models):
    """32 threads (half gRPC, half HTTP) stream every model's sequences, one step per request,
    each thread reusing its correlation id after END; every step equals the reference; Triton
    batches steps of different sequences into one execution."""
    _, models = served_models
    jobs = [(model, s) for model in models.values() for s in range(model.served.sequences)]
    jobs.sort(key=lambda job: job[1])  # neighbouring jobs belong to different models
    before = {name: _counts(server, name) for name in models}
    worst: dict[str, float] = {name: 0.0 for name in models}
    done = []

    def work(k: int) -> None:
        module, client = _client("grpc" if k % 2 == 0 else "http", server)
        corrid = 100 + k  # this thread's id, reused for each of its sequences
        for model, s in jobs[k::THREADS]:
            worst[model.served.name] = max(worst[model.served.name],
                                           _stream(module, client, model, s, corrid))
            done.append((model.served.name, s))

    errors = _run_threads(work)
    assert errors == [], [str(e) for e in errors[:3]]
    assert len(done) == len(jobs)
    assert max(worst.values()) <= ATOL, worst
    for name in models:
        inferences, executions = (a - b for a, b in zip(_counts(server, name), before[name]))
        assert inferences == sum(models[name].lengths), name
    inferences, executions = _counts(server, "seq_classifier")
    assert inferences / executions > 1, (inferences, executions)


# ---- faults ---------------------------------------------------------------------------------


def test_bad_requests_get_tritons_error_and_other_sequences_go_on(server, served_models):
    """Requests with a wrong shape or dtype (inside a running sequence and as a new one) are
    refused by Triton; the same sequence continues from its state, and the concurrent
    sequences of 16 other threads are unaffected."""
    from tritonclient.utils import InferenceServerException

    _, models = served_models
    model = models["seq_classifier"]
    s_bad = 0
    refusals = []

    def bad_sequence(module, client) -> None:
        steps = model.lengths[s_bad]
        corrid = 9000
        for t in range(steps):
            if t == 1:  # two bad requests inside the sequence, between good steps
                good = model.step(s_bad, t)
                wrong_shape = {**good, "data": np.zeros((1, 1, 9), np.float32)}
                wrong_dtype = {**good, "data": good["data"].astype(np.float64)}
                for feeds in (wrong_shape, wrong_dtype):
                    with pytest.raises(InferenceServerException) as caught:
                        _infer(module, client, model, s_bad, t, corrid, start=False, end=False,
                               feeds=feeds)
                    refusals.append(str(caught.value))
            got = _infer(module, client, model, s_bad, t, corrid, start=t == 0,
                         end=t == steps - 1)
            np.testing.assert_allclose(got["probs"].reshape(-1),
                                       model.expected("probs", s_bad, t).reshape(-1), atol=ATOL)
        # a new sequence whose first request is malformed: refused, nothing started
        with pytest.raises(InferenceServerException) as caught:
            _infer(module, client, model, s_bad, 0, 9001, start=True, end=False,
                   feeds={**model.step(s_bad, 0), "data": np.zeros((1, 2, 8), np.float32)})
        refusals.append(str(caught.value))

    def work(k: int) -> None:
        module, client = _client("grpc" if k % 2 == 0 else "http", server)
        if k == 0:
            bad_sequence(module, client)
            return
        for s in range(1 + k, model.served.sequences, 16):
            assert _stream(module, client, model, s, 500 + k) <= ATOL

    errors = _run_threads(work, 16)
    assert errors == [], [str(e) for e in errors[:3]]
    assert len(refusals) == 3
    assert any("shape" in text for text in refusals), refusals
    assert any("FP64" in text or "data-type" in text or "datatype" in text
               for text in refusals), refusals


def test_idle_sequence_expires_and_its_id_starts_again_from_zeros(tmp_path):
    """A sequence idle past max_sequence_idle_microseconds is ended by Triton (its next step
    without START is refused); START with the same id then begins from zero state."""
    _require_triton()
    from tritonclient.utils import InferenceServerException

    served = SERVED[0]
    repository = tmp_path / "repo"
    weights = _write_model(served, repository, tmp_path, options=("--max-sequence-idle-us",
                                                                  "300000"))
    model = _model(served, repository, weights, tmp_path, np.random.default_rng(5))
    with TritonServer(repository) as running:
        module, client = _client("grpc", running)
        s, corrid = 0, 77
        for t in range(2):  # the sequence starts and stops sending
            _infer(module, client, model, s, t, corrid, start=t == 0, end=False)
        time.sleep(1.5)
        with pytest.raises(InferenceServerException) as caught:
            _infer(module, client, model, s, 2, corrid, start=False, end=False)
        assert "START" in str(caught.value) or "sequence" in str(caught.value)
        # the same id from START: the outputs are those of sequence 1 from zero state
        assert _stream(module, client, model, 1, corrid) <= ATOL


def test_sigterm_to_serve_during_a_load_test_loses_only_in_flight_sequences(served_models,
                                                                             tmp_path):
    """`caffe-lstm serve` gets SIGTERM while 32 threads stream sequences: it exits 0, every
    answered step was right, and each thread lost at most the one sequence in flight."""
    from tritonclient.utils import InferenceServerException

    _, models = served_models
    model = models["seq_classifier"]
    repository = tmp_path / "repo"  # the sample alone: it loads in a few seconds
    shutil.copytree(served_models[0] / "seq_classifier", repository / "seq_classifier")
    ports = [free_port() for _ in range(3)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    serve = subprocess.Popen(
        [sys.executable, "-m", "caffe_lstm", "serve", str(repository), "--http-port",
         str(ports[0]), "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        banner = _read_banner(serve)
        assert f"127.0.0.1:{ports[1]}" in banner, banner
        endpoint = TritonServer(repository, http_port=ports[0], grpc_port=ports[1])
        completed, lost, wrong = [], [], []
        stop = threading.Event()

        def work(k: int) -> None:
            module, client = _client("grpc" if k % 2 == 0 else "http", endpoint)
            for i in range(1000):
                if stop.is_set():
                    return  # the load test ends: no new sequence after SIGTERM
                s = (k + THREADS * i) % model.served.sequences
                steps_done = 0
                try:
                    for t in range(model.lengths[s]):
                        got = _infer(module, client, model, s, t, 300 + k, start=t == 0,
                                     end=t == model.lengths[s] - 1)
                        steps_done += 1
                        if np.max(np.abs(got["probs"].reshape(-1)
                                         - model.expected("probs", s, t).reshape(-1))) > ATOL:
                            wrong.append((s, t))
                except (InferenceServerException, ConnectionError, OSError) as exc:
                    assert stop.is_set(), f"a request failed before SIGTERM: {exc}"
                    lost.append((k, s, steps_done))
                    return
                completed.append(s)

        clients = threading.Thread(target=_run_threads, args=(work,), daemon=True)
        clients.start()
        time.sleep(2.0)
        before_stop = len(completed)
        stop.set()
        serve.send_signal(signal.SIGTERM)
        out, err = serve.communicate(timeout=90)
        clients.join(PHASE_TIMEOUT)
        assert serve.returncode == 0, err
        assert "stopped" in out, out
        assert before_stop > 0 and wrong == []
        assert len(lost) <= THREADS and len({k for k, _, _ in lost}) == len(lost)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


def _read_banner(serve: subprocess.Popen) -> str:
    """`serve`'s lines up to the gRPC endpoint (it prints them once every model is ready)."""
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = serve.stdout.readline()
        if not line:
            raise AssertionError(f"serve exited: {serve.wait()} {serve.stderr.read()}")
        lines.append(line)
        if "stop with Ctrl-C" in line:
            return "".join(lines)
    raise AssertionError("serve printed no endpoints within 120 s")


# ---- serve's own errors ------------------------------------------------------------------------


def test_a_model_that_fails_to_load_is_one_line_with_tritons_reason(tmp_path):
    _require_triton()
    repository = tmp_path / "repo"
    _write_model(SERVED[0], repository, tmp_path)
    (repository / "seq_classifier" / "1" / "model.onnx").unlink()
    log = tmp_path / "triton.log"
    result = subprocess.run(
        [sys.executable, "-m", "caffe_lstm", "serve", str(repository), "--log", str(log)],
        capture_output=True,
        text=True, timeout=180, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))))
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "could not load model 'seq_classifier'" in lines[0]
    assert "model.onnx" in lines[0]  # the server's own reason: onnxruntime cannot open it
    assert lines[0].endswith(f"the server's log: {log}")  # --log keeps it, so it is named
    assert "Traceback" not in result.stderr
    assert "model.onnx" in log.read_text()  # the server wrote its own log there


def _pretend_pytriton_is(spec, monkeypatch) -> None:
    """The server looks nvidia-pytriton up as ``spec`` (None: not installed)."""
    import caffe_lstm.serving.server as server_module

    real = importlib.util.find_spec
    monkeypatch.setattr(server_module.importlib.util, "find_spec",
                        lambda name, *a: spec if name == "pytriton" else real(name, *a))


def _one_model_repository(tmp_path: Path) -> Path:
    (tmp_path / "repo" / "m").mkdir(parents=True)
    (tmp_path / "repo" / "m" / "config.pbtxt").write_text('name: "m"\n')
    return tmp_path / "repo"


def test_serve_without_nvidia_pytriton_names_the_extra(monkeypatch, tmp_path, invoke):
    """Runs everywhere: the server is looked up as if nvidia-pytriton were not installed."""
    _pretend_pytriton_is(None, monkeypatch)
    result = invoke("serve", _one_model_repository(tmp_path))
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "error: the Triton server is not installed (nvidia-pytriton), "
        "install it: pip install 'caffe-lstm[serve]'")


def test_a_wheel_without_the_stub_of_this_python_is_named(monkeypatch, tmp_path, invoke):
    """nvidia-pytriton ships a backend stub per Python version; one missing for the running
    Python is named (with this Python's version), not found later as a hung server."""
    import importlib.machinery

    package = tmp_path / "site" / "pytriton"
    (package / "tritonserver" / "bin").mkdir(parents=True)
    (package / "tritonserver" / "bin" / "tritonserver").write_text("")
    (package / "tritonserver" / "backends" / "python").mkdir(parents=True)
    (tmp_path / "site" / "nvidia_pytriton.libs").mkdir()
    spec = importlib.machinery.ModuleSpec("pytriton", None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    _pretend_pytriton_is(spec, monkeypatch)
    result = invoke("serve", _one_model_repository(tmp_path))
    assert result.exit_code == 1
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert result.stderr.startswith(
        f"error: nvidia-pytriton has no Python backend stub for Python {version}, ")
    assert result.stderr.rstrip().endswith("pip install 'caffe-lstm[serve]'")


def test_serve_refuses_a_folder_without_models(tmp_path, invoke):
    result = invoke("serve", tmp_path)
    assert result.exit_code == 1
    assert "holds no model" in result.stderr and len(result.stderr.splitlines()) == 1


# ---- docs/serving.md's client snippet ---------------------------------------------------------


def test_the_streaming_snippet_of_the_docs_runs(server, tmp_path):
    """docs/serving.md's tritonclient snippet, run against the served seq_classifier: its
    outputs equal `caffe-lstm run --state io` over the snippet's whole sequence."""
    doc = (ROOT / "docs" / "serving.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    snippet = next(block for block in blocks if "sequence_start" in block)
    assert '"localhost:8001"' in snippet
    namespace: dict = {}
    exec(compile(snippet.replace('"localhost:8001"', repr(server.grpc_url)), "docs/serving.md",
                 "exec"), namespace)  # our own document
    steps, T = namespace["steps"], namespace["T"]
    cont = np.ones((T, 1), np.float32)
    cont[0] = 0
    np.savez(tmp_path / "in.npz", data=steps.reshape(T, 1, 8), cont=cont)
    served = SERVED[0]
    _cli("run", served.prototxt, "-w", served.weights, "--state", "io", "--shape",
         f"data:{T}x1x8", "--shape", f"cont:{T}x1", "--inputs", tmp_path / "in.npz", "-o",
         tmp_path / "out.npz")
    reference = np.load(tmp_path / "out.npz")["probs"]
    got = np.stack([p.reshape(5) for p in namespace["probs"]])
    np.testing.assert_allclose(got, reference.reshape(T, 5), atol=ATOL)


# ---- benchmarks/serving.py ------------------------------------------------------------------


def test_the_serving_benchmark_runs_and_prints_its_ratio():
    """`benchmarks/serving.py --quick` on a real server: a row per concurrency level (Triton's
    own count of the mean batch: 1 at one sequence) and the throughput ratio line."""
    _require_triton()
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "serving.py"), "--quick"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))))
    assert result.returncode == 0, result.stderr
    rows = {int(m.group(1)): m.groups()[1:] for m in re.finditer(
        r"^\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", result.stdout, re.MULTILINE)}
    assert sorted(rows) == [1, 8, 32], result.stdout
    assert float(rows[1][3]) == 1.0 and all(float(row[0]) > 0 for row in rows.values())
    match = re.search(r"^throughput 32 / 1 = (\d+\.\d{3})$", result.stdout, re.MULTILINE)
    assert match and float(match.group(1)) > 0, result.stdout


def test_serve_refuses_a_port_in_use(tmp_path, invoke):
    """Checked before anything starts: a server already on that port would answer instead."""
    import socket

    (tmp_path / "repo" / "m").mkdir(parents=True)
    (tmp_path / "repo" / "m" / "config.pbtxt").write_text('name: "m"\n')
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = invoke("serve", tmp_path / "repo", "--grpc-port", port)
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: the gRPC port {port} is not free on 127.0.0.1")
    assert len(result.stderr.splitlines()) == 1


def test_ctrl_c_stops_serve_with_status_0(served_models, tmp_path):
    """SIGINT (Ctrl-C in a terminal) stops the server as SIGTERM does."""
    repository = tmp_path / "repo"
    shutil.copytree(served_models[0] / "seq_classifier", repository / "seq_classifier")
    serve = subprocess.Popen(
        [sys.executable, "-m", "caffe_lstm", "serve", str(repository)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))))
    try:
        _read_banner(serve)
        serve.send_signal(signal.SIGINT)
        out, err = serve.communicate(timeout=90)
        assert serve.returncode == 0, err
        assert "stopped (tritonserver exit status 0)" in out
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
