"""`caffe-lstm dot`: valid Graphviz (parsed by pydot, rendered by Graphviz when installed), loop
clusters, marked rewrite nodes, shapes on edges, determinism, atomic files, escaping."""

from __future__ import annotations

import errno
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pydot
import pytest

from tests.helpers import assert_one_error_line, corpus_files, needs_corpus, run_cli, sample

# pydot's parser calls pyparsing's old names; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:'setParseAction' deprecated")

SHAPE = re.compile(r"\((\d+(, \d+)*)?\)")  # (10, 2, 96)

# The names Graphviz treats specially, in layer names, blob names and the net name.
WEIRD_NET = r"""
name: "we\"ird {net}"
layer { name: "in|put" type: "Input" top: "x{1}" top: "c<o>nt"
        input_param { shape { dim: 3 dim: 2 dim: 4 } shape { dim: 3 dim: 2 } } }
layer { name: "lstm{1}|\"a\"<b>\\" type: "LSTM" bottom: "x{1}" bottom: "c<o>nt"
        top: "h|\"q\"\\" recurrent_param { num_output: 5 } }
layer { name: "t@a-n/h\\" type: "TanH" bottom: "h|\"q\"\\" top: "out>" }
"""
WEIRD_LSTM = 'lstm{1}|"a"<b>\\'
PLAIN_NET = """
name: "plain"
layer { name: "input" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 3 dim: 2 dim: 4 } shape { dim: 3 dim: 2 } } }
layer { name: "lstm1" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param { num_output: 5 } }
layer { name: "tanh" type: "TanH" bottom: "h" top: "out" }
"""


# ---- helpers: the parsed drawing ---------------------------------------------------------------

def _parse(text: str) -> pydot.Dot:
    graphs = pydot.graph_from_dot_data(text)
    assert graphs is not None and len(graphs) == 1, "pydot could not parse the DOT text"
    return graphs[0]


def _unquote(text: str) -> str:
    """An id as the user named it: pydot keeps the quotes and the backslash escapes."""
    if text.startswith('"') and text.endswith('"'):
        text = re.sub(r"\\(.)", r"\1", text[1:-1])
    return text


def _unquote_label(text: str) -> str:
    """A label as Graphviz reads it from the DOT text: quotes off, \\" is a quote (the record
    and escString escapes stay for _record_fields and _shown)."""
    if text.startswith('"') and text.endswith('"'):
        text = re.sub(r'\\(["\\])', lambda m: '"' if m.group(1) == '"' else m.group(0), text[1:-1])
    return text


def _shown(field: str) -> str:
    """The text Graphviz shows for a record field or label: \\x stands for x."""
    return re.sub(r"\\(.)", r"\1", field)


def _nodes(graph) -> dict[str, pydot.Node]:
    """The node statements of ``graph`` itself (not of its subgraphs), by unquoted name."""
    return {_unquote(n.get_name()): n for n in graph.get_nodes()
            if n.get_name() not in ("graph", "node", "edge")}


def _clusters(graph) -> dict[str, pydot.Subgraph]:
    """Every cluster, nested ones included, by name."""
    found = {}
    for sub in graph.get_subgraphs():
        found[sub.get_name()] = sub
        found.update(_clusters(sub))
    return found


def _all_nodes(graph) -> dict[str, pydot.Node]:
    found = _nodes(graph)
    for sub in _clusters(graph).values():
        found.update(_nodes(sub))
    return found


def _edges(graph) -> list[tuple[str, str, dict]]:
    """(tail, head, attributes); an end keeps its port: ``"a":o0`` -> ``a:o0``."""
    def end(text: str) -> str:
        name, port = re.fullmatch(r'(".*")(?::(o\d+))?', text).groups()
        return _unquote(name) + (f":{port}" if port else "")
    return [(end(e.get_source()), end(e.get_destination()),
             {k: _unquote_label(v) for k, v in e.get_attributes().items()})
            for e in graph.get_edges()]


def _attr(node: pydot.Node, key: str) -> str:
    return _unquote_label(node.get_attributes().get(key, '""'))


