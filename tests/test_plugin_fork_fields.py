"""Fields a fork adds inside a message caffe-lstm's schema knows (issue 21, acceptance 4): a
convolutional LSTM's ``recurrent_param { wxc_convolution_param {...} whh_convolution_param
{...} }`` reads unchanged when the plugin declares them (``param_fields``, one as a message
type of the schema, one field by field), and fails in one line naming the plugin's declaration
when it does not. Through the CLI, on a plugin file and a prototxt written here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import caffe_lstm
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.ops import plugins
from tests.helpers import assert_one_error_line, run_cli

#: The shapes of a fork's convolutional LSTM, its convolutions set inside recurrent_param.
PLUGIN = '''from caffe_lstm.ops import Op, ParamField, register_op


@register_op
class ConvLSTM(Op):
    """h: (T, N, num_output, H', W'), H' and W' those of the x-to-gates convolution."""
    type = "ConvLSTM"
    param = "recurrent_param"
    param_fields = {{{fields}}}
    n_bottoms = (2, 2)
    tensorrt_missing_reason = onnx_missing_reason = "shapes only"

    @staticmethod
    def parse(ctx, p):
        x, h = p.wxc_convolution_param, p.whh_convolution_param
        return {{"num_output": p.num_output, "kernel": x.kernel_size[0],
                "pad": x.pad[0] if x.pad else 0, "stride": x.stride[0] if x.stride else 1,
                "bias": x.bias_term, "h_kernel": list(h.kernel_size), "h_pad": list(h.pad),
                "h_set": p.has("whh_convolution_param")}}

    @staticmethod
    def infer(ctx, node, x, cont):
        t, n, _, height, width = x
        k, p, s = node.attrs["kernel"], node.attrs["pad"], node.attrs["stride"]
        return ((t, n, node.attrs["num_output"], (height + 2 * p - k) // s + 1,
                 (width + 2 * p - k) // s + 1),)
'''
WXC = '"wxc_convolution_param": ParamField(message="ConvolutionParameter")'
WHH = ('"whh_convolution_param": ParamField(fields={"kernel_size": ParamField(int, '
       'repeated=True), "pad": ParamField(int, repeated=True)})')
#: The line of ``class ConvLSTM`` in PLUGIN.
CLASS_LINE = 5

NET = """layer { name: "in" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 3 dim: 2 dim: 4 dim: 9 dim: 9 } shape { dim: 3 dim: 2 } } }
layer {
  name: "conv_lstm" type: "ConvLSTM" bottom: "x" bottom: "cont" top: "h"
  recurrent_param {
    num_output: 6
    wxc_convolution_param { kernel_size: 3 pad: 1 stride: 2 weight_filler { type: "xavier" } }
    whh_convolution_param { kernel_size: 3 pad: 1 }
    weight_filler { type: "uniform" }
  }
}
"""


def files(tmp_path: Path, fields: str, net: str = NET) -> tuple[Path, Path]:
    plugin, prototxt = tmp_path / "conv_lstm.py", tmp_path / "net.prototxt"
    plugin.write_text(PLUGIN.format(fields=fields))
    prototxt.write_text(net)
    return plugin, prototxt


def test_declared_fork_fields_read_unchanged(tmp_path):
    plugin, net = files(tmp_path, f"{WXC}, {WHH}")
    done = run_cli("inspect", net, "--plugin", plugin, "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["outputs"] == {"h": [3, 2, 6, 5, 5]}  # (9 + 2·1 − 3) // 2 + 1 = 5
    assert summary["unknown"] == []  # read, not skipped
    with plugins.isolated():
        attrs = caffe_lstm.load(net, plugins=[plugin]).graph.node("conv_lstm").attrs
    assert attrs == {"num_output": 6, "kernel": 3, "pad": 1, "stride": 2, "bias": True,
                     "h_kernel": [3], "h_pad": [1], "h_set": True}  # bias_term: its default


def test_an_undeclared_fork_field_names_the_plugin_s_declaration(tmp_path):
    plugin, net = files(tmp_path, WXC)
    line = assert_one_error_line(run_cli("inspect", net, "--plugin", plugin))
    assert ("layer 'conv_lstm' (ConvLSTM) has the unknown message "
            "'recurrent_param.whh_convolution_param'") in line and f"{net}:8:5" in line
    assert (f"the plugin '{plugin}' (file) does not declare 'whh_convolution_param' inside "
            f"recurrent_param: declare it in ConvLSTM.param_fields ({plugin}:{CLASS_LINE})") \
        in line
    assert "remove it if it only tunes training" not in line


def test_a_plugin_declaring_none_is_told_where_to(tmp_path):
    plugin, net = files(tmp_path, "")
    line = assert_one_error_line(run_cli("inspect", net, "--plugin", plugin))
    assert "'recurrent_param.wxc_convolution_param'" in line and "(and 1 more" in line
    assert f"declare it in ConvLSTM.param_fields (none yet, {plugin}:{CLASS_LINE})" in line


@pytest.mark.parametrize("field, written, found", [
    ("wxc_convolution_param", "kernel_sise: 3",
     'Message type "caffe.ConvolutionParameter" has no field named "kernel_sise"'),
    ("whh_convolution_param", "kernel_size: three", "Couldn't parse integer: three"),
])
def test_a_bad_value_inside_a_declared_field_is_at_its_place(tmp_path, field, written, found):
    line_no = 7 if field.startswith("wxc") else 8
    plugin, net = files(tmp_path, f"{WXC}, {WHH}",
                        NET.replace(f"{field} {{ kernel_size: 3", f"{field} {{ {written}"))
    line = assert_one_error_line(run_cli("inspect", net, "--plugin", plugin))
    assert f"invalid recurrent_param: {found}, {net}:{line_no}:" in line, line
    assert ("declares the extra fields as wxc_convolution_param: a ConvolutionParameter, "
            "whh_convolution_param: a message") in line


def test_a_declared_field_the_schema_has_is_the_plugin_s_error(tmp_path):
    plugin, net = files(tmp_path, f'{WXC}, {WHH}, "num_output": ParamField(int)')
    line = assert_one_error_line(run_cli("inspect", net, "--plugin", plugin))
    assert (f"the plugin '{plugin}' (file) declares field 'num_output' inside recurrent_param "
            f"({plugin}:{CLASS_LINE}), which caffe-lstm's schema has already") in line


def test_rewrite_cannot_write_a_fork_s_field_back(tmp_path):
    """caffe.proto's RecurrentParameter has no wxc_convolution_param: the layer cannot be
    written back (the plugin's caffe facet is Op's default, writing its attrs)."""
    plugin, net = files(tmp_path, f"{WXC}, {WHH}")
    weights, out = tmp_path / "net.caffemodel", tmp_path / "out"
    write_caffemodel(weights, [])
    line = assert_one_error_line(run_cli("rewrite", net, "-w", weights, "--plugin", plugin,
                                         "-o", out))
    assert ("the caffe facet of 'ConvLSTM' (the default of Op: the plugin defines none) of the "
            f"plugin '{plugin}' (file) returned what Caffe's schema cannot hold") in line
    assert not out.exists()


def test_a_field_outside_the_declared_message_says_what_the_plugin_reads(tmp_path):
    plugin, net = files(tmp_path, f"{WXC}, {WHH}", NET.replace(
        "  recurrent_param {\n", "  convolution_param { fancy: 1 }\n  recurrent_param {\n"))
    line = assert_one_error_line(run_cli("inspect", net, "--plugin", plugin))
    assert "has the unknown field 'convolution_param.fancy'" in line and f"{net}:5:" in line
    assert (f"the plugin '{plugin}' (file) owns the layer and reads fields the schema lacks "
            f"only inside recurrent_param (its declaration: ConvLSTM at {plugin}:{CLASS_LINE})"
            ) in line
