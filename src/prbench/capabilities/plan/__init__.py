"""The planner over a benchmark (`prbench plan`, `plan`): each user's expected aspects, for the `planner` condition.

- `settings`: `PlanSettings` (the study's `planner` section, `PlannerStage`, is in `prbench.study.config`).
- `driver`: `plan`, writing one planner file (resumable JSONL).
- `command`: `prbench plan` and `prbench plan train`.
- `kind`: the run kind (`KIND`); its study stage is `run_plan` in `prbench.study.stages`.
- `planner`: the planner model itself (`Planner`, parsing, `train_planner`); the `planner` input condition reads
  the files the driver writes (`prbench.context.conditions.read_planner_file`), never the model. No report block.
"""
