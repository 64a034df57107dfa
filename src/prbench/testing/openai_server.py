"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests: scripted replies, scheduled faults.

Why: HTTP engines and everything built on them (judges, benchmark builders) must be tested
against real sockets, real status codes and real broken bodies, offline and deterministically.

Endpoints:

- `GET  /v1/models`
- `POST /v1/chat/completions`  (`max_tokens` / `max_completion_tokens`, `stop`, `logprobs`, `top_logprobs`)
- `POST /v1/completions`       (`prompt`, `max_tokens`, `echo`, `logprobs`), vLLM-style logprobs

Replies come from `reply_fn(request_json) -> str` (default: `"reply to: <last user message>"`).
Text is split into fake tokens by `fake_tokenize` (runs of whitespace + non-whitespace) and
each token gets the deterministic log-probability `logprob_fn(token)` (default `fake_logprob`),
so tests can compute the expected numbers themselves.

Faults (`Fault`) are scheduled by POST request number (1-based, counted over all POSTs in
arrival order), by predicate, or by any callable `(n, body) -> Fault | None`::

    from prbench.testing.openai_server import Fault, serve, per_prompt

    with serve(lambda body: "A", faults={1: Fault.rate_limit(retry_after=1), 2: Fault.reset()}) as srv:
        client = OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        ...
        assert len(srv.requests) == 3     # bodies of every POST, in order
        srv.records[0].headers            # headers too (e.g. Authorization)

    # every distinct prompt fails once with a 503, then succeeds (robust under concurrency):
    serve(faults=per_prompt(Fault.server_error(503), times=1))

Provider modes (`serve(provider="openai"|"anthropic"|"gemini"|"vllm"|"llamacpp")`) refuse, with the
provider's own 400 body, exactly the requests that provider refuses (see `refusal` for the rules and
their sources); refused bodies are also kept in `srv.refused`. Gemini mode spends simulated thinking
tokens inside `max_tokens` as Gemini 2.5/3 does, so a budget without headroom comes back cut.

Fault kinds: HTTP status (429 with or without `Retry-After` / `retry-after-ms`, a quota error
body, a retry hint in the body, 5xx, any 4xx), `delay` (sleep
before answering; longer than the client timeout -> client timeout), `malformed` (200 with a
non-JSON body), `truncated` (200 with a JSON body cut in half, consistent Content-Length),
`short_body` (Content-Length promises more bytes than sent, then the socket closes), `reset`
(TCP reset without any response).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prbench.testing import provider_rules as rules

ReplyFn = Callable[[dict[str, Any]], str]
FaultFn = Callable[[int, dict[str, Any]], "Fault | None"]
FaultSpec = (
    Mapping[int, "Fault"] | Sequence[tuple[Callable[[int, dict[str, Any]], bool], "Fault"]] | FaultFn | None
)

_TOKEN_RE = re.compile(r"\s*\S+|\s+")
FILLER_TOKENS = ("A", "B", "C", "D", "Yes", "No", "1", "2", "3", "4", "5", "The", "I", "It", "This")


def fake_tokenize(text: str) -> list[str]:
    """Split text into fake tokens: each is optional leading whitespace + a non-space run."""
    return _TOKEN_RE.findall(text)


def fake_logprob(token: str) -> float:
    """Deterministic log-probability of a fake token (depends only on the token)."""
    return -round(0.25 + (sum(map(ord, token)) % 17) / 8.0, 6)


