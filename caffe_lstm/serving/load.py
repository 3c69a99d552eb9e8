"""Load on a running Triton server: concurrent sequences of a stateful model, one step per
request, as perf_analyzer drives them (``caffe-lstm bench --triton``, benchmarks/serving.py).

Each concurrent sequence is one client thread with its own gRPC channel, streaming sequences of
``steps`` requests under its own correlation id (START on the first step, END on the last, the
same id again for its next sequence). The request's inputs come from the model's configuration
(``ModelConfig``, read from the server): random ones, or the steps given. A level first streams
``warmup`` sequences per client, untimed; once every client is through them, each streams
``sequences`` more (or sequences until ``seconds`` have passed), every request timed alone with
``time.perf_counter``. The mean batch per execution is Triton's own count (statistics
extension: inference_count / execution_count over the measured part).

The requests go through Triton's gRPC service stub (tritonclient's generated ``service_pb2``),
one ``ModelInferRequest`` per thread reused for every step: tritonclient's ``infer()`` costs
the client about 1.3x the CPU per step, which matters when clients and server share the cores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from caffe_lstm.serving.server import INSTALL_HINT, ServingError

#: Called with each answer's outputs by name (e.g. to check them); raising stops the level.
Check = Callable[[dict[str, np.ndarray]], None]

#: Seconds a level's clients get to finish after their work is done or its time is up.
JOIN_TIMEOUT = 300.0


@dataclass(frozen=True)
class ServedLevel:
    """One concurrency level's measured part: ``steps`` requests answered in ``seconds``,
    each one's latency (seconds), and Triton's mean batch per execution (None: no execution
    was counted)."""

    concurrency: int
    steps: int
    seconds: float
    latencies: tuple[float, ...]
    mean_batch: float | None

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile of the steps' latencies, in milliseconds."""
        return float(np.percentile(self.latencies, q)) * 1e3 if self.latencies else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The JSON-ready summary (``bench --triton --json``)."""
        return {"concurrency": self.concurrency, "steps": self.steps, "seconds": self.seconds,
                "steps_per_s": self.steps_per_s, "p50_ms": self.percentile(50),
                "p99_ms": self.percentile(99), "mean_batch": self.mean_batch}


@dataclass(frozen=True)
class _Tensor:
    """One input of a request: its name, Triton data type, shape (batch dim of 1 included)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    @property
    def dtype(self) -> np.dtype:
        from tritonclient.utils import triton_to_np_dtype

        return np.dtype(triton_to_np_dtype(self.datatype))


def load_test(url: str, model: str, concurrency: Sequence[int] = (1, 8, 32), *,
              steps: int = 20, sequences: int = 4, seconds: float | None = None,
              warmup: int = 1, inputs: Mapping[str, np.ndarray] | None = None, seed: int = 0,
              check: Check | None = None, first_id: int = 1) -> list[ServedLevel]:
    """Drives ``model`` of the Triton server at ``url`` (its gRPC endpoint, ``host:port``) at
    each level of ``concurrency`` in turn; one ``ServedLevel`` per level.

    ``steps``: requests per sequence; ``sequences``: measured sequences per client (or, with
    ``seconds``, sequences until that many seconds have passed); ``warmup``: untimed sequences
    per client first. ``inputs``: per model input, an array whose first axis runs over the
    steps of a sequence (request t takes row t modulo its length, shaped as the request);
    None: random ones from ``seed``, uniform in [0, 1) for floating inputs (valid as Caffe's
    cont, and as word id 0) and 0 for integer ones. ``check``: called with each answer's
    outputs. Correlation ids are ``first_id`` onwards, one per client.

    Raises:
        ServingError: tritonclient missing, the server unreachable, no such model, inputs that
            do not fit it, or a request Triton refused (its reason).
    """
    _check_counts(concurrency, steps, sequences, seconds, warmup)
    stub, service = _connect(url)
    config = _model_config(stub, service, url, model)
    tensors = _request_tensors(config)
    rows = _step_rows(tensors, inputs, steps, seed, f"the inputs of model '{model}'")
    outputs = [output.name for output in config.output] if check is not None else []
    return [_Level(url, model, count, tensors, rows, outputs, check, first_id).run(
        steps, sequences, seconds, warmup, lambda: _counts(stub, service, url, model))
        for count in concurrency]


