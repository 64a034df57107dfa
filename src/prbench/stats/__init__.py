"""Statistics: confidence intervals, rank agreement, confidence sequences, simulated stopping, power.

Modules: `metrics`, `confseq`, `seqsim`, `power`. They read no data and no run (the sequential evaluation that
does is `prbench.evaluation.sequential`). Nothing is imported here, so naming one module loads only it.
"""
