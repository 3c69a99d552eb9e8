"""Tests of the hand-rolled caffemodel reader.

Files are built with a small protobuf encoder written here (varints and tags with ``struct``),
not with the generated ``caffe_pb2`` module, so the reader is checked against the wire format
itself, including encodings the official serializer never emits (unpacked data, groups, forks).
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caffe_lstm.errors import ModelLoadError
from caffe_lstm.frontend.caffemodel import Blob, LayerBlobs, read_caffemodel

# --- a test-local protobuf encoder ------------------------------------------------------------


def varint(value: int) -> bytes:
    """Encode ``value`` as a varint; negatives as 10-byte two's complement, like protobuf."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def f_varint(number: int, value: int) -> bytes:
    return tag(number, 0) + varint(value)


def f_len(number: int, payload: bytes) -> bytes:
    return tag(number, 2) + varint(len(payload)) + payload


def f_str(number: int, text: str) -> bytes:
    return f_len(number, text.encode())


def f_fixed32(number: int, raw: bytes) -> bytes:
    return tag(number, 5) + raw


def f_fixed64(number: int, raw: bytes) -> bytes:
    return tag(number, 1) + raw


def f_group(number: int, content: bytes) -> bytes:
    return tag(number, 3) + content + tag(number, 4)


def floats_le(values) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


def doubles_le(values) -> bytes:
    return np.asarray(values, dtype="<f8").tobytes()


def noise(*numbers: int) -> bytes:
    """Unknown fields of every wire type, incl. fork params holding bytes that are not protobuf."""
    out = b""
    for number in numbers:
        out += f_varint(number, 300) + f_fixed64(number, b"\xff" * 8)
        out += f_len(number, b"\x07\xff\xff\xff\x0f garbage \x00") + f_fixed32(number, b"\xfe" * 4)
    return out + f_group(99, f_varint(1, 5) + f_group(98, f_str(2, "x")) + f_fixed32(3, b"abcd"))


FORK_NUMBERS = (140, 147, 201, 8266711)


def shape_msg(dims, packed: bool = True) -> bytes:
    if packed:
        return f_len(1, b"".join(varint(d) for d in dims))
    return b"".join(f_varint(1, d) for d in dims)


def blob(
    dims=None,
    data=None,
    *,
    legacy=None,
    doubles=None,
    unpacked: bool = False,
    extra: bytes = b"",
) -> bytes:
    """A BlobProto. ``legacy`` maps 1..4 (num/channels/height/width) to values."""
    out = extra
    for number, value in (legacy or {}).items():
        out += f_varint(number, value)
    if dims is not None:
        out += f_len(7, shape_msg(dims))
    if data is not None:
        if unpacked:
            out += b"".join(f_fixed32(5, struct.pack("<f", v)) for v in data)
        else:
            out += f_len(5, floats_le(data))
    if doubles is not None:
        if unpacked:
            out += b"".join(f_fixed64(8, struct.pack("<d", v)) for v in doubles)
        else:
            out += f_len(8, doubles_le(doubles))
    return out


def layer(name: str, *blobs: bytes, extra: bytes = b"") -> bytes:
    """A new-style ``layer`` (field 100) entry."""
    body = f_str(1, name) + f_str(2, "InnerProduct") + extra
    return f_len(100, body + b"".join(f_len(7, b) for b in blobs))


def v1_layer(name: str, *blobs: bytes, v0: bytes = b"") -> bytes:
    """A legacy ``layers`` (field 2) entry; ``v0`` is a nested V0LayerParameter body."""
    body = (f_len(1, v0) if v0 else b"") + f_str(2, "data") + f_varint(5, 14)
    body += (f_str(4, name) if name else b"") + b"".join(f_len(6, b) for b in blobs)
    return f_len(2, body)


def v0_body(name: str, *blobs: bytes) -> bytes:
    return f_str(1, name) + f_str(2, "innerproduct") + b"".join(f_len(50, b) for b in blobs)