def _check_counts(concurrency: Sequence[int], steps: int, sequences: int,
                  seconds: float | None, warmup: int) -> None:
    if not concurrency or min(concurrency) < 1 or steps < 1 or sequences < 1 or warmup < 0 \
            or (seconds is not None and seconds <= 0):
        raise ServingError(
            f"concurrency={list(concurrency)}, steps={steps}, sequences={sequences}, "
            f"seconds={seconds}, warmup={warmup}: each level, step count and sequence count "
            "must be at least 1, seconds above 0 and warmup at least 0", "load_test",
            "e.g. concurrency=(1, 8, 32), steps=20")


# ---- the server --------------------------------------------------------------------------------


def _grpc_modules() -> tuple[Any, Any]:
    """grpc and tritonclient's generated gRPC service modules (the ``[serve]`` extra)."""
    try:
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc
    except ImportError as exc:
        raise ServingError(f"driving a Triton server needs tritonclient[grpc] ({exc})", "",
                           INSTALL_HINT) from None
    return grpc, (service_pb2, service_pb2_grpc)


def _connect(url: str) -> tuple[Any, Any]:
    grpc, (service, service_grpc) = _grpc_modules()
    stub = service_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(url))
    try:
        live = stub.ServerLive(service.ServerLiveRequest(), timeout=10).live
    except grpc.RpcError as exc:
        raise ServingError(f"no Triton server answers at {url} ({_reason(exc)})", url,
                           "give the gRPC endpoint host:port that `caffe-lstm serve` prints"
                           ) from None
    if not live:
        raise ServingError("the Triton server is not live", url, "wait until it has started")
    return stub, service


def _model_config(stub: Any, service: Any, url: str, model: str) -> Any:
    import grpc

    try:
        return stub.ModelConfig(service.ModelConfigRequest(name=model), timeout=30).config
    except grpc.RpcError as exc:
        raise ServingError(f"Triton has no ready model '{model}' ({_reason(exc)})", url,
                           "name one of the models the server loaded") from None


def _counts(stub: Any, service: Any, url: str, model: str) -> tuple[int, int]:
    """(inference_count, execution_count) from Triton's statistics extension."""
    import grpc

    try:
        stats = stub.ModelStatistics(service.ModelStatisticsRequest(name=model), timeout=30)
    except grpc.RpcError as exc:
        raise ServingError(f"Triton's statistics of model '{model}' cannot be read "
                           f"({_reason(exc)})", url, "") from None
    counted = stats.model_stats[0]
    return int(counted.inference_count), int(counted.execution_count)


def _reason(exc: Any) -> str:
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return " ".join(str(details or exc).split())[:300]


def _request_tensors(config: Any) -> list[_Tensor]:
    """The inputs a client sends (the control inputs and states are Triton's): one step of
    one sequence, the batch dim 1 where the model batches, variable dims 1."""
    from tritonclient.grpc import model_config_pb2

    batch = (1,) if config.max_batch_size > 0 else ()
    return [_Tensor(tensor.name, model_config_pb2.DataType.Name(tensor.data_type)[len("TYPE_"):],
                    batch + tuple(d if d > 0 else 1 for d in tensor.dims))
            for tensor in config.input]


def _step_rows(tensors: Sequence[_Tensor], inputs: Mapping[str, np.ndarray] | None, steps: int,
               seed: int, source: str) -> list[list[bytes]]:
    """The raw bytes of every request of a sequence: rows[t][k] for step t, input k."""
    rng = np.random.default_rng(seed)
    columns = []
    for tensor in tensors:
        if inputs is None:
            array = (rng.random((steps, *tensor.shape)) if tensor.dtype.kind == "f"
                     else np.zeros((steps, *tensor.shape)))
        else:
            array = _given_rows(tensor, inputs, source)
        array = np.ascontiguousarray(array, dtype=tensor.dtype)
        columns.append([array[t % len(array)].tobytes() for t in range(steps)])
    if inputs is not None:
        unknown = sorted(set(inputs) - {tensor.name for tensor in tensors})
        if unknown:
            raise ServingError(f"the model has no input {', '.join(unknown)}", source,
                               f"its inputs are {', '.join(t.name for t in tensors)}")
    return [list(row) for row in zip(*columns)]


def _given_rows(tensor: _Tensor, inputs: Mapping[str, np.ndarray], source: str) -> np.ndarray:
    if tensor.name not in inputs:
        raise ServingError(f"no array for the model input '{tensor.name}'", source,
                           f"give one row per step, each of shape {tensor.shape}")
    array = np.asarray(inputs[tensor.name])
    size = int(np.prod(tensor.shape))
    if array.ndim < 1 or len(array) == 0 or array[0].size != size:
        raise ServingError(f"input '{tensor.name}' has shape {array.shape}, not steps x "
                           f"{tensor.shape}", source,
                           f"give one row per step, each of {size} value(s)")
    return array.reshape(len(array), *tensor.shape)


