"""Provider profiles for OpenAI-compatible endpoints: what each one accepts, so nothing refused is sent.

Why: the same `chat.completions` request means different things per provider. Claude Sonnet
4.5+/Opus 4.1+/Haiku 4.5 answer 400 to `temperature` and `top_p` together; GPT-5.x and o-series
reasoning models refuse `max_tokens` (they take `max_completion_tokens`) and `stop`, and any
non-default `temperature`/`top_p` and `logprobs` except GPT-5.1+ at reasoning effort `none`
(`OPENAI_REASONING`: efforts per family, `xhigh` from GPT-5.2 on); Gemini 2.5/3 spend thinking tokens inside
`max_tokens`, so a 256-token judge budget comes back empty; llama.cpp has no `echo`; Anthropic's
and Gemini's compatibility layers return no logprobs. A 400 is final, so every such request would
be an invalid record. A profile is chosen from the base URL's host, else the model family, and
can be forced (`provider=` / `--provider openai|anthropic|gemini|vllm|llamacpp|generic`).

Sources (read 2026-12): the openai python client 3.57.0 (`resources/chat/completions/completions.py`:
`max_tokens` "not compatible with o-series models", `ReasoningEffort` in `types/shared/reasoning_effort.py`);
Anthropic's "OpenAI SDK compatibility" page (platform.claude.com/docs/en/api/openai-sdk: field table,
temperature capped at 1, logprobs/seed/reasoning_effort ignored, n must be 1) and its 400 "temperature
and top_p cannot both be specified for this model"; Gemini's OpenAI compatibility (reasoning_effort
maps to thinking level; Gemini 3 Pro takes low/high only, Flash none/low/medium/high, "minimal" is
refused; thinking counts against max_tokens); vLLM `serve` (echo, prompt logprobs, top_k,
repetition_penalty) and llama.cpp `server` (top_k, repeat_penalty, top_logprobs, no echo).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import asdict, dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from prbench.engines.base import GenParams, Messages
from prbench.errors import SpecError

PROVIDERS = ("openai", "anthropic", "gemini", "vllm", "llamacpp", "generic")
READ = "read 2026-12"


@dataclass(frozen=True)
class Reasoning:
    """One OpenAI reasoning family: accepted efforts (the first is sent by default) and the efforts
    under which it also takes temperature, top_p and logprobs like a chat model."""

    pattern: str
    efforts: tuple[str, ...]
    sampling_at: tuple[str, ...]
    source: str


# Sources: OpenAI's reasoning guide and model pages (GPT-5.1: efforts none/low/medium/high, none the
# default, "temperature, top_p and logprobs are supported only with reasoning effort none"; xhigh from
# gpt-5.1-codex-max and the gpt-5.2 family on; GPT-5: minimal..high; o-series: low/medium/high).
OPENAI_REASONING = (
    Reasoning(r"gpt-5\.1-codex-max", ("low", "medium", "high", "xhigh"), (), f"OpenAI model page gpt-5.1-codex-max, {READ}"),
    Reasoning(r"gpt-5\.1(?!-chat)", ("none", "low", "medium", "high"), ("none",),
              f"OpenAI guide latest-model, GPT-5.1 reasoning effort none, {READ}"),
    Reasoning(r"gpt-5\.[2-9](?!-chat)", ("none", "low", "medium", "high", "xhigh"), ("none",),
              f"OpenAI model pages gpt-5.2+, {READ}"),
    Reasoning(r"gpt-5(?!\.)(?!-chat)", ("minimal", "low", "medium", "high"), (), f"OpenAI guide reasoning, GPT-5, {READ}"),
    Reasoning(r"o\d", ("low", "medium", "high"), (), f"OpenAI guide reasoning, o-series, {READ}"),
)
SOURCES = {
    "openai": f"openai client 3.57.0 resources/chat/completions/completions.py (max_tokens vs max_completion_tokens, "
              f"stop up to 4), {READ}",
    "anthropic": f"docs.claude.com/en/api/openai-sdk (fields ignored: logprobs, seed, reasoning_effort...; "
                 f"temperature capped at 1) and the Claude 4.5 migration guide (temperature xor top_p), {READ}",
    "gemini": f"ai.google.dev/gemini-api/docs/openai (reasoning_effort per model, thinking inside max_tokens), {READ}",
    "vllm": f"vLLM serve OpenAI-compatible server docs (echo, prompt logprobs, top_k, repetition_penalty), {READ}",
    "llamacpp": f"llama.cpp tools/server README (top_k, repeat_penalty, no echo), {READ}",
    "generic": "no provider rules: OpenAI's chat fields plus top_k / repetition_penalty",
}


def openai_reasoning(model: str) -> Reasoning | None:
    """The reasoning family row of an OpenAI model name, or None for chat models."""
    name = model.lower().rsplit("/", 1)[-1]
    return next((r for r in OPENAI_REASONING if re.match(r.pattern, name)), None)


def _reasoning_profile(r: Reasoning, effort: str) -> Profile:
    samples = effort in r.sampling_at
    return Profile("openai", sampling="both" if samples else "default", token_param="max_completion_tokens",
                   logprobs=samples, echo=False, stop=False, max_temperature=2.0 if samples else None,
                   reasoning_effort=effort, efforts=r.efforts, thinking_in_budget=True,
                   reasoning_headroom=0 if effort == "none" else 2048, concurrency=8, family=r.pattern,
                   source=r.source)


@dataclass(frozen=True)
class Profile:
    """What one provider + model family accepts (see module docstring for the sources)."""

    provider: str
    sampling: str = "both"  # both | one (temperature or top_p) | default (neither: only the default is accepted)
    token_param: str = "max_tokens"  # or max_completion_tokens
    logprobs: bool = True  # chat logprobs/top_logprobs (choice scoring)
    echo: bool = True  # /v1/completions echo + logprobs (prompt log-likelihood)
    seed: bool = True
    stop: bool = True
    max_stop: int | None = None
    max_temperature: float | None = None
    extra: tuple[str, ...] = ()  # non-OpenAI sampling fields it takes (top_k, repetition_penalty, repeat_penalty)
    neutral: tuple[tuple[str, Any], ...] = ()  # fields always sent, neutral values included (see VLLM_NEUTRAL)
    reasoning_effort: str | None = None  # sent with every request when set
    efforts: tuple[str, ...] = ()  # accepted reasoning_effort values (empty: the field is not sent)
    thinking_in_budget: bool = False  # reasoning tokens count inside the token limit
    reasoning_headroom: int = 0  # tokens added to the limit when the model thinks, so the answer fits
    concurrency: int = 8
    family: str = ""  # the rule row it came from (OpenAI reasoning families: their name pattern)
    source: str = ""  # the document (and date) the rules come from

    def describe(self) -> dict[str, Any]:
        return asdict(self)

    def capabilities(self) -> dict[str, bool]:
        return {"generate": True, "loglik": self.echo, "choice_logprobs": self.logprobs, "classify": False}


LOCAL_HOSTS = ("localhost", "localhost.localdomain")


def is_local(host: str) -> bool:
    """Loopback, private-network or .local hosts: local servers that usually need no key."""
    if host in LOCAL_HOSTS or host.endswith(".local"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local


def provider_for_url(base_url: str) -> str | None:
    """The provider a base URL's host belongs to, or None for hosts that tell nothing."""
    host = (urlsplit(base_url).hostname or "").lower()
    if host == "api.openai.com" or host.endswith(".openai.azure.com"):
        return "openai"
    if host.endswith("anthropic.com"):
        return "anthropic"
    if host.endswith("generativelanguage.googleapis.com"):
        return "gemini"
    return None


