"""A catalogue of bad inputs, each through the real CLI (``python -m caffe_lstm``).

Every case must end with exit status 1 and exactly one stderr line ``error: ...`` that says
where the problem is (a file:line, a layer, an option or a file path), no traceback, and no
file left in the output folder: neither the ``-o`` target nor a stray temporary file.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.synthetic import synthetic_weights
from tests.helpers import ROOT

# A small recurrent net: x (T=3, N=2, 4) and cont (3, 2) -> LSTM (5) -> InnerProduct (3).
NET = """name: "bad"
layer { name: "input" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 3 dim: 2 dim: 4 } shape { dim: 3 dim: 2 } } }
layer { name: "lstm1" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param { num_output: 5 } }
layer { name: "ip" type: "InnerProduct" bottom: "h" top: "y"
        inner_product_param { num_output: 3 axis: 2 } }
"""
INPUT = 'layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }\n'
# NET as a train/test net: an HDF5 reader (shapes in its files), a stage, a loss.
TRAIN_NET = NET.replace(
    'layer { name: "input" type: "Input" top: "x" top: "cont"\n'
    '        input_param { shape { dim: 3 dim: 2 dim: 4 } shape { dim: 3 dim: 2 } } }',
    'layer { name: "data" type: "HDF5Data" top: "x" top: "cont" top: "label"\n'
    '        include { phase: TEST stage: "val" } hdf5_data_param { batch_size: 2 } }') + (
    'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "label" top: "loss" }\n')


def layer(name: str, type_: str, bottoms=(), tops=(), params: str = "") -> str:
    wires = " ".join([f'bottom: "{b}"' for b in bottoms] + [f'top: "{t}"' for t in tops])
    return f'layer {{ name: "{name}" type: "{type_}" {wires} {params} }}\n'


@dataclass
class Case:
    """One bad input: the files to write, the CLI arguments, and what the error line says.

    ``args`` may use ``{dir}`` (the case's folder) and ``{out}`` (the output folder, which must
    be unchanged afterwards); ``where`` and ``what`` must both appear in the error line.
    """

    args: str
    where: str
    what: str
    net: str = NET
    files: dict[str, Callable[[Path], bytes]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    needs_tensorrt: bool = False


def weights_with(change: Callable[[list], None]) -> Callable[[Path], bytes]:
    """NET's seeded weights, with ``change`` applied to the (name, type, blobs) list first."""
    def make(folder: Path) -> bytes:
        net = folder / "for_weights.prototxt"
        net.write_text(NET)
        layers = synthetic_weights(load_net(net).graph, seed=0)
        change(layers)
        path = folder / "made.caffemodel"
        write_caffemodel(path, layers)
        return path.read_bytes()
    return make


good_weights = weights_with(lambda layers: None)


def npz(**arrays) -> Callable[[Path], bytes]:
    def make(folder: Path) -> bytes:
        path = folder / "made.npz"
        np.savez(path, **arrays)
        return path.read_bytes()
    return make


