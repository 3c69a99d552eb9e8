"""Fields caffe-lstm's schema lacks, read from the prototxt's text as an op declares them
(``Op.param_fields``, docs/plugins.md).

caffe-lstm's schema does not know a plugin's ``norm_param { ... }``, nor the fields a fork adds
inside a message it knows (``recurrent_param { wxc_convolution_param { ... } }``): the tolerant
reader (``textscan``) takes them out of the text and keeps their text on the layer. Here that
text is parsed by protobuf's own text parser against a message built from the op's declaration
(``ParamField`` per field), so an op gets proto2 semantics (defaults, presence, enum names,
repeated fields, a field written twice refused) without any change to caffe.proto, and a bad
value is one error at its file:line:column.

- ``param`` not in the schema (a plugin's own message): ``param_fields`` are its fields.
- ``param`` in the schema (``recurrent_param``): ``param_fields`` are the fields the fork adds
  to it; ``parse`` sees them beside the schema's own fields.
"""

from __future__ import annotations

import keyword
import re
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

from caffe_lstm.errors import ModelLoadError, layer_where
from caffe_lstm.frontend.params import Params, to_params
from caffe_lstm.frontend.textscan import VALUE, UnknownEntry
from caffe_lstm.frontend.upgrade import SourceLayer
from caffe_lstm.ops import Op, ParamField, PluginError, get_op
from caffe_lstm.ops.plugins import class_site, plugin_of
from caffe_lstm.proto import caffe_pb2

#: The fields of caffe-lstm's LayerParameter: a param not among them is a plugin's own message.
LAYER_FIELDS = frozenset(f.name for f in caffe_pb2.LayerParameter.DESCRIPTOR.fields)
_FIELD_TYPE = descriptor_pb2.FieldDescriptorProto
_SCALARS = {int: _FIELD_TYPE.TYPE_INT64, float: _FIELD_TYPE.TYPE_FLOAT,
            bool: _FIELD_TYPE.TYPE_BOOL, str: _FIELD_TYPE.TYPE_STRING}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CLASSES: dict[type[Op], Any] = {}
#: caffe.proto's file, for declared fields whose type is one of its messages.
_SCHEMA = descriptor_pb2.FileDescriptorProto()
caffe_pb2.DESCRIPTOR.CopyToProto(_SCHEMA)


def has_own_message(op: type[Op]) -> bool:
    """Whether ``op`` reads a param message caffe-lstm's schema lacks (a plugin's own)."""
    return op.param is not None and op.param not in LAYER_FIELDS


def reads_entry(layer_type: str, unknown: UnknownEntry) -> bool:
    """Whether ``unknown`` is what the op of ``layer_type`` reads: its own param message, or a
    field it declares inside its param message of the schema."""
    op = get_op(layer_type)
    if op is None or op.param is None or unknown.rule is not None:
        return False
    if has_own_message(op):
        return unknown.path == op.param
    parent, _, name = unknown.path.rpartition(".")
    return (parent == op.param and unknown.kind != VALUE and isinstance(op.param_fields, dict)
            and name in op.param_fields)


def undeclared_hint(layer_type: str, unknown: UnknownEntry) -> str:
    """For an entry the schema lacks on a plugin's layer: the hint naming the plugin's
    declaration (``param_fields``): where to declare it when it sits inside the op's param
    message of the schema, else that the plugin reads none such. "" for a built-in's layer."""
    op, plugin = get_op(layer_type), plugin_of(layer_type)
    if op is None or plugin is None:
        return ""
    site = class_site(op)
    parent, _, name = unknown.path.rpartition(".")
    if op.param is not None and not has_own_message(op) and parent == op.param \
            and unknown.kind != VALUE:
        declared = f"{'' if op.param_fields else 'none yet, '}{site}"
        return (f"the {plugin.label} does not declare '{name}' inside {op.param}: declare it "
                f"in {op.__name__}.param_fields ({declared}) to read it, see "
                "docs/plugins.md#the-layers-parameters")
    where = f"only inside {op.param}" if op.param else "none"
    return (f"the {plugin.label} owns the layer and reads fields the schema lacks {where} "
            f"(its declaration: {op.__name__} at {site}): remove it if it only tunes training, "
            "or cut the layer off with outputs=[NAME, ...]")


