"""Downstream validation: does an RM's benchmark score predict what it does when used?

- `sampling`: N policy answers per item, drawn once and shared by every RM.
- `grader`: an LLM grades an answer against the user's rubric (0/1/2 per aspect), cached.
- `results`: the `downstream.json` format meta-evaluation reads.
- `decoding`, `prefix_rewards`, `generation_runs`: the guided-decoding loop, the RM over prefixes and the run
  writer that reward-guided decoding, policy accuracy and ICL share.

The capabilities built on these (Best-of-N, RL, reward-guided decoding, policy accuracy) are packages of
`prbench.capabilities`.

Submodules import their heavy dependencies lazily; import what you use.
"""

from prbench.downstream.results import DownstreamResult, find_downstream, read_downstream, write_downstream

__all__ = ["DownstreamResult", "find_downstream", "read_downstream", "write_downstream"]
