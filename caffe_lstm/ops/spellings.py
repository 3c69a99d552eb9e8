"""Type strings a fork spells otherwise than the registered type it means: MyCaffe's.

MyCaffe (MyCaffe/MyCaffe@b8922aa, param/LayerParameter.cs, ``parseLayerType``) lower-cases a
layer's type string, then matches it with its aliases: "lstmsimple" and "lstm_simple" are its
LSTM_SIMPLE (a port of junhyukoh's Lstm: ``LSTMSimple`` here), "lstm" its LSTM, "rnn" its RNN and
"lstm_unit" its LSTM_UNIT, the last three Caffe's own layers. So MyCaffe's nets write ``LstmSimple``
and ``Lstm``. ``Lstm`` is also the fork type of junhyukoh and deepdiary, configured by
``lstm_param``: a layer so spelled is MyCaffe's only when ``recurrent_param`` alone configures it.
"""

from __future__ import annotations

from collections.abc import Callable

from caffe_lstm.ops.recurrent.layers import LSTM, RNN, Lstm, LSTMSimple
from caffe_lstm.ops.recurrent.lstm_unit import LSTMUnit

#: The lower-cased MyCaffe spelling -> the op it names.
MYCAFFE = {"lstmsimple": LSTMSimple, "lstm_simple": LSTMSimple, "lstm": LSTM, "rnn": RNN,
           "lstm_unit": LSTMUnit}


def registered_type(spelled: str, has_param: Callable[[str], bool]) -> str:
    """The registered type a layer of type ``spelled`` means (``spelled`` itself unless it is a
    MyCaffe spelling of another); ``has_param(name)``: whether the layer sets that message."""
    op = MYCAFFE.get(spelled.lower())
    if op is None or spelled == op.type:
        return spelled
    if op is LSTM and (has_param(Lstm.param) or not has_param(LSTM.param)):
        return spelled  # "Lstm" configured by lstm_param: junhyukoh's or deepdiary's fork type
    return op.type
