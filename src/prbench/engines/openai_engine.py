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
- **Bounded concurrency** with a thread pool of `concurrency` workers and a per-request
  `timeout` in seconds. The SDK's own retries are switched off (`max_retries=0`).

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
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from prbench.cache import Cache, NullCache, content_key
from prbench.engines.base import Engine, Generation, GenParams, Messages
from prbench.errors import PrbenchError, SpecError
from prbench.extras import require

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
RETRY_STATUS = frozenset({408, 409, 429})
TOP_LOGPROBS = 20


class RequestFailed(Exception):
    """A request that failed for good (message safe to log and store)."""


class _Retryable(Exception):
    def __init__(self, message: str, wait: float | None = None):
        super().__init__(message)
        self.wait = wait


def _strip_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        parts = parts._replace(netloc=host)
    return urlunsplit(parts).rstrip("/")


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date); None when absent or bad."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - time.time()
    if math.isnan(seconds):
        return None
    return max(0.0, seconds)


def fold_top_logprobs(top: Sequence[tuple[str, float]], choices: Sequence[str]) -> dict[str, float]:
    """Log-prob of each choice from a top-k list: exact or leading-space spelling, folded by logsumexp."""
    out: dict[str, float] = {}
    for c in choices:
        vals = [lp for tok, lp in top if tok == c or tok == " " + c]
        if not vals:
            out[c] = -math.inf
            continue
        m = max(vals)
        out[c] = m + math.log(sum(math.exp(v - m) for v in vals))
    return out


