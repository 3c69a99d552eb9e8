"""Regenerates the sample caffemodels: seeded synthetic weights for every learnable layer;
and the captioner's three one-word inputs (docs/cli.md steps it word by word).

    python samples/make_weights.py

The weights are uniform in [-0.5, 0.5) from numpy's default_rng(seed) walked in layer order
(`caffe_lstm.synthetic.synthetic_weights`), written by `caffe_lstm.frontend.caffe_writer`.
Running it again gives byte-identical files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
    write_captioner_words()


def write_captioner_words(words: int = 3, batch: int = 2) -> None:
    """``captioner/word<t>.npz``: one call's inputs for word t of two sentences (T = 1): the
    word ids, cont (0 at the first word: a new sentence, 1 after) and the image features."""
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 50, (words, batch)).astype(np.float32)
    image = rng.standard_normal((batch, 32)).astype(np.float32)
    for t in range(words):
        target = SAMPLES / "captioner" / f"word{t + 1}.npz"
        np.savez(target, input_sentence=ids[t:t + 1], image_features=image,
                 cont_sentence=np.full((1, batch), float(t > 0), np.float32))
        print(f"wrote {target.relative_to(SAMPLES.parent)}")


if __name__ == "__main__":
    main()
