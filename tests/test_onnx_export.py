"""``caffe-lstm export``: the ONNX model of the rewritten graph, end to end through the CLI.

Every case exports a net from real files, checks the model with ``onnx.checker`` (full check),
runs it with ``caffe-lstm run --backend onnxruntime --onnx`` and compares every output with
``caffe-lstm run --original`` (the recurrent equations): max |onnx − caffe| ≤ 1e-5 · max |caffe|
per output (fp32). Then the dynamic dims (one model run at several T and N) and the bad
inputs (one ``error:`` line, exit 1, no file left).
"""

from __future__ import annotations


import numpy as np
import pytest

import caffe_lstm
from caffe_lstm.ops import get_op, has_facet
from caffe_lstm.passes.onnx_forms import onnx_rewrite
from tests.helpers import (
    BLSTM_NET, ONNX_VARIANTS, PARSER_AVAILABLE, assert_close_to_scale, assert_one_error_line,
    assert_parser_matches_onnxruntime, check_export, export_model, feeds_for, input_layer,
    run_outputs, sample, synthetic_files, torch_lstm, variant_blobs, variant_net,
    write_variant,
)

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

# ---- helpers ------------------------------------------------------------------------------------


def _cont(T, N, rng=None, resets=True) -> np.ndarray:
    """0 at t = 0, 1 after; with ``resets`` stream 0 restarts at t = T//2 and another stream
    carries a non-binary 0.5."""
    cont = np.ones((T, N), np.float32)
    cont[0] = 0
    if resets and T > 2:
        cont[T // 2, 0] = 0
        cont[1, N - 1] = 0.5
    return cont


# ---- the samples --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["captioner", "deepspeech_relu", "seq_classifier"])
def test_sample_matches_caffe(invoke, tmp_path, name):
    net, weights = sample(name)
    check_export(invoke, tmp_path, net, weights, [None])


def test_sample_with_state_io_matches_caffe(invoke, tmp_path):
    """--state io: h_0, c_0 given (a continued sequence, cont 1 at t = 0) and h_T, c_T out."""
    net, weights = sample("deepspeech_relu")
    rng = np.random.default_rng(4)
    feeds = {"frames": rng.normal(size=(50, 2, 161)).astype(np.float32),
             "cont": np.ones((50, 2), np.float32),
             "rnn1/h_0": rng.normal(size=(1, 2, 64)).astype(np.float32),
             "rnn1/c_0": rng.normal(size=(1, 2, 64)).astype(np.float32)}
    model = check_export(invoke, tmp_path, net, weights, [feeds], state="io")
    names = [i.name for i in onnx.load(model).graph.input]
    assert names == ["frames", "cont", "rnn1/h_0", "rnn1/c_0"]


def test_names_trace_back_to_caffe(invoke, tmp_path):
    """Inputs and outputs are the blobs, the loop one Scan named after its layer, and the
    rewritten graph's values keep their names inside its body."""
    net, weights = sample("captioner")
    model = onnx.load(export_model(invoke, tmp_path, net, weights, "--state", "zero"))
    graph = model.graph
    assert [i.name for i in graph.input] == ["cont_sentence", "input_sentence",
                                             "image_features"]
    assert [o.name for o in graph.output] == ["probs"]
    scans = [node for node in graph.node if node.op_type == "Scan"]
    assert [node.name for node in scans] == ["lstm1/loop/scan#node", "lstm2/loop/scan#node"]
    body = scans[0].attribute[0].g
    tensors = {out for node in body.node for out in node.output}
    assert {"lstm1/gate_input", "lstm1/c", "lstm1/h"} <= tensors
    assert "lstm1/W_xc_x" in {out for node in graph.node for out in node.output}
    assert model.opset_import[0].version == 17 and model.ir_version == 8


# ---- written-for-the-purpose LSTM and RNN nets ---------------------------------------------


@pytest.mark.parametrize("T,N,I,H", [(1, 1, 3, 1), (2, 3, 4, 2), (17, 3, 5, 7), (17, 1, 2, 7)])
def test_lstm_sizes_and_cont_patterns(invoke, tmp_path, T, N, I, H):
    net, weights = synthetic_files(tmp_path, variant_net(T, N, I, H, {}), seed=T + H)
    rng = np.random.default_rng(T * N)
    feeds = {"x": rng.normal(size=(T, N, I)).astype(np.float32), "cont": _cont(T, N)}
    check_export(invoke, tmp_path, net, weights, [feeds])


@pytest.mark.parametrize("name", [*ONNX_VARIANTS, "cell_clip"])
def test_every_lstm_variant_with_static_input_and_exposed_state(invoke, tmp_path, name):
    """Every recurrent_param variant, with x_static, expose_hidden and cont resets."""
    variant = ONNX_VARIANTS.get(name, {"cell_clip": 0.3})
    T, N, I, H = 6, 3, 3, 4
    rng = np.random.default_rng(len(name))
    net, weights = write_variant(tmp_path, variant_net(T, N, I, H, variant, static=4, expose=True),
                                 variant_blobs(rng, I, H, variant, S=4))
    feeds = feeds_for(rng, T, N, I, H, variant, "everything")
    check_export(invoke, tmp_path, net, weights, [feeds])


def test_stacked_lstms(invoke, tmp_path):
    T, N, I, H = 5, 2, 3, 4
    text = variant_net(T, N, I, H, {}) + (
        'layer { name: "lstm2" type: "LSTM" bottom: "r" bottom: "cont" top: "h2" '
        f'recurrent_param {{ num_output: {H + 1} }} }}\n')
    net, weights = synthetic_files(tmp_path, text)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.normal(size=(T, N, I)).astype(np.float32), "cont": _cont(T, N)}
    check_export(invoke, tmp_path, net, weights, [feeds])


