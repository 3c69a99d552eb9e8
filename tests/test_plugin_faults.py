"""A plugin's faults are the plugin's, in one line (issue 21, acceptance 5): a facet returning
what its walker cannot take (a bare value, a wrong count, a wrong kind), a numpy output that
contradicts the op's own ``infer``, an ONNX tensor name nothing makes, a syntax error, a
recurrent type asked for states it cannot expose, attrs only a built-in facet
reads missing from a layer its expansion built. Each through the CLI on a small plugin file
written here: one ``error:`` line naming the plugin's file:line, the facet and the layer, exit 1,
no traceback without --debug, nothing written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from caffe_lstm.frontend.caffe_writer import write_caffemodel
from tests.helpers import SAMPLES, assert_one_error_line, run_cli

NET = """
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "frob" type: "Frobnicate" bottom: "x" top: "y" }
"""

#: y = 2·x in every facet; {infer}, {numpy}, {tensorrt}, {onnx}: each facet's return line.
PLUGIN = '''import numpy as np
from caffe_lstm.ops import Op, register_op


@register_op
class Frobnicate(Op):
    """y = 2·x"""
    type = "Frobnicate"

    @staticmethod
    def infer(ctx, node, x):
        return {infer}

    @staticmethod
    def numpy(ctx, node, x):
        return {numpy}

    @staticmethod
    def tensorrt(ctx, node, x):
        two = ctx.constant(np.full((1, 1), 2, np.float32))
        return {tensorrt}

    @staticmethod
    def onnx(ctx, node, x):
        two = ctx.constant(np.full((1, 1), 2, np.float32))
        return {onnx}
'''
RIGHT = {"infer": "(x,)", "numpy": "(x * 2,)",
         "tensorrt": "(ctx.out(ctx.network.add_elementwise(x, two, "
                     "ctx.trt.ElementWiseOperation.PROD)),)",
         "onnx": '(ctx.add("Mul", [x, two])[0],)'}
#: The line of each facet's ``def`` in PLUGIN (what the error points at).
DEF_LINE = {"infer": 11, "numpy": 15, "tensorrt": 19, "onnx": 24}
#: The command that calls each facet, and what it would write.
COMMAND = {"infer": ("inspect",), "numpy": ("run", "-o", "out.npz"),
           "tensorrt": ("convert", "-o", "net.engine"), "onnx": ("export", "-o", "net.onnx")}


def write_files(tmp_path: Path, **facets: str) -> tuple[Path, Path, Path]:
    net, weights, plugin = (tmp_path / "net.prototxt", tmp_path / "net.caffemodel",
                            tmp_path / "frob.py")
    net.write_text(NET)
    write_caffemodel(weights, [])
    plugin.write_text(PLUGIN.format(**{**RIGHT, **facets}))
    return net, weights, plugin


def fails_in(tmp_path: Path, facet: str, returned: str, *extra: str) -> str:
    """The one error line of the command calling ``facet`` when it returns ``returned``;
    checks the plugin, its file:line, the facet and the layer are named, nothing written."""
    net, weights, plugin = write_files(tmp_path, **{facet: returned})
    command, *output = COMMAND[facet]
    before = sorted(p.name for p in tmp_path.iterdir())
    args = [command, net, "-w", weights, "--plugin", plugin, *extra,
            *[tmp_path / o if o != "-o" else o for o in output]]
    line = assert_one_error_line(run_cli(*args))
    assert (f"the {facet} facet of 'Frobnicate' ({plugin}:{DEF_LINE[facet]}) of the plugin "
            f"'{plugin}' (file) returned") in line, line
    assert "layer 'frob' (Frobnicate)" in line and "a bug of the plugin" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    return line


def test_the_right_plugin_runs(tmp_path):
    """The plugin the faults below break: every command takes it as written."""
    net, weights, plugin = write_files(tmp_path)
    for command, *output in COMMAND.values():
        done = run_cli(command, net, "-w", weights, "--plugin", plugin,
                       *[tmp_path / o if o != "-o" else o for o in output])
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("facet, returned, found", [
    ("infer", "x", "returned a bare tuple (2, 3) instead of a tuple of one shape"),
    ("numpy", "x * 2", ("returned a bare ndarray of shape (2, 3) instead of a tuple of one array "
                       "per top")),
    ("tensorrt", ("ctx.out(ctx.network.add_elementwise(x, two, "
                 "ctx.trt.ElementWiseOperation.PROD))"),
     "returned a bare ITensor"),
    ("onnx", 'ctx.add("Mul", [x, two])[0]', "returned a bare str 'frob"),
])
def test_a_bare_value_instead_of_a_tuple(tmp_path, facet, returned, found):
    assert found in fails_in(tmp_path, facet, returned)


@pytest.mark.parametrize("facet, returned, found", [
    ("numpy", "(x, x)", "returned 2 array(s) for 1 top(s)"),
    ("tensorrt", "(x, x)", "returned 2 ITensor(s) for 1 top(s)"),
    ("onnx", "()", "returned 0 tensor name(s) for 1 top(s)"),
])
def test_a_wrong_count(tmp_path, facet, returned, found):
    assert found in fails_in(tmp_path, facet, returned)


@pytest.mark.parametrize("facet, returned, found", [
    ("infer", "((2.5, 3),)", "returned a tuple (2.5, 3) where a shape (a tuple of ints) belongs"),
    ("numpy", "([1, 2],)", "returned a list [1, 2] where an array belongs"),
    ("tensorrt", "(3,)", "returned an int 3 where an ITensor belongs"),
    ("onnx", "(x.encode(),)", "returned a bytes b'x' where a tensor name belongs"),
])
def test_a_wrong_kind_of_result(tmp_path, facet, returned, found):
    assert found in fails_in(tmp_path, facet, returned)


def test_an_onnx_name_nothing_makes(tmp_path):
    line = fails_in(tmp_path, "onnx", '("no_such_tensor",)')
    assert "returned the tensor name 'no_such_tensor', which no node, initializer or bottom" \
        in line and "KeyError" not in line


def test_a_numpy_output_contradicting_the_op_s_infer(tmp_path):
    line = fails_in(tmp_path, "numpy", "(x[:1] * 2,)")
    assert "returned top 'y' of shape (1, 3) where its infer facet says (2, 3)" in line


def test_debug_shows_where_it_was_checked(tmp_path):
    net, weights, plugin = write_files(tmp_path, numpy="x * 2")
    done = run_cli("--debug", "run", net, "-w", weights, "--plugin", plugin)
    assert done.returncode == 1 and "Traceback" in done.stderr and "PluginError" in done.stderr


def test_a_syntax_error_is_at_the_plugin_s_line(tmp_path):
    net, weights, plugin = write_files(tmp_path)
    plugin.write_text(plugin.read_text().replace("def numpy(ctx, node, x):",
                                                 "def numpy(ctx, node, x:"))
    line = assert_one_error_line(run_cli("inspect", net, "--plugin", plugin))
    assert f"failed to load: SyntaxError: '(' was never closed ({plugin}:15:" in line, line
    assert "frozen" not in line and "importlib" not in line


HIDDEN = '''from caffe_lstm.ops import Op, RecurrentSpec, get_op, register_op


@register_op
class HiddenLSTM(Op):
    """Caffe's LSTM, declared unable to expose its states."""
    type = "HiddenLSTM"
    param = "recurrent_param"
    n_bottoms = (2, 2)
    recurrent = RecurrentSpec(states=("h", "c"), static_bottom=None, exposable=False)
    tensorrt_missing_reason = onnx_missing_reason = "expanded into an LSTM"
    parse = staticmethod(lambda ctx, p: get_op("LSTM").parse(ctx, p))
    infer = staticmethod(lambda ctx, node, *shapes: get_op("LSTM").infer(ctx, node, *shapes))
    blobs = staticmethod(lambda ctx, node, *shapes: get_op("LSTM").blobs(ctx, node, *shapes))
    numpy = staticmethod(lambda ctx, node, *arrays: get_op("LSTM").numpy(ctx, node, *arrays))

    @staticmethod
    def expand(b, node):
        b.add("LSTM", "lstm", node.inputs, node.attrs, node.weights, outputs=node.outputs)
