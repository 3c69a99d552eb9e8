"""Layer types written outside caffe-lstm: plugins (docs/plugins.md).

A plugin is a Python module (or package) whose ``Op`` subclasses are registered with
``caffe_lstm.ops.register_op`` while the module is imported. It is found

- through the entry-point group ``caffe_lstm.ops`` of any installed distribution, loaded only
  when a net has a layer type no built-in op knows, or when ``inspect`` lists the plugins
  (``load_installed_plugins``); or
- explicitly: ``load_plugins(["my_layers.py", "my_package.ops", MyOp])`` (the API's
  ``plugins=``).

While a plugin is being loaded, ``register_op``

- refuses a type caffe-lstm (or another plugin) already has, unless ``override=True``;
- completes what the class does not define: a missing ``tensorrt``/``onnx`` facet gets a
  ``*_missing_reason`` naming the plugin (only building an engine / exporting fails), a missing
  ``infer``/``numpy``/``expand`` raises ``PluginError`` naming the
  plugin and the facet when a command calls it;
- wraps every facet the plugin defines so that an exception escaping it becomes one
  ``PluginError`` naming the plugin, its module and line, the layer and the facet (the
  plugin's traceback stays on ``__cause__``); the ``CaffeLstmError`` a plugin raises on
  purpose passes unchanged.

What a facet returns is checked by the walker calling it (``checked_results``: one item of
the right kind per top; ``wrong_result`` names the facet's file:line when a plugin owns the
type), as are a plugin's numpy outputs against its ``infer`` and the layers its ``expand``
builds (``passes/plugin_checks.py``).

Nothing here knows protobuf: a plugin's own parameter message, or the fields a fork adds
inside a message of the schema, is declared with ``ParamField`` (``Op.param_fields``) and read
from the prototxt's text by the frontend.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import linecache
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from caffe_lstm.errors import CaffeLstmError
from caffe_lstm.ir.graph import Node
from caffe_lstm.ops import registry
from caffe_lstm.ops.registry import (FACETS, Op, claimed_facets, get_op, has_facet,
                                     restore_registry, snapshot_registry)

if TYPE_CHECKING:  # importlib.metadata loads when installed plugins are looked for
    from importlib.metadata import EntryPoint

#: The entry-point group installed plugins declare (``[project.entry-points."caffe_lstm.ops"]``).
ENTRY_POINT_GROUP = "caffe_lstm.ops"
#: The docs page the hints point to.
DOC = "docs/plugins.md"
#: Facets whose absence makes only the commands that call them fail (they raise when called).
_RAISING_WHEN_MISSING = ("infer", "numpy", "expand")
#: The commands that need each facet, for the error of a plugin without it.
_NEEDED_BY = {"infer": "every command (shapes are inferred when a net is loaded)",
              "numpy": "running the net with numpy (run, verify)",
              "expand": "the recurrent rewrite (every command but inspect)"}


class PluginError(CaffeLstmError):
    """A plugin that cannot be loaded, refuses to register, or whose facet raised."""


@dataclass(frozen=True)
class ParamField:
    """One field caffe-lstm's caffe.proto lacks, read by name from the prototxt's text so that
    no change to the schema is needed (``Op.param_fields``): a field of a plugin's own
    parameter message, or a field a fork added inside a message the schema knows.

    Attributes:
        type: ``int``, ``float``, ``bool`` or ``str``; or None with ``choices`` (an enum, its
            values written unquoted), ``fields`` (a nested message) or ``message``.
        default: the value of an absent field (proto2 default; None: the type's zero).
        repeated: the field may be written several times (read as a list).
        choices: the enum value names, in number order.
        fields: a nested message's fields.
        message: a nested message of a type caffe-lstm's schema has, by its name
            (``"ConvolutionParameter"``): read with that message's fields and defaults.
    """

    type: type | None = None
    default: Any = None
    repeated: bool = False
    choices: tuple[str, ...] = ()
    fields: dict[str, ParamField] | None = None
    message: str | None = None

    def __post_init__(self) -> None:
        kinds = ((self.type is not None) + bool(self.choices) + (self.fields is not None)
                 + (self.message is not None))
        if kinds != 1 or self.type not in (None, int, float, bool, str):
            raise TypeError("a ParamField has one of: type (int, float, bool, str), choices "
                            "(an enum), fields (a nested message) or message (a message type "
                            "of caffe-lstm's schema)")


@dataclass
class Plugin:
    """A loaded plugin: how it was named, the module it imported, the types it registered.

    Attributes:
        name: what named it: the entry point's name, the file, the module, or the class.
        how: ``"entry point"``, ``"file"``, ``"module"`` or ``"class"``.
        module: the module imported (a file plugin's generated name).
        path: the module's file, or "".
        types: the layer types it registered; ``overrides``: those that replaced a built-in.
        distribution: the installed distribution that declared the entry point, or "".
    """

    name: str
    how: str
    module: str
    path: str = ""
    types: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    distribution: str = ""
    #: Why it could not be loaded (the error line), for ``inspect``'s listing; "" when loaded.
    error: str = ""

    @property
    def label(self) -> str:
        """``plugin 'normalize' (entry point of caffe-lstm-normalize)``, for messages."""
        source = f"entry point of {self.distribution}" if self.distribution else self.how
        return f"plugin '{self.name}' ({source})"

    def ops(self) -> list[dict[str, str]]:
        """Each type it defines with the class's ``origin`` and ``limits`` (what ``inspect``
        shows)."""
        return [{"type": op.type, "origin": op.origin, "limits": op.limits}
                for op in map(get_op, self.types) if op is not None]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "how": self.how, "module": self.module, "path": self.path,
                "distribution": self.distribution or None, "types": list(self.types),
                "ops": self.ops(), "overrides": list(self.overrides),
                "error": self.error or None}


@dataclass
class _State:
    loaded: dict[str, Plugin] = field(default_factory=dict)  # key: module name or file path
    installed_done: bool = False
    failed: list[Plugin] = field(default_factory=list)  # installed ones that did not load
    current: Plugin | None = None  # the plugin whose module is being imported


_STATE = _State()


def loaded_plugins() -> list[Plugin]:
    """The plugins loaded so far, in load order."""
    return list(_STATE.loaded.values())


def failed_plugins() -> list[Plugin]:
    """The installed plugins that failed to load (``Plugin.error`` says why)."""
    return list(_STATE.failed)


def plugin_of(op_type: str) -> Plugin | None:
    """The plugin that registered ``op_type``, or None (a built-in)."""
    for plugin in _STATE.loaded.values():
        if op_type in plugin.types:
            return plugin
    return None


# ---- registering -----------------------------------------------------------------------------


def register_op(cls: type[Op] | None = None, *, override: bool = False) -> Any:
    """Registers an op class under its Caffe type string; ``@register_op`` or
    ``@register_op(override=True)``.

    Built-in ops and ops registered outside a plugin load get the registry's strict checks.
    While a plugin loads (``load_plugins``, an entry point), the class is admitted as that
    plugin's (see the module docstring); ``override=True`` replaces a type caffe-lstm has.

    Raises:
        PluginError: a plugin's type that exists already, without ``override=True``.
        TypeError: outside a plugin load, a class missing a facet it claims.
    """
    if cls is None:
        return functools.partial(register_op, override=override)
    plugin = _STATE.current
    if plugin is None and override:
        plugin = _class_plugin(cls)
        _STATE.loaded.setdefault(f"class:{cls.__module__}.{cls.__qualname__}", plugin)
    if plugin is None:
        return registry.register_op(cls)
    return _admit(cls, plugin, override)


def _admit(cls: type[Op], plugin: Plugin, override: bool) -> type[Op]:
    if not isinstance(cls, type) or not issubclass(cls, Op) or not cls.type:
        raise PluginError(f"the {plugin.label} registers {cls!r}, which is not an Op subclass "
                          "with a type", "", f"subclass caffe_lstm.ops.Op and set type, see {DOC}")
    existing = get_op(cls.type)
    if existing is cls:
        return cls
    if existing is not None and not override:
        owner = plugin_of(cls.type)
        has = f"the {owner.label}" if owner is not None else "caffe-lstm"
        raise PluginError(f"the {plugin.label} defines layer type '{cls.type}', which {has} "
                          "already defines", plugin.path or plugin.module,
                          "register it with register_op(override=True) to replace it on purpose")
    if not any("origin" in vars(c) for c in cls.__mro__ if c is not Op):
        cls.origin = f"plugin {plugin.name}"
    _complete(cls, plugin)
    _attribute_errors(cls, plugin)
    registry.register_op(cls, override=existing is not None)
    previous = plugin_of(cls.type)
    if previous is not None and previous is not plugin:
        previous.types.remove(cls.type)
    plugin.types.append(cls.type)
    if existing is not None and previous is None:
        plugin.overrides.append(cls.type)
    return cls


def _complete(cls: type[Op], plugin: Plugin) -> None:
    """Gives a plugin's missing facets a reason (tensorrt, onnx) or a facet raising a
    PluginError that names the plugin and the facet (the others it claims)."""
    for facet in ("tensorrt", "onnx"):
        if not has_facet(cls, facet) and not getattr(cls, f"{facet}_missing_reason"):
            setattr(cls, f"{facet}_missing_reason",
                    f"the {plugin.label} defines no {facet} facet")
    for facet in claimed_facets(cls):
        if facet in _RAISING_WHEN_MISSING and not has_facet(cls, facet):
            setattr(cls, facet, staticmethod(_missing_facet(plugin, cls.type, facet)))


def _missing_facet(plugin: Plugin, op_type: str, facet: str) -> Callable:
    def missing(*args: Any, **kwargs: Any) -> Any:
        node = next((a for a in args if isinstance(a, Node)), None)
        raise PluginError(f"the {plugin.label} defines no {facet} facet for layer type "
                          f"'{op_type}'", node.label if node is not None else "",
                          f"{_NEEDED_BY[facet]} needs it: add it to the plugin, see {DOC}")
    missing.__caffe_lstm_plugin__ = True
    return missing


def _attribute_errors(cls: type[Op], plugin: Plugin) -> None:
    """Wraps every facet the plugin's own classes define (not those inherited from
    caffe-lstm's ops) so that an escaping exception names the plugin."""
    for facet in FACETS:
        owner = next((c for c in cls.__mro__ if facet in vars(c)), None)
        if owner is None or owner.__module__.startswith("caffe_lstm."):
            continue
        raw = vars(owner)[facet]
        if raw is None:  # `onnx = None`: no such form (has_facet's reading); nothing to guard
            continue
        if isinstance(raw, (staticmethod, classmethod)):
            function, kind = raw.__func__, type(raw)
        else:  # a plain function: called on the class, so it behaves as a staticmethod
            function, kind = raw, staticmethod
        if getattr(function, "__caffe_lstm_plugin__", False):
            continue
        setattr(cls, facet, kind(_guarded(function, plugin, cls.type, facet)))


def _guarded(function: Callable, plugin: Plugin, op_type: str, facet: str) -> Callable:
    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except CaffeLstmError as exc:
            if not (facet == "expand" and _raised_outside(exc, plugin_files(plugin))):
                raise  # the plugin's own user-facing error (or a walker's), unchanged
            # the builder refusing how the plugin called it: its bug, at its line
            node = next((a for a in args if isinstance(a, Node)), None)
            raise PluginError(
                f"the {plugin.label} failed in the expand facet of '{op_type}': "
                f"{failure(exc, plugin_files(plugin))}", node.label if node is not None else "",
                "a bug of the plugin, not of caffe-lstm: fix it or tell its author "
                "(the traceback is the error's __cause__)") from exc
        except Exception as exc:
            node = next((a for a in args if isinstance(a, Node)), None)
            raise PluginError(
                f"the {plugin.label} failed in the {facet} facet of '{op_type}': "
                f"{failure(exc, plugin_files(plugin))}",
                node.label if node is not None else "",
                "a bug of the plugin, not of caffe-lstm: fix it or tell its author "
                "(the traceback is the error's __cause__)") from exc
    guarded.__caffe_lstm_plugin__ = True
    return guarded


def refused_result(node: Node, facet: str, what: str, reason: str) -> CaffeLstmError:
    """A facet that returned without raising but built ``what`` its backend refuses (for
    ``reason``): the plugin's bug when a plugin owns the type, else caffe-lstm's."""
    plugin = plugin_of(node.op)
    if plugin is None:
        return CaffeLstmError(f"the {facet} facet of '{node.op}' built {what}: {reason}",
                              node.label, "a bug of caffe-lstm: please report it with the "
                              "prototxt")
    return PluginError(f"the {plugin.label} built {what} in the {facet} facet of "
                       f"'{node.op}': {reason} ({facet_site(node.op, facet)})", node.label,
                       "a bug of the plugin, not of caffe-lstm: fix it or tell its author")


def wrong_result(node: Node, facet: str, problem: str) -> CaffeLstmError:
    """A facet that returned what its walker cannot take (``problem``: ``returned ...``): the
    plugin's bug, named with the facet's own file:line, when a plugin owns the type."""
    plugin = plugin_of(node.op)
    if plugin is None:
        return CaffeLstmError(f"the {facet} facet of '{node.op}' {problem}", node.label,
                              "a bug of caffe-lstm: please report it with the prototxt")
    return PluginError(f"the {facet} facet of '{node.op}' "
                       f"({facet_site(node.op, facet, where_only=True)}) of the {plugin.label} "
                       f"{problem}", node.label, "a bug of the plugin, not of caffe-lstm: fix "
                       "it or tell its author (what each facet returns: docs/ops.md)")


def exception_text(exc: BaseException) -> str:
    """``KeyError: 'power'``: an exception in a few words (a user error: its own words)."""
    if isinstance(exc, CaffeLstmError):
        return exc.what
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def built_fault(node: Node, facet: str, exc: BaseException) -> PluginError | None:
    """A built-in ``facet`` that raised a bug (not a user error) on ``node``, a layer a
    plugin's expansion built: the attrs, bottoms or weights the plugin gave ``b.add`` (its
    ``infer`` passed, so an attr only this facet reads). The plugin's error, naming its
    ``b.add`` call, the facet and the layer; None for any other node or exception."""
    if not node.built_by or isinstance(exc, CaffeLstmError):
        return None
    return PluginError(f"the {facet} facet of '{node.op}' failed on layer '{node.name}' that "
                       f"{node.built_by} built (in expand): {exception_text(exc)}",
                       node.built_for, "a bug of the plugin, not of caffe-lstm: give b.add the "
                       f"attrs '{node.op}' takes (docs/ops.md; the traceback is the error's "
                       "__cause__)")


def checked_results(node: Node, facet: str, results: Any, is_item: Callable[[Any], bool],
                    item: str) -> Sequence[Any]:
    """``results`` of ``node``'s ``facet``, checked to be what every walker takes: a tuple (or
    list) of one ``item`` per top. Anything else is the op's bug (``wrong_result``): a bare
    item, a wrong count, a wrong kind of item."""
    count = len(node.outputs)
    if not isinstance(results, (tuple, list)) or (count and is_item(results)):
        problem = f"returned a bare {_kind(results)} instead of a tuple of one {item} per top"
    elif len(results) != count:
        problem = f"returned {len(results)} {item}(s) for {count} top(s)"
    elif wrong := [r for r in results if not is_item(r)]:
        problem = (f"returned {_article(_kind(wrong[0]))} where {_article(item)} belongs (one "
                   "per top)")
    else:
        return results
    raise wrong_result(node, facet, problem)


def _kind(thing: Any) -> str:
    """``ndarray of shape (2, 3)``, ``tuple (2, 3)``, ``int 3``: what a facet returned, short."""
    name = type(thing).__name__
    if isinstance(getattr(thing, "shape", None), tuple):
        return f"{name} of shape {thing.shape}"
    text = repr(thing)
    return f"{name} {text if len(text) <= 40 else text[:37] + '...'}"


def _article(text: str) -> str:
    return f"{'an' if text[:1].lower() in 'aeiou' else 'a'} {text}"


def class_site(op: type) -> str:
    """``/path/frob.py:7``: where the op class is defined (its file alone if the source cannot
    be read, "" for a class without a file)."""
    try:
        path = inspect.getsourcefile(op) or ""
    except TypeError:
        return ""
    try:
        return f"{path}:{_def_line(path, inspect.getsourcelines(op)[1], 'class ')}"
    except (OSError, TypeError):
        return path


def facet_site(op_type: str, facet: str, where_only: bool = False) -> str:
    """``/path/frob.py:12, in numpy`` (``where_only``: ``/path/frob.py:12``): where the facet
    of ``op_type`` is defined."""
    op = get_op(op_type)
    function = getattr(op, facet, None) if op is not None else None
    function = inspect.unwrap(function) if callable(function) else function
    code = getattr(function, "__code__", None)
    if code is None:
        return "" if where_only else f"in {facet}"
    if _under(code.co_filename, [Path(__file__).parent.parent]):
        return "the default of Op: the plugin defines none"
    site = f"{code.co_filename}:{_def_line(code.co_filename, code.co_firstlineno, 'def ')}"
    return site if where_only else f"{site}, in {facet}"


def _def_line(path: str, first: int, keyword: str) -> int:
    """The line of the ``def`` (``class``) itself, from ``first``, that of its first
    decorator (``co_firstlineno``, ``getsourcelines``)."""
    for line in range(first, first + 8):
        if linecache.getline(path, line).lstrip().startswith(keyword):
            return line
    return first


def failure(exc: BaseException, files: Sequence[str]) -> str:
    """``KeyError: 'x' (/path/foo/ops.py:23, in numpy, module foo.ops)``: the exception and
    the innermost frame inside ``files`` (files or directories), else the innermost frame."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    roots = [Path(f).resolve() for f in files if f]
    inside = [t for t in frames if _under(t.tb_frame.f_code.co_filename, roots)]
    text = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__
    if isinstance(exc, SyntaxError) and exc.filename and not inside:
        # the compiler's, before any frame of the file ran: its own place, not importlib's
        return f"SyntaxError: {exc.msg} ({exc.filename}:{exc.lineno}:{exc.offset or 1})"
    if not (inside or frames):
        return text
    frame = (inside or frames)[-1]
    code, module = frame.tb_frame.f_code, frame.tb_frame.f_globals.get("__name__", "?")
    return f"{text} ({code.co_filename}:{frame.tb_lineno}, in {code.co_name}, module {module})"


def _raised_outside(exc: BaseException, files: Sequence[str]) -> bool:
    """Whether ``exc`` was raised by code outside ``files`` (caffe-lstm's, called by them)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    roots = [Path(f).resolve() for f in files if f]
    return tb is not None and bool(roots) and not _under(tb.tb_frame.f_code.co_filename, roots)


def _under(filename: str, roots: Sequence[Path]) -> bool:
    path = Path(filename).resolve()
    return any(path == root or root in path.parents for root in roots)


def plugin_files(plugin: Plugin) -> list[str]:
    """Where the plugin's code lives: its top package's directory, or its one file."""
    top = sys.modules.get(plugin.module.split(".")[0])
    path = getattr(top, "__file__", None) or plugin.path
    if path and Path(path).name == "__init__.py":
        return [str(Path(path).parent)]
    return [path] if path else []


def listed_plugins(installed: bool = True) -> list[Plugin]:
    """The plugins as ``inspect`` lists them: those loaded so far (with ``installed``, the
    installed ones loaded first, those that fail to load last, with ``Plugin.error``)."""
    if not installed:
        return loaded_plugins()
    load_installed_plugins(strict=False)
    return loaded_plugins() + failed_plugins()


# ---- loading ---------------------------------------------------------------------------------


def load_plugins(specs: Sequence[str | Path | type[Op]]) -> list[Plugin]:
    """Loads plugins named explicitly: a ``.py`` file, an importable module name, or an
    ``Op`` subclass (registered as a plugin of its own). Loading one twice does nothing.

    Raises:
        PluginError: a file or module that cannot be imported, that raises while imported,
            or that registers no layer type; one line naming it.
    """
    plugins = []
    for spec in specs:
        if isinstance(spec, type):
            plugins.append(_load_class(spec))
        elif str(spec).endswith(".py") or Path(spec).is_file() or isinstance(spec, Path):
            plugins.append(_load_file(Path(spec)))
        else:
            plugins.append(_load_module(str(spec)))
    return plugins


def load_installed_plugins(strict: bool = True) -> list[Plugin]:
    """Loads, once, every plugin declared in the entry-point group ``caffe_lstm.ops`` of the
    installed distributions; returns them. ``strict=False`` (``inspect``'s listing) skips a
    plugin that fails to load instead of raising."""
    if not _STATE.installed_done:
        _STATE.installed_done = True
        _STATE.failed = []
        from importlib.metadata import entry_points  # 20 ms of start-up: only when looked for

        for entry in entry_points(group=ENTRY_POINT_GROUP):
            try:
                _load_entry_point(entry)
            except PluginError as exc:
                if strict:
                    _STATE.installed_done = False
                    raise
                _STATE.failed.append(_entry_plugin(entry, error=exc.line()))
    return [p for p in _STATE.loaded.values() if p.how == "entry point"]


def _load_entry_point(entry: EntryPoint) -> Plugin:
    plugin = _entry_plugin(entry)
    module = plugin.module
    if module in _STATE.loaded:
        return _STATE.loaded[module]
    with _loading(plugin, module):
        loaded = entry.load()
        if isinstance(loaded, type) and issubclass(loaded, Op):
            register_op(loaded)
    return plugin


def _entry_plugin(entry: EntryPoint, error: str = "") -> Plugin:
    dist = getattr(entry, "dist", None)
    name = (dist.metadata["Name"] if dist is not None else None) or ""
    return Plugin(entry.name, "entry point", entry.value.split(":", 1)[0].strip(),
                  distribution=name, error=error)


def _load_module(name: str) -> Plugin:
    if name in _STATE.loaded:
        return _STATE.loaded[name]
    plugin = Plugin(name, "module", name)
    with _loading(plugin, name):
        importlib.import_module(name)
    return plugin


def _load_file(path: Path) -> Plugin:
    if not path.is_file():
        raise PluginError(f"the plugin file {path} does not exist", str(path),
                          "name a .py file or an importable module")
    key = str(path.resolve())
    if key in _STATE.loaded:
        return _STATE.loaded[key]
    module = f"caffe_lstm_plugin_{zlib.crc32(key.encode()):08x}_{path.stem}"
    plugin = Plugin(str(path), "file", module, path=key)
    with _loading(plugin, key):
        spec = importlib.util.spec_from_file_location(module, path)
        if spec is None or spec.loader is None:
            raise PluginError(f"cannot import {path} as a Python module", str(path),
                              "name a .py file")
        code = importlib.util.module_from_spec(spec)
        sys.modules[module] = code  # dataclasses and pickling look the module up by name
        spec.loader.exec_module(code)
    return plugin


def _load_class(cls: type) -> Plugin:
    key = f"class:{cls.__module__}.{cls.__qualname__}"
    if key in _STATE.loaded:
        return _STATE.loaded[key]
    plugin = _class_plugin(cls)
    with _loading(plugin, key):
        register_op(cls)
    return plugin


def _class_plugin(cls: type) -> Plugin:
    module = sys.modules.get(cls.__module__)
    return Plugin(f"{cls.__module__}.{cls.__qualname__}", "class", cls.__module__,
                  path=getattr(module, "__file__", "") or "")


@contextlib.contextmanager
def _loading(plugin: Plugin, key: str) -> Iterator[None]:
    """Imports under ``plugin``: its registrations are admitted as its; a failure becomes one
    PluginError and leaves nothing registered."""
    snapshot, outer = snapshot_registry(), _STATE.current
    _STATE.current = plugin
    try:
        yield
        if not plugin.types:
            raise PluginError(f"the {plugin.label} registers no layer type", plugin.path or
                              plugin.module, f"decorate its Op subclasses with @register_op, "
                              f"see {DOC}")
    except BaseException as exc:
        restore_registry(snapshot)
        if plugin.how == "file":
            sys.modules.pop(plugin.module, None)
        if isinstance(exc, CaffeLstmError) or not isinstance(exc, Exception):
            raise
        raise _load_error(plugin, exc) from exc
    finally:
        _STATE.current = outer
    _STATE.loaded[key] = plugin
    if not plugin.path:
        plugin.path = getattr(sys.modules.get(plugin.module), "__file__", "") or ""


def _load_error(plugin: Plugin, exc: Exception) -> PluginError:
    if isinstance(exc, ModuleNotFoundError) and exc.name == plugin.module:
        return PluginError(f"no module named '{plugin.module}'", plugin.label,
                           "name a .py file or a module importable from here (installed, or "
                           "on PYTHONPATH)")
    files = [plugin.path] if plugin.path else plugin_files(plugin)
    return PluginError(f"the {plugin.label} failed to load: {failure(exc, files)}", "",
                       "a bug of the plugin, not of caffe-lstm: fix it or tell its author "
                       "(the traceback is the error's __cause__)")


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Restores the registry and the loaded plugins on exit (tests, notebooks trying
    plugins)."""
    global _STATE
    snapshot, state = snapshot_registry(), _STATE
    _STATE = _State(dict(state.loaded), state.installed_done, list(state.failed))
    try:
        yield
    finally:
        restore_registry(snapshot)
        _STATE = state

