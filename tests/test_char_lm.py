"""samples/char_lm: a character-level LSTM language model whose weights were trained for real
(torch, samples/char_lm/train.py) and imported with `weights import --layout pytorch`.

The converted net still does its job: its perplexity on held-out text is far below a unigram
model's, alike through numpy, onnxruntime and the TensorRT network walked on the CPU; text
generated one character per call (states carried with --state io) is the same for a seed
through numpy, onnxruntime and a Triton python-backend model served by the bundled server, and
through samples/char_lm/generate.py (the public API)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

import caffe_lstm
from tests.helpers import SAMPLES, run_cli

FOLDER = SAMPLES / "char_lm"
#: The held-out perplexity must be below this fraction of the unigram model's (it is ~0.15).
MARGIN = 0.3
PROMPT, LENGTH, SEED = "ROMEO:\n", 40, 7


def _load_charlm():
    spec = importlib.util.spec_from_file_location("charlm", FOLDER / "charlm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


charlm = _load_charlm()
NET, WEIGHTS = str(charlm.PROTOTXT), str(charlm.WEIGHTS)


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    """(the scored held-out ids, their inputs as an .npz for `run`)."""
    ids = charlm.scored_held_out()
    path = tmp_path_factory.mktemp("char_lm") / "held_out.npz"
    np.savez(path, **charlm.sequence_inputs(ids))
    return ids, path


def _run_probs(tmp_path, inputs, *options) -> np.ndarray:
    out = tmp_path / "out.npz"
    proc = run_cli("run", NET, "-w", WEIGHTS, "--inputs", inputs, "-o", out, *options)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as arrays:
        return arrays["probs"]


def test_held_out_perplexity_beats_a_unigram_model_through_numpy_and_onnxruntime(tmp_path,
                                                                                    held_out):
    ids, inputs = held_out
    unigram = charlm.unigram_perplexity(ids)
    numpy_ppl = charlm.perplexity(_run_probs(tmp_path, inputs), ids)
    pytest.importorskip("onnxruntime")
    ort_ppl = charlm.perplexity(_run_probs(tmp_path, inputs, "--backend", "onnxruntime"), ids)
    print(f"held-out perplexity over {len(ids) - 1} characters: numpy {charlm.bits(numpy_ppl)}, "
          f"onnxruntime {charlm.bits(ort_ppl)}; unigram {charlm.bits(unigram)}")
    assert numpy_ppl < MARGIN * unigram
    assert ort_ppl == pytest.approx(numpy_ppl, rel=1e-5)


def test_the_tensorrt_network_walk_scores_as_numpy_does(held_out):
    """The emitted TensorRT network, evaluated on the CPU (no GPU here): its perplexity equals
    numpy's to 1e-4."""
    from caffe_lstm.backends.tensorrt.cpu_walk import evaluate_emitted
    from caffe_lstm.backends.tensorrt.runtime import load_runtime_if_any

    runtime = load_runtime_if_any()
    if runtime is None:
        pytest.skip("no TensorRT runtime is installed: pip install 'caffe-lstm[rtx]'")
    ids, inputs = held_out
    steps = len(ids) - 1
    net = caffe_lstm.load(NET, WEIGHTS, shapes={"chars": (steps, 1), "cont": (steps, 1)})
    feeds = charlm.sequence_inputs(ids)
    numpy_ppl = charlm.perplexity(net.run(feeds)["probs"], ids)
    walk_ppl = charlm.perplexity(
        evaluate_emitted(runtime, net.rewritten().graph, feeds, False)["probs"], ids)
    print(f"held-out perplexity: TensorRT network walk {walk_ppl:.6f}, numpy {numpy_ppl:.6f}")
    assert walk_ppl < MARGIN * charlm.unigram_perplexity(ids)
    assert abs(walk_ppl - numpy_ppl) <= 1e-4 * numpy_ppl


