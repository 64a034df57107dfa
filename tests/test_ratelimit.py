"""Rate limits as users meet them: retry hints, quota errors, AIMD concurrency, RPM/TPM caps.

Header names and semantics follow the openai client 3.57.0 (`_base_client._parse_retry_after_header`:
`retry-after-ms` first, then `retry-after` seconds or HTTP date; `x-should-retry`), OpenAI's
429 bodies (`insufficient_quota`; "Please try again in 20ms") and Gemini's RESOURCE_EXHAUSTED
with `google.rpc.RetryInfo.retryDelay` / `QuotaFailure.violations[].quotaId`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prbench import evaluate
from prbench.engines.base import GenParams
from prbench.engines.openai_engine import OpenAIEngine
from prbench.engines.ratelimit import Limiter, QuotaExhausted, classify, parse_duration, retry_hint
from prbench.store.cache import Cache
from prbench.testing.openai_server import Fault
from prbench.testing.records import make_records


def prompts(n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"question {i}"}] for i in range(n)]


def engine(srv, key: str, **kw) -> OpenAIEngine:
    opts = {"timeout": 5.0, "backoff_base": 0.01, "backoff_max": 5.0}
    opts.update(kw)
    return OpenAIEngine("fake-model", base_url=srv.base_url, api_key_env=key, **opts)


def test_hints_from_headers_and_bodies() -> None:
    assert retry_hint({"retry-after-ms": "250", "retry-after": "9"}) == 0.25  # ms wins, as in the client
    assert retry_hint({"Retry-After": "3"}) == 3.0
    assert retry_hint({}, {"error": {"message": "Please try again in 1.5s."}}) == 1.5
    assert retry_hint({}, {"error": {"message": "Rate limit reached. Please try again in 20ms."}}) == 0.02
    assert retry_hint({}, {"error": {"message": "try again in 6m0s"}}) == 360.0
    gemini = [{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12s"}]}}]
    assert retry_hint({}, gemini) == 12.0
    assert retry_hint({"x-ratelimit-reset-requests": "2s", "x-ratelimit-reset-tokens": "500ms"}) == 2.0
    assert retry_hint({}, {"error": {"message": "slow down"}}) is None
    assert parse_duration("1h2m3s") == 3723.0 and parse_duration("soon") is None


def test_error_classes() -> None:
    quota = {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                       "code": "insufficient_quota"}}
    assert classify(429, {}, quota).kind == "quota"
    per_day = [{"error": {"details": [{"violations": [{"quotaId": "GenerateRequestsPerDayPerProjectPerModel"}]}]}}]
    per_min = [{"error": {"details": [{"violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}]},
                                      {"retryDelay": "7s"}]}}]
    assert classify(429, {}, per_day).kind == "quota"
    assert classify(429, {}, per_min).kind == "rate_limit" and classify(429, {}, per_min).wait == 7.0
    assert [classify(s, {}, None).kind for s in (408, 409, 500, 503, 529, 400, 401, 404)] == \
        ["retry"] * 5 + ["final"] * 3
    assert classify(400, {"x-should-retry": "true"}, None).kind == "retry"
    assert classify(503, {"x-should-retry": "false"}, None).kind == "final"


def test_429_storm_with_retry_after_ms(fake_openai, api_key_env) -> None:
    srv = fake_openai(faults={n: Fault.rate_limit(retry_after_ms=300) for n in range(1, 9)})
    eng = engine(srv, api_key_env[0], concurrency=8)
    out = eng.generate(prompts(8), GenParams(max_new_tokens=5))
    assert all(g.error is None for g in out)
    assert srv.n_posts == 16 and eng.stats["rate_limited"] == 8 and eng.stats["retries"] == 8
    assert eng.limiter.history[:2] == [8, 4]  # halved once for the storm (cooldown), not eight times
    first_429 = min(r.received_at for r in srv.records if r.n <= 8)
    retries = [r.received_at for r in srv.records if r.n > 8]
    assert min(retries) - first_429 >= 0.28  # everyone paused for the hint: milliseconds, not seconds
    assert max(retries) - first_429 < 3.0
    assert eng.stats["wait_s"] >= 0.28 * 8 * 0.9
    assert eng.run_info()["concurrency_limits"] == eng.limiter.history


def test_aimd_halves_and_recovers() -> None:
    now = [0.0]
    lim = Limiter(16, cooldown=1.0, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    for _ in range(3):
        lim.acquire()
        lim.release("rate_limit")  # a storm within the cooldown: one cut
    assert lim.limit == 8
    now[0] += 2.0
    lim.acquire()
    lim.release("rate_limit")
    assert lim.limit == 4
    for _ in range(4 + 5 + 6 + 7):
        lim.acquire()
        lim.release("ok")
    assert lim.limit == 8 and lim.history == [16, 8, 4, 5, 6, 7, 8]


def test_rpm_and_tpm_caps_wait_for_the_window() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    lim = Limiter(4, rpm=2, clock=lambda: now[0], sleep=sleep)
    for _ in range(3):
        lim.acquire()
        lim.release()
    assert slept == [60.0]  # the third request waits for the first to leave the minute
    now[0], slept[:] = 0.0, []
    tok = Limiter(4, tpm=1000, clock=lambda: now[0], sleep=sleep)
    assert tok.acquire(600) == 0.0
    tok.release()
    now[0] = 10.0
    assert tok.acquire(600) == pytest.approx(50.0)
    tok.release()


def test_rpm_option_reaches_the_engine(fake_openai, api_key_env) -> None:
    srv = fake_openai()
    eng = engine(srv, api_key_env[0], rpm=3, concurrency=2)
    waits: list[float] = []
    eng._sleep = waits.append  # no real minute: record what it would wait
    eng.limiter.sleep = lambda s: (waits.append(s), eng.limiter.__setattr__("_requests", type(eng.limiter._requests)()))
    out = eng.generate(prompts(4), GenParams(max_new_tokens=3))
    assert all(g.error is None for g in out) and srv.n_posts == 4
    assert len(waits) == 1 and 59.0 < waits[0] <= 60.0


def test_insufficient_quota_stops_and_resumes(fake_openai, api_key_env, tmp_path: Path) -> None:
    quota_gone = [True]
    srv = fake_openai(faults=lambda n, body: Fault.quota() if quota_gone[0] and n == 3 else None)
    cache = Cache(tmp_path / "c.sqlite")
    eng = engine(srv, api_key_env[0], concurrency=1, cache=cache)
    with pytest.raises(QuotaExhausted, match="quota is exhausted.*stopped after 2 of 6.*re-running") as err:
        eng.generate(prompts(6), GenParams(max_new_tokens=5))
    assert "\n" not in str(err.value)
    assert srv.n_posts == 3 and eng.stats["retries"] == 0  # never retried, nothing more sent
    quota_gone[0] = False  # credit added: the same command again
    eng2 = engine(srv, api_key_env[0], concurrency=1, cache=cache)
    out = eng2.generate(prompts(6), GenParams(max_new_tokens=5))
    assert all(g.error is None for g in out) and srv.n_posts == 3 + 4 and eng2.stats["cache_hits"] == 2


@pytest.mark.parametrize("style", ["openai", "gemini"])
def test_retry_hint_in_error_body(fake_openai, api_key_env, style: str) -> None:
    srv = fake_openai(faults={1: Fault.rate_limit_hint(0.4, style)})
    eng = engine(srv, api_key_env[0], concurrency=1)
    assert eng.generate(prompts(1), GenParams(max_new_tokens=3))[0].error is None
    assert srv.n_posts == 2
    gap = srv.records[1].received_at - srv.records[0].received_at
    assert 0.38 <= gap < 2.5, gap


def test_rate_limits_without_hint_back_off_past_a_minute_window() -> None:
    eng = OpenAIEngine("m", base_url="http://127.0.0.1:9/v1")
    eng._rng.seed(0)
    waits = [eng._backoff(i, None, rate_limited=True) for i in range(5)]
    assert sum(waits) > 60.0 and all(w <= eng.backoff_max for w in waits)


def test_run_summary_reports_usage(fake_openai, api_key_env, tmp_path: Path) -> None:
    srv = fake_openai(lambda body: "Result: A", faults={1: Fault.rate_limit(retry_after_ms=10)})
    path = tmp_path / "b.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in make_records(3)))
    res = evaluate("judge:openai:fake-model", str(path), "none", n_boot=10,
                   model_options={"base_url": srv.base_url, "api_key_env": api_key_env[0], "concurrency": 1})
    stats = res.summary.model_info["engine_stats"]
    assert stats["requests"] == 4 and stats["retries"] == 1 and stats["rate_limited"] == 1
    assert stats["tokens_in"] > 0 and stats["tokens_out"] == 3 * 2 and stats["wait_s"] >= 0.01
