"""The planner over a benchmark (`prbench plan`, `plan`): each user's expected aspects, for the `planner` condition.

- settings: `PlanSettings` and the study's `planner` section (`PlanStage`) sit below the capabilities, in
  `prbench.config` and `prbench.study.config`: other stages read what this one writes.
- `driver`: `plan`, writing one planner file (resumable JSONL).
- `command`: `prbench plan` and `prbench plan train`.
- `stage`: the study stage (`run_plan`).
- `kind`: the run kind (`KIND`).
- `planner`: the planner model itself (`Planner`, parsing, `train_planner`); the `planner` input condition reads
  the files the driver writes (`prbench.context.conditions.read_planner_file`), never the model. No report block.
"""
