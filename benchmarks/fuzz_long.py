"""The long fuzz run: at least 100,000 inputs over the readers, coverage-guided by atheris.

    PYTHONPATH=. python benchmarks/fuzz_long.py [--inputs 100000] [--seed 1] [--out fuzz-out]
    PYTHONPATH=. python benchmarks/fuzz_long.py --reproduce fuzz-out/crash-prototxt-<sha>.bin

The targets are those of ``tests/test_fuzz.py`` (every input must end in success or in
``CaffeLstmError``): ``prototxt`` (load_net on a net definition), ``caffemodel`` (a sample net
with these weights; the first byte picks the sample), ``npz`` (a numpy run of a sample on these
inputs; the first byte picks the sample) and ``execute`` (a sample-derived net loaded, run from
its equations and rewritten). Each target runs in a worker process of its own (libFuzzer drives
one callback per process), two at a time, seeded with the samples, their rewritten forms and
the corpus; mutations are libFuzzer's (guided by coverage of ``caffe_lstm``, with a dictionary
of the schema's field names for text) mixed with the structured ones of the tests (line
deletions, extreme numbers, swapped field names, .npy members rebuilt inside valid zips).

Every input runs under a 5 s alarm: one that takes longer is a hang. A crash (any exception but
CaffeLstmError) or a hang is saved as ``<out>/crash-<target>-<sha1>.bin`` (``hang-...``) and the
run goes on. The summary gives the count, the crashes, the hangs, the slowest input and the
command to reproduce each. Without atheris a seeded random mutation loop does the same work.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"prototxt": 0.4, "caffemodel": 0.25, "npz": 0.2, "execute": 0.15}  # input shares
HANG_SECONDS = 5.0
MAX_LEN = {"prototxt": 32768, "execute": 16384, "caffemodel": 65536, "npz": 8192}


@dataclass
class Stats:
    """What a worker reports: counts, saved crash/hang files, the slowest input."""

    target: str
    count: int = 0
    expected_errors: int = 0
    crashes: dict[str, str] = field(default_factory=dict)  # signature -> saved input
    hangs: list[str] = field(default_factory=list)
    slowest_seconds: float = 0.0
    slowest_file: str = ""
    engine: str = ""
    seconds: float = 0.0


# ---- the targets (bytes -> None; unexpected exceptions propagate) ---------------------------


def run_target(target: str, data: bytes) -> bool:
    """Runs one input; True when it ended in CaffeLstmError, False on success."""
    from caffe_lstm.errors import CaffeLstmError
    from tests import test_fuzz as fuzz

    sample = fuzz.SAMPLE_NAMES[data[0] % len(fuzz.SAMPLE_NAMES)] if data else "seq_classifier"
    try:
        if target == "prototxt":
            fuzz.load_prototxt(data)
        elif target == "execute":
            fuzz.execute(data)
        elif target == "caffemodel":
            fuzz.load_caffemodel(sample, data[1:])
        else:
            fuzz.run_npz(sample, data[1:])
    except CaffeLstmError:
        return True
    return False


def seeds(target: str) -> list[bytes]:
    """Seed inputs: real files (with the sample-picking first byte where the target has one)."""
    from tests import test_fuzz as fuzz

    names = fuzz.SAMPLE_NAMES
    if target == "prototxt":
        return list(fuzz.prototxt_seeds())
    if target == "execute":
        return list(fuzz.execute_seeds())
    pairs = fuzz.caffemodel_seeds() if target == "caffemodel" else fuzz.npz_seeds()
    return [bytes([names.index(name)]) + data for name, data in pairs]


def structured_mutation(target: str, data: bytes, rng: random.Random) -> bytes:
    """One to three of the tests' mutations (the first byte of binary targets kept)."""
    from tests import test_fuzz as fuzz

    ops = [(rng.randrange(64), rng.randrange(1 << 20), rng.randrange(1 << 20))
           for _ in range(rng.choice((1, 1, 2, 3)))]
    if target in ("prototxt", "execute"):
        return fuzz.mutate(data, ops, fuzz.TEXT_MUTATIONS)
    kinds = fuzz.BINARY_MUTATIONS if target == "caffemodel" else fuzz.NPZ_MUTATIONS
    return data[:1] + fuzz.mutate(data[1:], ops, kinds)


# ---- one worker: a target under atheris (or a seeded loop) ---------------------------------


class InputTimeout(BaseException):
    """Raised by the alarm in the middle of an input that runs too long."""