def provider_for_model(model: str) -> str:
    m = model.lower().rsplit("/", 1)[-1]
    if m.startswith("claude"):
        return "anthropic"
    if m.startswith("gemini"):
        return "gemini"
    if re.match(r"(gpt-|o\d|chatgpt)", m):
        return "openai"
    return "generic"


def _version(model: str, family: str) -> tuple[int, int] | None:
    """(major, minor) of names like claude-sonnet-4-5, claude-opus-4-1-2025..., claude-3-7-sonnet."""
    m = re.search(rf"{family}-(\d+)(?:[-.](\d{{1,2}})(?!\d))?", model.lower())
    if not m:
        return None
    return int(m.group(1)), int(m.group(2) or 0)


def claude_one_sampler(model: str) -> bool:
    """Claude models that refuse temperature and top_p together: Sonnet/Haiku 4.5+, Opus 4.1+, all 5+."""
    m = model.lower()
    for family, first in (("sonnet", (4, 5)), ("haiku", (4, 5)), ("opus", (4, 1))):
        v = _version(m, family)
        if v is not None:
            return v >= first
    v = _version(m, "claude")  # claude-5-..., claude-fable-5-1 style names
    return v is not None and v[0] >= 5


# `vllm serve` fills every sampling field a request leaves out from the model's generation_config.json
# (vLLM 0.33 `entrypoints/openai/chat_completion/protocol.py`, `to_sampling_params`: "user -> server
# default -> OpenAI default"), e.g. top_k=20, repetition_penalty=1.05. The offline `vllm:` engine
# always sets them (`vllm_engine.sampling_kwargs`; min_p is SamplingParams' 0.0), so a vLLM server
# gets them too: neutral when the request has none. Never sent elsewhere (OpenAI refuses them).
VLLM_NEUTRAL: tuple[tuple[str, Any], ...] = (("top_k", -1), ("repetition_penalty", 1.0), ("min_p", 0.0))


