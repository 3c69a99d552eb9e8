"""Every corpus file through the whole pipeline: inspect; for deploy nets weights init, run and
convert (post-processing cut with --outputs); train/test nets, read as their deploy graph,
through inspect (with every shape), weights init, verify and convert, and their kept layers
compared with the TEST-phase layers protobuf's own parser reads. docs/corpus.md keeps the
same table."""

from __future__ import annotations

import re

import numpy as np
import pytest
from google.protobuf import text_format

import caffe_lstm
from caffe_lstm.proto import caffe_pb2
from tests.helpers import (
    CORPUS_EXPECTED, CORPUS_TRAIN_NETS, corpus_files, corpus_options, needs_corpus,
)

pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")

#: How the train/test nets run (weights init, verify, convert): the stages of
#: conftest.CORPUS_TRAIN_NETS with smaller shapes where the net leaves them open (few streams
#: and steps; the LRCN AlexNet front ends get 67 x 67 images, the smallest their pooling
#: allows, since numpy convolutions of 227 x 227 frames take minutes), and verify's options.
#: Synthetic weights, uniform in [-0.5, 0.5), make 1000-wide recurrences chaotic: float32
#: rounding grows with every step, so the language models run 3 steps, and S2VT (80 steps x
#: 32 streams, fixed by its Reshape) is verified with cont resetting every 4 steps, at
#: atol 1e-3, up to lstm2 (its 46168-word predict layer alone takes 2 minutes in numpy).
LRCN_STAGES = ("--stage", "test-on-val", "--stage", "factored", "--stage", "2-layer")
S2VT_SHAPES = ("--shape", "cont_sentence:80x32", "--shape", "input_sentence:80x32",
               "--shape", "stage_indicator:80x32", "--shape", "frame_fc7:80x32x4096")
TRAIN_RUNS = {
    "examples__coco_caption__lrcn.prototxt": (
        (*LRCN_STAGES, "--shape", "data:2x3x67x67", "--shape", "cont_sentence:3x2",
         "--shape", "input_sentence:3x2"), ("--atol", "1e-4")),
    "examples__coco_caption__lstm_language_model.prototxt": (
        ("--stage", "test-on-val", "--shape", "cont_sentence:3x2",
         "--shape", "input_sentence:3x2"), ("--atol", "1e-4")),
    "examples__LRCN_activity_recognition__train_test_lstm_RGB.prototxt": (
        ("--stage", "test-on-test", "--shape", "data:48x3x67x67", "--shape", "clip_markers:48"),
        # Unit-scale weights keep fc6's outputs of order 1: float32 sums over its 384 inputs
        # in another order differ by ~2e-5 (verify locates the first divergence at fc6).
        ("--atol", "1e-4")),
    "examples__s2vt__s2vt.prototxt": (
        (*LRCN_STAGES, *S2VT_SHAPES), ("--atol", "1e-3", "--outputs", "lstm2")),
}


@needs_corpus()
def test_every_corpus_file_has_an_expected_outcome():
    assert sorted(p.name for p in corpus_files()) == sorted(CORPUS_EXPECTED)
    assert {name for name, (_, outcome) in CORPUS_EXPECTED.items()
            if outcome == "verified engine"} \
        == set(TRAIN_RUNS)


@needs_corpus()
@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_file_through_the_pipeline(invoke, tmp_path, path):
    cut, expected = CORPUS_EXPECTED[path.name]
    selection = ("--outputs", cut) if cut else ()
    result = invoke("inspect", path, *selection, *corpus_options(path))
    if expected not in ("engine", "verified engine"):
        assert result.exit_code == 1 and expected in result.stderr, result.stderr
        assert "unsupported layer types" in result.stderr and "--outputs" in result.stderr
        return
    assert result.exit_code == 0, result.stderr
    assert "?" not in result.stdout  # every shape known
    weights, engine = tmp_path / "w.caffemodel", tmp_path / "net.engine"
    if expected == "engine":
        steps = (("weights", "init", path, "-o", weights, *selection),
                 ("run", path, "-w", weights, "-o", tmp_path / "out.npz", *selection),
                 ("convert", path, "-w", weights, "-o", engine, *selection))
    else:
        options, verify_options = TRAIN_RUNS[path.name]
        steps = (("weights", "init", path, "-o", weights, *options),
                 ("verify", path, "-w", weights, *options, *verify_options,
                  *_resetting_inputs(path, tmp_path)),
                 ("convert", path, "-w", weights, "-o", engine, *options))
    for args in steps:
        result = invoke(*args)
        assert result.exit_code == 0, (args[0], result.stderr)
    assert engine.read_bytes()[:4] == b"vtrt"


