"""Weights reach the numpy facets aligned, loading stays zero-copy (issue 25).

A caffemodel's packed floats are views into the mapped file, at whatever byte offset the
protobuf put them; numpy's matmul leaves BLAS for an unaligned operand. The net here is written
so that no blob starts on a 4-byte boundary, then run through the CLI with every numpy facet
watched.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from caffe_lstm.backends import numpy_exec
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.caffemodel import read_caffemodel
from caffe_lstm.ir.graph import aligned
from tests.helpers import run_outputs, torch_lstm

NET = """name: "odd"
layer {{ name: "input" type: "Input" top: "x" top: "cont"
        input_param {{ shape {{ dim: 3 dim: 2 dim: 5 }} shape {{ dim: 3 dim: 2 }} }} }}
layer {{ name: "{lstm}" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param {{ num_output: 4 }} }}
layer {{ name: "{fc}" type: "InnerProduct" bottom: "h" top: "y"
        inner_product_param {{ num_output: 3 axis: 2 }} }}
"""


def _blobs(seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    lstm = [rng.normal(0, 0.5, shape).astype(np.float32) for shape in [(16, 5), (16,), (16, 4)]]
    fc = [rng.normal(0, 0.5, shape).astype(np.float32) for shape in [(3, 4), (3,)]]
    return lstm, fc


@pytest.fixture(scope="module")
def odd_net(tmp_path_factory):
    """(prototxt, caffemodel) whose every blob starts off a 4-byte boundary of the file (so
    of the map, which starts on a page): layer names of the lengths that put them there."""
    folder = tmp_path_factory.mktemp("odd")
    lstm_blobs, fc_blobs = _blobs(0)
    weights = folder / "odd.caffemodel"
    for pad_lstm, pad_fc in itertools.product(range(8), range(8)):
        names = {"lstm": "lstm" + "_" * pad_lstm, "fc": "fc" + "_" * pad_fc}
        write_caffemodel(weights, [(names["lstm"], "LSTM", lstm_blobs),
                                   (names["fc"], "InnerProduct", fc_blobs)])
        arrays = [blob.data for layer in read_caffemodel(weights) for blob in layer.blobs]
        if all(array.ctypes.data % 4 != 0 for array in arrays):
            prototxt = folder / "odd.prototxt"
            prototxt.write_text(NET.format(**names))
            return prototxt, weights
    pytest.fail("no layer names put every blob off a 4-byte boundary")


@pytest.fixture
def watched_facets(monkeypatch):
    """Every array a numpy facet receives from the executor, recorded as (node, aligned)."""
    seen: list[tuple[str, bool]] = []

    class Watched:
        def __init__(self, op):
            self.op = op

        def numpy(self, ctx, node, *arrays):
            seen.extend((node.name, array.flags.aligned) for array in arrays)
            return self.op.numpy(ctx, node, *arrays)

    real_get_op = numpy_exec.get_op
    monkeypatch.setattr(numpy_exec, "get_op", lambda name: Watched(real_get_op(name)))
    return seen


@pytest.mark.parametrize("original", [False, True], ids=["rewritten", "original"])
def test_numpy_facets_receive_aligned_weights(invoke, odd_net, watched_facets, tmp_path,
                                              original):
    prototxt, weights = odd_net
    output = tmp_path / "y.npz"
    result = invoke("run", prototxt, "-w", weights, "-o", output,
                    *(["--original"] if original else []))
    assert result.exit_code == 0, result.stderr
    assert len(watched_facets) > 5  # the weights among them: the facets were watched
    assert [name for name, is_aligned in watched_facets if not is_aligned] == []
    with np.load(output) as saved:
        assert np.isfinite(saved["y"]).all()


def test_the_aligned_copies_hold_the_files_values(invoke, odd_net, tmp_path):
    """The run on the odd-offset file equals torch.nn.LSTM and the product on the arrays."""
    prototxt, weights = odd_net
    (w_xc, b_c, w_hc), (w_fc, b_fc) = _blobs(0)
    rng = np.random.default_rng(1)
    feeds = {"x": rng.normal(size=(3, 2, 5)).astype(np.float32),
             "cont": np.array([[0, 0], [1, 1], [1, 1]], np.float32)}
    got = run_outputs(invoke, tmp_path, prototxt, weights, feeds)
    h, _, _ = torch_lstm(feeds["x"], w_xc, b_c, w_hc)
    np.testing.assert_allclose(got["y"], h @ w_fc.T.astype(np.float64) + b_fc, atol=1e-5)


def test_loading_stays_zero_copy_and_the_copy_is_made_once(odd_net):
    _, weights = odd_net
    array = read_caffemodel(weights)[0].blobs[2].data  # W_hc, a view into the file
    assert not array.flags.aligned and not array.flags.owndata
    copy = aligned(array)
    assert copy.flags.aligned and np.array_equal(copy, array)
    assert aligned(array) is copy  # reused, never per call
    assert aligned(copy) is copy  # an aligned array is its own
