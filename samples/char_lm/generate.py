"""Generates text with the char_lm sample, one character per call, through caffe_lstm's API.

    python samples/char_lm/generate.py --prompt "ROMEO:" --length 200 --seed 1
    python samples/char_lm/generate.py --runtime onnxruntime --prompt "ROMEO:"

Each call is one Caffe Forward of the deploy net (T = 1, N = 1) with its LSTM states as
inputs and outputs (``state="io"``, as `caffe-lstm run --state io` does): the states one call
returns (``lstm1/h_T``...) go into the next (``lstm1/h_0``...), cont is 0 on the first call and
1 after. The next character is drawn from the net's probabilities with numpy's
default_rng(seed): the same seed gives the same text, through either runtime.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import charlm


def numpy_step(net) -> charlm.Step:
    """One call through caffe_lstm's numpy executor (``Net.run``)."""
    def step(char_id, cont, states):
        feeds = charlm.step_inputs(char_id, cont, states)
        return charlm.split_outputs(net.run(feeds, state="io"))
    return step


def onnxruntime_step(net, model: Path) -> charlm.Step:
    """One call through onnxruntime, of the model ``Net.export_onnx`` wrote with state io."""
    net.export_onnx(model, state="io")

    def step(char_id, cont, states):
        feeds = charlm.step_inputs(char_id, cont, states)
        return charlm.split_outputs(net.run_onnxruntime(feeds, state="io", model=model))
    return step


def main() -> None:
    import caffe_lstm

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default="ROMEO:\n")
    parser.add_argument("--length", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runtime", choices=("numpy", "onnxruntime"), default="numpy")
    args = parser.parse_args()
    net = caffe_lstm.load(charlm.PROTOTXT, charlm.WEIGHTS)
    with tempfile.TemporaryDirectory() as tmp:
        step = (numpy_step(net) if args.runtime == "numpy"
                else onnxruntime_step(net, Path(tmp) / "char_lm.onnx"))
        print(charlm.generate(step, args.prompt, args.length, args.seed))


if __name__ == "__main__":
    main()
