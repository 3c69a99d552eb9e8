"""A tolerant first pass over a prototxt: finds what our schema does not know, before protobuf.

Protobuf's text parser refuses a whole file for one field it does not know. Real nets come from
forks that added fields (``image_data_param { color_aug: ... }``, ``psroi_pooling_param {...}``)
to layers that often are not even converted (data, loss and post-processing layers). So this
scanner walks the tokens against the message descriptors of ``caffe_pb2`` and, for every unknown
field, unknown enum value and unknown message:

- records it (its path inside the layer, line and column, and the top-level ``layer``/``layers``
  entry it belongs to), and
- blanks its text (spaces, newlines kept), so protobuf parses the rest and every line:column
  of a later syntax error is still the file's own.

The scanner never raises: on anything it does not understand (a syntax error) it stops, keeps
what it found so far, and protobuf reports the error with its location as before. It is
iterative (an explicit stack), so deep nesting cannot overflow Python's stack, and linear in the
file size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from google.protobuf.descriptor import Descriptor, FieldDescriptor

#: Field kinds of an unknown entry: a scalar field, a whole message, an enum value.
FIELD, MESSAGE, VALUE = "field", "message", "value"
#: The NetParameter fields whose entries are layers (``layer`` ones are listed first).
LAYER_FIELDS = ("layer", "layers")
#: The rule messages of a layer: an unknown entry inside one makes that rule never match.
RULE_FIELDS = ("include", "exclude")

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<word>[A-Za-z0-9_.+-]+)
  | (?P<symbol>[{}<>:\[\],;])
""", re.VERBOSE)
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*\Z")
_CLOSING = {"{": "}", "<": ">"}


@dataclass(frozen=True)
class UnknownEntry:
    """Something the schema does not know, found in the prototxt.

    Attributes:
        path: dotted field path inside its layer (or inside the net for net-level fields), e.g.
            ``image_data_param.color_aug``; for an unknown enum value, the field's path.
        kind: ``"field"``, ``"message"`` (a whole ``name { ... }`` block) or ``"value"`` (an
            enum value the field's enum lacks).
        line, column: where its name starts (1-based).
        message: the full name of the message it sits in (``caffe.FillerParameter``).
        value: the unknown enum value's text (kind ``"value"``), else empty.
        rule: ``("include", i)`` / ``("exclude", i)`` when it sits inside the i-th rule of its
            layer, else None.
        text: the entry's own text, name to end (what a plugin's param message is read from).
    """

    path: str
    kind: str
    line: int
    column: int
    message: str
    value: str = ""
    rule: tuple[str, int] | None = None
    text: str = field(default="", repr=False, compare=False)


@dataclass
class LayerEntry:
    """One top-level ``layer``/``layers`` entry: its line and the unknown entries inside it."""

    field: str
    line: int
    unknown: list[UnknownEntry] = field(default_factory=list)


@dataclass
class ScanResult:
    """The blanked text, the layer entries in file order per field, and net-level unknowns."""

    text: str
    entries: dict[str, list[LayerEntry]]
    net_unknown: list[UnknownEntry]

    def layer_entries(self) -> list[LayerEntry]:
        """``layer`` entries, then ``layers`` entries (the order upgrade_net expects)."""
        return [entry for name in LAYER_FIELDS for entry in self.entries[name]]


@dataclass
class _Token:
    kind: str
    text: str
    start: int
    end: int
    line: int
    column: int


def tokenize(text: str) -> list[_Token]:
    """The tokens of ``text`` (whitespace and comments dropped); stops at the first character
    no token starts with, leaving a final ``bad`` token there."""
    tokens, pos, line, line_start, n = [], 0, 1, 0, len(text)
    while pos < n:
        match = _TOKEN.match(text, pos)
        if match is None:
            tokens.append(_Token("bad", text[pos], pos, pos + 1, line, pos - line_start + 1))
            break
        kind = match.lastgroup
        if kind not in ("space", "comment"):
            tokens.append(_Token(kind, match.group(), pos, match.end(), line,
                                 pos - line_start + 1))
        newlines = text.count("\n", pos, match.end())
        if newlines:
            line += newlines
            line_start = text.rfind("\n", pos, match.end()) + 1
        pos = match.end()
    return tokens


@dataclass
class _Frame:
    """A message being scanned: its descriptor, the token that closes it, its path."""

    descriptor: Descriptor
    closing: str | None  # None: the top level, closed by the end of the file
    path: str
    entry: LayerEntry | None
    rule: tuple[str, int] | None
    counts: dict[str, int] = field(default_factory=dict)


