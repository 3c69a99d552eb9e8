"""The CLI on real files: the samples, the corpus, and malformed input (one error line, exit 1)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import (
    assert_one_error_line, corpus_files, corpus_options, needs_corpus, run_cli, sample,
)

SAMPLE_NAMES = ["seq_classifier", "captioner"]


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_inspect_sample_json(invoke, name):
    net, weights = sample(name)
    result = invoke("inspect", net, "-w", weights, "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert set(summary) >= {"inputs", "outputs", "layers"}
    assert summary["outputs"]["probs"][-1] in (5, 50)
    for layer in summary["layers"]:
        assert set(layer) >= {"name", "type", "bottoms", "tops", "shapes", "blobs"}


def test_inspect_text_shows_shapes_and_recurrent_layers(invoke):
    net, _ = sample("captioner")
    result = invoke("inspect", net)
    assert result.exit_code == 0
    assert ("lstm2 (LSTM): lstm1, cont_sentence, image_features -> lstm2  (10, 2, 24)"
            in result.stdout)
    assert "blobs (96, 24), (96), (96, 32), (96, 24)" in result.stdout
    assert "recurrent layers (expanded by the rewrite): lstm1, lstm2" in result.stdout


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_run_sample_is_deterministic_and_normalised(invoke, tmp_path, name):
    net, weights = sample(name)
    outs = []
    for i in range(2):
        out = tmp_path / f"out{i}.npz"
        result = invoke("run", net, "-w", weights, "--seed", 3, "-o", out)
        assert result.exit_code == 0, result.stderr
        with np.load(out) as data:
            outs.append(data["probs"])
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0].sum(axis=-1), 1.0, atol=1e-5)


def test_run_outputs_option_keeps_an_inner_blob(invoke, tmp_path):
    net, weights = sample("captioner")
    out = tmp_path / "out.npz"
    result = invoke("run", net, "-w", weights, "--outputs", "lstm1", "-o", out)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as data:
        assert data.files == ["lstm1"] and data["lstm1"].shape == (10, 2, 24)


def test_run_accepts_another_sequence_length(invoke, tmp_path):
    """T is read from the inputs: the net's declared T is only the default."""
    net, weights = sample("seq_classifier")
    inputs, out = tmp_path / "in.npz", tmp_path / "out.npz"
    cont = np.ones((20, 2), np.float32)
    cont[0] = 0
    np.savez(inputs, data=np.zeros((20, 2, 8), np.float32), cont=cont)
    result = invoke("run", net, "-w", weights, "--inputs", inputs, "-o", out)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as data:
        assert data["probs"].shape == (20, 2, 5)


# ---- the corpus -------------------------------------------------------------------------------

@needs_corpus()
@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_inspect_corpus_file(invoke, path):
    """Every corpus file: shapes (a train/test net read as its deploy graph), or one error line
    listing every unsupported layer type."""
    result = invoke("inspect", path, "--json", *corpus_options(path))
    if result.exit_code == 0:
        summary = json.loads(result.stdout)
        assert summary["layers"] and all(s is not None for s in summary["outputs"].values())
        return
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unsupported layer types: "), lines
    assert "Traceback" not in result.stderr


@needs_corpus()
def test_corpus_has_eighteen_files():
    assert len(corpus_files()) == 18


@needs_corpus()
@pytest.mark.parametrize("name, listing", [
    ("models__deploy.prototxt", "Python (proposal)"),
])
def test_corpus_unsupported_error_lists_every_type_with_names(invoke, name, listing):
    """Custom layers (Python proposals) stay unsupported, in one error that names them and
    suggests cutting them off."""
    path = next(p for p in corpus_files() if p.name == name)
    result = invoke("inspect", path)
    assert result.exit_code == 1
    assert f"unsupported layer types: {listing}," in result.stderr
    assert "cut them off with --outputs" in result.stderr


