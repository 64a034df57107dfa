"""Policy sampling (`prbench sample`, `sample_policy`): N answers per item, drawn once for every RM's Best-of-N.

- `settings`: `SampleSettings` (the study's `sample` section, `SampleStage`, is in `prbench.study.config`).
- `driver`: `sample_policy`, writing one samples folder.
- `command`: `prbench sample`.
- `kind`: the run kind (`KIND`); its study stage is `run_sample` in `prbench.study.stages`.
The samples folder's reader (`read_samples`, `SampleSet`), its layout and the policy's prompt are shared
with Best-of-N, GRPO and RGD, so they stay in `prbench.downstream.sampling`. No report block.
"""
