"""Issue 24, a session without dead ends, through the real command line: global options
anywhere on the command line; models that say how they were built (ONNX metadata, the
engine's sidecar) read back by ``run`` and ``inspect``; state carried across calls with
``--state-from``."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import caffe_lstm

from tests.helpers import CORPUS, ROOT, assert_one_error_line, needs_corpus, run_cli, sample

NET, WEIGHTS = sample("seq_classifier")


def _same_but_timing(text: str) -> str:
    """``text`` with measured seconds blanked (two builds never take the same time)."""
    return re.sub(r"\d+\.\d+ s\b", "<t> s", text)


@pytest.mark.parametrize("option", [("-q",), ("-v",), ("--debug",), ("--max-memory", "1K")],
                         ids=lambda o: o[0])
def test_a_global_option_means_the_same_before_and_after_the_command(tmp_path, option):
    net = NET
    if option[0] == "--debug":  # an error shows whether the traceback was asked for
        net = tmp_path / "broken.prototxt"
        net.write_text("layer { name: 'x' type: 'NoSuchLayer' bottom: 'a' top: 'b' }\n")
    engine = tmp_path / "net.engine"
    before = run_cli(*option, "convert", net, "-w", WEIGHTS, "-o", engine)
    after = run_cli("convert", net, "-w", WEIGHTS, "-o", engine, *option)
    assert before.returncode == after.returncode, (before.stderr, after.stderr)
    assert _same_but_timing(before.stdout) == _same_but_timing(after.stdout)
    if option[0] == "--debug":  # the traceback's own lines differ only in nothing we print
        assert "Traceback" in before.stderr and "Traceback" in after.stderr
    else:
        assert _same_but_timing(before.stderr) == _same_but_timing(after.stderr)
    expected = {"-q": lambda r: r.returncode == 0 and r.stdout == "",
                "-v": lambda r: r.returncode == 0 and "wrote" in r.stdout,
                "--debug": lambda r: r.returncode == 1,
                "--max-memory": lambda r: r.returncode == 1 and "limit 1 KiB" in r.stderr}
    assert expected[option[0]](after), after.stderr


# ---- models that say how they were built --------------------------------------------------------


def _outputs(path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


@pytest.mark.parametrize("state", ["auto", "zero", "io"])
def test_an_exported_model_runs_with_its_own_state(tmp_path, state):
    pytest.importorskip("onnxruntime")
    model = tmp_path / "net.onnx"
    exported = run_cli("export", NET, "-w", WEIGHTS, "-o", model, "--state", state)
    assert exported.returncode == 0, exported.stderr
    # auto chose io for this net's cont input, and says why
    assert ("state: auto chose io: lstm1's cont 'cont' is a net input" in exported.stdout) \
        == (state == "auto")
    ran = run_cli("run", NET, "-w", WEIGHTS, "--backend", "onnxruntime", "--onnx", model,
                  "-o", tmp_path / "onnx.npz")
    assert ran.returncode == 0, ran.stderr
    # the equations, with the state the model was built with (io: auto chose it)
    want = caffe_lstm.load(NET, WEIGHTS).run(state="zero" if state == "zero" else "io",
                                             original=True)
    got = _outputs(tmp_path / "onnx.npz")
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=1e-4)


@pytest.fixture(scope="module")
def built(module_scratch):
    """An ONNX model and an engine of the sample, and files they were not built from: other
    weights of the same shapes, the prototxt with one more comment line."""
    folder = module_scratch.mktemp("built")
    other_weights, other_net = folder / "other.caffemodel", folder / NET.name
    other_net.write_text(NET.read_text() + "# one more line\n")
    for args in (("export", NET, "-w", WEIGHTS, "-o", folder / "net.onnx"),
                 ("weights", "init", NET, "--seed", "5", "-o", other_weights)):
        assert run_cli(*args).returncode == 0
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX builds the engine")
    outcome = run_cli("convert", NET, "-w", WEIGHTS, "-o", folder / "net.engine",
                      "--shape", "data:1x2x8:12x2x8:20x2x8", "--shape", "cont:1x2:12x2:20x2")
    assert outcome.returncode == 0, outcome.stderr
    return folder


@pytest.mark.parametrize("model", ["net.onnx", "net.engine"])
def test_inspect_shows_how_a_model_was_built(built, model):
    from caffe_lstm.analysis.build_facts import file_sha256

    text = run_cli("inspect", built / model)
    assert text.returncode == 0, text.stderr
    assert f"prototxt  {NET.name}  sha256 {file_sha256(NET)}" in text.stdout
    assert f"caffemodel  {WEIGHTS.name}  sha256 {file_sha256(WEIGHTS)}" in text.stdout
    assert "  state  io (auto chose io" in text.stdout
    facts = json.loads(run_cli("inspect", built / model, "--json").stdout)
    assert facts["state"] == "io" and facts["fp16"] is False
    assert facts["outputs"] == ["probs", "lstm1/h_T", "lstm1/c_T"]
    if model == "net.onnx":
        assert facts["opset"] == 17 and facts["inputs"]["data"] == [12, 2, 8]
    else:  # T varies in the engine's profile
        assert facts["runtime"] == "tensorrt-rtx" and facts["inputs"]["data"] == [-1, 2, 8]
        assert facts["profiles"]["data"] == [[1, 2, 8], [12, 2, 8], [20, 2, 8]]


@pytest.mark.parametrize("model", ["net.onnx", "net.engine"])
@pytest.mark.parametrize("other", ["prototxt", "caffemodel"])
def test_a_model_given_with_other_files_is_one_line(built, model, other):
    net = built / NET.name if other == "prototxt" else NET
    weights = built / "other.caffemodel" if other == "caffemodel" else WEIGHTS
    flag = ("--backend", "onnxruntime", "--onnx") if model == "net.onnx" else (
        "--backend", "tensorrt", "--engine")
    outcome = run_cli("run", net, "-w", weights, *flag, built / model)
    line = assert_one_error_line(outcome, f"the model was built from another {other}")
    assert str(built / model) in line


@pytest.mark.parametrize("other", ["prototxt", "caffemodel"])
def test_verify_refuses_an_engine_built_from_other_files(built, other):
    """Before any column runs and without a GPU: the engine's facts name other files."""
    net = built / NET.name if other == "prototxt" else NET
    weights = built / "other.caffemodel" if other == "caffemodel" else WEIGHTS
    outcome = run_cli("verify", net, "-w", weights, "--engine", built / "net.engine")
    line = assert_one_error_line(outcome, f"the model was built from another {other}")
    assert str(built / "net.engine") in line