class Worker:
    """Runs inputs of one target, records crashes/hangs/slowest, stops after ``count``."""

    def __init__(self, target: str, count: int, out: Path, engine: str) -> None:
        self.stats = Stats(target, engine=engine)
        self.count, self.out, self.started = count, out, time.perf_counter()
        signal.signal(signal.SIGALRM, self._alarm)

    @staticmethod
    def _alarm(signum, frame):
        raise InputTimeout

    def __call__(self, data: bytes) -> None:
        if self.stats.count >= self.count:
            self.finish()
        self.stats.count += 1
        start = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)
        try:
            self.stats.expected_errors += run_target(self.stats.target, data)
        except InputTimeout:
            self.stats.hangs.append(self._save("hang", data))
        except Exception as exc:  # anything but CaffeLstmError is a bug: keep the input
            self._crash(exc, data)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        elapsed = time.perf_counter() - start
        if elapsed > self.stats.slowest_seconds:
            self.stats.slowest_seconds = elapsed
            self.stats.slowest_file = self._save("slowest", data, fixed=True)
        if self.stats.count % 2000 == 0:
            self._write_stats()

    def _crash(self, exc: Exception, data: bytes) -> None:
        frames = traceback.extract_tb(exc.__traceback__)
        ours = [f for f in frames if "caffe_lstm" in f.filename] or frames
        where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "?"
        signature = f"{type(exc).__name__} at {where}: {' '.join(str(exc).split())[:120]}"
        if signature not in self.stats.crashes:
            self.stats.crashes[signature] = self._save("crash", data)

    def _save(self, kind: str, data: bytes, fixed: bool = False) -> str:
        digest = "last" if fixed else hashlib.sha1(data).hexdigest()[:12]
        path = self.out / f"{kind}-{self.stats.target}-{digest}.bin"
        path.write_bytes(data)
        return str(path)

    def _write_stats(self) -> None:
        self.stats.seconds = time.perf_counter() - self.started
        (self.out / f"stats-{self.stats.target}.json").write_text(json.dumps(asdict(self.stats)))

    def finish(self) -> None:
        self._write_stats()
        sys.stdout.flush()
        os._exit(0)  # libFuzzer's loop does not return; stopping here keeps the count exact


def run_worker(target: str, count: int, seed: int, out: Path) -> None:
    try:
        import atheris
    except ImportError:
        atheris = None
    if atheris is None:
        _seeded_loop(target, count, seed, out)
        return
    with atheris.instrument_imports(include=["caffe_lstm"]):  # coverage of our code only
        import tests.test_fuzz  # noqa: F401  (imports every caffe_lstm module the targets use)
    worker = Worker(target, count, out, f"atheris {metadata.version('atheris')}")
    corpus = out / f"corpus-{target}"  # libFuzzer adds the inputs that found new coverage
    shutil.rmtree(corpus, ignore_errors=True)
    corpus.mkdir()
    for index, data in enumerate(seeds(target)):
        (corpus / f"seed-{index}").write_bytes(data)

    def mutator(data: bytes, max_size: int, mutation_seed: int) -> bytes:
        rng = random.Random(mutation_seed)  # libFuzzer's seed: -seed reproduces the run
        if data and rng.random() < 0.5:
            return structured_mutation(target, data, rng)[:max_size]
        return atheris.Mutate(data, max_size)

    args = [sys.argv[0], f"-seed={seed}", "-timeout=0", "-rss_limit_mb=4096",
            f"-max_len={MAX_LEN[target]}", f"-runs={4 * count}", "-print_final_stats=0"]
    if target in ("prototxt", "execute"):
        args.append(f"-dict={_dictionary(out)}")
    atheris.Setup(args + [str(corpus)], worker, custom_mutator=mutator)
    atheris.Fuzz()


def _seeded_loop(target: str, count: int, seed: int, out: Path) -> None:
    """Without atheris: random structured mutations of the seeds, same bookkeeping."""
    worker = Worker(target, count, out, "seeded mutation loop")
    rng, pool = random.Random(seed), seeds(target)
    while True:
        worker(structured_mutation(target, rng.choice(pool), rng))


def _dictionary(out: Path) -> Path:
    """A libFuzzer dictionary: the schema's field names, layer types, braces and numbers."""
    from caffe_lstm.ops import registered_types
    from tests import test_fuzz as fuzz

    words = [name.decode() for name in fuzz.field_names()] + registered_types()
    words += ["{", "}", ":", '"', "#", "\n", "layer", "Input", "input_shape", "dim: "]
    words += [str(n) for n in fuzz.INTERESTING_NUMBERS]
    path = out / "prototxt.dict"
    path.write_text("".join(f'"{_escape(word)}"\n' for word in words))
    return path


