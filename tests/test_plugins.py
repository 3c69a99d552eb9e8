"""The plugin API end to end: the worked example of docs/plugins.md (SSD's Normalize as the
installable package samples/plugin_example) found through its entry point and through
``--plugin FILE.py|MODULE``; its numerics against torch written from the fork's source; and
the plugin errors: one line naming the plugin, exit 1, no traceback without --debug, nothing
left behind.

The package is "installed" as an importlib.metadata distribution on the path: a
``.dist-info`` whose entry_points.txt is written from the package's own pyproject.toml (what
pip would write), beside the package's source. That is what pip's editable install amounts to
for discovery, in milliseconds instead of a venv.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import caffe_lstm
from caffe_lstm.frontend.caffemodel import read_caffemodel
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.ops import Op, get_op, plugins, register_op
from tests.helpers import (
    SAMPLES, assert_one_error_line, install_example, isolated_plugin_modules, run_cli, torch_lstm,
)

EXAMPLE = SAMPLES / "plugin_example"
NET, WEIGHTS = EXAMPLE / "normalize_lstm.prototxt", EXAMPLE / "normalize_lstm.caffemodel"
PLUGIN_FILE = EXAMPLE / "caffe_lstm_ssd_normalize" / "__init__.py"
MODULE = "caffe_lstm_ssd_normalize"


# ---- helpers ------------------------------------------------------------------------------------


def example_inputs(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    cont = np.ones((6, 2), np.float32)
    cont[0] = 0
    arrays = {"feats": rng.standard_normal((6, 2, 8)).astype(np.float32), "cont": cont,
              "maps": rng.standard_normal((2, 4, 3, 5)).astype(np.float32)}
    np.savez(path, **arrays)
    return arrays


def torch_normalize(x, scale, across_spatial: bool, eps: float):
    """SSD's Forward_cpu (normalize_layer.cpp) in torch, float64: x / sqrt(Σ x² + eps) · s, the
    sum over (C, H, W) per sample (across_spatial) or over C per position."""
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(np.asarray(x, np.float64))
    dims = tuple(range(1, t.dim())) if across_spatial else (1,)
    norm = torch.sqrt((t * t).sum(dim=dims, keepdim=True) + eps)
    s = torch.from_numpy(np.asarray(scale, np.float64)).reshape((1, -1) + (1,) * (t.dim() - 2))
    return (t / norm * s).numpy()


def blobs(name: str) -> list[np.ndarray]:
    layer = next(layer for layer in read_caffemodel(WEIGHTS) if layer.name == name)
    return [blob.data.reshape(blob.shape) for blob in layer.blobs]


def reference(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The example net from the fork's equations (torch) and torch.nn.LSTM."""
    rows = torch_normalize(arrays["feats"].reshape(-1, 8), blobs("rows_norm")[0], False, 1e-10)
    w_xc, b_c, w_hc = blobs("lstm1")
    hidden, _, _ = torch_lstm(rows.reshape(6, 2, 8), w_xc, b_c, w_hc)
    weight, bias = blobs("scores")
    return {"scores": hidden @ weight.T.astype(np.float64) + bias,
            "maps_norm": torch_normalize(arrays["maps"], blobs("maps_norm")[0], True, 1e-6)}


@pytest.fixture(autouse=True)
def isolated_plugins():
    """Each test starts from the built-in registry; modules its plugins imported are
    forgotten afterwards."""
    with isolated_plugin_modules(MODULE):
        yield


# ---- the worked example through the entry point -----------------------------------------------


