"""An exported model with every value an output: ``verify``'s search for the first layer that
diverges reads the ONNX model's intermediates from onnxruntime, as Polygraphy's
``--onnx-outputs mark all`` does, loop bodies included."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from caffe_lstm.backends.onnx.exporter import import_module

#: The suffix of the extra Scan output that stacks a body value over the steps.
STEPS = "@steps"


def with_every_value_as_output(model: Any, body_values: Collection[str]
                               ) -> tuple[Any, dict[str, str]]:
    """A copy of ``model`` whose outputs are every value its main graph computes; each Scan
    of the main graph also stacks each of its body's values named in ``body_values`` (float
    tensors: the IR's) over the steps, as an extra scan output ``<value>@steps`` (axis 0: the
    step). Returns the model and, for each of those outputs, the body value it stacks."""
    onnx = import_module("onnx")
    marked = onnx.ModelProto()
    marked.CopyFrom(model)
    graph = marked.graph
    stacked: dict[str, str] = {}
    for node in graph.node:
        if node.op_type == "Scan":
            stacked.update(_stack_body_values(onnx, node, body_values))
    declared = {output.name for output in graph.output}
    for name in [name for node in graph.node for name in node.output]:
        if name and name not in declared:
            graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
            declared.add(name)
    return marked, stacked


def _stack_body_values(onnx: Any, scan: Any, wanted: Collection[str]) -> dict[str, str]:
    """Adds each ``wanted`` value of ``scan``'s body as a scan output, through an Identity (a
    value that is already a body output, a state, cannot be one twice)."""
    body = next(attribute.g for attribute in scan.attribute if attribute.name == "body")
    added = {}
    for name in [name for node in body.node for name in node.output if name in wanted]:
        step = f"{name}@step"
        body.node.append(onnx.helper.make_node("Identity", [name], [step], name=f"{step}#node"))
        body.output.append(onnx.helper.make_tensor_value_info(step, onnx.TensorProto.FLOAT,
                                                              None))
        scan.output.append(name + STEPS)
        added[name + STEPS] = name
    for attribute in scan.attribute:  # per scan output lists, when given, grow with it
        if attribute.name in ("scan_output_axes", "scan_output_directions"):
            attribute.ints.extend([0] * len(added))
    return added