def _escape(word: str) -> str:
    return "".join(c if c.isalnum() or c in " _-:{}#." else f"\\x{ord(c):02x}" for c in word)


# ---- the parent: workers, then the summary -------------------------------------------------


def run_all(total: int, seed: int, out: Path, jobs: int) -> int:
    out.mkdir(parents=True, exist_ok=True)
    counts = {target: max(1, round(total * share)) for target, share in TARGETS.items()}
    for target in counts:
        (out / f"stats-{target}.json").unlink(missing_ok=True)
    started, pending, running, exits = time.perf_counter(), list(counts), [], {}
    while pending or running:
        while pending and len(running) < jobs:
            target = pending.pop(0)
            log = open(out / f"log-{target}.txt", "w")
            command = [sys.executable, __file__, "--worker", target, "--inputs",
                       str(counts[target]), "--seed", str(seed), "--out", str(out)]
            running.append((target, subprocess.Popen(command, stdout=log, stderr=log), log))
        time.sleep(1)
        for target, process, log in [item for item in running if item[1].poll() is not None]:
            running.remove((target, process, log))
            log.close()
            exits[target] = process.returncode
    return _summary(out, counts, exits, seed, time.perf_counter() - started)


def _summary(out: Path, counts: dict[str, int], exits: dict[str, int], seed: int,
             seconds: float) -> int:
    reports = []
    for target in counts:
        path = out / f"stats-{target}.json"
        if exits[target] != 0 or not path.exists():
            print(f"{target}: the worker stopped with exit status {exits[target]} "
                  f"(a crash in native code or out of memory); see {out}/log-{target}.txt")
            reports.append(None)
            continue
        reports.append(Stats(**json.loads(path.read_text())))
    done = [r for r in reports if r is not None]
    total = sum(r.count for r in done)
    engine = done[0].engine if done else "?"
    print(f"inputs: {total} in {seconds:.0f} s (seed {seed}, engine {engine})")
    for r in done:
        print(f"  {r.target:<10} {r.count:>7} inputs, {r.expected_errors:>7} CaffeLstmError, "
              f"{len(r.crashes)} crash(es), {len(r.hangs)} hang(s), slowest "
              f"{r.slowest_seconds:.3f} s")
    crashes = [(r.target, sig, path) for r in done for sig, path in r.crashes.items()]
    hangs = [(r.target, path) for r in done for path in r.hangs]
    for target, signature, path in crashes:
        print(f"CRASH {target}: {signature}\n  reproduce: {_reproduce(path)}")
    for target, path in hangs:
        print(f"HANG {target} (> {HANG_SECONDS:g} s)\n  reproduce: {_reproduce(path)}")
    slowest = max(done, key=lambda r: r.slowest_seconds, default=None)
    if slowest is not None:
        print(f"slowest input: {slowest.slowest_seconds:.3f} s ({slowest.target})\n"
              f"  reproduce: {_reproduce(slowest.slowest_file)}")
    ok = not crashes and not hangs and None not in reports
    print("result: " + ("no crash outside CaffeLstmError, no hang" if ok else "FAILURES (above)"))
    return 0 if ok else 1


def _reproduce(path: str) -> str:
    return f"PYTHONPATH=. python benchmarks/fuzz_long.py --reproduce {path}"


def reproduce(path: Path) -> int:
    """Runs one saved input (its target is in its name) and shows what happens."""
    target = path.name.split("-")[1]
    run_target(target, b"")  # imports and first-call caches, outside the timing
    started = time.perf_counter()
    ended_in_error = run_target(target, path.read_bytes())  # a crash shows its traceback
    outcome = "CaffeLstmError" if ended_in_error else "success"
    print(f"{target}: {outcome} in {time.perf_counter() - started:.3f} s")
    return 0


def main() -> int:
    sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100_000, help="Total inputs (all targets).")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "caffe-lstm-fuzz",
                        help="Where crashes, hangs, the corpus and the logs go.")
    parser.add_argument("--jobs", type=int, default=2, help="Workers at a time.")
    parser.add_argument("--reproduce", type=Path, help="Run one saved input.")
    parser.add_argument("--worker", choices=list(TARGETS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reproduce:
        return reproduce(args.reproduce)
    if args.worker:
        run_worker(args.worker, args.inputs, args.seed, args.out)
        return 0
    return run_all(args.inputs, args.seed, args.out, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