class _Scanner:
    def __init__(self, text: str, root: Descriptor) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.pos = 0
        self.blanks: list[tuple[int, int]] = []
        self.entries: dict[str, list[LayerEntry]] = {name: [] for name in LAYER_FIELDS}
        self.net_unknown: list[UnknownEntry] = []
        self.stack = [_Frame(root, None, "", None, None)]

    # ---- tokens ---------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> _Token | None:
        index = self.pos + ahead
        return self.tokens[index] if index < len(self.tokens) else None

    def is_symbol(self, token: _Token | None, *symbols: str) -> bool:
        return token is not None and token.kind == "symbol" and token.text in symbols

    # ---- the walk -------------------------------------------------------------------------

    def run(self) -> ScanResult:
        try:
            while self.step():
                pass
        except _Stop:
            pass
        return ScanResult(self._blanked(), self.entries, self.net_unknown)

    def step(self) -> bool:
        """Scans one field (or closes one message); False at the end of the file."""
        frame, token = self.stack[-1], self.peek()
        if token is None:
            return False  # unclosed messages at the end: protobuf reports them
        if frame.closing is not None and self.is_symbol(token, frame.closing):
            self.pos += 1
            self.stack.pop()
            self._skip_separator()
            return True
        if token.kind != "word" or not _IDENTIFIER.match(token.text):
            raise _Stop  # a field name was expected: a syntax error
        self.pos += 1
        descriptor = frame.descriptor.fields_by_name.get(token.text)
        if descriptor is None:
            self._unknown_field(frame, token)
        elif descriptor.type == FieldDescriptor.TYPE_MESSAGE:
            self._message_field(frame, token, descriptor)
        else:
            self._scalar_field(frame, token, descriptor)
        self._skip_separator()
        return True

    def _message_field(self, frame: _Frame, name: _Token, descriptor: FieldDescriptor) -> None:
        if self.is_symbol(self.peek(), ":"):
            self.pos += 1
        opening = self.peek()
        if self.is_symbol(opening, "["):  # a list of messages: rare; skipped, not checked
            self._skip_list()
            return
        if not self.is_symbol(opening, "{", "<"):
            raise _Stop
        self.pos += 1
        count = frame.counts.get(name.text, 0)
        frame.counts[name.text] = count + 1
        entry, rule = frame.entry, frame.rule
        path = _join(frame.path, name.text)
        if frame.closing is None and name.text in LAYER_FIELDS:
            entry = LayerEntry(name.text, name.line)
            self.entries[name.text].append(entry)
            path = ""
        elif frame.path == "" and frame.entry is not None and name.text in RULE_FIELDS:
            rule = (name.text, count)
        self.stack.append(_Frame(descriptor.message_type, _CLOSING[opening.text], path, entry,
                                 rule))

    def _scalar_field(self, frame: _Frame, name: _Token, descriptor: FieldDescriptor) -> None:
        if not self.is_symbol(self.peek(), ":"):
            raise _Stop
        self.pos += 1
        value = self.peek()
        if self.is_symbol(value, "["):
            self._skip_list()
            return
        self._skip_scalar()
        if descriptor.type == FieldDescriptor.TYPE_ENUM and not _enum_has(descriptor, value.text):
            self._record(frame, name, VALUE, value.text)

    def _unknown_field(self, frame: _Frame, name: _Token) -> None:
        kind = FIELD
        if self.is_symbol(self.peek(), ":"):
            self.pos += 1
        after = self.peek()
        if self.is_symbol(after, "{", "<"):
            kind = MESSAGE
            self._skip_block()
        elif self.is_symbol(after, "["):
            self._skip_list()
        else:
            self._skip_scalar()
        self._record(frame, name, kind)

    # ---- skipping values --------------------------------------------------------------------

    def _skip_scalar(self) -> None:
        """One scalar: a word, or adjacent strings (which protobuf concatenates)."""
        token = self.peek()
        if token is None or token.kind not in ("word", "string"):
            raise _Stop
        self.pos += 1
        while token.kind == "string" and (nxt := self.peek()) is not None \
                and nxt.kind == "string":
            self.pos += 1

    def _skip_block(self) -> None:
        """A balanced ``{...}``/``<...>`` (any nesting), starting at its opening token."""
        depth = 0
        while (token := self.peek()) is not None:
            self.pos += 1
            if token.kind == "bad":
                raise _Stop
            if self.is_symbol(token, "{", "<"):
                depth += 1
            elif self.is_symbol(token, "}", ">"):
                depth -= 1
                if depth == 0:
                    return
        raise _Stop

    def _skip_list(self) -> None:
        """A ``[...]`` list (of scalars or messages), starting at ``[``."""
        depth = 0
        while (token := self.peek()) is not None:
            self.pos += 1
            if token.kind == "bad":
                raise _Stop
            if self.is_symbol(token, "[", "{", "<"):
                depth += 1
            elif self.is_symbol(token, "]", "}", ">"):
                depth -= 1
                if depth == 0:
                    return
        raise _Stop

    def _skip_separator(self) -> None:
        if self.is_symbol(self.peek(), ",", ";"):
            self.pos += 1

    # ---- results ------------------------------------------------------------------------------

    def _record(self, frame: _Frame, name: _Token, kind: str, value: str = "") -> None:
        """Records the field that started at ``name`` and ended before the current token, and
        blanks it (with a separator that follows it)."""
        if self.is_symbol(self.peek(), ",", ";"):
            self.pos += 1
        end = self.tokens[self.pos - 1].end
        self.blanks.append((name.start, end))
        unknown = UnknownEntry(_join(frame.path, name.text), kind, name.line, name.column,
                               frame.descriptor.full_name, value, frame.rule,
                               self.text[name.start:end])
        (frame.entry.unknown if frame.entry is not None else self.net_unknown).append(unknown)

    def _blanked(self) -> str:
        if not self.blanks:
            return self.text
        parts, last = [], 0
        for start, end in self.blanks:
            parts.append(self.text[last:start])
            parts.append(re.sub(r"[^\n]", " ", self.text[start:end]))
            last = end
        parts.append(self.text[last:])
        return "".join(parts)


class _Stop(Exception):
    """The scanner met something it does not understand: protobuf will report it."""


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _enum_has(descriptor: FieldDescriptor, text: str) -> bool:
    """Whether ``text`` names (or numbers) a value of the field's enum."""
    values = descriptor.enum_type
    if text in values.values_by_name:
        return True
    try:
        return int(text, 0) in values.values_by_number
    except ValueError:
        return False


def scan_prototxt(text: str, root: Descriptor) -> ScanResult:
    """Scans ``text`` as a ``root`` message (NetParameter); see the module docstring."""
    return _Scanner(text, root).run()