def _record_fields(label: str) -> list[str]:
    """Top-level fields of a record label ``{a|b|c}``: splits on unescaped ``|`` outside nested
    braces; fails on unbalanced unescaped braces (what Graphviz calls a bad label)."""
    assert label.startswith("{") and label.endswith("}"), label
    fields, depth, current, chars = [], 0, "", iter(label[1:-1])
    for ch in chars:
        if ch == "\\":
            current += ch + next(chars)
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0, label
        if ch == "|" and depth == 0:
            fields.append(current)
            current = ""
        else:
            current += ch
    assert depth == 0, label
    return fields + [current]


def _dot(invoke, *args) -> pydot.Dot:
    result = invoke("dot", *args)
    assert result.exit_code == 0, result.stderr
    return _parse(result.stdout)


# ---- the samples -------------------------------------------------------------------------------

# (net, recurrent layers, T, the input projection's shape (T, N, 4H) worked out by hand)
SAMPLES = [("seq_classifier", ["lstm1"], 12, "(12, 2, 64)"),
           ("captioner", ["lstm1", "lstm2"], 10, "(10, 2, 96)")]


@pytest.mark.parametrize("name,layers,steps,projected", SAMPLES)
def test_rewritten_sample_has_one_loop_cluster_per_recurrent_layer(invoke, name, layers, steps,
                                                                   projected):
    graph = _dot(invoke, sample(name)[0])
    clusters = _clusters(graph)
    assert sorted(clusters) == [f"cluster_{layer}" for layer in layers]
    for layer in layers:
        cluster = clusters[f"cluster_{layer}"]
        assert _unquote(cluster.get_label()) == f"loop {layer} ({steps} steps)"
        inside = _nodes(cluster)
        # the body and the Loop node are in the cluster; the input projection is not
        assert {f"__{layer}/loop", f"__{layer}/h", f"__{layer}/c", f"__{layer}/gate"} <= set(inside)
        assert {f"input/{layer}/h_prev", f"input/{layer}/c_prev"} <= set(inside)
        assert f"__{layer}/x_transform" in _nodes(graph)
    edges = _edges(graph)
    assert ("__lstm1/x_transform", "input/lstm1/W_xc_x_t", {"label": projected}) in edges


@pytest.mark.parametrize("name", ["seq_classifier", "captioner"])
def test_every_edge_carries_a_shape_and_inserted_nodes_are_dashed(invoke, name):
    graph = _dot(invoke, sample(name)[0])
    edges = _edges(graph)
    assert edges and all(SHAPE.search(attrs["label"]) for _, _, attrs in edges), edges
    records = {n: node for n, node in _all_nodes(graph).items() if _attr(node, "shape") == "record"}
    inserted = [n for n in records if n.startswith("__")]
    assert inserted and len(inserted) < len(records)
    for node_name, node in records.items():
        assert ("dashed" in _attr(node, "style")) == node_name.startswith("__"), node_name
        assert node_name in _attr(node, "label")  # the __ names stay visible


def test_carried_states_are_back_edges_and_results_leave_the_loop(invoke):
    graph = _dot(invoke, sample("captioner")[0])
    edges = _edges(graph)
    back = [(tail, head) for tail, head, attrs in edges if attrs.get("constraint") == "false"]
    assert sorted(back) == sorted([(f"__{lstm}/{s}", f"input/{lstm}/{s}_prev")
                                   for lstm in ("lstm1", "lstm2") for s in ("h", "c")])
    # lstm1's sequence (T, N, H) leaves the loop for lstm2's input projection
    assert ("__lstm1/loop:o0", "__lstm2/x_transform", {"label": "(10, 2, 24)"}) in edges
    # the net inputs enter the loops as step slices, the static projection as an invariant
    assert ("cont_sentence" not in _all_nodes(graph)) and "input/cont_sentence" in _nodes(graph)
    assert ("input/cont_sentence", "input/lstm2/cont_t", {"label": "(10, 2)"}) in edges
    assert ("__lstm2/W_xc_x_static", "input/lstm2/W_xc_x_static",
            {"label": "(1, 2, 96)"}) in edges