def test_a_state_other_than_the_models_is_one_line(built):
    outcome = run_cli("run", NET, "-w", WEIGHTS, "--backend", "onnxruntime",
                      "--onnx", built / "net.onnx", "--state", "zero")
    assert_one_error_line(outcome, "the model was built with state 'io', not 'zero'")


def test_a_model_without_build_facts_is_one_line(tmp_path):
    engine = tmp_path / "elsewhere.engine"
    engine.write_bytes(b"not ours")
    assert_one_error_line(run_cli("inspect", engine), "has no caffe-lstm build facts")
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(b"\x3a\xff\xff")  # a graph field longer than the file
    assert_one_error_line(run_cli("inspect", truncated), "cannot read the ONNX model")


def test_the_metadata_read_without_the_graph_is_onnxs(built):
    """read_metadata walks the file's top-level fields only: the same entries as onnx's
    parser finds in the whole model."""
    onnx = pytest.importorskip("onnx")
    from caffe_lstm.backends.onnx.exporter import read_metadata

    model = onnx.load(str(built / "net.onnx"))
    assert read_metadata(built / "net.onnx") == {e.key: e.value for e in model.metadata_props}
    assert read_metadata(built / "net.onnx")["caffe_lstm.state"] == "io"


# ---- state across calls -------------------------------------------------------------------------

#: The LRCN captioner's one-word-per-call deploy net (T = 1, as its authors stepped it).
CAPTIONER = CORPUS / "jeffdonahue__caffe-1" / \
    "examples__coco_caption__lrcn_word_to_preds.deploy.prototxt"
WORDS, BATCH = 5, 2


@pytest.fixture(scope="module")
def captioner(module_scratch):
    """The captioner's synthetic weights, a 5-word sentence for 2 images (cont 0 at the first
    word) and each word of it as one call's inputs, in one folder."""
    folder = module_scratch.mktemp("captioner")
    # as the prototxt's fillers draw them: the rescaling of the default is not needed here
    assert run_cli("weights", "init", CAPTIONER, "--fillers",
                   "-o", folder / "w.caffemodel").returncode == 0
    rng = np.random.default_rng(0)
    cont = np.ones((WORDS, BATCH), np.float32)
    cont[0] = 0
    words = rng.integers(0, 8801, (WORDS, BATCH)).astype(np.float32)
    image = rng.standard_normal((BATCH, 1000)).astype(np.float32)
    np.savez(folder / "sentence.npz", cont_sentence=cont, input_sentence=words,
             image_features=image)
    for t in range(WORDS):
        np.savez(folder / f"word{t}.npz", cont_sentence=cont[t:t + 1],
                 input_sentence=words[t:t + 1], image_features=image)
    return folder


