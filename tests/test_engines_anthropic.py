"""The native Anthropic engine against a stand-in that refuses what the Messages API refuses.

The stand-in's rules (`prbench.testing.anthropic_server`, `provider_rules`) come from the anthropic
client 2.10.0 (`resources/messages/messages.py`: Messages.create's fields, max_tokens/messages/model
required; `_constants.py`: API version 2026-10-21, under which the sampling fields are extra inputs)
and Anthropic's documents (temperature xor top_p on Sonnet/Haiku 4.5+, Opus 4.1+).
"""

from __future__ import annotations

import pytest

from prbench import cost, evaluate
from prbench.engines.anthropic_engine import AnthropicEngine
from prbench.engines.base import GenParams, load_engine
from prbench.errors import SpecError
from prbench.testing.anthropic_server import serve_anthropic

MSG = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "which is better?"}]


@pytest.fixture()
def claude(api_key_env):
    with serve_anthropic(lambda body: "Both fine.\nResult: A") as srv:
        yield srv, {"base_url": srv.root_url, "api_key_env": api_key_env[0]}


def _raw(srv, key: str, version: str | None = None, **body):
    from anthropic import Anthropic

    client = Anthropic(base_url=srv.root_url, api_key=key, max_retries=0,
                       default_headers={"anthropic-version": version} if version else None)
    return client.messages.with_raw_response.create


@pytest.mark.parametrize("mode", ["pairwise", "pointwise"])
def test_anthropic_judges_through_the_native_api(claude, mode: str, tmp_path) -> None:
    srv, opts = claude
    if mode == "pointwise":
        srv.reply_fn = lambda body: "Score: 7"
    res = evaluate("judge:anthropic:claude-sonnet-4-6", "sample", "none", out=tmp_path, limit=3, n_boot=10,
                   model_options={**opts, "mode": mode})
    assert res.summary.metrics.n_invalid == 0 and not srv.refused
    assert res.summary.model.endswith("anthropic:claude-sonnet-4-6")
    assert all(r.headers.get("anthropic-version") == "2026-10-21" for r in srv.records)
    body = srv.requests[0]
    assert set(body) == {"model", "max_tokens", "messages"}  # no sampling under 2026-10-21, no seed
    info = res.summary.model_info["engine_stats"]
    assert info["tokens_out"] > 0 and res.summary.cost.priced_as == "anthropic:claude-sonnet-4-6"


def test_the_paper_presets_claude_judge_runs_as_written(claude, tmp_path) -> None:
    """The Personalized RewardBench preset's Claude judge (native Messages API, one seeded position per item) as
    the preset writes it, only pointed at the stand-in: every request accepted, no invalid record."""
    from prbench.study.config import load_study_config

    srv, opts = claude
    cfg, _ = load_study_config(None, "personalized-rewardbench")
    (entry,) = [m for m in cfg.models if m.spec.startswith("judge:anthropic:")]
    assert not entry.both_orders and entry.options == {"api_key_env": "ANTHROPIC_API_KEY"}
    res = evaluate(entry.spec, "sample", "profile", out=tmp_path, limit=3, n_boot=10,
                   model_options={**entry.options, **opts}, both_orders=entry.both_orders)
    assert res.summary.metrics.n_invalid == 0 and not srv.refused and len(srv.requests) == 3


def test_stand_in_refuses_what_the_messages_api_refuses(claude, api_key_env) -> None:
    import httpx

    srv, _ = claude
    ok = {"model": "claude-sonnet-4-6", "max_tokens": 8, "messages": MSG[1:]}
    assert _raw(srv, api_key_env[1])(**ok).parse().content[0].text.startswith("Both")  # the client's own body

    def post(body: dict, version: str = "2026-10-21") -> tuple[int, str]:
        r = httpx.post(f"{srv.root_url}/v1/messages", json=body, headers={"anthropic-version": version})
        return r.status_code, r.json()["error"]["message"] if r.status_code != 200 else ""

    no_max = {k: v for k, v in ok.items() if k != "max_tokens"}
    assert post(no_max) == (400, "max_tokens: Field required")
    assert post({**ok, "seed": 1}) == (400, "seed: Extra inputs are not permitted")
    assert post({**ok, "temperature": 1.0}) == (400, "temperature: Extra inputs are not permitted")
    assert post({**ok, "messages": MSG})[0] == 400  # a system role inside messages
    assert "cannot both be specified" in post({**ok, "temperature": 0.0, "top_p": 0.9}, "2023-06-01")[1]
    assert "less than or equal to 1" in post({**ok, "temperature": 1.5}, "2023-06-01")[1]
    older = {**ok, "model": "claude-sonnet-4-20250514", "temperature": 0.0, "top_p": 0.9}
    assert post(older, "2023-06-01") == (200, "")  # before 4.5 both were accepted
    assert post(ok, "2023-06-01") == (200, "")