def write(tmp_path: Path, content: bytes, name: str = "net.caffemodel") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def assert_load_error(path: Path) -> ModelLoadError:
    with pytest.raises(ModelLoadError) as info:
        read_caffemodel(path)
    message = str(info.value)
    assert "\n" not in message and message == info.value.line()
    assert str(path) in info.value.where
    return info.value


# --- valid files ------------------------------------------------------------------------------


def test_new_style_shape_and_packed_floats(tmp_path):
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((10, 7)).astype(np.float32)
    bias = np.arange(10, dtype=np.float32)
    content = f_str(1, "lenet") + layer("ip1", blob((10, 7), weight.ravel()), blob((10,), bias))
    (ip1,) = read_caffemodel(write(tmp_path, content))
    assert ip1.name == "ip1" and len(ip1.blobs) == 2
    w, b = ip1.blobs
    assert w.shape == (10, 7) and not w.legacy and w.data.dtype == np.float32
    np.testing.assert_array_equal(w.array((10, 7)), weight)
    np.testing.assert_array_equal(b.array((10,)), bias)
    assert b.data.shape == (10,)


def test_legacy_v1_layers_with_four_dims(tmp_path):
    values = np.arange(12, dtype=np.float32) * 0.5
    legacy = blob((99, 99), values, legacy={1: 1, 2: 1, 3: 3, 4: 4})  # ``shape`` must be ignored
    partial = blob(None, [], legacy={4: 3, 3: 1})  # absent num/channels read as 0: 0 values
    (ip,) = read_caffemodel(write(tmp_path, v1_layer("fc", legacy, partial)))
    assert ip.name == "fc"
    assert ip.blobs[0].legacy and ip.blobs[0].shape == (1, 1, 3, 4)
    np.testing.assert_array_equal(ip.blobs[0].array((3, 4)), values.reshape(3, 4))
    assert ip.blobs[1].shape == (0, 0, 1, 3)


def test_legacy_zero_valued_dim_counts_as_present(tmp_path):
    # proto2 presence: num=0 written explicitly still makes the blob legacy (shape (0,0,0,0)).
    (entry,) = read_caffemodel(write(tmp_path, layer("x", blob((2,), None, legacy={1: 0}))))
    assert entry.blobs[0].legacy and entry.blobs[0].shape == (0, 0, 0, 0)
    assert entry.blobs[0].data.size == 0


def test_v0_nested_layer(tmp_path):
    weight = np.arange(6, dtype=np.float32)
    v0 = v0_body("conv1", blob(None, weight, legacy={1: 1, 2: 1, 3: 2, 4: 3}))
    own = v1_layer("own", blob((1,), [7.0]), v0=v0_body("inner", blob((1,), [1.0])))
    content = v1_layer("", v0=v0) + own
    conv1, own = read_caffemodel(write(tmp_path, content))
    assert conv1.name == "conv1"
    np.testing.assert_array_equal(conv1.blobs[0].array((2, 3)), weight.reshape(2, 3))
    assert own.name == "own"  # the V1 entry's own name and blobs win over the nested V0 ones
    assert own.blobs[0].data.tolist() == [7.0]


def test_v1_entry_without_blobs_takes_v0_blobs(tmp_path):
    content = v1_layer("named", v0=v0_body("inner", blob((2,), [1.0, 2.0])))
    (entry,) = read_caffemodel(write(tmp_path, content))
    assert entry.name == "named" and entry.blobs[0].data.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("unpacked", [False, True])
def test_double_data(tmp_path, unpacked):
    values = [0.1, -2.5, 1e-300, 3.0]
    content = layer("d", blob((2, 2), [9.0] * 4, doubles=values, unpacked=unpacked))
    (entry,) = read_caffemodel(write(tmp_path, content))
    data = entry.blobs[0].data
    assert data.dtype == np.float64 and data.tolist() == values  # double_data wins over data
    result = entry.blobs[0].array((2, 2))
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result, np.float32(values).reshape(2, 2))


