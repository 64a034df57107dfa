"""Reward server: any pointwise RM behind HTTP, so external RL stacks (verl, OpenRLHF) can use it.

Why: the paper's PPO runs served the RM over HTTP to verl. This server builds each RM
input through `prbench.conditions` (a View per item under the server's one condition), so
a policy trained against it is rewarded on exactly what `prbench eval` measured.

Endpoints
- `POST /score` with `{"items": [{"query": str, "response": str, "profile": [{"id", "category",
  "text"}]?, "rubric_aspects": [{"aspect", "reason"?}]?, "id": str?}, ...]}` returns
  `{"scores": [float | null, ...], "invalid": int, "truncated": int, "rm": str, "condition": str}`.
  A score the RM could not produce is `null` (and counted in `invalid`), never a made-up number.
  `profile` is required under the `profile` condition, `rubric_aspects` under `oracle`, `id`
  under `planner` (aspects come from the server's planner file); extra fields are ignored, and
  a narrative is never read.
- `POST /get_reward`: OpenRLHF's remote reward protocol (the path of its own `serve_rm`), as
  OpenRLHF 0.11.2 sends it (`openrlhf/utils/agent.py`, `_fetch_rewards_via_http`):
  `{"query": [str], "prompts": [str], "labels": [str]}`, no Authorization header. `query` is
  prompt + response decoded with special tokens; the response is cut out of it by the policy's
  chat template (`--policy-template`, see `prbench.downstream.chat`); each label is a JSON
  object naming the user context (`prbench.downstream.items`: an `id` looked up in
  `--items`, or `question` + `profile`). The reply is `{"rewards": [float], "scores": [float],
  "extra_logs": {"prbench_invalid": [0.0 | 1.0]}}`: always finite floats. An item that cannot be
  rewarded (unreadable label, unknown id, no assistant turn, an RM failure) gets the
  server's `fallback_reward` (default 0.0) and is counted in `/stats` by reason; a malformed
  request as a whole is a 4xx, as on `/score`. A server started without `--policy-template`
  answers 422 naming the flag (it cannot find the answer, and a run of fallback zeros would
  train on nothing).
- `GET /health` (liveness) and `GET /stats` (requests, items served, queued, batches, rejected
  by status, fallback and invalid by reason, batch-size and latency percentiles): no token needed.

Batching (`prbench.downstream.batcher`): the items of concurrent requests are gathered into one
RM call (at most `Batching.max_items`, waiting at most `max_wait_ms` for company) in a worker
thread, and each request gets its own scores back in order. Admission is bounded in items
(`queue_items`); past it a request gets 503 with Retry-After, counted in `/stats`.

Safety: binds 127.0.0.1 unless told otherwise, and any other interface needs an explicit
`allow_remote` (the CLI's `--allow-remote`); optional bearer token whose *value* comes from an
environment variable (never argv, which other users can read in `ps`), and a variable set to the
empty string is an error, not "auth off"; 401 without a token, 403 with a wrong one. Bodies
over `max_body_bytes` get 413, batches over `max_batch` get 413, invalid JSON gets 400 and a wrong
shape or type 422: malformed input never causes a 500. Connections: at most `max_connections`
open (more are answered 503 with Retry-After and closed; the listen backlog is as deep, and the
open-file limit is raised to fit at start, or a line says what to set), request headers must arrive within
`header_timeout` s and the body within `body_timeout` s (else 408), idle keep-alive connections
close after `idle_timeout` s, so slow or idle clients cannot exhaust file descriptors.
Scoring runs one batch at a time (one worker thread, and a lock), because local models are not thread-safe.

verl: `prbench.integrations.verl` holds `compute_score` (sync, and `compute_score_async` for
verl's reward loop), which calls this server's `/score` or an in-process RM; see docs/rl.md.
Keep each `/score` request under `--max-batch` items (the client splits larger batches).
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from baseline_serve.batcher import Batcher, Batching, Overloaded
from baseline_serve.chat import ChatSplitter
from baseline_serve.items import item_from_context, parse_label
from prbench.cache import NullCache, content_key
from prbench.conditions import CONDITIONS, View, build_view, read_planner_file
from prbench.errors import PrbenchError
from prbench.extras import require
from prbench.retrieval import Retriever, load_retriever
from prbench.rewards.base import PointwiseRM, RewardModel, load_rm
from prbench.runs import redact_url
from prbench.schema import ProfilePost, RubricAspect, SourceItem
from prbench.scoring import score_cached

log = logging.getLogger(__name__)

DEFAULT_TOKEN_ENV = "PRBENCH_REWARD_TOKEN"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
DEFAULT_FALLBACK_REWARD = 0.0
VIEW_CACHE = 4096  # items whose View is kept (an RL step has batch_size prompts, each sampled n times)
NO_TEMPLATE = ("/get_reward needs the policy's chat template to cut the answer out of OpenRLHF's query: "
               "restart serve-reward with --policy-template (the policy's hf:DIR, builtin:NAME or folder)")
NonBlank = Annotated[StrictStr, Field(min_length=1)]


class ProfileIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: StrictStr | StrictInt
    category: StrictStr = ""
    text: NonBlank


class AspectIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    aspect: NonBlank
    reason: StrictStr = ""


class ScoreItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    query: NonBlank
    response: StrictStr
    profile: list[ProfileIn] | None = None
    rubric_aspects: list[AspectIn] | None = None
    id: StrictStr | StrictInt | None = None


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    items: list[ScoreItem]


class RewardRequest(BaseModel):
    """OpenRLHF's body: `query` always; `prompts` and `labels` as long as `query` when present."""

    model_config = ConfigDict(extra="ignore")
    query: list[StrictStr]
    prompts: list[StrictStr] | None = None
    labels: list[Any] | None = None


