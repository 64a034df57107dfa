"""The cost ledger: price tables, summary dollars = tokens x prices, --max-usd stops and resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prbench import cost, evaluate
from prbench.errors import PrbenchError

MODEL = "judge:openai:gpt-4.1-mini"


def test_price_tables_match_dated_and_longest_names() -> None:
    mini = cost.price_for("openai", "gpt-4.1-mini-2025-04-14")
    assert mini is not None and mini.model == "gpt-4.1-mini" and mini.batch_discount == 0.5
    assert cost.price_for("openai", "gpt-4.1").model == "gpt-4.1"
    assert cost.price_for("anthropic", "claude-sonnet-4-5-20250929").model == "claude-sonnet-4-5"
    assert cost.price_for("anthropic", "claude-sonnet-4-20250514").model == "claude-sonnet-4"
    assert cost.price_for("gemini", "models/gemini-2.5-flash-lite").model == "gemini-2.5-flash-lite"
    assert cost.price_for("openai", "gpt-4.10") is None  # no prefix match without a separator
    assert cost.price_for("anthropic", "claude-sonnet-4-5@20250929").model == "claude-sonnet-4-5"  # Vertex's form
    assert cost.price_for("anthropic", "claude-3-5-haiku-latest").model == "claude-3-5-haiku"
    for other_model in ("gpt-5-pro", "o3-pro", "gpt-4o-audio-preview", "claude-opus-4-7"):
        assert cost.price_for("openai" if "claude" not in other_model else "anthropic", other_model) is None, other_model
    for provider in cost.PROVIDER_FILES:  # every shipped row is dated and sourced
        assert all(p.as_of and p.source.startswith("https://") for p in cost.load_prices()[provider].values())


def test_user_price_file_overrides_and_bad_file_is_one_line(tmp_path: Path) -> None:
    mine = tmp_path / "prices.json"
    mine.write_text(json.dumps({"provider": "openai", "as_of": "2027-01-01", "source": "my contract",
                                "models": {"gpt-4.1-mini": {"input": 1.0, "output": 2.0}}}), encoding="utf-8")
    p = cost.price_for("openai", "gpt-4.1-mini", mine)
    assert (p.input, p.cached_input, p.output, p.as_of, p.batch_discount) == (1.0, 1.0, 2.0, "2027-01-01", 0.0)
    mine.write_text(json.dumps({"provider": "openai", "as_of": "x", "models": {"m": {"input": "cheap"}}}))
    with pytest.raises(PrbenchError, match=r"models.m.input must be a non-negative number"):
        cost.load_prices(mine)


def test_ledger_dollars_are_tokens_times_prices() -> None:
    price = cost.Price("openai", "m", input=2.0, cached_input=0.5, output=8.0, batch_discount=0.5,
                       as_of="2026-12-01", source="test")
    led = cost.Ledger(price)
    led.settle(led.reserve("hello", 10), {"input_tokens": 1_000_000, "cached_input_tokens": 400_000,
                                          "output_tokens": 250_000})
    assert led.usd == pytest.approx(0.6 * 2.0 + 0.4 * 0.5 + 0.25 * 8.0)
    batch = cost.Ledger(price, batch=True)  # batches: set from the folder's files, at the batch price
    batch.set_batch_usage({"input_tokens": 1_000_000, "output_tokens": 1_000_000, "requests": 1})
    batch.set_batch_usage({"input_tokens": 1_000_000, "output_tokens": 1_000_000, "requests": 1})  # re-read: once
    assert batch.usd == pytest.approx(5.0) and batch.summary()["batch"] is True and batch.requests == 1
    resumed = cost.Ledger(price, earlier=led.summary())  # a resumed run adds to what was spent
    resumed.settle(0.0, {"input_tokens": 1_000_000})
    assert resumed.usd == pytest.approx(led.usd + 2.0) and resumed.input_tokens == 2_000_000
    again = cost.Ledger(price, batch=True, earlier=batch.summary())  # its batches are re-read, never carried
    assert again.usd == 0.0
    with pytest.raises(PrbenchError, match="needs a price"):
        cost.Ledger(None, max_usd=1.0, label="openai:mystery")


def test_anthropic_cache_writes_and_gemini_batch_cache_are_priced_as_sold() -> None:
    """Anthropic: a cache write costs 1.25x input, a read 0.1x, both halved in a batch (the sources are in
    prbench/prices/anthropic.json's `cache`); Gemini: cached input keeps its price in a batch (gemini.json)."""
    sonnet = cost.price_for("anthropic", "claude-sonnet-4-6")
    assert sonnet.cache_write == pytest.approx(3.75)
    assert sonnet.usd(3_000_000, 1_000_000, 0, cache_write_tokens=1_000_000) == pytest.approx(3.0 + 0.3 + 3.75)
    assert sonnet.usd(3_000_000, 1_000_000, 0, batch=True, cache_write_tokens=1_000_000) == pytest.approx(7.05 / 2)
    flash = cost.price_for("gemini", "gemini-3-flash")
    assert flash.usd(2_000_000, 1_000_000, 0, batch=True) == pytest.approx(0.5 / 2 + 0.05)


@pytest.mark.parametrize("bad", ["nan", "inf", "-1", "-inf"])
def test_max_usd_not_a_finite_positive_number_is_refused_in_one_line(bad: str, fake_openai, api_key_env,
                                                                      tmp_path: Path, capsys) -> None:
    from prbench.testing.cli import run_cli

    srv = fake_openai(lambda body: "Result: A")
    code, _, err = run_cli(capsys, "eval", "-m", MODEL, "--data", "sample", "--limit", "2", "--out", str(tmp_path),
                           "--base-url", srv.base_url, "--api-key-env", api_key_env[0], "--quiet", "--max-usd", bad)
    assert code != 0 and srv.n_posts == 0 and not list(tmp_path.rglob("summary.json"))
    assert len(err.strip().splitlines()) == 1 and "--max-usd must be a finite number" in err, err


def _judge(fake_openai, key: str, **kw):
    srv = fake_openai(lambda body: "Result: A")
    return srv, {"base_url": srv.base_url, "api_key_env": key, "concurrency": 1, **kw}


def _strip(records: list) -> list[dict]:
    return [{k: v for k, v in r.model_dump().items() if k not in ("elapsed_s",)} for r in records]


def test_summary_cost_equals_reported_usage_times_prices(fake_openai, api_key_env, tmp_path: Path) -> None:
    srv, opts = _judge(fake_openai, api_key_env[0])
    res = evaluate(MODEL, "sample", "none", out=tmp_path, model_options=opts, limit=6, n_boot=10)
    c = res.summary.cost
    price = cost.price_for("openai", "gpt-4.1-mini")
    # the stand-in reports prompt_tokens / completion_tokens per reply: sum them independently
    assert c.requests == len(srv.requests) == 6
    assert c.output_tokens == 6 * 2  # "Result: A" is two stand-in tokens
    assert c.usd == pytest.approx(price.usd(c.input_tokens, 0, c.output_tokens), abs=1e-6)
    assert c.prices_as_of == price.as_of and c.batch is False
    assert json.loads((res.path / "cost.json").read_text())["usd"] == c.usd
    from prbench.leaderboard import leaderboard, render_rows

    rows = leaderboard(tmp_path)
    assert rows[0].usd == c.usd
    head, body = render_rows(rows)
    assert head[-1] == "$" and body[0][-1] == f"{c.usd:.2f}"
    from prbench.report.html import build_report

    html = build_report(tmp_path, tmp_path / "report.html", n_boot=10, n_perm=10).read_text(encoding="utf-8")
    assert "$ API" in html and f"{c.usd:.2f}" in html


def test_max_usd_stops_within_one_estimate_and_resumes(fake_openai, api_key_env, tmp_path: Path) -> None:
    srv, opts = _judge(fake_openai, api_key_env[0])
    clean = evaluate(MODEL, "sample", "none", out=tmp_path / "clean", model_options=opts, limit=8, n_boot=10,
                     batch_size=1)
    per_request = clean.summary.cost.usd / 8
    cap = per_request * 3.5 + 256 * 1.6e-6  # room for ~3 requests and a reservation's output cap
    with pytest.raises(cost.BudgetExceeded, match="would pass --max-usd") as stop:
        evaluate(MODEL, "sample", "none", out=tmp_path / "capped", model_options=opts, limit=8, n_boot=10,
                 batch_size=1, max_usd=cap)
    assert stop.value.exit_code == 3
    folder = next((tmp_path / "capped").rglob("cost.json")).parent
    spent = json.loads((folder / "cost.json").read_text())["usd"]
    first_prompt = srv.requests[0]["messages"]
    estimate = cost.price_for("openai", "gpt-4.1-mini").usd(cost.estimate_input_tokens(first_prompt), 0, 256)
    assert spent <= cap < spent + estimate  # stopped before passing the cap, not earlier than one estimate
    assert srv.n_posts < 16  # the clean run's 8, plus fewer than 8 before the stop
    resumed = evaluate(MODEL, "sample", "none", out=tmp_path / "capped", model_options=opts, limit=8, n_boot=10,
                       batch_size=1, max_usd=1.0)
    assert _strip(resumed.records) == _strip(clean.records)
    assert resumed.summary.cost.usd == pytest.approx(clean.summary.cost.usd, abs=1e-9)
    assert resumed.summary.cost.requests == 8  # nothing paid twice


def _dry_run(capsys, monkeypatch, *extra: str) -> tuple[int, str, str]:
    from prbench.testing.cli import run_cli

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return run_cli(capsys, "study", "--preset", "personalized-rewardbench", "--dry-run", *extra)


def test_paper_preset_dry_run_prices_judges_sync_batch_and_cache(capsys, monkeypatch) -> None:
    code, out, err = _dry_run(capsys, monkeypatch, "--json")
    assert code == 0, err
    rows = json.loads(out)
    gpt = next(r for r in rows if r["what"] == "judge:openai:gpt-5.1 [profile]")
    price = cost.price_for("openai", "gpt-5.1")
    expect = price.usd(gpt["tokens"], 0, gpt["model_calls"] * cost.REPLY_TOKENS)
    assert gpt["usd_sync"] == round(expect, 2) and gpt["usd_batch"] == round(expect / 2, 2)
    assert gpt["calls_per_prefix"] == 1 and gpt["model_calls"] == 2830  # one seeded position per item (the paper's)
    assert gpt["usd_batch_cache"] == gpt["usd_batch"] and "no start shared" in gpt["cache"]  # counted uncached
    claude = next(r for r in rows if r["what"] == "judge:anthropic:claude-sonnet-4-6 [none]")
    assert claude["usd_batch"] == pytest.approx(claude["usd_sync"] / 2, abs=0.011)  # native: Message Batches
    local = next(r for r in rows if r["what"].startswith("hf:"))
    assert local["usd_sync"] is None  # local models cost no request money
    code, out, _ = _dry_run(capsys, monkeypatch)
    total = [ln for ln in out.splitlines() if ln.strip("│ ").startswith("all")][-1]
    sums = [round(sum(r[k] or 0 for r in rows), 2) for k in ("usd_sync", "usd_batch", "usd_batch_cache")]
    rounded = 0.005 * sum(r["usd_sync"] is not None for r in rows)  # the JSON rows are rounded one by one
    assert [float(x.replace(",", "")) for x in total.split("│")[4:7]] == pytest.approx(sums, abs=rounded)
    assert "minimum cacheable prefix" in out and "85M" not in out  # its own totals, not a written sentence
    assert "so no call is counted cached here and $ batch+cache equals $ batch" in out  # said, not left to infer
    said = " ".join(out.split())
    assert "both orders: with `both_orders: true`" in said and "$ batch+cache 103.54 in all" in said


def test_claude_through_the_openai_compatible_endpoint_is_priced_without_batches(tmp_path: Path) -> None:
    """Anthropic's OpenAI-compatible layer serves chat completions only (docs.claude.com/en/api/openai-sdk, 2026):
    no batches and no prompt caching there, so its $ batch is the synchronous price, and `--batch` on it is refused
    in one line naming the native engine (it would post to a /v1/batches Anthropic does not have)."""
    from prbench.engines.base import load_engine
    from prbench.engines.providers import batches_requests, caches_prompts

    layer = {"base_url": "https://api.anthropic.com/v1/"}
    assert not batches_requests("judge:openai:claude-sonnet-4-6", layer)
    assert not caches_prompts("judge:openai:claude-sonnet-4-6", layer)
    assert batches_requests("judge:anthropic:claude-sonnet-4-6") and batches_requests("judge:openai:gpt-5.1")
    plan = cost.planned_dollars(("anthropic", "claude-sonnet-4-6"), 1000, 1_000_000, batches=False, caches=False)
    assert plan.batch == plan.sync == plan.batch_cache and "no batches" in cost.cache_note([plan])
    engine = load_engine("openai:claude-sonnet-4-6", base_url="https://api.anthropic.com/v1/")
    with pytest.raises(PrbenchError, match="no batch API; for batches use the native engine, anthropic:claude"):
        engine.batch_api()


def test_paper_preset_dry_run_expects_dollars_under_until_decided(capsys, monkeypatch) -> None:
    """The closing table's last column: each eval run's batch+cache dollars times its own simulated share of the
    items `until: decided` spends on this preset's shape (read from the benchmark's shipped rows, not simulated
    again): the judges in the closest pairs run longest, so a run's price is weighed by its own share; the plan
    stage in full; the assumptions say which shape, how many studies, and the level split. The ranking question
    of the preset is expected to cost at most $45 (issue #38)."""
    from prbench.stats.seqsim import expected_share, study_shape
    from prbench.study.config import load_study_config

    code, out, err = _dry_run(capsys, monkeypatch, "--json")
    assert code == 0, err
    rows = json.loads(out)
    cfg, _ = load_study_config(None, "personalized-rewardbench")  # the judges' published accuracies under none
    judges = [(m.spec, sum(v) / len(v) / 100) for m in cfg.models if m.published
              and (v := list(m.published["none"].values())) and m.spec.startswith("judge:")]
    assert len(judges) == 3
    share = expected_share(study_shape(2830, 3, 5, 8, tuple(a for _, a in judges)))
    assert share.source.startswith("benchmarks/sequential_sim.py") and share.studies >= 100
    assert share.shape.family == 15 + 15  # 15 judge pairs and 15 judges' own sequences (8 free models first)
    assert share.run_shares is not None and len(share.run_shares) == 15
    rank = {spec: sorted(a for _, a in judges).index(a) for spec, a in judges}
    for r in rows:
        if r["usd_batch_cache"] is None:
            continue
        if r["stage"] == "eval":
            spec, cond = r["what"].rsplit(" [", 1)
            factor = share.share(cfg.conditions.index(cond.rstrip("]")), rank[spec])
        else:
            factor = 1.0
        assert r["usd_until_decided"] == pytest.approx(r["usd_batch_cache"] * factor, abs=0.011)  # both rounded
    middle = next(s for s, k in rank.items() if k == 1)  # in both close pairs: the longest runs
    assert all(share.share(c, 1) >= share.share(c, 2) for c in range(5)), middle
    code, out, _ = _dry_run(capsys, monkeypatch)
    total = [ln for ln in out.splitlines() if ln.strip("│ ").startswith("all")][-1]
    cells = [float(x.replace(",", "")) for x in total.split("│")[4:8]]
    priced = [r["usd_until_decided"] for r in rows if r["usd_until_decided"] is not None]
    assert abs(cells[3] - sum(priced)) <= 0.005 * len(priced) and cells[3] < cells[2]  # the rows are rounded
    assert cells[3] <= 45.0  # the acceptance of #38: the preset's ranking question, expected
    said = " ".join(out.split())
    assert f"mean {share.fraction:.3f} (by judge, mean over conditions:" in said and "30 sequences share the 5%" in said
    assert f"from {share.studies:,} simulated studies" in said and "published accuracies under none" in said
    assert "with judges at 0.570 / 0.640 / 0.710 `decided` would spend" in said  # the other spacing beside


def test_the_forecast_is_a_library_function_and_the_dry_run_prints_it(capsys, monkeypatch) -> None:
    """`prbench.study.forecast.forecast` gives the dry run's numbers as typed values (before, they were computed
    inside the CLI's printing): each run's dollars, the expected dollars under `until: decided`, the closing table
    and the price of both orders; the dry run prints exactly these."""
    from prbench.study.config import load_study_config
    from prbench.study.forecast import UNTIL_COLUMN, forecast

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg, root = load_study_config(None, "personalized-rewardbench")
    plan = forecast(cfg, root)
    assert plan.until is not None and plan.both_orders is not None
    code, out, err = _dry_run(capsys, monkeypatch, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["what"] for r in rows] == [r.what for r in plan.runs]
    for row, run, usd in zip(rows, plan.runs, plan.usd, strict=True):
        if usd is None:
            assert row["usd_sync"] is None
            continue
        assert (row["usd_sync"], row["usd_batch"], row["usd_batch_cache"]) == (
            round(usd.sync, 2), round(usd.batch, 2), round(usd.batch_cache, 2))
        assert row["usd_until_decided"] == round(usd.batch_cache * plan.until.share(run), 2)
    head, table = plan.dollar_rows()
    assert head[-1] == UNTIL_COLUMN and table[-1][0] == "all"
    code, out, _ = _dry_run(capsys, monkeypatch)
    total = [ln for ln in out.splitlines() if ln.strip("│ ").startswith("all")][-1]
    assert [c.strip() for c in total.strip().strip("│").split("│")] == list(table[-1])
    assert f"$ batch+cache {plan.both_orders[0]:,.2f} in all" in " ".join(out.split())


def test_cached_estimate_reads_shared_starts_over_the_minimum() -> None:
    """Batch+cache: of k calls sharing a start, the first writes and the rest read with CACHE_HITS['batch']."""
    found = ("anthropic", "claude-sonnet-4-5")
    plan = cost.planned_dollars(found, 1000, 3_000_000, prefix_tokens=2000, calls_per_prefix=2)
    price = cost.price_for(*found)
    read = 500 * cost.CACHE_HITS["batch"] * 2000
    written = (1000 - 500 * cost.CACHE_HITS["batch"]) * 2000
    assert plan.reason == "cached" and plan.batch_cache == pytest.approx(
        price.usd(3_000_000, round(read), 1000 * cost.REPLY_TOKENS, batch=True, cache_write_tokens=round(written)))
    assert plan.batch_cache < plan.batch
    short = cost.planned_dollars(found, 1000, 3_000_000, prefix_tokens=999, calls_per_prefix=2)
    assert short.reason == "short" and short.batch_cache == short.batch


def test_readme_and_cost_doc_tables_match_the_dry_run(capsys, monkeypatch) -> None:
    """The README's and docs/cost-and-batches.md's dry-run tables are what the dry run prints at its end."""
    code, out, err = _dry_run(capsys, monkeypatch)
    assert code == 0, err
    printed = {}
    for ln in out.splitlines():
        cells = [c.strip() for c in ln.strip().strip("│").split("│")]
        if len(cells) == 7 and cells[0] in ("plan", "eval", "all"):
            printed[cells[0]] = cells[1:]
    root = Path(__file__).parents[1]
    for doc in (root / "README.md", root / "docs" / "cost-and-batches.md"):
        rows = {}
        for ln in doc.read_text(encoding="utf-8").splitlines():
            cells = [c.strip().strip("*") for c in ln.strip().strip("|").split("|")]
            if ln.startswith("| ") and cells[0] in ("plan", "eval", "all") and len(cells) == 7:
                rows[cells[0]] = cells[1:]
        assert rows == printed, doc


def test_cli_max_usd_is_one_line_and_exit_3(fake_openai, api_key_env, tmp_path: Path, capsys) -> None:
    from prbench.testing.cli import run_cli

    srv = fake_openai(lambda body: "Result: A")
    args = ["eval", "-m", MODEL, "--data", "sample", "--limit", "3", "--out", str(tmp_path), "--base-url",
            srv.base_url, "--api-key-env", api_key_env[0], "--quiet"]
    code, _, err = run_cli(capsys, *args, "--max-usd", "0.0001")
    assert code == 3 and srv.n_posts == 0
    assert len(err.strip().splitlines()) == 1 and "would pass --max-usd 0.0001" in err
    code, _, err = run_cli(capsys, *args, "--max-usd", "1")
    assert code == 0, err
    (summary,) = tmp_path.rglob("summary.json")
    assert json.loads(summary.read_text())["cost"]["max_usd"] == 1.0


def test_build_caps_generator_and_validator_together(fake_openai, api_key_env, tmp_path: Path,
                                                     monkeypatch) -> None:
    from prbench.build import BuildConfig, build_benchmark
    from prbench.testing.anthropic_server import serve_anthropic
    from prbench.testing.records import make_records

    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    rows = [{k: v for k, v in r.items() if k not in ("chosen", "rejected")} for r in make_records(4)]
    (tmp_path / "src.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    def reply(body: dict) -> str:
        rate = "Rate the answer" in body["messages"][-1]["content"]
        return json.dumps(dict.fromkeys(("factuality", "relevance", "helpfulness", "rubric_fit"), 4)) if rate \
            else "A short answer about the topic."

    gen = fake_openai(reply)
    with serve_anthropic(reply) as val:
        cfg = BuildConfig(source=str(tmp_path / "src.jsonl"), generator="openai:gpt-4.1-mini",
                          validator="anthropic:claude-haiku-4-5", top_k=3, batch_size=2,
                          generator_options={"base_url": gen.base_url, "api_key_env": api_key_env[0], "concurrency": 1},
                          validator_options={"base_url": val.root_url, "api_key_env": api_key_env[0], "concurrency": 1})
        from prbench.store.cache import NullCache

        full = build_benchmark(cfg, tmp_path / "full", cache=NullCache()).written["cost"]
        n_full = gen.n_posts
        with pytest.raises(cost.BudgetExceeded):
            build_benchmark(cfg, tmp_path / "out", max_usd=full["usd"] / 2, cache=NullCache())
        spent = json.loads(next((tmp_path / "out").rglob("cost.json")).read_text())
        assert 0 < spent["usd"] <= full["usd"] / 2
        assert set(spent["engines"]) == {"openai:gpt-4.1-mini", "anthropic:claude-haiku-4-5"}
        res = build_benchmark(cfg, tmp_path / "out", max_usd=1.0, cache=NullCache())
    c = res.written["cost"]
    parts = c["engines"].values()
    assert c["usd"] == pytest.approx(sum(p["usd"] for p in parts)) and all(p["requests"] > 0 for p in parts)
    assert c["usd"] == pytest.approx(full["usd"])  # the capped and resumed build paid what one build pays
    assert gen.n_posts - n_full == full["engines"]["openai:gpt-4.1-mini"]["requests"]  # nothing paid twice
