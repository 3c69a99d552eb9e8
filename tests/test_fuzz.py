"""Fuzzing the readers: every input ends in success or in CaffeLstmError, nothing else.

Targets (each a function of the input bytes, shared with ``benchmarks/fuzz_long.py``):

- ``prototxt``: ``load_net`` on a net definition (reader, upgrade, importer, shape inference),
  seeded with the samples and the corpus and mutated by byte flips, truncations, line
  deletions and duplications, numbers replaced by extreme values and field names swapped;
  also on random text.
- ``caffemodel``: ``load_net`` of a sample net with mutated weights (the samples' caffemodels and
  a legacy V1 form of one), so the wire reader and ``attach_weights`` both run.
- ``npz``: ``load_npz`` + ``apply_feeds`` + a numpy run of a sample net on mutated input files.
- ``execute``: mutated sample nets (as written and as rewritten) that load are run from their
  equations and rewritten, with random weights and inputs.

The bounded runs here are derandomized (the same examples every time, a few seconds each);
the long run explores. The regression tests at the end keep every bug the fuzzing found.
"""

from __future__ import annotations

import functools
import io
import re
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caffe_lstm.analysis.limits import memory_limit
from caffe_lstm.frontend.caffe_writer import to_net_parameter, write_prototxt
from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.errors import CaffeLstmError
from caffe_lstm.feeds import apply_feeds, random_feeds
from caffe_lstm.files import load_npz
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.passes import DEFAULT_PIPELINE, run_passes
from caffe_lstm.proto import caffe_pb2
from tests.helpers import corpus_files, sample

#: Nets the fuzzing loads may need at most this much: big shapes end in the limit's error fast.
FUZZ_MAX_BYTES = 64 << 20
#: The execute target runs nets whose inputs' leading (time) axis is at most this long.
FUZZ_MAX_STEPS = 300
SAMPLE_NAMES = ("seq_classifier", "captioner", "fork_vision", "fork_recurrent")

# ---- seeds ----------------------------------------------------------------------------------


@functools.cache
def prototxt_seeds() -> tuple[bytes, ...]:
    """The samples' net definitions, the samples rewritten (Loop layers, and unrolled), then
    the corpus' net definitions."""
    samples = tuple(sample(name)[0].read_bytes() for name in SAMPLE_NAMES)
    rewritten = tuple(_rewritten(name, unroll) for name in SAMPLE_NAMES for unroll in (0, 1))
    return samples + rewritten + tuple(path.read_bytes() for path in corpus_files())


def execute_seeds() -> tuple[bytes, ...]:
    """The samples, as written and as rewritten: nets every layer of which can run."""
    return prototxt_seeds()[:3 * len(SAMPLE_NAMES)]


def _rewritten(name: str, unroll: bool) -> bytes:
    """What ``caffe-lstm rewrite [--unroll]`` writes for a sample."""
    graph = load_net(sample(name)[0]).graph
    definition, _ = to_net_parameter(run_passes(graph, DEFAULT_PIPELINE + (
        ("unroll",) if unroll else ())))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "net.prototxt"
        write_prototxt(path, definition)
        return path.read_bytes()


@functools.cache
def caffemodel_seeds() -> tuple[tuple[str, bytes], ...]:
    """(sample name, caffemodel bytes): the samples' files, and seq_classifier's as V1."""
    seeds = [(name, sample(name)[1].read_bytes()) for name in SAMPLE_NAMES]
    return (*seeds, ("seq_classifier", _v1_caffemodel("seq_classifier")))


def _v1_caffemodel(name: str) -> bytes:
    """A sample's weights as legacy V1 ``layers`` with 4-D num/channels/height/width blobs."""
    net = caffe_pb2.NetParameter()
    net.ParseFromString(sample(name)[1].read_bytes())
    old = caffe_pb2.NetParameter(name=net.name)
    for layer in net.layer:
        entry = old.layers.add(name=layer.name)
        for blob in layer.blobs:
            dims = [1] * (4 - len(blob.shape.dim)) + list(blob.shape.dim)
            entry.blobs.add(num=dims[0], channels=dims[1], height=dims[2], width=dims[3],
                            data=blob.data)
    return old.SerializeToString()


