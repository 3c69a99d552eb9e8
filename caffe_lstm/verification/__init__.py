"""``verify``: the recurrent equations against every implementation of the rewritten graph.

    Prepared         the fed graph and its rewrite, built once (``Net.prepare``)
    candidate_columns one Column per implementation: run, or not checked and why
    verify_prepared  reference, columns, signal, sensitivity, and where a mismatch starts
    locate           the first Caffe layer whose output leaves the tolerance

Every column works from the one ``Prepared``, so no check can compare against another graph
than the one it was handed.
"""

from caffe_lstm.verification.columns import Tolerances
from caffe_lstm.verification.prepared import Prepared
from caffe_lstm.verification.report import Column, Located, Verification
from caffe_lstm.verification.run import verify_prepared

__all__ = ["Column", "Located", "Prepared", "Tolerances", "Verification", "verify_prepared"]
