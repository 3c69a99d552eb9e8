"""The project's exception types.

User mistakes raise a subclass of CaffeLstmError; the CLI prints them as one line
``error: <what>, <where>, <hint>`` and exits with status 1. Anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations


class CaffeLstmError(Exception):
    """Base of every user-facing error.

    Args:
        what: what is wrong (expected vs found).
        where: ``file:line:column`` or ``layer 'name' (Type)``; empty when nothing narrower applies.
        hint: what the user can do about it.
    """

    def __init__(self, what: str, where: str = "", hint: str = "") -> None:
        self.what, self.where, self.hint = what, where, hint
        super().__init__(self.line())

    def line(self) -> str:
        """The message as one line, without the ``error:`` prefix."""
        text = ", ".join(part for part in (self.what, self.where, self.hint) if part)
        return " ".join(text.split())


class ModelLoadError(CaffeLstmError):
    """An unreadable prototxt, caffemodel or inputs file, or weights that do not fit the net."""


class UnsupportedLayerError(CaffeLstmError):
    """Layer types the tool cannot handle; lists every one of them at once."""


class ShapeError(CaffeLstmError):
    """A blob shape that a layer cannot accept."""


class GraphError(CaffeLstmError):
    """A net whose wiring is wrong: unknown bottoms, duplicate tops, unknown outputs."""


class ExecutionError(CaffeLstmError):
    """A failure while executing a node, wrapped with the node's name."""


class OutputError(CaffeLstmError):
    """An output file that cannot be written."""


def layer_where(name: str, type_: str) -> str:
    """The ``where`` part for a layer: ``layer 'lstm1' (LSTM)``."""
    return f"layer '{name}' ({type_})"


class VerificationError(CaffeLstmError):
    """Outputs that differ beyond the tolerances (``verify``)."""
