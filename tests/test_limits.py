"""The limits checked before allocating: sizes, dims, and the memory bound of a net."""

from __future__ import annotations

import numpy as np
import pytest

from caffe_lstm.analysis.limits import (DEFAULT_MAX_BYTES, ENV_VAR, check_dims, check_memory,
                                        format_size, max_bytes, memory_limit, parse_size)
from caffe_lstm.errors import CaffeLstmError, ShapeError
from caffe_lstm.feeds import apply_feeds, random_feeds
from caffe_lstm.frontend.loader import load_net
from tests.helpers import sample

# Input (1, 1000) -> InnerProduct (1000): by hand, in float32 bytes,
#   data 4,000 + fc top 4,000 + weight 4,000,000 + bias 4,000 = 4,012,000 = 3.826 MiB,
#   of which the fc layer alone (top, weight, bias) 4,008,000 = 3.822 MiB.
FC_NET = """
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 1000 } } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc"
        inner_product_param { num_output: 1000 } }
"""


@pytest.fixture
def fc_net(tmp_path):
    path = tmp_path / "fc.prototxt"
    path.write_text(FC_NET)
    return path


@pytest.mark.parametrize("text,size", [
    ("4G", 4 << 30), ("512M", 512 << 20), ("1.5GiB", 3 << 29), ("2kb", 2048), ("100", 100),
    (" 8g ", 8 << 30), ("1T", 1 << 40), (".5K", 512),
])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "abc", "-1G", "4X", "1e9", "G"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(text)


@pytest.mark.parametrize("size,text", [
    (int(37.2 * 2**30), "37.2 GiB"), (8 << 30, "8 GiB"), (20 << 30, "20 GiB"),
    (4_012_000, "3.83 MiB"), (1536, "1.5 KiB"), (512, "512 bytes"), (3 << 40, "3 TiB"),
    (1023 << 30, "1023 GiB"), (5000 << 40, "5000 TiB"),
])
def test_format_size(size, text):
    assert format_size(size) == text


def test_check_memory_message_gives_the_numbers(fc_net):
    graph = load_net(fc_net).graph  # under the default 8 GiB
    with memory_limit(1 << 20), pytest.raises(ShapeError) as info:
        check_memory(graph, "fc.prototxt")
    assert info.value.line() == (
        "the net needs 3.83 MiB for its blobs (limit 1 MiB), layer 'fc' (InnerProduct) alone "
        "3.82 MiB, fc.prototxt, raise the memory limit or reduce the input shapes")
    with memory_limit(4_012_000):  # exactly the need: allowed
        check_memory(graph, "fc.prototxt")


def test_load_net_checks_before_attaching_weights(fc_net, tmp_path):
    garbage = tmp_path / "w.caffemodel"
    garbage.write_bytes(b"\xff" * 64)  # would fail to read: the limit must come first
    with memory_limit(1 << 20), pytest.raises(ShapeError, match=r"limit 1 MiB"):
        load_net(fc_net, garbage)


def test_limit_sources_in_order(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert max_bytes() == DEFAULT_MAX_BYTES == 8 << 30
    monkeypatch.setenv(ENV_VAR, "512M")
    assert max_bytes() == 512 << 20
    with memory_limit(1000):
        assert max_bytes() == 1000
    assert max_bytes() == 512 << 20
    monkeypatch.setenv(ENV_VAR, "plenty")
    with pytest.raises(CaffeLstmError, match=f"{ENV_VAR}: 'plenty' is not a size"):
        max_bytes()


@pytest.mark.parametrize("shape,message", [
    ((2, -1), "a negative dim"),
    ((2, 2**31), r"a dim above 2\^31 - 1"),
    ((2**31 - 1,) * 3, r"more than 2\^63 - 1 elements"),
])
def test_check_dims_rejects(shape, message):
    with pytest.raises(ShapeError, match=message):
        check_dims(shape, "top 'y'", "layer 'r' (Reshape)")


def test_check_dims_accepts_the_edges():
    check_dims((0, 2**31 - 1), "top 'y'", "")
    check_dims((), "top 'y'", "")


def test_random_feeds_check_before_making_arrays():
    graph = load_net(sample("seq_classifier")[0]).graph
    with memory_limit(1024), pytest.raises(ShapeError, match=r"limit 1 KiB"):
        random_feeds(graph, seed=0)


def test_fed_shapes_are_checked_against_the_limit():
    graph = load_net(*sample("seq_classifier")).graph
    cont = np.ones((10000, 2), np.float32)
    feeds = {"data": np.zeros((10000, 2, 8), np.float32), "cont": cont}  # T 12 -> 10000
    with memory_limit(1 << 20), pytest.raises(ShapeError) as info:
        apply_feeds(graph, feeds, "in.npz")
    assert "(limit 1 MiB)" in info.value.what and info.value.where == "in.npz"


def test_cli_max_memory_option(invoke):
    net, _ = sample("captioner")
    result = invoke("--max-memory", "1K", "inspect", net)
    assert result.exit_code == 1
    assert "error: the net needs 67 KiB for its blobs (limit 1 KiB), layer 'lstm2' (LSTM)" \
        in result.stderr
    assert max_bytes() == DEFAULT_MAX_BYTES  # the option held for that command only
    assert invoke("--max-memory", "1M", "inspect", net).exit_code == 0


def test_cli_max_memory_option_needs_a_size(invoke):
    result = invoke("--max-memory", "lots", "inspect", sample("captioner")[0])
    assert result.exit_code == 2 and "'lots' is not a size" in result.stderr
