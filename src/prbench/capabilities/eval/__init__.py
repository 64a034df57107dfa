"""Eval: one reward model on one benchmark under one input condition, as `prbench eval`, `prbench.evaluate` and a
study's eval stage run it; the benchmark side of meta, the leaderboard's rows and `compare`'s inputs.

Its parts: `settings` (`EvalSettings`, the driver's settings and the command's options), `kind` (the `RunKind`:
how a finished eval run folder is read and checked), `stage` (the study's eval stage and its dry-run plan),
`command` (`prbench eval`). Its driver is the shared core `prbench.evaluation.evaluate.evaluate` (with
`prbench.evaluation.until` for `until`), which downstream kinds score through too; its report block is
`prbench.report.evals.leaderboard_section`, beside the page's other benchmark sections it shares helpers with.
"""
