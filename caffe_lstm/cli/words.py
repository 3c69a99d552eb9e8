"""The API's words in error messages, spelled as the command line's flags.

Below ``cli/`` an error names what the library was given: a parameter (``outputs=``,
``shapes['data']``, ``lstm_op='scan'``), a blob, a layer. The command line prints the same
error with its own option names in place of the parameters; this module is the one place that
knows both spellings (the test in tests/test_api_seams.py checks that every phrase here still
occurs in the library and that no flag name is spelled below ``cli/``).
"""

from __future__ import annotations

import re

from caffe_lstm.errors import CaffeLstmError

#: Whole phrases first: where the CLI's wording is not a parameter-for-flag swap.
PHRASES: tuple[tuple[str, str], ...] = (
    ("raise the memory limit", "raise --max-memory"),
    ("choose another output directory", "choose another -o directory"),
    ("rendering SVG needs", "--svg needs"),
    ("or do not render SVG", "or leave out --svg"),
    ("pass the trained weights as weights=W.caffemodel",
     "pass the trained weights with -w/--weights W.caffemodel"),
    ("prototxt= is the .prototxt; the .caffemodel goes to weights=",
     "the positional argument is the .prototxt; weights go to -w/--weights"),
    ("outputs=[NAME, ...]", "--outputs NAME[,NAME...]"),
    ("verbosity=1", "-v"),
    ("verbosity=2", "-vv"),
    ("or run with numpy (Net.run)", "or use --backend numpy"),
    ("as a plugin (docs/plugins.md)", "as a plugin (--plugin, docs/plugins.md)"),
    ("plugins=[...]", "--plugin FILE.py|MODULE"),
    ("python_path=DIR", "--python-path DIR"),
    ("(the traceback is the error's __cause__)", "(--debug shows its traceback)"),
    ("(batch_axes={NAME: AXIS})", "(--batch-axis NAME:AXIS)"),
    ("(max_batch=0)", "(--max-batch 0)"),
    ("turned off (tensorrt=False)", "turned off (--no-trt)"),
    ("turned off (onnxruntime=False)", "turned off (--no-onnxruntime)"),
    ("no engine given (engine=PATH)", "no engine given (--engine FILE)"),
    ("run it without a previous call's final states", "leave out --state-from"),
    ("the prototxt's fillers as written (fillers=True)",
     "the prototxt's fillers as written (`weights init --fillers`)"),
)

#: API parameter -> the CLI flag that gives it.
FLAGS: dict[str, str] = {
    "weights": "-w", "outputs": "--outputs", "shapes": "--shape", "phase": "--phase",
    "stages": "--stage", "state": "--state", "runtime": "--runtime", "via": "--via",
    "fp16": "--fp16", "opset": "--opset", "lstm_op": "--lstm-op", "layer": "--layer",
    "layout": "--layout", "max_batch": "--max-batch", "fillers": "--fillers",
    "backend": "--backend", "atol": "--atol", "rtol": "--rtol",
}

_PARAM = r"(?<![\w.])(" + "|".join(FLAGS) + r")"
_QUOTED = r"'([^']*)'"
#: shapes={'a': DIMS, 'b': (1, N)} -> --shape a:DIMS --shape b:1xN
_SHAPE_ENTRY = r"'([^']*)': (DIMS|\([^)]*\))"
_SHAPES_DIMS = re.compile(r"shapes=\{((?:" + _SHAPE_ENTRY + r"(?:, )?)+)\}")
#: stages=['a', 'b'] -> --stage a --stage b
_LIST = re.compile(_PARAM + r"=\[((?:'[^']*'(?:, )?)*)\]")
#: shapes['data'] -> --shape data
_INDEXED = re.compile(_PARAM + r"\[" + _QUOTED + r"\]")
#: via='onnx' -> --via onnx; opset=18 -> --opset 18; fp16=True -> --fp16
_VALUED = re.compile(_PARAM + r"=(?:" + _QUOTED + r"|([\w.+-]+))")
#: outputs= -> --outputs
_BARE = re.compile(_PARAM + r"=(?![\w'\[{])")


def as_cli(text: str) -> str:
    """``text`` with the API's parameter spellings replaced by the CLI's flags."""
    for api_words, cli_words in PHRASES:
        text = text.replace(api_words, cli_words)
    text = _SHAPES_DIMS.sub(lambda m: " ".join(
        f"--shape {name}:{'x'.join(dims.strip('()').split(', '))}"
        for name, dims in re.findall(_SHAPE_ENTRY, m.group(1))), text)
    text = _LIST.sub(lambda m: " ".join(
        f"{FLAGS[m.group(1)]} {item}" for item in re.findall(_QUOTED, m.group(2))), text)
    text = _INDEXED.sub(lambda m: f"{FLAGS[m.group(1)]} {m.group(2)}", text)
    text = _VALUED.sub(_valued, text)
    return _BARE.sub(lambda m: FLAGS[m.group(1)], text)


def _valued(match: re.Match) -> str:
    flag, value = FLAGS[match.group(1)], match.group(2) or match.group(3)
    return flag if value == "True" else f"{flag} {value}"


def cli_line(error: CaffeLstmError) -> str:
    """The error's one line as the command line prints it (without ``error:``)."""
    return as_cli(error.line())