@needs_corpus()
@pytest.mark.parametrize("name,expected", [
    ("examples__coco_caption__lrcn_word_to_preds.deploy.prototxt", {"probs": [1, 1000, 8801]}),
    ("examples__LRCN_evaluate__deploy_lstm_lstm.prototxt", {"probs": [16, 500, 101]}),
    ("examples__lstm_sequence__deep_lstm_short.prototxt", {"ip1": [320, 1]}),
    ("prototxt__scrc_word_to_preds_full.prototxt", {"probs": [20, 100, 8801]}),
])
def test_corpus_deploy_shapes(invoke, name, expected):
    path = next(p for p in corpus_files() if p.name == name)
    result = invoke("inspect", path, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["outputs"] == expected


# ---- malformed input: one line, exit 1, no traceback, no output file ---------------------------

LSTM_NET = """
layer { name: "input" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 3 dim: 2 dim: 4 } shape { dim: 3 dim: 2 } } }
layer { name: "lstm1" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param { num_output: 5 } }
"""


def _bad_cases(tmp_path):
    """name -> (prototxt text, caffemodel bytes or None, extra args, text the error must hold)."""
    net, weights = sample("seq_classifier")
    good_model = weights.read_bytes()
    return {
        "syntax": ('layer { name: "a" type: "TanH"\n  bottom: "x" top: "y" \n', None, (),
                   "net.prototxt:2:20"),
        "unknown_field": ('layer { name: "a" type: "TanH" bottum: "x" }\n', None, (),
                          "bottum"),
        "unknown_bottom": (LSTM_NET.replace('bottom: "cont"', 'bottom: "kont"'), None, (),
                           "bottom 'kont'"),
        "wrong_shapes": (LSTM_NET.replace("shape { dim: 3 dim: 2 } }", "shape { dim: 3 dim: 7 } }"),
                         None, (), "layer 'lstm1' (LSTM)"),
        "truncated_caffemodel": (net.read_text(), good_model[: len(good_model) // 2], ("run",),
                                 "truncated"),
        "missing_weights": (net.read_text(), b"", ("run",), "no weights for blob"),
        "text_as_caffemodel": (net.read_text(), net.read_bytes(), ("run",), "looks like text"),
        "weights_do_not_fit": (LSTM_NET, good_model, ("run",), "layer 'lstm1' (LSTM)"),
    }


@pytest.mark.parametrize("case", ["syntax", "unknown_field", "unknown_bottom", "wrong_shapes",
                                  "truncated_caffemodel", "missing_weights",
                                  "text_as_caffemodel", "weights_do_not_fit"])
def test_bad_input_gives_one_error_line(tmp_path, case):
    text, model, extra, needle = _bad_cases(tmp_path)[case]
    net = tmp_path / "net.prototxt"
    net.write_text(text)
    out = tmp_path / "out.npz"
    if model is not None:
        weights = tmp_path / "w.caffemodel"
        if case == "missing_weights":
            from caffe_lstm.frontend.caffe_writer import write_caffemodel
            write_caffemodel(weights, [("some_other_layer", "TanH", [])])
        else:
            weights.write_bytes(model)
        args = ["run", net, "-w", weights, "-o", out]
    else:
        args = ["inspect", net]
    assert_one_error_line(run_cli(*args), needle)
    assert not out.exists()


def test_bad_inputs_npz_and_unwritable_output(tmp_path):
    net, weights = sample("seq_classifier")
    inputs = tmp_path / "in.npz"
    np.savez(inputs, data=np.zeros((12, 2, 8), np.float32))
    assert_one_error_line(run_cli("run", net, "-w", weights, "--inputs", inputs),
                          "missing input(s) cont")
    np.savez(inputs, data=np.zeros((12, 8), np.float32), cont=np.zeros((12, 2), np.float32))
    assert_one_error_line(run_cli("run", net, "-w", weights, "--inputs", inputs),
                          "input 'data' has shape")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    assert_one_error_line(run_cli("run", net, "-w", weights, "--inputs", tmp_path / "junk.npz"),
                          "cannot read the inputs file")
    assert_one_error_line(run_cli("run", net, "-w", weights, "-o",
                                  tmp_path / "no" / "dir" / "o.npz"),
                           "cannot write the output")
    assert not (tmp_path / "no").exists()


def test_debug_shows_the_traceback(tmp_path):
    net = tmp_path / "net.prototxt"
    net.write_text("layer { nme: 1 }\n")
    proc = run_cli("--debug", "inspect", net)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


# ---- verify: the recurrent equations against the rewritten graph ---------------------------------

@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_verify_prints_a_table_and_passes(invoke, name):
    net, weights = sample(name)
    result = invoke("verify", net, "-w", weights, "--seed", 1)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith("match when |d| ≤ atol + rtol·|ref| with atol 1e-05, rtol 0.0001")
    assert lines[1].split() == ["output", "shape", "max", "abs", "err", "max", "rel", "err",
                                "of", "tol", "by", "verdict"]
    assert lines[2].startswith("probs") and lines[2].endswith("ok")
    assert lines[2].split()[-2] in ("atol", "rtol")  # the term that decided
    if "TensorRT network" in result.stdout:  # the CPU walk of the emitted network
        assert result.stdout.splitlines()[5].endswith("ok")


def test_verify_exits_1_on_a_mismatch(tmp_path):
    """Zero tolerance: float32 summation order already differs between the two graphs."""
    net, weights = sample("captioner")
    proc = run_cli("verify", net, "-w", weights, "--atol", 0, "--rtol", 0)
    assert proc.returncode == 1
    assert "MISMATCH" in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "comparison(s) differ beyond their tolerance" in lines[0]
    assert "widen --atol / --rtol" in lines[0]
    assert lines[0].startswith("error: ")