'''

HIDDEN_NET = """
layer { name: "in" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 4 dim: 2 dim: 3 } shape { dim: 4 dim: 2 } } }
layer { name: "hidden" type: "HiddenLSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param { num_output: 5 weight_filler { type: "uniform" min: -0.5 max: 0.5 } } }
"""


@pytest.fixture(scope="module")
def hidden_net(tmp_path_factory) -> tuple[Path, Path]:
    """HIDDEN_NET and its weights (``weights init`` with the HIDDEN plugin: the blobs of
    Caffe's LSTM, which every variant of the plugin below reads)."""
    folder = tmp_path_factory.mktemp("hidden")
    plugin, net, weights = folder / "hidden.py", folder / "net.prototxt", \
        folder / "net.caffemodel"
    plugin.write_text(HIDDEN)
    net.write_text(HIDDEN_NET)
    done = run_cli("weights", "init", net, "-o", weights, "--plugin", plugin)
    assert done.returncode == 0, done.stderr
    return net, weights


@pytest.mark.parametrize("command", ["run", "convert", "bench"])
def test_state_io_on_a_type_that_cannot_expose_names_the_layer(tmp_path, hidden_net, command):
    net, weights = hidden_net
    plugin = tmp_path / "hidden.py"
    plugin.write_text(HIDDEN)
    out = tmp_path / "out"
    output = () if command == "bench" else ("-o", out)
    line = assert_one_error_line(run_cli(command, net, "-w", weights, "--plugin", plugin,
                                         "--state", "io", *output))
    assert ("--state io makes every recurrent layer's states inputs and outputs, but this "
            "layer keeps them inside") in line
    assert (f"the plugin '{plugin}' (file) declares RecurrentSpec(exposable=False) for "
            f"'HiddenLSTM' at {plugin}:5") in line
    assert "layer 'hidden' (HiddenLSTM)" in line and "--state zero" in line
    assert not out.exists()
    if command == "run":  # without --state io: zero states, as declared
        done = run_cli(command, net, "-w", weights, "--plugin", plugin, "-o", out)
        assert done.returncode == 0, done.stderr


def test_inspect_shows_each_plugin_type_s_origin_and_limits(tmp_path):
    net, _, plugin = write_files(tmp_path)
    plugin.write_text(plugin.read_text().replace(
        '    type = "Frobnicate"\n',
        '    type = "Frobnicate"\n    origin = "a fork, someone/caffe@abc1234"\n'
        '    limits = "2-D bottoms only"\n'))
    done = run_cli("inspect", net, "--plugin", plugin)
    assert done.returncode == 0, done.stderr
    assert "    Frobnicate: origin a fork, someone/caffe@abc1234; limits: 2-D bottoms only" \
        in done.stdout.splitlines()
    done = run_cli("inspect", net, "--plugin", plugin, "--json")
    assert '"origin": "a fork, someone/caffe@abc1234"' in done.stdout


@pytest.mark.parametrize("facet", ["infer", "tensorrt", "onnx"])  # numpy: test_plugins.py
def test_a_facet_that_raises_is_the_plugin_s_error_at_its_line(tmp_path, facet):
    net, weights, plugin = write_files(tmp_path, **{facet: "{}['missing']"})
    command, *output = COMMAND[facet]
    line = assert_one_error_line(run_cli(
        command, net, "-w", weights, "--plugin", plugin,
        *[tmp_path / o if o != "-o" else o for o in output]))
    raised = DEF_LINE[facet] + (2 if facet in ("tensorrt", "onnx") else 1)
    assert (f"the plugin '{plugin}' (file) failed in the {facet} facet of 'Frobnicate': "
            f"KeyError: 'missing' ({plugin}:{raised}, in {facet}") in line, line
    assert "layer 'frob' (Frobnicate)" in line
    assert not (tmp_path / "out.npz").exists() and not (tmp_path / "net.engine").exists() \
        and not (tmp_path / "net.onnx").exists()


#: A recurrent type expanding into Caffe's LSTM: {expand} is the body of its expand facet.
EXPANDING = HIDDEN.replace(
    '''        b.add("LSTM", "lstm", node.inputs, node.attrs, node.weights, outputs=node.outputs)
