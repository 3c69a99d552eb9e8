"""The fork layers of samples/fork_vision end to end through the CLI: ``verify`` (numpy, the
TensorRT network walked on the CPU and onnxruntime agree to 1e-5), ``convert``, ``export`` and
``run --backend onnxruntime``; the TensorRT network at dynamic roi counts and batch sizes; and
bad parameters on the new paths: one ``error:`` line, exit 1, no output file.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.frontend.loader import load_net
from tests.helpers import assert_one_error_line, run_cli, sample

NET, WEIGHTS = sample("fork_vision")
OUTPUTS = ("fit", "shrink", "st", "psroi", "repeat")


def fork_inputs(path: Path, seed: int = 0, rois: int = 3, batch: int = 2) -> Path:
    """Inputs for the sample: random maps, theta and seq; rois with valid batch indices, one
    past the map (empty bins) and one with halves that C's round() sends up."""
    rng = np.random.default_rng(seed)
    table = np.array([[0, 0, 0, 11, 9], [batch - 1, 2.5, 1.5, 7, 8.5], [0, 20, 3, 30, 4]],
                     np.float32)
    extra = np.concatenate([rng.integers(0, batch, (rois, 1)), rng.uniform(0, 6, (rois, 2)),
                            rng.uniform(6, 12, (rois, 2))], axis=1).astype(np.float32)
    np.savez(path, maps=rng.standard_normal((batch, 8, 5, 6)).astype(np.float32),
             rois=np.concatenate([table, extra])[:rois],
             theta=(0.2 * rng.standard_normal((batch, 2))).astype(np.float32),
             seq=rng.standard_normal((4, batch, 3)).astype(np.float32))
    return path


