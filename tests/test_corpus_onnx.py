"""Every corpus deploy net that converts to an engine also exports to ONNX, exactly.

For each: ``caffe-lstm export`` (the same ``--outputs`` cut as its engine), the model passes
``onnx.checker`` (full check); onnxruntime's outputs equal ``run --original``'s (the
recurrent equations) to 1e-5 of the largest output; TensorRT's OnnxParser parses the model and
builds an engine; and our network evaluator on the parser-built network equals onnxruntime.

The weights are seeded synthetic ones of scale 0.05: with the ±0.5 of ``weights init`` the big
softmaxes and 1000-wide recurrences are so sharp that float32 rounding alone moves outputs by
1e-3 (benchmarks/README.md), which would hide what this test looks for. SCRC (three
1000-wide LSTMs over 100 streams) and LRCN (an AlexNet into a 256-wide LSTM) get 0.02: at 0.05
their final states already differ by 1.4e-5 (SCRC: onnxruntime against the float64
equations) and 1.6e-5 (LRCN: the parser network, evaluated in float64, against onnxruntime) of
their largest value, the LSTMs saturated by large inputs and float32 rounding shown.
LRCN and CTPN run at the smaller image sizes of CORPUS_SMALL_SHAPES (tests/helpers.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import caffe_lstm
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.synthetic import synthetic_weights
from tests.helpers import (
    CORPUS_EXPECTED, assert_parser_matches_onnxruntime, corpus_files, needs_corpus,
    onnxruntime_outputs, shape_options, small_shapes,
)

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")

RTOL = 1e-5
#: The weight scale per net (SCALE_DEFAULT otherwise); see the module's docstring.
SCALE_DEFAULT = 0.05
SCALES = {"prototxt__scrc_word_to_preds_full.prototxt": 0.02,
          "examples__LRCN_activity_recognition__deploy_lstm.prototxt": 0.02}
DEPLOY = [path for path in corpus_files() if CORPUS_EXPECTED[path.name][1] == "engine"]


@needs_corpus()
@pytest.mark.parametrize("path", DEPLOY, ids=lambda p: p.name)
def test_corpus_deploy_net_exports_exactly(invoke, tmp_path, path):
    cut = CORPUS_EXPECTED[path.name][0]
    outputs = [name for name in cut.split(",") if name]
    shapes = small_shapes(path)
    selection = (*(("--outputs", cut) if cut else ()), *shape_options(shapes))
    net = caffe_lstm.load(path, outputs=outputs, shapes=shapes)
    weights = tmp_path / "w.caffemodel"
    write_caffemodel(weights, synthetic_weights(net.graph, seed=0,
                                                  scale=SCALES.get(path.name, SCALE_DEFAULT)))
    state = "io" if net.needs_state_io else "zero"
    model = tmp_path / "net.onnx"
    result = invoke("export", path, "-w", weights, "-o", model, "--state", state, *selection)
    assert result.exit_code == 0, result.stderr
    onnx.checker.check_model(str(model), full_check=True)
    if any(node.op == "ContinuationIndicator" and not node.inputs for node in net.graph.nodes):
        # its cont (0, then 1) is a constant: no Scan scans it (scan_tuning.py), and the
        # model still equals the equations below (warpctc's captcha net, crnn.caffe's)
        scans = [node for node in onnx.load(str(model)).graph.node if node.op_type == "Scan"]
        assert scans and all(a.i == 1 for scan in scans for a in scan.attribute
                             if a.name == "num_scan_inputs"), path.name

    loaded = caffe_lstm.load(path, weights, outputs=outputs, shapes=shapes)
    feeds = (loaded.with_state_io() if state == "io" else loaded).random_inputs(seed=3)
    expected = loaded.run(feeds, original=True, state=state)
    got = onnxruntime_outputs(model, feeds)
    for name, reference in expected.items():
        error = float(np.abs(got[name] - reference).max())
        scale = max(float(np.abs(reference).max()), 1e-30)
        assert error <= RTOL * scale, f"{name}: onnxruntime vs equations {error:.3g} / {scale:.3g}"

    assert_parser_matches_onnxruntime(model, feeds, got)
    engine = tmp_path / "via_onnx.engine"
    result = invoke("convert", path, "-w", weights, "-o", engine, "--via", "onnx",
                    "--state", state, *selection)
    assert result.exit_code == 0, result.stderr
    assert engine.read_bytes()[:4] == b"vtrt"
