"""The modes and defaults the API and the command line share, each defined once.

The CLI builds its choices, defaults and help texts from these (``cli/options.py``); the API
takes a member or its string value (``state="io"`` or ``State.IO``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import NamedTuple, TypeVar

from caffe_lstm.errors import CaffeLstmError


class Profile(NamedTuple):
    """The (min, opt, max) shapes of one dynamic input: a TensorRT optimization profile, or the
    ranges whose varying dims become symbolic in an ONNX model. Any 3-sequence of shapes is
    accepted where a Profile is taken."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


#: The ONNX opsets the exporter writes: 13 is the first with Split/Squeeze/Unsqueeze/ReduceSum
#: taking their sizes and axes as inputs and Softmax on one axis; 21 the newest checked here
#: with onnxruntime and onnx's checker.
MIN_OPSET, MAX_OPSET, DEFAULT_OPSET = 13, 21, 17


_C = TypeVar("_C", bound="Choice")


class Choice(str, Enum):
    """A mode named by a string. Each member carries a one-line ``help``; the API takes the
    member or its value (``parse``), the CLI lists the values as its choices."""

    help: str

    def __new__(cls, value: str, help: str = "") -> Choice:
        member = str.__new__(cls, value)
        member._value_ = value
        member.help = help
        return member

    def __str__(self) -> str:
        return self.value

    # Equal to its value, so hashed as its value: a member finds its value's dict entries.
    __hash__ = str.__hash__

    @classmethod
    def parse(cls: type[_C], value: str | Choice, param: str) -> _C:
        """The member named ``value``; an unknown one is an error naming the API parameter
        ``param`` and the choices."""
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(member.value for member in cls)
            raise CaffeLstmError(f"{param} {value!r} is not one of {choices}", f"{param}=",
                                 describe(list(cls))) from None


def describe(members: Sequence[Choice]) -> str:
    """``value: help`` for each member that has a help text, joined by "; "."""
    return "; ".join(f"{member.value}: {member.help}" for member in members if member.help)


class State(Choice):
    """Caffe's hidden-state carry-over between Forward calls (docs/cli.md, ``--state``)."""

    AUTO = "auto", "io when a cont input could be 1 at t=0"
    ZERO = "zero", "each call starts from zero"
    IO = "io", ("recurrent state as inputs <layer>/h_0, c_0 (zeros unless given) and outputs "
                "<layer>/h_T, c_T, to carry it between calls as Caffe does")


class Runtime(Choice):
    """The TensorRT runtime that builds (or runs) an engine."""

    AUTO = "auto", "tensorrt when it imports and a GPU is present, else TensorRT for RTX"
    TENSORRT = "tensorrt"
    TENSORRT_RTX = "tensorrt-rtx"


class Route(Choice):
    """Which program builds the TensorRT network of an engine."""

    CAFFE_LSTM = "caffe-lstm", "our emitter builds the network"
    ONNX = "onnx", "the net is exported to ONNX and TensorRT's own OnnxParser builds it"


class LstmOp(Choice):
    """How the ONNX export writes a recurrent layer."""

    SCAN = "scan", "each recurrent layer one Scan (any cont, every variant)"
    NATIVE = "native", ("ONNX's own LSTM/RNN operator, and an error for a layer it would "
                        "compute differently (a cont input, x_static, CLIPPED_RELU, cell_clip, "
                        "num_proj)")
    AUTO = "auto", ("ONNX's own operator for each layer it computes exactly (those native "
                    "accepts), a Scan for the others")


class Backend(Choice):
    """The Triton backend a model repository is written for (docs/serving.md)."""

    PYTHON = "python", ("model.py runs model.onnx with onnxruntime and keeps the states (CPU, "
                        "any Triton)")
    ONNXRUNTIME = "onnxruntime", "model.onnx, with Triton's implicit state"
    TENSORRT = "tensorrt", "model.plan, with Triton's implicit state"


def check_opset(opset: int) -> None:
    """Refuses an opset outside [MIN_OPSET, MAX_OPSET] in one line."""
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise CaffeLstmError(f"ONNX opset {opset} is not supported", "opset=",
                             f"use an opset from {MIN_OPSET} to {MAX_OPSET} "
                             f"(default {DEFAULT_OPSET})")


def check_profile(name: str, triple: Sequence[Sequence[int]]) -> Profile:
    """``triple`` as a Profile: three shapes of one rank, dims >= 1, min <= opt <= max."""
    shapes = [tuple(int(d) for d in dims) for dims in triple]
    where = f"shapes[{name!r}]"
    if len(shapes) != 3 or len({len(dims) for dims in shapes}) != 1:
        raise CaffeLstmError(f"the shapes of input {name!r} are not (min, opt, max) of one "
                             f"rank: {shapes}", where, "give three shapes of the input's rank")
    low, opt, high = shapes
    if min(low + opt + high) < 1 or not all(a <= b <= c for a, b, c in zip(low, opt, high)):
        raise CaffeLstmError(f"the shapes of input {name!r} need dims >= 1 and "
                             f"min <= opt <= max: {shapes}", where, "order them min, opt, max")
    return Profile(low, opt, high)


def check_route(route: Route, fp16: bool) -> None:
    """Refuses fp16 through the ONNX route (the exported model has no fp16 casts yet)."""
    if fp16 and route is Route.ONNX:
        raise CaffeLstmError("fp16=True is not available through the ONNX route yet",
                             "via='onnx'",
                             "build fp16 through our emitter (via='caffe-lstm'), or fp32 via onnx")


@dataclass(frozen=True)
class BuildRequest:
    """One build of an engine or an ONNX model, typed once: each mode a member (its value is
    taken too), and checked when made, before the net is read or rewritten (an opset out of
    range, fp16 through the ONNX route, ill-formed shape ranges). ``profiles``: input name ->
    (min, opt, max); ``outputs``: the model's outputs (empty: the net's, as loaded)."""

    runtime: Runtime = Runtime.AUTO
    route: Route = Route.CAFFE_LSTM
    state: State = State.AUTO
    fp16: bool = False
    opset: int = DEFAULT_OPSET
    profiles: Mapping[str, Profile] | None = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    lstm_op: LstmOp = LstmOp.SCAN
    unroll: bool = False

    def __post_init__(self) -> None:
        for name, kind in (("runtime", Runtime), ("route", Route), ("state", State),
                           ("lstm_op", LstmOp)):
            object.__setattr__(self, name, kind.parse(getattr(self, name),
                                                      "via" if name == "route" else name))
        check_opset(self.opset)
        check_route(self.route, self.fp16)
        object.__setattr__(self, "profiles", MappingProxyType(
            {name: check_profile(name, triple)
             for name, triple in (self.profiles or {}).items()}))
        object.__setattr__(self, "outputs", tuple(self.outputs))

    def check_outputs(self, outputs: Sequence[str]) -> None:
        """Refuses a net loaded with other ``outputs`` than the request's (when it names any:
        the outputs are chosen when the net is loaded)."""
        if self.outputs and set(self.outputs) != set(outputs):
            raise CaffeLstmError(f"the request's outputs {', '.join(self.outputs)} are not the "
                                 f"net's, {', '.join(outputs)}", "outputs=",
                                 "load the net with the outputs to build")