@needs_corpus()
@pytest.mark.parametrize("backend", ["numpy", "onnxruntime"])
def test_a_captioner_stepped_word_by_word_equals_the_whole_sentence(captioner, tmp_path,
                                                                    backend):
    weights = ("-w", captioner / "w.caffemodel")
    run = ("--backend", backend)
    if backend == "onnxruntime":  # one model for 1 to 5 words: T is symbolic
        pytest.importorskip("onnxruntime")
        model = tmp_path / "captioner.onnx"
        ranges = [f"{name}:1x{BATCH}:{WORDS}x{BATCH}:{WORDS}x{BATCH}"
                  for name in ("cont_sentence", "input_sentence")]
        ranges.append("image_features:" + ":".join([f"{BATCH}x1000"] * 3))  # N fixed
        exported = run_cli("export", CAPTIONER, *weights, "-o", model, "--shape", ranges[0],
                           "--shape", ranges[1], "--shape", ranges[2])
        assert exported.returncode == 0, exported.stderr
        run += ("--onnx", model)
    whole = run_cli("run", CAPTIONER, *weights, *run, "--state", "io",
                    "--inputs", captioner / "sentence.npz", "-o", tmp_path / "whole.npz")
    assert whole.returncode == 0, whole.stderr
    previous = ()
    for t in range(WORDS):  # five shell calls, each starting from the last one's states
        step = run_cli("run", CAPTIONER, *weights, *run, "--state", "io", *previous,
                       "--inputs", captioner / f"word{t}.npz", "-o", tmp_path / f"step{t}.npz")
        assert step.returncode == 0, step.stderr
        previous = ("--state-from", tmp_path / f"step{t}.npz")
    want = _outputs(tmp_path / "whole.npz")
    steps = [_outputs(tmp_path / f"step{t}.npz") for t in range(WORDS)]
    np.testing.assert_allclose(np.concatenate([s["probs"] for s in steps]), want["probs"],
                               atol=1e-5, rtol=0)
    for name in ("lstm1/h_T", "lstm1/c_T", "lstm2/h_T", "lstm2/c_T"):
        np.testing.assert_allclose(steps[-1][name], want[name], atol=1e-5, rtol=0)


def test_state_from_a_file_without_final_states_is_one_line(tmp_path):
    previous = tmp_path / "prev.npz"
    np.savez(previous, probs=np.zeros((12, 2, 5), np.float32))
    outcome = run_cli("run", NET, "-w", WEIGHTS, "--state-from", previous)
    assert_one_error_line(outcome, "no final state of this net's recurrent layers (wanted "
                                   "lstm1/c_T, lstm1/h_T)")


def test_state_io_on_a_net_without_recurrent_state_says_so(tmp_path):
    """A net with no recurrent layer has no state to carry: --state io runs it and says so
    (it said nothing), and --state-from is refused in one line that says so (it listed the
    wanted final states as 'none')."""
    net = tmp_path / "plain.prototxt"
    net.write_text('layer { name: "data" type: "Input" top: "data" '
                   'input_param { shape { dim: 2 dim: 3 } } }\n'
                   'layer { name: "fc" type: "InnerProduct" bottom: "data" top: "y" '
                   'inner_product_param { num_output: 4 } }\n')
    weights = tmp_path / "plain.caffemodel"
    assert run_cli("weights", "init", net, "-o", weights).returncode == 0
    io = run_cli("run", net, "-w", weights, "--state", "io", "-o", tmp_path / "prev.npz")
    assert io.returncode == 0, io.stderr
    assert "state: io has nothing to carry: this net has no recurrent layer" in io.stdout
    assert sorted(np.load(tmp_path / "prev.npz").files) == ["y"]
    line = assert_one_error_line(
        run_cli("run", net, "-w", weights, "--state-from", tmp_path / "prev.npz"),
        "no recurrent layer of this net has a state to carry in")
    assert "prev.npz" in line and "leave out --state-from" in line


def test_state_from_a_file_whose_states_do_not_fit_names_the_file(tmp_path):
    """A final state of another net (its H differs, or its rank) is refused naming the file it
    came from, before anything runs; the same file as it was written runs."""
    previous = tmp_path / "prev.npz"
    assert run_cli("run", NET, "-w", WEIGHTS, "--state", "io", "-o", previous).returncode == 0
    finals = dict(np.load(previous))
    assert run_cli("run", NET, "-w", WEIGHTS, "--state-from", previous).returncode == 0
    hidden = finals["lstm1/h_T"].shape[2]
    for name, array in (("other.npz", finals["lstm1/h_T"][..., :-1]),
                        ("flat.npz", finals["lstm1/h_T"][0])):
        np.savez(tmp_path / name, **{**finals, "lstm1/h_T": array})
        line = assert_one_error_line(run_cli("run", NET, "-w", WEIGHTS, "--state-from",
                                             tmp_path / name),
                                     f"final state 'lstm1/h_T' has shape {array.shape}, this "
                                     f"net's 'lstm1/h_0' is (1, N, {hidden})")
        assert name in line and "--state io" in line


