"""The seams between the library and the command line (issue 16).

- No module below ``cli/`` spells a CLI flag in a string (errors speak the API's words); the
  CLI's translation table (``cli/words.py``) maps them back, and each phrase it maps is still
  written somewhere in the library.
- The API takes each typed option as a member or its value, and refuses another in one line.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import click
import pytest

import caffe_lstm
from caffe_lstm.cli import cli
from caffe_lstm.cli.words import FLAGS, PHRASES, as_cli
from caffe_lstm.errors import CaffeLstmError
from caffe_lstm.options import LstmOp, Route, Runtime, State

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "caffe_lstm"
SAMPLES = ROOT / "samples"

#: Strings below cli/ that spell a flag of another program, not of caffe-lstm.
NOT_OURS = {
    ("backends/dot.py", "-o"),  # Graphviz's own -o, in the argv of its `dot` program
    # docker's and tritonserver's own options, in the container command serve points at
    *(("serving/server.py", flag) for flag in ("--gpus", "--rm", "-v", "--model-repository")),
}


def _command_flags(command: click.Command) -> set[str]:
    flags = {spelling for param in command.params if isinstance(param, click.Option)
             for spelling in (*param.opts, *param.secondary_opts)}
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            flags |= _command_flags(sub)
    return flags


CLI_FLAGS = _command_flags(cli) | {"-vv", "--help", "-h"}
#: Any --long-option, and the short options caffe-lstm has (-w, -o, -v, -vv, -q, -h).
SHORT = sorted(flag for flag in CLI_FLAGS if not flag.startswith("--"))
FLAG_WORD = re.compile(r"(?<![\w-])(--[a-zA-Z][\w-]*|" + "|".join(map(re.escape, SHORT))
                       + r")(?![\w-])")


def _docstring_ids(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _library_strings() -> list[tuple[str, int, str]]:
    """(module, line, text) of every string literal below cli/ that is not a docstring (the
    strings a user can see: messages, hints, notes)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(("cli/", "proto/")):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstring_ids(tree)
        found += [(relative, node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in docstrings]
    return found


def test_the_flag_pattern_sees_flags():
    assert FLAG_WORD.search("cut them off with --outputs")
    assert FLAG_WORD.search("check that -w points at")
    assert FLAG_WORD.search("rerun with -vv")
    assert not FLAG_WORD.search("the -axis bottom, x-1, rank-D, e^-x, caffe-lstm")


def test_no_module_below_cli_names_a_cli_flag():
    hits = [f"caffe_lstm/{module}:{line}: {match.group(1)} in {text!r}"
            for module, line, text in _library_strings()
            for match in FLAG_WORD.finditer(text) if (module, match.group(1)) not in NOT_OURS]
    assert hits == [], ("flag names below cli/ (write the API's words, map them in "
                        "cli/words.py):\n" + "\n".join(hits))


def test_every_phrase_the_cli_translates_is_still_written_in_the_library():
    source = "\n".join(text for _, _, text in _library_strings())
    stale = [api_words for api_words, _ in PHRASES
             if api_words not in source and not api_words.startswith("verbosity=")]
    assert stale == []
    assert "verbosity=1" in source and "verbosity=2" in source


def test_every_translated_parameter_is_an_api_parameter_and_a_cli_flag():
    params = set()
    for function in (caffe_lstm.load, *[getattr(caffe_lstm.Net, name)
                                        for name in dir(caffe_lstm.Net)
                                        if callable(getattr(caffe_lstm.Net, name))]):
        try:
            params |= set(inspect.signature(function).parameters)
        except (TypeError, ValueError):
            continue
    assert set(FLAGS) <= params, set(FLAGS) - params
    assert {flag for flag in FLAGS.values()} <= CLI_FLAGS


@pytest.mark.parametrize("api_words, cli_words", [
    ("at the shapes= MIN sizes: x, keep dims out of shapes= ranges",
     "at the --shape MIN sizes: x, keep dims out of --shape ranges"),
    ("fp16=True is not available, via='onnx', build with via='caffe-lstm', or fp32 via onnx",
     "--fp16 is not available, --via onnx, build with --via caffe-lstm, or fp32 via onnx"),
    ("shapes['data:0'] has 2 dims", "--shape data:0 has 2 dims"),
    ("give it with shapes={'x': DIMS, 'cont': DIMS} (DIMS: ...)",
     "give it with --shape x:DIMS --shape cont:DIMS (DIMS: ...)"),
    ("select it with phase='TRAIN' stages=['a', 'b']",
     "select it with --phase TRAIN --stage a --stage b"),
    ("pass opset=19 or newer", "pass --opset 19 or newer"),
    ("shape the net for one step (e.g. shapes={'cont': (1, N)})",
     "shape the net for one step (e.g. --shape cont:1xN)"),
    ("cut them off with outputs=, or report", "cut them off with --outputs, or report"),
    ("cut the layer off with outputs=[NAME, ...]",
     "cut the layer off with --outputs NAME[,NAME...]"),
    ("layer=: no layer named 'lstm_state=1'", "--layer: no layer named 'lstm_state=1'"),
    ("rerun with verbosity=2 for TensorRT's log", "rerun with -vv for TensorRT's log"),
])
def test_the_cli_spells_the_api_words_as_its_flags(api_words, cli_words):
    assert as_cli(api_words) == cli_words


def test_a_library_error_names_the_parameter_and_the_cli_error_the_flag(tmp_path, invoke):
    prototxt = SAMPLES / "captioner" / "captioner.prototxt"
    with pytest.raises(CaffeLstmError) as info:
        caffe_lstm.load(prototxt, outputs=["nope"])
    assert info.value.line().startswith("outputs= names unknown blob(s) nope")
    result = invoke("inspect", prototxt, "--outputs", "nope")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        (f"error: --outputs names unknown blob(s) nope, {prototxt}, run `caffe-lstm inspect` "
         "to list the blob names")]