def test_verify_checks_numpy_tensorrt_and_onnxruntime(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    inputs = fork_inputs(tmp_path / "in.npz")
    done = run_cli("verify", NET, "-w", WEIGHTS, "--inputs", inputs, "--runtime", "tensorrt-rtx",
                   "--onnxruntime", "--atol", "1e-5", "--rtol", "1e-5")
    assert done.returncode == 0, done.stderr
    assert "TensorRT network" in done.stdout and "ONNX model" in done.stdout
    for name in OUTPUTS:
        assert len(re.findall(rf"^{name} .* ok$", done.stdout, re.M)) == 3, done.stdout
    assert "MISMATCH" not in done.stdout


def test_convert_export_and_run_onnxruntime(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    pytest.importorskip("onnxruntime")
    engine, model, inputs = tmp_path / "net.engine", tmp_path / "net.onnx", \
        fork_inputs(tmp_path / "in.npz", seed=1)
    done = run_cli("convert", NET, "-w", WEIGHTS, "-o", engine, "--runtime", "tensorrt-rtx")
    assert done.returncode == 0 and engine.stat().st_size > 0, done.stderr
    done = run_cli("export", NET, "-w", WEIGHTS, "-o", model)
    assert done.returncode == 0 and model.stat().st_size > 0, done.stderr
    got, want = tmp_path / "ort.npz", tmp_path / "numpy.npz"
    for backend, out in (("onnxruntime", got), ("numpy", want)):
        extra = ("--onnx", model) if backend == "onnxruntime" else ()
        done = run_cli("run", NET, "-w", WEIGHTS, "--inputs", inputs, "-o", out,
                       "--backend", backend, *extra)
        assert done.returncode == 0, done.stderr
    with np.load(got) as ort_out, np.load(want) as numpy_out:
        for name in OUTPUTS:
            np.testing.assert_allclose(ort_out[name], numpy_out[name], rtol=1e-5, atol=1e-5)


def test_tensorrt_network_at_dynamic_roi_counts_and_batches(tmp_path):
    """One network for 1-8 rois and batches 1-3: the walk at 6 rois of batch 3 equals numpy."""
    pytest.importorskip("tensorrt_rtx_bindings")
    from caffe_lstm.backends.tensorrt.build import BuildOptions, emit
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    runtime = load_runtime("tensorrt-rtx")
    graph = load_net(NET, WEIGHTS, outputs=["st", "psroi", "fit"]).graph
    shapes = {"maps": ((1, 8, 5, 6), (2, 8, 5, 6), (3, 8, 5, 6)),
              "rois": ((1, 5), (3, 5), (8, 5)), "theta": ((1, 2), (2, 2), (3, 2))}
    _, network, _ = emit(runtime, graph, BuildOptions(shapes=shapes))
    with np.load(fork_inputs(tmp_path / "in.npz", seed=2, rois=6, batch=3)) as data:
        feeds = {name: data[name] for name in ("maps", "rois", "theta")}
    got = evaluate_network(runtime.trt, network, feeds)
    want = NumpyExecutor(graph).run(feeds)
    assert got["psroi"].shape == (6, 2, 2, 2)
    for name in ("st", "psroi", "fit"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("output, shapes, message", [
    ("psroi", ("maps:2x8x4x6:2x8x5x6:2x8x6x6",),
     "C, H or W of the score maps is not fixed in the ONNX export, layer 'psroi' (PSROIPooling)"),
    ("fit", ("maps:2x8x5x4:2x8x5x6:2x8x5x9",),
     "H or W of 'maps' is not fixed in the ONNX export, layer 'fit' (Interp)"),
])
def test_an_onnx_form_built_for_one_size_refuses_a_range_that_varies_it(tmp_path, output,
                                                                         shapes, message):
    """PSROIPooling's integral image and Interp's resize matrices are built for one H and W:
    ``export --shape`` with H or W varying is one line and writes nothing (the model failed
    in onnxruntime at every other size). A range over N exports, and runs at the MAX N as
    numpy does."""
    model = tmp_path / "m.onnx"
    ranges = [arg for shape in shapes for arg in ("--shape", shape)]
    assert_one_error_line(run_cli("export", NET, "-w", WEIGHTS, "-o", model, "--outputs",
                                  output, *ranges), message)
    assert not model.exists()
    batches = ("--shape", "maps:1x8x5x6:2x8x5x6:3x8x5x6")
    done = run_cli("export", NET, "-w", WEIGHTS, "-o", model, "--outputs", output, *batches)
    assert done.returncode == 0, done.stderr
    with np.load(fork_inputs(tmp_path / "all.npz", seed=4, batch=3)) as data:
        np.savez(tmp_path / "in.npz", **{name: data[name] for name in ("maps", "rois")
                                         if output == "psroi" or name == "maps"})
    inputs, three = tmp_path / "in.npz", ("--shape", "maps:3x8x5x6")
    for backend in ("numpy", "onnxruntime"):
        extra = ("--onnx", model) if backend == "onnxruntime" else ()
        done = run_cli("run", NET, "-w", WEIGHTS, "--outputs", output, *three, "--inputs",
                       inputs, "-o", tmp_path / f"{backend}.npz", "--backend", backend, *extra)
        assert done.returncode == 0, done.stderr
    with np.load(tmp_path / "onnxruntime.npz") as got, np.load(tmp_path / "numpy.npz") as want:
        assert want[output].shape[0] == 3
        np.testing.assert_allclose(got[output], want[output], rtol=1e-5, atol=1e-5)


#: Two inputs, then a layer reading them: ``{layer}`` is filled per case.
_TWO_INPUTS = ('layer {{ name: "in" type: "Input" top: "maps" top: "{second}" input_param {{ '
               'shape {{ {maps} }} shape {{ {dims} }} }} }}\n'
               'layer {{ name: "{name}" type: "{type}" bottom: "maps" bottom: "{second}" '
               'top: "y" {param} }}\n')


@pytest.mark.parametrize("command, case, refused_param, built_param, shape, message", [
    # SpatialTransformer without output_H/W takes the input's H and W: its sampling grid is a
    # constant built for one size (the model sampled OPT's grid at every size)
    ("export", {"second": "theta", "maps": "dim: 2 dim: 3 dim: 5 dim: 6",
                "dims": "dim: 2 dim: 2", "name": "st", "type": "SpatialTransformer"},
     "st_param { theta_1_1: 0.9 theta_1_2: 0.1 theta_2_1: -0.2 theta_2_2: 1.1 }",
     ("st_param { output_H: 4 output_W: 3 theta_1_1: 0.9 theta_1_2: 0.1 theta_2_1: -0.2 "
      "theta_2_2: 1.1 }"), "maps:2x3x4x6:2x3x5x6:2x3x7x6",
     ("the output's height or width is not fixed in the ONNX export, layer 'st' "
      "(SpatialTransformer)")),
    # Interp sized by its second bottom is two constant matrices for one output size (the
    # engine resized to OPT's size at every size); with a zoom_factor that bottom sizes nothing
    ("convert", {"second": "ref", "maps": "dim: 1 dim: 2 dim: 4 dim: 5",
                 "dims": "dim: 1 dim: 1 dim: 6 dim: 7", "name": "resize", "type": "Interp"},
     "interp_param { }", "interp_param { zoom_factor: 2 }", "ref:1x1x5x7:1x1x6x7:1x1x8x7",
     "H and W are dynamic (-1) in the TensorRT network, layer 'resize' (Interp)"),
])
def test_a_form_built_for_one_output_size_refuses_a_range_that_varies_it(
        tmp_path, command, case, refused_param, built_param, shape, message):
    """A range that makes the layer's output size vary is one error line and writes nothing;
    with the output size fixed by the layer's param, the same range builds."""
    if command == "convert":
        pytest.importorskip("tensorrt_rtx_bindings")
    net, weights, out = tmp_path / "net.prototxt", tmp_path / "net.caffemodel", tmp_path / "out"
    for param, refused in ((refused_param, True), (built_param, False)):
        net.write_text(_TWO_INPUTS.format(param=param, **case))
        assert run_cli("weights", "init", net, "-o", weights).returncode == 0  # no blobs
        done = run_cli(command, net, "-w", weights, "-o", out, "--shape", shape)
        if refused:
            assert_one_error_line(done, message)
            assert not out.exists()
        else:
            assert done.returncode == 0 and out.exists(), done.stderr


BAD_LAYERS = {
    "pad": ('type: "Interp" bottom: "maps" interp_param { zoom_factor: 2 pad_beg: 1 }',
            "pad_beg 1 and pad_end 0 must be ≤ 0"),
    "zoom": ('type: "Interp" bottom: "maps" interp_param { zoom_factor: 0 }',
             "zoom_factor 0 must be ≥ 1"),
    "no_size": ('type: "Interp" bottom: "maps" interp_param { height: 4 }', "no output size"),
    "psroi_missing": (('type: "PSROIPooling" bottom: "maps" bottom: "rois" '
                       'psroi_pooling_param { spatial_scale: 0.5 group_size: 2 }'),
                      "psroi_pooling_param has no output_dim"),
    "psroi_channels": (('type: "PSROIPooling" bottom: "maps" bottom: "rois" '
                        'psroi_pooling_param { spatial_scale: 1 output_dim: 3 group_size: 2 }'),
                       "must be (N, output_dim·group_size² = 12, H, W)"),
    "st_type": (('type: "SpatialTransformer" bottom: "maps" bottom: "theta" '
                 'st_param { transform_type: "projective" }'),
                "transform_type 'projective' is not supported"),
    "st_theta": (('type: "SpatialTransformer" bottom: "maps" bottom: "theta" '
                  'st_param { theta_1_1: 1 }'), "theta (2, 2) must be (N = 2, 5)"),
    "repeat": ('type: "Repeat" bottom: "seq" repeat_param { axis: 1 }', "num_repeats is 0"),
    "repeat_axis": ('type: "Repeat" bottom: "seq" repeat_param { num_repeats: 2 axis: 3 }',
                    "axis 3 is out of range"),
}


@pytest.mark.parametrize("case", sorted(BAD_LAYERS))
def test_bad_fork_layer_is_one_line_and_writes_nothing(tmp_path, case):
    layer, message = BAD_LAYERS[case]
    text = NET.read_text().split("layer {\n  name: \"zoom\"")[0]
    net = tmp_path / "bad.prototxt"
    net.write_text(text + f'layer {{ name: "bad" {layer} top: "bad" }}\n')
    out = tmp_path / "out.onnx"
    done = run_cli("export", net, "-w", WEIGHTS, "-o", out)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert "layer 'bad'" in lines[0] and "Traceback" not in done.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [net]


def test_roi_batch_index_outside_the_batch_is_one_line(tmp_path):
    inputs = fork_inputs(tmp_path / "in.npz")
    with np.load(inputs) as data:
        arrays = dict(data)
    arrays["rois"][1, 0] = 5
    np.savez(inputs, **arrays)
    done = run_cli("run", NET, "-w", WEIGHTS, "--inputs", inputs, "-o", tmp_path / "out.npz")
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and "roi batch index 5 is outside [0, 2)" in \
        done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "out.npz").exists()


def test_continuation_indicator_axis_names_the_plugin_route(tmp_path):
    net = tmp_path / "cont.prototxt"
    net.write_text('layer { name: "cont" type: "ContinuationIndicator" top: "cont" '
                   'continuation_indicator_param { time_step: 4 batch_size: 2 axis: 1 } }\n')
    done = run_cli("export", net, "-w", WEIGHTS, "-o", tmp_path / "out.onnx")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert "continuation_indicator_param.axis is 1" in lines[0]
    assert "--plugin" in lines[0] and "docs/plugins.md" in lines[0]
    assert list(tmp_path.iterdir()) == [net]
