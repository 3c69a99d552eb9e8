"""Reading a .prototxt: protobuf text format against our schema, with file:line:column errors."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format

from caffe_lstm.errors import ModelLoadError
from caffe_lstm.proto import caffe_pb2

_LAYER_FIELDS = ("layer", "layers")


def read_prototxt(path: str | Path) -> tuple[caffe_pb2.NetParameter, list[int]]:
    """Parses a net definition.

    Returns:
        The NetParameter, and the 1-based line of every top-level ``layer``/``layers`` entry in
        file order (``layer`` entries first, then ``layers``), so messages can point at a layer.

    Raises:
        ModelLoadError: the file is missing, not UTF-8 text, or not a valid NetParameter.
    """
    path = Path(path)
    text = _read_text(path)
    net = caffe_pb2.NetParameter()
    try:
        text_format.Parse(text, net)
    except text_format.ParseError as exc:
        raise _parse_error(exc, path) from None
    except RecursionError:  # the parser recurses once per nested message
        raise ModelLoadError("invalid prototxt: messages are nested too deeply to parse",
                             str(path), "check the braces; real nets nest a few levels") from None
    return net, layer_lines(text)


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelLoadError(f"cannot read the net definition ({exc.strerror})", str(path),
                             "check the path") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelLoadError(
            f"the net definition is not UTF-8 text (byte {exc.start})", str(path),
            "the positional argument is the .prototxt; weights go to -w/--weights") from None


def _parse_error(exc: text_format.ParseError, path: Path) -> ModelLoadError:
    line, column = exc.GetLine(), exc.GetColumn()
    message = str(exc)
    # The runtime prefixes "line:column : " to the message; the location goes to `where`.
    prefix = f"{line}:{column} : "
    if message.startswith(prefix):
        message = message[len(prefix):]
    message = _shorten_quoted_line(message.rstrip("."))
    where = f"{path}:{line}:{column}" if line else str(path)
    return ModelLoadError(
        f"invalid prototxt: {message}", where,
        "fix the syntax or the field name (the schema is upstream Caffe's plus the common forks')")


def _shorten_quoted_line(message: str, limit: int = 80) -> str:
    """The parser quotes the whole offending line first (``'<line>': <what>``); a minified net
    is one line of megabytes, so a long quote is cut."""
    quote, sep, rest = message.rpartition("': ")  # the line itself may hold "': "
    if not (message.startswith("'") and sep) or len(quote) <= limit:
        return message
    return f"{quote[:limit]}...': {rest}"


def layer_lines(text: str) -> list[int]:
    """Lines of the top-level ``layer {`` / ``layers {`` entries, ``layer`` ones first.

    A small scanner that skips strings and ``#`` comments and tracks brace depth.
    """
    found: dict[str, list[int]] = {name: [] for name in _LAYER_FIELDS}
    depth, line, i, n = 0, 1, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch == "#":
            i = _skip_until(text, i, "\n") - 1
        elif ch in "\"'":
            line += text.count("\n", i, _skip_string(text, i))
            i = _skip_string(text, i) - 1
        elif ch in "{<":
            depth += 1
        elif ch in "}>":
            depth -= 1
        elif depth == 0 and (ch.isalpha() or ch == "_"):
            end = _skip_word(text, i)
            if text[i:end] in found:
                found[text[i:end]].append(line)
            i = end - 1
        i += 1
    return found["layer"] + found["layers"]


def _skip_until(text: str, i: int, stop: str) -> int:
    end = text.find(stop, i)
    return len(text) if end < 0 else end


def _skip_string(text: str, i: int) -> int:
    quote, j = text[i], i + 1
    while j < len(text) and text[j] != quote and text[j] != "\n":
        j += 2 if text[j] == "\\" else 1
    return j + 1


def _skip_word(text: str, i: int) -> int:
    j = i
    while j < len(text) and (text[j].isalnum() or text[j] == "_"):
        j += 1
    return j
