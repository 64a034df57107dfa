"""Reward server: any pointwise RM behind HTTP, in the protocols RL trainers already speak.

Why: the paper's PPO runs served the RM over HTTP to verl. Every route scores through
`prbench.serve.service.RewardService` (a View per item under the server's one condition), so a
policy trained against it is rewarded on exactly what `prbench eval` measured.

Endpoints (bodies in `prbench.serve.protocols`)
- `POST /score` `{"items": [{"query", "response", "profile"?, "rubric_aspects"?, "id"?}]}` ->
  `{"scores": [float | null], "invalid", "truncated", "rm", "condition"}`: a score the RM could not
  produce is `null` (counted in `invalid`). `profile` is required under `profile`, `rubric_aspects`
  under `oracle`, `id` under `planner`; extra fields are ignored; a narrative is never read.
- `POST /get_reward`: OpenRLHF's remote reward (0.11.2). `query` is prompt + response decoded with
  special tokens; the answer is cut out by the policy's chat template (`--policy-template`), each
  label is the JSON user context (`prbench.serve.items`). Reply `{"rewards", "scores",
  "extra_logs": {"prbench_invalid"}}`, always finite: an item that cannot be rewarded (bad label,
  no assistant turn, RM failure) gets `fallback_reward`, counted in `/stats` by reason.
- `POST /classify`, `POST /pooling`, `GET /v1/models`: vLLM's pooling API as verl's Reward Loop
  calls it (`{"model", "input", "use_activation": false}`, reading `data[-1].probs[-1]`). The user
  context comes from the training rows given at start (`--users`, matched by the prompt rendered
  with `--rm-template`, `prbench.serve.chat.RenderedPrompts`); every error of these routes (401/403,
  Host, 408, 413, 499, 503 too) in vLLM's body shape.
- `GET /health`, `GET /stats`.

Request path (measured in benchmarks/RESULTS_serve.md): a plain ASGI callable, no framework
routing; the body is validated straight from bytes by pydantic-core; items of concurrent requests
are batched (`prbench.serve.batcher`) and one loop callback hands a whole batch's results back;
a client leaving is learnt from the guarded protocol's future (no task per request waiting on
`receive()`, which other ASGI servers still get); replies are encoded by pydantic-core; uvicorn runs
its default loop, uvloop where installed (the `serve` extra installs it).

Safety: binds 127.0.0.1 unless `allow_remote`; browsers are treated as hostile: with a token, every
route needs it (401 / 403); the `Host` header must name this server (a DNS-rebinding page cannot
reach it: 400); POST bodies must be `application/json` (415; a page's form or `text/plain` post
cannot either); a repeated `Host`, `Content-Type`, `Content-Length` or `Authorization` is 400 (two
Hosts could each name another server: RFC 9112 section 3.2). Bodies over `max_body_bytes` get 413,
batches over `max_batch` 413, invalid JSON (a lone surrogate escape named) 400, a wrong shape 422; a
client that disconnects while queued has its items dropped (counted `abandoned`, answered 499).
Connection limits: `prbench.serve.guard`.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pydantic_core
from pydantic import ValidationError

from prbench.context.retrieval import load_retriever
from prbench.errors import PrbenchError
from prbench.rewards.base import PointwiseRM, RewardModel, Score, load_rm
from prbench.runtime.extras import require
from prbench.schema import RubricAspect, SourceItem, posts_from_wire
from prbench.serve import protocols as wire
from prbench.serve.batcher import Abandoned, Batcher, Batching, Overloaded, TooLarge
from prbench.serve.chat import ChatSplitter, RenderedPrompts, load_splitter, load_tokenizer
from prbench.serve.guard import DISCONNECT, Limits, check_fd_limit
from prbench.serve.items import item_from_context, read_rows
from prbench.serve.service import (
    DEFAULT_FALLBACK_REWARD,
    Invalid,
    Pair,
    Reject,
    RewardService,
    ViewCache,
    check_reward,
)
from prbench.store.cache import content_key
from prbench.store.runs import redact_url

log = logging.getLogger(__name__)

DEFAULT_TOKEN_ENV = "PRBENCH_REWARD_TOKEN"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
Reply = tuple[int, Any, Sequence[tuple[bytes, bytes]]]
VLLM_ROUTES = ("/classify", "/pooling", "/v1/models")  # every error of these is in vLLM's body shape
ONCE = (b"host", b"content-type", b"content-length", b"authorization")  # never a list: a repeat is ambiguous
NO_USERS = ("/classify needs the training rows to know whose prompt this is: restart serve-reward with "
            "--users (the file `prbench export verl` wrote) and --rm-template (the tokenizer verl's "
            "reward_model.model_path names)")


def repeated(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """The first of `ONCE` that `headers` carry more than once (two Host headers could each name another server)."""
    seen: set[bytes] = set()
    for name, _ in headers:
        if name in ONCE:
            if name in seen:
                return name.decode()
            seen.add(name)
    return None


def public_name(model: RewardModel) -> str:
    """The RM's name without its local path (only the last folder): /health and /v1/models are public."""
    name = redact_url(getattr(model, "name", model.spec))
    prefix, sep, rest = name.partition(":")
    local = sep and "://" not in name and (rest.startswith(("/", "~", ".")) or Path(rest).exists())
    return f"{prefix}:{Path(rest.rstrip('/')).name}" if local else name  # a hub id (org/name) is kept