def profile(provider: str | None, model: str, base_url: str = "") -> Profile:
    """The profile for `model` at `base_url` (`provider` None/'auto': host first, then model family)."""
    if provider in (None, "", "auto"):
        provider = provider_for_url(base_url) or provider_for_model(model)
    if provider not in PROVIDERS:
        raise SpecError(f"unknown provider {provider!r} (choose from {', '.join(PROVIDERS)})")
    m = model.lower()
    if provider == "openai":
        if (r := openai_reasoning(m)) is not None:
            return _reasoning_profile(r, r.efforts[0])
        return Profile("openai", token_param="max_completion_tokens", echo=False, max_stop=4, max_temperature=2.0,
                       concurrency=8, source=SOURCES["openai"])
    if provider == "anthropic":
        return Profile("anthropic", sampling="one" if claude_one_sampler(m) else "both", logprobs=False,
                       echo=False, seed=False, max_temperature=1.0, concurrency=4, source=SOURCES["anthropic"])
    if provider == "gemini":
        v = _version(m, "gemini")
        thinking = v is not None and v >= (2, 5)
        pro = "pro" in m
        efforts: tuple[str, ...]
        if v is not None and v[0] >= 3:
            efforts = ("low", "high") if pro else ("none", "low", "medium", "high")
            effort = "low"
        elif thinking:
            efforts = ("low", "medium", "high") if pro else ("none", "low", "medium", "high")
            effort = "low" if pro else "none"
        else:
            efforts, effort = (), None
        return Profile("gemini", logprobs=False, echo=False, max_stop=5, max_temperature=2.0,
                       reasoning_effort=effort, efforts=efforts, thinking_in_budget=thinking,
                       reasoning_headroom=4096 if thinking and effort != "none" else 0, concurrency=8,
                       source=SOURCES["gemini"])
    if provider == "vllm":
        return Profile("vllm", extra=("top_k", "repetition_penalty"), neutral=VLLM_NEUTRAL, concurrency=32,
                       source=SOURCES["vllm"])
    if provider == "llamacpp":
        return Profile("llamacpp", echo=False, extra=("top_k", "repeat_penalty"), concurrency=4,
                       source=SOURCES["llamacpp"])
    return Profile("generic", extra=("top_k", "repetition_penalty"), concurrency=8, source=SOURCES["generic"])


def with_effort(p: Profile, effort: str | None) -> Profile:
    """The profile with a user-chosen reasoning effort (checked against the accepted values)."""
    if effort is None:
        return p
    if effort not in p.efforts:
        valid = ", ".join(p.efforts) or "none (this model takes no reasoning_effort)"
        raise SpecError(f"{p.provider}: reasoning_effort {effort!r} is not accepted here (valid: {valid})")
    family = next((r for r in OPENAI_REASONING if r.pattern == p.family), None) if p.provider == "openai" else None
    if family is not None:  # sampling and logprobs depend on the effort (GPT-5.1+ at none)
        return _reasoning_profile(family, effort)
    headroom = 0 if effort == "none" else max(p.reasoning_headroom, 2048)
    return replace(p, reasoning_effort=effort, reasoning_headroom=headroom if p.thinking_in_budget else 0)


