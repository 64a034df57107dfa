"""OpenAI-compatible HTTP engines: OpenAI, vLLM `serve`, llama.cpp server, Gemini/other compatible APIs.

Why this shape:

- **No example is ever lost.** Each request retries on 429, 408, 409, 5xx, timeouts,
  connection errors and malformed or truncated JSON bodies, with exponential backoff and full
  jitter (`uniform(0, min(backoff_max, backoff_base * 2**attempt))`), or exactly the server's
  `Retry-After` seconds (capped at `backoff_max`) when it sends one. Other 4xx are final.
  A request that still fails yields `Generation(text="", finish_reason="error", error=...)`;
  scoring calls yield NaN values (see `loglik`, `choice_logprobs`) and the reason sits in
  `self.last_errors`. Nothing raises out of a batch.
- **Re-runs are free.** Every successful response is cached under
  `content_key(kind, fingerprint, request)`; failures are never cached.
- **The API key stays secret.** It is read from the environment variable named by
  `api_key_env` when the client is built, is handed to the SDK only, and appears in no
  attribute that is serialised (`__getstate__` drops the client), no `repr`, no fingerprint,
  no cache key and no log line. It travels only in the `Authorization` header.
- **Bounded concurrency** with a thread pool of `concurrency` workers (default: the provider
  profile's) and a per-request `timeout` in seconds. The SDK's own retries are switched off
  (`max_retries=0`).
- **Provider profiles** (`prbench.engines.providers`): the request is built for what the
  provider accepts (token-limit field, exclusive or fixed sampling parameters, reasoning effort
  and thinking headroom, logprobs/echo availability); `provider=` forces one. Scoring calls a
  provider cannot serve fail at once with one SpecError line, before any request.
- **Rate limits** (`prbench.engines.ratelimit`): `retry-after-ms`, `retry-after` and hints in
  error bodies are honoured (capped at `backoff_max`, default 60 s); 429s without a hint back off
  from 3 s doubling (five retries span more than a minute), have their own retry budget
  (`rate_limit_retries`, default max_retries) and an AIMD concurrency limit that halves on 429s
  and recovers;
  `rpm`/`tpm` cap requests and tokens per minute; an exhausted quota (`insufficient_quota`,
  per-day quotas) stops the call with `QuotaExhausted` (finished requests are cached: re-run to
  resume). `stats` holds requests, retries, rate_limited, tokens_in/out and wait_s.
- **Endpoints are checked before the first request**: a placeholder or malformed base URL is
  one SpecError line; a named key variable (`api_key_env`) that is unset is an error naming it;
  keyless use needs `no_api_key=True` except for local hosts under the implicit OPENAI_API_KEY.

Server support for the scoring calls:

- `choice_logprobs` uses chat completions with `logprobs=True, top_logprobs=20, max_tokens=1`:
  OpenAI chat models, vLLM, and recent llama.cpp servers support it; Anthropic's API does not.
  A choice absent from the top 20 gets `-inf`.
- `loglik` uses the legacy `/v1/completions` endpoint with `echo=True, logprobs=1`: vLLM
  supports it (the reference target; pass `tokenizer=` so the prompt is rendered with the
  served model's chat template, and `add_special_tokens=false` is sent so the BOS written by
  the template is not doubled). OpenAI's hosted chat models do not support echo with
  logprobs; llama.cpp support depends on the version. Without `tokenizer=` the plain
  format of `transformers_engine.PLAIN_FORMAT` is used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from prbench import cost
from prbench.engines import batch, providers
from prbench.engines.base import (
    Engine,
    Generation,
    GenParams,
    Messages,
    RequestFailed,
    logsumexp,
    plain,
    stable_prefix,
)
from prbench.engines.batch import BatchAPI
from prbench.engines.ratelimit import (
    Limiter,
    classify,
    parse_retry_after,  # noqa: F401  (re-exported: older imports)
)
from prbench.errors import PrbenchError, QuotaExhausted, SpecError
from prbench.runtime.extras import require
from prbench.specs import KindOptions
from prbench.store.cache import Cache, NullCache, content_key
from prbench.store.runs import redact_url, secret_name

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
RETRY_STATUS = frozenset({408, 409, 429})
TOP_LOGPROBS = 20
DEFERRED = "deferred to a batch"


class _Retryable(Exception):
    def __init__(self, message: str, wait: float | None = None, rate_limited: bool = False):
        super().__init__(message)
        self.wait = wait
        self.rate_limited = rate_limited


class _Quota(Exception):
    """The provider's quota is gone (stops the whole call)."""


