"""The reward-model interface and the spec-string registry.

A *pointwise* RM scores (view, response) -> float; a *pairwise* RM returns a verdict for
(view, response A, response B). The evaluator, not the RM, decides which side `chosen`
takes, so position randomisation is the same for every judge.

Kinds are named by spec prefixes registered in `prbench.registry.REWARDS` (built-ins and
`prbench.rewards` entry points alike). This module holds the interfaces only.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from prbench.context.conditions import View
from prbench.errors import SpecError
from prbench.registry import REWARDS
from prbench.specs import COMMAND_WIDE, ModelSpec, check_options, model_class


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
    """Common identity of every RM: its spec, what it needs and costs, and what enters a cache key.

    The capability flags are read by the study planner, the leaderboard and the report, so a
    new kind (built in or a plug-in) declares them here instead of being guessed from its prefix.
    """

    spec: str
    kind: Literal["pointwise", "pairwise"]
    calls_model: bool = True  # runs a neural model or API (costs calls and tokens in a dry run)
    is_control: bool = False  # a baseline/control shown beside real RMs, never ranked as one
    uses_context: bool = True  # reads user context (profile, rubric...), so conditions matter

    @property
    def name(self) -> str:
        """What tables show: the spec the user wrote, unless the kind names a mode beside it."""
        return self.__dict__.get("_name") or self.spec

    @name.setter
    def name(self, value: str) -> None:
        self.__dict__["_name"] = value

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


class CheckedOptions(dict[str, Any]):
    """A model's options as its kind's options model checked them (`checked_options`): typed, unknown ones
    refused, a command's flags the kind does not take dropped. Checking them again for the same spec is a
    no-op, so a command that checks every model's options up front does not have them checked twice."""

    def __init__(self, spec: str, options: Mapping[str, Any]):
        super().__init__(options)
        self.spec = spec


def checked_options(spec: str | ModelSpec, options: Mapping[str, Any] | None = None) -> CheckedOptions:
    """The one check of a model's options (see `prbench.specs.check_options`); already checked: returned as is.
    A parsed spec (`prbench.specs.ModelSpec`) is checked by its kind's model without parsing it again."""
    if isinstance(options, CheckedOptions) and options.spec == str(spec):
        return options
    return CheckedOptions(str(spec), check_options(REWARDS, spec, dict(options or {}), command_wide=COMMAND_WIDE))


def load_rm(spec: str, **options: Any) -> RewardModel:
    """Build the reward model a spec string names (see `prbench.registry.REWARDS`).

    Options are checked by the kind's options model (`prbench.specs`): an unknown one is an error
    naming the closest known one, except a command's flags for all its models (`COMMAND_WIDE`),
    which a kind without that option does not get. A plug-in that returns no RewardModel is refused.
    """
    return build_rm(spec, checked_options(spec, options))


def build_rm(spec: str | ModelSpec, options: CheckedOptions) -> RewardModel:
    """Build from options `checked_options` has checked (nothing is checked again; a parsed spec's kind is not
    looked up again)."""
    prefix, rest, factory = (spec.prefix, spec.rest, spec.factory) if isinstance(spec, ModelSpec) else (
        *spec.partition(":")[::2], None)
    rm = (factory or REWARDS.get(prefix))(rest, **options)
    if not isinstance(rm, (PointwiseRM, PairwiseRM)):
        raise SpecError(f"{prefix}: its factory returned {type(rm).__name__}, not a PointwiseRM or PairwiseRM")
    if not getattr(rm, "spec", None):
        rm.spec = str(spec)
    return rm


DEFAULT_TOP_K = 10  # profile items a view shows when neither the user nor the model says otherwise


def view_top_k(model: str | RewardModel) -> int | None:
    """How many profile items the model asks each view to show, if it asks: its `view_top_k`, or for a
    spec `PREFIX:FOLDER` of a prbench-trained folder the `view_top_k` of its config.json.

    Why: a method that reads a person's judgments needs all of them, while the benchmark's default view keeps
    the 10 items a retriever ranks first; the trained folder says so instead of each user passing --top-k."""
    if not isinstance(model, str):
        value = getattr(model, "view_top_k", None)
    else:
        import json
        from pathlib import Path

        from prbench.rewards.folders import trained_meta

        folder = Path(model.partition(":")[2]).expanduser()
        if trained_meta(folder) is None:
            return None
        try:
            value = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("view_top_k")
        except (OSError, ValueError, AttributeError):
            return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def shown_top_k(given: int | None, model: str | RewardModel) -> int:
    """The profile items a view shows: the number given, else what the model (or its trained folder) asks for,
    else DEFAULT_TOP_K. One rule for eval, Best-of-N, RL and the reward server, so the reward a run optimizes
    is the one eval measured (issue 51.17: a stance folder asks for the whole profile)."""
    if given:
        return given
    own = view_top_k(model)
    spec = model if isinstance(model, str) else getattr(model, "spec", None)
    if own is None and isinstance(spec, str) and spec:
        own = view_top_k(spec)
    return own or DEFAULT_TOP_K


def rm_name(spec: str | ModelSpec, options: Mapping[str, Any] | None = None) -> str:
    """The `name` the RM a spec builds will report, known without building it: the spec, unless its kind
    names a mode beside it (a pointwise judge: `judge[pointwise]:ENGINE`) through a
    `run_name(rest, **options)` hook on its factory."""
    if isinstance(spec, ModelSpec):
        factory, rest = spec.factory, spec.rest
    else:
        prefix, _, rest = spec.partition(":")
        factory = REWARDS.get(prefix)
    hook = getattr(factory, "run_name", None)
    return hook(rest, **dict(options or {})) if callable(hook) else str(spec)


@dataclass(frozen=True)
class Capabilities:
    """What a reward-model kind needs and costs, and whether it scores or compares, known without loading."""

    calls_model: bool = True
    is_control: bool = False
    uses_context: bool = True
    kind: Literal["pointwise", "pairwise"] = "pointwise"

    @property
    def pairwise(self) -> bool:
        return self.kind == "pairwise"

    def as_dict(self) -> dict[str, bool]:
        """What a run summary records (`kind` is the summary's own field)."""
        return {"calls_model": self.calls_model, "is_control": self.is_control, "uses_context": self.uses_context}


def capabilities(spec: str | RewardModel, options: dict[str, Any] | None = None) -> Capabilities:
    """Capabilities of a built RM, or of the class a spec would build with `options` (no weights loaded).

    A factory tells its class by being the class itself or through a `model_class(rest, **options)`
    attribute; a factory that says neither gets the cautious defaults (a model call, not a control).
    """
    if isinstance(spec, RewardModel):
        cls: Any = spec
    else:
        cls = model_class(REWARDS, spec, options)
        if cls is None:
            return Capabilities()
    return Capabilities(bool(getattr(cls, "calls_model", True)), bool(getattr(cls, "is_control", False)),
                        bool(getattr(cls, "uses_context", True)), getattr(cls, "kind", "pointwise"))