def chat_request(
    p: Profile, model: str, messages: Messages, g: GenParams, notes: dict[str, int] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(SDK keyword arguments, extra_body) of one chat request that `p` accepts.

    What the provider would refuse is adapted, never sent: a dropped or changed parameter is
    counted in `notes` (e.g. {"top_p dropped (one sampler)": 3}) for the run summary.
    """
    def note(what: str) -> None:
        if notes is not None:
            notes[what] = notes.get(what, 0) + 1

    limit = int(g.max_new_tokens) + (p.reasoning_headroom if p.thinking_in_budget else 0)
    kwargs: dict[str, Any] = {"model": model, "messages": list(messages), p.token_param: limit}
    temperature = float(g.temperature)
    if p.max_temperature is not None and temperature > p.max_temperature:
        temperature = p.max_temperature
        note(f"temperature capped at {p.max_temperature}")
    if p.sampling == "both":
        kwargs.update(temperature=temperature, top_p=g.top_p)
    elif p.sampling == "one":
        if g.top_p != 1.0 and temperature == 1.0:
            kwargs["top_p"] = g.top_p
        else:
            kwargs["temperature"] = temperature
            if g.top_p != 1.0:
                note("top_p dropped (temperature and top_p are exclusive)")
    else:
        if temperature != 1.0 or g.top_p != 1.0:
            note("temperature/top_p not sent (model takes only the default)")
    if p.seed:
        kwargs["seed"] = g.seed
    if g.stop:
        if p.stop:
            stops = list(g.stop)
            if p.max_stop is not None and len(stops) > p.max_stop:
                stops = stops[: p.max_stop]
                note(f"stop cut to {p.max_stop} (the rest applied client-side)")
            kwargs["stop"] = stops
        else:
            note("stop applied client-side")
    if p.reasoning_effort is not None and p.efforts:
        kwargs["reasoning_effort"] = p.reasoning_effort
    extra: dict[str, Any] = {}
    if g.top_k is not None:
        if "top_k" in p.extra:
            extra["top_k"] = g.top_k
        else:
            note("top_k not sent")
    if g.repetition_penalty != 1.0:
        penalty = next((n for n in ("repetition_penalty", "repeat_penalty") if n in p.extra), None)
        if penalty:
            extra[penalty] = g.repetition_penalty
        else:
            note("repetition_penalty not sent")
    for name, value in p.neutral:
        extra.setdefault(name, value)
    return kwargs, extra


def logprob_request(p: Profile, kwargs: dict[str, Any], top: int) -> dict[str, Any]:
    """Add first-token logprobs to a chat request (the caller checked `p.logprobs`)."""
    return {**kwargs, "logprobs": True, "top_logprobs": top}


def validate_base_url(url: str) -> str:
    """The URL, or one SpecError line when it cannot be a real endpoint (checked before any request).

    Catches a copied placeholder (`https://YOUR-ENDPOINT/v1`, `<host>`), non-ASCII or otherwise
    invalid host names (which would surface later as one idna error per request), and missing
    scheme or host.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise SpecError(f"base URL {url!r} must start with http:// or https://")
    raw_host = parts.netloc.rsplit("@", 1)[-1]
    raw_host = raw_host[1:].split("]")[0] if raw_host.startswith("[") else raw_host.split(":")[0]
    if not raw_host:
        raise SpecError(f"base URL {url!r} has no host")
    if re.search(r"YOUR|<|>|\{|\}|\.\.\.|\u2026", url):
        raise SpecError(f"base URL {url!r} is a placeholder: set base_url to your provider's endpoint")
    if not raw_host.isascii():
        raise SpecError(f"base URL {url!r}: host {raw_host!r} is not ASCII (a typo or pasted character?)")
    try:
        ipaddress.ip_address(raw_host)
        return url
    except ValueError:
        pass
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*\.?", raw_host):
        raise SpecError(f"base URL {url!r}: {raw_host!r} is not a valid host name")
    return url


def engine_provider(spec: str, options: dict[str, Any] | None = None) -> tuple[str, str] | None:
    """(provider, model) of the API engine behind an RM/engine spec (`judge:openai:gpt-5.1`), or None."""
    opts = options or {}
    parts = spec.split(":")
    while parts and parts[0] not in ("openai", "anthropic"):
        parts = parts[1:]  # judge:, judge[pointwise]:, pmi:, lik: ...
    if len(parts) < 2:
        return None
    model = ":".join(parts[1:])
    if parts[0] == "anthropic":
        return "anthropic", model
    return profile(opts.get("provider"), model, opts.get("base_url") or "").provider, model


def batches_requests(spec: str, options: dict[str, Any] | None = None) -> bool:
    """Whether the API engine behind `spec` can send provider batches: not Claude through Anthropic's
    OpenAI-compatible endpoint (chat completions only: docs.claude.com/en/api/openai-sdk; Message Batches are
    native-API only)."""
    found = engine_provider(spec, options)
    return found is not None and not _claude_through_openai_layer(spec, found)


def _claude_through_openai_layer(spec: str, found: tuple[str, str]) -> bool:
    return found[0] == "anthropic" and next(p for p in spec.split(":") if p in ("openai", "anthropic")) == "openai"


def caches_prompts(spec: str, options: dict[str, Any] | None = None) -> bool:
    """Whether the API engine behind `spec` can have prompts cached: not with `prompt_cache: false`, and not
    Claude through Anthropic's OpenAI-compatible endpoint (prompt caching is native-API only:
    docs.claude.com/en/api/openai-sdk)."""
    found = engine_provider(spec, options)
    if found is None or (options or {}).get("prompt_cache") is False:
        return False
    return not _claude_through_openai_layer(spec, found)
