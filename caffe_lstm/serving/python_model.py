"""caffe-lstm's model for Triton's Python backend (written as ``<model>/1/model.py``).

It runs ``model.onnx`` (the net exported by caffe-lstm, batch-major, carried states as
inputs ``<layer>/h_0`` and outputs ``<layer>/h_T``) with onnxruntime. Triton's Python backend
does not keep implicit state between requests, so this model keeps each sequence's states
itself, by correlation id: zeros at START, the state outputs of one step become the state
inputs of the next, dropped at END, and dropped when a sequence idles longer than the config's
``max_sequence_idle_microseconds`` (a sequence Triton timed out sends no END).

The requests of one ``execute()`` (steps of different sequences, batch 1 each) are stacked
along N into one onnxruntime run per input shape; a request with a missing input or a wrong
shape or dtype gets a TritonError of its own and the others are answered as usual.

This file imports only numpy, onnxruntime and Triton's ``triton_python_backend_utils``: it
runs in the server's Python, where caffe-lstm need not be installed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton (a test provides the module first)
    pb_utils = None

#: The parameter of config.pbtxt holding what the config cannot say: the carried states.
PARAMETER = "caffe_lstm"
_KINDS = {"CONTROL_SEQUENCE_START": "start", "CONTROL_SEQUENCE_END": "end",
          "CONTROL_SEQUENCE_CORRID": "corrid"}


class BadRequest(Exception):
    """A request this model answers with an error (the others go on)."""


class TritonPythonModel:
    """One model instance: an onnxruntime session and the states of its sequences."""

    def initialize(self, args):
        import onnxruntime

        config = json.loads(args["model_config"])
        own = json.loads(config["parameters"][PARAMETER]["string_value"])
        folder = Path(args["model_repository"]) / str(args["model_version"])
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # Triton scales by instances, not by threads
        self.session = onnxruntime.InferenceSession(str(folder / own["onnx"]), options,
                                                    providers=["CPUExecutionProvider"])
        self.states = [(s["input"], s["output"], tuple(s["dims"])) for s in own["states"]]
        state_inputs = {name for name, _, _ in self.states}
        # max_batch_size 0: no batching, every request runs alone with Caffe's full dims
        self.batched = int(config.get("max_batch_size", 0)) > 0
        # the data inputs: everything the model reads but the states (cont included when
        # Triton feeds it from START); dims after N as the model declares them
        skip = 1 if self.batched else 0
        self.feeds = {i.name: tuple(i.shape[skip:]) for i in self.session.get_inputs()
                      if i.name not in state_inputs}
        self.outputs = [o["name"] for o in config["output"]]
        sequence = config.get("sequence_batching")
        self.controls = _control_names(sequence) if sequence else {}
        self.idle = int(sequence.get("max_sequence_idle_microseconds", 0)) / 1e6 \
            if sequence else 0.0
        self.store = {}  # correlation id -> (states by input name, last use)

    def execute(self, requests):
        now = time.monotonic()
        self._expire(now)
        responses = [None] * len(requests)
        groups = {}
        for index, request in enumerate(requests):
            try:
                item = self._read(request)
            except BadRequest as exc:
                responses[index] = _error(str(exc))
                continue
            key = tuple(item["feeds"][name].shape for name in self.feeds) \
                if self.batched else index
            groups.setdefault(key, []).append((index, item))
        for group in groups.values():
            self._run(group, responses, now)
        return responses

    def finalize(self):
        self.store.clear()

    # ---- one request ------------------------------------------------------------------------

    def _read(self, request):
        """The request's arrays (checked), its sequence flags and its states."""
        feeds = {}
        for name, dims in self.feeds.items():
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                raise BadRequest(f"input '{name}' is missing")
            array = tensor.as_numpy()
            if array.dtype != np.float32:
                raise BadRequest(f"input '{name}' is {array.dtype}, the model takes float32")
            shape = array.shape[1:] if self.batched else array.shape
            if array.ndim != len(dims) + self.batched or any(
                    isinstance(d, int) and d != size for d, size in zip(dims, shape)):
                expected = f"[N] + {list(dims)}" if self.batched else str(list(dims))
                raise BadRequest(f"input '{name}' has shape {list(array.shape)}, the model "
                                 f"takes {expected}")
            feeds[name] = array
        rows = next(iter(feeds.values())).shape[0] if self.batched else None
        item = {"feeds": feeds, "rows": rows}
        if self.states:
            item.update(self._sequence(request, item["rows"]))
        return item

    def _sequence(self, request, rows):
        corrid = self._flag(request, "corrid", None)
        if corrid is None:
            corrid = request.correlation_id()
        if "start" in self.controls:
            start = bool(self._flag(request, "start", 0))
        else:  # Triton's only START control is Caffe's cont: 0 on a sequence's first step
            start = self._flag(request, "cont_start", 1.0) == 0
        end = bool(self._flag(request, "end", 0))
        if start:
            lead = (rows,) if self.batched else ()
            states = {name: np.zeros((*lead, *dims), np.float32) for name, _, dims in self.states}
        elif corrid in self.store:
            states = self.store[corrid][0]
        else:
            raise BadRequest(f"sequence {corrid} has no state here (it ended or idled past "
                             "the timeout): start it again with START")
        return {"corrid": corrid, "end": end, "states": states}

    def _flag(self, request, kind, default):
        name = self.controls.get(kind)
        tensor = None if name is None else pb_utils.get_input_tensor_by_name(request, name)
        if tensor is None:
            return default
        value = tensor.as_numpy().reshape(-1)[0]
        return value.item() if hasattr(value, "item") else value

    # ---- one onnxruntime run per input shape -------------------------------------------------

    def _run(self, group, responses, now):
        stacked = {name: np.concatenate([item["feeds"][name] for _, item in group])
                   for name in self.feeds}
        for name, _, _ in self.states:
            stacked[name] = np.concatenate([item["states"][name] for _, item in group])
        try:
            results = self.session.run(None, stacked)
        except Exception as exc:  # onnxruntime's own refusal: these requests fail, not others
            for index, _ in group:
                responses[index] = _error(f"onnxruntime: {str(exc).splitlines()[0]}")
            return
        produced = dict(zip([o.name for o in self.session.get_outputs()], results))
        row = 0
        for index, item in group:
            # batched: this request's rows; unbatched: the request ran alone, all of it
            rows = slice(row, row + item["rows"]) if self.batched else slice(None)
            row += item["rows"] or 0
            responses[index] = pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor(name, np.ascontiguousarray(produced[name][rows]))
                for name in self.outputs])
            if self.states:
                self._keep(item, {name: produced[output][rows].copy()
                                  for name, output, _ in self.states}, now)

    def _keep(self, item, states, now):
        if item["end"]:
            self.store.pop(item["corrid"], None)
        else:
            self.store[item["corrid"]] = (states, now)

    def _expire(self, now):
        """Drops the states of sequences idle longer than the timeout."""
        if not self.idle:
            return
        for corrid in [c for c, (_, used) in self.store.items() if now - used > self.idle]:
            del self.store[corrid]


def _control_names(sequence):
    """Control kind ("start", "end", "corrid") -> the name of its control input."""
    names = {}
    for control in sequence.get("control_input", []):
        for item in control.get("control", []):
            kind = _KINDS.get(item.get("kind"))
            # cont fed from START has fp32 values: it is data, not the START flag
            # Triton's JSON of the config lists every field: fp32_false_true is [] when unset
            if kind is not None and not item.get("fp32_false_true"):
                names.setdefault(kind, control["name"])
            elif kind == "start":  # cont fed from START (0 on the first step) is the flag
                names.setdefault("cont_start", control["name"])
    return names


def _error(message):
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))
