"""Running a serialized engine on a GPU (the only code here that needs one).

Kept small and isolated: device memory through cuda-python's runtime bindings, imported
lazily. Its tests carry the ``gpu`` marker and skip on machines without a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from caffe_lstm.backends.tensorrt.runtime import (BackendUnavailableError, Runtime, has_gpu,
                                                  logger)
from caffe_lstm.errors import ModelLoadError


def run_engine(runtime: Runtime, engine_path: str | Path,
               feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Runs the engine once on ``feeds`` (float32, by input name); returns every output.

    Engine inputs the feeds lack (e.g. the state inputs of ``--state io``) are fed zeros.
    """
    if not has_gpu():
        raise BackendUnavailableError("running an engine needs an NVIDIA GPU; none was found",
                                      str(engine_path),
                                      "run on a GPU machine, or use --backend numpy")
    cudart = _cudart()
    engine = _deserialize(runtime, engine_path)
    context = engine.create_execution_context()
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    is_input = {n: engine.get_tensor_mode(n) == runtime.trt.TensorIOMode.INPUT for n in names}
    host = {n: _input_array(engine, context, n, feeds) for n in names if is_input[n]}
    for name, array in host.items():
        context.set_input_shape(name, array.shape)
    for name in names:
        if not is_input[name]:
            host[name] = np.empty(tuple(context.get_tensor_shape(name)), np.float32)
    device = {name: _malloc(cudart, array.nbytes) for name, array in host.items()}
    try:
        return _execute(cudart, context, host, device, is_input)
    finally:
        for pointer in device.values():
            _check(cudart.cudaFree(pointer))


def _execute(cudart: Any, context: Any, host: dict, device: dict, is_input: dict) -> dict:
    to_device, to_host = (cudart.cudaMemcpyKind.cudaMemcpyHostToDevice,
                          cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost)
    for name, array in host.items():
        context.set_tensor_address(name, int(device[name]))
        if is_input[name]:
            _check(cudart.cudaMemcpy(device[name], array.ctypes.data, array.nbytes, to_device))
    stream = _check(cudart.cudaStreamCreate())
    if not context.execute_async_v3(int(stream)):
        raise BackendUnavailableError("the engine failed to execute", "", "rerun with -vv")
    _check(cudart.cudaStreamSynchronize(stream))
    outputs = {}
    for name, array in host.items():
        if not is_input[name]:
            _check(cudart.cudaMemcpy(array.ctypes.data, device[name], array.nbytes, to_host))
            outputs[name] = array
    return outputs


def _input_array(engine: Any, context: Any, name: str, feeds: Mapping) -> np.ndarray:
    if name in feeds:
        return np.ascontiguousarray(feeds[name], dtype=np.float32)
    shape = tuple(max(d, 1) for d in engine.get_tensor_shape(name))
    return np.zeros(shape, np.float32)


def _deserialize(runtime: Runtime, path: str | Path) -> Any:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ModelLoadError(f"cannot read the engine ({exc.strerror})", str(path),
                             "check the path") from None
    engine = runtime.trt.Runtime(logger(runtime)).deserialize_cuda_engine(data)
    if engine is None:
        raise ModelLoadError("the engine cannot be deserialized", str(path),
                             f"build it with this runtime ({runtime.name}) and version")
    return engine


def _cudart() -> Any:
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:
            from cuda import cudart  # cuda-python < 12.6
        except ImportError:
            raise BackendUnavailableError("running an engine needs cuda-python",
                                          "--backend tensorrt",
                                          "pip install 'caffe-lstm[gpu]' (cuda-python)") from None
    return cudart


def _malloc(cudart: Any, size: int) -> Any:
    return _check(cudart.cudaMalloc(max(size, 1)))


def _check(result: Any) -> Any:
    """cuda-python returns (error, value...) tuples; raise on an error, return the value."""
    error, *values = result if isinstance(result, tuple) else (result,)
    if int(error) != 0:
        raise BackendUnavailableError(f"CUDA call failed with error {int(error)}", "",
                                      "check the GPU driver")
    return values[0] if values else None
