"""Files at the edges: .npz tensors in and out, and atomic writes (never a half-written file)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

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


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Reads every array of an .npz file (no pickled objects)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except FileNotFoundError:
        raise ModelLoadError("the inputs file does not exist", str(path), "check the path") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ModelLoadError(f"cannot read the inputs file ({exc})", str(path),
                             "write it with numpy.savez(path, name=array, ...)") from None
