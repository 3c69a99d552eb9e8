"""``caffe-lstm serve``: a model repository (from ``caffe-lstm triton``) on the Triton server
bundled in nvidia-pytriton, on the CPU, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import click

from caffe_lstm.cli.group import cli
from caffe_lstm.cli.options import GlobalOptions, pass_options
from caffe_lstm.serving.server import ServingError, TritonServer


class _Stop(Exception):
    """Raised in the main thread by the SIGTERM handler."""


def _port_option(name: str, what: str):
    return click.option(f"--{name}-port", type=click.IntRange(1, 65535), default=None,
                        metavar="PORT",
                        help=f"Port of the {what} (default: a free one).")


@cli.command()
@click.argument("repository", metavar="REPO",
                type=click.Path(exists=True, file_okay=False, path_type=Path))
@_port_option("http", "HTTP/REST endpoint")
@_port_option("grpc", "gRPC endpoint")
@_port_option("metrics", "Prometheus metrics endpoint")
@click.option("--address", metavar="ADDR", default="127.0.0.1", show_default=True,
              help="Where the endpoints listen; 0.0.0.0 for every interface.")
@click.option("--log", "log", type=click.Path(dir_okay=False, path_type=Path),
              help="Append the server's own log to this file (default: a temporary file, "
                   "removed on exit).")
@pass_options
def serve(options: GlobalOptions, repository: Path, http_port: int | None,
          grpc_port: int | None, metrics_port: int | None, address: str,
          log: Path | None) -> None:
    """Serve a model repository written by `caffe-lstm triton` with Triton on the CPU.

    Starts the tritonserver bundled in nvidia-pytriton (pip install 'caffe-lstm[serve]'),
    waits until every model is loaded, prints the endpoints and serves until Ctrl-C or SIGTERM,
    then stops the server (exit status 0).
    """
    server = TritonServer(repository, http_port=http_port, grpc_port=grpc_port,
                          metrics_port=metrics_port, address=address, log=log)
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        server.start()
        options.say(f"serving {', '.join(server.models)} from {repository}")
        options.say(f"  HTTP     {server.http_url}")
        options.say(f"  gRPC     {server.grpc_url}")
        options.say(f"  metrics  {server.metrics_url}")
        options.say("stop with Ctrl-C")
        sys.stdout.flush()
        status = server.wait()
        raise ServingError(f"tritonserver exited on its own with status {status}: "
                           f"{server.last_error()}", str(repository))
    except (KeyboardInterrupt, _Stop):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM does not cut stop()
        status = server.stop()  # None: stopped while starting (start() cleaned up)
        options.say("stopped" if status is None else f"stopped (tritonserver exit status {status})")
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)


def _raise_stop(signum, frame) -> None:
    raise _Stop()
