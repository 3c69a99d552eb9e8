"""``caffe-lstm export --lstm-op native``: ONNX's own LSTM / RNN operator where it is exact.

Through the CLI on real files: every model passes ``onnx.checker`` (full check), holds the
native operator and no Scan, and onnxruntime's outputs equal ``run --original`` to 1e-5 of the
largest value (tests/helpers.py's check_export, which also checks TensorRT's parser
network against onnxruntime). Every layer the operator would compute differently is refused
in one ``error:`` line naming it and why, exit 1, no file (ops/recurrent/native.py's rules).
"""

from __future__ import annotations

import numpy as np
import pytest

import caffe_lstm
from tests.helpers import assert_one_error_line, check_export, input_layer, synthetic_files

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

NATIVE = ("--lstm-op", "native")


def _field(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _net(T, N, layer_type="LSTM", cont="indicator", fields=None, expose=False,
         static=False, x_dims=(2, 3), H=5) -> str:
    """x (T, N, *x_dims) [, x_static (N, 2)] [, h_0, c_0] and one recurrent layer ``rec1``.

    ``cont``: "indicator" (ContinuationIndicator: 0 at t = 0, 1 after), "input" (a net input),
    a number (DummyData of that value) or None (no cont bottom: the fork's Lstm).
    """
    shapes = {"x": (T, N, *x_dims)}
    if cont == "input":
        shapes["cont"] = (T, N)
    if static:
        shapes["x_static"] = (N, 2)
    states = {"RNN": ["h"]}.get(layer_type, ["h", "c"]) if expose else []
    shapes.update({f"{s}_0": (1, N, H) for s in states})
    text = input_layer(shapes)
    if cont == "indicator":
        text += ('layer { name: "indicator" type: "ContinuationIndicator" top: "cont" '
                 f'continuation_indicator_param {{ time_step: {T} batch_size: {N} }} }}\n')
    elif cont not in ("input", None):
        text += ('layer { name: "dummy" type: "DummyData" top: "cont" dummy_data_param { '
                 f'shape {{ dim: {T} dim: {N} }} data_filler {{ value: {cont} }} }} }}\n')
    bottoms = ["x"] + (["cont"] if cont is not None else []) + (["x_static"] if static else [])
    bottoms += [f"{s}_0" for s in states]
    tops = ["y"] + [f"{s}_T" for s in states]
    wiring = " ".join([f'bottom: "{b}"' for b in bottoms] + [f'top: "{t}"' for t in tops])
    if layer_type == "Lstm":
        param = f"lstm_param {{ num_output: {H} batch_size: {N} }}"
    else:
        extra = " ".join(f"{k}: {_field(v)}" for k, v in (fields or {}).items())
        param = (f"recurrent_param {{ num_output: {H} expose_hidden: {_field(expose)} "
                 f"{extra} }}")
    return text + f'layer {{ name: "rec1" type: "{layer_type}" {wiring} {param} }}\n'


def _feeds(T, N, x_dims=(2, 3), states=(), H=5, seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.normal(size=(T, N, *x_dims)).astype(np.float32)}
    feeds.update({f"{s}_0": rng.normal(size=(1, N, H)).astype(np.float32) for s in states})
    return feeds


def _native(invoke, tmp_path, text, feeds_list, op="LSTM", state="zero", flags=(), seed=0):
    """Exports with --lstm-op native and checks it (check_export); returns the op types."""
    net, weights = synthetic_files(tmp_path, text, seed)
    model = check_export(invoke, tmp_path, net, weights, feeds_list, (*NATIVE, *flags), state)
    ops = [node.op_type for node in onnx.load(model).graph.node]
    assert ops.count(op) == 1 and "Scan" not in ops, ops
    return ops


# ---- exact: exported natively -------------------------------------------------------------------


@pytest.mark.parametrize("T,N", [(1, 1), (1, 3), (5, 1), (5, 3)])
def test_lstm_with_a_continuation_indicator(invoke, tmp_path, T, N):
    """cont 0 at t = 0 and 1 after, from a zero state: ONNX's LSTM from zeros."""
    ops = _native(invoke, tmp_path, _net(T, N), [_feeds(T, N, seed=T + N)])
    assert ops[ops.index("LSTM") - 1] == "Reshape"  # x (T, N, 2, 3) -> X (T, N, 6)


@pytest.mark.parametrize("fields", [
    {"peephole": True},
    {"candidate_activation": "RELU", "peephole": True},
    {"candidate_activation": "IDENTITY", "cell_activation": "SIGMOID"},
    {"candidate_activation": "SIGMOID", "cell_activation": "IDENTITY", "peephole": True},
    {"cell_activation": "RELU"},
], ids=lambda fields: "-".join(f"{k}={v}" for k, v in fields.items()))
def test_lstm_variants_onnx_can_express(invoke, tmp_path, fields):
    """Peepholes (P in order i, o, f; the output gate sees the new cell) and the activations
    TANH, SIGMOID, RELU, IDENTITY (LeakyRelu with alpha 1) as ONNX's g and h."""
    T, N = 5, 3
    _native(invoke, tmp_path, _net(T, N, fields=fields, x_dims=(4,)), [_feeds(T, N, (4,))])


@pytest.mark.parametrize("T,N", [(1, 3), (5, 1), (5, 3)])
def test_rnn_is_onnx_rnn_and_caffe_output_layer(invoke, tmp_path, T, N):
    """h_t from ONNX's RNN, o_t = tanh(W_ho·h_t + b_o) after it."""
    ops = _native(invoke, tmp_path, _net(T, N, "RNN"), [_feeds(T, N, seed=T)], op="RNN")
    assert ops[-4:] == ["Transpose", "MatMul", "Add", "Tanh"]


@pytest.mark.parametrize("T,N,flat", [(1, 1, False), (5, 3, False), (5, 3, True)])
def test_fork_lstm_without_clip(invoke, tmp_path, T, N, flat):
    """The fork's implicit clip (0 at t = 0, 1 after) on a zero state; also (T·N, I) rows."""
    text = _net(T, N, "Lstm", cont=None, x_dims=(4,))
    feeds = _feeds(T, N, (4,))
    if flat:
        text = text.replace(f"dim: {T} dim: {N} dim: 4", f"dim: {T * N} dim: 4")
        feeds["x"] = feeds["x"].reshape(T * N, 4)
    _native(invoke, tmp_path, text, [feeds])


def test_fork_lstm_with_a_constant_clip(invoke, tmp_path):
    """A clip bottom from a ContinuationIndicator (0 at t = 0, 1 after) is the same LSTM."""
    T, N = 5, 3
    text = _net(T, N, "Lstm", x_dims=(4,))
    _native(invoke, tmp_path, text, [_feeds(T, N, (4,))])


def test_fork_lstm_with_symbolic_time_and_batch(invoke, tmp_path):
    """One model run at (T, N) = (1, 3) and (9, 1): no zero state is built, X is a Reshape
    that copies T and N."""
    text = _net(5, 2, "Lstm", cont=None)
    _native(invoke, tmp_path, text, [_feeds(1, 3), _feeds(9, 1)],
            flags=("--shape", "x:1x1x2x3:5x2x2x3:9x3x2x3"))


@pytest.mark.parametrize("layer_type", ["LSTM", "RNN"])
def test_state_io_with_a_cont_of_ones(invoke, tmp_path, layer_type):
    """cont all ones (a continued sequence): --state auto gives state io, the given h_0, c_0
    are ONNX's initial states as they are, Y_h and Y_c the final ones."""
    T, N = 5, 3
    states = ("h", "c") if layer_type == "LSTM" else ("h",)
    feeds = {"x": _feeds(T, N)["x"]}
    feeds.update({f"rec1/{s}_0": _feeds(T, N, states=(s,), seed=7)[f"{s}_0"] for s in states})
    ops = _native(invoke, tmp_path, _net(T, N, layer_type, cont=1), [feeds], op=layer_type,
                  state="io")
    assert "Mul" not in ops


@pytest.mark.parametrize("layer_type", ["LSTM", "RNN"])
def test_exposed_state_scaled_by_cont_at_t0(invoke, tmp_path, layer_type):
    """expose_hidden with a constant cont_0 = 0.5 (T = 1): the initial states are cont_0·h_0,
    cont_0·c_0 (one Mul each), as in Caffe."""
    T, N = 1, 3
    states = ("h", "c") if layer_type == "LSTM" else ("h",)
    text = _net(T, N, layer_type, cont=0.5, expose=True)
    ops = _native(invoke, tmp_path, text, [_feeds(T, N, states=states)], op=layer_type)
    assert ops.count("Mul") == len(states)


def test_python_api(tmp_path):
    net, weights = synthetic_files(tmp_path, _net(4, 2))
    exported = caffe_lstm.load(net, weights).export_onnx(None, lstm_op="native", state="zero")
    ops = [node.op_type for node in onnx.load_from_string(exported.model).graph.node]
    assert "LSTM" in ops and "Scan" not in ops
    with pytest.raises(caffe_lstm.CaffeLstmError, match="lstm_op 'cudnn' is not one of"):
        caffe_lstm.load(net, weights).export_onnx(None, lstm_op="cudnn")


def test_scan_stays_the_default(invoke, tmp_path):
    net, weights = synthetic_files(tmp_path, _net(4, 2))
    model = tmp_path / "model.onnx"
    assert invoke("export", net, "-w", weights, "-o", model).exit_code == 0
    ops = [node.op_type for node in onnx.load(model).graph.node]
    assert "Scan" in ops and "LSTM" not in ops


# ---- not exact: refused --------------------------------------------------------------------------

REFUSED = {
    "cont_input": (_net(5, 2, cont="input"), "LSTM",
                   ("its cont 'cont' is a net input, so it may reset a stream in the middle of "
                    "a sequence")),
    "rnn_cont_input": (_net(5, 2, "RNN", cont="input"), "RNN",
                       "its cont 'cont' is a net input"),
    "x_static": (_net(5, 2, static=True), "LSTM", "it has a static input 'x_static'"),
    "clipped_relu": (_net(5, 2, fields={"candidate_activation": "CLIPPED_RELU",
                                        "relu_clip": 0.5}), "LSTM",
                     "its candidate_activation CLIPPED_RELU has no ONNX activation"),
    "cell_clip": (_net(5, 2, fields={"cell_clip": 0.3}), "LSTM",
                  ("it clips the stored cell (cell_clip: 0.3), while ONNX's clip bounds the "
                   "gate pre-activations")),
    "num_proj": (_net(5, 2, fields={"num_proj": 2}), "LSTM",
                 "it has a recurrent projection (num_proj: 2), which ONNX's LSTM has not"),
    "fork_clip_input": (_net(5, 2, "Lstm", cont="input"), "Lstm",
                        "its clip 'cont' is a net input"),
    "mid_sequence_zero": (_net(5, 2, cont=0), "LSTM",
                          ("its constant cont 'cont' is 0 at t = 1 (stream 0), where Caffe "
                           "scales the carried state")),
}


@pytest.mark.parametrize("case", REFUSED)
def test_refused_in_one_line(invoke, tmp_path, case):
    text, layer_type, reason = REFUSED[case]
    net, weights = synthetic_files(tmp_path, text)
    model = tmp_path / "model.onnx"
    result = invoke("export", net, "-w", weights, "-o", model, *NATIVE, "--state", "zero")
    assert_one_error_line(result,
                          "ONNX's own recurrent operator cannot compute exactly layer 'rec1' "
                          f"({layer_type}) at ")
    assert_one_error_line(result, f"net.prototxt:{text.count(chr(10))}: {reason}")  # its line
    assert "export with --lstm-op scan" in result.stderr
    assert not model.exists()
    # the same net exports with the default Scan
    assert invoke("export", net, "-w", weights, "-o", model, "--state", "zero").exit_code == 0


def test_every_refused_layer_in_the_one_line(invoke, tmp_path):
    text = _net(5, 2, cont="input") + (
        'layer { name: "rec2" type: "LSTM" bottom: "y" bottom: "cont" top: "y2" '
        'recurrent_param { num_output: 3 num_proj: 2 } }\n')
    net, weights = synthetic_files(tmp_path, text)
    result = invoke("export", net, "-w", weights, "-o", tmp_path / "m.onnx", *NATIVE)
    assert_one_error_line(result, "layer 'rec1' (LSTM) at ")
    assert ": its cont 'cont' is a net input" in result.stderr
    assert "; layer 'rec2' (LSTM) at " in result.stderr
    assert ": it has a recurrent projection (num_proj: 2)" in result.stderr
    assert not (tmp_path / "m.onnx").exists()


# ---- --lstm-op auto: the operator where exact, a Scan elsewhere, each choice printed ----------


def _two_layers(T, N, H=5) -> str:
    """rec1 with a ContinuationIndicator (exact natively), rec2 with cont a net input (not)."""
    return (input_layer({"x": (T, N, 2, 3), "cont_in": (T, N)})
            + ('layer { name: "indicator" type: "ContinuationIndicator" top: "cont" '
               f'continuation_indicator_param {{ time_step: {T} batch_size: {N} }} }}\n')
            + ('layer { name: "rec1" type: "LSTM" bottom: "x" bottom: "cont" top: "y" '
               f'recurrent_param {{ num_output: {H} }} }}\n')
            + ('layer { name: "rec2" type: "LSTM" bottom: "y" bottom: "cont_in" top: "y2" '
               f'recurrent_param {{ num_output: {H} }} }}\n'))


def test_auto_writes_each_layer_its_fastest_exact_form(invoke, tmp_path):
    T, N = 5, 3
    net, weights = synthetic_files(tmp_path, _two_layers(T, N))
    feeds = _feeds(T, N, seed=4)
    feeds["cont_in"] = np.ones((T, N), np.float32)
    feeds["cont_in"][[0, 3], [0, 2]] = 0  # a reset mid-sequence: only the Scan computes it
    model = check_export(invoke, tmp_path, net, weights, [feeds], ("--lstm-op", "auto"))
    ops = [node.op_type for node in onnx.load(model).graph.node]
    assert ops.count("LSTM") == 1 and ops.count("Scan") == 1, ops
    printed = invoke("export", net, "-w", weights, "-o", tmp_path / "again.onnx",
                     "--lstm-op", "auto", "--state", "zero").stdout.splitlines()
    assert "rec1: ONNX's own operator" in printed
    assert any(line.startswith("rec2: one Scan, since its cont 'cont_in' is a net input")
               for line in printed), printed


def test_run_with_onnxruntime_exports_in_memory_with_auto(invoke, tmp_path, monkeypatch):
    """run --backend onnxruntime (no --onnx) takes ONNX's operator where exact, by default,
    lists the choice with -v, and computes what numpy computes."""
    from caffe_lstm.backends.onnx import runtime

    T, N = 6, 2
    net, weights = synthetic_files(tmp_path, _two_layers(T, N), seed=3)
    np.savez(tmp_path / "in.npz", **{**_feeds(T, N, seed=5), "cont_in": np.ones((T, N))})
    models = []
    real_run_model = runtime.run_model
    monkeypatch.setattr(runtime, "run_model",
                        lambda model, *a, **k: models.append(model) or real_run_model(
                            model, *a, **k))
    outputs = {}
    for backend in ("numpy", "onnxruntime"):
        result = invoke("-v", "run", net, "-w", weights, "--inputs", tmp_path / "in.npz",
                        "--backend", backend, "-o", tmp_path / f"{backend}.npz")
        assert result.exit_code == 0, result.stderr
        outputs[backend] = dict(np.load(tmp_path / f"{backend}.npz"))
    assert "rec1: ONNX's own operator" in result.stdout
    (model,) = models
    assert sorted(n.op_type for n in model.graph.node if n.op_type in ("LSTM", "Scan")) == \
        ["LSTM", "Scan"]
    for name, expected in outputs["numpy"].items():
        np.testing.assert_allclose(outputs["onnxruntime"][name], expected, atol=1e-5)


def test_auto_applies_to_the_onnx_route_of_convert_only(invoke, tmp_path):
    net, weights = synthetic_files(tmp_path, _net(3, 2))
    result = invoke("convert", net, "-w", weights, "-o", tmp_path / "x.engine",
                    "--lstm-op", "auto")
    assert_one_error_line(result, "--lstm-op auto applies to the ONNX route only")
    assert not (tmp_path / "x.engine").exists()
