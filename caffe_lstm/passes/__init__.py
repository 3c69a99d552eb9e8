"""Graph passes: functions Graph -> bool (changed), each followed by the verifier and shapes."""

from caffe_lstm.passes.expose_state import refuse_hidden_states
from caffe_lstm.passes.manager import DEFAULT_PIPELINE, run_passes

__all__ = ["DEFAULT_PIPELINE", "refuse_hidden_states", "run_passes"]