''', "{expand}\n")


@pytest.mark.parametrize("expand, found", [
    ('        {}["boom"]',
     "failed in the expand facet of 'HiddenLSTM': KeyError: 'boom' ({plugin}:19, in expand"),
    (('        b.add("LSTM", "lstm", node.inputs, {"num_outputs": 5}, node.weights,\n'
     '              outputs=node.outputs)'),
     ("the expand facet of 'HiddenLSTM' of the plugin '{plugin}' (file) built layer "
     "'__hidden/lstm' (LSTM) that its type refuses: KeyError: 'num_output' ({plugin}:19, "
     "in expand)")),
    ('        b.add("LSTM", "lstm", node.inputs, node.attrs, outputs=node.outputs)',
     ("built layer '__hidden/lstm' (LSTM) without the weights its type needs (W_xc, b_c, W_hc) "
     "({plugin}:19, in expand)")),
    (('        b.add("LSTM", "lstm", node.inputs, dict(node.attrs, num_output=6), node.weights,\n'
     '              outputs=node.outputs)'),
     "built layer '__hidden/lstm' (LSTM) that its type refuses: blob"),
    (('        b.add("LSTM", "lstm", node.inputs[:1], node.attrs, node.weights,\n'
     '              outputs=node.outputs)'),
     ("failed in the expand facet of 'HiddenLSTM': TypeError: add('LSTM', 'lstm'): 1 bottoms, "
     "a LSTM layer takes 2 to ")),
    (('        b.add("Lstm2", "lstm", node.inputs, node.attrs, node.weights, '
     'outputs=node.outputs)'),
     "TypeError: add('Lstm2', 'lstm'): no layer type 'Lstm2' is registered ({plugin}:19"),
    (('        b.add("LSTM", "lstm", node.inputs, [("num_output", 5)], node.weights,\n'
     '              outputs=node.outputs)'),
     "TypeError: add('LSTM', 'lstm'): attrs must be a dict of attribute names"),
    (('        (h,) = b.add("LSTM", "lstm", node.inputs, node.attrs, node.weights)\n'
      '        b.add("Flatten", "flat", [h], {"axis": 1, "end_axis": -1}, outputs=node.outputs)'),
     ("the expand facet of 'HiddenLSTM' of the plugin '{plugin}' (file) computes top 'h' of "
      "shape (4, 10) where the op's infer facet says (4, 2, 5)")),
])
def test_an_expansion_s_faults_are_the_plugin_s_at_its_b_add_line(tmp_path, hidden_net,
                                                                 expand, found):
    """An exception in expand, and layers built with attrs, weights, bottoms or a type that
    caffe-lstm cannot take: the plugin's error at the line of its b.add call, not a failure
    of a later pass blamed on the prototxt."""
    net, weights = hidden_net
    plugin = tmp_path / "expanding.py"
    plugin.write_text(EXPANDING.format(expand=expand))
    out = tmp_path / "out.npz"
    line = assert_one_error_line(run_cli("run", net, "-w", weights, "--plugin", plugin,
                                         "-o", out))
    assert found.format(plugin=plugin) in line, line
    assert "layer 'hidden' (HiddenLSTM)" in line and not out.exists()


CONV_GRU = SAMPLES / "conv_gru_plugin"


def conv_gru_changed(tmp_path: Path, right: str, wrong: str, at: str = "") -> tuple[Path, int]:
    """samples/conv_gru_plugin's plugin with ``right`` (which it holds) replaced by ``wrong``,
    written in ``tmp_path``; and the number of its first line holding ``at`` (or ``wrong``)."""
    source = (CONV_GRU / "caffe_lstm_conv_gru" / "__init__.py").read_text()
    assert right in source
    plugin = tmp_path / "conv_gru.py"
    plugin.write_text(source.replace(right, wrong))
    line_no = next(k for k, text in enumerate(plugin.read_text().splitlines(), 1)
                   if (at or wrong) in text)
    return plugin, line_no


def conv_gru_fails(command: str, plugin: Path, *extra: object) -> str:
    """The one error line of ``command`` on the ConvGRU sample net with ``plugin``."""
    return assert_one_error_line(run_cli(
        command, CONV_GRU / "conv_gru.prototxt", "-w", CONV_GRU / "conv_gru.caffemodel",
        "--plugin", plugin, *extra))


def test_a_step_body_layer_its_type_refuses_is_named_at_its_add(tmp_path):
    """A layer of a recurrent plugin's time step (samples/conv_gru_plugin, one line changed)
    that its type refuses: the error names that layer and the plugin's line adding it, not the
    Loop around it."""
    wrong = '        s.output(s.add("Scale", "bad", [h_t], {"axes": 1})[0])'
    plugin, line_no = conv_gru_changed(tmp_path, "        s.output(h_t)", wrong)
    line = conv_gru_fails("run", plugin, "-o", tmp_path / "out.npz")
    assert ("built layer '__gru1/bad' (Scale) that its type refuses: KeyError: 'axis' "
            f"({plugin}:{line_no}, in expand)") in line, line
    assert not (tmp_path / "out.npz").exists()


def test_a_builder_refusing_the_plugin_s_call_is_the_plugin_s_error(tmp_path):
    """b.loop given two sequences for a step with one output: the builder's refusal is the
    plugin's bug, at the line of its call (not a bare error about the layer)."""
    sample = SAMPLES / "conv_gru_plugin"
    source = (sample / "caffe_lstm_conv_gru" / "__init__.py").read_text()
    right = "        b.loop(s, [node.outputs[0]], node.outputs[1:] or None)"
    wrong = "        b.loop(s, [node.outputs[0], node.outputs[0]], node.outputs[1:] or None)"
    assert right in source.splitlines()
    plugin = tmp_path / "conv_gru.py"
    plugin.write_text(source.replace(right, wrong))
    line_no = plugin.read_text().splitlines().index(wrong) + 1
    line = assert_one_error_line(run_cli(
        "run", sample / "conv_gru.prototxt", "-w", sample / "conv_gru.caffemodel",
        "--plugin", plugin))
    assert (f"the plugin '{plugin}' (file) failed in the expand facet of 'ConvGRU': GraphError: "
            "the step has 1 outputs, the loop was given 2 sequences") in line
    assert f"({plugin}:{line_no}, in expand" in line and "layer 'gru1' (ConvGRU)" in line


#: Frobnicate written as one Power layer, given only the attr its infer never reads: the
#: numpy, tensorrt and onnx facets of Power read power and shift too.
AS_POWER = '''from caffe_lstm.ops import Op, register_op