@functools.cache
def npz_seeds() -> tuple[tuple[str, bytes], ...]:
    """(sample name, .npz bytes) of each sample's random inputs, stored and deflated."""
    seeds = []
    with tempfile.TemporaryDirectory() as folder:
        for name in SAMPLE_NAMES:
            feeds = random_feeds(load_net(sample(name)[0]).graph, seed=0)
            for save in (np.savez, np.savez_compressed):
                path = Path(folder) / "in.npz"
                save(path, **feeds)
                seeds.append((name, path.read_bytes()))
    return tuple(seeds)


# ---- mutations --------------------------------------------------------------------------------

#: Dims and counts that break naive code: signs, int32/int64 edges, huge.
INTERESTING_NUMBERS = (0, 1, -1, -2, 2, 3, 7, 255, 65535, 2**31 - 1, 2**31, 2**32 + 1,
                       2**53, 2**63 - 1, -(2**31), -(2**63), 10**30)
_NUMBER = re.compile(rb"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")
_FIELD = re.compile(rb"\b([A-Za-z_]\w*)(?=\s*[:{<])")


@functools.cache
def field_names() -> tuple[bytes, ...]:
    """Every field name of NetParameter, LayerParameter and their nested messages."""
    names: set[str] = set()
    todo, seen = [caffe_pb2.NetParameter.DESCRIPTOR, caffe_pb2.V1LayerParameter.DESCRIPTOR], set()
    while todo:
        message = todo.pop()
        if message.full_name in seen:
            continue
        seen.add(message.full_name)
        for field in message.fields:
            names.add(field.name)
            if field.message_type is not None:
                todo.append(field.message_type)
    return tuple(sorted(name.encode() for name in names))


def _flip(data: bytes, a: int, b: int) -> bytes:
    if not data:
        return bytes([b & 0xFF])
    at = a % len(data)
    return data[:at] + bytes([b & 0xFF]) + data[at + 1:]


def _flip_text(data: bytes, a: int, b: int) -> bytes:
    """Like ``_flip``, mostly with bytes that keep a prototxt text (and parsable)."""
    alphabet = b' {}<>:"#\n0123456789-.eE_xyz'
    return _flip(data, a, alphabet[b % len(alphabet)] if b % 4 else b >> 2)


def _truncate(data: bytes, a: int, b: int) -> bytes:
    return data[:a % (len(data) + 1)]


def _delete_line(data: bytes, a: int, b: int) -> bytes:
    lines = data.splitlines(keepends=True)
    return b"".join(lines[:a % len(lines)] + lines[a % len(lines) + 1:]) if lines else data


def _duplicate_line(data: bytes, a: int, b: int) -> bytes:
    lines = data.splitlines(keepends=True)
    if not lines:
        return data
    at, to = a % len(lines), b % (len(lines) + 1)
    return b"".join(lines[:to] + [lines[at]] + lines[to:])


def _replace_number(data: bytes, a: int, b: int) -> bytes:
    """The a-th number becomes an interesting one, or a random one from b."""
    found = list(_NUMBER.finditer(data))
    if not found:
        return data
    match = found[a % len(found)]
    value = INTERESTING_NUMBERS[b % len(INTERESTING_NUMBERS)] if b % 2 else b // 2 - 2**30
    return data[:match.start()] + str(value).encode() + data[match.end():]


