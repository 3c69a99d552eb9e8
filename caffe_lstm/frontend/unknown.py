"""What to do with the fields the schema does not know: list them, and refuse the ones that
could change what a converted layer computes.

The reader keeps every unknown field, enum value and message on its layer (``textscan``).
Most of them never matter: they sit in data, loss or post-processing layers that are not
converted, or they only tune training. An unknown entry is an error only when it is on a layer
that is converted and it is not one of the harmless kinds below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from caffe_lstm.errors import ModelLoadError, layer_where
from caffe_lstm.frontend.plugin_params import reads_entry, undeclared_hint
from caffe_lstm.frontend.textscan import MESSAGE, VALUE, UnknownEntry
from caffe_lstm.frontend.upgrade import SourceLayer

#: Messages whose contents never change an inference result (outside DummyData, below):
#: fillers only initialise weights for training (a converted net's weights come from the
#: caffemodel), ParamSpec holds learning-rate and decay multipliers and weight sharing for the
#: solver, NetStateRule conditions decide the layer selection (an unreadable rule never matches,
#: see netstate), and transformation, loss and accuracy options belong to data and training
#: layers, which are not converted.
HARMLESS_MESSAGES = frozenset({
    "caffe.FillerParameter", "caffe.ParamSpec", "caffe.NetStateRule",
    "caffe.TransformationParameter", "caffe.LossParameter", "caffe.AccuracyParameter",
})
#: Field names that never change an inference result, wherever they are: ``engine`` picks an
#: implementation (CAFFE, CUDNN...) of the same math; the others are training-only knobs of
#: the solver or of backward passes, as upstream and forks name them.
HARMLESS_NAMES = frozenset({
    "engine", "lr_mult", "decay_mult", "blobs_lr", "weight_decay", "lr", "decay",
    "momentum", "clipping_threshold", "clip_gradients", "gradient_clip", "gradient_scale",
    "propagate_down", "loss_weight", "debug_info", "share_mode", "stable_prod_grad",
})
#: Name endings of the same kind: ``*_filler`` (initialisation), ``*_lr_mult``/``*_decay_mult``.
HARMLESS_SUFFIXES = ("_filler", "_lr_mult", "_decay_mult")
#: DummyData's fillers give the constants the net computes with: not harmless there.
VALUE_FILLERS = ("dummy_data_param",)


@dataclass(frozen=True)
class SkippedField:
    """An unknown entry with its layer, as ``inspect`` lists it."""

    layer: str | None  # None: a net-level field
    type: str | None
    field: str
    line: int
    column: int
    kind: str
    value: str
    reason: str

    def as_dict(self) -> dict:
        return {"layer": self.layer, "type": self.type, "field": self.field, "line": self.line,
                "column": self.column, "kind": self.kind, "value": self.value or None,
                "reason": self.reason}

    def warning(self, file: str) -> str:
        """One line for ``-v``: what was skipped, where, and why that is fine."""
        what = describe(self.kind, self.field, self.value)
        owner = layer_where(self.layer, self.type) if self.layer is not None else "the net"
        return f"skipped {what} of {owner} at {file}:{self.line}:{self.column} ({self.reason})"


def describe(kind: str, path: str, value: str = "") -> str:
    """``the unknown field 'a.b'``, ``the unknown message 'x_param'`` or
    ``the unknown value 'RUN' of 'include.phase'``."""
    if kind == VALUE:
        return f"the unknown value '{value}' of '{path}'"
    return f"the unknown {'message' if kind == MESSAGE else 'field'} '{path}'"


def is_harmless(unknown: UnknownEntry) -> bool:
    """Whether the entry can be ignored on a converted layer (see the constants above)."""
    name = unknown.path.rsplit(".", 1)[-1]
    if unknown.path.split(".", 1)[0] in VALUE_FILLERS:
        return False
    return (unknown.message in HARMLESS_MESSAGES or unknown.rule is not None
            or name in HARMLESS_NAMES or name.endswith(HARMLESS_SUFFIXES))


def check_converted_layers(layers: Sequence[SourceLayer], file: str) -> None:
    """Refuses unknown entries that could change what a converted layer computes.

    Raises:
        ModelLoadError: one line naming the first such entry's layer, field and line (and how
            many more there are).
    """
    harmful = [(source, unknown) for source in layers for unknown in source.unknown
               if not is_harmless(unknown) and not reads_entry(source.layer.type, unknown)]
    if not harmful:
        return
    source, unknown = harmful[0]
    layer = source.layer
    found = describe(unknown.kind, unknown.path, unknown.value)
    what = f"{layer_where(layer.name, layer.type)} has {found}, which could change what it computes"
    if len(harmful) > 1:
        others = ", ".join(f"'{u.path}' of '{s.layer.name}'" for s, u in harmful[1:4])
        more = len(harmful) - 1
        what += f" (and {more} more: {others}{', ...' if more > 3 else ''})"
    raise ModelLoadError(what, f"{file}:{unknown.line}:{unknown.column}",
                         undeclared_hint(layer.type, unknown) or
                         "caffe-lstm's schema lacks it: remove it if it only tunes training, "
                         "or cut the layer off with outputs=[NAME, ...]")


def skipped_fields(layers: Sequence[SourceLayer], net_unknown: Sequence[UnknownEntry],
                   converted: set[int]) -> list[SkippedField]:
    """Every unknown entry of the file (net-level ones first), with why it was fine to skip.

    Args:
        layers: every layer of the file, whatever its phase.
        net_unknown: the unknown fields outside the layers.
        converted: ``id`` of the layer messages that are converted.
    """
    skipped = [SkippedField(None, None, u.path, u.line, u.column, u.kind, u.value,
                            "a net-level field caffe-lstm does not read") for u in net_unknown]
    for source in layers:
        for unknown in source.unknown:
            if reads_entry(source.layer.type, unknown):
                continue  # a plugin's own param message: read, not skipped
            skipped.append(SkippedField(
                source.layer.name, source.layer.type, unknown.path, unknown.line,
                unknown.column, unknown.kind, unknown.value,
                _reason(unknown, id(source.layer) in converted)))
    return skipped


def _reason(unknown: UnknownEntry, converted: bool) -> str:
    if unknown.rule is not None:
        return f"the {unknown.rule[0]} rule holding it matches no phase or stage"
    if not converted:
        return "the layer is not converted"
    return "it cannot change an inference result"