def _json(payload: Any) -> bytes:
    """Compact UTF-8 JSON by pydantic-core's encoder (about 9x less CPU than `json.dumps` for a one-score
    reply, on the event loop's hot path). Reply numbers are finite by construction (`RewardService.finite`,
    `rewards`); one that was not would go out as null, the wire's "no score", never as invalid JSON."""
    return pydantic_core.to_json(payload, inf_nan_mode="null")


class RewardApp:
    """The ASGI application: routes, the request gate (host, token, media type, size, time) and replies."""

    def __init__(self, service: RewardService, batcher: Batcher, *, token: str | None, max_batch: int,
                 max_body_bytes: int, body_timeout: float, allowed_hosts: Sequence[str] | None,
                 model_name: str, prompts: RenderedPrompts | None, check_model: bool = False):
        self.service, self.batcher, self.token = service, batcher, token
        self.max_batch, self.max_body_bytes, self.body_timeout = max_batch, max_body_bytes, body_timeout
        self.allowed_hosts = None if allowed_hosts is None else {h.lower().strip("[]") for h in allowed_hosts}
        self.model_name, self.prompts, self.check_model = model_name, prompts, check_model
        self.routes: dict[str, tuple[str, Callable[..., Awaitable[Reply]]]] = {
            "/score": ("POST", self.score), "/get_reward": ("POST", self.get_reward),
            "/classify": ("POST", self.classify), "/pooling": ("POST", self.pooling),
            "/health": ("GET", self.health), "/stats": ("GET", self.stats), "/v1/models": ("GET", self.models)}

    # -- ASGI ----------------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            self.batcher.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        try:
            status, payload, headers = await self.dispatch(scope, receive)
        except Exception as exc:
            log.exception("reward server error on %s", scope.get("path"))
            status, payload, headers = 500, {"detail": f"internal error ({type(exc).__name__})"}, ()
        if status >= 400:
            self.service.stats.count_rejected(status)
            if scope["path"] in VLLM_ROUTES and isinstance(payload, dict) and "detail" in payload:
                payload = wire.vllm_error(str(payload["detail"]), status)  # 413, Host, 401/403, 408, 499, 503 too
        body = payload if isinstance(payload, bytes) else _json(payload)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                *headers]})
        await send({"type": "http.response.body", "body": body})

    async def dispatch(self, scope: dict[str, Any], receive: Any) -> Reply:
        self.service.stats.requests += 1
        headers = dict(scope["headers"])  # lower-case names (ASGI)
        route = self.routes.get(scope["path"])
        if len(headers) != len(scope["headers"]) and (twice := repeated(scope["headers"])) is not None:
            return 400, {"detail": f"the {twice} header is repeated: send it once (RFC 9110 section 5.3; "
                                   "RFC 9112 section 3.2 for Host)"}, ()
        denied = self.host_error(headers) or self.auth_error(headers)
        if denied is not None:
            return denied
        if route is None:
            return 404, {"detail": "not found"}, ()
        method, handler = route
        if scope["method"] != method:
            return 405, {"detail": "method not allowed"}, ((b"allow", method.encode()),)
        if method == "GET":
            return await handler()
        vllm = scope["path"] in VLLM_ROUTES
        media = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
        if media != b"application/json":
            msg = "Unsupported Media Type: Only 'application/json' is allowed"
            return (400, wire.vllm_error(msg), ()) if vllm else (415, {"detail": msg}, ())
        body = await self.read_body(headers, receive)
        if not isinstance(body, bytes):
            return body
        gone = scope.get("extensions", {}).get(DISCONNECT)  # the guarded protocol's: no task per request
        if gone is not None:
            return await handler(body, gone)
        watch = asyncio.ensure_future(receive())  # another ASGI server: resolves when the client goes away
        try:
            return await handler(body, watch)
        finally:
            watch.cancel()

    def host_error(self, headers: dict[bytes, bytes]) -> Reply | None:
        if self.allowed_hosts is None:
            return None
        host = headers.get(b"host", b"").decode("latin-1").lower()
        name = host.rpartition("]")[0].lstrip("[") if host.startswith("[") else host.partition(":")[0]
        if name not in self.allowed_hosts:
            return 400, {"detail": f"Host header {host[:100]!r} is not this server (allowed: "
                                   f"{', '.join(sorted(self.allowed_hosts))})"}, ()
        return None

    def auth_error(self, headers: dict[bytes, bytes]) -> Reply | None:
        if self.token is None:
            return None
        scheme, _, given = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return 401, {"detail": "missing bearer token"}, ((b"www-authenticate", b"Bearer"),)
        if not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            return 403, {"detail": "invalid token"}, ()
        return None

    async def read_body(self, headers: dict[bytes, bytes], receive: Any) -> bytes | Reply:
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                return 400, {"detail": "invalid Content-Length"}, ()
            if int(length) > self.max_body_bytes:
                return 413, {"detail": f"body over {self.max_body_bytes} bytes"}, ()
        task = asyncio.current_task()
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            if task is not None:
                task.cancel()

        # a timer, not wait_for: no extra task per request on the hot path. Whether it fired is the flag it
        # sets, never the clock: uvloop runs timers up to ~1 ms before their `when()` (issue 51.5)
        timer = asyncio.get_running_loop().call_later(self.body_timeout, expire) if task else None
        body = bytearray()
        try:
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    return 400, {"detail": "client went away"}, ()
                body += msg.get("body", b"")
                if len(body) > self.max_body_bytes:
                    return 413, {"detail": f"body over {self.max_body_bytes} bytes"}, ()
                if not msg.get("more_body"):
                    return bytes(body)
        except asyncio.CancelledError:
            if not expired:
                raise  # cancelled by someone else (shutdown), not by the body deadline
            return 408, {"detail": f"request body not received within {self.body_timeout:g} s"}, \
                ((b"connection", b"close"),)
        finally:
            if timer is not None:
                timer.cancel()

    async def scored(self, pairs: list[Pair], nbytes: int, watch: asyncio.Future) -> list[Score] | Reply:
        """The RM's scores for these pairs, batched with other requests', or a ready 503 / 413."""
        try:
            return await self.batcher.submit(pairs, nbytes=nbytes, gone=watch)
        except Overloaded as exc:
            return 503, {"detail": f"reward queue full ({self.batcher.cfg.queue_items} items, "
                                   f"{self.batcher.cfg.queue_bytes} bytes): retry after {exc.retry_after} s"}, \
                ((b"retry-after", str(exc.retry_after).encode()),)
        except TooLarge as exc:
            return 413, {"detail": str(exc)}, ()
        except Abandoned:  # nobody reads this reply; 499 in /stats, as nginx logs a client that closed
            return 499, {"detail": "client closed the connection"}, ()

    def too_many(self, n: int, noun: str) -> Reply | None:
        if n > self.max_batch:
            return 413, {"detail": f"batch of {n} {noun} is over the limit of {self.max_batch}"}, ()
        return None

    def invalid(self, exc: ValidationError, body: bytes, key: str, noun: str) -> Reply:
        """400 for a body that is not JSON text (a lone surrogate escape named), 413 for an over-long batch,
        else 422 with the fields."""
        if (why := wire.json_text_error(body)) is not None:
            return 400, {"detail": why}, ()
        raw = json.loads(body)
        if isinstance(raw, dict) and isinstance(raw.get(key), list) and (big := self.too_many(len(raw[key]), noun)):
            return big
        return 422, {"detail": wire.validation_detail(exc)}, ()

    # -- prbench /score -------------------------------------------------------------------------
    def score_pairs(self, items: Sequence[wire.ScoreItem]) -> list[Pair]:
        out = []
        for n, it in enumerate(items):
            item_id = str(it.id) if it.id is not None else content_key("server", it.query)[:16]
            try:
                posts = posts_from_wire(it.profile) if it.profile is not None else []
            except ValidationError as exc:  # one line: the first problem and where
                first = exc.errors()[0]
                raise Reject(422, f"items[{n}].profile.{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
            except (ValueError, TypeError) as exc:
                raise Reject(422, f"items[{n}].profile: {exc}") from None
            item = SourceItem(id=item_id, question=it.query, category="server", profile=posts,
                              rubric_aspects=[RubricAspect(aspect=a.aspect, reason=a.reason)
                                              for a in it.rubric_aspects or []])
            if (why := self.service.missing(item, has_profile=it.profile is not None)) is not None:
                raise Reject(422, f"items[{n}]: {why}")
            out.append((item, it.response))
        return out

    async def score(self, body: bytes, watch: asyncio.Future) -> Reply:
        try:
            req = wire.ScoreRequest.model_validate_json(body)
        except ValidationError as exc:
            return self.invalid(exc, body, "items", "items")
        if (big := self.too_many(len(req.items), "items")) is not None:
            return big
        try:
            pairs = self.score_pairs(req.items)
        except Reject as exc:
            return exc.status, {"detail": exc.detail}, ()
        except ValueError as exc:  # pydantic checks of a built record: still the client's input
            return 422, {"detail": str(exc)}, ()
        scores = await self.scored(pairs, len(body), watch)
        if not isinstance(scores, list):
            return scores
        values = [s.value if s.valid and math.isfinite(s.value) else None for s in scores]
        invalid = sum(v is None for v in values)
        self.service.count(len(values), Counter({"rm_failed": invalid} if invalid else {}), fallback=False)
        return 200, {"scores": values, "invalid": invalid, "truncated": sum(bool(s.truncated) for s in scores),
                     "rm": self.model_name, "condition": self.service.condition}, ()

    # -- OpenRLHF /get_reward -------------------------------------------------------------------
    async def get_reward(self, body: bytes, watch: asyncio.Future) -> Reply:
        try:
            req = wire.RewardRequest.model_validate_json(body)
        except ValidationError as exc:
            return self.invalid(exc, body, "query", "queries")
        if (big := self.too_many(len(req.query), "queries")) is not None:
            return big
        try:
            parsed = self.service.rollouts(req.query, req.prompts, req.labels)
        except Reject as exc:
            return exc.status, {"detail": exc.detail}, ()
        scores = await self.scored([x for x in parsed if not isinstance(x, Invalid)], len(body), watch)
        if not isinstance(scores, list):
            return scores
        values, flags = self.service.rewards(parsed, scores)
        return 200, {"rewards": values, "scores": list(values), "extra_logs": {"prbench_invalid": flags}}, ()

    # -- vLLM /classify, /pooling ---------------------------------------------------------------
    def classify_pairs(self, req: wire.PoolingRequest) -> list[Pair] | Reply:
        if self.prompts is None:
            return 400, wire.vllm_error(NO_USERS), ()
        if req.messages is not None:
            try:
                texts = [self.prompts.render([{"role": m.role, "content": m.text()} for m in req.messages])]
            except Exception as exc:  # noqa: BLE001 - the chat template refused these messages (a jinja error,
                # often raised by the template itself): the input's fault, 400 as vLLM's create_error_response
                # makes a TemplateError, ValueError or TypeError (serve/utils/error_response.py lines 40-56)
                return 400, wire.vllm_error(f"the RM's chat template cannot render these messages "
                                            f"({type(exc).__name__}: {str(exc)[:200]})", 400, "messages",
                                            "BadRequestError"), ()
        elif isinstance(req.input, list) and not req.input:
            return 400, wire.vllm_error(wire.NO_PROMPT, 400, None, "BadRequestError"), ()
        elif isinstance(req.input, str):
            texts = [req.input]
        elif isinstance(req.input, list) and all(isinstance(t, str) for t in req.input):
            texts = [t for t in req.input if isinstance(t, str)]  # all of them (typed as str for mypy)
        else:
            return 400, wire.vllm_error("prbench scores text: send `input` as a string or a list of strings, "
                                        "not token ids", 400, "input"), ()
        if len(texts) > self.max_batch:
            return 413, wire.vllm_error(f"batch of {len(texts)} inputs is over the limit of {self.max_batch}",
                                        413, "input"), ()
        pairs = []
        for n, text in enumerate(texts):
            try:
                ctx, answer = self.prompts.find(text)
                item = item_from_context(ctx, self.service.items or None)
            except ValueError as exc:
                return 400, wire.vllm_error(f"input[{n}]: {exc}", 400, "input"), ()
            if (why := self.service.missing(item)) is not None:
                return 400, wire.vllm_error(f"input[{n}]: {why}", 400, "input"), ()
            pairs.append((item, answer))
        return pairs

    async def pooled(self, body: bytes, watch: asyncio.Future, reply: Callable[[str, list[float]], dict]) -> Reply:
        try:
            req = wire.PoolingRequest.model_validate_json(body)
        except ValidationError as exc:
            if exc.errors()[0]["type"] == "json_invalid" and (why := wire.json_text_error(body)) is not None:
                return 400, wire.vllm_error(why, 400), ()
            return 400, wire.vllm_validation_error(exc), ()
        if self.check_model and req.model is not None and req.model != self.model_name:
            return 404, wire.vllm_error(f"The model `{req.model}` does not exist.", 404, "model"), ()
        if req.task not in (None, "classify") or req.encoding_format != "float":
            return 400, wire.vllm_error("prbench serves a reward: task 'classify' with encoding_format 'float' only",
                                        400, "task"), ()
        pairs = self.classify_pairs(req)
        if not isinstance(pairs, list):
            return pairs
        scores = await self.scored(pairs, len(body), watch)
        if not isinstance(scores, list):
            return scores  # 503, 413 or 499: in vLLM's shape by `__call__`
        values, _ = self.service.rewards(pairs, scores)
        if req.use_activation is not False:  # vLLM's default activation of a one-class classifier: sigmoid
            values = [1.0 / (1.0 + math.exp(-v)) if v > -700 else 0.0 for v in values]
        return 200, reply(self.model_name, values), ()

    async def classify(self, body: bytes, watch: asyncio.Future) -> Reply:
        return await self.pooled(body, watch, wire.classify_reply)

    async def pooling(self, body: bytes, watch: asyncio.Future) -> Reply:
        return await self.pooled(body, watch, wire.pooling_reply)

    # -- GET ------------------------------------------------------------------------------------
    async def health(self) -> Reply:
        s = self.service
        return 200, {"status": "ok", "rm": self.model_name, "condition": s.condition, "max_batch": self.max_batch,
                     "max_body_bytes": self.max_body_bytes, "auth": self.token is not None,
                     "served_items": s.stats.items, "invalid": s.stats.invalid, "openrlhf": s.splitter is not None,
                     "classify": self.prompts is not None, "pid": os.getpid()}, ()

    async def stats(self) -> Reply:
        s = self.service
        return 200, {**s.stats.as_dict(), **self.batcher.stats(), "fallback_reward": s.fallback_reward,
                     "reward_scale": s.reward_scale, "rm": self.model_name, "condition": s.condition,
                     "view_cache": {"items": len(s.views._views), "bytes": s.views.bytes,
                                    "max_bytes": s.views.max_bytes}}, ()

    async def models(self) -> Reply:
        return 200, wire.models_reply(self.model_name), ()


def create_app(
    rm: PointwiseRM | str,
    condition: str = "none",
    *,
    token: str | None = None,
    max_batch: int = 64,
    max_body_bytes: int = 1_000_000,
    top_k: int | None = None,
    retriever: str = "bm25",
    planner_file: str | None = None,
    max_context_chars: int | None = None,
    rm_options: dict[str, Any] | None = None,
    items: Sequence[SourceItem] = (),
    policy_template: ChatSplitter | str | None = None,
    users: str | None = None,
    rm_template: str | None = None,
    served_model_name: str | None = None,
    fallback_reward: float = DEFAULT_FALLBACK_REWARD,
    reward_scale: float = 1.0,
    body_timeout: float = Limits.body_timeout,
    batching: Batching | None = None,
    allowed_hosts: Sequence[str] | None = LOOPBACK,
    view_cache_bytes: int | None = None,
) -> RewardApp:
    """The ASGI app. `token` is the bearer token value itself (the CLI reads it from an env var); `top_k`
    None shows what the RM's trained folder asks for, else 10 (`prbench eval`'s rule);
    `allowed_hosts` are the names the Host header may carry (None: any, for a server behind a proxy)."""
    if token is not None and not token.strip():
        raise PrbenchError("the bearer token is empty (unset the variable to serve without auth on loopback)")
    batching = batching or Batching()
    check_sizes(max_batch, max_body_bytes, batching)
    if not (isinstance(body_timeout, (int, float)) and 0 < body_timeout < math.inf):
        raise PrbenchError(f"--body-timeout must be a finite number of seconds > 0, got {body_timeout!r}")
    check_reward(fallback_reward, reward_scale)
    if (users is None) != (rm_template is None):
        raise PrbenchError("--users and --rm-template go together: /classify renders each row's prompt with the "
                           "RM tokenizer's chat template to know whose prompt an input is")
    model: RewardModel = load_rm(rm, **(rm_options or {})) if isinstance(rm, str) else rm
    if not isinstance(model, PointwiseRM):
        raise PrbenchError(f"{model.spec}: the reward server needs a pointwise RM (a judge in --mode pointwise)")
    if isinstance(policy_template, str):
        policy_template = load_splitter(policy_template)
    prompts = None
    if users is not None and rm_template is not None:
        try:
            rows = read_rows(users)
            if not rows:  # else "/classify: on" at start, then every input a 400
                raise ValueError("no training rows: /classify would refuse every input (export them with "
                                 "`prbench export verl`)")
            prompts = RenderedPrompts(load_tokenizer(rm_template), rows, rm_template)
        except (OSError, ValueError) as exc:
            raise PrbenchError(f"--users {users}: {exc}") from None
    cache = ViewCache(max_bytes=view_cache_bytes) if view_cache_bytes is not None else None
    service = RewardService(model, condition, retriever=load_retriever(retriever), top_k=top_k,
                            planner_file=planner_file, max_context_chars=max_context_chars, items=items,
                            splitter=policy_template, fallback_reward=fallback_reward, reward_scale=reward_scale,
                            view_cache=cache)
    return RewardApp(service, Batcher(service.score_pairs, batching), token=token, max_batch=max_batch,
                     max_body_bytes=max_body_bytes, body_timeout=body_timeout, allowed_hosts=allowed_hosts,
                     model_name=served_model_name or public_name(model), prompts=prompts,
                     check_model=served_model_name is not None)


def check_sizes(max_batch: int, max_body_bytes: int, batching: Batching) -> None:
    """Sizes that would make the server refuse everything, or a full request forever (issue 42.14-15)."""
    if not (isinstance(max_batch, int) and max_batch >= 1):
        raise PrbenchError(f"--max-batch must be >= 1, got {max_batch!r}")
    if not (isinstance(max_body_bytes, int) and max_body_bytes >= 1):
        raise PrbenchError(f"--max-body-bytes must be >= 1, got {max_body_bytes!r}")
    if max_batch > batching.queue_items:
        raise PrbenchError(f"--max-batch {max_batch} is over --queue-items {batching.queue_items}: "
                           "a full request could never be admitted")
    if max_body_bytes > batching.queue_bytes:
        raise PrbenchError(f"--max-body-bytes {max_body_bytes} is over the queue's {batching.queue_bytes} bytes: "
                           "a full request could never be admitted")


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


def check_log_level(level: str) -> str:
    """uvicorn's level names (its `LOG_LEVELS`); another is one line here, not a KeyError from uvicorn's config."""
    uvicorn_config = require("uvicorn", "serve").config
    if level.lower() not in uvicorn_config.LOG_LEVELS:
        raise PrbenchError(f"--log-level {level!r}: use one of {', '.join(uvicorn_config.LOG_LEVELS)}")
    return level.lower()


def check_bind(host: str, token: str | None, allow_remote: bool, port: int = 8000) -> None:
    """Loopback unless `allow_remote`; off loopback without a token, warn loudly (anyone can use the RM)."""
    if not (isinstance(port, int) and 0 <= port <= 65535):
        raise PrbenchError(f"--port must be 0-65535, got {port!r}")
    if host in LOOPBACK:
        return
    if not allow_remote:
        shown = repr(host) if host not in ("", "0.0.0.0", "::") else f"{host!r} (every interface)"
        raise PrbenchError(f"--host {shown} is beyond loopback: pass --allow-remote to serve other machines "
                           "(and set a token)")
    if token is None:
        log.warning("serving on %r without a token: anyone who can reach this port can use the RM", host)


def hosts_for(host: str) -> Sequence[str] | None:
    """The Host names a server bound to `host` answers: loopback names, or any off loopback (a remote
    client may use any name for the machine; the token guards it there)."""
    return LOOPBACK if host in LOOPBACK else None


def _stoppable(config: Any, on_ready: Callable[[], None] | None) -> Any:
    """A uvicorn.Server that stops on SIGINT / SIGTERM and returns (uvicorn re-raises the signal after
    shutdown, which the CLI would report as an interrupted run to resume: a server has nothing to resume)."""
    uvicorn = require("uvicorn", "serve")

    class Server(uvicorn.Server):  # type: ignore[misc,name-defined]  # uvicorn: an optional extra, imported here
        stopped_by: int | None = None

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_ready is not None:  # announced once the port is bound
                on_ready()

        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return

            def stop(signum: int, _frame: Any) -> None:
                self.stopped_by = signum
                self.should_exit = True

            before = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)

    return Server(config)


def serve(app: RewardApp, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
          limits: Limits | None = None, on_ready: Callable[[], None] | None = None) -> int | None:
    """Run `app` in the foreground until SIGINT / SIGTERM; returns the signal that stopped it."""
    uvicorn = require("uvicorn", "serve")
    log_level = check_log_level(log_level)
    limits = limits or Limits()
    check_fd_limit(limits)
    app.body_timeout = limits.body_timeout
    server = _stoppable(uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                                       **limits.uvicorn_config(app)), on_ready)
    server.run()
    app.batcher.close()
    return server.stopped_by


class ThreadedServer:
    """Uvicorn in a background thread on an ephemeral port (tests, notebooks)."""

    def __init__(self, app: RewardApp, host: str = "127.0.0.1", port: int = 0, limits: Limits | None = None):
        uvicorn = require("uvicorn", "serve")
        if limits is not None:  # explicit limits win over the app's own body timeout
            app.body_timeout = limits.body_timeout
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
        self.app.batcher.close()  # lifespan is off here, so the app's shutdown message never comes