# ---- typed options ------------------------------------------------------------------------------


@pytest.mark.parametrize("enum", [State, Runtime, Route, LstmOp])
def test_a_mode_is_its_value(enum):
    for member in enum:
        assert enum.parse(member.value, "x") is member and enum.parse(member, "x") is member
        assert member == member.value and str(member) == member.value
        assert {member.value: 1}[member] == 1
    with pytest.raises(CaffeLstmError) as info:
        enum.parse("nope", "param")
    assert info.value.line().startswith(
        f"param 'nope' is not one of {', '.join(m.value for m in enum)}, param=")


def test_the_api_takes_a_member_or_its_value_and_refuses_another():
    net = caffe_lstm.load(SAMPLES / "captioner" / "captioner.prototxt",
                          SAMPLES / "captioner" / "captioner.caffemodel")
    inputs = net.random_inputs(seed=1)
    by_value = net.run(inputs, state="io")
    by_member = net.run(inputs, state=State.IO)
    assert by_value.keys() == by_member.keys() and any("/h_T" in name for name in by_value)
    for name in by_value:
        assert (by_value[name] == by_member[name]).all()
    with pytest.raises(CaffeLstmError, match="state 'both' is not one of auto, zero, io"):
        net.run(inputs, state="both")
    with pytest.raises(CaffeLstmError, match="via 'trtexec' is not one of caffe-lstm, onnx"):
        net.build_engine(via="trtexec")
    with pytest.raises(CaffeLstmError, match="runtime 'cuda' is not one of auto, tensorrt, "):
        net.build_engine(runtime="cuda")


def test_each_shared_option_is_declared_once_in_the_cli():
    """--runtime, --state, --opset and --shape: spelled once each, in cli/options.py (and in
    the table that translates the API's parameter names to them)."""
    declared: dict[str, list[str]] = {}
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        if path.name == "words.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in (
                    "--runtime", "--state", "--opset", "--shape"):
                declared.setdefault(node.value, []).append(path.name)
    assert declared == {flag: ["options.py"]
                        for flag in ("--runtime", "--state", "--opset", "--shape")}
    assert "__click_params__" not in "".join(
        path.read_text(encoding="utf-8") for path in (PACKAGE / "cli").glob("*.py"))


# ---- a net with nothing to compute --------------------------------------------------------------

NO_LAYERS = 'name: "empty"\ninput: "data"\ninput_shape { dim: 2 dim: 3 }\n'
ONE_RELU = ('name: "relu"\n'
            'layer { name: "data" type: "Input" top: "data"\n'
            '  input_param { shape { dim: 2 dim: 3 } } }\n'
            'layer { name: "r" type: "ReLU" bottom: "data" top: "y" }\n')
NO_LAYERS_LINE = ("error: the net has no layers to compute, {net}, check that this is the net "
                  "definition, with its layers")
NOTHING_LEFT_LINE = ("error: nothing is left to compute: the outputs data are net inputs, {net}, "
                     "name blobs that layers compute in --outputs")