@dataclass(frozen=True)
class Fault:
    """One scheduled misbehaviour of the server (see module docstring)."""

    kind: str  # status | delay | malformed | truncated | short_body | reset
    status: int = 500
    retry_after: str | None = None
    seconds: float = 0.0
    retry_after_ms: str | None = None
    body: Any = None  # the error JSON to send instead of the default

    @classmethod
    def rate_limit(cls, retry_after: float | str | None = None, retry_after_ms: float | None = None) -> Fault:
        return cls("status", 429, None if retry_after is None else str(retry_after),
                   retry_after_ms=None if retry_after_ms is None else str(retry_after_ms))

    @classmethod
    def quota(cls) -> Fault:
        """OpenAI's 429 for an exhausted quota or credit (retrying cannot help)."""
        return cls("status", 429, body={"error": {
            "message": "You exceeded your current quota, please check your plan and billing details.",
            "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}})

    @classmethod
    def rate_limit_hint(cls, seconds: float, style: str = "openai") -> Fault:
        """A 429 whose only retry hint is in the body: OpenAI's message or Gemini's RetryInfo."""
        if style == "gemini":
            body: Any = [{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
                                    "message": "Resource has been exhausted (e.g. check quota).",
                                    "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                                                 "violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}]},
                                                {"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                                 "retryDelay": f"{seconds:g}s"}]}}]
        else:
            body = {"error": {"message": f"Rate limit reached for requests per min (RPM): Limit 3, Used 3. "
                                         f"Please try again in {seconds * 1000:g}ms.",
                              "type": "requests", "param": None, "code": "rate_limit_exceeded"}}
        return cls("status", 429, body=body)

    @classmethod
    def http_status(cls, status: int, retry_after: float | str | None = None) -> Fault:
        return cls("status", status, None if retry_after is None else str(retry_after))

    @classmethod
    def server_error(cls, status: int = 500, retry_after: float | str | None = None) -> Fault:
        """`http_status` with a 5xx default."""
        return cls.http_status(status, retry_after)

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        return cls("delay", seconds=seconds)

    malformed = classmethod(lambda cls: cls("malformed"))  # a 200 whose body is not JSON
    truncated = classmethod(lambda cls: cls("truncated"))  # half of the JSON body, honestly framed
    short_body = classmethod(lambda cls: cls("short_body"))  # Content-Length promises more than is sent
    reset = classmethod(lambda cls: cls("reset"))  # TCP RST, nothing written


def per_prompt(fault: Fault, times: int = 1, key: Callable[[dict[str, Any]], str] | None = None) -> FaultFn:
    """A fault schedule that hits each distinct request (by `key`, default the prompt) `times` times.

    Independent of arrival order, so it is deterministic under client concurrency.
    """
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def default_key(body: dict[str, Any]) -> str:
        return json.dumps([body.get("messages"), body.get("prompt")], sort_keys=True)

    keyf = key or default_key

    def schedule(n: int, body: dict[str, Any]) -> Fault | None:
        k = keyf(body)
        with lock:
            seen[k] = seen.get(k, 0) + 1
            return fault if seen[k] <= times else None

    return schedule


@dataclass
class Record:
    """One received HTTP request."""

    n: int  # POST number (1-based); 0 for GETs
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    fault: Fault | None = None
    received_at: float = field(default_factory=time.monotonic)


# -- provider modes: what each real provider refuses --------------------------------------------

PROVIDER_MODES = (None, "openai", "anthropic", "gemini", "vllm", "llamacpp")
_NOT_BODY = {"self", "extra_body", "extra_headers", "extra_query", "timeout"}

# Anthropic's OpenAI-compatibility fields (supported or ignored): `provider_rules.ANTHROPIC_COMPAT`.
ANTHROPIC_FIELDS = frozenset(rules.ANTHROPIC_COMPAT) | {"extra_headers"}
# Gemini's OpenAI compatibility: the OpenAI fields it maps (generationConfig) plus its own `extra_body`
# keys; unknown names are an INVALID_ARGUMENT "Unknown name" 400.
GEMINI_FIELDS = frozenset({
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stop", "seed",
    "stream", "stream_options", "response_format", "tools", "tool_choice", "reasoning_effort",
    "presence_penalty", "frequency_penalty", "google", "extra_body",
})
GEMINI_THINKING = {"none": 0, "minimal": 128, "low": 512, "medium": 2048, "high": 4096}


def openai_fields(route: str) -> frozenset[str]:
    """Body fields the openai client itself sends for this route (its create() parameters, 3.57.0)."""
    import inspect

    from openai.resources import completions
    from openai.resources.chat import completions as chat

    create = chat.Completions.create if route == "/v1/chat/completions" else completions.Completions.create
    return frozenset(inspect.signature(create).parameters) - _NOT_BODY


def _model(body: dict[str, Any]) -> str:
    return str(body.get("model") or "").lower().rsplit("/", 1)[-1]


def _default_effort(r: rules.Reasoning) -> str:
    return "none" if "none" in r.efforts else "medium"


def _gemini_version(model: str) -> tuple[int, int] | None:
    m = re.search(r"gemini-(\d+)(?:\.(\d+))?", model)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def thinking_tokens(provider: str | None, body: dict[str, Any]) -> int:
    """Simulated reasoning tokens a request spends inside its token limit (Gemini 2.5+/3; OpenAI
    reasoning models at effort != none), so an answer without headroom comes back cut."""
    model = _model(body)
    effort = body.get("reasoning_effort")
    if provider == "gemini":
        v = _gemini_version(model)
        if v is None or v < (2, 5):
            return 0
        default = "high" if v >= (3, 0) or "pro" in model else "medium"
        return GEMINI_THINKING.get(str(effort or default), 0)
    reasoning = rules.openai_reasoning(model) if provider == "openai" else None
    if reasoning is not None:
        spend = {"none": 0, "minimal": 64, "low": 512, "medium": 2048, "high": 4096, "xhigh": 8192}
        return spend.get(str(effort or _default_effort(reasoning)), 0)
    return 0


def _bad(message: str, kind: str = "invalid_request_error", param: str | None = None) -> tuple[int, dict[str, Any]]:
    return 400, {"error": {"message": message, "type": kind, "param": param, "code": None}}


def refusal(provider: str | None, route: str, body: dict[str, Any]) -> tuple[int, Any] | None:
    """(status, error body) the provider answers this request with, or None when it accepts it."""
    if provider in (None, "vllm"):
        return None  # vLLM serve takes echo, prompt logprobs, top_k, repetition_penalty
    model = _model(body)
    if provider == "llamacpp":
        if route == "/v1/completions" and body.get("echo"):
            return _bad("'echo' is not supported by this server", param="echo")
        return None
    if route != "/v1/chat/completions" and provider in ("anthropic", "gemini"):
        return 404, {"error": {"message": f"{route} is not available on this endpoint", "type": "not_found_error"}}
    if provider == "openai":
        known = openai_fields(route)
        unknown = sorted(set(body) - known)
        if unknown:
            return _bad(f"Unrecognized request argument supplied: {unknown[0]}", param=unknown[0])
        if route == "/v1/completions" and body.get("echo") and body.get("logprobs") is not None:
            return _bad("This model does not support echo with logprobs.", param="echo")
        reasoning = rules.openai_reasoning(model)
        if reasoning is not None:
            effort = body.get("reasoning_effort")
            if effort is not None and effort not in reasoning.efforts:
                return _bad(f"Unsupported value: 'reasoning_effort' does not support '{effort}' with this "
                            f"model. Supported values are: {', '.join(reasoning.efforts)}.", param="reasoning_effort")
            for name in rules.OPENAI_REASONING_REFUSED:
                if body.get(name) not in (None, False):
                    hint = " Use 'max_completion_tokens' instead." if name == "max_tokens" else ""
                    return _bad(f"Unsupported parameter: '{name}' is not supported with this model.{hint}", param=name)
            if (effort or _default_effort(reasoning)) not in reasoning.sampling_efforts:
                for name in ("temperature", "top_p"):
                    if name in body and body[name] != 1:
                        return _bad(f"Unsupported value: '{name}' does not support {body[name]} with this model. "
                                    "Only the default (1) value is supported.", param=name)
                for name in ("logprobs", "top_logprobs"):
                    if body.get(name) not in (None, False):
                        return _bad(f"Unsupported parameter: '{name}' is not supported with this model.", param=name)
        elif body.get("reasoning_effort") is not None:
            return _bad("Unsupported parameter: 'reasoning_effort' is not supported with this model.",
                        param="reasoning_effort")
        stops = body.get("stop")
        if isinstance(stops, list) and len(stops) > rules.OPENAI_MAX_STOP:
            return _bad("'stop': array too long. Expected an array with maximum length 4.", param="stop")
        return None
    if provider == "anthropic":
        unknown = sorted(set(body) - ANTHROPIC_FIELDS)
        if unknown:
            return _bad(f"{unknown[0]}: Extra inputs are not permitted", param=unknown[0])
        if body.get("n", 1) != 1:
            return _bad("n: only n=1 is supported", param="n")
        if "temperature" in body and "top_p" in body and rules.claude_one_sampler(model):
            return _bad("`temperature` and `top_p` cannot both be specified for this model. Please use only one.")
        return None
    if provider == "gemini":
        unknown = sorted(set(body) - GEMINI_FIELDS)
        if unknown:
            return 400, [{"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                    "message": f'Invalid JSON payload received. Unknown name "{unknown[0]}": '
                                               "Cannot find field."}}]
        effort = body.get("reasoning_effort")
        if effort is not None:
            valid = rules.gemini_efforts(model)
            if effort not in valid:
                return 400, [{"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                        "message": f"Invalid reasoning_effort: {effort}. Valid values are: "
                                                   f"{', '.join(valid) or 'none accepted by this model'}"}}]
        stops = body.get("stop")
        if isinstance(stops, list) and len(stops) > 5:
            return 400, [{"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                    "message": "stop_sequences: at most 5 are allowed"}}]
        return None
    return None


def _default_reply(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    users = [m.get("content", "") for m in messages if m.get("role") == "user"]
    last = users[-1] if users else str(body.get("prompt", ""))
    return f"reply to: {last}"


def _as_fault_fn(faults: FaultSpec) -> FaultFn:
    if faults is None:
        return lambda n, body: None
    if isinstance(faults, Mapping):
        table = dict(faults)
        return lambda n, body: table.get(n)
    if not isinstance(faults, Sequence):
        return faults  # a function (n, body) -> Fault | None
    rules = list(faults)

    def by_predicate(n: int, body: dict[str, Any]) -> Fault | None:
        for pred, fault in rules:
            if pred(n, body):
                return fault
        return None

    return by_predicate


class OpenAIServer:
    """The server object; use `serve(...)` for a context manager. Thread-safe."""

    def __init__(
        self,
        reply_fn: ReplyFn | None = None,
        faults: FaultSpec = None,
        model: str = "fake-model",
        logprob_fn: Callable[[str], float] = fake_logprob,
        top_logprobs_fn: Callable[[dict[str, Any], str], list[tuple[str, float]]] | None = None,
        provider: str | None = None,
    ):
        if provider not in PROVIDER_MODES:
            raise ValueError(f"provider mode must be one of {PROVIDER_MODES}, not {provider!r}")
        self.provider = provider
        self.refused: list[dict[str, Any]] = []
        self.reply_fn = reply_fn or _default_reply
        self.fault_fn = _as_fault_fn(faults)
        self.model = model
        self.logprob_fn = logprob_fn
        self.top_logprobs_fn = top_logprobs_fn or self._default_top_logprobs
        self.records: list[Record] = []
        self._lock = threading.Lock()
        self._prompt_cache: dict[str, list[list[str]]] = {}  # prompt_cache_key -> earlier prompts' tokens
        self._posts = 0
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.routes: dict[str, Callable[[dict[str, Any]], Any]] = {
            "/v1/chat/completions": self.chat_response, "/v1/completions": self.completion_response}

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> OpenAIServer:
        handler = type("Handler", (_Handler,), {"server_state": self})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False  # a handler sleeping in a delay fault must not block stop()
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- what was received -------------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """JSON bodies of all POST requests, in arrival order."""
        with self._lock:
            return [r.body for r in self.records if r.method == "POST" and r.body is not None]

    @property
    def n_posts(self) -> int:
        with self._lock:
            return self._posts

    def clear(self) -> None:
        """Forget received requests (the POST counter keeps counting, so schedules stay valid)."""
        with self._lock:
            self.records.clear()

    def _record(self, method: str, path: str, headers: dict[str, str], body: dict[str, Any] | None) -> Record:
        with self._lock:
            n = 0
            if method == "POST":
                self._posts += 1
                n = self._posts
            rec = Record(n, method, path, headers, body)
            self.records.append(rec)
            return rec

    # -- responses ---------------------------------------------------------------------------

    def refuse(self, route: str, body: dict[str, Any], headers: Mapping[str, str]) -> tuple[int, Any] | None:
        """(status, error body) for a request the emulated provider refuses (subclasses: their own rules)."""
        return refusal(self.provider, route, body)

    def parse_body(self, headers: Mapping[str, str], raw: bytes) -> dict[str, Any]:
        """A POST body as a dict (JSON here; ValueError: a 400). Subclasses read other encodings."""
        return json.loads(raw.decode("utf-8")) if raw else {}

    def get(self, route: str) -> tuple[int, Any] | None:
        """(status, JSON payload or raw bytes) of a GET route, None for an unknown one."""
        if route == "/v1/models":
            return 200, {"object": "list",
                         "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "prbench"}]}
        return None

    def _default_top_logprobs(self, body: dict[str, Any], token: str) -> list[tuple[str, float]]:
        """The generated token first, its other-spacing variant, then fillers; decreasing."""
        stripped = token.strip()
        variant = " " + stripped if not token.startswith(" ") else stripped
        out = [(token, -0.25), (variant, -2.0)]
        value = -5.0
        for filler in FILLER_TOKENS:
            if filler not in (t for t, _ in out):
                out.append((filler, value))
                value -= 0.5
        return out

    def _limit(self, text: str, body: dict[str, Any]) -> tuple[str, str]:
        stops = body.get("stop") or []
        if isinstance(stops, str):
            stops = [stops]
        finish = "stop"
        cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
        if cut >= 0:
            text = text[:cut]
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if limit is not None and self.provider in ("gemini", "openai"):
            limit = int(limit) - thinking_tokens(self.provider, body)  # thinking is spent first
        tokens = fake_tokenize(text)
        if limit is not None and len(tokens) > max(0, int(limit)):
            text, finish = "".join(tokens[: max(0, int(limit))]), "length"
        return text, finish

    def chat_response(self, body: dict[str, Any]) -> dict[str, Any]:
        text, finish = self._limit(self.reply_fn(body), body)
        tokens = fake_tokenize(text)
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish,
            "logprobs": None,
        }
        if body.get("logprobs") and self.provider not in ("anthropic", "gemini"):  # ignored there
            k = min(int(body.get("top_logprobs") or 0), 20)
            content = []
            for tok in tokens:
                top_all = self.top_logprobs_fn(body, tok)
                own = dict(top_all).get(tok, self.logprob_fn(tok))
                content.append(
                    {
                        "token": tok,
                        "logprob": own,
                        "bytes": list(tok.encode("utf-8")),
                        "top_logprobs": [
                            {"token": t, "logprob": lp, "bytes": list(t.encode("utf-8"))}
                            for t, lp in top_all[:k]
                        ],
                    }
                )
            choice["logprobs"] = {"content": content}
        prompt_tokens = sum(len(fake_tokenize(str(m.get("content", "")))) for m in body.get("messages") or [])
        thought = thinking_tokens(self.provider, body)
        usage_extra = {"prompt_tokens_details": {"cached_tokens": self._cached(body)}} if self.provider == "openai" \
            else {}
        return {
            "id": f"chatcmpl-{self.n_posts}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(tokens) + thought,
                "total_tokens": prompt_tokens + len(tokens) + thought,
                **usage_extra,
            },
        }

    def _cached(self, body: dict[str, Any]) -> int:
        """Prompt tokens OpenAI would serve from its cache: the longest start shared with an earlier prompt of
        the same `prompt_cache_key`, counted from 1,024 tokens in steps of 128 (developers.openai.com/api/docs/
        guides/prompt-caching: "enabled automatically for prompts that are 1024 tokens or longer", hits "in
        128-token increments"); 0 below that."""
        toks = [t for m in body.get("messages") or [] for t in fake_tokenize(str(m.get("content", "")))]
        key = str(body.get("prompt_cache_key"))
        with self._lock:
            seen = self._prompt_cache.setdefault(key, [])
            best = max((next((i for i, (a, b) in enumerate(zip(toks, old)) if a != b), min(len(toks), len(old)))
                        for old in seen), default=0)
            seen.append(toks)
        best = min(best, len(toks) - 1)  # the last token is always computed
        return 0 if best < 1024 else 1024 + (best - 1024) // 128 * 128

    def completion_response(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body.get("prompt", "")
        if isinstance(prompt, list):
            prompt = prompt[0] if prompt else ""
        generated, finish = self._limit(self.reply_fn(body), body)
        echo = bool(body.get("echo"))
        text = (prompt + generated) if echo else generated
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        if body.get("logprobs") is not None:
            k = int(body.get("logprobs") or 0)
            tokens, offsets, lps, tops = [], [], [], []
            pos = 0
            parts = ([(t, True) for t in fake_tokenize(prompt)] if echo else []) + [
                (t, False) for t in fake_tokenize(generated)
            ]
            for j, (tok, _) in enumerate(parts):
                tokens.append(tok)
                offsets.append(pos)
                pos += len(tok)
                lp = None if (echo and j == 0) else self.logprob_fn(tok)
                lps.append(lp)
                tops.append(None if lp is None else dict([(tok, lp)][: max(k, 1)]))
            choice["logprobs"] = {
                "tokens": tokens,
                "token_logprobs": lps,
                "top_logprobs": tops,
                "text_offset": offsets,
            }
        n_prompt = len(fake_tokenize(prompt))
        n_gen = len(fake_tokenize(generated))
        return {
            "id": f"cmpl-{self.n_posts}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [choice],
            "usage": {
                "prompt_tokens": n_prompt,
                "completion_tokens": n_gen,
                "total_tokens": n_prompt + n_gen,
            },
        }


class _Handler(BaseHTTPRequestHandler):
    server_state: OpenAIServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        return

    def _headers_dict(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items()}

    def _send_json(self, status: int, payload: Any, extra_headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        self._send_bytes(status, data, extra_headers)

    def _send_bytes(
        self,
        status: int,
        data: bytes,
        extra_headers: Mapping[str, str] | None = None,
        length: int | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data) if length is None else length))
        for k, v in (extra_headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def do_GET(self) -> None:
        state = self.server_state
        state._record("GET", self.path, self._headers_dict(), None)
        answer = state.get(self.path.split("?")[0].rstrip("/"))
        if answer is None:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        elif isinstance(answer[1], bytes):
            self._send_bytes(answer[0], answer[1])
        else:
            self._send_json(*answer)

    def do_POST(self) -> None:
        state = self.server_state
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = state.parse_body(self._headers_dict(), raw)
        except ValueError:
            state._record("POST", self.path, self._headers_dict(), None)
            self._send_json(
                400, {"error": {"message": "request body is not JSON", "type": "invalid_request_error"}}
            )
            return
        rec = state._record("POST", self.path, self._headers_dict(), body)
        fault = state.fault_fn(rec.n, body)
        rec.fault = fault
        route = self.path.split("?")[0].rstrip("/")
        if route not in state.routes:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        refused = state.refuse(route, body, rec.headers)
        if refused is not None:
            with state._lock:
                state.refused.append(body)
            self._send_json(refused[0], refused[1])
            return
        if fault is not None and fault.kind == "reset":
            self._reset()
            return
        if fault is not None and fault.kind == "status":
            headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
            if fault.retry_after_ms is not None:
                headers["retry-after-ms"] = fault.retry_after_ms
            if fault.body is not None:
                self._send_json(fault.status, fault.body, headers)
                return
            kind = (
                "rate_limit_error"
                if fault.status == 429
                else "server_error"
                if fault.status >= 500
                else "error"
            )
            self._send_json(
                fault.status,
                {"error": {"message": f"scripted {fault.status}", "type": kind, "code": None}},
                headers,
            )
            return
        if fault is not None and fault.kind == "delay":
            deadline = time.monotonic() + fault.seconds
            while time.monotonic() < deadline and not state._stopping.is_set():
                time.sleep(0.02)
        payload = state.routes[route](body)
        data = json.dumps(payload).encode("utf-8")
        if fault is not None and fault.kind == "malformed":
            self._send_bytes(200, b'{"id": "x", "choices": [ <<this is not json>>')
        elif fault is not None and fault.kind == "truncated":
            self._send_bytes(200, data[: len(data) // 2])
        elif fault is not None and fault.kind == "short_body":
            self.close_connection = True
            self._send_bytes(200, data[: len(data) // 2], length=len(data))
            self._hard_close()
        else:
            self._send_bytes(200, data)

    def _reset(self) -> None:
        """Abort the connection with a TCP RST (SO_LINGER 0) and write nothing."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._hard_close()

    def _hard_close(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.close()

    def handle(self) -> None:
        # A client that gave up (timeout) leaves a dead socket behind: not an error of the server.
        with contextlib.suppress(ConnectionError, OSError, ValueError):
            super().handle()

    def finish(self) -> None:
        with contextlib.suppress(ConnectionError, OSError, ValueError):
            super().finish()


@contextlib.contextmanager
def serve(reply_fn: ReplyFn | None = None, **options: Any) -> Iterator[OpenAIServer]:
    """Run an `OpenAIServer(reply_fn, **options)` on 127.0.0.1 (ephemeral port) for the block."""
    server = OpenAIServer(reply_fn, **options).start()
    try:
        yield server
    finally:
        server.stop()


def logsumexp(values: Sequence[float]) -> float:
    """Helper for tests that fold token variants like the engines do."""
    finite = [v for v in values if v != -math.inf]
    if not finite:
        return -math.inf
    m = max(finite)
    return m + math.log(sum(math.exp(v - m) for v in finite))