@register_op
class Frobnicate(Op):
    """y = 2·x, as Caffe's Power layer."""
    type = "Frobnicate"
    infer = staticmethod(lambda ctx, node, x: (x,))
    numpy = staticmethod(lambda ctx, node, x: (x * 2,))

    @staticmethod
    def expand(b, node):
        b.add("Power", "double", node.inputs, {"scale": 2.0}, outputs=node.outputs)
'''


@pytest.mark.parametrize("facet, command, output", [
    ("numpy", "run", "out.npz"), ("numpy", "verify", None), ("tensorrt", "convert", "net.engine"),
    ("onnx", "export", "net.onnx")])
def test_bad_attrs_given_to_the_builder_are_the_plugin_s_at_its_b_add_line(
        tmp_path, facet, command, output):
    """An attr only a built-in's numpy, tensorrt or onnx facet reads (its infer passed),
    missing from a layer the plugin's b.add built: the plugin's error at that b.add line,
    naming the facet and the layer, instead of a KeyError traceback from the built-in."""
    net, weights, plugin = write_files(tmp_path)
    plugin.write_text(AS_POWER)
    before = sorted(p.name for p in tmp_path.iterdir())
    written = ("-o", tmp_path / output) if output else ()
    args = (command, net, "-w", weights, "--plugin", plugin, *written)
    line = assert_one_error_line(run_cli(*args))
    add_line = next(k for k, text in enumerate(AS_POWER.splitlines(), 1) if "b.add(" in text)
    assert (f"the {facet} facet of 'Power' failed on layer '__frob/double' that the plugin "
            f"'{plugin}' (file) at {plugin}:{add_line} built (in expand): KeyError: 'power'") \
        in line, line
    assert "layer 'frob' (Frobnicate)" in line and "a bug of the plugin" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    if command == "run":  # --debug: the built-in's KeyError, the plugin's error's cause
        done = run_cli("--debug", *args)
        assert "KeyError: 'power'" in done.stderr and "PluginError" in done.stderr


@pytest.mark.parametrize("command, output, extra", [
    ("run", "out.npz", ()), ("convert", "net.engine", ()),
    ("convert", "net.engine", ("--unroll",))])
def test_bad_attrs_of_a_step_body_layer_are_the_plugin_s_at_its_add(tmp_path, command, output,
                                                                      extra):
    """The same inside a recurrent plugin's time step (samples/conv_gru_plugin, one line
    changed), in the loop or its unrolled copies: the step's layer and the plugin's line adding
    it are named."""
    wrong = '        s.output(s.add("Power", "bad", [h_t], {"scale": 1.0})[0])'
    plugin, line_no = conv_gru_changed(tmp_path, "        s.output(h_t)", wrong)
    line = conv_gru_fails(command, plugin, *extra, "-o", tmp_path / output)
    facet = "numpy" if command == "run" else "tensorrt"
    layer = "__gru1/t1/bad" if extra else "__gru1/bad"
    assert (f"the {facet} facet of 'Power' failed on layer '{layer}' that the plugin "
            f"'{plugin}' (file) at {plugin}:{line_no} built (in expand): KeyError: 'power'") \
        in line, line
    assert "layer 'gru1' (ConvGRU)" in line and not (tmp_path / output).exists()


def test_a_layer_a_cell_builder_made_is_named_at_the_plugin_s_call(tmp_path):
    """A layer made for the plugin by a public cell builder (ConvolutionGates.apply, given a
    pad for three spatial axes) is named at the plugin's line calling it, not at caffe-lstm's
    line inside the builder."""
    plugin, line_no = conv_gru_changed(
        tmp_path, 'geometry = {"pad": dilation * (node.attrs["kernel"] - 1) // 2,',
        'geometry = {"pad": (1, 1, 1),', at='.apply(b, "x_conv"')
    line = conv_gru_fails("run", plugin, "-o", tmp_path / "out.npz")
    assert ("built layer '__gru1/x_conv' (Convolution) that its type refuses: pad has 3 "
            f"entries for 2 spatial axes ({plugin}:{line_no}, in expand)") in line, line
    assert not (tmp_path / "out.npz").exists()