@dataclass
class ServerStats:
    requests: int = 0
    items: int = 0
    invalid: int = 0
    fallback: int = 0
    rejected: int = 0
    invalid_reasons: Counter = field(default_factory=Counter)
    rejected_by_status: Counter = field(default_factory=Counter)

    def count_rejected(self, status: int) -> None:
        self.rejected += 1
        self.rejected_by_status[status] += 1

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "items": self.items, "invalid": self.invalid, "fallback": self.fallback,
                "rejected": self.rejected, "rejected_by_status": {str(k): v for k, v in self.rejected_by_status.items()},
                "invalid_reasons": dict(self.invalid_reasons)}


class _Reject(Exception):
    def __init__(self, status: int, detail: Any):
        self.status, self.detail = status, detail


class _Invalid(Exception):
    """One /get_reward item that cannot be rewarded; `reason` is the /stats key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def _validation_detail(exc: ValidationError) -> list[dict[str, Any]]:
    return [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()[:20]]


class RewardService:
    """Request -> Views (through conditions) -> RM scores; independent of the HTTP layer."""

    def __init__(self, rm: PointwiseRM, condition: str, *, retriever: Retriever | None = None, top_k: int = 10,
                 planner_file: str | None = None, max_context_chars: int | None = None,
                 items: Sequence[SourceItem] = (), splitter: ChatSplitter | None = None,
                 fallback_reward: float = DEFAULT_FALLBACK_REWARD, reward_scale: float = 1.0):
        if condition not in CONDITIONS:
            raise PrbenchError(f"unknown condition {condition!r} (use {', '.join(CONDITIONS)})")
        if condition == "wrong-profile":
            raise PrbenchError("the reward server does not offer 'wrong-profile' (a benchmark control, not a reward)")
        if condition == "planner" and not planner_file:
            raise PrbenchError("condition 'planner' needs --planner-file (aspects keyed by item id)")
        if not (math.isfinite(fallback_reward) and math.isfinite(reward_scale)):
            raise PrbenchError("fallback reward and reward scale must be finite numbers")
        self.rm, self.condition, self.top_k = rm, condition, top_k
        self.retriever = retriever or load_retriever("bm25")
        self.planner = read_planner_file(planner_file) if planner_file else None
        self.max_context_chars = max_context_chars
        self.items: dict[str, SourceItem] = {it.id: it for it in items}
        self.splitter, self.fallback_reward, self.reward_scale = splitter, float(fallback_reward), reward_scale
        self.lock = threading.Lock()
        self._views: dict[str, View] = {}
        self.stats = ServerStats()

    def _view(self, item: SourceItem) -> View:
        return build_view(item, self.condition, retriever=self.retriever, top_k=self.top_k, planner=self.planner,
                          max_context_chars=self.max_context_chars)

    def score_pairs(self, pairs: Sequence[tuple[SourceItem, str]]) -> list[Any]:
        """RM scores of (item, answer) pairs; views are built here too, so a worker thread pays for retrieval."""
        if not pairs:
            return []
        with self.lock:  # local models are not thread-safe (the in-process clients share this service)
            batch = [(self._cached_view(item), response) for item, response in pairs]
            return score_cached(self.rm, batch, NullCache())

    def _cached_view(self, item: SourceItem) -> View:
        """The item's View, built once for the many rollouts (samples) of one prompt."""
        key = item.model_dump_json()
        view = self._views.pop(key, None) or self._view(item)
        self._views[key] = view  # most recent last
        if len(self._views) > VIEW_CACHE:
            self._views.pop(next(iter(self._views)))
        return view

    def _source(self, n: int, item: ScoreItem) -> SourceItem:
        if self.condition == "profile" and item.profile is None:
            raise _Reject(422, f"items[{n}]: condition 'profile' needs a 'profile' list")
        if self.condition == "oracle" and not item.rubric_aspects:
            raise _Reject(422, f"items[{n}]: condition 'oracle' needs non-empty 'rubric_aspects'")
        item_id = str(item.id) if item.id is not None else content_key("server", item.query)[:16]
        if self.condition == "planner" and (self.planner is None or item_id not in self.planner):
            raise _Reject(422, f"items[{n}]: no planner aspects for id {item_id!r}")
        return SourceItem(
            id=item_id, question=item.query, category="server",
            profile=[ProfilePost(id=str(p.id), category=p.category, text=p.text) for p in item.profile or []],
            rubric_aspects=[RubricAspect(aspect=a.aspect, reason=a.reason) for a in item.rubric_aspects or []],
        )

    def score_inputs(self, items: Sequence[ScoreItem]) -> list[tuple[SourceItem, str]]:
        """The (item, answer) pairs of a /score request; `_Reject` (422) for an item the condition cannot use."""
        return [(self._source(n, it), it.response) for n, it in enumerate(items)]

    def score_reply(self, scores: Sequence[Any]) -> dict[str, Any]:
        values = [s.value if s.valid else None for s in scores]
        invalid = sum(v is None for v in values)
        self.stats.items += len(values)
        self.stats.invalid += invalid
        if invalid:
            self.stats.invalid_reasons["rm_failed"] += invalid
        return {"scores": values, "invalid": invalid, "truncated": sum(bool(s.truncated) for s in scores),
                "rm": redact_url(getattr(self.rm, "name", self.rm.spec)), "condition": self.condition}

    def score(self, items: Sequence[ScoreItem]) -> dict[str, Any]:
        """`POST /score` in-process (blocking)."""
        return self.score_reply(self.score_pairs(self.score_inputs(items)))

    # -- OpenRLHF -------------------------------------------------------------------------
    def reward_item(self, query: str, prompt: str | None, label: Any) -> tuple[SourceItem, str]:
        """The item and answer text of one OpenRLHF rollout; `_Invalid` when it cannot be rewarded."""
        if self.splitter is None:
            raise _Reject(422, NO_TEMPLATE)
        try:
            ctx = parse_label(label)
            item = item_from_context(ctx, self.items or None)
        except ValueError as exc:
            raise _Invalid("bad_label", str(exc)) from None
        looked_up = "question" not in ctx  # only an id found in --items gives an item without a question
        if self.condition == "profile" and not looked_up and not isinstance(ctx.get("profile"), list):
            raise _Invalid("bad_label", "condition 'profile' needs a 'profile' in the label (or --items)")
        if self.condition == "oracle" and not item.rubric_aspects:
            raise _Invalid("bad_label", "condition 'oracle' needs 'rubric_aspects' in the label (or --items)")
        if self.condition == "planner" and (self.planner is None or item.id not in self.planner):
            raise _Invalid("bad_label", f"no planner aspects for id {item.id!r}")
        try:
            response = self.splitter.response(query, prompt)
        except ValueError as exc:
            raise _Invalid("no_response", str(exc)) from None
        return item, response

    def reward_inputs(self, req: RewardRequest) -> list[tuple[SourceItem, str] | _Invalid]:
        """Each rollout's (item, answer), or the `_Invalid` that gives it the fallback; `_Reject` for the request."""
        n = len(req.query)
        for name in ("prompts", "labels"):
            got = getattr(req, name)
            if got is not None and len(got) != n:
                raise _Reject(422, f"'{name}' has {len(got)} entries for {n} queries")
        if self.splitter is None and n:
            raise _Reject(422, NO_TEMPLATE)
        labels = req.labels if req.labels is not None else [None] * n
        prompts = req.prompts if req.prompts is not None else [None] * n
        parsed: list[tuple[SourceItem, str] | _Invalid] = []
        for q, p, lab in zip(req.query, prompts, labels):
            try:
                parsed.append(self.reward_item(q, p, lab))
            except _Invalid as exc:
                parsed.append(exc)
        return parsed

    def reward_reply(self, parsed: list[tuple[SourceItem, str] | _Invalid], scores: Sequence[Any]) -> dict[str, Any]:
        """OpenRLHF's reply; `scores` belong to the parsed entries that are not `_Invalid`, in order."""
        n = len(parsed)
        todo = [i for i, x in enumerate(parsed) if not isinstance(x, _Invalid)]
        values: list[float] = [self.fallback_reward] * n
        flags = [1.0] * n
        for i, s in zip(todo, scores):
            value = s.value * self.reward_scale if s.valid else math.nan
            if math.isfinite(value):  # also catches a valid score that overflows when scaled
                values[i], flags[i] = value, 0.0
            else:
                parsed[i] = _Invalid("rm_failed", s.error or "non-finite score")
        reasons = Counter(x.reason for x in parsed if isinstance(x, _Invalid))
        self.stats.items += n
        self.stats.invalid += sum(reasons.values())
        self.stats.fallback += sum(reasons.values())
        self.stats.invalid_reasons.update(reasons)
        for x in parsed:
            if isinstance(x, _Invalid):
                log.warning("reward fallback %s for an item: %s (%s)", self.fallback_reward, x.reason, x)
        return {"rewards": values, "scores": list(values), "extra_logs": {"prbench_invalid": flags}}

    def rewards(self, req: RewardRequest) -> dict[str, Any]:
        """`POST /get_reward` in-process (blocking): OpenRLHF's `reward_func` file calls this."""
        parsed = self.reward_inputs(req)
        return self.reward_reply(parsed, self.score_pairs([x for x in parsed if not isinstance(x, _Invalid)]))