@pytest.mark.parametrize("H", [5, 256])  # 256: the recurrent matrix streamed to the file
def test_the_scan_body_runs_only_per_step_work(invoke, tmp_path, H):
    """The LSTM step under onnxruntime, 12 nodes: no loop invariant (the recurrent weight is
    the body's own initializer, transposed, which onnxruntime packs once), the body on 2-D
    (N, ·) slices so that the recurrent product and the input projection's sum are one Gemm,
    one Sigmoid over the i, f, o block and one Tanh over g, and cont multiplying the carried
    states at the end of the step before (by cont_{t+1}, shaped (N, 1)), so that the step's
    own h is its output, no copy; the Scan writes the layer's blob itself; the model still
    computes Caffe's resets (check_export)."""
    T, N, I = 7, 3, 4
    net, weights = synthetic_files(tmp_path, variant_net(T, N, I, H, {}), seed=5)
    rng = np.random.default_rng(5)
    feeds = {"x": rng.normal(size=(T, N, I)).astype(np.float32), "cont": _cont(T, N)}
    model = onnx.load(check_export(invoke, tmp_path, net, weights, [feeds]))
    (scan,) = [node for node in model.graph.node if node.op_type == "Scan"]
    body = next(a.g for a in scan.attribute if a.name == "body")
    ops = [node.op_type for node in body.node]
    assert sorted(ops) == sorted(["Gemm", "Split", "Sigmoid", "Split", "Tanh",
                                  "Mul", "Mul", "Add", "Tanh", "Mul", "Mul", "Mul"]), ops
    (sigmoid,) = [node for node in body.node if node.op_type == "Sigmoid"]
    (after,) = [node for node in body.node if node.op_type == "Split" and
                node.input[0] == sigmoid.output[0]]
    sizes = {t.name: onnx.numpy_helper.to_array(t).tolist() for t in body.initializer}
    assert sizes[after.input[1]] == [H, H, H]  # i, f, o, each H wide
    (gemm,) = [node for node in body.node if node.op_type == "Gemm"]
    assert gemm.input[1] in {t.name for t in body.initializer}  # packed once by onnxruntime
    assert gemm.input[0] == body.input[0].name  # h_{t-1}, cont already applied
    assert gemm.input[2] == body.input[2].name  # + the step's input projection
    assert "lstm1/W_hc" not in {name for node in model.graph.node for name in node.input}
    shapes = [[d.dim_value for d in info.type.tensor_type.shape.dim]
              for info in [*body.input, *body.output]]
    assert shapes == [[N, H], [N, H], [N, 4 * H], [N, 1], [N, H], [N, H], [N, H]], shapes
    cont_next = body.input[-1]
    producers = {out: node for node in body.node for out in node.output}
    h, c, step_output = (producers[o.name] for o in body.output)
    assert h.op_type == c.op_type == "Mul" and cont_next.name in h.input and \
        cont_next.name in c.input  # the carried h and c: cont_{t+1} times the step's
    assert step_output.output[0] in h.input  # the step's h is its output, uncopied
    assert scan.output[-1] == "r"  # the layer's top, no Unsqueeze/Squeeze after the Scan


def test_the_input_projection_adds_its_bias_inside_the_product(invoke, tmp_path):
    """The projection of all steps that each Scan scans, x · W_xcᵀ + b_c, is one MatMul of x
    with a column of ones by W_xcᵀ with b_c as one more row (no Add: onnxruntime would add a
    broadcast bias in a pass of its own over the (T, N, 4H) product); on stacked layers, the
    second reading the first's Scan output, and the model still computes Caffe's layers
    (check_export)."""
    T, N, I, H = 5, 2, 3, 4
    text = variant_net(T, N, I, H, {}) + (
        'layer { name: "lstm2" type: "LSTM" bottom: "r" bottom: "cont" top: "h2" '
        f'recurrent_param {{ num_output: {H + 1} }} }}\n')
    net, weights = synthetic_files(tmp_path, text, seed=4)
    feeds = {"x": np.random.default_rng(4).normal(size=(T, N, I)).astype(np.float32),
             "cont": _cont(T, N)}
    model = onnx.load(check_export(invoke, tmp_path, net, weights, [feeds]))
    producers = {out: node for node in model.graph.node for out in node.output}
    assert not [node for node in model.graph.node if node.op_type == "Add"]
    for layer, bottom in (("lstm1", "x"), ("lstm2", "r")):
        product = producers[f"{layer}/W_xc_x"]
        assert product.op_type == "MatMul"
        x_ones, weight_bias = (producers[name] for name in product.input)
        assert x_ones.op_type == weight_bias.op_type == "Concat"
        assert x_ones.input[0] == bottom and \
            producers[x_ones.input[1]].op_type == "ConstantOfShape"
        transposed, bias_row = (producers[name] for name in weight_bias.input)
        assert transposed.input[0] == f"{layer}/W_xc" and bias_row.input[0] == f"{layer}/b_c"
        assert [a.i for a in x_ones.attribute] == [-1]  # ones after x's last axis (K + 1)


def _scan_projection(model, layer: str):
    """The Scan of ``layer`` and, inside its body, the nodes that read the step's slices of
    the sequences the Scan scans, but cont's products (the Gemm adding the hoisted projection,
    or the Concat of the input itself with h)."""
    scan = next(n for n in model.graph.node if n.op_type == "Scan" and n.name.startswith(layer))
    body = next(a.g for a in scan.attribute if a.name == "body")
    first = len(scan.input) - next(a.i for a in scan.attribute if a.name == "num_scan_inputs")
    sliced = {info.name for info in body.input[first:]}
    return scan, body, [n for n in body.node if sliced & set(n.input) and n.op_type != "Mul"]


