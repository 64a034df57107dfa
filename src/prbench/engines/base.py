"""The engine interface: chat generation and teacher-forced log-likelihood.

Engines are named by spec strings whose prefixes are registered in `prbench.registry.ENGINES`
(`hf:`, `builtin:`, `openai:`, `vllm:` and `prbench.engines` entry points). Every random choice is seeded per request (callers derive the seed
from (run seed, example id)), so batching and caching cannot change results.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prbench.errors import SpecError
from prbench.registry import ENGINES

Messages = list[dict[str, str]]


PREFIX_KEY = "stable_prefix"  # a message may name the start of its content that other requests share


def plain(messages: Messages) -> Messages:
    """The messages as sent and keyed: role and content only (a `stable_prefix` mark changes neither the
    reply nor the cache key: it only lets an API engine ask for prompt caching)."""
    return [{k: v for k, v in m.items() if k != PREFIX_KEY} for m in messages]


def stable_prefix(messages: Messages) -> str:
    """The marked shared start of the last message's content ('' when unmarked or not a true prefix)."""
    last = messages[-1] if messages else {}
    prefix = last.get(PREFIX_KEY) or ""
    return prefix if prefix and last.get("content", "").startswith(prefix) else ""


class RequestFailed(Exception):
    """An API request that failed for good (message safe to log and store); here, below every engine and
    batch module, so none of them imports another for it."""


@dataclass(frozen=True)
class GenParams:
    """Sampling parameters of one request; temperature 0 means greedy."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class Generation:
    """One generated text; `error` set (and text empty) when the request failed for good."""

    text: str
    finish_reason: str = "stop"  # stop | length | error
    error: str | None = None
    n_tokens: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class Engine(ABC):
    """A model runtime. Subclasses implement what their backend can do."""

    spec: str

    @abstractmethod
    def generate(self, prompts: Sequence[Messages], params: GenParams | Sequence[GenParams]) -> list[Generation]:
        """Chat completion for each prompt (chat template applied by the engine)."""

    def loglik(self, requests: Sequence[tuple[Messages, str]]) -> list[list[float]]:
        """Per-token log-probabilities of `continuation` as the assistant's reply to `messages`."""
        raise SpecError(f"{self.spec}: this engine cannot compute log-likelihoods")

    def choice_logprobs(self, prompts: Sequence[Messages], choices: Sequence[str]) -> list[dict[str, float]]:
        """Log-probability of each single-token choice (e.g. 'A', 'B') as the reply's first token."""
        raise SpecError(f"{self.spec}: this engine cannot score answer tokens")

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this engine's outputs in a cache key (model, revision, template hash)."""
        return {"spec": self.spec}

    def capabilities(self) -> dict[str, bool]:
        """What this engine can do: generate, loglik, choice_logprobs, classify (an override narrows it)."""
        cls = type(self)
        return {"generate": True, "loglik": cls.loglik is not Engine.loglik,
                "choice_logprobs": cls.choice_logprobs is not Engine.choice_logprobs, "classify": False}

    def require(self, capability: str, what: str) -> None:
        """Fail at construction, with one line, when a kind needs a capability (`what` it is) this engine lacks."""
        if not self.capabilities().get(capability, False):
            raise SpecError(f"{self.spec}: this engine has no {what} ({capability}); see the README's engine "
                            f"capability table")


def logsumexp(values: Sequence[float]) -> float:
    """log(sum(exp(v))), computed stably: how engines fold the token spellings of one choice; -inf for none."""
    if not values:
        return -math.inf
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


def load_engine(spec: str, **options: Any) -> Engine:
    """Build the engine a spec string names (see `prbench.registry.ENGINES`); options are its kind's
    (`options_model`), an unknown one refused with the closest known name."""
    from prbench.specs import check_options

    options = check_options(ENGINES, spec, options)
    prefix, _, rest = spec.partition(":")
    engine = ENGINES.get(prefix)(rest, **options)
    if not isinstance(engine, Engine):
        raise SpecError(f"{prefix}: its factory returned {type(engine).__name__}, not a prbench Engine")
    return engine


def engine_keywords(spec: str) -> set[str] | None:
    """The options the engine kind of `spec` declares (None: any), without building it."""
    from prbench.specs import declared, options_model

    return declared(options_model(ENGINES, spec))
