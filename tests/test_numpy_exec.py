"""The numpy executor's facets compute into arrays of their own: none writes into what it
receives. Its inputs may be the user's arrays, a weight's cached aligned copy (shared by every
clone of the net) or a value another layer reads too; a facet working in place to spare a
temporary (InnerProduct's bias, Sigmoid's scale and shift) must do so on its own result.

Every array a facet receives is made read-only on the way in, so a write into it raises; the
sample nets then run through the CLI, rewritten and from their layers' equations.
"""

from __future__ import annotations

import numpy as np
import pytest

from caffe_lstm.backends import numpy_exec
from tests.helpers import sample

SAMPLES = ("seq_classifier", "captioner", "char_lm", "deepspeech_relu", "fork_recurrent",
           "fork_vision")


@pytest.fixture
def frozen_facets(monkeypatch):
    """Every array a numpy facet receives from the executor is read-only; the names of the
    nodes whose facets ran are recorded."""
    ran: list[str] = []

    class Frozen:
        def __init__(self, op):
            self.op = op

        def __getattr__(self, name):
            return getattr(self.op, name)

        def numpy(self, ctx, node, *arrays):
            for array in arrays:
                if isinstance(array, np.ndarray):
                    array.flags.writeable = False
            ran.append(node.name)
            return self.op.numpy(ctx, node, *arrays)

    real_get_op = numpy_exec.get_op
    monkeypatch.setattr(numpy_exec, "get_op", lambda name: Frozen(real_get_op(name)))
    return ran


@pytest.mark.parametrize("original", [False, True], ids=["rewritten", "original"])
@pytest.mark.parametrize("name", SAMPLES)
def test_no_numpy_facet_writes_into_its_inputs(invoke, frozen_facets, tmp_path, name, original):
    prototxt, weights = sample(name)
    output = tmp_path / "out.npz"
    result = invoke("run", prototxt, "-w", weights, "-o", output,
                    *(["--original"] if original else []))
    assert result.exit_code == 0, result.stderr
    assert frozen_facets  # the facets ran through the freezing wrapper
    with np.load(output) as saved:
        assert all(np.isfinite(saved[key]).all() for key in saved.files)


def test_a_facet_writing_into_its_input_is_caught(monkeypatch, invoke, frozen_facets, tmp_path):
    """The check can fail: a Sigmoid adding 0 into its bottom in place is refused."""
    from caffe_lstm.ops.activation import Sigmoid

    def in_place(ctx, node, x):
        x += np.float32(0)
        return (x,)

    monkeypatch.setattr(Sigmoid, "numpy", staticmethod(in_place))
    prototxt, weights = sample("seq_classifier")
    with pytest.raises(ValueError, match="read-only"):
        invoke("run", prototxt, "-w", weights, "-o", tmp_path / "out.npz")