def _in_step_product(model, layer: str, bottom: str) -> np.ndarray:
    """Asserts that ``layer``'s Scan scans its bottom with a column of ones (no projection
    of all steps before it) and that its step is one MatMul of [x_t, 1, h_{t-1}] by a body
    initializer; returns that matrix."""
    scan, body, readers = _scan_projection(model, layer)
    (concat,) = readers
    assert concat.op_type == "Concat" and concat.input[1] == body.input[0].name  # [x_t, 1, h]
    producers = {out: node for node in model.graph.node for out in node.output}
    name = scan.input[[i.name for i in body.input].index(concat.input[0])]
    while producers[name].op_type in ("Squeeze", "Unsqueeze"):
        name = producers[name].input[0]
    x_ones = producers[name]
    assert x_ones.op_type == "Concat" and x_ones.input[0] == bottom
    assert f"{layer}/W_xc_x" not in producers  # no (T, N, 4H) product before the Scan
    (product,) = [node for node in body.node if concat.output[0] in node.input]
    assert product.op_type == "MatMul" and product.output[0] == f"{layer}/gate_input"
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in body.initializer}
    return weights[product.input[1]]


@pytest.mark.parametrize("case", ["resets", "constant cont", "streamed weights"])
def test_steps_of_16_rows_compute_their_input_projection_in_the_step(invoke, tmp_path,
                                                                      monkeypatch, case):
    """With 16 rows a step (N = 16) the input projection is no product of all steps before
    the Scan but part of the step's one product, [x_t, 1, h_{t-1}] · [W_xcᵀ; b_c; W_hcᵀ]:
    the (T, N, 4H) tensor of all steps is a round trip through memory that onnxruntime pays
    at every step (benchmarks/README.md). The matrix holds the caffemodel's blobs and W_xc
    is left out of the model (also when the export streams it from the caffemodel); on stacked
    layers, with Caffe's resets (a scanned cont) and with a ContinuationIndicator's constant
    cont, the model computes Caffe's layers (check_export, TensorRT's parser included); with
    the constant cont, onnxruntime's outputs also equal torch.nn.LSTM's, layer on layer."""
    from caffe_lstm.backends.onnx import exporter

    if case == "streamed weights":
        monkeypatch.setattr(exporter, "STREAM_BYTES", 1)
    T, N, I, H = 5, 16, 3, 4
    cont = ('layer { name: "indicator" type: "ContinuationIndicator" top: "cont" '
            f'continuation_indicator_param {{ time_step: {T} batch_size: {N} }} }}\n')
    text = (input_layer({"x": (T, N, I)}) + cont + variant_net(T, N, I, H, {}).split("\n", 1)[1]
            if case == "constant cont" else variant_net(T, N, I, H, {}))
    text += ('layer { name: "lstm2" type: "LSTM" bottom: "r" bottom: "cont" top: "h2" '
             f'recurrent_param {{ num_output: {H + 1} }} }}\n')
    net, weights = synthetic_files(tmp_path, text, seed=6)
    rng = np.random.default_rng(6)
    feeds = {"x": rng.normal(size=(T, N, I)).astype(np.float32)}
    if case != "constant cont":
        feeds["cont"] = _cont(T, N)
    model_path = check_export(invoke, tmp_path, net, weights, [feeds])
    model = onnx.load(model_path)
    blobs = caffe_lstm.load(net, weights).graph
    for layer, bottom, width in (("lstm1", "x", H), ("lstm2", "r", H + 1)):
        w_xc, b_c, w_hc = (np.asarray(v.data) for v in blobs.node(layer).weights)
        expected = np.concatenate([w_xc.T, b_c[None], w_hc.T])
        matrix = _in_step_product(model, layer, bottom)
        assert matrix.shape == (w_xc.shape[1] + 1 + width, 4 * width)
        np.testing.assert_array_equal(matrix, expected)
    assert not {"lstm1/W_xc", "lstm2/W_xc"} & {t.name for t in model.graph.initializer}
    if case == "constant cont":  # 0 at t = 0, then 1: torch's LSTM from zero states
        got = run_outputs(invoke, tmp_path, net, weights, feeds, "--backend", "onnxruntime",
                          "--onnx", model_path, "--state", "zero")
        hidden = feeds["x"]
        for layer in ("lstm1", "lstm2"):
            hidden = torch_lstm(hidden, *(np.asarray(v.data) for v in blobs.node(layer).weights))[0]
        assert_close_to_scale({"h2": got["h2"]}, {"h2": hidden})


@pytest.mark.parametrize("name", ["rnn", "projection", "peephole", "fork Lstm",
                                  "fork Lstm, flat"])
def test_in_step_input_projections_of_other_recurrent_layers(invoke, tmp_path, name):
    """The RNN layer, LSTM variants (a peephole, a recurrent projection) and the fork's Lstm
    (time-major, and flat (T·N, I) with its clip) at 16 rows a step: the Scan whose step added
    the projection of all steps in its Gemm computes it in the step, and the model computes
    Caffe's layer (check_export)."""
    T, N, I, H = 4, 16, 3, 5
    rng = np.random.default_rng(7)
    feeds = {"x": rng.normal(size=(T, N, I)).astype(np.float32), "cont": _cont(T, N)}
    if name.startswith("fork Lstm"):
        flat = name.endswith("flat")
        shapes = {"x": (T * N, I), "clip": (T * N, 1)} if flat else {"x": (T, N, I),
                                                                      "clip": (T, N)}
        feeds = {"x": feeds["x"].reshape(shapes["x"]),
                 "clip": feeds["cont"].reshape(shapes["clip"])}
        bottoms = " ".join(f'bottom: "{each}"' for each in shapes)
        net, weights = synthetic_files(tmp_path, input_layer(shapes) + (
            f'layer {{ name: "lstm1" type: "Lstm" {bottoms} top: "h" '
            f'lstm_param {{ num_output: {H} batch_size: {N} }} }}\n'))
    elif name == "rnn":
        text = input_layer({"x": (T, N, I), "cont": (T, N)}) + (
            f'layer {{ name: "rnn1" type: "RNN" bottom: "x" bottom: "cont" top: "o" '
            f'recurrent_param {{ num_output: {H} }} }}\n')
        net, weights = synthetic_files(tmp_path, text)
    else:
        variant = {"projection": {"num_proj": 3}, "peephole": {"peephole": True}}[name]
        net, weights = write_variant(tmp_path, variant_net(T, N, I, H, variant),
                                     variant_blobs(rng, I, H, variant))
    model = onnx.load(check_export(invoke, tmp_path, net, weights, [feeds]))
    layer = "rnn1" if name == "rnn" else "lstm1"
    _, _, readers = _scan_projection(model, layer)
    assert [node.op_type for node in readers] == ["Concat"], readers