def with_fork_fields(op: type[Op], source: SourceLayer, params: Params, file: str) -> Params:
    """``params`` (the layer's ``op.param`` message of the schema) with the fields the op
    declares inside it (``param_fields``) read from the text, defaults where absent."""
    if not op.param_fields:
        return params
    extra = _parsed(op, source, file, wrapped=False)
    return params.updated(to_params(extra))


def plugin_params(op: type[Op], source: SourceLayer, file: str) -> Params:
    """The layer's ``op.param`` message (a plugin's own) as Params (defaults where absent)."""
    return to_params(getattr(_parsed(op, source, file, wrapped=True), op.param))


def _parsed(op: type[Op], source: SourceLayer, file: str, wrapped: bool) -> Any:
    """The entries ``op`` reads of the layer, parsed: into a message holding ``op.param``
    (``wrapped``: the entry is the whole message) or into ``op.param``'s declared fields."""
    layer = source.layer
    cls = _message_class(op, layer_where(layer.name, layer.type))
    message = cls() if wrapped else _params_class(cls, op.param)()
    entries = [u for u in source.unknown if reads_entry(layer.type, u)]
    try:
        text_format.Parse(_placed(entries), message)
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        what = _readable(str(exc), op.param)
        raise ModelLoadError(f"invalid {op.param}: {what}", f"{file}:{line}:{column}",
                             f"{_owner(op)} declares {'its' if wrapped else 'the extra'} fields "
                             f"as {_listing(op.param_fields)}") from None
    return message


def _params_class(cls: Any, param: str) -> Any:
    """The class of the declared fields' message inside the wrapper ``cls``."""
    return message_factory.GetMessageClass(cls.DESCRIPTOR.fields_by_name[param].message_type)


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
    _check_not_in_schema(op, where)
    package = f"caffe_lstm_plugin_{len(_CLASSES)}"
    proto = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package,
                                               syntax="proto2",
                                               dependency=[caffe_pb2.DESCRIPTOR.name])
    params = proto.message_type.add(name="Params")
    _declare(params, op.param_fields, f".{package}.Params", op, where)
    layer = proto.message_type.add(name="Layer")
    _check_name(op.param, op, where)
    layer.field.add(name=op.param, number=1, label=_FIELD_TYPE.LABEL_OPTIONAL,
                    type=_FIELD_TYPE.TYPE_MESSAGE, type_name=f".{package}.Params")
    pool = descriptor_pool.DescriptorPool()
    try:
        pool.Add(_SCHEMA)
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
        if spec.message is not None:
            if spec.message not in caffe_pb2.DESCRIPTOR.message_types_by_name:
                raise PluginError(f"{_owner(op)} declares field '{name}' as a {spec.message}, "
                                  "which caffe-lstm's schema lacks", where,
                                  "name a message of caffe.proto (ConvolutionParameter, ...), "
                                  "or declare its fields with fields={...}")
            added.type, added.type_name = _FIELD_TYPE.TYPE_MESSAGE, f".caffe.{spec.message}"
            continue
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


def _check_not_in_schema(op: type[Op], where: str) -> None:
    """A field declared inside a message of the schema must be one the schema lacks."""
    if has_own_message(op):
        return
    known = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name[op.param].message_type
    if clash := [name for name in op.param_fields if name in known.fields_by_name]:
        raise PluginError(f"{_owner(op)} declares field '{clash[0]}' inside {op.param} "
                          f"({class_site(op)}), which caffe-lstm's schema has already", where,
                          "declare only the fields the fork adds (param_fields), see "
                          "docs/plugins.md")


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
                "one of " + "/".join(spec.choices) if spec.choices else
                f"a {spec.message}" if spec.message else "a message")
        return f"repeated {text}" if spec.repeated else text

    return ", ".join(f"{name}: {kind(spec)}" for name, spec in (fields or {}).items())
