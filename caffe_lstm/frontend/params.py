"""A format-free view of a layer's parameter message, handed to the ops' ``parse`` facet.

Ops never see protobuf: they read ``p.axis`` (the value, or the schema default when the field
is absent), ``p.has("axis")`` (proto2 presence, which Caffe tests in several places) and
nested messages as further ``Params``. Enum values arrive as their names (``"SUM"``).
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message


class Params:
    """Read-only attribute access to one message, with defaults and presence."""

    def __init__(self, values: dict[str, Any], present: frozenset[str]) -> None:
        self._values = values
        self._present = present

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"parameter message has no field {name!r}") from None

    def has(self, name: str) -> bool:
        """Whether the field was written (a repeated field: whether it has any entry)."""
        return name in self._present

    def updated(self, other: Params) -> Params:
        """These fields and ``other``'s (a fork's fields declared inside this message)."""
        return Params({**self._values, **other._values}, self._present | other._present)

    def __repr__(self) -> str:
        return f"Params({self._values})"


def to_params(message: Message) -> Params:
    """Converts a protobuf message (with its defaults) into Params."""
    values: dict[str, Any] = {}
    present: set[str] = set()
    for field in message.DESCRIPTOR.fields:
        values[field.name] = _field_value(message, field)
        if _is_present(message, field):
            present.add(field.name)
    return Params(values, frozenset(present))


def _is_present(message: Message, field: FieldDescriptor) -> bool:
    if is_repeated(field):
        return len(getattr(message, field.name)) > 0
    return message.HasField(field.name)


def is_repeated(field: FieldDescriptor) -> bool:
    # Newer protobuf runtimes expose the property is_repeated and dropped label.
    if hasattr(type(field), "is_repeated"):
        return bool(field.is_repeated)
    return field.label == FieldDescriptor.LABEL_REPEATED


def _field_value(message: Message, field: FieldDescriptor) -> Any:
    raw = getattr(message, field.name)
    if is_repeated(field):
        return [_scalar(field, item) for item in raw]
    return _scalar(field, raw)


def _scalar(field: FieldDescriptor, raw: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return to_params(raw)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values_by_number[raw].name
    return raw