@pytest.mark.parametrize("case", ["15 rows", "a large matrix", "for TensorRT"])
def test_the_projection_of_all_steps_stays_before_the_scan(invoke, tmp_path, monkeypatch,
                                                          case):
    """Below 16 rows a step the step's product is bound by reading its weights, and past
    ``STEP_INPUT_BYTES`` the joint matrix leaves the cache: the projection of all steps stays
    one product before the Scan, which the step's Gemm adds. So does a model for TensorRT's
    parser (``convert --via onnx``), as GPU RNN libraries compute it."""
    from caffe_lstm.backends.onnx import scan_tuning
    from caffe_lstm.backends.onnx.exporter import build_model

    T, N, I, H = 5, 15 if case == "15 rows" else 16, 3, 4
    if case == "a large matrix":  # (I + 1 + H) x 4H floats: 512 bytes; one fewer is too few
        monkeypatch.setattr(scan_tuning, "STEP_INPUT_BYTES", (I + 1 + H) * 4 * H * 4 - 1)
    net, weights = synthetic_files(tmp_path, variant_net(T, N, I, H, {}), seed=8)
    feeds = {"x": np.random.default_rng(8).normal(size=(T, N, I)).astype(np.float32),
             "cont": _cont(T, N)}
    if case == "for TensorRT":
        graph = onnx_rewrite(caffe_lstm.load(net, weights).copy().graph, "scan")
        model = build_model(graph, for_tensorrt=True)[0]
    else:
        model = onnx.load(check_export(invoke, tmp_path, net, weights, [feeds]))
    _, body, readers = _scan_projection(model, "lstm1")
    assert [node.op_type for node in readers] == ["Gemm"]
    assert "lstm1/W_xc_x" in {out for node in model.graph.node for out in node.output}


@pytest.mark.parametrize("state", ["zero", "io"])
def test_a_constant_cont_of_ones_after_the_first_step_is_no_scanned_input(invoke, tmp_path,
                                                                           state):
    """A ContinuationIndicator's cont (0 at t = 0, then 1) is a constant: the carried states
    need no product by cont_{t+1} = 1, so the body reads no cont and has 11 nodes (its h
    copied once for the step output, which a state output cannot also be); the initial
    states, given (state io) or zero, are multiplied by cont_0 before the Scan, and the model
    still computes Caffe's layer (check_export)."""
    T, N, I, H = 6, 2, 3, 4
    text = (f'layer {{ name: "input" type: "Input" top: "x" input_param {{ shape {{ dim: {T} '
            f'dim: {N} dim: {I} }} }} }}\n'
            f'layer {{ name: "indicator" type: "ContinuationIndicator" top: "cont" '
            f'continuation_indicator_param {{ time_step: {T} batch_size: {N} }} }}\n'
            f'layer {{ name: "lstm1" type: "LSTM" bottom: "x" bottom: "cont" top: "r" '
            f'recurrent_param {{ num_output: {H} }} }}\n')
    net, weights = synthetic_files(tmp_path, text, seed=3)
    feeds = {"x": np.random.default_rng(3).normal(size=(T, N, I)).astype(np.float32)}
    model = onnx.load(check_export(invoke, tmp_path, net, weights, [feeds], state=state))
    (scan,) = [node for node in model.graph.node if node.op_type == "Scan"]
    body = next(a.g for a in scan.attribute if a.name == "body")
    assert sorted(node.op_type for node in body.node) == sorted(
        ["Gemm", "Split", "Sigmoid", "Split", "Tanh", "Mul", "Mul", "Add", "Tanh", "Mul",
         "Identity"])
    assert next(a.i for a in scan.attribute if a.name == "num_scan_inputs") == 1
    assert [len(info.type.tensor_type.shape.dim) and info.type.tensor_type.shape.dim[-1]
            .dim_value for info in body.input] == [H, H, 4 * H]  # h, c, the step's x·W + b


@pytest.mark.parametrize("static", [None, 3])
def test_rnn(invoke, tmp_path, static):
    T, N, I, H = 7, 3, 2, 5
    shapes = {"x": (T, N, I), "cont": (T, N)} | ({"x_static": (N, static)} if static else {})
    bottoms = " ".join(f'bottom: "{name}"' for name in shapes)
    text = input_layer(shapes) + (
        f'layer {{ name: "rnn1" type: "RNN" {bottoms} top: "o" '
        f'recurrent_param {{ num_output: {H} }} }}\n')
    net, weights = synthetic_files(tmp_path, text)
    rng = np.random.default_rng(5)
    feeds = {"x": rng.normal(size=(T, N, I)).astype(np.float32), "cont": _cont(T, N)}
    if static:
        feeds["x_static"] = rng.normal(size=(N, static)).astype(np.float32)
    check_export(invoke, tmp_path, net, weights, [feeds])


@pytest.mark.parametrize("layout", ["sequence_clip", "sequence_no_clip", "flat_clip"])
def test_fork_lstm(invoke, tmp_path, layout):
    T, N, I, H = 5, 2, 3, 4
    rng = np.random.default_rng(3)
    x, clip = rng.normal(size=(T, N, I)).astype(np.float32), _cont(T, N)
    if layout == "flat_clip":
        shapes, feeds = {"x": (T * N, I), "clip": (T * N, 1)}, {
            "x": x.reshape(T * N, I), "clip": clip.reshape(T * N, 1)}
    else:
        shapes, feeds = {"x": (T, N, I), "clip": (T, N)}, {"x": x, "clip": clip}
    if layout == "sequence_no_clip":
        del shapes["clip"], feeds["clip"]
    bottoms = " ".join(f'bottom: "{name}"' for name in shapes)
    text = input_layer(shapes) + (
        f'layer {{ name: "lstm1" type: "Lstm" {bottoms} top: "h" '
        f'lstm_param {{ num_output: {H} batch_size: {N} }} }}\n')
    net, weights = synthetic_files(tmp_path, text)
    check_export(invoke, tmp_path, net, weights, [feeds])


