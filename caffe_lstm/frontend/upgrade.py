"""Legacy net upgrade, as Caffe's upgrade_proto does it: V0 -> V1 -> V2, then net-level inputs.

Works on protobuf messages (the frontend is the only place that knows protobuf). Each layer
keeps the line it was written on, so later messages can point into the file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from caffe_lstm.errors import ModelLoadError
from caffe_lstm.frontend.textscan import LayerEntry, UnknownEntry
from caffe_lstm.ops.spellings import registered_type
from caffe_lstm.proto import caffe_pb2

LayerParameter = caffe_pb2.LayerParameter


@dataclass
class SourceLayer:
    """A V2 layer, where it was written (``line`` 0 when it was made by an upgrade), and what
    of it the schema did not know (``textscan.UnknownEntry``, paths relative to the entry)."""

    layer: LayerParameter
    line: int = 0
    unknown: list[UnknownEntry] = dataclasses.field(default_factory=list)
    #: Shapes of an Input layer's tops set by the frontend (a data layer read as net inputs,
    #: or ``--shape``), None where unknown; None: the layer's own input_param.
    input_shapes: list[tuple[int, ...] | None] | None = None


# V1LayerParameter.LayerType enum name -> V2 type string (upgrade_proto.cpp's table).
V1_TYPES = {
    "NONE": "", "ABSVAL": "AbsVal", "ACCURACY": "Accuracy", "ARGMAX": "ArgMax", "BNLL": "BNLL",
    "CONCAT": "Concat", "CONTRASTIVE_LOSS": "ContrastiveLoss", "CONVOLUTION": "Convolution",
    "DECONVOLUTION": "Deconvolution", "DATA": "Data", "DROPOUT": "Dropout",
    "DUMMY_DATA": "DummyData", "EUCLIDEAN_LOSS": "EuclideanLoss", "ELTWISE": "Eltwise",
    "EXP": "Exp", "FLATTEN": "Flatten", "HDF5_DATA": "HDF5Data", "HDF5_OUTPUT": "HDF5Output",
    "HINGE_LOSS": "HingeLoss", "IM2COL": "Im2col", "IMAGE_DATA": "ImageData",
    "INFOGAIN_LOSS": "InfogainLoss", "INNER_PRODUCT": "InnerProduct", "LRN": "LRN",
    "MEMORY_DATA": "MemoryData", "MULTINOMIAL_LOGISTIC_LOSS": "MultinomialLogisticLoss",
    "MVN": "MVN", "POOLING": "Pooling", "POWER": "Power", "RELU": "ReLU", "SIGMOID": "Sigmoid",
    "SIGMOID_CROSS_ENTROPY_LOSS": "SigmoidCrossEntropyLoss", "SILENCE": "Silence",
    "SOFTMAX": "Softmax", "SOFTMAX_LOSS": "SoftmaxWithLoss", "SPLIT": "Split", "SLICE": "Slice",
    "TANH": "TanH", "WINDOW_DATA": "WindowData", "THRESHOLD": "Threshold",
}

# V0 type string -> V1 enum name.
V0_TYPES = {
    "accuracy": "ACCURACY", "bnll": "BNLL", "concat": "CONCAT", "conv": "CONVOLUTION",
    "data": "DATA", "dropout": "DROPOUT", "euclidean_loss": "EUCLIDEAN_LOSS",
    "flatten": "FLATTEN", "hdf5_data": "HDF5_DATA", "hdf5_output": "HDF5_OUTPUT",
    "im2col": "IM2COL", "images": "IMAGE_DATA", "infogain_loss": "INFOGAIN_LOSS",
    "innerproduct": "INNER_PRODUCT", "lrn": "LRN",
    "multinomial_logistic_loss": "MULTINOMIAL_LOGISTIC_LOSS", "pool": "POOLING",
    "relu": "RELU", "sigmoid": "SIGMOID", "softmax": "SOFTMAX", "softmax_loss": "SOFTMAX_LOSS",
    "split": "SPLIT", "tanh": "TANH", "window_data": "WINDOW_DATA",
}

# V0 flat fields routed into the V1 type-specific message: v0 field -> {v0 type: (param, field)}.
# Only the fields inference needs; data-source fields are dropped (data layers do not run here).
V0_ROUTES = {
    "num_output": {"conv": ("convolution_param", "num_output"),
                   "innerproduct": ("inner_product_param", "num_output")},
    "biasterm": {"conv": ("convolution_param", "bias_term"),
                 "innerproduct": ("inner_product_param", "bias_term")},
    "group": {"conv": ("convolution_param", "group")},
    "pool": {"pool": ("pooling_param", "pool")},
    "dropout_ratio": {"dropout": ("dropout_param", "dropout_ratio")},
    "local_size": {"lrn": ("lrn_param", "local_size")},
    "alpha": {"lrn": ("lrn_param", "alpha")},
    "beta": {"lrn": ("lrn_param", "beta")},
    "k": {"lrn": ("lrn_param", "k")},
    "concat_dim": {"concat": ("concat_param", "concat_dim")},
}
# Repeated in ConvolutionParameter, single in PoolingParameter.
V0_SPATIAL = {"pad": "pad", "kernelsize": "kernel_size", "stride": "stride"}


def upgrade_net(net: caffe_pb2.NetParameter, entries: list[LayerEntry], where: str) -> tuple[
        caffe_pb2.NetParameter, list[SourceLayer]]:
    """Upgrades ``net`` to V2 layers plus an Input layer for net-level inputs.

    Args:
        net: the parsed NetParameter (left unchanged).
        entries: the line and unknown fields of each ``layer`` then ``layers`` entry
            (``read_prototxt``'s list).
        where: the file, for messages.

    Returns:
        The net without layers or net-level inputs, and its layers in order.
    """
    if net.layer and net.layers:
        raise ModelLoadError("the net mixes V2 'layer' and legacy V1 'layers' entries", where,
                             "write every layer as 'layer { ... }'")
    # The scanner stops at a syntax error protobuf did not see as one: pad what it missed.
    entries = list(entries) + [LayerEntry("", 0)] * (len(net.layer) + len(net.layers)
                                                      - len(entries))
    if net.layers:
        v1_layers = _remove_v0_padding(list(zip(net.layers, entries)))
        layers = [SourceLayer(_v1_to_v2(_v0_to_v1(v1, where), where), entry.line,
                              list(entry.unknown)) for v1, entry in v1_layers]
    else:
        layers = [SourceLayer(_with_fork_spelling(_copy(layer)), entry.line, list(entry.unknown))
                  for layer, entry in zip(net.layer, entries)]
    head = caffe_pb2.NetParameter()
    head.CopyFrom(net)
    del head.layer[:], head.layers[:]
    input_layer = _input_layer(head, where)
    del head.input[:], head.input_shape[:], head.input_dim[:]
    return head, ([SourceLayer(input_layer)] if input_layer else []) + layers


def _with_fork_spelling(layer: LayerParameter) -> LayerParameter:
    """``layer`` with a fork's spelling of a registered type (MyCaffe's ``LstmSimple``, say)
    replaced by that type (``ops.spellings``)."""
    layer.type = registered_type(layer.type, layer.HasField)
    return layer


def _copy(layer: LayerParameter) -> LayerParameter:
    copy = LayerParameter()
    copy.CopyFrom(layer)
    return copy


def _input_layer(net: caffe_pb2.NetParameter, where: str) -> LayerParameter | None:
    """Net-level ``input`` + ``input_shape``/``input_dim`` become a front Input layer "input"."""
    if not net.input or not (net.input_shape or net.input_dim):
        return None  # Old caffemodels list input names only; Caffe drops them.
    layer = LayerParameter(name="input", type="Input", top=list(net.input))
    if net.input_shape:
        shapes = [list(shape.dim) for shape in net.input_shape]
    else:
        if len(net.input_dim) != 4 * len(net.input):
            raise ModelLoadError(
                f"{len(net.input)} net inputs need {4 * len(net.input)} input_dim values, "
                f"found {len(net.input_dim)}", where, "give 4 input_dim values per input")
        dims = list(net.input_dim)
        shapes = [dims[4 * i:4 * i + 4] for i in range(len(net.input))]
    if len(shapes) != len(net.input):
        raise ModelLoadError(
            f"{len(net.input)} net inputs but {len(shapes)} input_shape entries", where,
            "give one input_shape per input")
    for dims in shapes:
        layer.input_param.shape.add().dim.extend(dims)
    return layer


def _remove_v0_padding(layers: list) -> list:
    """V0 "padding" layers disappear: their pad moves into the consuming conv/pool layer."""
    kept, padded_by = [], {}
    for v1, line in layers:
        v0 = v1.layer if v1.HasField("layer") else None
        if v0 is not None and v0.type == "padding":
            padded_by[v1.top[0] if v1.top else ""] = (v1.bottom[0] if v1.bottom else "", v0.pad)
            continue
        if v0 is not None and v1.bottom and v1.bottom[0] in padded_by:
            v1 = _with_padding(v1, *padded_by[v1.bottom[0]])
        kept.append((v1, line))
    return kept


def _with_padding(v1: caffe_pb2.V1LayerParameter, source: str, pad: int):
    out = caffe_pb2.V1LayerParameter()
    out.CopyFrom(v1)
    out.bottom[0] = source
    out.layer.pad = pad
    return out


def _v0_to_v1(v1: caffe_pb2.V1LayerParameter, where: str) -> caffe_pb2.V1LayerParameter:
    """A V1 entry holding a nested V0 ``layer`` becomes a plain V1 layer."""
    if not v1.HasField("layer"):
        return v1
    v0 = v1.layer
    if v0.type not in V0_TYPES:
        raise ModelLoadError(f"unknown V0 layer type '{v0.type}'", f"{where}, layer '{v0.name}'",
                             "upgrade the net with Caffe's upgrade_net_proto_text tool")
    out = caffe_pb2.V1LayerParameter()
    out.CopyFrom(v1)
    out.ClearField("layer")
    out.name = out.name or v0.name
    out.type = caffe_pb2.V1LayerParameter.LayerType.Value(V0_TYPES[v0.type])
    out.blobs.extend(v0.blobs if not v1.blobs else [])
    out.blobs_lr.extend(v0.blobs_lr)
    out.weight_decay.extend(v0.weight_decay)
    _route_v0_fields(v0, out)
    return out


def _route_v0_fields(v0: caffe_pb2.V0LayerParameter, out: caffe_pb2.V1LayerParameter) -> None:
    for field, routes in V0_ROUTES.items():
        if v0.HasField(field) and v0.type in routes:
            param, target = routes[v0.type]
            setattr(getattr(out, param), target, getattr(v0, field))
    for field, target in V0_SPATIAL.items():
        if not v0.HasField(field):
            continue
        if v0.type == "conv":
            getattr(out.convolution_param, target).append(getattr(v0, field))
        elif v0.type == "pool":
            setattr(out.pooling_param, target, getattr(v0, field))
    for filler in ("weight_filler", "bias_filler"):
        if v0.HasField(filler) and v0.type in ("conv", "innerproduct"):
            param = "convolution_param" if v0.type == "conv" else "inner_product_param"
            getattr(getattr(out, param), filler).CopyFrom(getattr(v0, filler))


def _v1_to_v2(v1: caffe_pb2.V1LayerParameter, where: str) -> LayerParameter:
    """A V1 ``layers`` entry as a V2 LayerParameter (type string, ParamSpecs, same params)."""
    enum_name = caffe_pb2.V1LayerParameter.LayerType.Name(v1.type)
    layer = LayerParameter(name=v1.name, type=V1_TYPES[enum_name], bottom=list(v1.bottom),
                           top=list(v1.top), loss_weight=list(v1.loss_weight))
    layer.include.extend(v1.include)
    layer.exclude.extend(v1.exclude)
    layer.blobs.extend(v1.blobs)
    _v1_param_specs(v1, layer)
    for field in v1.DESCRIPTOR.fields:
        if field.name.endswith("_param") and v1.HasField(field.name):
            getattr(layer, field.name).CopyFrom(getattr(v1, field.name))
    return layer


def _v1_param_specs(v1: caffe_pb2.V1LayerParameter, layer: LayerParameter) -> None:
    """V1's parallel lists (param names, share modes, lr and decay) become ParamSpec entries."""
    count = max(len(v1.param), len(v1.blob_share_mode), len(v1.blobs_lr), len(v1.weight_decay))
    for i in range(count):
        spec = layer.param.add()
        if i < len(v1.param):
            spec.name = v1.param[i]
        if i < len(v1.blob_share_mode):
            spec.share_mode = v1.blob_share_mode[i]
        if i < len(v1.blobs_lr):
            spec.lr_mult = v1.blobs_lr[i]
        if i < len(v1.weight_decay):
            spec.decay_mult = v1.weight_decay[i]
