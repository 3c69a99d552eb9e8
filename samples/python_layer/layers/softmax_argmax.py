"""A Caffe Python layer as deploy nets end with one: softmax over the classes, then the best
class per position (what a decoder or a proposal filter does after the net).

Written against pycaffe's interface only (``caffe.Layer``: setup, reshape, forward over
``bottom``/``top`` blobs with ``.data``, ``.reshape``, ``.shape``; ``param_str``), so it runs
in Caffe and in caffe-lstm (``--python-path samples/python_layer/layers``).

    top[0] = softmax(bottom[0], axis)      top[1] = argmax(bottom[0], axis)   (as float)
"""

import json

import caffe
import numpy as np


class SoftmaxArgmax(caffe.Layer):
    def setup(self, bottom, top):
        if len(bottom) != 1 or len(top) != 2:
            raise Exception("SoftmaxArgmax takes one bottom and gives two tops")
        params = json.loads(self.param_str or "{}")
        self.axis = int(params.get("axis", 1))
        self.temperature = float(params.get("temperature", 1.0))

    def reshape(self, bottom, top):
        shape = bottom[0].data.shape
        top[0].reshape(*shape)
        top[1].reshape(*(shape[:self.axis] + shape[self.axis + 1:]))

    def forward(self, bottom, top):
        scores = bottom[0].data / self.temperature
        shifted = np.exp(scores - scores.max(axis=self.axis, keepdims=True))
        top[0].data[...] = shifted / shifted.sum(axis=self.axis, keepdims=True)
        top[1].data[...] = scores.argmax(axis=self.axis)

    def backward(self, top, propagate_down, bottom):
        pass