def test_blstm_reverse_lstm_reverse(invoke, tmp_path):
    if not has_facet(get_op("Reverse"), "onnx"):
        pytest.xfail("Reverse (ops/fork.py) has no ONNX facet yet")
    net, weights = synthetic_files(tmp_path, BLSTM_NET)
    check_export(invoke, tmp_path, net, weights, [None])


# ---- the other layers, one net ------------------------------------------------------------------

#: Layers that accept another batch (axis 0 of x and s): also exported with a symbolic batch.
BATCH_FREE_LAYERS = """
layer { name: "ip_t" type: "InnerProduct" bottom: "x" top: "ip_t"
        inner_product_param { num_output: 3 axis: 1 transpose: true } }
layer { name: "ip2" type: "InnerProduct" bottom: "x" top: "ip2"
        inner_product_param { num_output: 3 axis: 2 bias_term: false } }
layer { name: "emb" type: "Embed" bottom: "ids" top: "emb"
        embed_param { num_output: 5 input_dim: 10 } }
layer { name: "sc1" type: "Scale" bottom: "x" top: "sc1" scale_param { axis: 1 bias_term: true } }
layer { name: "sc2" type: "Scale" bottom: "x" bottom: "s" top: "sc2" scale_param { axis: 0 } }
layer { name: "sc0" type: "Scale" bottom: "x" top: "sc0" scale_param { num_axes: 0 } }
layer { name: "bias" type: "Bias" bottom: "x" top: "bias" bias_param { axis: 2 } }
layer { name: "bias2" type: "Bias" bottom: "x" bottom: "s" top: "bias2" bias_param { axis: 0 } }
layer { name: "sum" type: "Eltwise" bottom: "x" bottom: "bias" top: "sum"
        eltwise_param { operation: SUM coeff: 0.5 coeff: -2 } }
layer { name: "prod" type: "Eltwise" bottom: "x" bottom: "bias" bottom: "sc2" top: "prod"
        eltwise_param { operation: PROD } }
layer { name: "max" type: "Eltwise" bottom: "x" bottom: "sc1" top: "max"
        eltwise_param { operation: MAX } }
layer { name: "square" type: "Power" bottom: "x" top: "square"
        power_param { power: 2 scale: 0.5 shift: 1 } }
layer { name: "cube" type: "Power" bottom: "x" top: "cube" power_param { power: 3 shift: -0.5 } }
layer { name: "sig" type: "Sigmoid" bottom: "x" top: "sig" }
layer { name: "tanh" type: "TanH" bottom: "x" top: "tanh" }
layer { name: "leaky" type: "ReLU" bottom: "x" top: "leaky" relu_param { negative_slope: 0.1 } }
layer { name: "relu" type: "ReLU" bottom: "x" top: "relu" }
layer { name: "elu" type: "ELU" bottom: "x" top: "elu" elu_param { alpha: 0.7 } }
layer { name: "abs" type: "AbsVal" bottom: "x" top: "abs" }
layer { name: "bnll" type: "BNLL" bottom: "x" top: "bnll" }
layer { name: "exp" type: "Exp" bottom: "x" top: "exp" exp_param { base: 2 scale: 0.5 shift: 1 } }
layer { name: "log" type: "Log" bottom: "abs" top: "log"
        log_param { base: 10 scale: 0.5 shift: 3 } }
layer { name: "clip" type: "Clip" bottom: "x" top: "clip" clip_param { min: -0.5 max: 0.5 } }
layer { name: "softmax" type: "Softmax" bottom: "x" top: "softmax" softmax_param { axis: 1 } }
layer { name: "drop" type: "Dropout" bottom: "x" top: "drop" }
layer { name: "slice" type: "Slice" bottom: "x" top: "part0" top: "part1" top: "part2"
        slice_param { axis: 1 slice_point: 2 slice_point: 5 } }
layer { name: "concat" type: "Concat" bottom: "part2" bottom: "part0" top: "concat"
        concat_param { axis: 1 } }
layer { name: "split" type: "Split" bottom: "part1" top: "copy0" top: "copy1" }
layer { name: "reshape" type: "Reshape" bottom: "x" top: "reshape"
        reshape_param { shape { dim: 3 dim: -1 } axis: 1 num_axes: 1 } }
layer { name: "reshape0" type: "Reshape" bottom: "x" top: "reshape0"
        reshape_param { shape { dim: 0 dim: -1 } } }
layer { name: "flatten" type: "Flatten" bottom: "reshape" top: "flatten"
        flatten_param { axis: 1 end_axis: 2 } }
layer { name: "tile" type: "Tile" bottom: "x" top: "tile" tile_param { axis: 1 tiles: 2 } }
layer { name: "rsum" type: "Reduction" bottom: "x" top: "rsum"
        reduction_param { operation: SUM axis: 1 coeff: 2 } }
layer { name: "rasum" type: "Reduction" bottom: "x" top: "rasum"
        reduction_param { operation: ASUM axis: 2 } }
layer { name: "rsumsq" type: "Reduction" bottom: "x" top: "rsumsq"
        reduction_param { operation: SUMSQ axis: -1 } }
layer { name: "rmean" type: "Reduction" bottom: "x" top: "rmean"
        reduction_param { operation: MEAN axis: 1 coeff: -1 } }
layer { name: "crop" type: "Crop" bottom: "x" bottom: "ref" top: "crop"
        crop_param { axis: 1 offset: 1 offset: 2 } }
layer { name: "argmax" type: "ArgMax" bottom: "tile" top: "argmax"
        argmax_param { top_k: 3 axis: 1 } }
layer { name: "maxval" type: "ArgMax" bottom: "tile" top: "maxval"
        argmax_param { top_k: 2 axis: 1 out_max_val: true } }
layer { name: "argmax_all" type: "ArgMax" bottom: "tile" top: "argmax_all"
        argmax_param { top_k: 3 out_max_val: true } }
layer { name: "silence" type: "Silence" bottom: "copy0" }
"""
#: Layers that fix the batch (a weight or a constant of its size).
FIXED_BATCH_LAYERS = """
layer { name: "ip0" type: "InnerProduct" bottom: "x" top: "ip0"
        inner_product_param { num_output: 2 axis: 0 } }
layer { name: "rall" type: "Reduction" bottom: "x" top: "rall"
        reduction_param { operation: MEAN axis: 0 } }
layer { name: "dummy" type: "DummyData" top: "dummy"
        dummy_data_param { shape { dim: 2 dim: 6 dim: 4 } data_filler { value: 0.25 } } }
layer { name: "plus" type: "Eltwise" bottom: "x" bottom: "dummy" top: "plus" }
"""
LAYER_INPUTS = {"x": (2, 6, 4), "s": (2, 6), "ids": (3, 2), "ref": (2, 3, 2)}