def test_the_entry_point_example_inspects_runs_and_equals_the_fork(tmp_path):
    site = install_example(tmp_path / "site")
    done = run_cli("inspect", NET, "-w", WEIGHTS, path=(site, EXAMPLE))
    assert done.returncode == 0, done.stderr
    assert "rows_norm (Normalize): rows -> rows_norm  (12, 8)  blobs (8)" in done.stdout
    assert ("plugin 'ssd_normalize' (entry point of caffe-lstm-ssd-normalize): Normalize"
            in done.stdout)
    arrays, out = example_inputs(tmp_path / "in.npz"), tmp_path / "out.npz"
    done = run_cli("run", NET, "-w", WEIGHTS, "--inputs", tmp_path / "in.npz", "-o", out,
                   path=(site, EXAMPLE))
    assert done.returncode == 0, done.stderr
    want = reference(arrays)
    with np.load(out) as got:
        for name in ("scores", "maps_norm"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def test_inspect_json_lists_the_installed_plugin(tmp_path):
    site = install_example(tmp_path / "site")
    done = run_cli("inspect", SAMPLES / "seq_classifier" / "seq_classifier.prototxt", "--json",
                   path=(site, EXAMPLE))
    assert done.returncode == 0, done.stderr
    (listed,) = json.loads(done.stdout)["plugins"]
    assert listed["name"] == "ssd_normalize" and listed["types"] == ["Normalize"]
    assert listed["distribution"] == "caffe-lstm-ssd-normalize" and listed["module"] == MODULE


def test_the_entry_point_example_verifies_converts_and_exports(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    pytest.importorskip("onnxruntime")
    site = install_example(tmp_path / "site")
    example_inputs(tmp_path / "in.npz", seed=1)
    done = run_cli("verify", NET, "-w", WEIGHTS, "--inputs", tmp_path / "in.npz", "--runtime",
                   "tensorrt-rtx", "--onnxruntime", "--atol", "1e-5", "--rtol", "1e-5",
                   path=(site, EXAMPLE))
    assert done.returncode == 0, done.stderr
    assert "TensorRT network" in done.stdout and "ONNX model" in done.stdout
    assert len(re.findall(r"^(scores|maps_norm) .* ok$", done.stdout, re.M)) == 6, done.stdout
    engine, model = tmp_path / "net.engine", tmp_path / "net.onnx"
    done = run_cli("convert", NET, "-w", WEIGHTS, "-o", engine, "--runtime", "tensorrt-rtx",
                   path=(site, EXAMPLE))
    assert done.returncode == 0 and engine.stat().st_size > 0, done.stderr
    done = run_cli("export", NET, "-w", WEIGHTS, "-o", model, path=(site, EXAMPLE))
    assert done.returncode == 0 and model.stat().st_size > 0, done.stderr


def test_without_the_plugin_the_error_names_the_plugin_option_and_the_doc():
    line = assert_one_error_line(run_cli("inspect", NET))
    assert "unsupported layer types: Normalize (rows_norm, maps_norm)" in line
    assert "--plugin FILE.py|MODULE" in line and "docs/plugins.md" in line
    assert "plugins=" not in line


def test_the_api_words_are_the_api_s():
    with pytest.raises(caffe_lstm.UnsupportedLayerError) as caught:
        caffe_lstm.load(NET)
    assert "plugins=[...]" in caught.value.line() and "--plugin" not in caught.value.line()


# ---- the same plugin given explicitly -------------------------------------------------------


def test_plugin_file_and_module_give_the_entry_point_s_outputs(tmp_path):
    example_inputs(tmp_path / "in.npz", seed=2)
    outs = []
    for how, extra in (("file", ("--plugin", PLUGIN_FILE)), ("module", ("--plugin", MODULE))):
        out = tmp_path / f"{how}.npz"
        done = run_cli("run", NET, "-w", WEIGHTS, "--inputs", tmp_path / "in.npz", "-o", out,
                       *extra, path=(EXAMPLE,))
        assert done.returncode == 0, done.stderr
        outs.append(np.load(out))
    want = reference(dict(np.load(tmp_path / "in.npz")))
    for got in outs:
        np.testing.assert_allclose(got["maps_norm"], want["maps_norm"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-5, atol=1e-5)


def test_the_api_takes_a_file(monkeypatch):
    net = caffe_lstm.load(NET, WEIGHTS, plugins=[PLUGIN_FILE])
    attrs = net.graph.node("rows_norm").attrs
    assert attrs == {"across_spatial": False, "channel_shared": False,
                     "eps": pytest.approx(1e-10)}  # a float field: Caffe's float32
    assert net.graph.node("maps_norm").attrs["eps"] == pytest.approx(1e-6)
    listed = plugins.loaded_plugins()
    assert [p.types for p in listed] == [["Normalize"]] and listed[0].how == "file"
    again = caffe_lstm.load(NET, WEIGHTS, plugins=[PLUGIN_FILE])  # loading twice: a no-op
    assert len(plugins.loaded_plugins()) == 1 and again.outputs == net.outputs
    with pytest.raises(plugins.PluginError, match="which the plugin .* already defines"):
        monkeypatch.syspath_prepend(str(EXAMPLE))  # the same code again, as another plugin
        caffe_lstm.load(NET, WEIGHTS, plugins=[MODULE])


def test_the_api_takes_a_module(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    net = caffe_lstm.load(NET, WEIGHTS, plugins=[MODULE])
    assert net.graph.node("rows_norm").op == "Normalize"
    assert [(p.name, p.how) for p in plugins.loaded_plugins()] == \
        [(MODULE, "module")]


def test_the_api_takes_an_op_class(tmp_path):
    class Frobnicate(Op):
        """y = 3·x"""
        type = "Frobnicate"
        param = "frob_param"
        param_fields = {"gain": plugins.ParamField(float, 1.0)}

        @staticmethod
        def infer(ctx, node, x):
            return (x,)

        @staticmethod
        def numpy(ctx, node, x):
            return (3 * x,)

    net, weights, _ = frob(tmp_path, param="gain: 3")
    loaded = caffe_lstm.load(net, weights, plugins=[Frobnicate])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(loaded.run({"x": x})["y"], 3 * x)
    (plugin,) = plugins.loaded_plugins()
    assert plugin.how == "class" and plugin.types == ["Frobnicate"]
    assert Frobnicate.tensorrt_missing_reason == \
        f"the plugin '{plugin.name}' (class) defines no tensorrt facet"


@pytest.mark.parametrize("which", ["numpy", "torch"])
@pytest.mark.parametrize("across_spatial, channel_shared, shape", [
    (True, True, (2, 3, 4, 5)), (False, False, (2, 3, 4, 5)), (False, True, (5, 7)),
    (True, False, (3, 2, 6))])
def test_normalize_equals_the_fork_s_forward(which, across_spatial, channel_shared, shape):
    """The plugin's numpy facet against SSD's Forward_cpu in torch, random cases; a hand-worked
    one: (3, 4) / 5 · 2 = (1.2, 1.6)."""
    plugins.load_plugins([PLUGIN_FILE])
    op = get_op("Normalize")
    from caffe_lstm.ir.graph import Node

    node = Node("n", "Normalize", [], [])
    node.attrs = {"across_spatial": across_spatial, "channel_shared": channel_shared,
                  "eps": 1e-10}
    if which == "numpy":
        (y,) = op.numpy(None, node, np.array([[3.0, 4.0]], np.float32), np.float32(2.0))
        np.testing.assert_allclose(y, [[1.2, 1.6]], rtol=1e-6)
        return
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    scale = rng.uniform(1, 3, () if channel_shared else (shape[1],)).astype(np.float32)
    (y,) = op.numpy(None, node, x, scale)
    np.testing.assert_allclose(y, torch_normalize(x, scale, across_spatial, 1e-10), rtol=1e-5,
                               atol=1e-6)


# ---- errors ---------------------------------------------------------------------------------


def write_plugin(tmp_path: Path, body: str, name: str = "fork_layers.py") -> Path:
    path = tmp_path / name
    path.write_text("import numpy as np\nfrom caffe_lstm.ops import Op, ParamField, register_op"
                    "\n\n" + body)
    return path


RELU = '''
@register_op{override}
class MyReLU(Op):
    """y = max(x, 0)"""
    type = "ReLU"
    tensorrt_missing_reason = onnx_missing_reason = "numpy only"

    @staticmethod
    def infer(ctx, node, x):
        return (x,)

    @staticmethod
    def numpy(ctx, node, x):
        return (np.maximum(x, 0) * 0,)
'''

SEQ = SAMPLES / "seq_classifier" / "seq_classifier.prototxt"


def test_overriding_a_built_in_needs_override_true(tmp_path):
    plugin = write_plugin(tmp_path, RELU.format(override=""))
    line = assert_one_error_line(run_cli("inspect", SEQ, "--plugin", plugin))
    assert f"plugin '{plugin}' (file) defines layer type 'ReLU', which caffe-lstm already" in line
    assert "override=True" in line
    plugin = write_plugin(tmp_path, RELU.format(override="(override=True)"), "override.py")
    done = run_cli("inspect", SEQ, "--plugin", plugin)
    assert done.returncode == 0, done.stderr
    assert "ReLU (replacing the built-in ReLU)" in done.stdout
    assert get_op("ReLU").__module__ == "caffe_lstm.ops.activation"  # this process: untouched


FROB = '''
@register_op
class Frobnicate(Op):
    """y = x / (x - x): a plugin with a bug in numpy and without a tensorrt facet."""
    type = "Frobnicate"
    param = "frob_param"
    param_fields = {{"gain": ParamField(float, 1.0), "mode": ParamField(choices=("A", "B"))}}
    onnx_missing_reason = "no ONNX form"

    @staticmethod
    def parse(ctx, p):
        return {{"gain": p.gain, "mode": p.mode, "gain_set": p.has("gain")}}

    @staticmethod
    def infer(ctx, node, x):
        return (x,)

    @staticmethod
    def numpy(ctx, node, x):
        {numpy}
'''

FROB_NET = '''
layer {{ name: "in" type: "Input" top: "x" input_param {{ shape {{ dim: 2 dim: 3 }} }} }}
layer {{ name: "frob" type: "Frobnicate" bottom: "x" top: "y"
        frob_param {{ {param} }} }}
'''


def frob(tmp_path: Path, numpy: str = "return (x * 2,)", param: str = "gain: 2 mode: B"):
    net = tmp_path / "frob.prototxt"
    net.write_text(FROB_NET.format(param=param))
    weights = tmp_path / "frob.caffemodel"
    write_caffemodel(weights, [])  # no layer has blobs
    return net, weights, write_plugin(tmp_path, FROB.format(numpy=numpy))


@pytest.mark.parametrize("param, attrs", [
    ("gain: 2 mode: B", {"gain": 2.0, "mode": "B", "gain_set": True}),
    ("", {"gain": 1.0, "mode": "A", "gain_set": False}),
    ("gain: 0.5f, mode: A", {"gain": 0.5, "mode": "A", "gain_set": True}),
])
def test_a_plugin_s_param_message_is_read_from_the_text(tmp_path, param, attrs):
    """Values, proto2 defaults and presence, as protobuf's text parser reads them."""
    net, _, plugin = frob(tmp_path, param=param)
    loaded = caffe_lstm.load(net, plugins=[plugin])
    assert loaded.graph.node("frob").attrs == attrs
    assert loaded.unknown_fields == []  # read, not skipped


def test_a_plugin_that_raises_is_its_error_with_its_line(tmp_path):
    net, weights, plugin = frob(tmp_path, numpy="return (x / {}['missing'],)")
    line = assert_one_error_line(run_cli("run", net, "-w", weights, "--plugin", plugin))
    assert f"the plugin '{plugin}' (file) failed in the numpy facet of 'Frobnicate'" in line
    assert "KeyError: 'missing'" in line and f"{plugin}:" in line
    assert "in numpy, module caffe_lstm_plugin_" in line  # the plugin's own frame
    assert "layer 'frob' (Frobnicate)" in line and "--debug shows its traceback" in line
    done = run_cli("--debug", "run", net, "-w", weights, "--plugin", plugin)
    assert done.returncode == 1 and "Traceback" in done.stderr and "KeyError" in done.stderr


def test_a_plugin_without_a_facet_fails_only_the_commands_needing_it(tmp_path):
    net, weights, plugin = frob(tmp_path)
    done = run_cli("run", net, "-w", weights, "--plugin", plugin)
    assert done.returncode == 0, done.stderr
    engine = tmp_path / "frob.engine"
    line = assert_one_error_line(run_cli("convert", net, "-w", weights, "--plugin", plugin, "-o",
                                         engine))
    assert f"Frobnicate (frob): the plugin '{plugin}' (file) defines no tensorrt facet" in line
    assert not engine.exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "fork_layers.py", "frob.caffemodel", "frob.prototxt"]


def test_a_facet_set_to_none_is_a_missing_form_not_a_plugin_failure(tmp_path):
    """``onnx = None`` says the op has no ONNX form (as for the built-ins): export names the
    missing facet instead of calling None."""
    net, weights, plugin = frob(tmp_path)
    plugin.write_text(plugin.read_text().replace('onnx_missing_reason = "no ONNX form"',
                                                 "onnx = None"))
    model = tmp_path / "frob.onnx"
    line = assert_one_error_line(run_cli("export", net, "-w", weights, "--plugin", plugin,
                                         "-o", model))
    assert f"Frobnicate (frob): the plugin '{plugin}' (file) defines no onnx facet" in line
    assert not model.exists()


def test_rewrite_refuses_a_layer_whose_param_message_caffe_lacks(tmp_path):
    """caffe.proto has no frob_param, so the layer cannot be written back: one line, nothing
    written (the other commands take the plugin)."""
    net, weights, plugin = frob(tmp_path)
    out = tmp_path / "out"
    line = assert_one_error_line(run_cli("rewrite", net, "-w", weights, "--plugin", plugin,
                                         "-o", out))
    assert "the plugin's param message 'frob_param' is not in Caffe's schema" in line
    assert "layer 'frob' (Frobnicate)" in line and not out.exists()


SQUARE = '''
@register_op
class Square(Op):
    """y = x·x; its TensorRT form an einsum with the subscripts {subscripts}."""
    type = "Square"
    onnx_missing_reason = "no ONNX form"

    @staticmethod
    def infer(ctx, node, x):
        return (x,)

    @staticmethod
    def numpy(ctx, node, x):
        return (x * x,)

    @staticmethod
    def tensorrt(ctx, node, x):
        equation = "{subscripts},{subscripts}->{subscripts}"
        return (ctx.out(ctx.network.add_einsum([x, x], equation)),)
'''

SQUARE_NET = """
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "sq" type: "Square" bottom: "x" top: "y" }
"""


def square(tmp_path: Path, subscripts: str) -> tuple[Path, Path, Path]:
    net, weights = tmp_path / "square.prototxt", tmp_path / "square.caffemodel"
    net.write_text(SQUARE_NET)
    write_caffemodel(weights, [])
    return net, weights, write_plugin(tmp_path, SQUARE.format(subscripts=subscripts))


def test_a_tensorrt_layer_the_cpu_walk_lacks_leaves_that_column_unchecked(tmp_path):
    """TensorRT has layers the numpy walk of verify does not model (Einsum here): verify
    says so and compares the rest; convert builds the engine."""
    net, weights, plugin = square(tmp_path, "ab")
    done = run_cli("verify", net, "-w", weights, "--plugin", plugin)
    assert done.returncode == 0, done.stderr
    assert ("TensorRT network, fp32 (CPU walk) is not checked: the CPU walk of the TensorRT "
            "network does not model the layer type of 'sq' (EINSUM)") in done.stdout
    assert "vs TensorRT network" not in done.stdout and "ok" in done.stdout
    engine = tmp_path / "square.engine"
    done = run_cli("convert", net, "-w", weights, "--plugin", plugin, "-o", engine)
    assert done.returncode == 0, done.stderr
    assert engine.read_bytes()[:4] == b"vtrt"


@pytest.mark.parametrize("command", ["convert", "verify"])
def test_a_layer_tensorrt_refuses_is_the_plugins_error_with_tensorrts_reason(tmp_path,
                                                                             command):
    """TensorRT returns a layer for operands it refuses and only logs why: the error names
    the plugin and gives that reason, instead of failing at the next layer."""
    net, weights, plugin = square(tmp_path, "abc")  # three subscripts for a 2-D x
    engine = tmp_path / "square.engine"
    output = ("-o", engine) if command == "convert" else ()
    line = assert_one_error_line(run_cli(command, net, "-w", weights, "--plugin", plugin,
                                         *output))
    assert (f"the plugin '{plugin}' (file) built a layer TensorRT refuses (output 'y') in the "
            "tensorrt facet of 'Square': ") in line
    assert "IEinsumLayer" in line and "layer 'sq' (Square)" in line
    assert not engine.exists()


@pytest.mark.parametrize("param, found", [
    ("gain: abc", "Couldn't parse float: abc"),
    ("mode: C", 'Enum type "frob_param" has no value named C'),
    ("gain: 1 gain: 2", 'Message type "frob_param" should not have multiple "gain" fields'),
    ("speed: 3", 'Message type "frob_param" has no field named "speed"'),
])
def test_bad_plugin_params_are_one_line_at_their_place(tmp_path, param, found):
    net, weights, plugin = frob(tmp_path, param=param)
    model = tmp_path / "frob.onnx"
    line = assert_one_error_line(run_cli("export", net, "-w", weights, "--plugin", plugin, "-o",
                                         model))
    assert f"invalid frob_param: {found}" in line and f"{net}:4:" in line, line
    assert "gain: float, mode: one of A/B" in line
    assert not model.exists()


@pytest.mark.parametrize("body, expected", [
    ("raise RuntimeError('no GPU found')", "failed to load: RuntimeError: no GPU found"),
    ("import not_a_module_anywhere", "ModuleNotFoundError"),
    ("x = 1", "registers no layer type"),
    ("def broken(:\n    pass", "SyntaxError"),
])
def test_a_plugin_that_cannot_load_is_one_line(tmp_path, body, expected):
    plugin = write_plugin(tmp_path, body)
    line = assert_one_error_line(run_cli("inspect", SEQ, "--plugin", plugin))
    assert expected in line and str(plugin) in line, line


def test_missing_plugin_file_and_module(tmp_path):
    line = assert_one_error_line(run_cli("inspect", SEQ, "--plugin", tmp_path / "absent.py"))
    assert "absent.py does not exist" in line
    line = assert_one_error_line(run_cli("inspect", SEQ, "--plugin", "no_such_plugin_module"))
    assert "no module named 'no_such_plugin_module'" in line


def test_installed_plugins_load_only_for_unknown_types(tmp_path):
    """A broken installed plugin does not touch nets of built-in types; a net with a type no
    built-in knows loads it, and its failure is one line naming it."""
    site = tmp_path / "site"
    info = site / "broken_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[caffe_lstm.ops]\nbroken = broken_plugin\n")
    (site / "broken_plugin.py").write_text("raise ImportError('needs libfoo')\n")
    done = run_cli("run", SEQ, "-w", SEQ.with_suffix(".caffemodel"), path=(site,))
    assert done.returncode == 0, done.stderr
    line = assert_one_error_line(run_cli("inspect", NET, path=(site,)))
    assert "plugin 'broken' (entry point of broken-plugin) failed to load" in line
    assert "needs libfoo" in line


def test_register_op_outside_a_plugin_load_keeps_the_strict_checks():
    class Half(Op):
        """y = x"""
        type = "HalfDone"

    with pytest.raises(TypeError, match="does not define"):
        register_op(Half)


def test_inspect_lists_an_installed_plugin_that_fails_with_its_error(tmp_path):
    site = install_example(tmp_path / "site")
    info = site / "broken_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[caffe_lstm.ops]\nbroken = broken_plugin\n")
    (site / "broken_plugin.py").write_text("raise ImportError('needs libfoo')\n")
    done = run_cli("inspect", SEQ, path=(site, EXAMPLE))
    assert done.returncode == 0, done.stderr
    assert "plugin 'ssd_normalize' (entry point of caffe-lstm-ssd-normalize): Normalize" \
        in done.stdout
    assert "plugin 'broken' (entry point of broken-plugin): not loaded: the plugin" in done.stdout
    assert "needs libfoo" in done.stdout


def test_a_plugin_failing_while_written_leaves_nothing(tmp_path):
    """rewrite: the plugin's caffe facet raises after the writer started; no folder, no file."""
    net, weights, plugin = frob(tmp_path)
    plugin.write_text(plugin.read_text() + '''

    @staticmethod
    def caffe(ctx, node):
        return {"gain": node.attrs["no_such_attr"]}
''')
    out = tmp_path / "out" / "rewritten"
    line = assert_one_error_line(run_cli("rewrite", net, "-w", weights, "--plugin", plugin, "-o",
                                         out))
    assert "failed in the caffe facet of 'Frobnicate': KeyError: 'no_such_attr'" in line
    assert not (tmp_path / "out").exists()
