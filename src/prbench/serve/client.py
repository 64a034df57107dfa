"""One reward per (user context, answer): from a running `prbench serve-reward` or an in-process RM.

Both paths score through `prbench.serve.service.RewardService` (the HTTP one on the server,
the in-process one called directly here, no wire format in between), so the same item gets the same reward either way and the same as
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
| `top_k`, `retriever` | PRBENCH_TOP_K, PRBENCH_RETRIEVER | in-process: profile posts shown to the RM (default: what its trained folder asks for, else 10, as `prbench eval`; bm25) |
| `concurrency` | PRBENCH_REWARD_CONCURRENCY | most requests in flight per process (and event loop): 32 (httpx slows past it) |
| `retry_s` | PRBENCH_REWARD_RETRY_S | how long to keep retrying a busy or unreachable server: 120 s |
| `batch` | PRBENCH_REWARD_BATCH | `ascore`: most rows per request when concurrent calls are sent together (64, the server's --max-batch) |

HTTP: one pooled client per process (per event loop for `ascore`), at most `concurrency`
requests in flight; connection errors, 429 and 503 are retried with jittered exponential
backoff (at least the server's Retry-After) for up to `retry_s` seconds. Then, or on any other
status, one `PrbenchError` line says what failed: training must stop rather than learn from
made-up rewards (never a silent 0). An item the RM cannot score gets `fallback_reward` and is flagged invalid.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prbench.errors import PrbenchError
from prbench.schema import SourceItem
from prbench.serve.items import item_from_context

ENV = {"url": "PRBENCH_REWARD_URL", "rm": "PRBENCH_RM", "condition": "PRBENCH_CONDITION",
       "items": "PRBENCH_ITEMS", "token_env": "PRBENCH_REWARD_TOKEN_ENV",
       "fallback_reward": "PRBENCH_FALLBACK_REWARD", "reward_scale": "PRBENCH_REWARD_SCALE",
       "device": "PRBENCH_DEVICE", "policy_template": "PRBENCH_POLICY_TEMPLATE", "top_k": "PRBENCH_TOP_K",
       "retriever": "PRBENCH_RETRIEVER", "concurrency": "PRBENCH_REWARD_CONCURRENCY",
       "retry_s": "PRBENCH_REWARD_RETRY_S", "batch": "PRBENCH_REWARD_BATCH"}
DEFAULTS = {"fallback_reward": 0.0, "reward_scale": 1.0, "top_k": 10, "concurrency": 32, "retry_s": 120.0,
            "batch": 64}  # top_k: 10 gives its type only; unset, it stays None (the RM's own view, `RewardService`)
RETRY_STATUS = (429, 503)
_CLIENTS: dict[tuple, RewardClient] = {}
_LOCK = threading.Lock()


def settings(given: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword settings first, then the environment; unknown keywords (framework extras) are dropped."""
    out: dict[str, Any] = {k: given.get(k) if given.get(k) is not None else os.environ.get(v) for k, v in ENV.items()}
    unset_k = out["top_k"] is None or out["top_k"] == ""
    for key, default in DEFAULTS.items():
        raw, kind = out[key], type(default)
        try:
            out[key] = kind(raw) if raw is not None and raw != "" else default
        except ValueError:
            raise PrbenchError(f"{ENV[key]}={raw!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not math.isfinite(out[key]):
            raise PrbenchError(f"{key} must be finite, got {raw!r}")
    for key in ("top_k", "concurrency", "batch"):
        if out[key] < 1:
            raise PrbenchError(f"{key} must be >= 1, got {out[key]!r}")
    if out["retry_s"] < 0:
        raise PrbenchError(f"retry_s must be >= 0, got {out['retry_s']!r}")
    out["retriever"] = out["retriever"] or "bm25"
    if unset_k:
        out["top_k"] = None
    return out


def retry_delay(attempt: int, retry_after: str | None, base: float = 0.25, cap: float = 8.0) -> float:
    """Seconds before retry `attempt` (0-based): full-jitter exponential backoff, never under Retry-After."""
    delay = random.uniform(0, min(cap, base * 2 ** attempt))
    if retry_after is not None:
        try:
            delay += max(0.0, float(retry_after))
        except ValueError:  # an HTTP-date: wait the cap rather than parse clocks
            delay += cap
    return delay


class RewardClient:
    """Scores (context dict, answer) rows; see the module docstring for the settings."""

    def __init__(self, url: str | None = None, rm: str | None = None, *, condition: str | None = None,
                 items: str | Sequence[SourceItem] | None = None, token_env: str | None = None,
                 fallback_reward: float = 0.0, reward_scale: float = 1.0, device: str | None = None,
                 top_k: int | None = None, retriever: str = "bm25", timeout: float = 120.0, concurrency: int = 32,
                 retry_s: float = 120.0, batch: int = 64, **_: Any):
        if bool(url) == bool(rm):
            raise PrbenchError("give exactly one reward source: a serve-reward URL (PRBENCH_REWARD_URL / url=) "
                               "or an RM spec (PRBENCH_RM / rm=)")
        from prbench.serve.server import DEFAULT_TOKEN_ENV, token_from_env
        from prbench.serve.service import RewardService

        self.fallback_reward, self.reward_scale, self.timeout = fallback_reward, reward_scale, timeout
        self.concurrency, self.retry_s, self.batch = concurrency, retry_s, batch
        self._sync: Any = None
        self._gate: threading.BoundedSemaphore | None = None
        self._async: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.headers: dict[str, str] = {}
        self.items: dict[str, SourceItem] = {}
        if items is not None:
            from prbench.sources import load_items

            self.items = {it.id: it for it in (load_items(items) if isinstance(items, str) else items)}
        self.url = url.rstrip("/") if url else None
        self.service: RewardService | None = None
        if self.url is not None:
            self.url = self.url.removesuffix("/score")
            token = token_from_env(token_env or DEFAULT_TOKEN_ENV)
            self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        else:
            from prbench.rewards.base import PointwiseRM, load_rm

            model = load_rm(str(rm), **({"device": device} if device else {}))
            if not isinstance(model, PointwiseRM):
                raise PrbenchError(f"{rm}: a reward needs a pointwise RM (a judge in mode pointwise)")
            from prbench.context.retrieval import load_retriever

            self.service = RewardService(model, condition or "profile", items=list(self.items.values()), top_k=top_k,
                                         retriever=load_retriever(retriever), fallback_reward=fallback_reward,
                                         reward_scale=reward_scale)

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

    def _outcome(self, r: Any) -> tuple[list[float | None] | None, str | None]:
        """(scores, None) on 200; (None, Retry-After or "") for a status worth retrying; else raises."""
        if r.status_code == 200:
            return r.json()["scores"], None
        if r.status_code in RETRY_STATUS:
            return None, r.headers.get("retry-after") or ""
        raise PrbenchError(f"reward server {self.url}/score answered {r.status_code}: {r.text[:300]}")

    def _next_delay(self, tries: int, started: float, wait: str | None, last: str) -> float:
        """Seconds to sleep before the next try; the one clear error once `retry_s` would be spent."""
        delay = retry_delay(tries - 1, wait or None)
        if time.monotonic() - started + delay > self.retry_s:
            raise PrbenchError(f"reward server {self.url}/score failed {tries} times over "
                               f"{time.monotonic() - started:.0f} s (last: {last}); no reward is made up: "
                               "is the server up and sized for this load?")
        return delay

    def _http(self) -> Any:
        with _LOCK:
            if self._sync is None:
                import httpx

                n = self.concurrency
                self._sync = httpx.Client(timeout=self.timeout, headers=self.headers,
                                          limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))
                self._gate = threading.BoundedSemaphore(n)
            return self._sync

    def _ahttp(self) -> _LoopState:
        """This event loop's pooled client, concurrency gate and pending rows (an AsyncClient belongs to one loop)."""
        loop = asyncio.get_running_loop()
        state = self._async.get(loop)
        if state is None:
            import httpx

            n = self.concurrency
            client = httpx.AsyncClient(timeout=self.timeout, headers=self.headers,
                                       limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))
            state = self._async[loop] = _LoopState(client, asyncio.Semaphore(n))
        return state

    def score(self, rows: Sequence[tuple[Mapping[str, Any], str]]) -> list[tuple[float, bool]]:
        """(reward, valid) per row."""
        if self.service is not None:
            return self.service.reward_rows(rows)
        items = self._payload(rows)
        import httpx

        http, started, tries = self._http(), time.monotonic(), 0
        gate = self._gate
        assert gate is not None  # set by _http()
        while True:
            tries += 1
            try:
                with gate:
                    scores, wait = self._outcome(http.post(f"{self.url}/score", json={"items": items}))
                if scores is not None:
                    return self._finish(scores)
                last = f"HTTP 503/429, Retry-After {wait or '-'}"
            except httpx.TransportError as exc:
                wait, last = None, f"{type(exc).__name__}: {exc}"
            time.sleep(self._next_delay(tries, started, wait, last))

    async def ascore(self, rows: Sequence[tuple[Mapping[str, Any], str]]) -> list[tuple[float, bool]]:
        """`score` for an event loop: HTTP without blocking it; an in-process RM in a worker thread.

        Rows of calls made in the same loop turn (verl's reward loop starts one call per response, all
        at once) travel together in requests of up to `batch` items, so thousands of calls cost dozens
        of requests; each call still gets exactly its own rewards back.
        """
        if self.service is not None:
            return await asyncio.to_thread(self.score, rows)
        items = self._payload(rows)
        if not items:
            return []
        state = self._ahttp()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        state.pending.append((items, future))
        if len(state.pending) == 1:  # the first call of this turn sends everyone's rows on the next turn
            loop.call_soon(self._flush, state)
        return self._finish(await future)

    def _flush(self, state: _LoopState) -> None:
        group: list[tuple[list[dict[str, Any]], asyncio.Future]] = []
        for call in state.pending:
            if group and sum(len(items) for items, _ in group) + len(call[0]) > self.batch:
                asyncio.ensure_future(self._send(state, group))
                group = []
            group.append(call)
        state.pending = []
        asyncio.ensure_future(self._send(state, group))

    async def _send(self, state: _LoopState, group: list[tuple[list[dict[str, Any]], asyncio.Future]]) -> None:
        try:
            scores = await self._apost(state, [item for items, _ in group for item in items])
        except Exception as exc:  # noqa: BLE001 - every call of the request gets the one clear error
            for _, future in group:
                if not future.done():
                    future.set_exception(exc)
            return
        at = 0
        for items, future in group:
            if not future.done():
                future.set_result(scores[at:at + len(items)])
            at += len(items)

    async def _apost(self, state: _LoopState, items: list[dict[str, Any]]) -> list[float | None]:
        import httpx

        started, tries = time.monotonic(), 0
        while True:
            tries += 1
            try:
                async with state.gate:
                    scores, wait = self._outcome(await state.http.post(f"{self.url}/score", json={"items": items}))
                if scores is not None:
                    return scores
                last = f"HTTP 503/429, Retry-After {wait or '-'}"
            except httpx.TransportError as exc:
                wait, last = None, f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(self._next_delay(tries, started, wait, last))


@dataclass
class _LoopState:
    http: Any
    gate: asyncio.Semaphore
    pending: list[tuple[list[dict[str, Any]], asyncio.Future]] = field(default_factory=list)


def get_client(**given: Any) -> RewardClient:
    """The process's client for these settings (an in-process RM is loaded once, not per call)."""
    cfg = settings(given)
    key = tuple(sorted((k, str(v)) for k, v in cfg.items()))
    with _LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = RewardClient(**cfg)
        return _CLIENTS[key]
