"""Running a model repository on the ``tritonserver`` bundled in nvidia-pytriton (CPU serving).

The wheel ships a real Triton server with only the Python backend, laid out as
``pytriton/tritonserver/{bin/tritonserver, backends/python, python_backend_stubs/<3.x>/}`` with
its shared libraries in ``nvidia_pytriton.libs``. Started as it comes it cannot run a model:

* the ``backends/python`` folder has no stub: the stub of the running Python's major.minor is
  copied beside a copy of it (a fresh backend directory per server);
* a copied stub loses its relative RPATH: ``nvidia_pytriton.libs`` goes on ``LD_LIBRARY_PATH``;
* the stub's embedded interpreter finds numpy and onnxruntime through the first ``python3`` on
  ``PATH``: the running interpreter's ``bin`` goes first;
* the Python backend imports ``model`` with the current directory first on ``sys.path``: the
  server runs in the (empty) work directory, never in one that could hold a ``model.py``.

``TritonServer`` does that, starts the server on local ports, waits until every model of the
repository is loaded (or raises ``ServingError`` with the server's own reason) and stops it with
SIGTERM. Everything here talks to the server through its HTTP/REST API with the standard
library, so neither tritonclient nor pytriton is imported.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from caffe_lstm.errors import CaffeLstmError

INSTALL_HINT = "install it: pip install 'caffe-lstm[serve]'"
#: How docs/serving.md (section 5) serves a repository (``{repo}``) with Triton's other
#: backends: the NGC container of the Triton release nvidia-pytriton bundles.
CONTAINER_COMMAND = ("docker run --gpus all --rm -p 8000:8000 -p 8001:8001 -p 8002:8002 "
                     "-v {repo}:/models nvcr.io/nvidia/tritonserver:24.10-py3 "
                     "tritonserver --model-repository=/models")
#: The only backend of the bundled server (nvidia-pytriton ships no other).
BUNDLED_BACKEND = "python"
#: Seconds to wait for the server to answer and load every model (it takes ~3 s on 2 cores).
START_TIMEOUT = 120.0
#: Seconds SIGTERM gets before SIGKILL: Triton drains the requests in flight and unloads the
#: models (finalize()) within its own exit timeout (--exit-timeout-secs, 30 s by default).
STOP_TIMEOUT = 45.0


class ServingError(CaffeLstmError):
    """The bundled Triton server is missing, cannot start, or cannot load a model."""


@dataclass(frozen=True)
class TritonInstall:
    """Where nvidia-pytriton keeps the pieces of its Triton server."""

    server: Path  #: bin/tritonserver
    python_backend: Path  #: backends/python (libtriton_python.so, no stub)
    stub: Path  #: python_backend_stubs/<major.minor>/triton_python_backend_stub
    libs: Path  #: nvidia_pytriton.libs (libtritonserver.so, libcudart, ...)


def find_triton() -> TritonInstall:
    """The server of the installed nvidia-pytriton wheel; a ServingError naming the ``[serve]``
    extra when it is missing, or naming what is missing from it."""
    spec = importlib.util.find_spec("pytriton")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ServingError("the Triton server is not installed (nvidia-pytriton)", "",
                           INSTALL_HINT)
    package = Path(next(iter(spec.submodule_search_locations)))
    root = package / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    install = TritonInstall(
        server=root / "bin" / "tritonserver",
        python_backend=root / "backends" / "python",
        stub=root / "python_backend_stubs" / version / "triton_python_backend_stub",
        libs=package.parent / "nvidia_pytriton.libs")
    for what, path in (("tritonserver", install.server),
                       ("Python backend", install.python_backend),
                       (f"Python backend stub for Python {version}", install.stub),
                       ("nvidia_pytriton.libs", install.libs)):
        if not path.exists():
            raise ServingError(f"nvidia-pytriton has no {what}", str(path),
                               "reinstall it for this Python: pip install 'caffe-lstm[serve]'")
    return install


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def repository_models(repository: Path) -> list[str]:
    """The model directories of a repository (each holds a ``config.pbtxt``)."""
    return sorted(entry.name for entry in repository.iterdir()
                  if entry.is_dir() and (entry / "config.pbtxt").is_file())


class TritonServer:
    """One ``tritonserver`` process serving ``repository``; a context manager that stops it.

    Ports left as None are chosen free. ``log`` receives the server's own output (a path; by
    default a file in the server's work directory, quoted in errors). ``address`` is where the
    endpoints listen (127.0.0.1: this machine only; 0.0.0.0: every interface).
    """

    def __init__(self, repository: str | Path, *, http_port: int | None = None,
                 grpc_port: int | None = None, metrics_port: int | None = None,
                 address: str = "127.0.0.1", log: str | Path | None = None,
                 start_timeout: float = START_TIMEOUT) -> None:
        self.repository = Path(repository).resolve()
        self.http_port = http_port or free_port()
        self.grpc_port = grpc_port or free_port()
        self.metrics_port = metrics_port or free_port()
        self.address = address
        self.start_timeout = start_timeout
        self._log_path = Path(log) if log is not None else None
        self._workdir: Path | None = None
        self._process: subprocess.Popen | None = None
        self.models: list[str] = []

    # ---- endpoints -----------------------------------------------------------------------

    @property
    def _host(self) -> str:
        return "127.0.0.1" if self.address in ("0.0.0.0", "") else self.address

    @property
    def http_url(self) -> str:
        """``host:port`` of the HTTP/REST endpoint (what tritonclient.http takes)."""
        return f"{self._host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the gRPC endpoint (what tritonclient.grpc takes)."""
        return f"{self._host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        """The Prometheus metrics page."""
        return f"http://{self._host}:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    # ---- lifetime ------------------------------------------------------------------------

    def start(self) -> TritonServer:
        """Starts the server and returns once every model is READY; on any failure the
        process is stopped, the work directory removed and a ServingError raised."""
        if self._process is not None:
            return self
        self.models = self._check_repository()
        self._check_ports()
        install = find_triton()
        self._workdir = Path(tempfile.mkdtemp(prefix="caffe-lstm-serve-"))
        try:
            backends = self._backend_directory(install)
            if self._log_path is None:
                self._log_path = self._workdir / "tritonserver.log"
            self._launch(install, backends)
            self._wait_until_loaded()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT; removes the work directory. Returns the
        server's exit status (None if it was not running). Safe to call twice."""
        status = None
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            status = process.returncode
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        return status

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def wait(self, timeout: float | None = None) -> int | None:
        """Blocks until the server exits on its own (or ``timeout``); its exit status."""
        if self._process is None:
            return None
        try:
            return self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # ---- what the server says ------------------------------------------------------------

    def model_states(self) -> list[dict]:
        """Triton's repository index: ``{"name", "version", "state", "reason"}`` per model."""
        return self._request("POST", "/v2/repository/index") or []

    def statistics(self, model: str = "") -> dict:
        """Triton's statistics extension (``execution_count``, ``inference_count``, ...)."""
        path = f"/v2/models/{model}/stats" if model else "/v2/models/stats"
        return self._request("GET", path)

    def last_error(self) -> str:
        """The server's last error line (Triton's log lines start with E), else its last line."""
        return _last_error(self.log_tail(50))

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's own output."""
        if self._log_path is None or not self._log_path.exists():
            return ""
        text = self._log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    # ---- helpers -------------------------------------------------------------------------

    def _check_repository(self) -> list[str]:
        if not self.repository.is_dir():
            raise ServingError("the model repository is not a directory", str(self.repository),
                               "write one with Net.to_triton or caffe-lstm triton")
        models = repository_models(self.repository)
        if not models:
            raise ServingError("the model repository holds no model (no NAME/config.pbtxt)",
                               str(self.repository),
                               "write one with Net.to_triton or caffe-lstm triton")
        for name in models:
            _check_backend(self.repository, name)
        return models

    def _check_ports(self) -> None:
        """Each port must be free: a server already listening there would answer in place of
        ours (and ours would fail to start)."""
        ports = (("HTTP", self.http_port), ("gRPC", self.grpc_port),
                 ("metrics", self.metrics_port))
        names = [name for name, _ in ports]
        for name, port in ports:
            if [p for _, p in ports].count(port) > 1:
                raise ServingError(f"the {'/'.join(names)} ports must differ, {port} is given "
                                   "twice", "", "choose another port, or leave it out for a "
                                   "free one")
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind((self.address, port))
                except OSError as exc:
                    raise ServingError(f"the {name} port {port} is not free on {self.address} "
                                       f"({exc.strerror})", "", "choose another port, or leave "
                                       "it out for a free one") from None

    def _backend_directory(self, install: TritonInstall) -> Path:
        """backends/python of the wheel plus the stub of this Python, in the work directory."""
        backends = self._workdir / "backends"
        python = backends / "python"
        shutil.copytree(install.python_backend, python, symlinks=True)
        shutil.copy2(install.stub, python / install.stub.name)
        return backends

    def _environment(self, install: TritonInstall) -> dict[str, str]:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            filter(None, [str(install.libs), env.get("LD_LIBRARY_PATH")]))
        # The stub runs the python3 found first on PATH: this interpreter's, whose
        # site-packages hold numpy and onnxruntime.
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join(filter(None, [bin_dir, env.get("PATH")]))
        return env

    def _command(self, install: TritonInstall, backends: Path) -> list[str]:
        """tritonserver's argv; its options by their names in tritonserver's --help."""
        options = {
            "model-repository": self.repository, "backend-directory": backends,
            # Keep serving the models that load; start() reports the others itself.
            "exit-on-error": "false",
            "http-address": self.address, "http-port": self.http_port,
            "grpc-address": self.address, "grpc-port": self.grpc_port,
            "metrics-address": self.address, "metrics-port": self.metrics_port}
        return [str(install.server), *(f"--{name}={value}" for name, value in options.items())]

    def _launch(self, install: TritonInstall, backends: Path) -> None:
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(
                self._command(install, backends), cwd=self._workdir,
                env=self._environment(install), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT,
                # Its own session: a Ctrl-C in the terminal reaches us, and we stop the server.
                start_new_session=True, preexec_fn=_die_with_parent)

    def _wait_until_loaded(self) -> None:
        """Polls the repository index. Triton (model control mode "none") loads every model
        before it opens its endpoints, so the first index it answers is final."""
        deadline = time.monotonic() + self.start_timeout
        while (states := self._index_or_none()) is None:
            if self._process.poll() is not None:
                raise ServingError(
                    f"tritonserver exited with status {self._process.returncode} while "
                    f"starting: {self.last_error()}", str(self.repository), self._log_hint())
            if time.monotonic() > deadline:
                raise ServingError(
                    f"tritonserver did not open its endpoints within {self.start_timeout:.0f} s:"
                    f" {self.last_error()}", str(self.repository), self._log_hint())
            time.sleep(0.1)
        failed = [s for s in states if s.get("state") != "READY"]
        if failed:
            name = str(failed[0].get("name"))
            raise ServingError(f"Triton could not load model '{name}': {self._reason(failed[0])}",
                               str(self.repository / name), self._log_hint())

    def _reason(self, state: dict) -> str:
        """Why a model is not READY: the index's reason, else the server's log line about it
        (a config Triton refuses fails before the model has a state: "Poll failed for model
        directory 'NAME': ...")."""
        if state.get("reason"):
            return str(state["reason"])
        name = str(state.get("name"))
        for line in reversed(self.log_tail(400).splitlines()):
            if line.startswith("E") and f"'{name}'" in line:
                text = line.split("] ", 1)[-1].strip().strip('"')
                return text.split(f"'{name}': ", 1)[-1]
        return str(state.get("state") or "not loaded")

    def _log_hint(self) -> str:
        """Where the whole log is, when it outlives the server (a log file the caller chose)."""
        kept = self._log_path is not None and self._workdir not in self._log_path.parents
        return f"the server's log: {self._log_path}" if kept else ""

    def _index_or_none(self) -> list[dict] | None:
        """The repository index once the HTTP endpoint answers (None before)."""
        try:
            return self.model_states()
        except (OSError, ValueError):
            return None

    def _request(self, method: str, path: str):
        url = f"http://{self._host}:{self.http_port}{path}"
        request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            raise ServingError(f"the server answered {exc.code} to {method} {path}: "
                               f"{exc.read().decode(errors='replace')}") from None
        return json.loads(body) if body else None


