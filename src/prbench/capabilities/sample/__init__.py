"""Policy sampling (`prbench sample`, `sample_policy`): N answers per item, drawn once for every RM's Best-of-N.

- settings: `SampleSettings` and the study's `sample` section (`SampleStage`) sit below the capabilities, in
  `prbench.config` and `prbench.study.config`: other stages read what this one writes.
- `driver`: `sample_policy`, writing one samples folder.
- `command`: `prbench sample`.
- `stage`: the study stage (`run_sample`).
- `kind`: the run kind (`KIND`).
The samples folder's reader (`read_samples`, `SampleSet`), its layout and the policy's prompt are shared
with Best-of-N, GRPO and RGD, so they stay in `prbench.downstream.sampling`. No report block.
"""
