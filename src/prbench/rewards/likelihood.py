"""Likelihood rewards from a chat LM: how much the user context raises a response's probability.

`PMIReward` (spec `pmi:<engine spec>`) scores a response r to question q for a user with
context c (profile posts, planner aspects or oracle rubric, as the condition shows) by the
pointwise mutual information between context and response under the model:

    PMI(r) = log p(r | user turn "c + q") - log p(r | user turn "q")

both computed teacher-forced as the assistant's reply (`Engine.loglik`), with the chat
template applied by the engine. `normalize`:

- `"mean"` (default): each term is the mean per-token log-probability of r. Comparable across
  responses of different lengths; the difference is a per-token PMI.
- `"sum"`: each term is the total log-probability (the exact log-ratio for the whole response);
  grows in magnitude with length, so it also rewards long responses that the context favours.

The context term's user turn is `view.prompt()` ("<context>\n\nQuestion: <q>"), the other's
is the bare question, so the difference also holds the small effect of the "Question:" frame;
it is the same for both responses of a pair and so barely moves a comparison.

Why PMI and not plain likelihood: log p(r | c, q) mostly measures fluency and genericity; a
fluent generic answer beats a personal one. Subtracting log p(r | q) removes what the model
would expect anyway and keeps what the user context adds.

Under condition `none` there is no context: both terms are the same request, so every
response scores exactly 0 and every pair is a tie (0.5 credit). That is correct, not a bug:
PMI only means something with user context. Use `LikelihoodReward` for a context-free score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from prbench.context.conditions import View
from prbench.engines.base import Engine, Messages
from prbench.errors import SpecError
from prbench.rewards.base import PointwiseRM, Score
from prbench.rewards.judges import engine_facts, engine_spec, open_engine, over_engine, was_truncated
from prbench.specs import RMOptions

Normalize = Literal["mean", "sum"]


def _reduce(logprobs: Sequence[float], normalize: str) -> float:
    if not logprobs:
        return math.nan
    total = float(sum(logprobs))
    return total / len(logprobs) if normalize == "mean" else total


def _user_turn(text: str, system: str | None, view: View | None = None) -> Messages:
    """The messages before the response: optional system prompt, earlier turns (multi-turn items), the user turn."""
    msgs: Messages = [{"role": "system", "content": system}] if system else []
    earlier = view.messages()[:-1] if view is not None else []
    return [*msgs, *earlier, {"role": "user", "content": text}]


class LoglikOptions(RMOptions):
    normalize: Normalize = "mean"
    system: str | None = None
    engine_options: dict[str, Any] | None = None


class _LoglikRM(PointwiseRM):
    """Shared plumbing: one engine call per batch, identical requests computed once."""

    prefix = "lik"
    options_model = staticmethod(over_engine(LoglikOptions))
    resolve_spec = staticmethod(engine_spec)

    def __init__(self, engine_spec: str | Engine, normalize: Normalize = "mean", system: str | None = None,
                 engine_options: dict[str, Any] | None = None, **options: Any):
        if normalize not in ("mean", "sum"):
            raise SpecError(f"normalize must be 'mean' or 'sum', got {normalize!r}")
        self.normalize = normalize
        self.system = system
        opts = {**{k: v for k, v in options.items() if k != "seed"}, **(engine_options or {})}
        self.engine, self.ignored_options = open_engine(engine_spec, opts)
        self.engine.require("loglik", "echo with logprobs on /v1/completions")
        engine_name = engine_spec if isinstance(engine_spec, str) else self.engine.spec
        self.spec = f"{self.prefix}:{engine_name}"
        self.name = self.spec if normalize == "mean" else f"{self.prefix}[{normalize}]:{engine_name}"
        self.counts = {"responses": 0, "requests": 0, "empty_responses": 0}

    @classmethod
    def run_name(cls, rest: str, normalize: str = "mean", **_: Any) -> str:
        """The `name` set above, known without opening the engine."""
        return f"{cls.prefix}:{rest}" if normalize == "mean" else f"{cls.prefix}[{normalize}]:{rest}"

    def _loglik(self, requests: list[tuple[Messages, str]]) -> list[float]:
        """Reduced log-likelihood of each request; duplicates are sent once (one engine call)."""
        keys = [repr((m, c)) for m, c in requests]
        unique: dict[str, int] = {}
        todo: list[tuple[Messages, str]] = []
        for k, req in zip(keys, requests):
            if k not in unique:
                unique[k] = len(todo)
                todo.append(req)
        self.counts["requests"] += len(todo)
        values = self.engine.loglik(todo) if todo else []
        reduced = [_reduce(v, self.normalize) for v in values]
        return [reduced[unique[k]] for k in keys]

    def fingerprint(self) -> dict[str, Any]:
        return {"spec": self.spec, "normalize": self.normalize, "system": self.system,
                "engine": self.engine.fingerprint()}

    def run_info(self) -> dict[str, Any]:
        return {"normalize": self.normalize, **{f"lik_{k}": v for k, v in self.counts.items()},
                **engine_facts(self.engine, self.ignored_options)}

    def _finish(self, batch: Sequence[tuple[View, str]], values: list[float]) -> list[Score]:
        out = []
        self.counts["responses"] += len(batch)
        for (view, resp), v in zip(batch, values):
            if not resp.strip():
                self.counts["empty_responses"] += 1
                out.append(Score(math.nan, truncated=was_truncated(view), error="empty response"))
            elif not math.isfinite(v):
                out.append(Score(math.nan, truncated=was_truncated(view), error="non-finite log-likelihood"))
            else:
                out.append(Score(v, truncated=was_truncated(view)))
        return out


class PMIReward(_LoglikRM):
    """log p(response | context + question) - log p(response | question); see the module doc."""

    prefix = "pmi"

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        if not batch:
            return []
        requests: list[tuple[Messages, str]] = []
        for view, resp in batch:
            requests.append((_user_turn(view.prompt(), self.system, view), resp))
            requests.append((_user_turn(view.question, self.system, view), resp))
        values = self._loglik(requests)
        pmi = []
        for i in range(len(batch)):
            with_ctx, without = values[2 * i], values[2 * i + 1]
            # Same request under `none`: exactly 0, not a float difference of two equal calls.
            pmi.append(0.0 if requests[2 * i] == requests[2 * i + 1] and math.isfinite(with_ctx)
                       else with_ctx - without)
        return self._finish(batch, pmi)


class LikelihoodReward(_LoglikRM):
    """log p(response | context + question) alone (mean or sum): a fluency-laden reference for PMI."""

    prefix = "lik"

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        if not batch:
            return []
        values = self._loglik([(_user_turn(v.prompt(), self.system, v), r) for v, r in batch])
        return self._finish(batch, values)
