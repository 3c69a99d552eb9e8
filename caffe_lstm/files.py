"""Files at the edges: .npz tensors in and out, and atomic writes (never a half-written file,
never an input overwritten, nothing left behind on an error)."""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import tokenize
import zipfile
import zlib
from pathlib import Path
from collections.abc import Iterator, Mapping

import numpy as np

from caffe_lstm.analysis.limits import check_dims, format_size, max_bytes
from caffe_lstm.errors import ModelLoadError, OutputError


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yields a temporary path beside ``path``; renames it onto ``path`` only on success."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    except OSError as exc:
        raise OutputError(f"cannot write the output ({exc.strerror})", str(path),
                          "check that the directory exists and is writable") from None
    os.close(fd)
    _chmod_like_new_file(tmp)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write the output ({exc.strerror})", str(path),
                          "check the free space and the permissions") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@contextlib.contextmanager
def maybe_atomic(path: str | Path | None) -> Iterator[Path | None]:
    """``atomic_output(path)``, or None (nothing to write) when ``path`` is None."""
    if path is None:
        yield None
        return
    with atomic_output(path) as tmp:
        yield tmp


def refuse_to_overwrite(targets: list[Path], sources: list[Path | None]) -> None:
    """The outputs must not replace the files being read (an output folder = the net's own)."""
    for target in targets:
        if any(source is not None and target.resolve() == source.resolve()
               for source in sources):
            raise OutputError("the output would overwrite an input file", str(target),
                              "choose another output directory")


@contextlib.contextmanager
def nothing_left_on_error(outdir: Path) -> Iterator[list[Path]]:
    """Creates ``outdir`` (and missing parents); on an error removes the files written so far
    (the yielded list) and the directories it created, then re-raises."""
    created = [p for p in (outdir, *outdir.parents) if not p.exists()]
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the output directory ({exc.strerror})", str(outdir),
                          "choose a directory that can be created and written") from None
    written: list[Path] = []
    try:
        yield written
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        for folder in created:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _chmod_like_new_file(path: str) -> None:
    """mkstemp makes 0600 files; give the result the mode open() would (0666 minus umask)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def save_npz(path: str | Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Writes ``arrays`` (keys are Caffe blob names, ``/`` allowed) to ``path`` atomically."""
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as stream:
            np.savez(stream, **arrays)


def arrays_from(source: Mapping[str, np.ndarray] | str | Path) -> dict[str, np.ndarray]:
    """Arrays by name: from a mapping, or read from the .npz file ``source`` names."""
    return load_npz(source) if isinstance(source, (str, Path)) else dict(source)


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Reads every array of an .npz file (no pickled objects).

    The array headers are checked against ``analysis.limits`` before any array is read.
    """
    try:
        data = np.load(path, mmap_mode="r", allow_pickle=False)  # a .npy: mapped, not read
        if not isinstance(data, np.lib.npyio.NpzFile):  # np.load reads .npy files too
            raise ModelLoadError("the inputs file is a single .npy array, not an .npz",
                                 str(path), _NPZ_HINT)
        with data:
            _check_npz_headers(data, str(path))
            return {name: data[name] for name in data.files}
    except FileNotFoundError:
        raise ModelLoadError("the inputs file does not exist", str(path),
                             "check the path") from None
    except _NPZ_ERRORS as exc:
        raise ModelLoadError(f"cannot read the inputs file ({_reason(exc)})", str(path),
                             _NPZ_HINT) from None


_NPZ_HINT = "write it with numpy.savez(path, name=array, ...)"


# What a damaged or foreign file makes numpy and zipfile raise (zlib: corrupt deflate data;
# NotImplementedError: an unknown compression method; RuntimeError: an encrypted member;
# TokenError: a .npy header that is not a Python literal).
_NPZ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error,
               NotImplementedError, RuntimeError, tokenize.TokenError)
_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0}


def _check_npz_headers(data: np.lib.npyio.NpzFile, path: str) -> None:
    """Every member's dims and the total size, from the .npy headers, before reading data."""
    total, members = 0, set(data.zip.namelist())
    for name in data.files:
        # the member numpy reads for ``data[name]``: the exact name first, then name.npy
        with data.zip.open(name if name in members else f"{name}.npy") as f:
            reader = _NPY_HEADERS.get(np.lib.format.read_magic(f))
            if reader is None:
                raise ModelLoadError(f"array '{name}' uses an unsupported .npy format version",
                                     path, "write it with numpy.savez")
            shape, _, dtype = reader(f)
        check_dims(shape, f"array '{name}'", path)
        total += math.prod(shape) * dtype.itemsize
    if total > max_bytes():
        raise ModelLoadError(f"the arrays need {format_size(total)} (limit "
                             f"{format_size(max_bytes())})", path,
                             "raise the memory limit or feed smaller arrays")


def _reason(exc: BaseException) -> str:
    """An exception's text on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__
