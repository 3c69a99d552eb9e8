"""Phase/level/stage filtering of layers by their include/exclude rules (Caffe's FilterNet)."""

from __future__ import annotations

from dataclasses import dataclass, field

from caffe_lstm.errors import ModelLoadError, layer_where
from caffe_lstm.frontend.upgrade import SourceLayer
from caffe_lstm.proto import caffe_pb2


@dataclass(frozen=True)
class LayerSelection:
    """What layers are selected for (Caffe's NetState): ``phase`` "TEST" or "TRAIN", a level,
    stages."""

    phase: str = "TEST"
    level: int = 0
    stages: frozenset[str] = field(default_factory=frozenset)


def filter_layers(layers: list[SourceLayer], selection: LayerSelection,
                  where: str) -> list[SourceLayer]:
    """Keeps the layers whose rules select ``selection``.

    A layer without include rules is kept unless an exclude rule matches; a layer with include
    rules is kept iff one of them matches; having both kinds is an error, as in Caffe.
    """
    kept = []
    for source in layers:
        layer = source.layer
        if layer.include and layer.exclude:
            raise ModelLoadError(
                "a layer has both include and exclude rules",
                f"{layer_where(layer.name, layer.type)} at {where}:{source.line}",
                "keep one kind of rule")
        if layer.include:
            keep = any(_matches(rule, selection) for rule in layer.include)
        else:
            keep = not any(_matches(rule, selection) for rule in layer.exclude)
        if keep:
            kept.append(source)
    return kept


def _matches(rule, selection: LayerSelection) -> bool:
    """A NetStateRule matches iff every condition it sets holds."""
    if rule.HasField("phase") and caffe_pb2.Phase.Name(rule.phase) != selection.phase:
        return False
    if rule.HasField("min_level") and selection.level < rule.min_level:
        return False
    if rule.HasField("max_level") and selection.level > rule.max_level:
        return False
    if any(stage not in selection.stages for stage in rule.stage):
        return False
    return not any(stage in selection.stages for stage in rule.not_stage)
