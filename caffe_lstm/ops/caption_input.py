"""``CaptionInput`` of fanchenyou/deepdiary@dba4d93 (src/caffe/layers/caption_input_layer.cpp):
the input sequence of its captioning ``Lstm`` (hidden_size schema), the image first, then the
words, as rows t·N + n of width H.

Bottoms img (N, P) (count / num = P = image_size) and sent (N, T − 1) word ids,
T = sequence_len + 1; blobs We (H, P), be (H), Ws (V, H), V = vocabulary_size; top (T·N, H):

    X[0, n] = We·img_n + be
    X[t, n] = Ws[int(sent[n, t − 1])]  for t ≥ 1 where the id is ≥ 0 (truncated toward zero)

A negative id leaves the row as the previous Forward left it (the top is never cleared there);
here it is 0, what the fork's first Forward gives.
"""

from __future__ import annotations

import numpy as np

from caffe_lstm.errors import ExecutionError
from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, count, register_op, shape_error


@register_op
class CaptionInput(Op):
    """X (T, N, H) as rows (T·N, H): the image embedded at t = 0, word rows of Ws after it
    (module docstring); caption_input_param: hidden_size H, image_size P, vocabulary_size V,
    sequence_len (T − 1)."""

    type = "CaptionInput"
    origin = "fanchenyou/deepdiary@dba4d93 (src/caffe/layers/caption_input_layer.cpp)"
    limits = ("a negative word id gives a zero row, where the fork keeps the previous call's "
              "row (the same on a first call)")
    param = "caption_input_param"
    n_bottoms = (2, 2)

    @staticmethod
    def parse(ctx, p):
        return {"hidden_size": p.hidden_size, "image_size": p.image_size,
                "vocabulary_size": p.vocabulary_size, "sequence_len": p.sequence_len}

    @staticmethod
    def infer(ctx, node: Node, img: Shape, sent: Shape) -> tuple[Shape, ...]:
        batch, steps = _sizes(node, img, sent)
        return ((steps * batch, node.attrs["hidden_size"]),)

    @staticmethod
    def blobs(ctx, node: Node, img: Shape, sent: Shape) -> tuple[tuple[str, Shape], ...]:
        hidden = node.attrs["hidden_size"]
        return (("We", (hidden, node.attrs["image_size"])), ("be", (hidden,)),
                ("Ws", (node.attrs["vocabulary_size"], hidden)))

    @staticmethod
    def numpy(ctx, node: Node, img, sent, w_e, b_e, w_s):
        batch, steps = _sizes(node, img.shape, sent.shape)
        image = img.reshape(batch, -1) @ w_e.T + b_e
        ids = np.trunc(sent.reshape(batch, steps - 1)).astype(np.int64).T  # (T − 1, N)
        if ids.size and ids.max() >= node.attrs["vocabulary_size"]:
            raise ExecutionError(f"word id {ids.max()} is outside [0, "
                                 f"{node.attrs['vocabulary_size']})", node.label,
                                 "check the word ids fed to this layer")
        words = np.where((ids >= 0)[..., None], w_s[np.maximum(ids, 0)], 0)
        rows = np.concatenate([image[None], words]).reshape(steps * batch, -1)
        return (rows.astype(np.float32),)

    @staticmethod
    def tensorrt(ctx, node: Node, img, sent, w_e, b_e, w_s):
        trt, network = ctx.trt, ctx.network
        # the batch is -1 (the image_size and sequence_len are fixed): any N the profile takes
        _, steps = _sizes(node, node.inputs[0].shape, node.inputs[1].shape)
        hidden, none = node.attrs["hidden_size"], trt.MatrixOperation.NONE
        flat = ctx.reshape(img, [-1, node.attrs["image_size"]], "img")
        image = ctx.out(network.add_matrix_multiply(flat, none, ctx.constant(w_e.T, "We"), none),
                        "image")
        image = ctx.out(network.add_elementwise(image, ctx.constant(b_e[None], "be"),
                                                trt.ElementWiseOperation.SUM), "image_bias")
        # ids (T − 1, N), truncated toward zero; rows of Ws where id ≥ 0, zeros elsewhere
        ids = ctx.transpose(ctx.reshape(ctx.float32_source(sent), [-1, steps - 1], "ids"),
                            (1, 0), "ids_t")
        unary, elementwise = trt.UnaryOperation, trt.ElementWiseOperation
        trunc = ctx.out(network.add_elementwise(
            ctx.out(network.add_unary(ids, unary.SIGN), "sign"),
            ctx.out(network.add_unary(ctx.out(network.add_unary(ids, unary.ABS), "abs"),
                                      unary.FLOOR), "floor"), elementwise.PROD), "trunc")
        zero = ctx.constant(np.zeros((1, 1), np.float32), "zero")
        kept = ctx.out(network.add_elementwise(trunc, zero, elementwise.MAX), "kept")
        index = ctx.cast(kept, trt.DataType.INT32, "index")
        words = ctx.out(network.add_gather(ctx.constant(w_s, "Ws"), index, 0), "words")
        # trunc ≥ 0 ⇔ trunc > −1 (whole numbers): the mask of ids the fork copies
        valid = ctx.out(network.add_elementwise(
            trunc, ctx.constant(np.full((1, 1), -1, np.float32), "minus_one"),
            elementwise.GREATER), "valid")
        mask = ctx.unsqueeze(ctx.cast(valid, ctx.float_trt, "mask"), 2, "mask3")
        masked = ctx.out(network.add_elementwise(words, mask, elementwise.PROD), "masked")
        sequence = network.add_concatenation([ctx.unsqueeze(image, 0, "image_row"), masked])
        sequence.axis = 0
        return (ctx.reshape(ctx.out(sequence, "sequence"), [-1, hidden], ""),)

    @staticmethod
    def onnx(ctx, node: Node, img, sent, w_e, b_e, w_s):
        # the batch is -1 (the image_size and sequence_len are fixed): any N the model takes
        _, steps = _sizes(node, node.inputs[0].shape, node.inputs[1].shape)
        hidden = node.attrs["hidden_size"]
        flat = ctx.add("Reshape", [img, ctx.ints([-1, node.attrs["image_size"]], "img")],
                       suffix="img")[0]
        w_e_t = ctx.add("Transpose", [w_e], suffix="We_t", perm=[1, 0])[0]
        image = ctx.add("Add", [ctx.add("MatMul", [flat, w_e_t], suffix="image")[0], b_e],
                        suffix="image_bias")[0]
        ids = ctx.add("Transpose", [ctx.add("Reshape", [sent, ctx.ints([-1, steps - 1], "ids")],
                                            suffix="ids")[0]], suffix="ids_t", perm=[1, 0])[0]
        # trunc(x) = sign(x) · floor(|x|), as the fork's int(); rows of Ws where it is ≥ 0
        floor = ctx.add("Floor", [ctx.add("Abs", [ids], suffix="abs")[0]], suffix="floor")[0]
        trunc = ctx.add("Mul", [ctx.add("Sign", [ids], suffix="sign")[0], floor],
                        suffix="trunc")[0]
        index = ctx.add("Cast", [ctx.add("Relu", [trunc], suffix="kept")[0]], suffix="index",
                        to=7)[0]  # 7 = TensorProto.INT64
        words = ctx.add("Gather", [w_s, index], suffix="words", axis=0)[0]
        valid = ctx.add("Greater", [trunc, ctx.scalar(-1.0, "minus_one")], suffix="valid")[0]
        mask = ctx.unsqueeze(ctx.add("Cast", [valid], suffix="mask", to=1)[0], [2], "mask3")
        masked = ctx.add("Mul", [words, mask], suffix="masked")[0]
        sequence = ctx.add("Concat", [ctx.unsqueeze(image, [0], "image_row"), masked],
                           suffix="sequence", axis=0)[0]
        return (ctx.add("Reshape", [sequence, ctx.ints([-1, hidden], "rows")])[0],)


def _sizes(node: Node, img: Shape, sent: Shape) -> tuple[int, int]:
    """(N, T), checked as the fork's LayerSetUp checks them."""
    steps = node.attrs["sequence_len"] + 1
    if min(node.attrs["hidden_size"], node.attrs["image_size"],
           node.attrs["vocabulary_size"]) <= 0:
        raise shape_error(node, "hidden_size, image_size and vocabulary_size must be > 0",
                          "set them in caption_input_param")
    if not img or not sent or img[0] != sent[0]:
        raise shape_error(node, f"img {tuple(img)} and sent {tuple(sent)} must have the same "
                          "num (N)", "feed one sentence per image")
    if count(img, 1) != node.attrs["image_size"] or count(sent, 1) != steps - 1:
        raise shape_error(node, f"img must be (N, image_size = {node.attrs['image_size']}) and "
                          f"sent (N, sequence_len = {steps - 1}), found {tuple(img)} and "
                          f"{tuple(sent)}", "check caption_input_param against the data")
    return img[0], steps
