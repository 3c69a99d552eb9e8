"""Regenerates the sample caffemodels: seeded synthetic weights for every learnable layer.

    python samples/make_weights.py

The weights are uniform in [-0.5, 0.5) from numpy's default_rng(seed) walked in layer order
(`caffe_lstm.synthetic.synthetic_weights`), written by `caffe_lstm.frontend.caffe_writer`.
Running it again gives byte-identical files.
"""

from __future__ import annotations

from pathlib import Path

from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.synthetic import synthetic_weights

SAMPLES = Path(__file__).resolve().parent
#: sample directory -> seed
SEEDS = {"seq_classifier": 1, "captioner": 2, "deepspeech_relu": 3, "fork_vision": 4}


def main() -> None:
    for name, seed in SEEDS.items():
        prototxt = SAMPLES / name / f"{name}.prototxt"
        graph = load_net(prototxt).graph
        target = prototxt.with_suffix(".caffemodel")
        write_caffemodel(target, synthetic_weights(graph, seed, scale=0.5), net_name=graph.name)
        print(f"wrote {target.relative_to(SAMPLES.parent)}")


if __name__ == "__main__":
    main()
