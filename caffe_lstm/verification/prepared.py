"""What every column of ``verify`` works from: the fed graph and its rewrite, built once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.feeds import random_feeds
from caffe_lstm.ir.graph import Graph
from caffe_lstm.ir.walk import Progress
from caffe_lstm.passes.expose_state import zero_states


@dataclass
class Prepared:
    """One preparation of a net for a set of inputs (``Net.prepare``).

    ``graph``: the net shaped for ``feeds``, its recurrent layers whole (the reference runs
    their equations); ``rewritten``: that graph after the recurrent rewrite, what every
    candidate runs, emits or exports; ``feeds``: the inputs by name; ``seed``: of the random
    inputs (inputs drawn again to check for signal use ``seed + 1``). Nothing here changes
    either graph.
    """

    graph: Graph
    rewritten: Graph
    feeds: dict[str, np.ndarray]
    seed: int = 0

    def reference(self, feeds: Mapping[str, np.ndarray] | None = None,
                  intermediate: bool = False,
                  progress: Progress | None = None) -> dict[str, np.ndarray]:
        """The equations (numpy) on ``feeds`` (default: the prepared ones); ``intermediate``:
        every value of the graph, not only the outputs; ``progress``: told of the run."""
        return NumpyExecutor(self.graph, progress).run(self.feeds if feeds is None else feeds,
                                                       intermediate)

    def redrawn_feeds(self) -> dict[str, np.ndarray]:
        """Inputs of the same shapes drawn again (``seed + 1``; initial states zero)."""
        return {**random_feeds(self.graph, self.seed + 1), **zero_states(self.graph, {})}