def _layer_feeds(batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch)
    # ties on purpose (values rounded to halves): ArgMax ranks equal values as Caffe does
    x = np.round(rng.normal(size=(batch, 6, 4)) * 2) / 2
    ids = rng.uniform(0, 9.99, size=(3, 2))  # not whole: Embed truncates as Caffe does
    return {"x": x.astype(np.float32), "s": rng.normal(size=(batch, 6)).astype(np.float32),
            "ids": ids.astype(np.float32), "ref": np.zeros((batch, 3, 2), np.float32)}


@pytest.mark.parametrize("opset", [13, 17, 21])
def test_every_other_layer_matches_caffe(invoke, tmp_path, opset):
    text = input_layer(LAYER_INPUTS) + BATCH_FREE_LAYERS + FIXED_BATCH_LAYERS
    net, weights = synthetic_files(tmp_path, text)
    model = check_export(invoke, tmp_path, net, weights, [_layer_feeds(2)],
                         ("--opset", str(opset)))
    assert onnx.load(model).opset_import[0].version == opset


def test_layers_with_a_symbolic_batch(invoke, tmp_path):
    """One model, batch 1, 2 and 5: Reshape's moved dims, Crop and ArgMax read it at run
    time."""
    net, weights = synthetic_files(tmp_path, input_layer(LAYER_INPUTS) + BATCH_FREE_LAYERS)
    model = check_export(
        invoke, tmp_path, net, weights, [_layer_feeds(b) for b in (1, 2, 5)],
        ("--shape", "x:1x6x4:2x6x4:5x6x4", "--shape", "s:1x6:2x6:5x6",
         "--shape", "ref:1x3x2:2x3x2:5x3x2"))
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in onnx.load(model).graph.input}
    assert dims["x"] == ["x_dim0", 6, 4] and dims["s"] == ["x_dim0", 6]
    assert dims["ids"] == [3, 2]


def test_a_blob_named_like_a_weight(invoke, tmp_path):
    """Tensor names are unique even when a top is called like a layer's weight."""
    text = input_layer({"x": (2, 3)}) + (
        'layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip/weight" '
        'inner_product_param { num_output: 4 } }\n'
        'layer { name: "ip2" type: "InnerProduct" bottom: "ip/weight" top: "ip2/bias" '
        'inner_product_param { num_output: 2 } }\n')
    net, weights = synthetic_files(tmp_path, text)
    model = check_export(invoke, tmp_path, net, weights, [None])
    graph = onnx.load(model).graph
    assert [o.name for o in graph.output] == ["ip2/bias"]
    assert len({t.name for t in graph.initializer}) == len(graph.initializer)


def test_outputs_keep_the_blob_names(invoke, tmp_path):
    """A net input, a Dropout of it and a Split top as outputs: each under its own name."""
    text = input_layer({"x": (2, 3)}) + (
        'layer { name: "drop" type: "Dropout" bottom: "x" top: "drop" }\n'
        'layer { name: "split" type: "Split" bottom: "drop" top: "a" top: "b" }\n'
        'layer { name: "tanh" type: "TanH" bottom: "a" top: "tanh" }\n')
    net, weights = synthetic_files(tmp_path, text)
    model = check_export(invoke, tmp_path, net, weights, [None], outputs="x,drop,b,tanh")
    assert [o.name for o in onnx.load(model).graph.output] == ["x", "drop", "b", "tanh"]


# ---- symbolic T and N ---------------------------------------------------------------------------


def test_symbolic_time_and_batch_run_at_other_sizes(invoke, tmp_path):
    """The captioner exported with T and N symbolic runs at (T, N) = (1, 1), (3, 5), (17, 2),
    with cont resets, and states given (--state io)."""
    net, weights = sample("captioner")
    flags = ("--shape", "input_sentence:1x1:10x2:20x8", "--shape", "cont_sentence:1x1:10x2:20x8",
             "--shape", "image_features:1x32:2x32:8x32")
    feeds_list = []
    for T, N in ((1, 1), (3, 5), (17, 2)):
        rng = np.random.default_rng(T)
        feeds = {"input_sentence": rng.integers(0, 20, (T, N)).astype(np.float32),
                 "cont_sentence": _cont(T, N),
                 "image_features": rng.normal(size=(N, 32)).astype(np.float32)}
        for layer in ("lstm1", "lstm2"):
            for state in ("h_0", "c_0"):
                feeds[f"{layer}/{state}"] = rng.normal(size=(1, N, 24)).astype(np.float32)
        feeds_list.append(feeds)
    model = check_export(invoke, tmp_path, net, weights, feeds_list, flags, state="io")
    graph = onnx.load(model).graph
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*graph.input, *graph.output]}
    T, N = "cont_sentence_dim0", "cont_sentence_dim1"
    assert dims["input_sentence"] == [T, N] and dims["image_features"] == [N, 32]
    assert dims["probs"] == [T, N, 50] and dims["lstm2/c_T"] == [1, N, 24]