def chat_payload(
    model: str,
    messages: Messages,
    p: GenParams,
    max_tokens_param: str = "max_tokens",
    omit: Sequence[str] = (),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(SDK keyword arguments, extra_body) for one chat request. Non-OpenAI knobs go in extra_body
    and are only sent when they differ from their neutral value (OpenAI rejects unknown fields)."""
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": list(messages),
        max_tokens_param: p.max_new_tokens,
        "temperature": p.temperature,
        "top_p": p.top_p,
        "seed": p.seed,
    }
    if p.stop:
        kwargs["stop"] = list(p.stop)
    extra: dict[str, Any] = {}
    if p.top_k is not None:
        extra["top_k"] = p.top_k
    if p.repetition_penalty != 1.0:
        extra["repetition_penalty"] = p.repetition_penalty
    for key in omit:
        kwargs.pop(key, None)
        extra.pop(key, None)
    return kwargs, extra


class OpenAIEngine(Engine):
    """Chat models behind an OpenAI-compatible API (see module docstring for guarantees).

    `base_url`: argument, else $OPENAI_BASE_URL, else OpenAI's. A missing key is an error only
    for OpenAI's own URL (local servers get a dummy). `tokenizer`: HF id or folder whose chat
    template renders `loglik` prompts. `max_tokens_param`: "max_completion_tokens" for OpenAI
    reasoning models. `omit_params`: request fields to drop (e.g. "temperature" for models that
    reject it). `extra_body`: provider-specific fields sent with every request. After each call
    `last_errors[i]` holds request i's final error (None when it succeeded).
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 8,
        timeout: float = 60.0,
        max_retries: int = 5,
        cache: Cache | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        tokenizer: str | None = None,
        max_tokens_param: str = "max_tokens",
        omit_params: Sequence[str] = (),
        extra_body: dict[str, Any] | None = None,
        default_params: GenParams | None = None,
    ):
        if not model:
            raise SpecError("openai engine needs a model name, e.g. openai:gpt-4o-mini")
        self.spec = f"openai:{model}"
        self.model = model
        self.base_url = _strip_userinfo(base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL)
        self.api_key_env = api_key_env
        self.concurrency = max(1, int(concurrency))
        self.timeout = float(timeout)
        self.max_retries = max(0, int(max_retries))
        self.cache: Cache = cache if cache is not None else NullCache()
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.max_tokens_param = max_tokens_param
        self.omit_params = tuple(omit_params)
        self.extra_body = dict(extra_body or {})
        self.default_params = default_params or GenParams()
        self.tokenizer_id = tokenizer
        self._tokenizer: Any = None
        self.stats: dict[str, int] = {"requests": 0, "retries": 0, "failures": 0, "cache_hits": 0}
        self.last_errors: list[str | None] = []
        self._last_hits: list[bool] = []
        self._lock = threading.Lock()
        self._client: Any = None
        self._rng = random.Random()
        self._sleep: Callable[[float], None] = time.sleep

    # -- identity (never the key) ---------------------------------------------------------------

    def __repr__(self) -> str:
        return f"OpenAIEngine(model={self.model!r}, base_url={self.base_url!r}, api_key_env={self.api_key_env!r})"

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the SDK client (it holds the key), the lock, or the SQLite connection."""
        state = self.__dict__.copy()
        state["_client"] = None
        state["_lock"] = None
        cache = state.pop("cache")
        state["_cache_spec"] = None if isinstance(cache, NullCache) else (str(cache.path), cache.namespace)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        spec = state.pop("_cache_spec", None)
        self.__dict__.update(state)
        self.cache = NullCache() if spec is None else Cache(spec[0], namespace=spec[1])
        self._lock = threading.Lock()

    def fingerprint(self) -> dict[str, Any]:
        fp: dict[str, Any] = {"engine": "openai", "model": self.model, "base_url": self.base_url}
        if self.tokenizer_id:
            fp["tokenizer"] = self.tokenizer_id
            fp["chat_template_sha256"] = self._template_hash()
        if self.extra_body:
            fp["extra_body"] = self.extra_body
        if self.omit_params:
            fp["omit_params"] = list(self.omit_params)
        return fp

    def _template_hash(self) -> str:
        template = getattr(self._get_tokenizer(), "chat_template", None) or ""
        return hashlib.sha256(str(template).encode("utf-8")).hexdigest()

    # -- plumbing ------------------------------------------------------------------------------

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                openai = require("openai", "api")
                key = os.environ.get(self.api_key_env)
                if not key:
                    if self.base_url == DEFAULT_BASE_URL:
                        raise PrbenchError(f"set the environment variable {self.api_key_env} to your API key")
                    key = "unused"  # local servers (vLLM, llama.cpp) usually need no key
                self._client = openai.OpenAI(
                    api_key=key, base_url=self.base_url, max_retries=0, timeout=self.timeout
                )
                del key
            return self._client

    def _redact(self, message: str) -> str:
        """The message with the API key (as servers and proxies may echo it) replaced by '***'."""
        key = os.environ.get(self.api_key_env)
        return message.replace(key, "***") if key and len(key) >= 8 else message

    def _get_tokenizer(self) -> Any:
        if self._tokenizer is None and self.tokenizer_id:
            transformers = require("transformers", "hf")
            self._tokenizer = transformers.AutoTokenizer.from_pretrained(self.tokenizer_id)
        return self._tokenizer

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.stats[key] += n

    def _backoff(self, attempt: int, hint: float | None) -> float:
        if hint is not None:
            return min(self.backoff_max, hint)
        return self._rng.uniform(0.0, min(self.backoff_max, self.backoff_base * (2**attempt)))

    def _post(self, endpoint: str, kwargs: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        """One request with retries; returns the parsed JSON body or raises RequestFailed."""
        openai = require("openai", "api")
        client = self._get_client()
        create = (
            client.chat.completions.with_raw_response.create
            if endpoint == "chat"
            else client.completions.with_raw_response.create
        )
        body_extra = {**self.extra_body, **extra}
        attempt = 0
        while True:
            self._count("requests")
            try:
                try:
                    raw = create(**kwargs, extra_body=body_extra or None, timeout=self.timeout)
                    text = raw.text
                except openai.APITimeoutError:
                    raise _Retryable("timeout") from None
                except openai.APIConnectionError as exc:
                    raise _Retryable(f"connection error: {type(exc.__cause__ or exc).__name__}") from None
                except openai.APIStatusError as exc:
                    status = exc.status_code
                    message = self._redact(f"HTTP {status}: {_error_message(exc)}")
                    if status in RETRY_STATUS or status >= 500:
                        raise _Retryable(
                            message, parse_retry_after(exc.response.headers.get("retry-after"))
                        ) from None
                    raise RequestFailed(message) from None
                except Exception as exc:  # transport-level surprises (e.g. a body cut mid-read)
                    if type(exc).__module__.split(".")[0] in {"httpx", "httpx2", "httpcore", "h11"}:
                        raise _Retryable(f"transport error: {type(exc).__name__}") from None
                    raise
                try:
                    data = json.loads(text)
                    if not isinstance(data, dict) or not data.get("choices"):
                        raise ValueError("no choices")
                except ValueError as exc:
                    raise _Retryable(self._redact(f"malformed response body: {str(exc)[:80]}")) from None
                return data
            except _Retryable as exc:
                if attempt >= self.max_retries:
                    raise RequestFailed(f"{exc} (after {attempt + 1} attempts)") from None
                wait = self._backoff(attempt, exc.wait)
                log.warning(
                    "%s: %s; retry %d/%d in %.2fs", self.spec, exc, attempt + 1, self.max_retries, wait
                )
                self._count("retries")
                self._sleep(wait)
                attempt += 1

    def _run(self, keys: list[str], work: Callable[[int], Any]) -> tuple[list[Any], list[str | None]]:
        """Cached, deduplicated, concurrent execution of `work(i)` for each request index."""
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

        def one(k: str) -> tuple[str, Any, str | None]:
            try:
                value = work(todo[k][0])
            except RequestFailed as exc:
                return k, None, self._redact(str(exc))
            except Exception as exc:  # noqa: BLE001 - a bug or odd reply must not sink the batch
                return k, None, self._redact(f"{type(exc).__name__}: {exc}")
            self.cache.put(k, value)
            return k, value, None

        if todo:
            self._get_client()  # a missing key is one clear PrbenchError, not a failure per request
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(todo))) as pool:
                for k, value, err in pool.map(one, list(todo)):
                    for i in todo[k]:
                        values[i], errors[i] = value, err
                    if err is not None:
                        self._count("failures", len(todo[k]))
                        log.warning("%s: request failed for good: %s", self.spec, err)
        self.last_errors = errors
        return values, errors

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
        keys = [content_key("chat", fp, list(m), p.as_dict()) for m, p in zip(prompts, plist)]

        def work(i: int) -> dict[str, Any]:
            from prbench.engines.transformers_engine import apply_stop

            kwargs, extra = chat_payload(
                self.model, prompts[i], plist[i], self.max_tokens_param, self.omit_params
            )
            data = self._post("chat", kwargs, extra)
            choice = data["choices"][0]
            text = (choice.get("message") or {}).get("content")
            if not isinstance(text, str):
                raise RequestFailed("response has no message content")
            text, stopped = apply_stop(text, plist[i].stop)  # some servers ignore `stop`
            raw_finish = choice.get("finish_reason") or "stop"
            usage = data.get("usage") or {}
            return {
                "text": text,
                "finish_reason": "length" if raw_finish == "length" and not stopped else "stop",
                "raw_finish_reason": raw_finish,
                "n_tokens": usage.get("completion_tokens"),
            }

        values, errors = self._run(keys, work)
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
        fp = self.fingerprint()
        keys = [content_key("choices", fp, list(m), list(choices)) for m in prompts]
        probe = GenParams(max_new_tokens=1, temperature=0.0)

        def work(i: int) -> dict[str, float]:
            kwargs, extra = chat_payload(
                self.model, prompts[i], probe, self.max_tokens_param, self.omit_params
            )
            kwargs.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
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

        values, errors = self._run(keys, work)
        return [
            {c: math.nan for c in choices} if err is not None else {c: float(v[c]) for c in choices}
            for v, err in zip(values, errors)
        ]

    def loglik(self, requests: Sequence[tuple[Messages, str]]) -> list[list[float]]:
        """Continuation log-probs via /v1/completions echo; a failed request gives `[nan]`."""
        from prbench.engines.transformers_engine import chat_text, render_plain

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
