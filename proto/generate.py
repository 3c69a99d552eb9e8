"""Regenerate ``caffe_lstm/proto/caffe_pb2.py`` from ``proto/caffe.proto``.

Usage (from anywhere; paths are resolved relative to this file)::

    python proto/generate.py              # rewrite caffe_lstm/proto/caffe_pb2.py
    python proto/generate.py --out DIR    # write DIR/caffe_pb2.py instead (the staleness test)

Needs ``grpcio-tools`` (it bundles ``protoc``; no system protoc is used). The generated module is
committed, so users only need the ``protobuf`` runtime. The module embeds the protobuf version of
the bundled protoc and checks at import time that the installed runtime is not older than that
(a runtime of a newer major version loads it too), so bump ``grpcio-tools`` and the ``protobuf``
pin together.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROTO_DIR.parent
PROTO_FILE = PROTO_DIR / "caffe.proto"
DEFAULT_OUT = REPO_ROOT / "caffe_lstm" / "proto"


def generate(out_dir: Path) -> Path:
    """Run protoc on caffe.proto, writing ``out_dir/caffe_pb2.py``; return that path."""
    from grpc_tools import protoc  # imported here so `--help` works without grpcio-tools

    out_dir.mkdir(parents=True, exist_ok=True)
    # The proto is passed by its name relative to -I, so the module is named caffe_pb2 and the
    # embedded file name is "caffe.proto" no matter where the command is run from.
    args = [
        "protoc",
        f"--proto_path={PROTO_DIR}",
        f"--python_out={out_dir}",
        PROTO_FILE.name,
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit code {rc}: {' '.join(args)}")
    return out_dir / "caffe_pb2.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"output directory (default: {DEFAULT_OUT.relative_to(REPO_ROOT)})",
    )
    ns = parser.parse_args(argv)
    path = generate(ns.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