def test_verify_passes_on_a_held_out_line(tmp_path):
    inputs = tmp_path / "line.npz"
    np.savez(inputs, **charlm.sequence_inputs(charlm.scored_held_out(80)))
    proc = run_cli("verify", NET, "-w", WEIGHTS, "--inputs", inputs, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MISMATCH" not in proc.stdout, proc.stdout


# ---- generation, one character per call -----------------------------------------------------


def _cli_step(invoke, tmp_path, *options) -> charlm.Step:
    """One `caffe-lstm run --state io` per character, started from the previous call's final
    states (`--state-from` its -o file) after the first."""
    def step(char_id, cont, states):
        inputs, out = tmp_path / "step_in.npz", tmp_path / f"step{len(calls)}.npz"
        np.savez(inputs, **charlm.step_inputs(char_id, cont, None))
        carried = ("--state-from", calls[-1]) if states is not None else ()
        result = invoke("run", NET, "-w", WEIGHTS, "--state", "io", "--inputs", inputs,
                        "-o", out, *carried, *options)
        assert result.exit_code == 0, result.stderr
        calls.append(out)
        with np.load(out) as arrays:
            return charlm.split_outputs({name: arrays[name] for name in arrays.files})
    calls: list = []
    return step


def _triton_step(server, client_module, client) -> charlm.Step:
    """One request per character to the served model; Triton keeps the states (its implicit
    state) and feeds cont from the sequence's START."""
    def step(char_id, cont, states):
        chars = np.full((1, 1), char_id, np.float32)  # batch-major: N = 1, then T = 1
        tensor = client_module.InferInput("chars", list(chars.shape), "FP32")
        tensor.set_data_from_numpy(chars)
        result = client.infer("char_lm", [tensor], sequence_id=4242,
                              sequence_start=states is None)
        return result.as_numpy("probs").reshape(1, 1, -1), {"started": True}
    return step


@pytest.fixture(scope="module")
def served_char_lm(tmp_path_factory):
    """The sample as a Triton python-backend model, served by `caffe-lstm serve`'s server."""
    if importlib.util.find_spec("tritonclient") is None:
        pytest.skip("tritonclient is not installed: pip install 'caffe-lstm[serve]'")
    from caffe_lstm.serving.server import ServingError, TritonServer, find_triton

    try:
        find_triton()
    except ServingError as exc:
        pytest.skip(f"the bundled Triton server cannot start here: {exc.line()}")
    repository = tmp_path_factory.mktemp("char_lm_repo")
    proc = run_cli("triton", NET, "-w", WEIGHTS, "-o", repository, "--backend", "python",
                   "--shape", "chars:1x1", "--shape", "cont:1x1", "--cont-from-start")
    assert proc.returncode == 0, proc.stderr
    with TritonServer(repository) as running:
        yield running


def test_generated_text_is_the_same_for_a_seed_through_numpy_onnxruntime_and_triton(
        invoke, tmp_path, served_char_lm):
    import tritonclient.grpc as grpcclient

    onnx = tmp_path / "char_lm.onnx"
    assert invoke("export", NET, "-w", WEIGHTS, "-o", onnx, "--state", "io").exit_code == 0
    texts = {
        "numpy": charlm.generate(_cli_step(invoke, tmp_path), PROMPT, LENGTH, SEED),
        "onnxruntime": charlm.generate(
            _cli_step(invoke, tmp_path, "--backend", "onnxruntime", "--onnx", onnx),
            PROMPT, LENGTH, SEED),
        "triton": charlm.generate(
            _triton_step(served_char_lm, grpcclient,
                         grpcclient.InferenceServerClient(served_char_lm.grpc_url)),
            PROMPT, LENGTH, SEED),
    }
    script = subprocess.run([sys.executable, str(FOLDER / "generate.py"), "--prompt", PROMPT,
                             "--length", str(LENGTH), "--seed", str(SEED)],
                            capture_output=True, text=True, timeout=600)
    assert script.returncode == 0, script.stderr
    texts["generate.py (the API)"] = script.stdout.removesuffix("\n")
    print(texts["numpy"])
    assert len(set(texts.values())) == 1, texts
    assert len(texts["numpy"]) == len(PROMPT) + LENGTH
    assert charlm.generate(_cli_step(invoke, tmp_path), PROMPT, LENGTH, SEED + 1) != texts[
        "numpy"]  # the seed decides the draws
