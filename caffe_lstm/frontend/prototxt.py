"""Reading a .prototxt: protobuf text format against our schema, with file:line:column errors;
what the schema does not know is set aside first (``textscan``)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from google.protobuf import text_format

from caffe_lstm.errors import ModelLoadError
from caffe_lstm.frontend.textscan import LayerEntry, UnknownEntry, scan_prototxt
from caffe_lstm.proto import caffe_pb2


class PrototxtNet(NamedTuple):
    """A parsed net definition: the message, its layer entries, the unknown net-level fields."""

    net: caffe_pb2.NetParameter
    layers: list[LayerEntry]
    net_unknown: list[UnknownEntry]


def read_prototxt(path: str | Path) -> PrototxtNet:
    """Parses a net definition, tolerating what the schema does not know.

    Unknown fields, unknown enum values and unknown messages are taken out of the text first
    (``textscan``) and recorded on the ``layer``/``layers`` entry they belong to; whether one
    matters is decided later, for the layers that are actually converted.

    Returns:
        The NetParameter; every top-level ``layer``/``layers`` entry in file order (``layer``
        entries first, then ``layers``) with its 1-based line and its unknown entries; and the
        unknown fields outside any layer.

    Raises:
        ModelLoadError: the file is missing, not UTF-8 text, or not a valid NetParameter.
    """
    path = Path(path)
    scan = scan_prototxt(_read_text(path), caffe_pb2.NetParameter.DESCRIPTOR)
    net = caffe_pb2.NetParameter()
    try:
        text_format.Parse(scan.text, net)
    except text_format.ParseError as exc:
        raise _parse_error(exc, path) from None
    except RecursionError:  # the parser recurses once per nested message
        raise ModelLoadError("invalid prototxt: messages are nested too deeply to parse",
                             str(path), "check the braces; real nets nest a few levels") from None
    return PrototxtNet(net, scan.layer_entries(), scan.net_unknown)


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
            "prototxt= is the .prototxt; the .caffemodel goes to weights=") from None


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
    """Lines of the top-level ``layer {`` / ``layers {`` entries, ``layer`` ones first
    (comments and strings skipped)."""
    scan = scan_prototxt(text, caffe_pb2.NetParameter.DESCRIPTOR)
    return [entry.line for entry in scan.layer_entries()]
