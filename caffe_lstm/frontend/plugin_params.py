"""A plugin's own parameter message, read from the prototxt's text (docs/plugins.md).

caffe-lstm's schema does not know a plugin's ``norm_param { ... }``: the tolerant reader
(``textscan``) takes it out of the text and keeps its text on the layer. Here that text is
parsed by protobuf's own text parser against a message built from the plugin's declaration
(``Op.param_fields``: ``ParamField`` per field), so a plugin gets proto2 semantics (defaults,
presence, enum names, repeated fields, a field written twice refused) without any change to
caffe.proto, and a bad value is one error at its file:line:column.
"""

from __future__ import annotations

import keyword
import re
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

from caffe_lstm.errors import ModelLoadError, layer_where
from caffe_lstm.frontend.params import Params, to_params
from caffe_lstm.frontend.textscan import UnknownEntry
from caffe_lstm.frontend.upgrade import SourceLayer
from caffe_lstm.ops import Op, ParamField, PluginError, get_op
from caffe_lstm.ops.plugins import plugin_of
from caffe_lstm.proto import caffe_pb2

#: The fields of caffe-lstm's LayerParameter: a param not among them is a plugin's own message.
LAYER_FIELDS = frozenset(f.name for f in caffe_pb2.LayerParameter.DESCRIPTOR.fields)
_FIELD_TYPE = descriptor_pb2.FieldDescriptorProto
_SCALARS = {int: _FIELD_TYPE.TYPE_INT64, float: _FIELD_TYPE.TYPE_FLOAT,
            bool: _FIELD_TYPE.TYPE_BOOL, str: _FIELD_TYPE.TYPE_STRING}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CLASSES: dict[type[Op], Any] = {}


def has_own_message(op: type[Op]) -> bool:
    """Whether ``op`` reads a param message caffe-lstm's schema lacks (a plugin's own)."""
    return op.param is not None and op.param not in LAYER_FIELDS


def reads_entry(layer_type: str, unknown: UnknownEntry) -> bool:
    """Whether ``unknown`` is the param message a plugin op of ``layer_type`` reads."""
    op = get_op(layer_type)
    return (op is not None and has_own_message(op) and unknown.rule is None
            and unknown.path == op.param)


def plugin_params(op: type[Op], source: SourceLayer, file: str) -> Params:
    """The layer's ``op.param`` message as Params (defaults where absent)."""
    layer = source.layer
    where = layer_where(layer.name, layer.type)
    wrapper = _message_class(op, where)()
    entries = [u for u in source.unknown if reads_entry(layer.type, u)]
    try:
        text_format.Parse(_placed(entries), wrapper)
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        what = _readable(str(exc), op.param)
        raise ModelLoadError(f"invalid {op.param}: {what}", f"{file}:{line}:{column}",
                             f"{_owner(op)} declares its fields as {_listing(op.param_fields)}"
                             ) from None
    return to_params(getattr(wrapper, op.param))


def _readable(message: str, param: str) -> str:
    """protobuf's message without its location prefix, the quoted line and our generated
    message names (``caffe_lstm_plugin_0.Params.ModeEnum`` -> the param's name)."""
    message = message.split(" : ", 1)[-1]
    if message.startswith("'") and "': " in message:
        message = message.split("': ", 1)[1]
    message = re.sub(r"caffe_lstm_plugin_\d+\.Params(\.\w+)*", param, message)
    return " ".join(message.rstrip(".").split())


def _placed(entries: list[UnknownEntry]) -> str:
    """The entries' texts at their own lines and columns (blank elsewhere), so that protobuf's
    line:column of an error is the file's."""
    parts, line, column = [], 1, 1
    for entry in sorted(entries, key=lambda u: (u.line, u.column)):
        if entry.line > line:
            parts.append("\n" * (entry.line - line))
            line, column = entry.line, 1
        parts.append(" " * max(entry.column - column, 1 if parts else 0))
        parts.append(entry.text)
        newlines = entry.text.count("\n")
        line += newlines
        column = (len(entry.text) - entry.text.rfind("\n") if newlines
                  else entry.column + len(entry.text))
    return "".join(parts)