def test_old_api_version_sends_one_sampler_where_required(claude) -> None:
    srv, opts = claude
    eng = AnthropicEngine("claude-haiku-4-5", api_version="2023-06-01", **opts)
    out = eng.generate([MSG], GenParams(temperature=0.5, top_p=0.9, stop=("END", " ")))
    assert out[0].error is None and not srv.refused
    body = srv.requests[-1]
    assert body["temperature"] == 0.5 and "top_p" not in body and body["stop_sequences"] == ["END"]
    assert body["system"] == "Be brief." and [m["role"] for m in body["messages"]] == ["user"]
    both = AnthropicEngine("claude-3-7-sonnet-latest", api_version="2023-06-01", **opts)
    both.generate([MSG], GenParams(temperature=0.5, top_p=0.9))
    assert srv.requests[-1]["top_p"] == 0.9 and not srv.refused


def test_likelihood_needs_logprobs_and_fails_at_start(claude, tmp_path) -> None:
    srv, opts = claude
    with pytest.raises(SpecError, match="no logprobs"):
        evaluate("judge:anthropic:claude-sonnet-4-6", "sample", "none", limit=2, n_boot=10,
                 model_options={**opts, "mode": "likelihood"})
    assert srv.n_posts == 0


def test_a_marked_stable_prefix_gets_a_cache_breakpoint_and_is_priced_as_sold(claude) -> None:
    """Prompt caching is on by default: the marked start of a prompt (a judge's instructions, context and question)
    becomes a text block with `cache_control` (anthropic 2.16.0 `types/text_block_param.py`); the second request
    with that start, sent once the first has returned, reads it. Reads cost 0.1x input, writes 1.25x."""
    srv, opts = claude
    srv.min_cache_tokens = 40
    eng = load_engine("anthropic:claude-haiku-4-5", **opts)
    led = cost.Ledger(cost.price_for("anthropic", "claude-haiku-4-5"))
    eng.ledger = led
    head = "What we know: " + "likes long mountain walks, " * 20 + "\nQuestion: where should I go?\n"
    pair = [[{"role": "user", "content": head + tail, "stable_prefix": head}] for tail in ("A: north. B: south.",
                                                                                          "A: south. B: north.")]
    eng.generate(pair, GenParams(seed=1))
    sent = srv.requests[-2:]
    assert all(r["messages"][0]["content"][0] == {"type": "text", "text": head, "cache_control": {"type": "ephemeral"}}
               for r in sent) and "cache_control" not in sent[0]
    assert srv.cache_writes == srv.cache_reads > 40  # the first wrote, the second (sent after it) read
    reads, writes = led.total("cached_input_tokens"), led.total("cache_write_input_tokens")
    assert (reads, writes) == (srv.cache_reads, srv.cache_writes)
    price = cost.price_for("anthropic", "claude-haiku-4-5")
    assert led.usd == pytest.approx(price.usd(led.input_tokens, reads, led.total("output_tokens"),
                                              cache_write_tokens=writes))
    assert led.usd < price.usd(led.input_tokens, 0, led.total("output_tokens"))  # cheaper than uncached
    srv.min_cache_tokens = 10_000  # a prefix under the provider's minimum: nothing cached, plain input
    before = (srv.cache_reads, srv.cache_writes)
    eng.generate(pair, GenParams(seed=2))
    assert (srv.cache_reads, srv.cache_writes) == before
    off = load_engine("anthropic:claude-haiku-4-5", prompt_cache=False, **opts)  # off: one plain string, as before
    off.generate(pair[:1], GenParams(seed=3))
    assert srv.requests[-1]["messages"][0]["content"] == head + "A: north. B: south."
    assert eng.count_tokens(MSG) == 5  # "Be brief." + "which is better?"
    assert srv.records[-1].path == "/v1/messages/count_tokens" and "max_tokens" not in srv.requests[-1]


def test_cache_field_names_are_the_installed_clients() -> None:
    """`cache_control` on a text block (`types/text_block_param.py`) and the usage's cache counts
    (`types/usage.py`) as the installed anthropic client (2.16.0) names them."""
    from anthropic.types import TextBlockParam, Usage

    assert "cache_control" in TextBlockParam.__annotations__
    assert {"cache_read_input_tokens", "cache_creation_input_tokens"} <= set(Usage.model_fields)
