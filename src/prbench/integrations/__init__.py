"""Adapters for RL training frameworks that train a policy against a prbench reward.

They sit above `prbench.serve` (the reward service and its wire formats, which never imports
them): `prbench.serve.items` is the user context an RL row carries (a JSON label /
`extra_info`) and how it becomes a `SourceItem` again, so every framework rewards exactly what
`prbench eval` scores; `prbench.serve.chat` cuts the response out of OpenRLHF's `query` by
the policy's chat template; `prbench.serve.client` makes one reward call, to a running
`prbench serve-reward` or an in-process RM.

- `prbench.integrations.verl`: verl's `compute_score` (a file verl imports by path).
- `prbench.integrations.openrlhf`: OpenRLHF's `reward_func(queries, prompts, labels)` (a file too).
- `prbench.integrations.export`: the prompt datasets both frameworks train on.
"""
