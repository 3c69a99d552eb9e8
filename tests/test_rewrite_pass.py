"""The recurrent rewrite, inspected as a graph: what it leaves, where things sit, their names."""

from __future__ import annotations

import pytest

from caffe_lstm.frontend.loader import load_net
from caffe_lstm.ir.printer import dump
from caffe_lstm.passes import run_passes
from tests.helpers import corpus_files, needs_corpus, sample

RECURRENT = {"LSTM", "RNN", "Lstm"}

FORK_NET = """
name: "fork_lstm"
layer { name: "input" type: "Input" top: "x" top: "clip"
        input_param { shape { dim: 6 dim: 1 } shape { dim: 6 dim: 1 } } }
layer { name: "lstm1" type: "Lstm" bottom: "x" bottom: "clip" top: "lstm1"
        lstm_param { num_output: 3 } }
layer { name: "rnn1" type: "RNN" bottom: "lstm1" bottom: "clip" top: "rnn1"
        recurrent_param { num_output: 2 } }
"""
# rnn1 reads the 2-D (T·N, H) top of the fork layer as (T, N) with N = 1: reshape it first.
FORK_NET = FORK_NET.replace(
    'layer { name: "rnn1" type: "RNN" bottom: "lstm1"',
    'layer { name: "seq" type: "Reshape" bottom: "lstm1" top: "seq"\n'
    '        reshape_param { shape { dim: 6 dim: 1 dim: 3 } } }\n'
    'layer { name: "rnn1" type: "RNN" bottom: "seq"').replace(
    'bottom: "clip" top: "rnn1"', 'bottom: "cont" top: "rnn1"').replace(
    'top: "x" top: "clip"', 'top: "x" top: "clip" top: "cont"').replace(
    "shape { dim: 6 dim: 1 } shape { dim: 6 dim: 1 } }",
    "shape { dim: 6 dim: 1 } shape { dim: 6 dim: 1 } shape { dim: 6 dim: 1 } }")


def rewritten(path):
    return run_passes(load_net(path).graph)


def loops(graph):
    return [n for n in graph.nodes if n.op == "Loop"]


@pytest.mark.parametrize("name", ["seq_classifier", "captioner"])
def test_no_recurrent_node_remains_and_one_matmul_per_loop(name):
    graph = rewritten(sample(name)[0])
    assert not RECURRENT.intersection(n.op for n in graph.nodes)
    original = load_net(sample(name)[0]).graph
    assert len(loops(graph)) == sum(n.op in RECURRENT for n in original.nodes)
    for loop in loops(graph):
        body = loop.attrs["body"]
        matmuls = [n for n in body.nodes if n.op == "InnerProduct"]
        assert [m.name for m in matmuls] == [f"__{loop.origin}/transform"]
        assert matmuls[0].weights[0].name == f"{loop.origin}/W_hc"
        # the input projection of all steps sits outside the loop, feeding it
        projection = graph.node(f"__{loop.origin}/x_transform")
        assert projection.op == "InnerProduct" and projection.attrs["axis"] == 2
        assert loop.inputs[0] is projection.outputs[0]


def test_inserted_nodes_are_marked_and_named_after_caffe_blobs():
    graph = rewritten(sample("captioner")[0])
    body = graph.node("__lstm2/loop").attrs["body"]
    names = {v.name for n in body.nodes for v in n.outputs}
    for blob in ("h_conted", "W_hc_h", "gate_input", "c", "h"):
        assert f"lstm2/{blob}" in names
    for node in [*graph.nodes, *body.nodes]:
        if node.origin != node.name:
            assert node.name.startswith("__") and node.origin in ("lstm1", "lstm2")
    # the static input: one InnerProduct without bias, outside the loop, read by every step
    static = graph.node("__lstm2/W_xc_x_static_preshape")
    assert static.op == "InnerProduct" and not static.attrs["bias_term"]
    loop = graph.node("__lstm2/loop")
    assert loop.inputs[-1] is graph.node("__lstm2/W_xc_x_static").outputs[0]
    assert body.inputs[-1].name == "lstm2/W_xc_x_static"
    gate_input = body.nodes[[n.name for n in body.nodes].index("__lstm2/gate_input")]
    assert gate_input.inputs[-1] is body.inputs[-1]
    # the delta nodes: cont_t times the carried h and c (two-bottom Scale on axis 0)
    deltas = [n for n in body.nodes if n.op == "Scale"]
    assert [n.inputs[1].name for n in deltas] == ["lstm2/cont_t", "lstm2/cont_t"]


def test_unroll_leaves_t_step_blocks_of_plain_layers():
    graph = run_passes(load_net(sample("seq_classifier")[0]).graph,
                       ["expand-recurrent", "unroll"])
    assert not loops(graph)
    matmuls = [n for n in graph.nodes if n.op == "InnerProduct" and n.origin == "lstm1"]
    assert len(matmuls) == 1 + 12  # the projection, then one recurrent multiply per step
    assert {m.weights[0].name for m in matmuls[1:]} == {"lstm1/W_hc"}
    assert graph.node("__lstm1/t12/h").op == "Eltwise"


@pytest.mark.parametrize("name", ["seq_classifier", "captioner"])
def test_golden_dump_of_sample(golden, name):
    golden(f"{name}.rewritten.txt", dump(rewritten(sample(name)[0])))


def test_golden_dump_of_fork_lstm_and_rnn(golden, tmp_path):
    path = tmp_path / "fork.prototxt"
    path.write_text(FORK_NET)
    golden("fork_lstm_rnn.rewritten.txt", dump(rewritten(path)))


@needs_corpus()
@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_nets_that_load_rewrite_without_recurrent_nodes(path):
    from caffe_lstm.errors import CaffeLstmError

    try:
        graph = load_net(path).graph
    except CaffeLstmError:
        pytest.skip("does not load as a whole: a training net or a custom layer (docs/corpus.md)")
    run_passes(graph)
    assert not RECURRENT.intersection(n.op for n in graph.nodes)
