"""Claude through Anthropic's native Messages API (`anthropic:<model>`, the official `anthropic` client).

Why native: Anthropic documents its OpenAI-compatible endpoint for testing and comparison; batches,
prompt caching and token counting exist only natively. The retries, rate limits, caching, key
handling and cost ledger are `OpenAIEngine`'s (this class only changes the wire format).

Request rules (sources: the anthropic client 2.10.0 `resources/messages/messages.py` and
`_constants.py`; the Claude 4.5 migration guide):
- `max_tokens` is required; system messages go to the top-level `system`; `stop` becomes
  `stop_sequences`; there is no seed (requests are still cached by their seed).
- The client sends `anthropic-version: 2026-10-21`, under which temperature, top_p and top_k are
  refused at any value: nothing of the sampling is sent and the run's `adjusted` counts it (the
  model samples at its own defaults). `api_version="2023-06-01"` sends temperature (capped at 1),
  or top_p alone on the models that refuse both.
- Prompt caching (`prompt_cache`, on by default): when a caller marks the stable start of its prompt
  (`engines.base.stable_prefix`: a judge's instructions, the person's context and the question, before
  the responses), that block gets a `cache_control` breakpoint (`TextBlockParam.cache_control`, anthropic
  2.16.0 `types/text_block_param.py`), so both orders of a pair and a judge's retries read it at 0.1x
  input after one write at 1.25x. Unmarked prompts are not cached (a write that nothing reads costs
  more). Prefixes under the model's minimum (1,024 tokens, more for some models) are not cached by
  Anthropic: the usage then shows no cache tokens and the ledger bills plain input.
- No logprobs: `judge --mode likelihood` and `lik:`/`pmi:` fail at once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from prbench.engines import batch, providers
from prbench.engines.base import GenParams, Messages, plain, stable_prefix
from prbench.engines.openai_engine import HTTPOptions, OpenAIEngine, split_query
from prbench.errors import SpecError
from prbench.runtime.extras import require
from prbench.store.runs import redact_url

DEFAULT_BASE_URL = "https://api.anthropic.com"
SAMPLING_VERSIONS = ("2023-06-01",)  # API versions that still take temperature / top_p


class AnthropicOptions(HTTPOptions):
    """Options of Anthropic's native Messages API (`anthropic:` engines)."""

    api_version: str | None = None
    prompt_cache: bool = True


class AnthropicEngine(OpenAIEngine):
    """Claude models over the native Messages API (see module docstring)."""

    options_model = AnthropicOptions
    _body_key = "content"

    # The OpenAI engine's transport keywords that the native API shares; the rest (tokenizer, reasoning
    # effort, extra body ...) mean nothing to the Messages API and are refused.
    TRANSPORT = frozenset({"concurrency", "timeout", "max_retries", "cache", "backoff_base", "backoff_max",
                           "default_params", "rpm", "tpm", "rate_limit_retries", "no_api_key"})

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str | None = None,
                 api_version: str | None = None, prompt_cache: bool = True, **transport: Any):
        if not model:
            raise SpecError("anthropic engine needs a model name, e.g. anthropic:claude-sonnet-4-5")
        if unknown := sorted(set(transport) - self.TRANSPORT):
            raise TypeError(f"AnthropicEngine() got unexpected keyword arguments {unknown}")
        super().__init__(model, base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL,
                         api_key_env=api_key_env or "ANTHROPIC_API_KEY", provider="anthropic",
                         prompt_cache=prompt_cache, **transport)
        self.spec = f"anthropic:{model}"
        self._key_named = api_key_env is not None
        self.api_version = api_version

    def __repr__(self) -> str:
        return f"AnthropicEngine(model={self.model!r}, base_url={redact_url(self.base_url)!r}, api_key_env={self.api_key_env!r})"

    def fingerprint(self) -> dict[str, Any]:
        fp: dict[str, Any] = {"engine": "anthropic", "model": self.model, "base_url": self.base_url}
        if self.api_version:
            fp["api_version"] = self.api_version
        return fp  # prompt caching changes the price, not the reply

    def batch_api(self) -> batch.BatchAPI:
        """Message Batches (`/v1/messages/batches`)."""
        return batch.AnthropicBatches(self)

    def _new_client(self, key: str) -> Any:
        anthropic = require("anthropic", "api")
        headers = {"anthropic-version": self.api_version} if self.api_version else None
        base, query = split_query(self.base_url)  # a query stays a query (see `split_query`)
        return anthropic.Anthropic(api_key=key, base_url=base, default_query=query or None, max_retries=0,
                                   timeout=self.timeout, default_headers=headers)

    def _endpoint(self, endpoint: str) -> tuple[Any, Any]:
        if endpoint != "chat":
            raise SpecError(f"{self.spec}: the Messages API has no {endpoint} endpoint")
        return require("anthropic", "api"), self._get_client().messages.with_raw_response.create

    def _chat(self, messages: Messages, p: GenParams) -> tuple[dict[str, Any], dict[str, Any]]:
        """(Messages API body, sampling fields sent as extra_body under an API version that takes them)."""
        notes: dict[str, int] = {}
        kwargs, _ = providers.chat_request(self.profile, self.model, plain(messages), p, notes)
        body = native_body(self.model, plain(messages), kwargs["max_tokens"], kwargs.get("stop") or ())
        prefix = stable_prefix(messages)
        last = body["messages"][-1] if body["messages"] else None
        if self.prompt_cache and prefix and last is not None and last["content"] != prefix:
            last["content"] = [{"type": "text", "text": prefix, "cache_control": {"type": "ephemeral"}},
                               {"type": "text", "text": last["content"][len(prefix):]}]
        sampling: dict[str, Any] = {k: kwargs[k] for k in ("temperature", "top_p") if k in kwargs}
        if self.api_version not in SAMPLING_VERSIONS and sampling:
            notes["sampling not sent (API version 2026-10-21 takes no temperature/top_p)"] = 1
            sampling = {}
        self._note(notes)
        return body, sampling

    def _usage(self, data: dict[str, Any]) -> dict[str, int]:
        """Anthropic counts cache reads and writes apart from `input_tokens`; the ledger wants the total."""
        u = data.get("usage") or {}
        read, write = int(u.get("cache_read_input_tokens") or 0), int(u.get("cache_creation_input_tokens") or 0)
        return {"input_tokens": int(u.get("input_tokens") or 0) + read + write, "cached_input_tokens": read,
                "cache_write_input_tokens": write, "output_tokens": int(u.get("output_tokens") or 0)}

    def _reply(self, data: dict[str, Any]) -> tuple[Any, str, int | None]:
        blocks = data.get("content") or []
        text = "".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
        return text, data.get("stop_reason") or "end_turn", (data.get("usage") or {}).get("output_tokens")

    def count_tokens(self, messages: Messages) -> int:
        """Input tokens of one prompt, counted by the provider (free; for dry runs and --max-usd estimates)."""
        body = native_body(self.model, plain(messages), 1, ())
        body.pop("max_tokens")
        return int(self._get_client().messages.count_tokens(**body).input_tokens)


def native_body(model: str, messages: Messages, max_tokens: int, stop: Sequence[str]) -> dict[str, Any]:
    """A Messages API body: system messages joined into `system`, whitespace-only stops dropped."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] in ("system", "developer"))
    body: dict[str, Any] = {"model": model, "max_tokens": int(max_tokens),
                            "messages": [{"role": m["role"], "content": m["content"]} for m in messages
                                         if m["role"] in ("user", "assistant")]}
    if system:
        body["system"] = system
    stops = [s for s in stop if s.strip()]
    if stops:
        body["stop_sequences"] = stops
    return body