def test_fork_lstm_with_symbolic_time(invoke, tmp_path):
    """The fork's Lstm without clip: zero states of (1, N, H) built at run time."""
    T, N, I, H = 5, 2, 3, 4
    text = input_layer({"x": (T, N, I)}) + (
        f'layer {{ name: "lstm1" type: "Lstm" bottom: "x" top: "h" '
        f'lstm_param {{ num_output: {H} }} }}\n')
    net, weights = synthetic_files(tmp_path, text)
    feeds = [{"x": np.random.default_rng(t).normal(size=(t, n, I)).astype(np.float32)}
             for t, n in ((1, 3), (9, 1))]
    check_export(invoke, tmp_path, net, weights, feeds, ("--shape", "x:1x1x3:5x2x3:9x3x3"))


def test_time_and_batch_over_the_same_range_are_not_one_dim(invoke, tmp_path):
    """T and N both 1..9: each input dim keeps its own name, dims computed from them stay
    unnamed (no false T = N), and the model runs with T ≠ N."""
    net, weights = sample("seq_classifier")
    feeds = [{"data": np.random.default_rng(t).normal(size=(t, n, 8)).astype(np.float32),
              "cont": _cont(t, n)} for t, n in ((3, 7), (9, 1))]
    model = check_export(invoke, tmp_path, net, weights, feeds,
                         ("--shape", "data:1x1x8:5x5x8:9x9x8", "--shape", "cont:1x1:5x5:9x9"))
    graph = onnx.load(model).graph
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*graph.input, *graph.output]}
    assert dims == {"data": ["data_dim0", "data_dim1", 8], "cont": ["cont_dim0", "cont_dim1"],
                    "probs": [0, 0, 5]}  # 0: a dim without value or name


# ---- large models: external data ------------------------------------------------------------