def huge_npy_header(folder: Path) -> bytes:
    """An .npz whose member claims a (1e6, 1e6) float32 array (4 TB) it does not hold."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)})
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("x.npy", header.getvalue())
    return out.getvalue()


def npy(folder: Path) -> bytes:
    """A single .npy array (not an .npz)."""
    out = io.BytesIO()
    np.save(out, np.zeros((3, 2, 4), np.float32))
    return out.getvalue()


def fixed(data: bytes) -> Callable[[Path], bytes]:
    return lambda folder: data


def remove_last_blob(layers: list) -> None:
    name, type_, blobs = layers[0]
    layers[0] = (name, type_, blobs[:-1])


def transpose_first_blob(layers: list) -> None:
    name, type_, blobs = layers[0]
    layers[0] = (name, type_, [blobs[0].T.copy(), *blobs[1:]])


def rename_layers(layers: list) -> None:
    layers[:] = [(f"other_{name}", type_, blobs) for name, type_, blobs in layers]


GOOD_INPUTS = {"x": np.zeros((3, 2, 4), np.float32), "cont": np.ones((3, 2), np.float32)}
RUN = "run {dir}/net.prototxt -w {dir}/w.caffemodel -o {out}/result.npz"
RUN_WITH_INPUTS = RUN + " --inputs {dir}/in.npz"
REWRITE = "rewrite {dir}/net.prototxt -o {out}/rewritten"
CONVERT = "convert {dir}/net.prototxt -w {dir}/w.caffemodel --runtime tensorrt-rtx"
WEIGHTS = {"w.caffemodel": good_weights}


def tanh(name="t", bottom="x", top="y", params=""):
    return layer(name, "TanH", [bottom], [top], params)


def inner_product(num_output: int, name="ip", bottom="x", top="y") -> str:
    return layer(name, "InnerProduct", [bottom], [top],
                 f"inner_product_param {{ num_output: {num_output} }}")


def with_inputs(**arrays) -> dict:
    return {**WEIGHTS, "in.npz": npz(**arrays)}


def with_dims(dims: str, *layers: str) -> str:
    """INPUT with x of ``dims`` (e.g. "dim: 2 dim: -3"), then ``layers``."""
    return INPUT.replace("dim: 2 dim: 3", dims) + "".join(layers)


CASES = {
    # ---- the prototxt: syntax and schema
    "syntax-missing-brace": Case(REWRITE, "net.prototxt:3:", "invalid prototxt",
                                 net=INPUT + 'layer { name: "t" type: "TanH"\n top: "y"\n'),
    "syntax-string-for-number": Case(REWRITE, "net.prototxt:2:", "invalid prototxt",
                                     net=INPUT + inner_product('"5"')),
    "syntax-very-long-line": Case(REWRITE, "net.prototxt:2:", "...'",
                                  net=INPUT + tanh(params="include " + "{ " * 300)),
    "nested-too-deep": Case(REWRITE, "net.prototxt", "nested too deeply",
                            net='layer { name: "l" type: "Loop" loop_param { ' * 300),
    "unknown-field": Case(REWRITE, "net.prototxt:2:", "bottum",
                          net=INPUT + 'layer { name: "t" type: "TanH" bottum: "x" top: "y" }\n'),
    "unknown-field-on-converted-layer": Case(
        REWRITE, "net.prototxt:5:", "layer 'lstm1' (LSTM) has the unknown field "
        "'recurrent_param.zoneout'", net=NET.replace("num_output: 5", "num_output: 5 zoneout: 1")),
    "recurrent-num-layers": Case(REWRITE, "layer 'lstm1' (LSTM) at", "num_layers is 2",
                                 net=NET.replace("num_output: 5",
                                                 "num_output: 5 num_layers: 2 num_proj: 3")),
    "reader-of-another-stage": Case(REWRITE, "layer 'lstm1' (LSTM) at", "--stage val",
                                    net=TRAIN_NET),
    "reader-shape-not-given": Case(RUN + " --stage val", "layer 'data' (HDF5Data) at",
                                   "--shape x:DIMS --shape cont:DIMS", net=TRAIN_NET,
                                   files=WEIGHTS),
    "shape-not-a-net-input": Case(REWRITE + " --shape nope:2x3", "--shape",
                                  "names 'nope', which is not a net input"),
    "shape-wrong-rank": Case(REWRITE + " --shape x:3x2", "--shape", "x has 2 dims"),
    "binary-as-prototxt": Case("inspect {dir}/net.prototxt", "net.prototxt", "not UTF-8",
                               files={"net.prototxt": good_weights}),
    "mixed-v1-and-v2-layers": Case(REWRITE, "net.prototxt", "mixes V2 'layer' and legacy",
                                   net=INPUT + 'layers { name: "t" type: TANH top: "y" }'),
    "include-and-exclude": Case(REWRITE, "layer 't' (TanH) at", "both include and exclude",
                                net=INPUT + tanh(params="include { phase: TEST } "
                                                        "exclude { stage: 'a' }")),
    "unknown-layer-type": Case(REWRITE, "net.prototxt", "unsupported layer types: Frobnicate (f)",
                               net=INPUT + layer("f", "Frobnicate", ["x"], ["y"])),
    # ---- wiring
    "unknown-bottom": Case(REWRITE, "layer 't' (TanH) at", "bottom 'z'",
                           net=INPUT + tanh(bottom="z")),
    "bottom-produced-later": Case(REWRITE, "layer 'a' (TanH) at",
                                  "bottom 'b' is not produced by any earlier layer",
                                  net=INPUT + tanh("a", "b", "a") + tanh("b", "x", "b")),
    "cycle-through-itself": Case(REWRITE, "layer 'a' (TanH) at", "bottom 'a'",
                                 net=INPUT + tanh("a", "a", "a")),
    "duplicate-top": Case(REWRITE, "layer 's' (TanH) at", "top 'y' is produced by more than one",
                          net=INPUT + tanh("t") + tanh("s")),
    "duplicate-input-top": Case(REWRITE, "layer 'input2' (Input) at", "top 'x' is produced by",
                                net=INPUT + INPUT.replace('"input"', '"input2"') + tanh()),
    "wrong-bottom-count": Case(REWRITE, "layer 't' (TanH)", "expected 1 bottoms, found 2",
                               net=INPUT + layer("t", "TanH", ["x", "x"], ["y"])),
    "outputs-unknown-blob": Case(REWRITE + " --outputs nope", "net.prototxt",
                                 "--outputs names unknown blob(s) nope"),
    # ---- shapes
    "eltwise-shape-mismatch": Case(REWRITE, "layer 'sum' (Eltwise)", "(2, 4)", net=INPUT
                                   + inner_product(4, top="z")
                                   + layer("sum", "Eltwise", ["x", "z"], ["y"])),
    "concat-shape-mismatch": Case(REWRITE, "layer 'cat' (Concat)", "bottom 1 has shape (2, 4)",
                                  net=INPUT + inner_product(4, top="z")
                                  + layer("cat", "Concat", ["x", "z"], ["y"],
                                          "concat_param { axis: 0 }")),
    "lstm-cont-mismatch": Case(REWRITE, "layer 'lstm1' (LSTM)", "cont must have shape (3, 2)",
                               net=NET.replace("{ dim: 3 dim: 2 } }", "{ dim: 3 dim: 7 } }")),
    "negative-input-dim": Case(REWRITE, "layer 'input' (Input) at", "a negative dim",
                               net=with_dims("dim: 2 dim: -3", tanh())),
    "absurd-input-dim": Case(REWRITE, "layer 'input' (Input) at", "a dim above 2^31 - 1",
                             net=with_dims("dim: 2 dim: 99999999999", tanh())),
    "reshape-absurd-dim": Case(REWRITE, "layer 'r' (Reshape)", "not divisible by 6000000000",
                               net=INPUT + layer("r", "Reshape", ["x"], ["y"], "reshape_param "
                                                 "{ shape { dim: 0 dim: -1 dim: 3000000000 } }")),
    "reshape-negative-dim": Case(REWRITE, "layer 'r' (Reshape)", "shape dims must be ≥ −1",
                                 net=INPUT + layer("r", "Reshape", ["x"], ["y"],
                                                   "reshape_param { shape { dim: -5 } }")),
    "dummydata-negative-dim": Case(REWRITE, "layer 'd' (DummyData)", "negative dim",
                                   net=layer("d", "DummyData", [], ["y"],
                                             "dummy_data_param { shape { dim: 2 dim: -1 } }")),
    "dummydata-count-overflow": Case(REWRITE, "layer 'd' (DummyData)",
                                     "more than 2^63 - 1 elements",
                                     net=layer("d", "DummyData", [], ["y"], "dummy_data_param "
                                               "{ shape { " + "dim: 2000000000 " * 3 + "} }")),
    "innerproduct-absurd-num-output": Case(REWRITE, "layer 'ip' (InnerProduct)",
                                           "a dim above 2^31 - 1",
                                           net=INPUT + inner_product(4000000000)),
    "embed-absurd-input-dim": Case(REWRITE, "layer 'e' (Embed)", "a dim above 2^31 - 1",
                                   net=INPUT + layer("e", "Embed", ["x"], ["y"], "embed_param "
                                                     "{ input_dim: 3000000000 num_output: 2 }")),
    # ---- the memory bound
    "net-too-big-default-limit": Case(REWRITE, "net.prototxt",
                                      "needs 112 GiB for its blobs (limit 8 GiB), layer 'ip' "
                                      "(InnerProduct) alone 74.5 GiB",
                                      net=with_dims("dim: 100000 dim: 100000",
                                                    inner_product(100000))),
    "net-too-big-max-memory": Case("--max-memory 1K " + RUN, "net.prototxt",
                                   "(limit 1 KiB), layer 'lstm1' (LSTM)", files=WEIGHTS),
    "net-too-big-env": Case(RUN, "net.prototxt", "(limit 512 bytes)", files=WEIGHTS,
                            env={"CAFFE_LSTM_MAX_BYTES": "512"}),
    "max-bytes-env-not-a-size": Case(RUN, "the environment", "CAFFE_LSTM_MAX_BYTES: 'lots'",
                                     files=WEIGHTS, env={"CAFFE_LSTM_MAX_BYTES": "lots"}),
    # ---- caffemodels
    "caffemodel-truncated": Case(RUN, "w.caffemodel", "truncated caffemodel",
                                 files={"w.caffemodel": lambda d: good_weights(d)[:-100]}),
    "caffemodel-garbage": Case(RUN, "w.caffemodel", "caffemodel", files={"w.caffemodel": fixed(
        np.random.default_rng(7).integers(0, 256, 4096, np.uint8).tobytes())}),
    "caffemodel-is-text": Case(RUN, "w.caffemodel", "looks like text",
                               files={"w.caffemodel": fixed(NET.encode())}),
    "caffemodel-empty": Case(RUN, "w.caffemodel", "empty caffemodel",
                             files={"w.caffemodel": fixed(b"")}),
    "caffemodel-wrong-blob-count": Case(RUN, "layer 'lstm1' (LSTM)", "has 2 blobs for this layer",
                                        files={"w.caffemodel": weights_with(remove_last_blob)}),
    "caffemodel-wrong-blob-shape": Case(RUN, "layer 'lstm1' (LSTM)", "blob 0 has shape (4, 20)",
                                        files={"w.caffemodel": weights_with(transpose_first_blob)}),
    "caffemodel-lacks-the-layers": Case(RUN, "net.prototxt:4", "no weights for blob 'lstm1/W_xc'",
                                        files={"w.caffemodel": weights_with(rename_layers)}),
    # ---- input arrays
    "inputs-missing-array": Case(RUN_WITH_INPUTS, "in.npz", "missing input(s) cont",
                                 files=with_inputs(x=GOOD_INPUTS["x"])),
    "inputs-extra-array": Case(RUN_WITH_INPUTS, "in.npz", "unknown array(s) extra",
                               files=with_inputs(**GOOD_INPUTS, extra=np.zeros(1))),
    "inputs-wrong-rank": Case(RUN_WITH_INPUTS, "in.npz", "input 'x' has shape (3, 8)",
                              files=with_inputs(x=np.zeros((3, 8)), cont=GOOD_INPUTS["cont"])),
    "inputs-wrong-feature-dim": Case(RUN_WITH_INPUTS, "layer 'lstm1' (LSTM)", "the bottoms need",
                                     files=with_inputs(x=np.zeros((3, 2, 7)),
                                                       cont=GOOD_INPUTS["cont"])),
    "state-io-wrong-state-shape": Case(
        RUN_WITH_INPUTS + " --state io", "layer 'lstm1' (LSTM)", "h_0 must have shape",
        files=with_inputs(**GOOD_INPUTS, **{"lstm1/h_0": np.zeros((1, 3, 5), np.float32)})),
    "state-array-without-state-io": Case(
        RUN_WITH_INPUTS, "in.npz", "unknown array(s) lstm1/h_0",
        files=with_inputs(**GOOD_INPUTS, **{"lstm1/h_0": np.zeros((1, 2, 5), np.float32)})),
    "inputs-strings": Case(RUN_WITH_INPUTS, "in.npz", "has dtype <U1, expected numbers",
                           files=with_inputs(x=np.full((3, 2, 4), "a"), cont=GOOD_INPUTS["cont"])),
    "inputs-not-npz": Case(RUN_WITH_INPUTS, "in.npz", "cannot read the inputs file",
                           files={**WEIGHTS, "in.npz": fixed(b"x = [1, 2, 3]\n")}),
    "inputs-npy-not-npz": Case(RUN_WITH_INPUTS, "in.npz", "a single .npy array, not an .npz",
                               files={**WEIGHTS, "in.npz": npy}),
    "inputs-header-claims-4-TB": Case(RUN_WITH_INPUTS, "in.npz", "the arrays need 3.64 TiB",
                                      files={**WEIGHTS, "in.npz": huge_npy_header}),
    # ---- verify's tolerances: a negative or NaN term makes every comparison fail or pass
    "verify-negative-atol": Case("verify {dir}/net.prototxt -w {dir}/w.caffemodel --atol -1",
                                 "--atol", "is not a finite number >= 0", files=WEIGHTS),
    "verify-nan-rtol": Case("verify {dir}/net.prototxt -w {dir}/w.caffemodel --rtol nan",
                            "--rtol", "is not a finite number >= 0", files=WEIGHTS),
    # ---- outputs that cannot be written
    "run-output-unwritable": Case("run {dir}/net.prototxt -w {dir}/w.caffemodel "
                                  "-o {out}/no/dir/o.npz", "o.npz", "cannot write the output",
                                  files=WEIGHTS),
    "dot-output-unwritable": Case("dot {dir}/net.prototxt -o {out}/no/dir/g.dot", "g.dot",
                                  "cannot write the output"),
    "rewrite-output-under-a-file": Case("rewrite {dir}/net.prototxt -o {dir}/net.prototxt/sub",
                                        "net.prototxt/sub", "cannot create the output directory"),
    "convert-output-unwritable": Case(CONVERT + " -o {out}/no/dir/m.engine", "m.engine",
                                      "cannot write the output", files=WEIGHTS,
                                      needs_tensorrt=True),
    "convert-shape-unknown-input": Case(CONVERT + " -o {out}/m.engine --shape nope:1x1:2x2:3x3",
                                        "--shape", "names 'nope', which is not a net input",
                                        files=WEIGHTS, needs_tensorrt=True),
    "convert-shape-absurd-dim": Case(CONVERT + " -o {out}/m.engine --shape "
                                     "x:1x2x4:3x2x4:99999999999x2x4 --shape cont:1x2:3x2:9x2",
                                     "--shape MAX", "a dim above 2^31 - 1", files=WEIGHTS,
                                     needs_tensorrt=True),
}


def _has_tensorrt_rtx() -> bool:
    try:
        import tensorrt_rtx_bindings  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class Outcome:
    """What a case's command did: its process, and whether it left files behind."""

    proc: subprocess.CompletedProcess
    left_in_out: list[Path]
    changed_inputs: bool


