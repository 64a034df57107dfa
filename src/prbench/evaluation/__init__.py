"""Scoring a reward model over a benchmark: the evaluate driver, the scoring core, sequential stopping, the validity
card, Ray spreading.

Modules: `evaluate`, `scoring`, `sequential`, `validity`, `distributed`. Nothing is imported here, so naming one
module loads only it.
"""
