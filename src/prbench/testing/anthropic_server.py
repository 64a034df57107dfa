"""A strict loopback stand-in of Anthropic's native Messages API, for tests.

Why: the native engine (`anthropic:`) must be tested against a server that refuses what the real
API refuses, with rules from Anthropic's own client and documents (`provider_rules`, which cites
them), never from prbench's provider module:

- `POST /v1/messages`: `max_tokens`, `messages`, `model` required ("<field>: Field required");
  any field the client 2.10.0 does not send under the request's `anthropic-version` is "<field>:
  Extra inputs are not permitted" (under 2026-10-21, the client's default, that includes
  temperature / top_p / top_k); under 2023-06-01 the sampling fields are accepted, temperature in
  [0, 1], and temperature with top_p is refused on the models that take only one.
- `POST /v1/messages/count_tokens`: `{"input_tokens": n}` (the stand-in's fake tokens).

Replies carry `usage` (input tokens apart from cache reads and writes, as Anthropic counts them;
output; cache read / creation tokens: the prompt up to its last `cache_control` mark is written once and read
by later requests with the same prefix, never under `min_cache_tokens`, 1,024 by default as the prompt-
caching page states for most models), `stop_reason` end_turn,
max_tokens or stop_sequence. Faults, records and `reply_fn` work as in `openai_server`; the base
URL for the anthropic client is `srv.root_url` (the client adds `/v1/...`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from prbench.testing import provider_rules as rules
from prbench.testing.openai_server import OpenAIServer, ReplyFn, fake_tokenize


def anthropic_error(status: int, message: str, kind: str = "invalid_request_error") -> tuple[int, dict[str, Any]]:
    """Anthropic's error body shape."""
    return status, {"type": "error", "error": {"type": kind, "message": message}}


def native_refusal(body: dict[str, Any], api_version: str) -> tuple[int, dict[str, Any]] | None:
    """What the native Messages API answers this body with under `api_version`, or None when accepted."""
    for name in rules.ANTHROPIC_NATIVE_REQUIRED:
        if name not in body:
            return anthropic_error(400, f"{name}: Field required")
    unknown = sorted(set(body) - rules.anthropic_native_fields(api_version))
    if unknown:
        return anthropic_error(400, f"{unknown[0]}: Extra inputs are not permitted")
    if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
        return anthropic_error(400, "max_tokens: Input should be greater than or equal to 1")
    if any(m.get("role") not in ("user", "assistant") for m in body["messages"]):
        return anthropic_error(400, "messages: roles must be 'user' or 'assistant' (put the system prompt in `system`)")
    t = body.get("temperature")
    if t is not None and not 0.0 <= float(t) <= 1.0:
        return anthropic_error(400, "temperature: Input should be less than or equal to 1")
    if "temperature" in body and "top_p" in body and rules.claude_one_sampler(str(body["model"])):
        return anthropic_error(400, "`temperature` and `top_p` cannot both be specified for this model. "
                                    "Please use only one.")
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content or [] if isinstance(block, dict))


class AnthropicServer(OpenAIServer):
    """The native Messages API on 127.0.0.1 (see module docstring)."""

    def __init__(self, reply_fn: ReplyFn | None = None, *, min_cache_tokens: int = 1024, **options: Any):
        super().__init__(reply_fn, **options)
        self.routes = {"/v1/messages": self.message_response, "/v1/messages/count_tokens": self.count_response}
        self.cache_reads = 0  # input tokens served from the prompt cache (a prefix seen before)
        self.cache_writes = 0
        self.min_cache_tokens = min_cache_tokens  # a shorter prefix is not cached (the documented minimum)
        self._cached_prefixes: set[str] = set()

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def refuse(self, route: str, body: dict[str, Any], headers: Mapping[str, str]) -> tuple[int, Any] | None:
        version = next((v for k, v in headers.items() if k.lower() == "anthropic-version"), None)
        if version is None:
            return anthropic_error(400, "anthropic-version: header is required")
        if route == "/v1/messages/count_tokens":
            return None
        return native_refusal(body, version)

    def _prompt_tokens(self, body: dict[str, Any]) -> int:
        system = _text(body.get("system"))
        return len(fake_tokenize(system)) + sum(len(fake_tokenize(_text(m.get("content")))) for m in body["messages"])

    def _cache(self, body: dict[str, Any], n_in: int) -> tuple[int, int]:
        """(read, written) prompt-cache tokens: the prompt up to its last `cache_control` mark (top-level: all of
        it), read when an earlier request wrote the same prefix, written otherwise; none under the minimum."""
        prefix: Any = None
        if body.get("cache_control"):
            prefix = (body.get("system"), body["messages"])
        for i, m in enumerate(body["messages"]):
            blocks = m.get("content") if isinstance(m.get("content"), list) else []
            for j, block in enumerate(blocks):
                if isinstance(block, dict) and block.get("cache_control"):
                    prefix = (body.get("system"), [*body["messages"][:i], {**m, "content": blocks[:j + 1]}])
        if prefix is None:
            return 0, 0
        size = len(fake_tokenize(_text(prefix[0]))) + sum(len(fake_tokenize(_text(m.get("content"))))
                                                           for m in prefix[1])
        if size < self.min_cache_tokens:
            return 0, 0
        key = repr(prefix)
        with self._lock:
            hit = key in self._cached_prefixes
            self._cached_prefixes.add(key)
            self.cache_reads += size if hit else 0
            self.cache_writes += 0 if hit else size
        return (size, 0) if hit else (0, size)

    def count_response(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"input_tokens": self._prompt_tokens(body)}

    def message_response(self, body: dict[str, Any]) -> dict[str, Any]:
        as_openai = {"model": body["model"], "messages": [
            {"role": m["role"], "content": _text(m.get("content"))} for m in body["messages"]]}
        text = self.reply_fn(as_openai)
        stop, stop_reason, matched = body.get("stop_sequences") or [], "end_turn", None
        cut = min(((text.find(s), s) for s in stop if s and s in text), default=None)
        if cut is not None:
            text, stop_reason, matched = text[: cut[0]], "stop_sequence", cut[1]
        tokens = fake_tokenize(text)
        if len(tokens) > body["max_tokens"]:
            text, stop_reason, matched = "".join(tokens[: body["max_tokens"]]), "max_tokens", None
        n_in = self._prompt_tokens(body)
        cached, created = self._cache(body, n_in)
        return {"id": f"msg_{self.n_posts:06d}", "type": "message", "role": "assistant", "model": body["model"],
                "content": [{"type": "text", "text": text}], "stop_reason": stop_reason, "stop_sequence": matched,
                "usage": {"input_tokens": n_in - cached - created, "output_tokens": len(fake_tokenize(text)),
                          "cache_read_input_tokens": cached, "cache_creation_input_tokens": created}}


@contextlib.contextmanager
def serve_anthropic(reply_fn: ReplyFn | None = None, **options: Any) -> Iterator[AnthropicServer]:
    """Run an `AnthropicServer` on 127.0.0.1 (ephemeral port) for the block."""
    server = AnthropicServer(reply_fn, **options)
    server.start()
    try:
        yield server
    finally:
        server.stop()