# -- connection guard -------------------------------------------------------------------------
def _guarded_protocol(max_connections: int, header_timeout: float, on_busy: Any = None, parser: str = "auto") -> type:
    """uvicorn's HTTP protocol with a connection cap and a deadline for each request's headers.

    httptools' C parser where installed (uvicorn[standard]; several times less CPU per request than
    pure-Python h11, which is what caps single-item throughput), else h11. A connection past the cap
    is answered 503 with Retry-After (and counted by `on_busy`), then closed: the client reads a
    reply it can retry on, never a reset.
    """
    try:
        if parser == "h11":
            raise ImportError
        import httptools  # noqa: F401 - uvicorn's httptools protocol needs it
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
        fast = True
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol as Base  # type: ignore[assignment]
        fast = False

    busy = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\nconnection: close\r\n"
            b"retry-after: 1\r\ncontent-length: 20\r\n\r\ntoo many connections")

    class Guarded(Base):  # type: ignore[valid-type,misc]
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.write(busy)
                transport.close()
                if on_busy is not None:
                    on_busy()
                return
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
                self.transport.close()  # no complete request headers in time (slow or idle client)

        if fast:
            def on_headers_complete(self) -> None:
                super().on_headers_complete()
                self._disarm()
        else:
            def handle_events(self) -> None:
                super().handle_events()
                if self.cycle is not None and not self.cycle.response_complete:
                    self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return Guarded


