"""Adapters for RL training frameworks that train a policy against a prbench reward.

They sit above `prbench.downstream` (the reward service and its wire format, which never imports
them): `prbench.downstream.items` is the user context an RL row carries (a JSON label /
`extra_info`) and how it becomes a `SourceItem` again, so every framework rewards exactly what
`prbench eval` scores; `prbench.downstream.chat` cuts the response out of OpenRLHF's `query` by
the policy's chat template.

- `prbench.integrations.client`: one reward call, to a running `prbench serve-reward` or an in-process RM.
- `prbench.integrations.verl`: verl's `compute_score` (a file verl imports by path).
- `prbench.integrations.openrlhf`: OpenRLHF's `reward_func(queries, prompts, labels)` (a file too).
- `prbench.integrations.export`: the prompt datasets both frameworks train on.
"""
