"""``python -m caffe_lstm`` is the ``caffe-lstm`` command."""

from caffe_lstm.cli import main

main()