def test_empty_double_data_falls_back_to_float_data(tmp_path):
    content = layer("d", blob((2,), [1.0, 2.0], extra=f_len(8, b"")))
    (entry,) = read_caffemodel(write(tmp_path, content))
    assert entry.blobs[0].data.dtype == np.float32 and entry.blobs[0].data.tolist() == [1.0, 2.0]


def test_unpacked_floats_and_unpacked_dims(tmp_path):
    values = np.random.default_rng(1).standard_normal(6).astype(np.float32)
    body = f_len(7, shape_msg((2, 3), packed=False)) + blob(None, values, unpacked=True)
    (entry,) = read_caffemodel(write(tmp_path, layer("u", body)))
    assert entry.blobs[0].shape == (2, 3)
    np.testing.assert_array_equal(entry.blobs[0].array((2, 3)), values.reshape(2, 3))


def test_repeated_chunks_concatenate_in_order(tmp_path):
    # Two shape messages merge (dims concatenate); packed and unpacked data mix in file order.
    body = f_len(7, shape_msg((2,))) + f_len(7, shape_msg((3,)))
    body += f_len(5, floats_le([0, 1])) + f_fixed32(5, struct.pack("<f", 2.0))
    body += f_len(5, floats_le([3, 4, 5]))
    (entry,) = read_caffemodel(write(tmp_path, layer("c", body)))
    assert entry.blobs[0].shape == (2, 3)
    assert entry.blobs[0].data.tolist() == [0, 1, 2, 3, 4, 5]


def test_multiple_layers_in_file_order_including_blobless(tmp_path):
    content = (
        layer("data")
        + layer("ip1", blob((1,), [1.0]))
        + f_str(1, "net name after layers")
        + layer("relu1")
        + layer("ip2", blob((2,), [2.0, 3.0]), blob((1,), [4.0]))
    )
    layers = read_caffemodel(write(tmp_path, content))
    assert [entry.name for entry in layers] == ["data", "ip1", "relu1", "ip2"]
    assert [len(entry.blobs) for entry in layers] == [0, 1, 0, 2]
    assert layers[0] == LayerBlobs("data", ())


def test_unknown_fields_of_every_wire_type_are_skipped(tmp_path):
    weight = np.arange(20, dtype=np.float32)
    shape = noise(2, 5) + shape_msg((4, 5)) + noise(*FORK_NUMBERS)
    blob_body = noise(10, *FORK_NUMBERS) + f_len(7, shape) + f_len(5, floats_le(weight))
    blob_body += noise(11) + f_len(6, floats_le(weight)) + f_len(9, doubles_le([1.0]))  # diffs
    layer_extra = noise(3, 8, 146, *FORK_NUMBERS)
    content = noise(3, 4, 5, 6, 7, 8, 999, *FORK_NUMBERS)
    content += layer("ip", blob_body, extra=layer_extra) + noise(*FORK_NUMBERS)
    content += f_varint(100, 1) + f_fixed32(2, b"\0\0\0\0")  # known numbers, wrong wire types
    (entry,) = read_caffemodel(write(tmp_path, content))
    assert entry.name == "ip"
    np.testing.assert_array_equal(entry.blobs[0].array((4, 5)), weight.reshape(4, 5))


def test_names_with_non_utf8_bytes_do_not_fail(tmp_path):
    (entry,) = read_caffemodel(write(tmp_path, f_len(100, f_len(1, b"ip\xff1"))))
    assert entry.name.startswith("ip") and entry.name.endswith("1")


# --- Blob.fits / Blob.array --------------------------------------------------------------------


def make_blob(shape, legacy):
    return Blob(tuple(shape), np.zeros(int(np.prod(shape)), dtype=np.float32), legacy)


def test_fits_legacy_rule():
    weight = make_blob((1, 1, 10, 7), legacy=True)
    assert weight.fits((10, 7)) and weight.fits((1, 10, 7)) and weight.fits((1, 1, 10, 7))
    assert not weight.fits((7, 10)) and not weight.fits((70,)) and not weight.fits((1, 1, 1, 10, 7))
    bias = make_blob((1, 1, 1, 10), legacy=True)
    assert bias.fits((10,)) and not bias.fits((10, 1))
    conv = make_blob((8, 3, 5, 5), legacy=True)
    assert conv.fits((8, 3, 5, 5)) and not conv.fits((24, 5, 5))


