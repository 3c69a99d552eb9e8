"""Every corpus file through the whole pipeline: inspect; for deploy nets weights init, run and
convert (post-processing cut with --outputs). docs/corpus.md keeps the same table."""

from __future__ import annotations

import pytest

from tests.conftest import corpus_files, needs_corpus

pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")

#: file -> (--outputs cut or "", the expected outcome): "engine" = inspect, weights init, run
#: and convert succeed; otherwise the text the one-line inspect error must contain.
EXPECTED = {
    "examples__LRCN_activity_recognition__deploy_lstm.prototxt": ("", "engine"),
    "examples__LRCN_activity_recognition__train_test_lstm_RGB.prototxt":
        ("", "SoftmaxWithLoss (loss); Accuracy (accuracy)"),
    "examples__LRCN_evaluate__deploy_lstm_lstm.prototxt": ("", "engine"),
    "examples__coco_caption__lrcn.prototxt":
        ("", "SoftmaxWithLoss (cross_entropy_loss); Accuracy (accuracy)"),
    "examples__coco_caption__lrcn_word_to_preds.deploy.prototxt": ("", "engine"),
    "examples__coco_caption__lstm_language_model.prototxt":
        ("", "SoftmaxWithLoss (cross_entropy_loss); Accuracy (accuracy)"),
    "examples__coco_caption__lstm_lm.deploy.prototxt": ("", "engine"),
    "examples__lstm_sequence__deep_lstm_short.prototxt": ("", "engine"),
    "examples__lstm_sequence__lstm_short.prototxt": ("", "engine"),
    "prototxt__scrc_word_to_preds_full.prototxt": ("", "engine"),
    "examples__ocr__densenet__densenet-res-blstm_deploy.prototxt": ("", "engine"),
    "examples__ocr__inception-bn__deploy.prototxt": ("", "engine"),
    "models__deploy.prototxt": ("rpn_cls_prob_reshape,rpn_bbox_pred", "engine"),
    "examples__language_fusion__deploy_lm_deepfus_img512_s2vt_glove.words_to_preds.prototxt":
        ("", "engine"),
    "examples__s2vt__s2vt.prototxt": ("", "SoftmaxWithLoss (cross_entropy_loss); Accuracy"),
    "examples__s2vt__s2vt.words_to_preds.deploy.prototxt": ("", "engine"),
    "examples__warpctc_captcha__deploy.prototxt": ("", "engine"),
    "examples__crnn__deploy.prototxt": ("", "engine"),
}


@needs_corpus()
def test_every_corpus_file_has_an_expected_outcome():
    assert sorted(p.name for p in corpus_files()) == sorted(EXPECTED)


@needs_corpus()
@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_file_through_the_pipeline(invoke, tmp_path, path):
    cut, expected = EXPECTED[path.name]
    selection = ("--outputs", cut) if cut else ()
    result = invoke("inspect", path, *selection)
    if expected != "engine":
        assert result.exit_code == 1 and expected in result.stderr, result.stderr
        assert "unsupported layer types" in result.stderr and "--outputs" in result.stderr
        return
    assert result.exit_code == 0, result.stderr
    weights, engine = tmp_path / "w.caffemodel", tmp_path / "net.engine"
    for args in (("weights", "init", path, "-o", weights),
                 ("run", path, "-w", weights, "-o", tmp_path / "out.npz"),
                 ("convert", path, "-w", weights, "-o", engine)):
        result = invoke(*args, *selection)
        assert result.exit_code == 0, (args[0], result.stderr)
    assert engine.read_bytes()[:4] == b"vtrt"