@dataclass(frozen=True)
class Limits:
    """Connection limits (seconds, counts); the defaults take 4,096 concurrent trainer clients with room to spare."""

    max_connections: int = 8192
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    idle_timeout: float = 5.0

    def __post_init__(self) -> None:
        if self.max_connections < 1 or min(self.header_timeout, self.body_timeout, self.idle_timeout) <= 0:
            raise PrbenchError("connection limits must be positive (max_connections >= 1, timeouts > 0)")

    def uvicorn_config(self, app: Any = None) -> dict[str, Any]:
        """uvicorn settings: the guarded protocol, and a listen backlog as deep as the connection cap
        (uvicorn's default 2,048 would leave a burst of 4,096 connects waiting on SYN retries)."""
        service = getattr(getattr(app, "state", None), "service", None)
        on_busy = (lambda: service.stats.count_rejected(503)) if service is not None else None
        return {"http": _guarded_protocol(self.max_connections, self.header_timeout, on_busy),
                "timeout_keep_alive": self.idle_timeout, "backlog": self.max_connections}


def check_fd_limit(limits: Limits) -> None:
    """Raise the open-file soft limit to fit `max_connections` (up to the hard limit); else say what to set.

    Each connection is a file descriptor: with the common soft limit of 1,024 a burst of concurrent
    clients would fail in accept() (the kernel then resets the connections waiting in the backlog).
    """
    need = limits.max_connections + 256
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
        if soft < need:
            log.warning("open-file limit %d is under --max-connections %d + 256: run `ulimit -n %d` (hard limit %s) "
                        "before serve-reward, or lower --max-connections", soft, limits.max_connections, need,
                        "unlimited" if hard == resource.RLIM_INFINITY else hard)
    try:
        with open("/proc/sys/net/core/somaxconn") as fh:
            somaxconn = int(fh.read().strip())
    except (OSError, ValueError):
        return
    if somaxconn < min(limits.max_connections, 4096):
        log.warning("net.core.somaxconn is %d: a burst of more concurrent connects may wait on retries; "
                    "run `sysctl -w net.core.somaxconn=%d` to take them at once", somaxconn,
                    min(limits.max_connections, 65535))


