"""The ONNX backend: the exporter (an interpreter over the rewritten graph) and onnxruntime."""
