"""One reward per (user context, answer): from a running `prbench serve-reward` or an in-process RM.

Both paths score through `prbench.downstream.server.RewardService` (the HTTP one on the server,
the in-process one here), so the same item gets the same reward either way and the same as
`prbench eval`. Settings come from keyword arguments (verl's `reward_kwargs`) or else from
environment variables, so a framework that only imports a file can still be configured:

| setting | env var | meaning |
| `url` | PRBENCH_REWARD_URL | base URL of `prbench serve-reward` (e.g. http://127.0.0.1:8000) |
| `rm` | PRBENCH_RM | or: an RM spec loaded in this process (once per process) |
| `condition` | PRBENCH_CONDITION | in-process only (the server has its own): default profile |
| `items` | PRBENCH_ITEMS | benchmark file to look ids up in (rows that carry only an id) |
| `token_env` | PRBENCH_REWARD_TOKEN_ENV | name of the env var holding the server's token |
| `fallback_reward` | PRBENCH_FALLBACK_REWARD | reward of an item that cannot be scored (0.0) |
| `reward_scale` | PRBENCH_REWARD_SCALE | multiplies every valid score (the paper used 0.1) |
| `device` | PRBENCH_DEVICE | in-process RM device (e.g. cuda:1) |
| `top_k`, `retriever` | PRBENCH_TOP_K, PRBENCH_RETRIEVER | in-process: profile posts shown to the RM (10, bm25) |

A failing server (unreachable, 4xx, 5xx) raises: training must stop rather than learn from
made-up rewards. An item the RM cannot score gets `fallback_reward` and is flagged invalid.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from prbench.downstream.items import item_from_context
from prbench.errors import PrbenchError
from prbench.schema import SourceItem

ENV = {"url": "PRBENCH_REWARD_URL", "rm": "PRBENCH_RM", "condition": "PRBENCH_CONDITION",
       "items": "PRBENCH_ITEMS", "token_env": "PRBENCH_REWARD_TOKEN_ENV",
       "fallback_reward": "PRBENCH_FALLBACK_REWARD", "reward_scale": "PRBENCH_REWARD_SCALE",
       "device": "PRBENCH_DEVICE", "policy_template": "PRBENCH_POLICY_TEMPLATE", "top_k": "PRBENCH_TOP_K",
       "retriever": "PRBENCH_RETRIEVER"}
_CLIENTS: dict[tuple, RewardClient] = {}
_LOCK = threading.Lock()


def settings(given: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword settings first, then the environment; unknown keywords (framework extras) are dropped."""
    out = {k: given.get(k) if given.get(k) is not None else os.environ.get(v) for k, v in ENV.items()}
    for key in ("fallback_reward", "reward_scale"):
        raw = out[key]
        try:
            out[key] = float(raw) if raw is not None and raw != "" else (0.0 if key == "fallback_reward" else 1.0)
        except ValueError:
            raise PrbenchError(f"{ENV[key]}={raw!r} is not a number") from None
        if not math.isfinite(out[key]):
            raise PrbenchError(f"{key} must be finite, got {raw!r}")
    raw = out["top_k"]
    try:
        out["top_k"] = int(raw) if raw not in (None, "") else 10
    except ValueError:
        raise PrbenchError(f"{ENV['top_k']}={raw!r} is not an integer") from None
    if out["top_k"] < 1:
        raise PrbenchError(f"top_k must be >= 1, got {raw!r}")
    out["retriever"] = out["retriever"] or "bm25"
    return out


