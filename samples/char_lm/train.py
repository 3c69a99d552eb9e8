"""Trains the char_lm sample with torch on the CPU and writes its caffemodel (a few minutes).

    python samples/char_lm/train.py                     # train, compare with the shipped file
    python samples/char_lm/train.py -o samples/char_lm/char_lm.caffemodel   # replace it

Seeded (torch, numpy) and single-threaded, so a rerun gives the same weights on the same torch
build (and within a few per cent of the shipped held-out perplexity on any other: the check
at the end, exit 1 beyond 5 %).

The net: Embed (62 characters -> 48), LSTM 128, LSTM 128, InnerProduct 62, Softmax; trained
on the first 90 % of shakespeare.txt, 100-character windows starting afresh (zero states),
as Caffe's cont = 0 at t = 0 starts them. The caffemodel is written the way a user would
bring torch weights over: the Embed and InnerProduct matrices as they are (torch's
nn.Embedding and nn.Linear store them in Caffe's orientation), then each LSTM with
`caffe-lstm weights import --layout pytorch` from its nn.LSTM state_dict.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import charlm

SEED = 0
EMBED, HIDDEN = 48, 128
WINDOW, BATCH, STEPS, LEARNING_RATE = 100, 32, 2000, 3e-3
#: The held-out characters the reproduction is judged on (all of them: 30 000, a few seconds).
JUDGED = None


class CharLM(nn.Module):
    """The prototxt's layers, in torch."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, EMBED)
        self.lstm1 = nn.LSTM(EMBED, HIDDEN)
        self.lstm2 = nn.LSTM(HIDDEN, HIDDEN)
        self.predict = nn.Linear(HIDDEN, vocab)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:  # (T, N) -> logits (T, N, V)
        return self.predict(self.lstm2(self.lstm1(self.embed(chars))[0])[0])


def train(steps: int) -> CharLM:
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    text = charlm.corpus()
    vocab = charlm.vocabulary(text)
    ids = torch.from_numpy(charlm.encode(charlm.split(text)[0], vocab))
    model = CharLM(len(vocab))
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    start = time.time()
    for step in range(steps):
        starts = torch.from_numpy(rng.integers(0, len(ids) - WINDOW - 1, BATCH))
        window = torch.stack([ids[s:s + WINDOW + 1] for s in starts], dim=1)  # (T+1, N)
        logits = model(window[:-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, len(vocab)),
                                           window[1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        schedule.step()
        if step % 200 == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {loss.item():.3f}  {time.time() - start:.0f} s",
                  flush=True)
    return model


def torch_perplexity(model: CharLM, ids: np.ndarray) -> float:
    with torch.no_grad():
        logits = model(torch.from_numpy(ids[:-1]).reshape(-1, 1))
        probs = torch.softmax(logits, dim=-1).numpy()
    return charlm.perplexity(probs, ids)


def write_caffemodel(model: CharLM, output: Path) -> None:
    """Embed and InnerProduct written directly, then each LSTM through `weights import`."""
    from caffe_lstm.frontend.caffe_writer import write_caffemodel as write

    state = {name: tensor.detach().numpy() for name, tensor in model.state_dict().items()}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base.caffemodel"
        write(base, [("embed", "Embed", [state["embed.weight"]]),
                     ("predict", "InnerProduct", [state["predict.weight"],
                                                  state["predict.bias"]])], net_name="char_lm")
        for layer in ("lstm1", "lstm2"):
            arrays = Path(tmp) / f"{layer}.npz"
            np.savez(arrays, **{key.split(".", 1)[1]: value for key, value in state.items()
                                if key.startswith(f"{layer}.")})
            target = Path(tmp) / f"{layer}.caffemodel"
            subprocess.run([sys.executable, "-m", "caffe_lstm", "weights", "import",
                            str(charlm.PROTOTXT), "-w", str(base), "--layer", layer,
                            "--layout", "pytorch", "--from", str(arrays), "-o", str(target)],
                           check=True)
            base = target
        output.write_bytes(base.read_bytes())


def caffemodel_perplexity(weights: Path, ids: np.ndarray) -> float:
    """Held-out perplexity of a caffemodel, run by caffe_lstm's numpy executor."""
    import caffe_lstm

    probs = caffe_lstm.load(charlm.PROTOTXT, weights).run(charlm.sequence_inputs(ids))["probs"]
    return charlm.perplexity(probs, ids)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path,
                        help="the caffemodel to write (default: a temporary file)")
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args()
    torch.set_num_threads(1)  # reproducible, and polite on a shared machine
    judged = charlm.scored_held_out(JUDGED)
    shipped = caffemodel_perplexity(charlm.WEIGHTS, judged) if charlm.WEIGHTS.exists() else None
    model = train(args.steps)
    print(f"held-out perplexity (torch): {charlm.bits(torch_perplexity(model, judged))}")
    with tempfile.TemporaryDirectory() as tmp:
        output = args.output or Path(tmp) / "char_lm.caffemodel"
        write_caffemodel(model, output)
        ours = caffemodel_perplexity(output, judged)
        print(f"wrote {output}: held-out perplexity (caffe_lstm, numpy) {charlm.bits(ours)}; "
              f"unigram {charlm.bits(charlm.unigram_perplexity(judged))}")
    if shipped is None:
        return 0
    ratio = ours / shipped
    print(f"shipped caffemodel: {charlm.bits(shipped)}; this run / shipped = {ratio:.4f}")
    return 0 if abs(ratio - 1) <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