def _resetting_inputs(path, folder) -> tuple[str, ...]:
    """S2VT's verify inputs: word ids, a stage indicator, frame features, and cont 0 every 4
    steps (S2VT packs several sentences into its 80 steps the same way)."""
    if path.name != "examples__s2vt__s2vt.prototxt":
        return ()
    rng = np.random.default_rng(0)
    cont = np.ones((80, 32), np.float32)
    cont[::4] = 0
    np.savez(folder / "in.npz", cont_sentence=cont,
             input_sentence=rng.integers(0, 46168, (80, 32)).astype(np.float32),
             stage_indicator=(np.arange(80)[:, None] >= 40).repeat(32, 1).astype(np.float32),
             frame_fc7=rng.standard_normal((80, 32, 4096)).astype(np.float32))
    return ("--inputs", str(folder / "in.npz"))


# ---- a train/test net's kept graph is its TEST-phase graph minus the training layers ---------


def _rule_met(rule, stages: set[str]) -> bool:
    """Caffe's NetStateRule at phase TEST, level 0 (net.cpp StateMeetsRule)."""
    return ((not rule.HasField("phase") or rule.phase == caffe_pb2.TEST)
            and (not rule.HasField("min_level") or rule.min_level <= 0)
            and (not rule.HasField("max_level") or rule.max_level >= 0)
            and set(rule.stage) <= stages and not set(rule.not_stage) & stages)


def _test_phase_layers(path, stages: set[str]) -> list[tuple[str, str]]:
    """(name, type) of the layers Caffe instantiates at TEST with ``stages``, read by
    protobuf's own text parser (not ours), in file order."""
    net = text_format.Parse(path.read_text(), caffe_pb2.NetParameter(), allow_unknown_field=True)
    return [(layer.name, layer.type) for layer in net.layer
            if (any(_rule_met(r, stages) for r in layer.include) if layer.include
                else not any(_rule_met(r, stages) for r in layer.exclude))]


def _named_in_note(notes: list[str], start: str) -> set[str]:
    """The layer names of the note that starts with ``start`` ("name (Type), …")."""
    (note,) = [note for note in notes if note.startswith(start)]
    return set(re.findall(r"([\w/.-]+) \([A-Z]\w*\)", note.split(":", 1)[1].split("; unused")[0]))


@needs_corpus()
@pytest.mark.parametrize("name", sorted(CORPUS_TRAIN_NETS))
def test_train_test_net_keeps_its_test_phase_graph_minus_training_layers(name):
    path = next(p for p in corpus_files() if p.name == name)
    options = CORPUS_TRAIN_NETS[name]
    stages = {options[i + 1] for i, o in enumerate(options) if o == "--stage"}
    shapes = {k: tuple(int(d) for d in v.split("x")) for k, v in
              (options[i + 1].split(":") for i, o in enumerate(options) if o == "--shape")}
    net = caffe_lstm.load(path, stages=sorted(stages), shapes=shapes)
    test_phase = _test_phase_layers(path, stages)
    kept = [(node.name, node.op) for node in net.graph.nodes]
    dropped = [(name, kind) for name, kind in test_phase if (name, kind) not in kept]
    assert kept == [layer for layer in test_phase if layer not in dropped]
    training = _named_in_note(net.notes, "converted as the deploy graph")
    data = _named_in_note(net.notes, "data layers read as net inputs")
    assert {name for name, _ in dropped} == training | data
    assert all(kind.endswith("Loss") or kind in ("Accuracy", "Silence", "Reshape")
               for name, kind in dropped if name in training)