class _RequestGate:
    """Auth, body size and time limits, JSON and schema checks: each request's way in (or its 4xx)."""

    def __init__(self, service: RewardService, app: Any, token: str | None, max_body_bytes: int, max_batch: int):
        self.service, self.app, self.token = service, app, token
        self.max_body_bytes, self.max_batch = max_body_bytes, max_batch

    def reject(self, status: int, detail: Any, headers: dict[str, str] | None = None) -> Any:
        from fastapi.responses import JSONResponse

        self.service.stats.count_rejected(status)
        return JSONResponse({"detail": detail}, status_code=status, headers=headers)

    def auth_error(self, request: Any) -> Any | None:
        if self.token is None:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return self.reject(401, "missing bearer token", {"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            return self.reject(403, "invalid token")
        return None

    async def read_all(self, request: Any) -> bytes | Any:
        body = bytearray()
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > self.max_body_bytes:
                return self.reject(413, f"body over {self.max_body_bytes} bytes")
        return bytes(body)

    async def read_body(self, request: Any) -> bytes | Any:
        length = request.headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return self.reject(400, "invalid Content-Length")
            if int(length) > self.max_body_bytes:
                return self.reject(413, f"body over {self.max_body_bytes} bytes")
        limit = self.app.state.body_timeout
        try:
            return await asyncio.wait_for(self.read_all(request), limit)
        except asyncio.TimeoutError:
            return self.reject(408, f"request body not received within {limit:g} s", {"Connection": "close"})

    async def read_json(self, request: Any) -> tuple[bool, Any]:
        """The parsed body, or a ready error response (auth first: a bad body without a token is 401)."""
        self.service.stats.requests += 1
        denied = self.auth_error(request)
        if denied is not None:
            return False, denied
        body = await self.read_body(request)
        if not isinstance(body, bytes):
            return False, body
        try:
            return True, json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # also huge integers, deep nesting
            return False, self.reject(400, f"body is not valid UTF-8 JSON ({exc})")

    async def read_request(self, request: Any, schema: type[BaseModel], key: str, noun: str) -> tuple[bool, Any]:
        """The validated request, or a ready error response; an over-long batch is refused before validation."""
        ok, payload = await self.read_json(request)
        if not ok:
            return False, payload
        if isinstance(payload, dict) and isinstance(payload.get(key), list) and len(payload[key]) > self.max_batch:
            return False, self.reject(413, f"batch of {len(payload[key])} {noun} is over the limit of {self.max_batch}")
        try:
            return True, schema.model_validate(payload)
        except ValidationError as exc:
            return False, self.reject(422, _validation_detail(exc))


def create_app(
    rm: PointwiseRM | str,
    condition: str = "none",
    *,
    token: str | None = None,
    max_batch: int = 64,
    max_body_bytes: int = 1_000_000,
    top_k: int = 10,
    retriever: str = "bm25",
    planner_file: str | None = None,
    max_context_chars: int | None = None,
    rm_options: dict[str, Any] | None = None,
    items: Sequence[SourceItem] = (),
    policy_template: ChatSplitter | str | None = None,
    fallback_reward: float = DEFAULT_FALLBACK_REWARD,
    reward_scale: float = 1.0,
    body_timeout: float = Limits.body_timeout,
    batching: Batching | None = None,
) -> Any:
    """The FastAPI app. `token` is the bearer token value itself (the CLI reads it from an env var)."""
    fastapi = require("fastapi", "serve")
    from fastapi.responses import JSONResponse

    if token is not None and not token.strip():
        raise PrbenchError("the bearer token is empty (unset the variable to serve without auth on loopback)")
    model: RewardModel = load_rm(rm, **(rm_options or {})) if isinstance(rm, str) else rm
    if not isinstance(model, PointwiseRM):
        raise PrbenchError(f"{model.spec}: the reward server needs a pointwise RM (a judge in --mode pointwise)")
    if isinstance(policy_template, str):
        from baseline_serve.chat import load_splitter

        policy_template = load_splitter(policy_template)
    service = RewardService(model, condition, retriever=load_retriever(retriever), top_k=top_k,
                            planner_file=planner_file, max_context_chars=max_context_chars, items=items,
                            splitter=policy_template, fallback_reward=fallback_reward, reward_scale=reward_scale)
    batcher = Batcher(service.score_pairs, batching)
    app = fastapi.FastAPI(title="prbench reward server", docs_url=None, redoc_url=None, openapi_url=None,
                          on_shutdown=[batcher.close])
    app.state.service, app.state.batcher = service, batcher
    app.state.body_timeout = body_timeout  # the servers below set it from their Limits
    rm_name = redact_url(getattr(model, "name", model.spec))

    gate = _RequestGate(service, app, token, max_body_bytes, max_batch)
    reject, read_request = gate.reject, gate.read_request

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "rm": rm_name, "condition": condition,
                "max_batch": max_batch, "max_body_bytes": max_body_bytes, "auth": token is not None,
                "served_items": service.stats.items, "invalid": service.stats.invalid,
                "openrlhf": service.splitter is not None, "pid": os.getpid()}

    @app.get("/stats")
    def stats() -> dict[str, Any]:
        return {**service.stats.as_dict(), **batcher.stats(), "fallback_reward": service.fallback_reward,
                "reward_scale": service.reward_scale, "rm": rm_name, "condition": condition}

    async def scored(pairs: list[Any]) -> tuple[bool, Any]:
        """The RM's scores for these pairs, batched with other requests', or a ready 503."""
        try:
            return True, await batcher.submit(pairs)
        except Overloaded as exc:
            return False, reject(503, f"reward queue full ({batcher.cfg.queue_items} items): retry after "
                                 f"{exc.retry_after} s", {"Retry-After": str(exc.retry_after)})

    async def score(request):  # type: ignore[no-untyped-def]  # annotated below for FastAPI
        ok, req = await read_request(request, ScoreRequest, "items", "items")
        if not ok:
            return req
        try:
            pairs = service.score_inputs(req.items)
        except _Reject as exc:
            return reject(exc.status, exc.detail)
        except ValueError as exc:  # pydantic/schema checks of a built record: still the client's input
            return reject(422, str(exc))
        ok, scores = await scored(pairs)
        return JSONResponse(service.score_reply(scores)) if ok else scores

    async def get_reward(request):  # type: ignore[no-untyped-def]
        ok, req = await read_request(request, RewardRequest, "query", "queries")
        if not ok:
            return req
        try:
            parsed = service.reward_inputs(req)
        except _Reject as exc:
            return reject(exc.status, exc.detail)
        ok, scores = await scored([x for x in parsed if not isinstance(x, _Invalid)])
        return JSONResponse(service.reward_reply(parsed, scores)) if ok else scores

    for handler in (score, get_reward):
        handler.__annotations__ = {"request": fastapi.Request}
    app.post("/score")(score)
    app.post("/get_reward")(get_reward)
    return app


def token_from_env(env_name: str | None, required: bool = False) -> str | None:
    """The bearer token from the env var `env_name` (None when unset and not required).

    A variable that is set but empty (or blank) is an error: it usually means a secret failed to
    load, and silently serving without auth would hide that.
    """
    if not env_name:
        return None
    value = os.environ.get(env_name)
    if value is None:
        if required:
            raise PrbenchError(f"environment variable {env_name} is not set (it should hold the bearer token)")
        return None
    if not value.strip():
        raise PrbenchError(f"environment variable {env_name} is set but empty: put the token in it, "
                           "or unset it to serve without auth (loopback only)")
    return value.strip()


def check_bind(host: str, token: str | None, allow_remote: bool) -> None:
    """Loopback unless `allow_remote`; off loopback without a token, warn loudly (anyone can use the RM)."""
    if host in LOOPBACK:
        return
    if not allow_remote:
        shown = repr(host) if host not in ("", "0.0.0.0", "::") else f"{host!r} (every interface)"
        raise PrbenchError(f"--host {shown} is beyond loopback: pass --allow-remote to serve other machines "
                           "(and set a token)")
    if token is None:
        log.warning("serving on %r without a token: anyone who can reach this port can use the RM", host)


def serve(
    rm: PointwiseRM | str,
    condition: str = "none",
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    allow_remote: bool = False,
    log_level: str = "info",
    limits: Limits | None = None,
    **app_options: Any,
) -> None:
    """Run the server in the foreground (blocks)."""
    uvicorn = require("uvicorn", "serve")
    check_bind(host, token, allow_remote)
    limits = limits or Limits()
    check_fd_limit(limits)
    app = create_app(rm, condition, token=token, body_timeout=limits.body_timeout, **app_options)
    app.state.body_timeout = limits.body_timeout
    uvicorn.run(app, host=host, port=port, log_level=log_level, **limits.uvicorn_config(app))


class ThreadedServer:
    """Uvicorn in a background thread on an ephemeral port (tests, notebooks)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, limits: Limits | None = None):
        uvicorn = require("uvicorn", "serve")
        if limits is not None:  # explicit limits win over the app's own body timeout
            app.state.body_timeout = limits.body_timeout
        limits = limits or Limits()
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off",
                                                    **limits.uvicorn_config(app)))
        self.app = app
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.host = host
    def __enter__(self) -> ThreadedServer:  # noqa: PYI034 - py3.10 has no typing.Self
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.time() > deadline:
                raise PrbenchError("reward server did not start")
            time.sleep(0.01)
        return self

    @property
    def port(self) -> int:
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        batcher = getattr(self.app.state, "batcher", None)
        if batcher is not None:  # lifespan is off here, so the app's shutdown hook does not run
            batcher.close()
