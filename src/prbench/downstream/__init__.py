"""Downstream validation: does an RM's benchmark score predict what it does when used?

- `sampling`: N policy answers per item, drawn once and shared by every RM.
- `grader`: an LLM grades an answer against the user's rubric (0/1/2 per aspect), cached.
- `bon`: Best-of-N curves (first-k pick, exact expected best-of-k, oracle, random).
- `rl`: GRPO fine-tuning with the RM as reward (TRL), then grading on held-out items.
- `server`: any pointwise RM over HTTP for external RL stacks (verl, OpenRLHF).
- `results`: the `downstream.json` format meta-evaluation reads.

Submodules import their heavy dependencies lazily; import what you use.
"""

from prbench.downstream.results import DownstreamResult, find_downstream, read_downstream, write_downstream

__all__ = ["DownstreamResult", "find_downstream", "read_downstream", "write_downstream"]