PRODUCERS = {
    "run": ("run", "{net}", "-w", "{weights}", "-o", "{out}/y.npz"),
    "export": ("export", "{net}", "-w", "{weights}", "-o", "{out}/m.onnx"),
    "convert": ("convert", "{net}", "-w", "{weights}", "-o", "{out}/m.engine"),
    "rewrite": ("rewrite", "{net}", "-w", "{weights}", "-o", "{out}"),
    "weights init": ("weights", "init", "{net}", "-o", "{out}/w.caffemodel"),
    "triton": ("triton", "{net}", "-w", "{weights}", "-o", "{out}"),
}


@pytest.mark.parametrize("command", PRODUCERS)
@pytest.mark.parametrize("text, extra, line", [
    (NO_LAYERS, (), NO_LAYERS_LINE),
    (ONE_RELU, ("--outputs", "data"), NOTHING_LEFT_LINE),
], ids=["no-layers", "nothing-left-after-outputs"])
def test_a_net_with_nothing_to_compute_is_one_error_line(tmp_path, invoke, command, text, extra,
                                                         line):
    from caffe_lstm.frontend.caffe_writer import write_caffemodel

    if command == "convert":
        pytest.importorskip("tensorrt_rtx_bindings", reason="convert checks its runtime first")
    net, weights, out = tmp_path / "net.prototxt", tmp_path / "net.caffemodel", tmp_path / "out"
    net.write_text(text)
    write_caffemodel(weights, [])
    args = [arg.format(net=net, weights=weights, out=out) for arg in PRODUCERS[command]]
    result = invoke(*args, *extra)
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines() == [line.format(net=net)]
    assert result.stdout == "" and not out.exists()


# ---- docs/api.md writes the signatures as they are ----------------------------------------------

API_DOC = ROOT / "docs" / "api.md"


def _documented_signatures() -> dict[str, str]:
    """name -> the parameter list docs/api.md writes: ``caffe_lstm.f(...)`` in headings and
    ``method(...)`` in the first column of the Net table."""
    text = API_DOC.read_text(encoding="utf-8")
    found = {f"caffe_lstm.{name}": params for name, params in
             re.findall(r"^### `caffe_lstm\.(\w+)\((.*?)\)(?: -> \w+)?`$", text, flags=re.M)}
    found |= {f"Net.{name}": params for name, params in
              re.findall(r"^\| `(\w+)\((.*?)\)` \|", text, flags=re.M)}
    return found


def _parameters(params: str) -> list[tuple[str, str, object]]:
    """(name, kind, default) of a parameter list as written, e.g. ``a, b=1, *, c="x"``."""
    function = ast.parse(f"def f({params}): pass").body[0]
    arguments = function.args
    positional = arguments.posonlyargs + arguments.args
    defaults = [inspect.Parameter.empty] * (len(positional) - len(arguments.defaults)) + [
        ast.literal_eval(d) for d in arguments.defaults]
    rows = [(a.arg, "POSITIONAL_OR_KEYWORD", d) for a, d in zip(positional, defaults)]
    return rows + [(a.arg, "KEYWORD_ONLY", inspect.Parameter.empty if d is None
                    else ast.literal_eval(d))
                   for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults)]


def _actual(function) -> list[tuple[str, str, object]]:
    return [(p.name, p.kind.name, p.default)
            for p in inspect.signature(function).parameters.values() if p.name != "self"]


def test_docs_api_writes_every_public_method_of_net():
    methods = {f"Net.{name}" for name, member in vars(caffe_lstm.Net).items()
               if callable(member) and not name.startswith("_") and name != "copy"}
    documented = set(_documented_signatures())
    assert methods - documented == set()
    assert {"caffe_lstm.load", "caffe_lstm.run_engine"} <= documented


@pytest.mark.parametrize("name", sorted(_documented_signatures()))
def test_docs_api_signature_is_the_real_one(name):
    owner, attribute = name.split(".")
    function = getattr(caffe_lstm if owner == "caffe_lstm" else caffe_lstm.Net, attribute)
    assert _parameters(_documented_signatures()[name]) == _actual(function)


def test_the_api_module_is_the_face():
    """api.py holds load, Net, the result types and route selection; the helpers live in the
    layer that owns them (issue 16: at most 500 lines)."""
    source = (PACKAGE / "api.py").read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 500
    for helper in ("_profiles", "_check_profiles", "_state_profile", "_maybe_atomic",
                   "_refuse_to_overwrite", "_nothing_left_on_error", "_replace_layer",
                   "require_tensorrt", "require_graphviz", "write_dot_file"):
        assert f"def {helper}(" not in source, helper
    for table in ("Profile", "STATE_MODES", "VIA_ROUTES", "LSTM_OPS"):
        assert f"\n{table} = " not in source, table
