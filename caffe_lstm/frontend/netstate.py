"""Phase/level/stage filtering of layers by their include/exclude rules (Caffe's FilterNet)."""

from __future__ import annotations

from dataclasses import dataclass, field

from caffe_lstm.errors import GraphError, ModelLoadError, layer_where
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
        unreadable = _unreadable_rules(source)
        if layer.include:
            keep = any(_matches(rule, selection) for i, rule in enumerate(layer.include)
                       if ("include", i) not in unreadable)
        else:
            keep = not any(_matches(rule, selection) for i, rule in enumerate(layer.exclude)
                           if ("exclude", i) not in unreadable)
        if keep:
            kept.append(source)
    return kept


def _unreadable_rules(source: SourceLayer) -> set[tuple[str, int]]:
    """The include/exclude rules holding something the schema does not know (``phase: RUN``
    of a fork, an unknown condition): such a rule matches no selection, since the condition
    it sets cannot hold for a phase or stage caffe-lstm knows."""
    return {unknown.rule for unknown in source.unknown if unknown.rule is not None}


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


def check_selected_bottoms(kept: list[SourceLayer], layers: list[SourceLayer],
                           selected: list[SourceLayer], selection: LayerSelection,
                           where: str) -> None:
    """A bottom that only layers left out by the phase/stage rules produce: the error names
    the options that select the producer (train/test nets gate their data layers by stage).

    Args:
        kept: the layers to convert, in order.
        layers: every layer of the net.
        selected: the layers ``filter_layers`` kept.

    Raises:
        GraphError: for the first such bottom; other missing bottoms are left to the importer.
    """
    chosen = {id(source) for source in selected}
    produced: set[str] = set()
    for source in kept:
        for blob in source.layer.bottom:
            if blob in produced:
                continue
            producers = [other for other in layers
                         if id(other) not in chosen and blob in other.layer.top]
            if producers:  # the one closest to the selection: same phase, fewest stages
                closest = min(producers, key=lambda other: _distance(
                    *_selecting(other.layer, selection)))
                raise _unselected_producer(blob, source, closest, selection, where)
        produced.update(source.layer.top)


def _unselected_producer(blob: str, consumer: SourceLayer, producer: SourceLayer,
                         selection: LayerSelection, where: str) -> GraphError:
    layer, maker = consumer.layer, producer.layer
    phase, stages = _selecting(maker, selection)
    options = ([f"phase={phase!r}"] if phase else []) + ([f"stages={stages!r}"] if stages else [])
    return GraphError(
        f"bottom '{blob}' is produced only by {layer_where(maker.name, maker.type)} at "
        f"{where}:{producer.line}, which phase {selection.phase}"
        f"{' with stages ' + ', '.join(sorted(selection.stages)) if selection.stages else ''}"
        " leaves out",
        f"{layer_where(layer.name, layer.type)} at {where}:{consumer.line}",
        f"select it with {' '.join(options)}" if options
        else "check the layers' include/exclude rules")


def _selecting(layer, selection: LayerSelection) -> tuple[str | None, list[str]]:
    """The phase (None: this one will do) and the stages to add that make the first include
    rule of ``layer`` match."""
    if not layer.include:
        return None, [stage for rule in layer.exclude for stage in rule.not_stage]
    rule = layer.include[0]
    phase = None
    if rule.HasField("phase") and caffe_pb2.Phase.Name(rule.phase) != selection.phase:
        phase = caffe_pb2.Phase.Name(rule.phase)
    return phase, [stage for stage in rule.stage if stage not in selection.stages]


def _distance(phase: str | None, stages: list[str]) -> tuple[bool, int]:
    """How far a selection is: another phase first, then the number of changes."""
    return phase is not None, (phase is not None) + len(stages)
