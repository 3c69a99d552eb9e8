"""The distributions work outside the source tree: an sdist and a wheel are built, the wheel
goes into a fresh virtual environment in a temporary folder, and its console script converts a
copy of a sample net there.

What this checks: that the sdist carries the files a build from it needs (the wheel is built
from the sdist, as ``python -m build`` does by default), that the wheel carries every module of
the package (e.g. the generated caffe_lstm/proto/caffe_pb2.py, which no import in the source
tree would miss), and that the ``caffe-lstm`` entry point is declared and works.

How, quickly: the build runs with ``--no-isolation`` (the build backend comes from the test
extra, so nothing is downloaded at test time; the isolated build with the declared
[build-system] requirements is what CI's ``pip install -e`` already does). The wheel is
installed with ``--no-deps --no-index``; the dependencies already installed in the environment
running the tests (numpy, protobuf, click, TensorRT for RTX: hundreds of MB) are made visible
to the fresh environment by a ``.pth`` file that lists that environment's site-packages as a
plain path. A plain path line does not process the ``.pth`` files of that folder, so the
editable install's hook (``__editable__.caffe_lstm-*.pth`` and its finder, which map caffe_lstm
to the source tree) is not loaded; the tests assert that every caffe_lstm module, and the
``caffe-lstm`` distribution metadata, come from the fresh environment.

What this does not check: that the dependencies are declared right (the fresh environment
borrows them). CI's ``pip install -e '.[test]'`` into an empty venv checks that the declared
dependencies install, and the rest of the suite that they suffice."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.helpers import ROOT, sample, version

# Not copied to the build folder: environments, VCS data, caches and earlier build output
# (a stale caffe_lstm.egg-info/SOURCES.txt would add its files to the sdist).
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "venv", "build", "dist", "*.egg-info",
                                     "__pycache__", ".pytest_cache", ".hypothesis",
                                     ".ruff_cache", ".import_linter_cache", "*.engine")


def _run(args: list[object], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """A subprocess that sees neither PYTHONPATH nor the user's site-packages."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args} exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def dists(module_scratch) -> dict[str, Path]:
    """sdist and wheel built from a copy of the source tree (the checkout stays untouched)."""
    base = module_scratch.mktemp("dists")
    source, out = base / "source", base / "dist"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source], cwd=base)
    (sdist,), (wheel,) = out.glob("*.tar.gz"), out.glob("*.whl")
    return {"sdist": sdist, "wheel": wheel, "source": source}


@pytest.fixture(scope="module")
def fresh_env(dists, module_scratch) -> Path:
    """A new virtual environment outside the source tree with the wheel installed in it and
    this environment's dependencies visible through a .pth file; returns its bin folder."""
    venv = module_scratch.mktemp("fresh") / "venv"
    _run([sys.executable, "-m", "venv", venv], cwd=venv.parent)
    bin_dir = venv / "bin"
    python = bin_dir / "python"
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
          "--disable-pip-version-check", dists["wheel"]], cwd=venv.parent)
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                     cwd=venv.parent).stdout.strip())
    ours = dict.fromkeys(sysconfig.get_path(k) for k in ("purelib", "platlib"))
    (site / "_borrowed_dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    return bin_dir


def test_sdist_has_the_sources(dists):
    with tarfile.open(dists["sdist"]) as sdist:
        names = {name.partition("/")[2] for name in sdist.getnames()}
    expected = {"pyproject.toml", "README.md", "proto/caffe.proto", "caffe_lstm/proto/caffe_pb2.py"}
    assert expected <= names, f"missing from the sdist: {sorted(expected - names)}"


def test_wheel_has_every_module(dists):
    """Every .py file of the package (as copied for the build) is in the wheel."""
    source = dists["source"]
    modules = {p.relative_to(source).as_posix() for p in (source / "caffe_lstm").rglob("*.py")}
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        names = set(wheel.namelist())
    assert "caffe_lstm/proto/caffe_pb2.py" in modules
    assert modules <= names, f"missing from the wheel: {sorted(modules - names)}"


_PROBE = textwrap.dedent("""
    import importlib, importlib.metadata, json, pathlib, sys
    import caffe_lstm
    root = pathlib.Path(caffe_lstm.__file__).parent
    skipped = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name == "caffe_lstm.__main__":  # runs the command
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:  # an optional dependency (cuda-python, tensorrt)
            if (exc.name or "").split(".")[0] == "caffe_lstm":
                raise
            skipped[name] = exc.name
    print(json.dumps({
        "files": {name: getattr(m, "__file__", None) or list(getattr(m, "__path__", []))
                  for name, m in sys.modules.items() if name.split(".")[0] == "caffe_lstm"},
        "metadata": str(importlib.metadata.distribution("caffe-lstm").locate_file("")),
        "hooks": [repr(h) for h in [*sys.meta_path, *sys.path_hooks]],
        "sys_path": sys.path,
        "skipped": skipped,
    }))
""")


def test_fresh_env_imports_the_wheel_not_the_checkout(fresh_env, tmp_path):
    """Every module of the installed package imports, and from the fresh environment only."""
    probe = json.loads(_run([fresh_env / "python", "-c", _PROBE], cwd=tmp_path).stdout)
    venv = fresh_env.parent.resolve()

    def inside_venv(path: str) -> bool:
        return Path(path).resolve().is_relative_to(venv)

    outside = {name: f for name, f in probe["files"].items()
               if not all(inside_venv(p) for p in ([f] if isinstance(f, str) else f))}
    assert not outside, f"caffe_lstm modules not from the fresh venv {venv}: {outside}"
    assert "caffe_lstm.proto.caffe_pb2" in probe["files"]
    assert inside_venv(probe["metadata"]), probe["metadata"]
    assert not [h for h in probe["hooks"] if "__editable__" in h], probe["hooks"]
    root = ROOT.resolve()
    assert not [p for p in probe["sys_path"] if p and Path(p).resolve() == root], probe
    # A module may fail to import only for want of an optional dependency that this
    # environment lacks too (e.g. NVIDIA TensorRT beside TensorRT for RTX).
    present = {name for name in probe["skipped"].values()
               if importlib.util.find_spec(name.split(".")[0]) is not None}
    assert not present, f"imports that fail only in the fresh venv: {probe['skipped']}"


def test_console_script_converts_outside_the_tree(fresh_env, tmp_path):
    prototxt, weights = sample("seq_classifier")
    for path in (prototxt, weights):
        shutil.copy(path, tmp_path / path.name)
    engine = tmp_path / "seq_classifier.engine"
    _run([fresh_env / "caffe-lstm", "convert", prototxt.name, "-w", weights.name,
          "-o", engine.name], cwd=tmp_path)
    assert engine.is_file() and engine.stat().st_size > 0


def test_console_script_version(fresh_env, tmp_path):
    proc = _run([fresh_env / "caffe-lstm", "--version"], cwd=tmp_path)
    assert proc.stdout.strip() == f"caffe-lstm, version {version()}"