def _check_backend(repository: Path, name: str) -> None:
    """Refuses a model whose backend the bundled server lacks (Triton itself would say only
    "unable to find backend library"), pointing at Triton's container."""
    config = repository / name / "config.pbtxt"
    text = config.read_text(encoding="utf-8", errors="replace")
    found = re.search(r'^\s*(backend|platform)\s*:\s*"([^"]+)"', text, re.M)
    if found and found.group(2) != BUNDLED_BACKEND:  # none given: Triton's to decide
        raise ServingError(
            f"the bundled tritonserver has only the {BUNDLED_BACKEND} backend, model '{name}' "
            f"needs the {found.group(2)} {found.group(1)}", str(config),
            "serve the repository in Triton's container (docs/serving.md): "
            + CONTAINER_COMMAND.format(repo=repository.resolve())
            + "; or write it with backend='python'")


def _last_error(log: str) -> str:
    """The server's last error line (Triton's log lines start with E), else its last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E")]
    return (errors or lines or ["no output"])[-1]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies, so a killed `serve` or test run
    leaves no server behind (Linux prctl PR_SET_PDEATHSIG; elsewhere nothing). The signal
    follows the thread that started the server: start it from a thread that outlives it."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def serve(repository: str | Path, *, http_port: int | None = None, grpc_port: int | None = None,
          metrics_port: int | None = None, address: str = "127.0.0.1",
          log: str | Path | None = None, start_timeout: float = START_TIMEOUT) -> TritonServer:
    """Starts the bundled Triton server on ``repository`` and returns it once every model is
    loaded; use it as a context manager to stop it::

        with caffe_lstm.serve("repo") as server:
            client = tritonclient.grpc.InferenceServerClient(server.grpc_url)
    """
    return TritonServer(repository, http_port=http_port, grpc_port=grpc_port,
                        metrics_port=metrics_port, address=address, log=log,
                        start_timeout=start_timeout).start()
