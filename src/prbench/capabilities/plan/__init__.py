"""The planner over a benchmark (`prbench plan`, `plan`): each user's expected aspects, for the `planner` condition.

- `settings`: `PlanSettings` (the study's `planner` section, `PlannerStage`, is in `prbench.study.config`).
- `driver`: `plan`, writing one planner file (resumable JSONL).
- `command`: `prbench plan` and `prbench plan train`.
- `kind`: the run kind (`KIND`); its study stage is `run_plan` in `prbench.study.stages`.
The planner model itself (`Planner`, parsing, `train_planner`) is `prbench.context.planner`: the
`planner` input condition uses it too. No report block.
"""
