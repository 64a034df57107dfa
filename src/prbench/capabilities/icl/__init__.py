"""The in-context-learning baseline (`prbench icl`, `run_icl`): the policy shown the user's own examples, no RM.

- `settings`: `ICLSettings`.
- `driver`: `run_icl`, writing one run (samples-folder layout, scored like RGD outputs).
- `command`: `prbench icl`.
- `kind`: the run kind (`KIND`), its Every Eval Ever parts read from scores.json through
  `prbench.runkinds.generation.read_scores`.
It has no study stage and no report block.
"""
