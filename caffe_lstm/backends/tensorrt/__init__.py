"""The TensorRT backend: the only place that imports tensorrt / tensorrt_rtx, and only lazily."""