def _strip_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        parts = parts._replace(netloc=host)
    return urlunsplit(parts).rstrip("/")


def split_query(url: str) -> tuple[str, dict[str, str]]:
    """(the URL without its query, the query's parameters): the client joins request paths onto the first and
    sends the second as a query with every request. Why: a base URL handed over whole had its query spliced into
    each path (`/v1?api_key=K` -> `/v1/?api_key=Kchat/completions`), and a key in it into every error text."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query="", fragment="")).rstrip("/"), dict(parse_qsl(parts.query,
                                                                                       keep_blank_values=True))


def fold_top_logprobs(top: Sequence[tuple[str, float]], choices: Sequence[str]) -> dict[str, float]:
    """Log-prob of each choice from a top-k list: exact or leading-space spelling, folded by logsumexp."""
    return {c: logsumexp([lp for tok, lp in top if tok == c or tok == " " + c]) for c in choices}


class HTTPOptions(KindOptions):
    """Options of every HTTP API engine: where it is, its key, and how requests are paced and retried."""

    base_url: str | None = None
    api_key_env: str | None = None
    concurrency: int | None = None
    timeout: float = 60.0
    max_retries: int = 5
    cache: Any = None  # a prbench.store.cache.Cache
    backoff_base: float = 0.5
    backoff_max: float = 60.0
    default_params: Any = None  # a GenParams
    rpm: float | None = None
    tpm: float | None = None
    rate_limit_retries: int | None = None
    no_api_key: bool = False
    prompt_cache: bool = True


class OpenAIOptions(HTTPOptions):
    """Options of an OpenAI-compatible endpoint (`openai:` engines)."""

    tokenizer: str | None = None
    max_tokens_param: str | None = None
    omit_params: Sequence[str] = ()
    extra_body: dict[str, Any] | None = None
    provider: str | None = None
    reasoning_effort: str | None = None


class OpenAIEngine(Engine):
    """Chat models behind an OpenAI-compatible API (see module docstring for guarantees).

    `base_url`: argument, else $OPENAI_BASE_URL, else OpenAI's. `provider`: openai, anthropic,
    gemini, vllm, llamacpp or generic (default: from the host, else the model family).
    `reasoning_effort`: override the profile's. `tokenizer`: HF id or folder whose chat
    template renders `loglik` prompts. `max_tokens_param` / `omit_params`: manual overrides of
    the profile (token-limit field; request fields to drop). `extra_body`: provider-specific
    fields sent with every request. After each call `last_errors[i]` holds request i's final
    error (None when it succeeded). `ledger` (a `prbench.cost.Ledger`, set per run) prices and caps requests.
    """

    options_model: type[HTTPOptions] = OpenAIOptions
    ledger: cost.Ledger | None = None
    batch: batch.Store | None = None  # batch mode (`prbench.engines.batch`): replies come from the run's batches

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str | None = None,
        concurrency: int | None = None,
        timeout: float = 60.0,
        max_retries: int = 5,
        cache: Cache | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 60.0,
        tokenizer: str | None = None,
        max_tokens_param: str | None = None,
        omit_params: Sequence[str] = (),
        extra_body: dict[str, Any] | None = None,
        default_params: GenParams | None = None,
        provider: str | None = None,
        reasoning_effort: str | None = None,
        rpm: float | None = None,
        tpm: float | None = None,
        rate_limit_retries: int | None = None,
        no_api_key: bool = False,
        prompt_cache: bool = True,
    ):
        if not model:
            raise SpecError("openai engine needs a model name, e.g. openai:gpt-4o-mini")
        self.spec = f"openai:{model}"
        self.model = model
        raw_url = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.base_url = _strip_userinfo(providers.validate_base_url(raw_url))
        self.api_key_env = api_key_env or "OPENAI_API_KEY"
        self._key_named = api_key_env is not None
        self.no_api_key = bool(no_api_key)
        self.prompt_cache = bool(prompt_cache)  # a marked stable prefix is sent for caching (see `_chat`)
        self.profile = providers.with_effort(providers.profile(provider, model, self.base_url), reasoning_effort)
        if max_tokens_param:
            self.profile = dataclasses.replace(self.profile, token_param=max_tokens_param)
        self.concurrency = max(1, int(concurrency if concurrency is not None else self.profile.concurrency))
        self.timeout = float(timeout)
        self.max_retries = max(0, int(max_retries))
        self.rate_limit_retries = self.max_retries if rate_limit_retries is None else max(0, int(rate_limit_retries))
        self.cache: Cache = cache if cache is not None else NullCache()
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.max_tokens_param = self.profile.token_param
        self.omit_params = tuple(omit_params)
        self.extra_body = dict(extra_body or {})
        self.default_params = default_params or GenParams()
        self.tokenizer_id = tokenizer
        self.rpm, self.tpm = rpm, tpm
        self._tokenizer: Any = None
        self.stats: dict[str, Any] = {"requests": 0, "retries": 0, "failures": 0, "cache_hits": 0,
                                      "rate_limited": 0, "tokens_in": 0, "tokens_out": 0, "wait_s": 0.0}
        self.adjusted: dict[str, int] = {}
        self.last_errors: list[str | None] = []
        self._last_hits: list[bool] = []
        self._lock = threading.Lock()
        self._client: Any = None
        self._rng = random.Random()
        self._sleep: Callable[[float], None] = time.sleep
        self._stop = threading.Event()
        self._new_limiter()

    def _new_limiter(self) -> None:
        self.limiter = Limiter(self.concurrency, rpm=self.rpm, tpm=self.tpm, sleep=lambda s: self._sleep(s))

    # -- identity (never the key) ---------------------------------------------------------------

    def __repr__(self) -> str:
        return (f"OpenAIEngine(model={self.model!r}, base_url={redact_url(self.base_url)!r}, api_key_env={self.api_key_env!r}, "
                f"provider={self.profile.provider!r})")

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the SDK client (it holds the key), locks, or the SQLite connection."""
        state = self.__dict__.copy()
        state["_client"] = None
        state["_lock"] = None
        state["_stop"] = None
        state["limiter"] = None
        state.pop("ledger", None)
        state.pop("batch", None)
        cache = state.pop("cache")
        state["_cache_spec"] = None if isinstance(cache, NullCache) else (str(cache.path), cache.namespace)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        spec = state.pop("_cache_spec", None)
        self.__dict__.update(state)
        self.cache = NullCache() if spec is None else Cache(spec[0], namespace=spec[1])
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._new_limiter()

    def fingerprint(self) -> dict[str, Any]:
        fp: dict[str, Any] = {"engine": "openai", "model": self.model, "base_url": self.base_url}
        if self.profile.provider != "generic":
            fp["provider"] = self.profile.provider
        if self.profile.reasoning_effort:
            fp["reasoning_effort"] = self.profile.reasoning_effort
        if self.tokenizer_id:
            fp["tokenizer"] = self.tokenizer_id
            fp["chat_template_sha256"] = self._template_hash()
        if self.extra_body:
            fp["extra_body"] = self.extra_body
        if self.omit_params:
            fp["omit_params"] = list(self.omit_params)
        return fp

    def capabilities(self) -> dict[str, bool]:
        return self.profile.capabilities()

    def run_info(self) -> dict[str, Any]:
        return {"provider": self.profile.provider, "usage": dict(self.stats), "adjusted": dict(self.adjusted),
                "concurrency_limits": list(self.limiter.history)}

    def batch_api(self) -> BatchAPI:
        """This engine's batch endpoints (`/v1/files` + `/v1/batches`). Anthropic's OpenAI-compatible layer serves
        chat completions only (docs.claude.com/en/api/openai-sdk, 2026): its batches are the native engine's."""
        if self.profile.provider == "anthropic":
            raise PrbenchError(f"{self.spec}: Anthropic's OpenAI-compatible endpoint has no batch API; "
                               f"for batches use the native engine, anthropic:{self.model}")
        return batch.OpenAIBatches(self)

    def _template_hash(self) -> str:
        template = getattr(self._get_tokenizer(), "chat_template", None) or ""
        return hashlib.sha256(str(template).encode("utf-8")).hexdigest()

    # -- plumbing ------------------------------------------------------------------------------

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._new_client(self._api_key())
            return self._client

    def _api_key(self) -> str:
        """The key from the environment (never stored on self); 'unused' for keyless local servers."""
        key = None if self.no_api_key else os.environ.get(self.api_key_env)
        if key:
            return key
        host = urlsplit(self.base_url).hostname or ""
        if self.no_api_key:
            pass
        elif self._key_named:
            raise PrbenchError(f"the environment variable {self.api_key_env} (named by api_key_env) "
                               f"is not set: export it, or pass --no-api-key for a keyless server")
        elif not providers.is_local(host):
            raise PrbenchError(f"set the environment variable {self.api_key_env} to your API key for "
                               f"{host} (or name another with --api-key-env; --no-api-key for none)")
        return "unused"  # local servers (vLLM, llama.cpp) usually need no key

    def _new_client(self, key: str) -> Any:
        openai = require("openai", "api")
        base, query = split_query(self.base_url)
        return openai.OpenAI(api_key=key, base_url=base, default_query=query or None, max_retries=0,
                             timeout=self.timeout)

    def _redact(self, message: str) -> str:
        """The message with the API key and the base URL's secrets (as servers and proxies may echo them, in any
        form: a URL, a bare path, a JSON-escaped value) replaced."""
        key = os.environ.get(self.api_key_env)
        secrets = [key] if key and len(key) >= 8 else []
        secrets += [v for name, v in split_query(self.base_url)[1].items()
                    if len(v) >= 4 and (secret_name(name) or len(v) >= 16)]
        for value in sorted(secrets, key=len, reverse=True):
            message = message.replace(value, "***")
        return redact_url(message)

    def _get_tokenizer(self) -> Any:
        if self._tokenizer is None and self.tokenizer_id:
            transformers = require("transformers", "hf")
            self._tokenizer = transformers.AutoTokenizer.from_pretrained(self.tokenizer_id)
        return self._tokenizer

    def _count(self, key: str, n: float = 1) -> None:
        with self._lock:
            self.stats[key] += n

    def _note(self, notes: dict[str, int]) -> None:
        with self._lock:
            for k, v in notes.items():
                self.adjusted[k] = self.adjusted.get(k, 0) + v

    def _backoff(self, attempt: int, hint: float | None, rate_limited: bool = False) -> float:
        """The server's hint (capped at backoff_max); else full-jitter exponential backoff. 429s
        without a hint start at 3 s, doubling, with 25% jitter: five retries outlast a one-minute window."""
        if hint is not None:
            return min(self.backoff_max, hint)
        if rate_limited:
            top = min(self.backoff_max, max(3.0, self.backoff_base) * (2**attempt))
            return self._rng.uniform(0.75 * top, top)
        return self._rng.uniform(0.0, min(self.backoff_max, self.backoff_base * (2**attempt)))

    def _chat(self, messages: Messages, p: GenParams) -> tuple[dict[str, Any], dict[str, Any]]:
        """The request body. OpenAI caches prompt prefixes of 1024+ tokens by itself; `prompt_cache_key` (the
        openai client 3.57.0 `types/chat/completion_create_params.py`) routes the requests sharing a marked
        prefix (both orders of a pair, a judge's retries) to the same cache. Gemini and vLLM cache prefixes
        implicitly: the stable-first prompt is all they need."""
        notes: dict[str, int] = {}
        kwargs, extra = providers.chat_request(self.profile, self.model, plain(messages), p, notes)
        prefix = stable_prefix(messages)
        if self.prompt_cache and prefix and self.profile.provider == "openai":
            kwargs["prompt_cache_key"] = "prb-" + hashlib.sha256(prefix.encode("utf-8")).hexdigest()[:32]
        for key in self.omit_params:
            kwargs.pop(key, None)
            extra.pop(key, None)
        if notes:
            self._note(notes)
        return kwargs, extra

    _body_key = "choices"  # what every well-formed reply body has

    def _endpoint(self, endpoint: str) -> tuple[Any, Any]:
        """(SDK module, raw-response create method) of `endpoint` ('chat' or 'completions')."""
        openai = require("openai", "api")
        client = self._get_client()
        if endpoint == "chat":
            return openai, client.chat.completions.with_raw_response.create
        return openai, client.completions.with_raw_response.create

    def _usage(self, data: dict[str, Any]) -> dict[str, int]:
        """The reply's token usage in the ledger's terms."""
        return cost.openai_usage(data.get("usage"))

    def _reply(self, data: dict[str, Any]) -> tuple[Any, str, int | None]:
        """(text, raw finish reason, output tokens) of a chat reply."""
        choice = data["choices"][0]
        return (choice.get("message") or {}).get("content"), choice.get("finish_reason") or "stop", \
            (data.get("usage") or {}).get("completion_tokens")

    def _attempt(self, create: Any, openai: Any, kwargs: dict[str, Any], body_extra: dict[str, Any]) -> dict[str, Any]:
        """One HTTP request: the parsed body, or _Retryable / _Quota / RequestFailed."""
        try:
            raw = create(**kwargs, extra_body=body_extra or None, timeout=self.timeout)
            text = raw.text() if callable(raw.text) else raw.text  # a method in the anthropic client
        except openai.APITimeoutError:
            raise _Retryable("timeout") from None
        except openai.APIConnectionError as exc:
            raise _Retryable(f"connection error: {type(exc.__cause__ or exc).__name__}") from None
        except openai.APIStatusError as exc:
            status = exc.status_code
            message = self._redact(f"HTTP {status}: {_error_message(exc)}")
            failure = classify(status, exc.response.headers, getattr(exc, "body", None), message)
            if failure.kind == "quota":
                raise _Quota(message) from None
            if failure.kind in ("rate_limit", "retry"):
                raise _Retryable(message, failure.wait, failure.kind == "rate_limit") from None
            raise RequestFailed(message) from None
        except Exception as exc:  # transport-level surprises (e.g. a body cut mid-read)
            if type(exc).__module__.split(".")[0] in {"httpx", "httpx2", "httpcore", "h11"}:
                raise _Retryable(f"transport error: {type(exc).__name__}") from None
            raise
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or not data.get(self._body_key):
                raise ValueError(f"no {self._body_key}")
        except ValueError as exc:
            raise _Retryable(self._redact(f"malformed response body: {str(exc)[:80]}")) from None
        return data

    def _post(self, endpoint: str, kwargs: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        """One request with retries, priced by the run's ledger (reserved before, settled after)."""
        if self.batch is not None:  # answered from the run's batch results, or deferred to the next batch
            stored = self.batch.answer(batch.CURRENT.get(), endpoint, {**kwargs, **self.extra_body, **extra}, self.spec)
            if stored is not None:
                return stored  # billed from the folder's files (`batch.Store.usage`), never here
        if self.ledger is None:
            return self._send(endpoint, kwargs, extra)
        limit = int(kwargs.get(self.profile.token_param) or kwargs.get("max_tokens") or 0)
        ticket = self.ledger.reserve(kwargs.get("messages") or kwargs.get("prompt") or "", limit)
        data = None
        try:
            data = self._send(endpoint, kwargs, extra)
            return data
        finally:
            self.ledger.settle(ticket, None if data is None else self._usage(data))

    def _send(self, endpoint: str, kwargs: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        """One request with retries; returns the parsed JSON body or raises RequestFailed / _Quota."""
        openai, create = self._endpoint(endpoint)
        body_extra = {**self.extra_body, **extra}
        estimate = len(json.dumps(kwargs.get("messages") or kwargs.get("prompt") or "")) // 4 + int(
            kwargs.get(self.profile.token_param) or kwargs.get("max_tokens") or 0)
        attempt = rate_attempt = 0
        while True:
            if self._stop.is_set():
                raise RequestFailed("not sent: the run stopped (quota exhausted or --max-usd reached)")
            self._count("wait_s", self.limiter.acquire(estimate))
            self._count("requests")
            outcome, hint = "error", None
            try:
                data = self._attempt(create, openai, kwargs, body_extra)
                outcome = "ok"
                usage = self._usage(data)
                self._count("tokens_in", usage["input_tokens"])
                self._count("tokens_out", usage["output_tokens"])
                return data
            except _Retryable as exc:
                if exc.rate_limited:
                    outcome, hint = "rate_limit", exc.wait
                    self._count("rate_limited")
                    rate_attempt += 1
                    give_up, n = rate_attempt > self.rate_limit_retries, rate_attempt
                else:
                    give_up, n = attempt >= self.max_retries, attempt + 1
                    attempt += 1
                if give_up:
                    raise RequestFailed(f"{exc} (after {attempt + rate_attempt} attempts)") from None
                wait = self._backoff(n - 1, exc.wait, exc.rate_limited)
                log.warning("%s: %s; retry in %.2fs", self.spec, exc, wait)
                self._count("retries")
                retry_wait = wait
            finally:
                self.limiter.release(outcome, min(hint, self.backoff_max) if hint is not None else None)
            self._sleep(retry_wait)
            self._count("wait_s", retry_wait)

    def _run(self, keys: list[str], work: Callable[[int], Any],
             groups: Sequence[str] | None = None) -> tuple[list[Any], list[str | None]]:
        """Cached, deduplicated, concurrent execution of `work(i)` for each request index. Requests of one
        `groups` value (a shared prompt prefix) go after the first of their group has returned, so the
        provider's prompt cache holds the prefix when they arrive (a cache entry exists only once the first
        reply has begun: simultaneous requests all miss)."""
        n = len(keys)
        values: list[Any] = [None] * n
        errors: list[str | None] = [None] * n
        cached = self.cache.get_many(keys)
        self._last_hits = [k in cached for k in keys]
        todo: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            if k in cached:
                values[i] = cached[k]
                self._count("cache_hits")
            else:
                todo.setdefault(k, []).append(i)
        quota: list[str] = []
        budget: list[cost.BudgetExceeded] = []

        def one(k: str) -> tuple[str, Any, str | None]:
            batch.CURRENT.set(k)  # the custom id, should the request go into a batch
            try:
                value = work(todo[k][0])
            except batch.Deferred:
                return k, None, DEFERRED
            except _Quota as exc:
                self._stop.set()
                quota.append(str(exc))
                return k, None, f"quota exhausted: {exc}"
            except cost.BudgetExceeded as exc:
                self._stop.set()
                budget.append(exc)
                return k, None, str(exc)
            except RequestFailed as exc:
                return k, None, self._redact(str(exc))
            except Exception as exc:  # noqa: BLE001 - a bug or odd reply must not sink the batch
                return k, None, self._redact(f"{type(exc).__name__}: {exc}")
            self.cache.put(k, value)
            return k, value, None

        if todo:
            self._get_client()  # a missing key is one clear PrbenchError, not a failure per request
            self._stop.clear()
            first: dict[str, str] = {}
            for k, idx in todo.items():
                if groups is not None and groups[idx[0]]:
                    first.setdefault(groups[idx[0]], k)
            leaders = [k for k in todo if groups is None or not groups[todo[k][0]] or first[groups[todo[k][0]]] == k]
            led = set(leaders)
            waves = [leaders, [k for k in todo if k not in led]]
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(todo))) as pool:
                for k, value, err in (r for wave in waves for r in pool.map(one, wave)):
                    for i in todo[k]:
                        values[i], errors[i] = value, err
                    if err is not None and err != DEFERRED and not budget:  # a budget stop is one line, below
                        self._count("failures", len(todo[k]))
                        log.warning("%s: request failed for good: %s", self.spec, err)
        self.last_errors = errors
        if budget:
            done = sum(1 for e in errors if e is None)
            raise cost.BudgetExceeded(f"{budget[0]}; {done} of {n} requests of this call finished (cached: re-run "
                                      f"with a higher --max-usd to resume)")
        if quota:
            done = sum(1 for e in errors if e is None)
            kept = "cached, so re-running the same command resumes" if not isinstance(self.cache, NullCache) \
                else "not cached (no cache given), so a re-run starts over"
            raise QuotaExhausted(f"{self.spec}: the provider reports its quota is exhausted ({quota[0]}); "
                                 f"stopped after {done} of {n} requests ({kept}); add credit or wait for the quota "
                                 f"to reset")
        return values, errors

    def require(self, capability: str, what: str) -> None:
        if not self.profile.capabilities()[capability]:
            raise SpecError(f"{self.spec}: provider {self.profile.provider!r} has no {what}, so it cannot "
                            f"{'score answer tokens (judge --mode likelihood)' if capability == 'choice_logprobs' else 'compute log-likelihoods (lik:/pmi:)'}; "
                            f"use a vLLM or llama.cpp endpoint, or --provider to correct the profile")

    # -- the Engine interface ------------------------------------------------------------------

    def generate(
        self, prompts: Sequence[Messages], params: GenParams | Sequence[GenParams] | None = None
    ) -> list[Generation]:
        if params is None:
            params = self.default_params
        plist = [params] * len(prompts) if isinstance(params, GenParams) else list(params)
        if len(plist) != len(prompts):
            raise SpecError(f"got {len(plist)} GenParams for {len(prompts)} prompts")
        fp = self.fingerprint()
        keys = [content_key("chat", fp, plain(list(m)), p.as_dict()) for m, p in zip(prompts, plist)]
        groups = [stable_prefix(m) for m in prompts]

        def work(i: int) -> dict[str, Any]:
            from prbench.engines.transformers_engine import apply_stop

            kwargs, extra = self._chat(prompts[i], plist[i])
            data = self._post("chat", kwargs, extra)
            text, raw_finish, n_out = self._reply(data)
            if not isinstance(text, str):
                raise RequestFailed("response has no message content")
            text, stopped = apply_stop(text, plist[i].stop)  # some servers ignore `stop`
            return {
                "text": text,
                "finish_reason": "length" if raw_finish in ("length", "max_tokens") and not stopped else "stop",
                "raw_finish_reason": raw_finish,
                "n_tokens": n_out,
            }

        values, errors = self._run(keys, work, groups)
        out: list[Generation] = []
        for v, err, hit in zip(values, errors, self._last_hits):
            if err is not None:
                out.append(Generation(text="", finish_reason="error", error=err))
            else:
                meta = {"raw_finish_reason": v.get("raw_finish_reason"), "cached": hit}
                out.append(
                    Generation(
                        text=v["text"], finish_reason=v["finish_reason"], n_tokens=v["n_tokens"], meta=meta
                    )
                )
        return out

    def choice_logprobs(self, prompts: Sequence[Messages], choices: Sequence[str]) -> list[dict[str, float]]:
        """First-token log-probs from top-20 logprobs; missing -> -inf, failed request -> NaN."""
        self.require("choice_logprobs", "logprobs")
        fp = self.fingerprint()
        keys = [content_key("choices", fp, plain(list(m)), list(choices)) for m in prompts]
        probe = GenParams(max_new_tokens=1, temperature=0.0)

        def work(i: int) -> dict[str, float]:
            kwargs, extra = self._chat(prompts[i], probe)
            kwargs = providers.logprob_request(self.profile, kwargs, TOP_LOGPROBS)
            data = self._post("chat", kwargs, extra)
            content = ((data["choices"][0].get("logprobs") or {}).get("content")) or []
            if not content:
                raise RequestFailed("server returned no logprobs (does it support logprobs/top_logprobs?)")
            first = content[0]
            top = [(t["token"], float(t["logprob"])) for t in first.get("top_logprobs") or []]
            if first.get("token") is not None and first.get("logprob") is not None:
                top.append((first["token"], float(first["logprob"])))
            top = list(dict(top).items())  # the sampled token may repeat a top entry
            return fold_top_logprobs(top, choices)

        values, errors = self._run(keys, work, [stable_prefix(m) for m in prompts])
        return [
            {c: math.nan for c in choices} if err is not None else {c: float(v[c]) for c in choices}
            for v, err in zip(values, errors)
        ]

    def loglik(self, requests: Sequence[tuple[Messages, str]]) -> list[list[float]]:
        """Continuation log-probs via /v1/completions echo; a failed request gives `[nan]`."""
        from prbench.engines.transformers_engine import chat_text, render_plain

        self.require("loglik", "echo with logprobs on /v1/completions")
        tokenizer = self._get_tokenizer()
        fp = self.fingerprint()
        keys = [content_key("loglik", fp, list(m), c) for m, c in requests]

        def work(i: int) -> list[float]:
            messages, continuation = requests[i]
            if tokenizer is not None:
                prompt, _ = chat_text(tokenizer, messages, True)
                extra = {"add_special_tokens": False}
            else:
                prompt, extra = render_plain(messages, True), {}
            if not continuation:
                return []
            full = prompt + continuation
            kwargs = {
                "model": self.model,
                "prompt": full,
                "max_tokens": 1,
                "temperature": 0.0,
                "echo": True,
                "logprobs": 1,
            }
            data = self._post("completions", kwargs, extra)
            return continuation_logprobs(data["choices"][0], len(prompt), len(full))

        values, errors = self._run(keys, work)
        return [[math.nan] if err is not None else [float(x) for x in v] for v, err in zip(values, errors)]