def test_weights_are_not_drawn(invoke):
    net, weights = sample("captioner")
    text = invoke("dot", net, "-w", weights).stdout
    assert "lstm1/W_xc_x" in text  # a value whose name starts like a weight's is drawn
    for weight in ("embedding/weight", "lstm1/W_xc", "lstm1/b_c", "lstm1/W_hc",
                   "lstm2/W_xc_static", "predict/weight", "predict/bias"):
        assert not re.search(re.escape(weight) + r"(?!\w)", text), weight


def test_original_shows_the_lstm_layers_and_nothing_inserted(invoke):
    graph = _dot(invoke, sample("captioner")[0], "--original")
    nodes = _all_nodes(graph)
    assert not graph.get_subgraphs()
    assert not [n for n in nodes if n.startswith("__")]
    assert _record_fields(_attr(nodes["lstm2"], "label")) == ["lstm2", "LSTM", "(10, 2, 24)"]
    assert ("lstm1", "lstm2", {"label": "(10, 2, 24)"}) in _edges(graph)


def test_outputs_option_cuts_the_graph(invoke):
    graph = _dot(invoke, sample("captioner")[0], "--outputs", "lstm1")
    assert list(_clusters(graph)) == ["cluster_lstm1"]
    assert "output/lstm1" in _nodes(graph) and "predict" not in _all_nodes(graph)


def test_output_is_deterministic_across_processes(invoke):
    """Same graph, same bytes: in-process twice, and in processes with other hash seeds."""
    net = sample("captioner")[0]
    first, second = invoke("dot", net).stdout, invoke("dot", net).stdout
    assert first == second
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-m", "caffe_lstm", "dot", str(net)], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == first


def test_same_op_same_colour(invoke):
    graph = _dot(invoke, sample("captioner")[0])
    colours: dict[str, set[str]] = {}
    for node in _all_nodes(graph).values():
        if _attr(node, "shape") == "record":
            op = _record_fields(_attr(node, "label"))[1]
            colours.setdefault(op, set()).add(_attr(node, "fillcolor"))
    assert len(colours) >= 8 and all(len(c) == 1 for c in colours.values()), colours


# ---- files -------------------------------------------------------------------------------------