# ---- one level ----------------------------------------------------------------------------------


class _Level:
    """``count`` client threads streaming sequences at once."""

    def __init__(self, url: str, model: str, count: int, tensors: Sequence[_Tensor],
                 rows: list[list[bytes]], outputs: list[str], check: Check | None,
                 first_id: int) -> None:
        self.url, self.model, self.count = url, model, count
        self.tensors, self.rows, self.outputs, self.check = tensors, rows, outputs, check
        self.first_id = first_id
        self.latencies: list[list[float]] = [[] for _ in range(count)]
        self.errors: list[BaseException] = []
        self.failed = threading.Event()

    def run(self, steps: int, sequences: int, seconds: float | None, warmup: int,
            counts: Callable[[], tuple[int, int]]) -> ServedLevel:
        marks: dict[str, Any] = {}

        def measuring_starts() -> None:  # run by one thread once every client is warm
            marks["counts"], marks["began"] = counts(), time.perf_counter()

        barrier = threading.Barrier(self.count, action=measuring_starts)
        threads = [threading.Thread(target=self._client, daemon=True,
                                    args=(k, steps, sequences, seconds, warmup, barrier, marks))
                   for k in range(self.count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(JOIN_TIMEOUT)
        if self.errors:
            raise self.errors[0]
        if any(thread.is_alive() for thread in threads):
            raise ServingError(f"the clients did not finish within {JOIN_TIMEOUT:.0f} s",
                               self.url, "ask for fewer steps or sequences")
        elapsed = time.perf_counter() - marks["began"]
        inferences, executions = (b - a for a, b in zip(marks["counts"], counts()))
        latencies = tuple(x for mine in self.latencies for x in mine)
        return ServedLevel(self.count, len(latencies), elapsed, latencies,
                           inferences / executions if executions else None)

    def _client(self, k: int, steps: int, sequences: int, seconds: float | None, warmup: int,
                barrier: threading.Barrier, marks: dict[str, Any]) -> None:
        try:
            step = self._stepper(self.first_id + k)
            for _ in range(warmup):
                self._sequence(step, steps, None)
            barrier.wait()
            done = 0
            while (time.perf_counter() - marks["began"] < seconds if seconds is not None
                   else done < sequences) and not self.failed.is_set():
                self._sequence(step, steps, self.latencies[k])
                done += 1
        except threading.BrokenBarrierError:
            pass  # another client failed: its error is reported
        except BaseException as exc:  # reported by run()
            self.errors.append(exc)
            self.failed.set()
            barrier.abort()

    def _sequence(self, step: Callable[[int, int], None], steps: int,
                  latencies: list[float] | None) -> None:
        for t in range(steps):
            began = time.perf_counter()
            step(t, steps)
            if latencies is not None:
                latencies.append(time.perf_counter() - began)

    def _stepper(self, corrid: int) -> Callable[[int, int], None]:
        """One request per call, (t, steps): the thread's request message reused."""
        grpc, (service, service_grpc) = _grpc_modules()
        stub = service_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(self.url))
        request = service.ModelInferRequest(model_name=self.model)
        for tensor in self.tensors:
            request.inputs.add(name=tensor.name, datatype=tensor.datatype,
                               shape=list(tensor.shape))
        for name in self.outputs:
            request.outputs.add(name=name)
        request.raw_input_contents.extend([b""] * len(self.tensors))
        request.parameters["sequence_id"].int64_param = corrid

        def step(t: int, steps: int) -> None:
            for k, data in enumerate(self.rows[t]):
                request.raw_input_contents[k] = data
            request.parameters["sequence_start"].bool_param = t == 0
            request.parameters["sequence_end"].bool_param = t == steps - 1
            try:
                response = stub.ModelInfer(request, timeout=JOIN_TIMEOUT)
            except grpc.RpcError as exc:
                raise ServingError(f"Triton refused step {t} of sequence {corrid}: "
                                   f"{_reason(exc)}", self.url, "") from None
            if self.check is not None:
                self.check(_outputs(response))
        return step


def _outputs(response: Any) -> dict[str, np.ndarray]:
    from tritonclient.utils import triton_to_np_dtype

    return {output.name: np.frombuffer(raw, triton_to_np_dtype(output.datatype))
            .reshape(tuple(output.shape))
            for output, raw in zip(response.outputs, response.raw_output_contents)}