def test_fits_new_style_needs_exact_shape():
    blob_ = make_blob((2, 3), legacy=False)
    assert blob_.fits((2, 3)) and blob_.fits([np.int64(2), 3])
    assert not blob_.fits((3, 2)) and not blob_.fits((1, 2, 3)) and not blob_.fits((6,))


def test_fits_checks_the_value_count():
    short = Blob((1, 1, 2, 2), np.zeros(3, dtype=np.float32), True)
    assert not short.fits((2, 2))


def test_array_rejects_a_blob_that_does_not_fit():
    with pytest.raises(ModelLoadError) as info:
        make_blob((2, 3), legacy=False).array((3, 2))
    assert "\n" not in str(info.value) and "(2, 3)" in str(info.value)


# --- zero copy ---------------------------------------------------------------------------------


def file_map(array: np.ndarray) -> mmap.mmap:
    """Follow numpy's base chain (array -> ... -> memoryview -> mmap) to the file map."""
    base = array.base
    while not isinstance(base, mmap.mmap):
        assert base is not None, "the array does not view a file map"
        base = base.obj if isinstance(base, memoryview) else base.base
    return base


def test_packed_float_data_is_a_read_only_view_into_the_file_map(tmp_path):
    values = np.arange(1000, dtype=np.float32)
    path = write(tmp_path, layer("ip", blob((10, 100), values)))
    data = read_caffemodel(path)[0].blobs[0].data
    assert not data.flags.owndata and not data.flags.writeable
    file_bytes = file_map(data)
    assert not file_bytes.closed  # the views keep the map alive after read_caffemodel returned
    assert np.shares_memory(data, np.frombuffer(file_bytes, np.uint8))
    weight = read_caffemodel(path)[0].blobs[0].array((10, 100))
    assert not weight.flags.owndata and isinstance(file_map(weight), mmap.mmap)
    np.testing.assert_array_equal(data, values)


def test_large_blob_loads_as_a_view(tmp_path):
    values = np.random.default_rng(2).standard_normal(4 << 20).astype(np.float32)  # 16 MiB
    content = layer("big", blob((4, 1 << 20), values)) + layer("tail", blob((1,), [1.0]))
    big, tail = read_caffemodel(write(tmp_path, content))
    assert not big.blobs[0].data.flags.owndata
    np.testing.assert_array_equal(big.blobs[0].data, values)
    assert tail.blobs[0].data.tolist() == [1.0]


# --- malformed input ---------------------------------------------------------------------------


def small_valid_file() -> bytes:
    return (
        f_str(1, "n")
        + layer("ip1", blob((2, 2), [1, 2, 3, 4]), extra=f_varint(140, 3))
        + v1_layer("", v0=v0_body("old", blob(None, [5.0], legacy={1: 1, 2: 1, 3: 1, 4: 1})))
        + layer("d", blob((1,), doubles=[2.0], unpacked=True))
    )


def test_every_prefix_is_valid_or_a_load_error(tmp_path):
    content = small_valid_file()
    assert len(read_caffemodel(write(tmp_path, content))) == 3
    for cut in range(len(content)):
        path = write(tmp_path, content[:cut], f"cut{cut}.caffemodel")
        try:
            layers = read_caffemodel(path)
        except ModelLoadError as err:
            assert "\n" not in str(err) and str(path) in err.where
        else:
            assert all(isinstance(entry, LayerBlobs) for entry in layers)


