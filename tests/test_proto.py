"""Tests for proto/caffe.proto and the committed caffe_lstm/proto/caffe_pb2.py.

Facts checked here come from the schema fact base (caffe_semantics.md §1 and §6.1) and from
recurrent-extensions.md. Descriptor details are read from the FileDescriptorProto, whose fields
(label, default_value, options.packed) are stable across protobuf runtime versions.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, text_format

from caffe_lstm.proto import caffe_pb2

REPO_ROOT = Path(__file__).resolve().parents[1]
PROTO_DIR = REPO_ROOT / "proto"
COMMITTED_PB2 = REPO_ROOT / "caffe_lstm" / "proto" / "caffe_pb2.py"
CORPUS_DIR = REPO_ROOT.parent / "shared" / "corpus"
CORPUS_MISSING = "the corpus of public prototxts is not beside this clone (CI has it)"

FDP = descriptor_pb2.FieldDescriptorProto

# ---- What we added on top of the upstream master schema ------------------------------------------
# Fork messages (Part B of caffe.proto), all top-level, none in master.
ADDED_MESSAGES = {
    "LSTMParameter",
    "ReverseParameter",
    "ReverseTimeParameter",
    "TransposeParameter",
    "PermuteParameter",
    "ContinuationIndicatorParameter",
    "CTCDecoderParameter",
    "DenseBlockParameter",
    "InterpParameter",
    "SpatialTransformerParameter",
    "RepeatParameter",
    "PSROIPoolingParameter",
    "LSTMSimpleParameter",
    "LstmUnitParameter",
    "ZerosDataParameter",
    "CaptionInputParameter",
    "ROIPoolingParameter",
    # Our Loop layer (Part D).
    "LoopParameter",
    "LoopState",
}
# Fields added to master messages: (message, field name) -> our field number.
ADDED_FIELDS = {
    # Fork layer params (Part B); numbers are ours, fork originals are noted in caffe.proto.
    ("LayerParameter", "lstm_param"): 8266711,
    ("LayerParameter", "transpose_param"): 8266710,
    ("LayerParameter", "reverse_param"): 160,
    ("LayerParameter", "reverse_time_param"): 161,
    ("LayerParameter", "ctc_decoder_param"): 158,
    ("LayerParameter", "permute_param"): 202,
    ("LayerParameter", "continuation_indicator_param"): 201,
    ("LayerParameter", "denseblock_param"): 8266720,
    ("LayerParameter", "interp_param"): 8266740,
    ("LayerParameter", "st_param"): 8266741,
    ("LayerParameter", "repeat_param"): 8266742,
    ("LayerParameter", "psroi_pooling_param"): 10001,   # R-FCN's own number
    ("LayerParameter", "lstm_simple_param"): 8266743,
    ("LayerParameter", "lstm_unit_param"): 8266744,
    ("LayerParameter", "zeros_data_param"): 8266745,
    ("LayerParameter", "caption_input_param"): 8266746,
    ("LayerParameter", "roi_pooling_param"): 8266747,   # Fast R-CNN: 8266711 (lstm_param's)
    # Our recurrent extension (Part C).
    ("RecurrentParameter", "candidate_activation"): 1001,
    ("RecurrentParameter", "cell_activation"): 1002,
    ("RecurrentParameter", "relu_clip"): 1003,
    ("RecurrentParameter", "peephole"): 1004,
    ("RecurrentParameter", "num_proj"): 1005,
    ("RecurrentParameter", "cell_clip"): 1006,
    # Fields forks put on RecurrentParameter (Part B, numbers ours).
    ("RecurrentParameter", "num_layers"): 2001,
    ("RecurrentParameter", "engine"): 2002,
    ("RecurrentParameter", "dropout_ratio"): 2003,
    # synopsys-caffe's GRU fields (its own numbers).
    ("RecurrentParameter", "linear_before_reset"): 8,
    ("RecurrentParameter", "activations"): 12,
    ("RecurrentParameter", "dropout_seed"): 2004,
    # Our Loop layer (Part D), written by `caffe-lstm rewrite`.
    ("LayerParameter", "loop_param"): 1100,
}
# Enums added (full name relative to the package).
ADDED_ENUMS = {"RecurrentParameter.RecurrentActivation", "RecurrentParameter.Engine"}

# Upstream master totals (caffe_semantics.md §1.1).
MASTER_MESSAGES = 63
MASTER_ENUMS = 26
MASTER_FIELDS = 423
MASTER_ENUM_VALUES = 111


def _file_proto() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto()
    caffe_pb2.DESCRIPTOR.CopyToProto(fdp)
    return fdp


FILE = _file_proto()
MESSAGES = {m.name: m for m in FILE.message_type}


def field(message: str, name: str) -> descriptor_pb2.FieldDescriptorProto:
    (found,) = [f for f in MESSAGES[message].field if f.name == name]
    return found


def _walk_enums():
    """Yield (qualified name, EnumDescriptorProto) for top-level and nested enums."""
    for e in FILE.enum_type:
        yield e.name, e
    for m in FILE.message_type:
        for e in m.enum_type:
            yield f"{m.name}.{e.name}", e


# ---- generated code is current -------------------------------------------------------------------


def test_committed_pb2_is_not_stale(tmp_path):
    try:
        import grpc_tools.protoc  # noqa: F401
    except ImportError:
        pytest.skip("grpc_tools not importable (install grpcio-tools to check caffe_pb2.py)")
    spec = importlib.util.spec_from_file_location("_caffe_proto_generate",
                                                  PROTO_DIR / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)

    fresh = generate.generate(tmp_path)

    assert fresh.read_bytes() == COMMITTED_PB2.read_bytes(), (
        "caffe_lstm/proto/caffe_pb2.py differs from protoc output for proto/caffe.proto; "
        "run `python proto/generate.py` (with the pinned grpcio-tools) and commit the result"
    )


# ---- file-level facts and counts -----------------------------------------------------------------


def test_file_level_facts():
    assert FILE.syntax in ("", "proto2")  # protoc leaves proto2 as the empty default
    assert FILE.package == "caffe"
    assert list(FILE.dependency) == []
    # Master has nested enums only; we keep it that way.
    assert all(len(m.nested_type) == 0 for m in FILE.message_type)
    assert all(len(m.oneof_decl) == 0 for m in FILE.message_type)


def test_additions_are_exactly_the_listed_ones():
    names = set(MESSAGES)
    assert ADDED_MESSAGES <= names
    for (msg, name), number in ADDED_FIELDS.items():
        assert field(msg, name).number == number, (msg, name)
    assert ADDED_ENUMS <= {name for name, _ in _walk_enums()}


def test_master_counts_match_upstream():
    master_msgs = [m for m in FILE.message_type if m.name not in ADDED_MESSAGES]
    master_fields = [
        (m.name, f.name) for m in master_msgs for f in m.field
        if (m.name, f.name) not in ADDED_FIELDS
    ]
    master_enums = [
        e for name, e in _walk_enums()
        if name not in ADDED_ENUMS and name.split(".")[0] not in ADDED_MESSAGES
    ]
    assert len(master_msgs) == MASTER_MESSAGES
    assert len(master_enums) == MASTER_ENUMS
    assert len(master_fields) == MASTER_FIELDS
    assert sum(len(e.value) for e in master_enums) == MASTER_ENUM_VALUES


def test_total_counts():
    # Master + additions: 17 fork messages with 37 + 22 + 11 + 12 + 3 fields (Interp 6,
    # SpatialTransformer 11, Repeat 2, PSROIPooling 3; LSTMSimple 6, LstmUnit 5; Transpose's
    # grid modes 4, ZerosData 1, CaptionInput 7; ROIPooling 3), 2 Loop messages with 6 + 4
    # fields, 30 added fields, 3 enums with 5 + 3 + 4 values (TransposeType the third).
    assert len(FILE.message_type) == 63 + 17 + 2
    assert sum(len(m.field) for m in FILE.message_type) == (423 + 30 + 37 + 22 + 11 + 12 + 3
                                                            + 6 + 4)
    enums = [e for _, e in _walk_enums()]
    assert len(enums) == 26 + 3
    assert sum(len(e.value) for e in enums) == 111 + 5 + 3 + 4


# ---- spot checks of master facts -----------------------------------------------------------------


@pytest.mark.parametrize(
    "message, name, number, type_, label, default",
    [
        ("LayerParameter", "recurrent_param", 146, FDP.TYPE_MESSAGE, FDP.LABEL_OPTIONAL, None),
        ("LayerParameter", "clip_param", 148, FDP.TYPE_MESSAGE, FDP.LABEL_OPTIONAL, None),
        ("LayerParameter", "swish_param", 147, FDP.TYPE_MESSAGE, FDP.LABEL_OPTIONAL, None),
        ("LayerParameter", "blobs", 7, FDP.TYPE_MESSAGE, FDP.LABEL_REPEATED, None),
        ("LayerParameter", "phase", 10, FDP.TYPE_ENUM, FDP.LABEL_OPTIONAL, None),
        ("NetParameter", "layer", 100, FDP.TYPE_MESSAGE, FDP.LABEL_REPEATED, None),
        ("NetParameter", "layers", 2, FDP.TYPE_MESSAGE, FDP.LABEL_REPEATED, None),
        ("NetParameter", "input_dim", 4, FDP.TYPE_INT32, FDP.LABEL_REPEATED, None),
        ("NetState", "phase", 1, FDP.TYPE_ENUM, FDP.LABEL_OPTIONAL, "TEST"),
        ("BlobProto", "shape", 7, FDP.TYPE_MESSAGE, FDP.LABEL_OPTIONAL, None),
        ("BlobProto", "double_data", 8, FDP.TYPE_DOUBLE, FDP.LABEL_REPEATED, None),
        ("BlobProto", "num", 1, FDP.TYPE_INT32, FDP.LABEL_OPTIONAL, "0"),
        ("BlobShape", "dim", 1, FDP.TYPE_INT64, FDP.LABEL_REPEATED, None),
        ("V1LayerParameter", "layer", 1, FDP.TYPE_MESSAGE, FDP.LABEL_OPTIONAL, None),
        ("V1LayerParameter", "blobs", 6, FDP.TYPE_MESSAGE, FDP.LABEL_REPEATED, None),
        ("V1LayerParameter", "param", 1001, FDP.TYPE_STRING, FDP.LABEL_REPEATED, None),
        ("V0LayerParameter", "blobs", 50, FDP.TYPE_MESSAGE, FDP.LABEL_REPEATED, None),
        ("V0LayerParameter", "hdf5_output_param", 1001, FDP.TYPE_MESSAGE, FDP.LABEL_OPTIONAL, None),
        ("V0LayerParameter", "det_crop_mode", 59, FDP.TYPE_STRING, FDP.LABEL_OPTIONAL, "warp"),
        ("PoolingParameter", "round_mode", 13, FDP.TYPE_ENUM, FDP.LABEL_OPTIONAL, "CEIL"),
        ("FillerParameter", "type", 1, FDP.TYPE_STRING, FDP.LABEL_OPTIONAL, "constant"),
        ("FillerParameter", "sparse", 7, FDP.TYPE_INT32, FDP.LABEL_OPTIONAL, "-1"),
        ("FillerParameter", "variance_norm", 8, FDP.TYPE_ENUM, FDP.LABEL_OPTIONAL, "FAN_IN"),
        ("InnerProductParameter", "axis", 5, FDP.TYPE_INT32, FDP.LABEL_OPTIONAL, "1"),
        ("InnerProductParameter", "transpose", 6, FDP.TYPE_BOOL, FDP.LABEL_OPTIONAL, "false"),
        ("EltwiseParameter", "operation", 1, FDP.TYPE_ENUM, FDP.LABEL_OPTIONAL, "SUM"),
        ("SliceParameter", "axis", 3, FDP.TYPE_INT32, FDP.LABEL_OPTIONAL, "1"),
        ("ReshapeParameter", "num_axes", 3, FDP.TYPE_INT32, FDP.LABEL_OPTIONAL, "-1"),
        ("ReductionParameter", "operation", 1, FDP.TYPE_ENUM, FDP.LABEL_OPTIONAL, "SUM"),
        ("RecurrentParameter", "expose_hidden", 5, FDP.TYPE_BOOL, FDP.LABEL_OPTIONAL, "false"),
        ("ClipParameter", "min", 1, FDP.TYPE_FLOAT, FDP.LABEL_REQUIRED, None),
        ("ClipParameter", "max", 2, FDP.TYPE_FLOAT, FDP.LABEL_REQUIRED, None),
        ("SolverParameter", "random_seed", 20, FDP.TYPE_INT64, FDP.LABEL_OPTIONAL, "-1"),
        ("Datum", "data", 4, FDP.TYPE_BYTES, FDP.LABEL_OPTIONAL, None),
    ],
)
def test_master_field(message, name, number, type_, label, default):
    f = field(message, name)
    assert (f.number, f.type, f.label) == (number, type_, label)
    if default is None:
        assert not f.HasField("default_value")
    else:
        assert f.default_value == default


@pytest.mark.parametrize(
    "message, name, expected",
    [
        ("BatchNormParameter", "moving_average_fraction", 0.999),
        ("BatchNormParameter", "eps", 1e-5),
        ("MVNParameter", "eps", 1e-9),
        ("SolverParameter", "delta", 1e-8),
        ("LRNParameter", "beta", 0.75),
        ("V0LayerParameter", "det_fg_fraction", 0.25),
        ("DenseBlockParameter", "moving_average_fraction", 0.1),
    ],
)
def test_float_defaults(message, name, expected):
    # protoc stores float defaults re-printed (0.1 becomes "0.100000001"), so compare as numbers.
    assert float(field(message, name).default_value) == pytest.approx(expected, rel=1e-6)


def test_packed_exactly_where_master_has_it():
    packed = {(m.name, f.name) for m in FILE.message_type for f in m.field if f.options.packed}
    assert packed == {
        ("BlobShape", "dim"),
        ("BlobProto", "data"),
        ("BlobProto", "diff"),
        ("BlobProto", "double_data"),
        ("BlobProto", "double_diff"),
    }


def test_enums():
    enums = dict(_walk_enums())

    def values(name):
        return {v.name: v.number for v in enums[name].value}

    assert values("Phase") == {"TRAIN": 0, "TEST": 1}
    assert values("EltwiseParameter.EltwiseOp") == {"PROD": 0, "SUM": 1, "MAX": 2}
    assert values("FillerParameter.VarianceNorm") == {"FAN_IN": 0, "FAN_OUT": 1, "AVERAGE": 2}
    assert values("ReductionParameter.ReductionOp") == {"SUM": 1, "ASUM": 2, "SUMSQ": 3, "MEAN": 4}
    assert values("HingeLossParameter.Norm") == {"L1": 1, "L2": 2}
    assert values("ParamSpec.DimCheckMode") == values("V1LayerParameter.DimCheckMode")
    layer_type = values("V1LayerParameter.LayerType")
    assert len(layer_type) == 40
    assert (layer_type["INNER_PRODUCT"], layer_type["ABSVAL"],
            layer_type["DECONVOLUTION"]) == (14, 35, 39)
    engine = {"DEFAULT": 0, "CAFFE": 1, "CUDNN": 2}
    for owner in ("Convolution", "LRN", "Pooling", "ReLU", "Sigmoid", "Softmax", "TanH", "SPP"):
        assert values(f"{owner}Parameter.Engine") == engine, owner


# ---- fork messages and our extension -------------------------------------------------------------


@pytest.mark.parametrize(
    "message, name, number, default",
    [
        ("LSTMParameter", "num_output", 1, None),
        ("LSTMParameter", "clipping_threshold", 2, "0"),
        ("LSTMParameter", "weight_filler", 3, None),
        ("LSTMParameter", "bias_filler", 4, None),
        ("LSTMParameter", "batch_size", 5, "1"),
        ("LSTMParameter", "vocabulary_size", 6, None),   # fanchenyou/deepdiary's numbers
        ("LSTMParameter", "image_size", 7, None),
        ("LSTMParameter", "sequence_len", 8, None),
        ("LSTMParameter", "hidden_size", 9, None),   # 1 there, the wire field of num_output
        ("ReverseParameter", "axis", 1, "0"),
        ("ReverseTimeParameter", "copy_remaining", 1, "false"),
        ("TransposeParameter", "dim", 1, None),
        ("PermuteParameter", "order", 1, None),
        ("ContinuationIndicatorParameter", "time_step", 1, "0"),
        ("ContinuationIndicatorParameter", "batch_size", 2, "0"),
        ("CTCDecoderParameter", "blank_index", 1, "0"),
        ("CTCDecoderParameter", "ctc_merge_repeated", 2, "true"),
        ("DenseBlockParameter", "numTransition", 1, "40"),
        ("DenseBlockParameter", "initChannel", 2, "16"),
        ("DenseBlockParameter", "growthRate", 3, "12"),
        ("DenseBlockParameter", "Filter_Filler", 10, None),
        ("DenseBlockParameter", "gpuIdx", 15, "0"),
        ("DenseBlockParameter", "workspace_MB", 20, "8"),
        ("DenseBlockParameter", "dropout_amount", 17, "0"),
        ("InterpParameter", "height", 1, "0"),
        ("InterpParameter", "zoom_factor", 3, "1"),
        ("InterpParameter", "shrink_factor", 4, "1"),
        ("InterpParameter", "pad_end", 6, "0"),
        ("SpatialTransformerParameter", "transform_type", 1, "affine"),
        ("SpatialTransformerParameter", "output_H", 3, None),
        ("SpatialTransformerParameter", "to_compute_dU", 5, "true"),
        ("SpatialTransformerParameter", "theta_2_3", 11, None),
        ("RepeatParameter", "num_repeats", 1, None),
        ("RepeatParameter", "axis", 2, "1"),
        ("PSROIPoolingParameter", "spatial_scale", 1, None),
        ("PSROIPoolingParameter", "group_size", 3, None),
        ("ROIPoolingParameter", "pooled_h", 1, "0"),       # Fast R-CNN's numbers and defaults
        ("ROIPoolingParameter", "pooled_w", 2, "0"),
        ("ROIPoolingParameter", "spatial_scale", 3, "1"),
        ("LSTMSimpleParameter", "num_output", 1, None),
        ("LSTMSimpleParameter", "batch_size", 5, "1"),
        ("LSTMSimpleParameter", "enable_clockwork_forgetgate_bias", 6, "false"),
        ("LstmUnitParameter", "num_cells", 1, None),   # apollocaffe's numbers
        ("LstmUnitParameter", "output_gate_weight_filler", 5, None),
    ],
)
def test_fork_message_field(message, name, number, default):
    f = field(message, name)
    assert f.number == number
    assert f.default_value == (default or "")


def test_fork_repeated_fields():
    assert field("TransposeParameter", "dim").type == FDP.TYPE_INT32
    assert field("TransposeParameter", "dim").label == FDP.LABEL_REPEATED
    assert field("PermuteParameter", "order").type == FDP.TYPE_UINT32
    assert field("PermuteParameter", "order").label == FDP.LABEL_REPEATED


def test_fork_layer_fields_use_their_messages():
    expected = {
        "lstm_param": "LSTMParameter",
        "transpose_param": "TransposeParameter",
        "reverse_param": "ReverseParameter",
        "reverse_time_param": "ReverseTimeParameter",
        "ctc_decoder_param": "CTCDecoderParameter",
        "permute_param": "PermuteParameter",
        "continuation_indicator_param": "ContinuationIndicatorParameter",
        "denseblock_param": "DenseBlockParameter",
        "interp_param": "InterpParameter",
        "st_param": "SpatialTransformerParameter",
        "repeat_param": "RepeatParameter",
        "psroi_pooling_param": "PSROIPoolingParameter",
        "roi_pooling_param": "ROIPoolingParameter",
        "lstm_simple_param": "LSTMSimpleParameter",
        "lstm_unit_param": "LstmUnitParameter",
    }
    for name, message in expected.items():
        assert field("LayerParameter", name).type_name == f".caffe.{message}", name


@pytest.mark.parametrize(
    "name, number, type_, default",
    [
        ("candidate_activation", 1001, FDP.TYPE_ENUM, "TANH"),
        ("cell_activation", 1002, FDP.TYPE_ENUM, "TANH"),
        ("relu_clip", 1003, FDP.TYPE_FLOAT, "20"),
        ("peephole", 1004, FDP.TYPE_BOOL, "false"),
        ("num_proj", 1005, FDP.TYPE_UINT32, "0"),
        ("cell_clip", 1006, FDP.TYPE_FLOAT, "0"),
    ],
)
def test_recurrent_extension_field(name, number, type_, default):
    f = field("RecurrentParameter", name)
    assert ((f.number, f.type, f.label, f.default_value)
            == (number, type_, FDP.LABEL_OPTIONAL, default))
    if type_ == FDP.TYPE_ENUM:
        assert f.type_name == ".caffe.RecurrentParameter.RecurrentActivation"


def test_recurrent_activation_enum():
    activation = caffe_pb2.RecurrentParameter.RecurrentActivation
    assert dict(activation.items()) == {"TANH": 0, "SIGMOID": 1, "RELU": 2, "CLIPPED_RELU": 3,
                                        "IDENTITY": 4}
    p = caffe_pb2.RecurrentParameter()
    assert p.candidate_activation == p.cell_activation == caffe_pb2.RecurrentParameter.TANH
    assert p.relu_clip == 20.0 and not p.HasField("relu_clip")


def test_extension_in_text_format():
    net = text_format.Parse(
        'layer { name: "l" type: "LSTM" bottom: "x" bottom: "cont" top: "h"\n'
        "  recurrent_param { num_output: 8 candidate_activation: CLIPPED_RELU relu_clip: 6\n"
        "                    cell_activation: IDENTITY peephole: true num_proj: 4\n"
        "                    cell_clip: 3.5 } }",
        caffe_pb2.NetParameter(),
    )
    rp = net.layer[0].recurrent_param
    assert rp.candidate_activation == caffe_pb2.RecurrentParameter.CLIPPED_RELU
    assert rp.cell_activation == caffe_pb2.RecurrentParameter.IDENTITY
    assert (rp.relu_clip, rp.peephole, rp.num_proj, rp.cell_clip) == (6.0, True, 4, 3.5)


@pytest.mark.parametrize(
    "message, name, number, type_, label",
    [
        ("LoopParameter", "layer", 6, FDP.TYPE_MESSAGE, FDP.LABEL_REPEATED),
        ("LoopParameter", "input", 1, FDP.TYPE_STRING, FDP.LABEL_REPEATED),
        ("LoopParameter", "output", 2, FDP.TYPE_STRING, FDP.LABEL_REPEATED),
        ("LoopParameter", "num_iterated", 3, FDP.TYPE_UINT32, FDP.LABEL_OPTIONAL),
        ("LoopParameter", "num_sequence_outputs", 4, FDP.TYPE_UINT32, FDP.LABEL_OPTIONAL),
        ("LoopParameter", "state", 5, FDP.TYPE_MESSAGE, FDP.LABEL_REPEATED),
        ("LoopState", "name", 1, FDP.TYPE_STRING, FDP.LABEL_OPTIONAL),
        ("LoopState", "size", 2, FDP.TYPE_UINT32, FDP.LABEL_OPTIONAL),
        ("LoopState", "has_initial", 3, FDP.TYPE_BOOL, FDP.LABEL_OPTIONAL),
        ("LoopState", "dim", 4, FDP.TYPE_INT32, FDP.LABEL_REPEATED),
    ],
)
def test_loop_message_field(message, name, number, type_, label):
    f = field(message, name)
    assert (f.number, f.type, f.label) == (number, type_, label)


def test_loop_param_nests_layers_in_text_format():
    net = text_format.Parse(
        'layer { name: "__l/loop" type: "Loop" bottom: "x" top: "y"\n'
        '  loop_param { num_iterated: 1 num_sequence_outputs: 1 input: "x_t" input: "h_prev"\n'
        '    output: "h" output: "h" state { name: "h" size: 3 }\n'
        '    layer { name: "__l/h" type: "TanH" bottom: "x_t" top: "h" } } }',
        caffe_pb2.NetParameter(),
    )
    loop = net.layer[0].loop_param
    assert field("LayerParameter", "loop_param").type_name == ".caffe.LoopParameter"
    assert field("LoopParameter", "layer").type_name == ".caffe.LayerParameter"
    assert [layer.type for layer in loop.layer] == ["TanH"]
    assert (list(loop.input), list(loop.output)) == (["x_t", "h_prev"], ["h", "h"])
    assert (loop.state[0].name, loop.state[0].size, loop.state[0].has_initial) == ("h", 3, False)


# ---- the real-model corpus -----------------------------------------------------------------------


def _corpus_files():
    if not CORPUS_DIR.is_dir():
        return []
    return sorted(CORPUS_DIR.rglob("*.prototxt"))


def test_corpus_is_complete():
    if not CORPUS_DIR.is_dir():
        pytest.skip(CORPUS_MISSING)
    assert len(_corpus_files()) == 18


@pytest.mark.parametrize(
    "path",
    _corpus_files() or [pytest.param(None, marks=pytest.mark.skip(reason=CORPUS_MISSING))],
    ids=lambda p: p.relative_to(CORPUS_DIR).as_posix() if isinstance(p, Path) else "corpus",
)
def test_corpus_prototxt_parses(path):
    net = text_format.Parse(path.read_text(encoding="utf-8"), caffe_pb2.NetParameter())
    assert len(net.layer) + len(net.layers) > 0


# ---- wire format ---------------------------------------------------------------------------------


def test_wire_round_trip():
    net = caffe_pb2.NetParameter(name="tiny")
    layer = net.layer.add(name="lstm1", type="LSTM", bottom=["x", "cont"], top=["h"])
    layer.recurrent_param.num_output = 2
    layer.recurrent_param.num_proj = 1
    layer.recurrent_param.candidate_activation = caffe_pb2.RecurrentParameter.RELU
    layer.reverse_param.axis = 0
    blob = layer.blobs.add()
    blob.shape.dim.extend([8, 3])
    blob.data.extend(float(i) / 4 for i in range(24))
    layer.blobs.add(double_data=[1.5, -2.25], shape=caffe_pb2.BlobShape(dim=[2]))

    wire = net.SerializeToString()
    back = caffe_pb2.NetParameter.FromString(wire)

    assert back == net
    assert back.layer[0].reverse_param.HasField("axis")  # presence survives (proto2)
    assert list(back.layer[0].blobs[0].data) == [i / 4 for i in range(24)]


def test_blob_data_is_written_packed():
    blob = caffe_pb2.BlobProto(data=[1.0, 2.0])
    # Field 5, wire type 2 (length-delimited) = 0x2A, then 8 bytes of two floats.
    assert blob.SerializeToString() == b"\x2a\x08" + b"\x00\x00\x80\x3f" + b"\x00\x00\x00\x40"


def test_unpacked_blob_data_is_accepted():
    # Field 5, wire type 5 (fixed32) repeated: the unpacked encoding old writers may emit.
    unpacked = b"\x2d\x00\x00\x80\x3f" + b"\x2d\x00\x00\x00\x40"
    assert list(caffe_pb2.BlobProto.FromString(unpacked).data) == [1.0, 2.0]