def _swap_field(data: bytes, a: int, b: int) -> bytes:
    """The a-th field name becomes another one of the file (odd b) or of the schema (even b)."""
    found = list(_FIELD.finditer(data))
    if not found:
        return data
    match = found[a % len(found)]
    names = [m.group(1) for m in found] if b % 2 else field_names()
    return data[:match.start()] + names[b // 2 % len(names)] + data[match.end():]


def _insert_bytes(data: bytes, a: int, b: int) -> bytes:
    at = a % (len(data) + 1)
    return data[:at] + b.to_bytes(4, "little") + data[at:]


def _duplicate_chunk(data: bytes, a: int, b: int) -> bytes:
    """Bytes [a, a + b % 64) copied right after themselves (repeated fields, bad lengths)."""
    at = a % (len(data) + 1)
    return data[:at] + data[at:at + b % 64] + data[at:]


def _mutate_npz_member(data: bytes, a: int, b: int) -> bytes:
    """One .npy member of a zip mutated (its header text or its data), the zip rebuilt with
    valid checksums, so the mutation reaches numpy rather than zipfile's CRC check."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = [(info, archive.read(info)) for info in archive.infolist()]
    except Exception:  # an earlier raw mutation broke the zip: mutate its bytes instead
        return _flip(data, a, b)
    if not members:
        return data
    kinds = (_replace_number, _replace_number, _flip_text, _flip, _truncate, _duplicate_chunk)
    at = a % len(members)
    info, content = members[at]
    members[at] = (info, kinds[b % len(kinds)](content, a // len(members), b // len(kinds)))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for info, content in members:
            archive.writestr(info, content, compress_type=info.compress_type)
    return out.getvalue()


#: What forks write that our schema does not know: scalar fields (strings, lists, separators),
#: whole messages (nested, either bracket), enum values of known fields (pool, phase, engine).
UNKNOWN_SNIPPETS = (
    b"zz_field: 3 ", b'zz_name: "a" "b" ', b"zz_param { a: 1 b { c: 'x}' } } ",
    b"zz_list: [1, 2, 3] ", b"zz_msg < d: -1.5e3 > ", b"phase: RUN ", b"pool: FANCY ",
    b"engine: CUDNN9 ", b"zz_flag: true, ", b"zz_block: { e: [ { f: 1 } ] } ", b"variance_norm: X ",
)


def _insert_unknown(data: bytes, a: int, b: int) -> bytes:
    """An unknown field, message or enum value at the start of the a-th line (between two
    fields in the files the seeds are)."""
    lines = data.splitlines(keepends=True)
    snippet = UNKNOWN_SNIPPETS[b % len(UNKNOWN_SNIPPETS)]
    at = a % (len(lines) + 1)
    return b"".join(lines[:at] + [snippet + b"\n"] + lines[at:])


TEXT_MUTATIONS: tuple[Callable[[bytes, int, int], bytes], ...] = (
    _flip_text, _flip, _truncate, _delete_line, _duplicate_line, _replace_number,
    _replace_number, _replace_number, _swap_field, _swap_field, _insert_unknown)
BINARY_MUTATIONS: tuple[Callable[[bytes, int, int], bytes], ...] = (
    _flip, _flip, _flip, _truncate, _insert_bytes, _duplicate_chunk)
NPZ_MUTATIONS: tuple[Callable[[bytes, int, int], bytes], ...] = (
    _mutate_npz_member, _mutate_npz_member, _mutate_npz_member, _flip, _truncate)

Op = tuple[int, int, int]


def mutate(data: bytes, ops: list[Op], kinds: tuple[Callable, ...]) -> bytes:
    """Applies each (mutation index, a, b) of ``ops`` in turn."""
    for kind, a, b in ops:
        data = kinds[kind % len(kinds)](data, a, b)
    return data


# ---- targets: each returns or raises CaffeLstmError; anything else is a bug ------------------


def fuzz_target(run: Callable) -> Callable:
    """Runs a target under the fuzzing memory limit, in a fresh temporary folder (its first
    argument), with numpy's overflow warnings off (garbage numbers are expected)."""
    @functools.wraps(run)
    def wrapped(*args):
        with tempfile.TemporaryDirectory() as folder, memory_limit(FUZZ_MAX_BYTES), \
                np.errstate(all="ignore"):
            run(Path(folder), *args)
    return wrapped


@fuzz_target
def load_prototxt(folder: Path, data: bytes) -> None:
    """Target (a): read, upgrade, import and shape a net definition."""
    load_net(_write(folder / "net.prototxt", data))


@fuzz_target
def load_caffemodel(folder: Path, name: str, data: bytes) -> None:
    """Target (b): the sample net ``name`` with these bytes as its caffemodel."""
    load_net(sample(name)[0], _write(folder / "w.caffemodel", data))


@fuzz_target
def run_npz(folder: Path, name: str, data: bytes) -> None:
    """Target (c): these bytes as the --inputs of a run of the sample net ``name``."""
    path = _write(folder / "in.npz", data)
    graph = load_net(*sample(name)).graph
    NumpyExecutor(graph).run(apply_feeds(graph, load_npz(path), str(path)))


@fuzz_target
def execute(folder: Path, data: bytes) -> None:
    """Target (d): a net that loads is run from its equations and rewritten, on random inputs
    with random weights (the op facets' validation against their numpy code)."""
    graph = load_net(_write(folder / "net.prototxt", data)).graph
    if max((v.shape[0] for v in graph.inputs if v.shape), default=0) > FUZZ_MAX_STEPS:
        return  # T steps run (and unroll into) T blocks: long work, not a hang
    rng = np.random.default_rng(0)
    for value in _all_weights(graph):
        value.data = rng.uniform(-0.5, 0.5, value.shape).astype(np.float32)
    feeds = random_feeds(graph, seed=0)
    NumpyExecutor(graph).run(feeds)
    NumpyExecutor(run_passes(graph, DEFAULT_PIPELINE + ("unroll",))).run(feeds)


def ends_well(target: Callable, *args) -> None:
    """The property: ``target`` succeeds or raises CaffeLstmError with a one-line message."""
    try:
        target(*args)
    except CaffeLstmError as exc:
        assert "\n" not in exc.line(), exc.line()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _all_weights(graph):
    """Every weight value, those of loop bodies included."""
    for node in graph.nodes:
        yield from node.weights
        if node.op == "Loop":
            yield from _all_weights(node.attrs["body"])


# ---- the bounded runs -------------------------------------------------------------------------

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ops = st.lists(st.tuples(st.integers(0, 63), st.integers(0, 2**20), st.integers(0, 2**20)),
               min_size=1, max_size=4)


@FUZZ
@given(seed=st.integers(0, 10**6), mutations=ops)
def test_fuzz_prototxt_mutations(seed, mutations):
    seeds = prototxt_seeds()
    ends_well(load_prototxt, mutate(seeds[seed % len(seeds)], mutations, TEXT_MUTATIONS))


@settings(FUZZ, max_examples=200)
@given(text=st.text(alphabet=st.sampled_from(list('layer{}:"name top bottom type 0123-_.#\n'
                                                    "input_param shape dim InnerProduct LSTM"))))
def test_fuzz_prototxt_random_text(text):
    ends_well(load_prototxt, text.encode())


@settings(FUZZ, max_examples=100)
@given(data=st.binary(max_size=256))
def test_fuzz_prototxt_random_bytes(data):
    ends_well(load_prototxt, data)


@settings(FUZZ, max_examples=200)
@given(seed=st.integers(0, 10**6),
       inserts=st.lists(st.tuples(st.integers(0, 2**20), st.integers(0, 2**20)), min_size=1,
                        max_size=3))
def test_fuzz_prototxt_unknown_fields(seed, inserts):
    """Unknown fields, messages and enum values inserted into the seeds: the reader never
    crashes or hangs, and never calls them a syntax error (they are skipped, and refused only
    on a converted layer)."""
    seeds = prototxt_seeds()
    data = seeds[seed % len(seeds)]
    for a, b in inserts:
        data = _insert_unknown(data, a, b)
    try:
        load_prototxt(data)
    except CaffeLstmError as exc:
        assert "\n" not in exc.line() and not exc.what.startswith("invalid prototxt"), exc.line()


@FUZZ
@given(seed=st.integers(0, 10**6), mutations=ops)
def test_fuzz_caffemodel_mutations(seed, mutations):
    seeds = caffemodel_seeds()
    name, data = seeds[seed % len(seeds)]
    ends_well(load_caffemodel, name, mutate(data, mutations, BINARY_MUTATIONS))


@FUZZ
@given(seed=st.integers(0, 10**6), mutations=ops)
def test_fuzz_npz_mutations(seed, mutations):
    seeds = npz_seeds()
    name, data = seeds[seed % len(seeds)]
    ends_well(run_npz, name, mutate(data, mutations, NPZ_MUTATIONS))


feed_arrays = st.dictionaries(
    st.sampled_from(["data", "cont", "input_sentence", "cont_sentence", "image_features", "x"]),
    st.lists(st.integers(0, 5), max_size=4).flatmap(
        lambda shape: st.sampled_from(["f4", "f8", "i4", "u1", "?", "c8", "U2", "M8[s]"]).map(
            lambda dtype: np.ones(shape, dtype))))


@settings(FUZZ, max_examples=200)
@given(name=st.sampled_from(SAMPLE_NAMES), feeds=feed_arrays)
def test_fuzz_feeds_from_arrays(name, feeds):
    ends_well(_run_feeds, name, feeds)


@fuzz_target
def _run_feeds(folder: Path, name: str, feeds: dict) -> None:
    graph = load_net(*sample(name)).graph
    NumpyExecutor(graph).run(apply_feeds(graph, feeds, "the inputs"))


@settings(FUZZ, max_examples=200)
@given(seed=st.integers(0, 10**6), mutations=ops)
def test_fuzz_execute_mutated_samples(seed, mutations):
    seeds = execute_seeds()
    ends_well(execute, mutate(seeds[seed % len(seeds)], mutations, TEXT_MUTATIONS))


#: The fork layers' fields (interp_param, st_param, psroi_pooling_param, repeat_param) and the
#: shapes they read: numbers and field names of samples/fork_vision mutated, then run.
FIELD_MUTATIONS = (_replace_number, _replace_number, _replace_number, _swap_field)


@settings(FUZZ, max_examples=150)
@given(mutations=ops)
def test_fuzz_execute_fork_layer_fields(mutations):
    seed = sample("fork_vision")[0].read_bytes()
    ends_well(execute, mutate(seed, mutations, FIELD_MUTATIONS))


#: The fork recurrent layers' fields (lstm_param's batch_size, lstm_simple_param,
#: lstm_unit_param, recurrent_param's num_layers and dropout_ratio) and the shapes they read:
#: numbers and field names of samples/fork_recurrent mutated, then run and rewritten.
@settings(FUZZ, max_examples=150)
@given(mutations=ops)
def test_fuzz_execute_fork_recurrent_fields(mutations):
    seed = sample("fork_recurrent")[0].read_bytes()
    ends_well(execute, mutate(seed, mutations, FIELD_MUTATIONS))


def test_mutations_change_their_input():
    text = sample("seq_classifier")[0].read_bytes()
    for kind in range(len(TEXT_MUTATIONS)):
        assert mutate(text, [(kind, 5, 7)], TEXT_MUTATIONS) != text, TEXT_MUTATIONS[kind]
    number, field = TEXT_MUTATIONS.index(_replace_number), TEXT_MUTATIONS.index(_swap_field)
    assert mutate(b"dim: 3", [(number, 0, 3)], TEXT_MUTATIONS) == b"dim: -2"  # INTERESTING[3]
    assert b"input_param" not in mutate(b"input_param { }", [(field, 0, 0)], TEXT_MUTATIONS)


def test_seeds_are_valid():
    """The seeds load without error, so mutations start from real, working inputs."""
    for data in execute_seeds():
        execute(data)
    for name, data in caffemodel_seeds():
        load_caffemodel(name, data)
    for name, data in npz_seeds():
        run_npz(name, data)
    with tempfile.TemporaryDirectory() as folder:
        v1 = _write(Path(folder) / "w.caffemodel", caffemodel_seeds()[-1][1])
        graph = load_net(sample("seq_classifier")[0], v1).graph
        assert all(w.data is not None for node in graph.nodes for w in node.weights)


# ---- regressions: each input below once escaped as another exception ---------------------------


def _npz_bytes(**arrays) -> bytes:
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def _zip_bytes(name: str, content: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(name, content)
    return out.getvalue()


def _patch_zip(data: bytes, local_offset: int, central_offset: int, value: int) -> bytes:
    """A 2-byte field set in the first local file header and the first central directory
    entry (flags: offsets 6 and 8; compression method: 8 and 10)."""
    data = bytearray(data)
    for signature, offset in ((b"PK\x03\x04", local_offset), (b"PK\x01\x02", central_offset)):
        at = data.find(signature) + offset
        data[at:at + 2] = value.to_bytes(2, "little")
    return bytes(data)


def _corrupt_deflate() -> bytes:
    out = io.BytesIO()
    np.savez_compressed(out, data=np.arange(1000, dtype=np.float32))
    data = bytearray(out.getvalue())
    start = data.find(b"PK\x03\x04")
    name_length = int.from_bytes(data[start + 26:start + 28], "little")
    extra_length = int.from_bytes(data[start + 28:start + 30], "little")
    payload = start + 30 + name_length + extra_length
    for at in range(payload + 5, payload + 40):
        data[at] ^= 0x55
    return bytes(data)


def _npy_bytes() -> bytes:
    out = io.BytesIO()
    np.save(out, np.zeros((12, 2, 8), np.float32))
    return out.getvalue()


@pytest.mark.parametrize("data,message", [
    pytest.param(_npy_bytes(), "a single .npy array", id="npy-file-TypeError"),
    pytest.param(_zip_bytes("data.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'(\n"),
                 "cannot read the inputs file", id="header-not-a-literal-TokenError"),
    pytest.param(_corrupt_deflate(), "while decompressing", id="corrupt-deflate-zlib.error"),
    pytest.param(_patch_zip(_npz_bytes(data=np.zeros(3)), 8, 10, 99),
                 "compression method is not supported", id="compression-99-NotImplementedError"),
    pytest.param(_patch_zip(_npz_bytes(data=np.zeros(3)), 6, 8, 1), "encrypted",
                 id="encrypted-member-RuntimeError"),
])
def test_regression_npz_reader(tmp_path, data, message):
    path = _write(tmp_path / "in.npz", data)
    with pytest.raises(CaffeLstmError, match=message):
        load_npz(path)


def _claiming(shape: tuple[int, ...]) -> bytes:
    """An .npz whose member's header claims ``shape`` (float32) and holds no data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return _zip_bytes("data.npy", header.getvalue())


def test_regression_npz_header_is_checked_before_reading(tmp_path):
    """A member that claims 4 TB is refused from its header: nothing of that size is made."""
    path = _write(tmp_path / "in.npz", _claiming((10**6, 10**6)))
    with pytest.raises(CaffeLstmError, match=r"the arrays need 3\.64 TiB \(limit 8 GiB\)"):
        load_npz(path)
    with memory_limit(1 << 50):  # past the memory bound, the dims are still checked
        path = _write(tmp_path / "in.npz", _claiming((1, 3 * 10**9)))
        with pytest.raises(CaffeLstmError, match=r"a dim above 2\^31 - 1"):
            load_npz(path)


@pytest.mark.parametrize("dtype", ["U1", "c8", "M8[s]", "f4,f4", "O"])
def test_regression_feeds_refuse_non_numbers(dtype):
    """Strings once escaped as ValueError; complex, dates and records were silently cast."""
    graph = load_net(*sample("seq_classifier")).graph
    feeds = {"data": np.zeros((12, 2, 8), dtype), "cont": np.ones((12, 2), np.float32)}
    with pytest.raises(CaffeLstmError, match=r"input 'data' has dtype .*, expected numbers"):
        apply_feeds(graph, feeds, "in.npz")


def test_regression_deeply_nested_prototxt(tmp_path):
    """The text parser recursed into a RecursionError; now one ModelLoadError."""
    path = _write(tmp_path / "net.prototxt",
                  b'layer { name: "l" type: "Loop" loop_param { ' * 400)
    with pytest.raises(CaffeLstmError, match="nested too deeply"):
        load_net(path)


def test_regression_parse_error_quotes_at_most_80_characters_of_the_line(tmp_path):
    path = _write(tmp_path / "net.prototxt", b"layer { name: 'a' " + b"{ " * 10000)
    with pytest.raises(CaffeLstmError) as info:
        load_net(path)
    assert len(info.value.line()) < 400 and "...'" in info.value.what


@pytest.mark.parametrize("text", [
    pytest.param('layer { name: "i" type: "Input" top: "x" top: "x" '
                 'input_param { shape { dim: 2 } } }', id="input-twice"),
    pytest.param('layer { name: "i" type: "Input" top: "x" input_param { shape { dim: 2 } } }\n'
                 'layer { name: "a" type: "TanH" bottom: "x" top: "y" }\n'
                 'layer { name: "b" type: "TanH" bottom: "x" top: "y" }', id="two-producers"),
])
def test_regression_duplicate_tops_are_refused_as_caffe_does(tmp_path, text):
    """Accepted silently before (a second output "y@a"); Caffe stops: "Top blob 'y' produced
    by multiple sources" (net.cpp AppendTop)."""
    with pytest.raises(CaffeLstmError, match="is produced by more than one layer"):
        load_net(_write(tmp_path / "net.prototxt", text.encode()))


def test_in_place_tops_stay_allowed(tmp_path):
    text = ('layer { name: "i" type: "Input" top: "x" input_param { shape { dim: 2 } } }\n'
            'layer { name: "a" type: "TanH" bottom: "x" top: "x" }\n'
            'layer { name: "b" type: "TanH" bottom: "x" top: "x" }')
    graph = load_net(_write(tmp_path / "net.prototxt", text.encode())).graph
    assert [v.name for v in graph.outputs] == ["x@b"] and len(graph.nodes) == 2  # x is the input


# ---- layer types from outside: a plugin's own param message, Caffe's Python layer -------------

PLUGIN_NET = Path(__file__).resolve().parents[1] / "samples" / "plugin_example"
PYTHON_NET = Path(__file__).resolve().parents[1] / "samples" / "python_layer"


@fuzz_target
def execute_plugin_net(folder: Path, data: bytes) -> None:
    """Target (e): a net using the SSD Normalize plugin (samples/plugin_example), its
    ``norm_param`` read through the plugin's declared fields (bool, float, a nested
    FillerParameter with an enum), run as ``execute`` does. A PluginError would be the sample
    plugin's bug: the property is stricter than CaffeLstmError here."""
    from caffe_lstm.ops import PluginError, plugins

    with plugins.isolated():
        plugins.load_plugins([PLUGIN_NET / "caffe_lstm_ssd_normalize" / "__init__.py"])
        try:
            execute.__wrapped__(folder, data)
        except PluginError as exc:
            raise AssertionError(f"the sample plugin failed: {exc.line()}") from exc


@fuzz_target
def execute_python_layer_net(folder: Path, data: bytes) -> None:
    """Target (f): samples/python_layer (an LSTM, then a Caffe Python layer through the pycaffe
    shim) with ``python_path``, loaded and run from its equations."""
    graph = load_net(_write(folder / "net.prototxt", data),
                     python_path=PYTHON_NET / "layers").graph
    if max((v.shape[0] for v in graph.inputs if v.shape), default=0) > FUZZ_MAX_STEPS:
        return
    rng = np.random.default_rng(0)
    for value in _all_weights(graph):
        value.data = rng.uniform(-0.5, 0.5, value.shape).astype(np.float32)
    NumpyExecutor(graph).run(random_feeds(graph, seed=0))


@settings(FUZZ, max_examples=150)
@given(mutations=ops)
def test_fuzz_plugin_param_messages(mutations):
    """Numbers, field names and unknown entries of the plugin net mutated (norm_param's fields
    among them), then loaded and run."""
    seed = (PLUGIN_NET / "normalize_lstm.prototxt").read_bytes()
    ends_well(execute_plugin_net, mutate(seed, mutations, FIELD_MUTATIONS + (_insert_unknown,
                                                                           _flip_text)))


@settings(FUZZ, max_examples=100)
@given(mutations=ops)
def test_fuzz_python_layer_net(mutations):
    seed = (PYTHON_NET / "python_layer.prototxt").read_bytes()
    ends_well(execute_python_layer_net, mutate(seed, mutations, TEXT_MUTATIONS))


def test_plugin_and_python_seeds_are_valid():
    execute_plugin_net((PLUGIN_NET / "normalize_lstm.prototxt").read_bytes())
    execute_python_layer_net((PYTHON_NET / "python_layer.prototxt").read_bytes())
