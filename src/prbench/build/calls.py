"""Model calls for the build, cached by content hash so a resumed or repeated build never pays twice.

The key is everything that decides the reply: the engine's fingerprint, the messages and the
sampling parameters (seed included). Failed calls are never cached, so a re-run retries them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from prbench.engines.base import Engine, Generation, GenParams, Messages
from prbench.store.cache import Cache, NullCache, content_key


@dataclass
class CallCounter:
    """How many requests reached the engine and how many the cache answered (for the summary)."""

    requests: int = 0
    cache_hits: int = 0
    errors: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"requests": self.requests, "cache_hits": self.cache_hits, "errors": self.errors}


@dataclass
class CachedEngine:
    """An engine behind the call cache; `counter` records what actually reached the engine."""

    engine: Engine
    cache: Cache = field(default_factory=NullCache)
    counter: CallCounter = field(default_factory=CallCounter)

    @property
    def spec(self) -> str:
        return self.engine.spec

    def generate(self, prompts: Sequence[Messages], params: Sequence[GenParams]) -> list[Generation]:
        """Generate for each prompt with its own params; cached replies skip the engine."""
        if not prompts:
            return []
        fp = self.engine.fingerprint()
        keys = [content_key("build-generate", fp, m, p.as_dict()) for m, p in zip(prompts, params)]
        hits = self.cache.get_many(keys)
        todo = [i for i, k in enumerate(keys) if k not in hits]
        out: list[Generation | None] = [None] * len(prompts)
        if todo:
            fresh = self.engine.generate([prompts[i] for i in todo], [params[i] for i in todo])
            self.counter.requests += len(todo)
            store = {}
            for i, g in zip(todo, fresh):
                out[i] = g
                if g.error:
                    self.counter.errors += 1
                else:
                    store[keys[i]] = {"text": g.text, "finish_reason": g.finish_reason, "n_tokens": g.n_tokens}
            self.cache.put_many(store)
        done: list[Generation] = []
        for i, k in enumerate(keys):
            got = out[i]
            if got is None:
                h = hits[k]
                self.counter.cache_hits += 1
                got = Generation(h["text"], finish_reason=h.get("finish_reason", "stop"),
                                 n_tokens=h.get("n_tokens"), meta={"cached": True})
            done.append(got)
        return done