@pytest.fixture(scope="module")
def outcomes(request, module_scratch) -> dict[str, Future]:
    """The selected cases' commands, run concurrently (each is a Python start-up)."""
    selected = [item.callspec.params["case_id"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_bad_input"]
    runnable = [case_id for case_id in selected if _can_run(CASES[case_id])]
    prepared = {case_id: _prepare(module_scratch.mktemp(case_id), CASES[case_id])
                for case_id in runnable}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return {case_id: pool.submit(_run, CASES[case_id], *folders)
                for case_id, folders in prepared.items()}


@pytest.mark.parametrize("case_id", list(CASES))
def test_bad_input(outcomes, case_id):
    case = CASES[case_id]
    if not _can_run(case):
        pytest.skip("TensorRT for RTX is not installed")
    outcome = outcomes[case_id].result()
    stderr = outcome.proc.stderr
    lines = stderr.strip().splitlines()
    assert outcome.proc.returncode == 1, stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    assert case.where in lines[0] and case.what in lines[0], lines[0]
    assert outcome.left_in_out == [], "the failed command left files behind"
    assert not outcome.changed_inputs, "the failed command left files beside its inputs"


def _prepare(tmp: Path, case: Case) -> tuple[Path, Path]:
    """The case's folder (net.prototxt and its files) and an empty output folder."""
    folder, out = tmp / "case", tmp / "out"
    folder.mkdir()
    out.mkdir()
    (folder / "net.prototxt").write_text(case.net)
    for name, make in case.files.items():
        (folder / name).write_bytes(make(tmp))
    return folder, out


def _run(case: Case, folder: Path, out: Path) -> Outcome:
    before = sorted(folder.rglob("*"))
    args = case.args.format(dir=folder, out=out).split()
    proc = subprocess.run([sys.executable, "-m", "caffe_lstm", *args], capture_output=True,
                          text=True, timeout=300, env=_env(case.env))
    return Outcome(proc, sorted(out.rglob("*")), sorted(folder.rglob("*")) != before)


def _can_run(case: Case) -> bool:
    return not case.needs_tensorrt or _has_tensorrt_rtx()


def test_catalogue_is_large_enough():
    assert len(CASES) >= 25


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CAFFE_LSTM_MAX_BYTES"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, **extra}
