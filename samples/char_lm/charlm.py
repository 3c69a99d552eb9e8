"""What the char_lm sample's scripts and tests share: the text, its characters, the held-out
split, perplexity, and generation one character at a time (any runtime, through a ``step``).

The text (shakespeare.txt) is the first 300 KB of tiny-shakespeare, from
karpathy/char-rnn's data/tinyshakespeare/input.txt (commit 6f9487a): plays by Shakespeare,
printed 1590-1623, in the public domain.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PROTOTXT = HERE / "char_lm.prototxt"
WEIGHTS = HERE / "char_lm.caffemodel"
TEXT = HERE / "shakespeare.txt"

#: The last tenth of the text is held out: never trained on.
HELD_OUT_FRACTION = 0.1
#: The held-out characters the tests score (a short slice keeps CI cheap).
HELD_OUT_SCORED = 400

#: ``step(char id, cont, states) -> (probabilities over the characters, new states)``;
#: states None: the first call (cont 0, zero states).
Step = Callable[[int, float, dict | None], tuple[np.ndarray, dict]]


def corpus() -> str:
    return TEXT.read_text(encoding="utf-8")


def vocabulary(text: str | None = None) -> list[str]:
    """The characters, sorted: character i is the net's class i (Embed id, Softmax index)."""
    return sorted(set(corpus() if text is None else text))


def encode(text: str, vocab: list[str]) -> np.ndarray:
    index = {char: i for i, char in enumerate(vocab)}
    return np.array([index[char] for char in text], np.int64)


def split(text: str) -> tuple[str, str]:
    """(training text, held-out text)."""
    cut = int(len(text) * (1 - HELD_OUT_FRACTION))
    return text[:cut], text[cut:]


def scored_held_out(length: int | None = HELD_OUT_SCORED) -> np.ndarray:
    """The first ``length`` held-out characters (None: all), as ids."""
    text = corpus()
    return encode(split(text)[1][:length], vocabulary(text))


def sequence_inputs(ids: np.ndarray, continued: bool = False) -> dict[str, np.ndarray]:
    """The net's inputs to predict ids[1:] from ids[:-1] in one call (T = len - 1, N = 1):
    a new sequence at t = 0 (cont 0) unless ``continued`` (the states come from the previous
    call), continued after."""
    chars = ids[:-1].reshape(-1, 1).astype(np.float32)
    cont = np.ones_like(chars)
    cont[0] = 1 if continued else 0
    return {"chars": chars, "cont": cont}


def perplexity(probs: np.ndarray, ids: np.ndarray) -> float:
    """exp of the mean negative log-probability of ids[1:] under ``probs`` (T, 1, V)."""
    chosen = probs.reshape(len(ids) - 1, -1)[np.arange(len(ids) - 1), ids[1:]]
    return float(np.exp(-np.mean(np.log(np.maximum(chosen.astype(np.float64), 1e-30)))))


def unigram_perplexity(ids: np.ndarray) -> float:
    """The perplexity of ids[1:] under the training text's character frequencies (add-one)."""
    text = corpus()
    vocab = vocabulary(text)
    counts = np.bincount(encode(split(text)[0], vocab), minlength=len(vocab)) + 1.0
    return float(np.exp(-np.mean(np.log(counts[ids[1:]] / counts.sum()))))


def generate(step: Step, prompt: str, length: int, seed: int) -> str:
    """``prompt`` then ``length`` characters, each drawn from the net's distribution with
    numpy's default_rng(seed) (inverse CDF in float64), fed back one call at a time."""
    vocab = vocabulary()
    rng = np.random.default_rng(seed)
    states, probs = None, None
    for char_id in encode(prompt, vocab):
        probs, states = step(int(char_id), 0.0 if states is None else 1.0, states)
    out = []
    for _ in range(length):
        cdf = np.cumsum(np.asarray(probs, np.float64).ravel())
        char_id = min(int(np.searchsorted(cdf, rng.uniform() * cdf[-1], side="right")),
                      len(vocab) - 1)
        out.append(vocab[char_id])
        probs, states = step(char_id, 1.0, states)
    return prompt + "".join(out)


def step_inputs(char_id: int, cont: float, states: dict | None) -> dict[str, np.ndarray]:
    """One call's inputs (T = N = 1): the character, cont, and the previous call's states
    (``<layer>/h_T`` fed as ``<layer>/h_0``); none on the first call (zeros)."""
    carried = {name.replace("_T", "_0"): array for name, array in (states or {}).items()}
    return {"chars": np.full((1, 1), char_id, np.float32),
            "cont": np.full((1, 1), cont, np.float32), **carried}


def split_outputs(outputs: dict[str, np.ndarray]) -> tuple[np.ndarray, dict]:
    """(the probabilities, the states to carry) of one call's outputs."""
    states = {name: array for name, array in outputs.items() if name.endswith(("/h_T", "/c_T"))}
    return outputs["probs"], states


def bits(value: float) -> str:
    return f"{value:.3f} ({math.log2(value):.2f} bits/char)"


def write_inputs(text: str, path: Path, continued: bool = False) -> None:
    """The inputs of one call reading ``text`` (T = len(text), N = 1), as an .npz for
    `caffe-lstm run --inputs`: a new text unless ``continued`` (`--state-from`)."""
    ids = encode(text + text[-1], vocabulary())  # the last id is what ids[:-1] leaves out
    np.savez(path, **sequence_inputs(ids, continued))


if __name__ == "__main__":  # python samples/char_lm/charlm.py TEXT OUT.npz [--continued]
    import sys

    write_inputs(sys.argv[1], Path(sys.argv[2]), "--continued" in sys.argv[3:])
