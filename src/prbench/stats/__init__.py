"""Statistics: confidence intervals, rank agreement, sequential stopping, power.

Modules: `metrics`, `confseq`, `sequential`, `seqsim`, `power`. Nothing is imported here, so naming one module loads only it."""
