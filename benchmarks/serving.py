"""Serving the seq_classifier sample on a real Triton server: steps/s, latency per step and the
mean batch per execution at 1, 8 and 32 concurrent sequences.

    python benchmarks/serving.py [--seconds S] [--repeats N] [--quick]

The repository is written as `caffe-lstm triton --backend python` writes it (one step per
request: data 1x1x8, cont 1x1), served by `caffe_lstm.serve` (the tritonserver bundled in
nvidia-pytriton, on this machine's CPU). Each concurrent sequence is one client thread with its
own gRPC client, streaming sequences of --length steps one synchronous request per step
(cont 0 at the first step), a new sequence with the same correlation id after each END. A
level runs for --seconds after a warm-up; steps/s counts the steps answered in that window,
the latencies are those of its requests, and the mean batch per execution is Triton's own
count (statistics extension: inference_count / execution_count over the window). Needs
`pip install 'caffe-lstm[serve]'`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "seq_classifier"
MODEL = "seq_classifier"
LEVELS = (1, 8, 32)
TARGET = 3.0


def write_repository(repository: Path, max_batch: int, delay_us: int, instances: int = 1) -> None:
    import caffe_lstm
    from caffe_lstm.serving.config import Batching

    net = caffe_lstm.load(SAMPLE / "seq_classifier.prototxt",
                          SAMPLE / "seq_classifier.caffemodel",
                          shapes={"data": (1, 1, 8), "cont": (1, 1)})
    batching = Batching(max_candidate_sequences=max(LEVELS), max_queue_delay_us=delay_us)
    net.to_triton(repository, backend="python", name=MODEL, max_batch=max_batch,
                  instances=instances, batching=batching)


class TritonClientSequence:
    """One sequence's steps through tritonclient's gRPC client (what the tests use)."""

    def __init__(self, url: str, corrid: int) -> None:
        import tritonclient.grpc as grpcclient

        self.client = grpcclient.InferenceServerClient(url)
        self.corrid = corrid
        self.data = grpcclient.InferInput("data", [1, 1, 8], "FP32")
        self.cont = grpcclient.InferInput("cont", [1, 1], "FP32")
        self.outputs = [grpcclient.InferRequestedOutput("probs")]

    def step(self, data: np.ndarray, cont: float, start: bool, end: bool) -> np.ndarray:
        self.data.set_data_from_numpy(data.reshape(1, 1, 8))
        self.cont.set_data_from_numpy(np.full((1, 1), cont, np.float32))
        result = self.client.infer(MODEL, [self.data, self.cont], outputs=self.outputs,
                                   sequence_id=self.corrid, sequence_start=start,
                                   sequence_end=end)
        return result.as_numpy("probs")


class GrpcSequence:
    """The same requests through Triton's gRPC service stub (tritonclient's generated
    service_pb2), one ModelInferRequest per thread reused for every step: the client's own
    CPU time per step is a fraction of tritonclient's, which matters when client and server
    share two cores."""

    def __init__(self, url: str, corrid: int) -> None:
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(url))
        self.request = service_pb2.ModelInferRequest(model_name=MODEL)
        self.request.inputs.add(name="data", datatype="FP32", shape=[1, 1, 8])
        self.request.inputs.add(name="cont", datatype="FP32", shape=[1, 1])
        self.request.outputs.add(name="probs")
        self.request.raw_input_contents.extend([b"", b""])
        self.request.parameters["sequence_id"].int64_param = corrid

    def step(self, data: np.ndarray, cont: float, start: bool, end: bool) -> np.ndarray:
        self.request.raw_input_contents[0] = data.astype(np.float32).tobytes()
        self.request.raw_input_contents[1] = np.float32(cont).tobytes()
        self.request.parameters["sequence_start"].bool_param = start
        self.request.parameters["sequence_end"].bool_param = end
        response = self.stub.ModelInfer(self.request)
        return np.frombuffer(response.raw_output_contents[0], np.float32).reshape(1, 1, 5)


CLIENTS = {"grpc": GrpcSequence, "tritonclient": TritonClientSequence}


class Level:
    """One concurrency level: `count` threads streaming sequences until told to stop."""

    def __init__(self, url: str, count: int, length: int, client: str) -> None:
        self.url, self.count, self.length = url, count, length
        self.sequence = CLIENTS[client]
        self.measuring = threading.Event()
        self.stopping = threading.Event()
        self.latencies: list[list[float]] = [[] for _ in range(count)]
        self.errors: list[BaseException] = []

    def run(self, warmup: float, seconds: float) -> tuple[int, float]:
        threads = [threading.Thread(target=self._client, args=(k,), daemon=True)
                   for k in range(self.count)]
        for thread in threads:
            thread.start()
        time.sleep(warmup)
        self.measuring.set()
        begin = time.perf_counter()
        time.sleep(seconds)
        self.measuring.clear()
        elapsed = time.perf_counter() - begin
        self.stopping.set()
        for thread in threads:
            thread.join(60)
        if self.errors:
            raise self.errors[0]
        return sum(len(lat) for lat in self.latencies), elapsed

    def _client(self, k: int) -> None:
        try:
            sequence = self.sequence(self.url, corrid=1 + k)
            rng = np.random.default_rng(k)
            mine = self.latencies[k]
            while not self.stopping.is_set():
                steps = rng.standard_normal((self.length, 8)).astype(np.float32)
                for t in range(self.length):
                    began = time.perf_counter()
                    probs = sequence.step(steps[t], 0.0 if t == 0 else 1.0, start=t == 0,
                                          end=t == self.length - 1)
                    if self.measuring.is_set():
                        mine.append(time.perf_counter() - began)
                    if not abs(float(probs.sum()) - 1) < 1e-4:  # a softmax over 5 classes
                        raise RuntimeError(f"step {t} answered {probs}, not probabilities")
        except BaseException as exc:  # reported by run()
            self.errors.append(exc)

    def percentile(self, q: float) -> float:
        return float(np.percentile([x for lat in self.latencies for x in lat], q)) * 1e3


def counts(server) -> tuple[int, int]:
    stats = server.statistics(MODEL)["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def measure(server, count: int, args) -> dict:
    level = Level(server.grpc_url, count, args.length, args.client)
    before = counts(server)
    steps, elapsed = level.run(args.warmup, args.seconds)
    after = counts(server)
    inferences, executions = after[0] - before[0], after[1] - before[1]
    return {"concurrency": count, "steps": steps, "steps_per_s": steps / elapsed,
            "p50_ms": level.percentile(50), "p99_ms": level.percentile(99),
            "mean_batch": inferences / executions if executions else float("nan")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured time per level")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured time per level")
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds over the levels; each level's median round is reported")
    parser.add_argument("--length", type=int, default=20, help="steps per sequence")
    parser.add_argument("--max-batch", type=int, default=32, help="the model's max_batch_size")
    parser.add_argument("--delay-us", type=int, default=0,
                        help="the sequence batcher's max_queue_delay_microseconds")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="grpc",
                        help="grpc: Triton's gRPC service stub, one request message reused "
                             "(light); tritonclient: tritonclient.grpc's infer()")
    parser.add_argument("--quick", action="store_true",
                        help="1 s per level, one round: a smoke run, the numbers mean little")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.warmup, args.repeats = 1.0, 0.5, 1

    import caffe_lstm

    with tempfile.TemporaryDirectory() as scratch:
        repository = Path(scratch) / "repo"
        write_repository(repository, args.max_batch, args.delay_us)
        with caffe_lstm.serve(repository) as server:
            rounds = {count: [] for count in LEVELS}
            for _ in range(args.repeats):
                for count in LEVELS:  # the levels alternate within each round
                    rounds[count].append(measure(server, count, args))
    rows = {count: sorted(results, key=lambda r: r["steps_per_s"])[len(results) // 2]
            for count, results in rounds.items()}
    print(f"seq_classifier, python backend, max_batch {args.max_batch}, queue delay "
          f"{args.delay_us} us, {args.client} client, sequences of {args.length} steps, "
          f"{args.seconds:g} s per level, median of {args.repeats} round(s)")
    print(f"{'sequences':>9} {'steps/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'mean batch':>10}")
    for count, row in rows.items():
        print(f"{count:>9} {row['steps_per_s']:>9.0f} {row['p50_ms']:>8.2f} "
              f"{row['p99_ms']:>8.2f} {row['mean_batch']:>10.2f}")
    for count in LEVELS:
        spread = [r["steps_per_s"] for r in rounds[count]]
        if len(spread) > 1:
            print(f"steps/s at {count}: {min(spread):.0f} ... {max(spread):.0f} over the rounds "
                  f"(stdev {statistics.stdev(spread):.0f})")
    ratio = rows[32]["steps_per_s"] / rows[1]["steps_per_s"]
    print(f"load average during the run: {os.getloadavg()[0]:.1f} (1 min)")
    print(f"throughput 32 / 1 = {ratio:.3f}")
    print(f"target throughput 32 / 1 >= {TARGET:g}: {'met' if ratio >= TARGET else 'not met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