def test_truncation_message_names_field_layer_and_file(tmp_path):
    content = layer("ip1", blob((4,), [1, 2, 3, 4]))
    path = write(tmp_path, content[:-3])
    error = assert_load_error(path)
    assert error.what.startswith("truncated caffemodel: field 100 of the net runs past the end")
    inner = f_str(1, "ip1") + tag(7, 2) + varint(50) + b"\x00" * 10  # blob length past the end
    error = assert_load_error(write(tmp_path, tag(100, 2) + varint(len(inner)) + inner))
    assert "field 7 of layer 'ip1'" in error.what and "layer 'ip1'" in error.where
    assert "re-download" in error.hint


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(layer("x", f_len(5, b"\0" * 6)), id="float-bytes-not-multiple-of-4"),
        pytest.param(layer("x", f_len(8, b"\0" * 12)), id="double-bytes-not-multiple-of-8"),
        pytest.param(layer("x", blob((2, 3), [1.0] * 5)), id="count-not-product-of-shape"),
        pytest.param(layer("x", blob(None, [1.0] * 3, legacy={1: 2, 2: 2})), id="legacy-count"),
        pytest.param(layer("x", blob((-1,), [])), id="negative-dim"),
        pytest.param(layer("x", blob(None, [], legacy={1: -1})), id="negative-legacy-dim"),
        pytest.param(layer("x", blob((1,) * 33, [1.0])), id="too-many-axes"),
        pytest.param(layer("x", blob((2 ** 62, 2 ** 62), [1.0])), id="absurd-dims"),
        pytest.param(layer("x", blob()), id="empty-blob-has-count-mismatch"),
        pytest.param(tag(100, 6) + b"\0" * 8, id="wire-type-6"),
        pytest.param(tag(100, 7), id="wire-type-7"),
        pytest.param(tag(5, 4), id="stray-end-group"),
        pytest.param(f_group(5, f_varint(1, 1))[:-1] + tag(6, 4), id="mismatched-end-group"),
        pytest.param(tag(5, 3) + f_varint(1, 1), id="unterminated-group"),
        pytest.param(tag(100, 2) + b"\xff" * 11, id="varint-too-long"),
        pytest.param(tag(100, 2) + b"\xff\xff", id="truncated-varint"),
        pytest.param(b"\x00\x01", id="field-number-0"),
        pytest.param(tag(100, 2) + varint(1 << 62) + b"x", id="absurd-length"),
        pytest.param(layer("x", f_len(7, f_len(1, b"\x01" * 400))), id="too-many-packed-dims"),
    ],
)
def test_malformed_files_raise_load_error(tmp_path, content):
    assert_load_error(write(tmp_path, content))


def test_text_prototxt_passed_as_caffemodel(tmp_path):
    prototxt = (
        'name: "LeNet"\n'
        "layer {\n  name: \"data\"\n  type: \"Input\"\n  top: \"data\"\n"
        "  input_param { shape: { dim: 64 dim: 1 dim: 28 dim: 28 } }\n}\n"
        "# a comment\nlayer { name: 'ip1' type: 'InnerProduct' bottom: 'data' top: 'ip1' }\n"
    )
    error = assert_load_error(write(tmp_path, prototxt.encode(), "lenet.prototxt"))
    assert "text" in error.what


def test_empty_file(tmp_path):
    assert "empty" in assert_load_error(write(tmp_path, b"")).what


def test_missing_file(tmp_path):
    assert "cannot read" in assert_load_error(tmp_path / "nope.caffemodel").what


def test_directory_instead_of_file(tmp_path):
    assert_load_error(tmp_path)


FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FUZZ
@given(content=st.binary(min_size=1, max_size=512))
def test_random_garbage_never_escapes_as_another_error(tmp_path, content):
    path = write(tmp_path, content, "garbage.caffemodel")
    try:
        read_caffemodel(path)
    except ModelLoadError as err:
        assert "\n" not in str(err)


@FUZZ
@given(data=st.data())
def test_corrupted_valid_file_never_escapes_as_another_error(tmp_path, data):
    content = bytearray(small_valid_file())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(content) - 1))
        content[at] = data.draw(st.integers(0, 255))
    path = write(tmp_path, bytes(content), "corrupt.caffemodel")
    try:
        read_caffemodel(path)
    except ModelLoadError as err:
        assert "\n" not in str(err)