def test_a_triton_plan_says_how_it_was_built(tmp_path):
    """A Triton model.plan has its build facts beside it (model.plan.json), as any engine, so
    that inspect reads them; Triton loads model.plan only."""
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    repository = tmp_path / "repo"
    written = run_cli("triton", NET, "-w", WEIGHTS, "-o", repository, "--backend", "tensorrt")
    assert written.returncode == 0, written.stderr
    version = repository / "seq_classifier" / "1"
    assert sorted(p.name for p in version.iterdir()) == ["model.plan", "model.plan.json"]
    facts = json.loads(run_cli("inspect", version / "model.plan", "--json").stdout)
    assert facts["state"] == "io" and facts["prototxt"] == NET.name
    config = (repository / "seq_classifier" / "config.pbtxt").read_text()
    assert facts["caffemodel_sha256"] in config and facts["prototxt_sha256"] in config


# ---- messages that lead somewhere ---------------------------------------------------------------


def test_serve_names_the_backend_it_lacks_and_the_container_command(tmp_path):
    from caffe_lstm.serving.server import CONTAINER_COMMAND

    repository = tmp_path / "repo"
    written = run_cli("triton", NET, "-w", WEIGHTS, "-o", repository, "--backend", "onnxruntime")
    assert written.returncode == 0, written.stderr
    # the repository says how it was built: the config's parameters, model.onnx's metadata
    config = (repository / "seq_classifier" / "config.pbtxt").read_text()
    assert 'key: "caffe_lstm.state"\n  value {\n    string_value: "io"' in config
    facts = json.loads(run_cli("inspect", repository / "seq_classifier" / "1" / "model.onnx",
                               "--json").stdout)
    assert facts["state"] == "io" and facts["prototxt"] == NET.name
    line = assert_one_error_line(run_cli("serve", repository),
                                 "the bundled tritonserver has only the python backend, model "
                                 "'seq_classifier' needs the onnxruntime backend")
    assert CONTAINER_COMMAND.format(repo=repository.resolve()) in line
    assert "or write it with --backend python" in line
    # the command is docs/serving.md's, for its ./repo
    serving = (ROOT / "docs" / "serving.md").read_text()
    assert " ".join(CONTAINER_COMMAND.format(repo="$PWD/repo").split()) in " ".join(
        serving.replace("\\\n", " ").split())


# ---- the build request, typed once --------------------------------------------------------------

#: A net whose reading stops at a layer type no op defines: an error about the request must
#: come before it, so the request is checked before the net is read or rewritten.
UNREADABLE = ROOT / "samples" / "plugin_example" / "normalize_lstm.prototxt"


@pytest.mark.parametrize("command, flags, needle", [
    ("convert", ("--via", "onnx", "--fp16"),
     "--fp16 is not available through the ONNX route yet, --via onnx"),
    ("convert", ("--via", "onnx", "--opset", "99"), "ONNX opset 99 is not supported, --opset"),
    ("export", ("--opset", "12"), "ONNX opset 12 is not supported, --opset"),
])
def test_a_bad_build_request_is_refused_before_the_net_is_read(tmp_path, command, flags,
                                                              needle):
    outcome = run_cli(command, UNREADABLE, "-w", UNREADABLE.with_suffix(".caffemodel"),
                      "-o", tmp_path / "model", *flags)
    assert_one_error_line(outcome, needle)
    assert list(tmp_path.iterdir()) == []


def test_the_api_takes_a_build_request_or_keywords(tmp_path):
    from caffe_lstm.errors import CaffeLstmError

    with pytest.raises(CaffeLstmError, match="min <= opt <= max"):
        caffe_lstm.BuildRequest(profiles={"data": ((12, 2, 8), (1, 2, 8), (20, 2, 8))})
    request = caffe_lstm.BuildRequest(state="zero", opset=13, profiles={
        "data": ((1, 2, 8), (12, 2, 8), (20, 2, 8)), "cont": ((1, 2), (12, 2), (20, 2))})
    assert request.state is caffe_lstm.State.ZERO  # the values became members, once
    net = caffe_lstm.load(NET, WEIGHTS)
    by_request = net.export_onnx(None, request=request)
    by_keywords = net.export_onnx(None, state="zero", opset=13, shapes=dict(request.profiles))
    assert by_request.model == by_keywords.model
    assert by_request.facts.profiles["data"] == [[1, 2, 8], [12, 2, 8], [20, 2, 8]]
    with pytest.raises(CaffeLstmError, match="the request's outputs"):
        net.export_onnx(None, request=caffe_lstm.BuildRequest(outputs=("lstm1",)))