def test_output_file_is_written_atomically(invoke, tmp_path):
    net = sample("captioner")[0]
    out = tmp_path / "graph.dot"
    result = invoke("dot", net, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert out.read_text() == invoke("dot", net).stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.dot"]


def test_a_failed_write_leaves_the_previous_file(invoke, tmp_path, monkeypatch):
    """The disk fills up half way: the old graph.dot stays whole and no temporary file is left."""
    out = tmp_path / "graph.dot"
    out.write_text("digraph old {}\n")
    real_write_text = pathlib.Path.write_text

    def half_then_full(self, text, *args, **kwargs):
        real_write_text(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", half_then_full)
    result = invoke("dot", sample("captioner")[0], "-o", out)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot write the output (No space left on device)")
    monkeypatch.undo()
    assert out.read_text() == "digraph old {}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["graph.dot"]


def test_unwritable_output_is_one_error_line(tmp_path):
    out = tmp_path / "no" / "dir" / "graph.dot"
    assert_one_error_line(run_cli("dot", sample("captioner")[0], "-o", out),
                          "cannot write the output")
    assert not (tmp_path / "no").exists()


def test_svg_needs_an_output_file(invoke):
    result = invoke("dot", sample("captioner")[0], "--svg")
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "--svg needs -o/--output" in errors[0], result.stderr


def test_svg_without_graphviz_says_how_to_install_it(tmp_path, monkeypatch):
    empty = tmp_path / "empty_path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    out = tmp_path / "out" / "graph.dot"
    out.parent.mkdir()
    assert_one_error_line(run_cli("dot", sample("captioner")[0], "-o", out, "--svg"),
                          "apt-get install graphviz")
    assert_one_error_line(run_cli("dot", sample("captioner")[0], "-o", out, "--svg"),
                          "brew install graphviz")
    assert list(out.parent.iterdir()) == []


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_svg_is_rendered_next_to_the_dot_file(invoke, tmp_path):
    out = tmp_path / "graph.dot"
    result = invoke("dot", sample("captioner")[0], "-o", out, "--svg")
    assert result.exit_code == 0, result.stderr
    svg = (tmp_path / "graph.svg").read_text()
    assert "<svg" in svg and "loop lstm2 (10 steps)" in svg and "__lstm1/gate_input" in svg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.dot", "graph.svg"]


# ---- escaping ----------------------------------------------------------------------------------

def test_special_characters_in_names_still_parse(invoke, tmp_path):
    weird, plain = tmp_path / "weird.prototxt", tmp_path / "plain.prototxt"
    weird.write_text(WEIRD_NET)
    plain.write_text(PLAIN_NET)
    graph = _dot(invoke, weird)
    assert _unquote(graph.get_name()) == 'we"ird {net}'
    nodes = _all_nodes(graph)
    assert {f"__{WEIRD_LSTM}/loop", "t@a-n/h\\", "input/x{1}", "output/out>"} <= set(nodes)
    assert list(_clusters(graph)) == ["cluster_lstm_1___a__b__"]
    assert _shown(_attr(_clusters(graph)["cluster_lstm_1___a__b__"], "label")) == \
        f"loop {WEIRD_LSTM} (3 steps)"
    # every record keeps exactly its three fields, name | op | outputs, and shows the name as is
    records = {n: node for n, node in nodes.items() if _attr(node, "shape") == "record"}
    assert len(records) == 17
    for name, node in records.items():
        fields = _record_fields(_attr(node, "label"))
        assert len(fields) == 3 and _shown(fields[0]) == name, fields
    # the same drawing as the net with plain names
    plain_graph = _dot(invoke, plain)
    assert len(_all_nodes(plain_graph)) == len(nodes)
    assert len(_edges(plain_graph)) == len(_edges(graph))


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_graphviz_renders_special_characters_literally(invoke, tmp_path):
    net = tmp_path / "weird.prototxt"
    net.write_text(WEIRD_NET)
    text = invoke("dot", net).stdout
    proc = subprocess.run(["dot", "-Tsvg"], input=text, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    svg = proc.stdout
    assert "loop lstm{1}|&quot;a&quot;&lt;b&gt;\\ (3 steps)" in svg
    assert ">__lstm{1}|&quot;a&quot;&lt;b&gt;\\/x_transform<" in svg
    assert ">t@a&#45;n/h\\<" in svg and ">out&gt;<" in svg


# ---- the corpus --------------------------------------------------------------------------------

CORPUS_NETS = {
    "examples__coco_caption__lrcn_word_to_preds.deploy.prototxt": ["lstm1", "lstm2"],
    "prototxt__scrc_word_to_preds_full.prototxt": ["lstm1", "lstm2-extended", "lstm2_context"],
    "examples__lstm_sequence__deep_lstm_short.prototxt": ["lstm1", "lstm2", "lstm3"],
}


@needs_corpus()
@pytest.mark.parametrize("name", sorted(CORPUS_NETS))
def test_corpus_net_draws_its_loops(invoke, name):
    path = next(p for p in corpus_files() if p.name == name)
    layers = CORPUS_NETS[name]
    graph = _dot(invoke, path)
    clusters = _clusters(graph)
    assert sorted(clusters) == sorted("cluster_" + re.sub(r"\W", "_", lay) for lay in layers)
    for layer in layers:
        cluster = clusters["cluster_" + re.sub(r"\W", "_", layer)]
        assert f"__{layer}/loop" in _nodes(cluster)
    assert all(SHAPE.search(attrs["label"]) for _, _, attrs in _edges(graph))
    original = _dot(invoke, path, "--original")
    assert not original.get_subgraphs()
    assert {layer for layer in layers} <= set(_all_nodes(original))
