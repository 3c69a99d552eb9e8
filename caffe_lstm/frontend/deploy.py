"""Train/test nets converted as their deploy graph.

A train/test prototxt holds what inference needs and what only training needs. The deploy
graph is taken out of it the way people write deploy.prototxt by hand:

- loss layers (type ending in ``Loss``) and accuracy layers (ending in ``Accuracy``) are
  dropped; their first bottom, the prediction, becomes a net output;
- layers that only feed their other bottoms (a reshaped label) and ``Silence`` layers are
  dropped with them: nothing inference computes needs them (a Silence of a computed blob
  only stops Caffe from printing it as an output, and the outputs are chosen here);
- data layers (``Data``, ``ImageData``, ``HDF5Data``, ``MemoryData``, ``WindowData``, fork
  types ending in ``Data`` such as ``VideoData``, and ``Python`` layers at the start of the net
  that only produce tops) become net inputs, shaped from their own parameters where Caffe fixes
  the shape (``data_layer_shapes``), else from ``--shape``, else left unknown; their tops no kept
  layer needs (labels) are dropped. A ``...Data`` type that has an op here (``DummyData``, the
  fork's ``ZerosData``) stays a constant, as in deploy nets.

Everything else is untouched, and a net without data or training layers is left exactly as it
is. ``--outputs`` still chooses the outputs when given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from caffe_lstm.errors import ShapeError, layer_where
from caffe_lstm.frontend.importer import INPUT_TYPES, input_shapes, needed_layers
from caffe_lstm.frontend.upgrade import LayerParameter, SourceLayer
from caffe_lstm.ops import get_op

#: Data layer types of upstream Caffe and its best-known forks; any other bottomless type
#: ending in "Data" (VideoData, AnnotatedData, ...) is a data layer too.
DATA_TYPES = frozenset({"Data", "ImageData", "HDF5Data", "MemoryData", "WindowData"})
SILENCE = "Silence"

Shape = tuple[int, ...]


@dataclass
class DeployView:
    """The layers to convert, the outputs chosen, the notes saying what was changed, and the
    net inputs whose shape is unknown (input name -> its data layer's description)."""

    layers: list[SourceLayer]
    outputs: list[str]
    notes: list[str] = field(default_factory=list)
    unshaped: dict[str, str] = field(default_factory=dict)
    #: The data layers read as inputs: (their "name (Type)", the Input layer's index).
    readers: list[tuple[str, int]] = field(default_factory=list)
    #: Data-layer tops no kept layer needs (labels), dropped.
    unused: list[str] = field(default_factory=list)


def is_training_layer(layer: LayerParameter) -> bool:
    return layer.type.endswith(("Loss", "Accuracy"))


def data_layers(layers: Sequence[SourceLayer]) -> set[int]:
    """``id`` of the layers that read data: the known types, bottomless ``...Data`` types, and
    bottomless ``Python`` layers before the first layer that computes."""
    found, at_start = set(), True
    for source in layers:
        layer = source.layer
        # a "...Data" type with an op here computes constants (DummyData, ZerosData): no data
        reads = not layer.bottom and layer.top and (
            layer.type in DATA_TYPES or (layer.type.endswith("Data") and get_op(layer.type) is None)
            or (layer.type == "Python" and at_start))
        if reads:
            found.add(id(source))
        elif layer.type not in INPUT_TYPES:
            at_start = False
    return found


def deploy_view(layers: Sequence[SourceLayer], outputs: Sequence[str],
                shapes: Mapping[str, Sequence[int]], file: str) -> DeployView:
    """The deploy graph of ``layers`` (phase-filtered), see the module docstring.

    Args:
        layers: the selected layers in net order.
        outputs: ``--outputs`` (empty: the deploy outputs).
        shapes: ``--shape`` shapes by input name; they replace any other shape of the input.
        file: the prototxt, for messages.

    Raises:
        ShapeError: a ``shapes`` name that is not a net input, or of the wrong rank.
        GraphError: an unknown output name.
    """
    readers = data_layers(layers)
    training = any(is_training_layer(source.layer) for source in layers)
    chosen = list(outputs)
    if (readers or training) and not chosen:
        chosen = deploy_outputs(layers, readers)
    kept = needed_layers(layers, chosen, file) if chosen else list(layers)
    view = DeployView(kept, chosen)
    if readers or training:
        _note_dropped(view, layers, bool(outputs))
        _data_layers_as_inputs(view, readers, file)
    _apply_shapes(view, shapes, file)
    _note_inputs(view)
    return view


def deploy_outputs(layers: Sequence[SourceLayer], readers: set[int]) -> list[str]:
    """The predictions (first bottom of every loss/accuracy layer, unless a layer that stays
    computes on from it, as a Softmax beside the loss does) and the computed blobs no layer
    reads, in the order they are computed; data-layer tops are never outputs."""
    last_producer: dict[str, tuple[int, SourceLayer]] = {}
    unread: dict[str, None] = {}
    for index, source in enumerate(layers):
        for blob in source.layer.bottom:
            unread.pop(blob, None)
        for blob in source.layer.top:
            unread.pop(blob, None)
            unread[blob] = None
            last_producer[blob] = (index, source)
    staying = {blob for source in layers if not _training_or_silence(source.layer)
               for blob in source.layer.bottom}
    wanted = {source.layer.bottom[0] for source in layers
              if is_training_layer(source.layer) and source.layer.bottom
              and source.layer.bottom[0] not in staying}
    wanted.update(blob for blob in unread if not is_training_layer(last_producer[blob][1].layer))
    computed = [blob for blob in wanted if blob in last_producer
                and id(last_producer[blob][1]) not in readers]
    return sorted(computed, key=lambda blob: (last_producer[blob][0],
                                               list(last_producer[blob][1].layer.top).index(blob)))


def _training_or_silence(layer: LayerParameter) -> bool:
    return is_training_layer(layer) or layer.type == SILENCE


def _note_dropped(view: DeployView, layers: Sequence[SourceLayer], user_outputs: bool) -> None:
    """One note naming the training layers dropped (with ``--outputs``, only the loss,
    accuracy and Silence layers: the user cut the rest)."""
    kept = {id(source) for source in view.layers}
    dropped = [source.layer for source in layers if id(source) not in kept and (
        not user_outputs or _training_or_silence(source.layer))]
    if dropped:
        names = ", ".join(f"{layer.name} ({layer.type})" for layer in dropped)
        view.notes.append(f"converted as the deploy graph, without the layers only training "
                          f"needs: {names}")


def _data_layers_as_inputs(view: DeployView, readers: set[int], file: str) -> None:
    """Each kept data layer becomes an Input layer of the tops kept layers need."""
    needed = {blob for source in view.layers for blob in source.layer.bottom}
    needed.update(view.outputs)
    for index, source in enumerate(view.layers):
        if id(source) not in readers:
            continue
        layer = source.layer
        shapes = data_layer_shapes(layer)
        tops = [(top, shape) for top, shape in zip(layer.top, shapes) if top in needed]
        view.unused += [top for top in layer.top if top not in needed]
        inputs = LayerParameter(name=layer.name, type="Input", top=[top for top, _ in tops])
        view.layers[index] = SourceLayer(inputs, source.line, [], [shape for _, shape in tops])
        view.readers.append((f"{layer.name} ({layer.type})", index))
        label = f"{layer_where(layer.name, layer.type)} at {file}:{source.line}"
        for top, shape in tops:
            if shape is None:
                view.unshaped[top] = label


def _note_inputs(view: DeployView) -> None:
    """One note: each data layer read as inputs, with the shapes they got (? unknown)."""
    described = []
    for label, index in view.readers:
        source = view.layers[index]
        tops = ", ".join(f"{top} {_dims(shape)}"
                         for top, shape in zip(source.layer.top, source.input_shapes))
        described.append(f"{label} -> {tops or 'nothing'}")
    if described:
        text = f"data layers read as net inputs: {'; '.join(described)}"
        if view.unused:
            text += f"; unused tops dropped: {', '.join(view.unused)}"
        view.notes.append(text)


def data_layer_shapes(layer: LayerParameter) -> list[Shape | None]:
    """The shape of each top where Caffe fixes it from the layer's own parameters (None where
    the data decides: HDF5 files, databases without a crop, Python readers)."""
    batch, image = _image_shape(layer)
    shapes: list[Shape | None] = [image] if image is not None else [None]
    label = (batch,) if batch else None  # Caffe's labels are (batch_size,)
    shapes += [label] * (len(layer.top) - 1)
    return shapes[:len(layer.top)]


def _image_shape(layer: LayerParameter) -> tuple[int, Shape | None]:
    """(batch size, shape of the image top) for the layer types whose image size is fixed."""
    crop = layer.transform_param.crop_size
    if layer.type == "MemoryData":
        p = layer.memory_data_param
        dims = (p.batch_size, p.channels, p.height, p.width)
        return p.batch_size, dims if all(dims) else None
    if layer.type == "ImageData":
        p = layer.image_data_param
        channels = 3 if p.is_color else 1
        crop = crop or p.crop_size
        if crop:
            return p.batch_size, (p.batch_size, channels, crop, crop)
        if p.new_height and p.new_width:
            return p.batch_size, (p.batch_size, channels, p.new_height, p.new_width)
        return p.batch_size, None
    if layer.type == "Data":
        p = layer.data_param
        crop = crop or p.crop_size
        # The channels are the database's; a cropped image database is colour unless
        # force_gray says otherwise (give --shape for anything else).
        channels = 1 if layer.transform_param.force_gray else 3
        return p.batch_size, (p.batch_size, channels, crop, crop) if crop and p.batch_size \
            else None
    if layer.type == "WindowData":  # always 3-channel windows, cropped to crop_size
        p = layer.window_data_param
        crop = crop or p.crop_size
        return p.batch_size, (p.batch_size, 3, crop, crop) if crop and p.batch_size else None
    return 0, None


def _apply_shapes(view: DeployView, shapes: Mapping[str, Sequence[int]], file: str) -> None:
    """``shapes`` for the Input layers' tops: replaces their shape (checked for rank)."""
    inputs = [(index, source) for index, source in enumerate(view.layers)
              if source.layer.type in INPUT_TYPES]
    names = [top for _, source in inputs for top in source.layer.top]
    unknown = [name for name in shapes if name not in names]
    if unknown:
        raise ShapeError(f"shapes= names '{unknown[0]}', which is not a net input", "shapes=",
                         f"the net inputs are {', '.join(names)}" if names
                         else "the net has no inputs")
    for index, source in inputs:
        if not any(top in shapes for top in source.layer.top):
            continue
        where = f"{file}:{source.line}" if source.line else file
        current = source.input_shapes if source.input_shapes is not None \
            else input_shapes(source.layer, where)
        updated = []
        for top, shape in zip(source.layer.top, current):
            given = shapes.get(top)
            if given is not None and shape is not None and len(given) != len(shape):
                raise ShapeError(f"shapes[{top!r}] has {len(given)} dims, the input has "
                                 f"{len(shape)} {tuple(shape)}", "shapes=",
                                 "give one dim per axis")
            updated.append(tuple(int(d) for d in given) if given is not None else shape)
            if given is not None:
                view.unshaped.pop(top, None)
        view.layers[index] = SourceLayer(source.layer, source.line, source.unknown, updated)


def _dims(shape: Shape | None) -> str:
    return "?" if shape is None else "(" + ", ".join(str(d) for d in shape) + ")"
