"""``caffe-lstm bench``: time a net's runs (numpy, onnxruntime, an engine), or drive a running
Triton server with concurrent sequences; the work is ``caffe_lstm.bench`` and
``caffe_lstm.serving.load``, this module parses and prints."""

from __future__ import annotations

import json
from pathlib import Path

import click

from caffe_lstm.cli.group import cli
from caffe_lstm.cli.options import (GlobalOptions, backend_options, input_options, load,
                                    lstm_op_option, model_file, optional_net_argument,
                                    parse_counts, pass_options, runtime_option,
                                    selection_options, state_option, weights_option)
from caffe_lstm.cli.requires import require_onnxruntime
from caffe_lstm.files import load_npz
from caffe_lstm.options import LstmOp, State

def _levels(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    return parse_counts(value, value, ",", "level")


@cli.command()
@optional_net_argument
@weights_option(required=False)
@selection_options
@input_options
@state_option(State.ZERO, State.IO, default=None,
              shown_default="the model's own with --onnx or --engine, else zero")
@backend_options
@runtime_option("The runtime the engine was built for;")
@lstm_op_option(LstmOp.AUTO, "How --backend onnxruntime without --onnx writes each recurrent "
                             "layer;")
@click.option("--iterations", type=click.IntRange(min=1), default=10, show_default=True,
              help="Timed runs (with --triton: measured sequences per client, unless "
                   "--seconds).")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True,
              help="Untimed runs first (with --triton: untimed sequences per client).")
@click.option("--triton", "triton_url", metavar="HOST:PORT",
              help="Drive the model --model of the Triton server at this gRPC endpoint "
                   "instead of timing a net.")
@click.option("--model", "model_name", metavar="NAME", help="The served model (--triton).")
@click.option("--concurrency", default="1,8,32", show_default=True, callback=_levels,
              metavar="N[,N...]", help="Concurrent sequences, one level after the other "
                                       "(--triton).")
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True,
              help="Requests per sequence, START on the first, END on the last (--triton).")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True),
              help="Measure each level for this long instead of --iterations sequences per "
                   "client (--triton).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@pass_options
def bench(options: GlobalOptions, net: Path | None, weights: Path | None, outputs: str,
          phase: str, stages: tuple[str, ...], inputs_path: Path | None, seed: int,
          recurrent_state: str | None, backend: str, engine: Path | None,
          onnx_model: Path | None, runtime: str, lstm_op: str, iterations: int, warmup: int,
          triton_url: str | None, model_name: str | None, concurrency: tuple[int, ...], steps: int,
          seconds: float | None, as_json: bool) -> None:
    """Time a net's runs (latency min/median/p90/p99, throughput, peak memory), or load a
    running Triton server with concurrent sequences (steps/s, p50/p99 per step, mean batch).

    The model is prepared once (the rewritten graph, an onnxruntime session, an engine on the
    GPU), run --warmup times untimed, then --iterations times, each run timed alone.
    """
    if triton_url is not None:
        _bench_triton(options, triton_url, model_name, concurrency, steps, iterations, seconds,
                      warmup, inputs_path, seed, as_json)
        return
    if model_name is not None or seconds is not None:  # silently timing the net instead misleads
        raise click.UsageError("--model and --seconds go with --triton HOST:PORT")
    if net is None or weights is None:
        raise click.UsageError("bench needs NET.prototxt and -w W.caffemodel (or --triton "
                               "HOST:PORT --model NAME)")
    model = model_file(backend, engine, onnx_model)
    if backend == "onnxruntime":
        require_onnxruntime()  # a missing onnxruntime fails before the net is read
    from caffe_lstm.bench import time_net

    timing = time_net(load(net, weights, outputs, phase, stages), backend, inputs=inputs_path,
                      seed=seed, state=recurrent_state, model=model, runtime=runtime,
                      lstm_op=lstm_op, iterations=iterations, warmup=warmup)
    if as_json:
        click.echo(json.dumps(timing.as_dict(), indent=2))
        return
    latency = timing.latency_ms
    options.say(f"{net.name}: {timing.backend}, {timing.model}; {len(timing.latencies)} timed "
                f"run(s) after {timing.warmup} warm-up run(s)")
    options.say("inputs       " + ", ".join(f"{name} {shape}"
                                           for name, shape in timing.inputs.items()))
    options.say("latency ms   " + "  ".join(f"{key} {latency[key]:.3f}" for key in
                                            ("min", "median", "p90", "p99", "max", "mean")))
    options.say(f"throughput   {timing.throughput:.2f} runs/s")
    memory = ("unknown" if timing.peak_memory is None
              else f"{timing.peak_memory / 2**20:.1f} MiB resident (the process, during the runs)")
    options.say(f"peak memory  {memory}")


def _bench_triton(options: GlobalOptions, url: str, model: str | None,
                  concurrency: tuple[int, ...], steps: int, sequences: int,
                  seconds: float | None, warmup: int, inputs_path: Path | None, seed: int,
                  as_json: bool) -> None:
    if model is None:
        raise click.UsageError("--triton needs --model NAME")
    from caffe_lstm.serving.load import load_test

    inputs = load_npz(inputs_path) if inputs_path is not None else None
    levels = load_test(url, model, concurrency, steps=steps, sequences=sequences,
                       seconds=seconds, warmup=warmup, inputs=inputs, seed=seed)
    if as_json:
        click.echo(json.dumps({"url": url, "model": model, "steps": steps, "warmup": warmup,
                               "levels": [level.as_dict() for level in levels]}, indent=2))
        return
    measured = f"{seconds:g} s" if seconds is not None else f"{sequences} sequence(s) per client"
    options.say(f"{model} at {url}: sequences of {steps} steps, {warmup} warm-up sequence(s) "
                f"per client, then {measured}")
    options.say(f"{'sequences':>9} {'steps/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'mean batch':>10}")
    for level in levels:
        batch = "-" if level.mean_batch is None else f"{level.mean_batch:.2f}"
        options.say(f"{level.concurrency:>9} {level.steps_per_s:>9.0f} "
                    f"{level.percentile(50):>8.2f} {level.percentile(99):>8.2f} {batch:>10}")
