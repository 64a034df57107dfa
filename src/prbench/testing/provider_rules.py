"""The stand-ins' own rule tables, written from the providers' documents and SDK types (never from
`prbench.engines.providers`, whose rules they check).

Each rule carries its source. `tests/test_provider_rules.py` checks that prbench's provider table
agrees with these on every documented case (`DOCUMENTED_MODELS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

READ = "read 2026-12"


@dataclass(frozen=True)
class Reasoning:
    """An OpenAI reasoning family: the efforts it accepts and those under which it samples like a chat model."""

    pattern: str  # matched at the start of the model name
    efforts: tuple[str, ...]
    sampling_efforts: tuple[str, ...]  # effort values under which temperature / top_p / logprobs are accepted
    source: str


# Longest pattern first. Sources: OpenAI "Reasoning models" guide and model pages (platform.openai.com/
# docs/guides/reasoning, /docs/models/gpt-5.1, /docs/guides/latest-model "GPT-5.1 ... reasoning effort none:
# temperature, top_p and logprobs are supported only when reasoning effort is none"; gpt-5.1 answers
# "Supported values are: 'none', 'low', 'medium', and 'high'" to `minimal`; xhigh arrives with
# gpt-5.1-codex-max and the gpt-5.2 family), the openai client 3.57.0 `types/shared/reasoning_effort.py`
# (Literal none/minimal/low/medium/high/xhigh: the union over models, not one model's list).
OPENAI_REASONING = (
    Reasoning(r"gpt-5\.1-codex-max", ("low", "medium", "high", "xhigh"), (), f"OpenAI model page gpt-5.1-codex-max, {READ}"),
    Reasoning(r"gpt-5\.1(?!-chat)", ("none", "low", "medium", "high"), ("none",),
              f"OpenAI guide latest-model (GPT-5.1: none default; sampling only at none), {READ}"),
    Reasoning(r"gpt-5\.[2-9](?!-chat)", ("none", "low", "medium", "high", "xhigh"), ("none",),
              f"OpenAI model pages gpt-5.2+ (none default, xhigh added), {READ}"),
    Reasoning(r"gpt-5(?!\.)(?!-chat)", ("minimal", "low", "medium", "high"), (),
              f"OpenAI guide reasoning (GPT-5: minimal..high, no sampling parameters), {READ}"),
    Reasoning(r"o\d", ("low", "medium", "high"), (), f"OpenAI guide reasoning (o-series: low/medium/high), {READ}"),
)
# Refused by every reasoning model whatever the effort: openai 3.57.0 resources/chat/completions/completions.py
# ("max_tokens ... not compatible with o-series models") and the reasoning guide's unsupported list.
OPENAI_REASONING_REFUSED = ("max_tokens", "stop")
OPENAI_MAX_STOP = 4  # openai 3.57.0 types/chat/completion_create_params.py: "Up to 4 sequences"


def openai_reasoning(model: str) -> Reasoning | None:
    name = model.lower().rsplit("/", 1)[-1]
    return next((r for r in OPENAI_REASONING if re.match(r.pattern, name)), None)


# Claude models that refuse `temperature` and `top_p` together (400 "`temperature` and `top_p` cannot both
# be specified for this model"): Anthropic models overview / migration guide for Claude 4.5 and Opus 4.1, READ.
CLAUDE_ONE_SAMPLER_FROM = {"sonnet": (4, 5), "haiku": (4, 5), "opus": (4, 1)}
CLAUDE_SOURCE = f"docs.claude.com models overview and 'Migrating to Claude 4.5' (sampling parameters), {READ}"


def claude_one_sampler(model: str) -> bool:
    name = model.lower()
    for family, first in CLAUDE_ONE_SAMPLER_FROM.items():
        m = re.search(rf"{family}-(\d+)(?:-(\d{{1,2}})(?!\d))?", name)
        if m:
            return (int(m.group(1)), int(m.group(2) or 0)) >= first
    major = re.search(r"claude-(?:[a-z]+-)?(\d+)", name)
    return major is not None and int(major.group(1)) >= 5


# Anthropic's OpenAI SDK compatibility page (docs.claude.com/en/api/openai-sdk, "Request fields" table,
# READ): "supported" fields act, "ignored" ones are accepted and have no effect; temperature is capped at 1;
# n must be 1. Fields the table does not list are refused by the stand-in (the page does not say).
ANTHROPIC_COMPAT = {
    **dict.fromkeys(("model", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options",
                     "top_p", "parallel_tool_calls", "stop", "temperature", "n", "tools", "tool_choice",
                     "functions", "function_call", "thinking"), "supported"),
    **dict.fromkeys(("logprobs", "metadata", "response_format", "prediction", "presence_penalty",
                     "frequency_penalty", "seed", "service_tier", "audio", "logit_bias", "store", "user",
                     "modalities", "top_logprobs", "reasoning_effort"), "ignored"),
}
ANTHROPIC_MAX_TEMPERATURE = 1.0
ANTHROPIC_SOURCE = f"docs.claude.com/en/api/openai-sdk (request fields table), {READ}"

# Gemini's OpenAI compatibility (ai.google.dev/gemini-api/docs/openai, thinking section, READ): reasoning_effort
# maps to a thinking level; Gemini 3 Pro takes low/high, other 2.5+/3 models none/low/medium/high; "minimal"
# is refused; models before 2.5 do not think.
GEMINI_SOURCE = f"ai.google.dev/gemini-api/docs/openai (reasoning_effort), {READ}"


def gemini_efforts(model: str) -> tuple[str, ...]:
    m = re.search(r"gemini-(\d+)(?:\.(\d+))?", model.lower())
    v = (int(m.group(1)), int(m.group(2) or 0)) if m else None
    if v is None or v < (2, 5):
        return ()
    if v >= (3, 0) and "pro" in model.lower():
        return ("low", "high")
    if "pro" in model.lower():
        return ("low", "medium", "high")  # 2.5 Pro cannot turn thinking off
    return ("none", "low", "medium", "high")


# The documented cases the agreement test walks: every family above, with dated and aliased names.
DOCUMENTED_MODELS = {
    "openai": ("gpt-5.1", "gpt-5.1-2025-11-13", "gpt-5.2", "gpt-5", "gpt-5-mini", "gpt-5-nano", "o3", "o3-mini",
               "o4-mini", "o1", "gpt-4.1", "gpt-4.1-mini", "gpt-4o", "gpt-5-chat-latest"),
    "anthropic": ("claude-sonnet-4-5-20250929", "claude-sonnet-4-6", "claude-sonnet-4-20250514", "claude-opus-4-1",
                  "claude-opus-4-20250514", "claude-opus-4-5", "claude-haiku-4-5", "claude-3-5-haiku-latest",
                  "claude-3-7-sonnet-latest"),
    "gemini": ("gemini-2.0-flash", "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.5-pro",
               "gemini-3-pro-preview", "gemini-3-flash"),
}


# -- Anthropic's native Messages API -----------------------------------------------------------------------
# Body fields: the parameters of `Messages.create` in the anthropic client 2.10.0
# (`anthropic/resources/messages/messages.py`, mirrored by `types/message_create_params.py`), read from the
# installed client so the list follows its version. `max_tokens`, `messages` and `model` are Required there.
# API versions (header `anthropic-version`): the client 2.x sends 2026-10-21 (`anthropic/_constants.py`
# ANTHROPIC_API_VERSION), under which temperature, top_p and top_k are "Extra inputs are not permitted" at
# any value (they are gone from the 2.x types); under 2023-06-01 they are accepted, temperature in [0, 1],
# and the models of `claude_one_sampler` refuse temperature and top_p together.
ANTHROPIC_NATIVE_REQUIRED = ("max_tokens", "messages", "model")
ANTHROPIC_SAMPLING_FIELDS = ("temperature", "top_p", "top_k")
ANTHROPIC_SAMPLING_VERSIONS = ("2023-06-01",)
ANTHROPIC_NATIVE_SOURCE = "anthropic 2.10.0 resources/messages/messages.py (Messages.create), _constants.py"
_NOT_BODY = {"self", "extra_headers", "extra_query", "extra_body", "timeout"}


def anthropic_native_fields(api_version: str) -> frozenset[str]:
    """Body fields the native Messages API takes under `api_version` (see the sources above)."""
    import inspect

    from anthropic.resources.messages import Messages

    fields = frozenset(inspect.signature(Messages.create).parameters) - _NOT_BODY
    return fields | set(ANTHROPIC_SAMPLING_FIELDS) if api_version in ANTHROPIC_SAMPLING_VERSIONS else fields
