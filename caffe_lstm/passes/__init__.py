"""Graph passes: functions Graph -> bool (changed), each followed by the verifier and shapes."""

from caffe_lstm.passes.manager import DEFAULT_PIPELINE, run_passes

__all__ = ["DEFAULT_PIPELINE", "run_passes"]