def continuation_logprobs(choice: dict[str, Any], prompt_chars: int, full_chars: int) -> list[float]:
    """Pick the continuation's token log-probs out of an echoed completion's `logprobs`.

    Tokens are located by `text_offset`: every echoed token that covers a character of the
    continuation counts, including one that straddles the prompt/continuation boundary (e.g.
    " Paris" after "Assistant:"). If the server's offsets run longer than the echoed text (it
    prepended special-token text such as a BOS), they are shifted back by the surplus.
    """
    lp = choice.get("logprobs") or {}
    tokens, offsets, values = lp.get("tokens"), lp.get("text_offset"), lp.get("token_logprobs")
    if not tokens or offsets is None or values is None or not (len(tokens) == len(offsets) == len(values)):
        raise RequestFailed("completion has no echo logprobs (server without echo+logprobs support?)")
    text = choice.get("text") or ""
    surplus = max(0, offsets[-1] + len(tokens[-1]) - len(text))
    out: list[float] = []
    for tok, tok_offset, value in zip(tokens, offsets, values):
        pos = tok_offset - surplus
        if pos + len(tok) > prompt_chars and pos < full_chars:
            if value is None:
                raise RequestFailed("continuation token without a log-probability")
            out.append(float(value))
    if not out:
        raise RequestFailed("no continuation tokens found in the echoed completion")
    return out


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:200]
    return str(getattr(exc, "message", "") or exc)[:200]