def test_external_data_beside_the_model(tmp_path):
    """Past the threshold (2 GiB for real; lowered here) the weights go to MODEL.onnx.data,
    and onnxruntime loads the pair."""
    from caffe_lstm.backends.onnx.exporter import build_model, save_model
    from caffe_lstm.backends.onnx.runtime import run_model

    net = caffe_lstm.load(*sample("seq_classifier"))
    graph, profiles = onnx_rewrite(net.copy().graph, "scan"), {}  # as export_onnx does
    model, _ = build_model(graph, 17, profiles)
    data = save_model(model, tmp_path / "m.onnx", threshold=1)
    assert data == tmp_path / "m.onnx.data" and data.stat().st_size > 0
    onnx.checker.check_model(str(tmp_path / "m.onnx"), full_check=True)
    feeds = net.random_inputs(seed=1)
    assert_close_to_scale(run_model(tmp_path / "m.onnx", feeds), net.run(feeds, original=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]


@pytest.mark.parametrize("threshold", [None, 1])
def test_streamed_weights_in_one_file_or_beside_it(tmp_path, monkeypatch, threshold):
    """Every weight streamed from its array (but the recurrent matrices, in their bodies):
    the model is complete, in one file or with external data, and equals the equations."""
    from caffe_lstm.backends.onnx import exporter
    from caffe_lstm.backends.onnx.runtime import run_model

    monkeypatch.setattr(exporter, "STREAM_BYTES", 1)
    net = caffe_lstm.load(*sample("captioner"))
    graph, profiles = onnx_rewrite(net.copy().graph, "scan"), {}  # as export_onnx does
    model, streamed = exporter.build_model(graph, 17, profiles, stream=True)
    weights = {v.name for node in graph.all_nodes() for v in node.weights}  # bodies' too
    in_bodies = {v.name for node in graph.all_nodes() for body in node.subgraphs
                 for inner in body.all_nodes() for v in inner.weights}
    # a body's recurrent matrix is the body's own initializer, transposed (scan_tuning.py)
    assert weights - in_bodies <= {item.header.name for item in streamed} <= weights
    assert len(streamed) > 0
    assert not [t for t in model.graph.initializer if t.name in {s.header.name for s in streamed}]
    extra = {} if threshold is None else {"threshold": threshold}
    exporter.save_model(model, tmp_path / "m.onnx", streamed, **extra)
    onnx.checker.check_model(str(tmp_path / "m.onnx"), full_check=True)
    feeds = net.random_inputs(seed=1)
    assert_close_to_scale(run_model(tmp_path / "m.onnx", feeds), net.run(feeds, original=True))
    if PARSER_AVAILABLE:
        assert_parser_matches_onnxruntime(tmp_path / "m.onnx", feeds)


def test_run_hands_streamed_weights_to_onnxruntime(invoke, tmp_path, monkeypatch):
    """`run --backend onnxruntime` passes every weight (all streamed here) as an OrtValue over
    its array, not through protobuf; the outputs equal the numpy run's, and the weights stay
    out of the model the exporter built."""
    from caffe_lstm.backends.onnx import exporter, runtime

    monkeypatch.setattr(exporter, "STREAM_BYTES", 1)
    handed: list[int] = []
    original = runtime._hand_over_weights

    def counted(ort, options, model, streamed):
        handed.append(len(streamed))
        return original(ort, options, model, streamed)

    monkeypatch.setattr(runtime, "_hand_over_weights", counted)
    net, weights = sample("captioner")
    outputs = []
    for backend in ("numpy", "onnxruntime"):
        out = tmp_path / f"{backend}.npz"
        result = invoke("run", net, "-w", weights, "--backend", backend, "-o", out)
        assert result.exit_code == 0, result.stderr
        outputs.append(dict(np.load(out)))
    assert handed and handed[0] > 0
    assert_close_to_scale(outputs[1], outputs[0])


# ---- bad input -----------------------------------------------------------------------------------


def test_layers_without_an_onnx_form_are_listed_at_once(invoke, tmp_path, monkeypatch):
    net, weights = synthetic_files(tmp_path, input_layer(LAYER_INPUTS) + BATCH_FREE_LAYERS)
    for op_type in ("TanH", "Tile"):
        monkeypatch.setattr(get_op(op_type), "onnx", None)
    result = invoke("export", net, "-w", weights, "-o", tmp_path / "m.onnx")
    assert_one_error_line(result,
                          "cannot export these layers to ONNX: TanH (tanh): no ONNX form yet; "
                          "Tile (tile): no ONNX form yet")
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("opset", ["12", "22"])
def test_an_opset_out_of_range_is_refused(invoke, tmp_path, opset):
    net, weights = sample("seq_classifier")
    result = invoke("export", net, "-w", weights, "-o", tmp_path / "m.onnx", "--opset", opset)
    assert_one_error_line(result,
                          f"ONNX opset {opset} is not supported, --opset, use an opset from "
                          "13 to 21")
    assert list(tmp_path.iterdir()) == []


def test_a_layer_needing_a_newer_opset_is_refused(invoke, tmp_path, monkeypatch):
    """A facet that needs a newer opset than asked for says so in one line, naming the layer."""
    tanh = get_op("TanH")
    original = tanh.onnx

    def needs_opset_19(ctx, node, x):
        ctx.require_opset(19, "this TanH")
        return original(ctx, node, x)

    monkeypatch.setattr(tanh, "onnx", staticmethod(needs_opset_19))
    net, weights = synthetic_files(tmp_path, input_layer(LAYER_INPUTS) + BATCH_FREE_LAYERS)
    result = invoke("export", net, "-w", weights, "-o", tmp_path / "m.onnx", "--opset", "17")
    assert_one_error_line(result,
                          "this TanH needs ONNX opset 19 or newer, the export asks for 17, "
                          "layer 'tanh' (TanH)")
    assert "pass --opset 19 or newer" in result.stderr
    assert not (tmp_path / "m.onnx").exists()
    assert invoke("export", net, "-w", weights, "-o", tmp_path / "m.onnx", "--opset",
                  "19").exit_code == 0


def test_an_unwritable_output_is_refused(invoke, tmp_path):
    net, weights = sample("seq_classifier")
    (tmp_path / "file").write_text("a file, not a directory")
    result = invoke("export", net, "-w", weights, "-o", tmp_path / "file" / "m.onnx")
    assert_one_error_line(result, "cannot write the output")
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_a_shape_range_the_layers_refuse(invoke, tmp_path):
    net, weights = sample("seq_classifier")
    result = invoke("export", net, "-w", weights, "-o", tmp_path / "m.onnx",
                    "--shape", "data:1x1x8:12x2x8:20x4x9", "--shape", "cont:1x1:12x2:20x4")
    assert_one_error_line(result, "at the --shape MAX sizes")
    assert list(tmp_path.iterdir()) == []


def test_run_without_onnxruntime(invoke, tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "onnxruntime", None)  # import fails
    net, weights = sample("seq_classifier")
    out = tmp_path / "out.npz"
    result = invoke("run", net, "-w", weights, "--backend", "onnxruntime", "-o", out)
    assert_one_error_line(result, "pip install 'caffe-lstm[onnx]'")
    assert not out.exists()


def test_a_model_exported_for_other_state_inputs(invoke, tmp_path):
    """The model's build facts give its state (docs/cli.md); another --state is one line, and
    so are inputs that do not fit a model without facts (built elsewhere)."""
    net, weights = sample("deepspeech_relu")
    model = export_model(invoke, tmp_path, net, weights, "--state", "io")
    result = invoke("run", net, "-w", weights, "--backend", "onnxruntime", "--onnx", model)
    assert result.exit_code == 0, result.stderr
    result = invoke("run", net, "-w", weights, "--backend", "onnxruntime", "--onnx", model,
                    "--state", "zero")
    assert_one_error_line(result, "the model was built with state 'io', not 'zero'")
    proto = onnx.load(str(model))
    del proto.metadata_props[:]
    onnx.save(proto, str(model))
    result = invoke("run", net, "-w", weights, "--backend", "onnxruntime", "--onnx", model)
    assert_one_error_line(result, "it lacks rnn1/h_0, rnn1/c_0")


def test_verify_has_an_onnxruntime_column(invoke):
    net, weights = sample("seq_classifier")
    result = invoke("verify", net, "-w", weights, "--no-trt")
    assert result.exit_code == 0, result.stderr
    assert "original equations vs ONNX model (onnxruntime)" in result.stdout
    result = invoke("verify", net, "-w", weights, "--no-trt", "--no-onnxruntime")
    assert "original equations vs ONNX model" not in result.stdout
    assert "ONNX model (onnxruntime) is not checked: turned off (--no-onnxruntime)" in \
        result.stdout


def test_verify_notes_a_net_it_cannot_export(invoke, monkeypatch):
    """verify's onnxruntime column is skipped with a note (default) or an error (asked for)
    when a layer has no ONNX form."""
    monkeypatch.setattr(get_op("Softmax"), "onnx", None)
    net, weights = sample("seq_classifier")
    result = invoke("verify", net, "-w", weights, "--no-trt")
    assert result.exit_code == 0, result.stderr
    assert ("ONNX model (onnxruntime) is not checked: cannot export these layers to ONNX: "
            "Softmax") in result.stdout
    result = invoke("verify", net, "-w", weights, "--no-trt", "--onnxruntime")
    assert_one_error_line(result, "cannot export these layers to ONNX: Softmax (probs)")
