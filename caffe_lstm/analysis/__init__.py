"""Analyses over a graph: shapes, limits, the verifier, summaries (they may read the ops)."""