class RewardClient:
    """Scores (context dict, answer) rows; see the module docstring for the settings."""

    def __init__(self, url: str | None = None, rm: str | None = None, *, condition: str | None = None,
                 items: str | Sequence[SourceItem] | None = None, token_env: str | None = None,
                 fallback_reward: float = 0.0, reward_scale: float = 1.0, device: str | None = None,
                 top_k: int = 10, retriever: str = "bm25", timeout: float = 120.0, **_: Any):
        if bool(url) == bool(rm):
            raise PrbenchError("give exactly one reward source: a serve-reward URL (PRBENCH_REWARD_URL / url=) "
                               "or an RM spec (PRBENCH_RM / rm=)")
        from prbench.downstream.server import DEFAULT_TOKEN_ENV, RewardService, token_from_env

        self.fallback_reward, self.reward_scale, self.timeout = fallback_reward, reward_scale, timeout
        self.items: dict[str, SourceItem] = {}
        if items is not None:
            from prbench.downstream.sampling import load_items

            self.items = {it.id: it for it in (load_items(items) if isinstance(items, str) else items)}
        self.url = url.rstrip("/") if url else None
        self.service = None
        if self.url is not None:
            self.url = self.url.removesuffix("/score")
            token = token_from_env(token_env or DEFAULT_TOKEN_ENV)
            self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        else:
            from prbench.rewards.base import PointwiseRM, load_rm

            model = load_rm(rm, **({"device": device} if device else {}))
            if not isinstance(model, PointwiseRM):
                raise PrbenchError(f"{rm}: a reward needs a pointwise RM (a judge in mode pointwise)")
            from prbench.retrieval import load_retriever

            self.service = RewardService(model, condition or "profile", items=list(self.items.values()), top_k=top_k,
                                         retriever=load_retriever(retriever))

    def _payload(self, rows: Sequence[tuple[Mapping[str, Any], str]]) -> list[dict[str, Any]] | None:
        out = []
        for ctx, response in rows:
            try:
                item = item_from_context(ctx, self.items or None)
            except ValueError as exc:
                raise PrbenchError(f"a training row's user context is unusable: {exc}") from None
            entry: dict[str, Any] = {"id": item.id, "query": item.question, "response": response,
                                     "profile": [p.model_dump() for p in item.profile]}
            if item.rubric_aspects:
                entry["rubric_aspects"] = [{"aspect": a.aspect, "reason": a.reason} for a in item.rubric_aspects]
            out.append(entry)
        return out

    def _finish(self, scores: Sequence[float | None]) -> list[tuple[float, bool]]:
        out = []
        for s in scores:
            value = s * self.reward_scale if isinstance(s, (int, float)) else math.nan
            out.append((value, True) if math.isfinite(value) else (self.fallback_reward, False))
        return out

    def _check(self, r: Any) -> list[float | None]:
        if r.status_code != 200:
            raise PrbenchError(f"{self.url}/score answered {r.status_code}: {r.text[:300]}")
        return r.json()["scores"]

    def score(self, rows: Sequence[tuple[Mapping[str, Any], str]]) -> list[tuple[float, bool]]:
        """(reward, valid) per row."""
        items = self._payload(rows)
        if self.service is not None:
            from prbench.downstream.server import ScoreRequest

            return self._finish(self.service.score(ScoreRequest.model_validate({"items": items}).items)["scores"])
        import httpx

        r = httpx.post(f"{self.url}/score", json={"items": items}, headers=self.headers, timeout=self.timeout)
        return self._finish(self._check(r))

    async def ascore(self, rows: Sequence[tuple[Mapping[str, Any], str]]) -> list[tuple[float, bool]]:
        """`score` for an event loop: HTTP without blocking it; an in-process RM in a worker thread."""
        if self.service is not None:
            import asyncio

            return await asyncio.to_thread(self.score, rows)
        import httpx

        async with httpx.AsyncClient(timeout=self.timeout) as http:
            r = await http.post(f"{self.url}/score", json={"items": self._payload(rows)}, headers=self.headers)
        return self._finish(self._check(r))


def get_client(**given: Any) -> RewardClient:
    """The process's client for these settings (an in-process RM is loaded once, not per call)."""
    cfg = settings(given)
    key = tuple(sorted((k, str(v)) for k, v in cfg.items()))
    with _LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = RewardClient(**cfg)
        return _CLIENTS[key]