def _message_class(op: type[Op], where: str) -> Any:
    """The protobuf class of a message holding ``op.param`` as declared (cached per op)."""
    if op in _CLASSES:
        return _CLASSES[op]
    if not isinstance(op.param_fields, dict):
        raise PluginError(f"{_owner(op)} reads '{op.param}', which caffe-lstm's schema lacks, "
                          "and declares no param_fields", where,
                          "declare its fields: param_fields = {name: ParamField(...)}, see "
                          "docs/plugins.md")
    package = f"caffe_lstm_plugin_{len(_CLASSES)}"
    proto = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package,
                                               syntax="proto2")
    params = proto.message_type.add(name="Params")
    _declare(params, op.param_fields, f".{package}.Params", op, where)
    layer = proto.message_type.add(name="Layer")
    _check_name(op.param, op, where)
    layer.field.add(name=op.param, number=1, label=_FIELD_TYPE.LABEL_OPTIONAL,
                    type=_FIELD_TYPE.TYPE_MESSAGE, type_name=f".{package}.Params")
    pool = descriptor_pool.DescriptorPool()
    try:
        pool.Add(proto)
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Layer"))
    except (TypeError, ValueError) as exc:
        raise PluginError(f"{_owner(op)} declares param_fields protobuf refuses: {exc}", where,
                          "see ParamField in docs/plugins.md") from None
    _CLASSES[op] = cls
    return cls


def _declare(message: descriptor_pb2.DescriptorProto, fields: dict[str, ParamField],
             full_name: str, op: type[Op], where: str) -> None:
    for number, (name, spec) in enumerate(fields.items(), start=1):
        _check_name(name, op, where)
        if not isinstance(spec, ParamField):
            raise PluginError(f"{_owner(op)} declares field '{name}' as {spec!r}, not a "
                              "ParamField", where, "see ParamField in docs/plugins.md")
        label = _FIELD_TYPE.LABEL_REPEATED if spec.repeated else _FIELD_TYPE.LABEL_OPTIONAL
        added = message.field.add(name=name, number=number, label=label)
        if spec.fields is not None:
            nested = message.nested_type.add(name=f"{name.title().replace('_', '')}Message")
            _declare(nested, spec.fields, f"{full_name}.{nested.name}", op, where)
            added.type, added.type_name = _FIELD_TYPE.TYPE_MESSAGE, f"{full_name}.{nested.name}"
            continue
        if spec.choices:
            enum = message.enum_type.add(name=f"{name.title().replace('_', '')}Enum")
            for index, choice in enumerate(spec.choices):
                _check_name(choice, op, where)
                enum.value.add(name=choice, number=index)
            added.type, added.type_name = _FIELD_TYPE.TYPE_ENUM, f"{full_name}.{enum.name}"
        else:
            added.type = _SCALARS[spec.type]
        if spec.default is not None and not spec.repeated:
            added.default_value = _default_text(spec)


def _default_text(spec: ParamField) -> str:
    if spec.type is bool:
        return "true" if spec.default else "false"
    return str(spec.default) if spec.type is not float else repr(float(spec.default))


def _check_name(name: str, op: type[Op], where: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name) or keyword.iskeyword(name):
        raise PluginError(f"{_owner(op)} declares the field name {name!r}", where,
                          "field names are identifiers (letters, digits, _)")


def _owner(op: type[Op]) -> str:
    plugin = plugin_of(op.type)
    return f"the {plugin.label}" if plugin is not None else f"layer type {op.type}"


def _listing(fields: dict[str, ParamField] | None) -> str:
    def kind(spec: ParamField) -> str:
        text = (spec.type.__name__ if spec.type is not None else
                "one of " + "/".join(spec.choices) if spec.choices else "a message")
        return f"repeated {text}" if spec.repeated else text

    return ", ".join(f"{name}: {kind(spec)}" for name, spec in (fields or {}).items())
