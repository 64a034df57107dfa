"""The reward-model interface and the spec-string registry.

A *pointwise* RM scores (view, response) -> float; a *pairwise* RM returns a verdict for
(view, response A, response B). The evaluator, not the RM, decides which side `chosen`
takes, so position randomisation is the same for every judge.

Spec prefixes: `hf:` sequence classifier, `baseline:<name>`, `py:<file.py>:<Class>`,
`judge:<engine spec>` (LLM judge), `pmi:<engine spec>` (personalization PMI), `lik:<engine spec>`
(log-likelihood of the response given the context), `bt:<dir>`,
`pal:<dir>`.
"""

from __future__ import annotations

import importlib.util
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from prbench.conditions import View
from prbench.errors import SpecError


@dataclass
class Score:
    """A pointwise score. `value` is NaN when the model failed (counted as invalid, never a guess)."""

    value: float
    truncated: bool = False  # profile posts dropped to fit max_length
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None and math.isfinite(self.value)


@dataclass(frozen=True)
class PairQuery:
    """One pairwise question: which of A and B suits this user better?"""

    view: View
    response_a: str
    response_b: str
    seed: int = 0


@dataclass
class Verdict:
    """`winner` is 'A', 'B' or 'tie'; None means the output could not be parsed (a parse failure)."""

    winner: Literal["A", "B", "tie"] | None
    raw: str = ""
    truncated: bool = False
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class RewardModel(ABC):
    """Common identity of every RM: its spec and what enters a cache key."""

    spec: str
    kind: Literal["pointwise", "pairwise"]

    def fingerprint(self) -> dict[str, Any]:
        """Everything that determines this RM's outputs (weights, template and prompt hashes)."""
        return {"spec": self.spec}

    def run_info(self) -> dict[str, Any]:
        """Extra facts for a run's summary (truncation counts, parse failures, prompt hashes)."""
        return {}


class PointwiseRM(RewardModel):
    kind = "pointwise"

    @abstractmethod
    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        """Score each (view, response); order preserved; batch composition must not matter."""


class PairwiseRM(RewardModel):
    kind = "pairwise"

    @abstractmethod
    def compare(self, batch: Sequence[PairQuery]) -> list[Verdict]:
        """A verdict for each query; order preserved."""


def _load_plugin(target: str, options: dict[str, Any]) -> RewardModel:
    """`py:path/to/file.py:ClassName` -- runs the user's own code, by design."""
    path, sep, cls_name = target.rpartition(":")
    if not sep or not path.endswith(".py"):
        raise SpecError(f"py: spec must be py:<file.py>:<ClassName>, got py:{target}")
    file = Path(path)
    if not file.is_file():
        raise SpecError(f"py: plug-in file not found: {file}")
    spec = importlib.util.spec_from_file_location(f"prbench_plugin_{file.stem}", file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise SpecError(f"py: {file} has no class {cls_name!r}")
    rm = cls(**options)
    if not isinstance(rm, (PointwiseRM, PairwiseRM)):
        raise SpecError(f"py: {cls_name} must subclass prbench.rewards.PointwiseRM or PairwiseRM")
    rm.spec = f"py:{target}"
    return rm


def _frozen_head_kind(folder: str) -> bool:
    """A `bt:` folder trained as a head over a frozen encoder loads like PAL (same format)."""
    import json

    marker = Path(folder) / "prbench_rm.json"
    try:
        return json.loads(marker.read_text(encoding="utf-8")).get("kind") in ("context-bt", "pal-a", "pal-b")
    except (OSError, ValueError):
        return False


def load_rm(spec: str, **options: Any) -> RewardModel:
    """Build the reward model a spec string names. Options are passed to its constructor."""
    prefix, _, rest = spec.partition(":")
    if not rest:
        raise SpecError(f"model spec {spec!r} needs a prefix: hf:, baseline:, py:, judge:, pmi:, lik:, bt:, pal:")
    if prefix == "baseline":
        from prbench.rewards.baselines import load_baseline

        return load_baseline(rest, **options)
    if prefix == "bt" and _frozen_head_kind(rest):
        from prbench.rewards.pal import PALReward

        return PALReward(rest, **options)
    if prefix in ("hf", "bt"):
        from prbench.rewards.classifier import SequenceClassifierRM

        return SequenceClassifierRM(rest, spec=spec, **options)
    if prefix == "py":
        return _load_plugin(rest, options)
    if prefix == "judge":
        from prbench.rewards.judges import load_judge

        return load_judge(rest, **options)
    if prefix == "pmi":
        from prbench.rewards.likelihood import PMIReward

        return PMIReward(rest, **options)
    if prefix == "lik":
        from prbench.rewards.likelihood import LikelihoodReward

        return LikelihoodReward(rest, **options)
    if prefix == "pal":
        from prbench.rewards.pal import PALReward

        return PALReward(rest, **options)
    raise SpecError(f"unknown model prefix {prefix!r} in {spec!r}")
