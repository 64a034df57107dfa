"""Batch mode against strict stand-ins of OpenAI's Batch API and Anthropic's Message Batches.

The stand-ins (`prbench.testing.batch_server`) take their shapes and rules from the openai 3.57.0
client (`types/batch.py`, `resources/batches.py`, `types/file_purpose.py`) and the anthropic 2.10.0
client (`types/messages/message_batch.py`, `batch_create_params.py`, the result types); states
advance over time, some items fail or expire, results come back in reverse order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prbench import evaluate
from prbench.engines.batch import BatchPending
from prbench.errors import PrbenchError
from prbench.testing.batch_server import serve_batches

SPECS = {"openai": "judge:openai:gpt-4.1-mini", "anthropic": "judge:anthropic:claude-sonnet-4-6"}


def reply(body: dict) -> str:
    """A verdict for most prompts, an unparseable answer for some (the judge retries those)."""
    prompt = body["messages"][-1]["content"]
    return "I cannot tell." if sum(map(ord, prompt)) % 4 == 0 else f"Result: {'AB'[len(prompt) % 2]}"


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch) -> None:
    monkeypatch.setenv("PRBENCH_BATCH_POLL", "0.05,0.2")


def _opts(kind: str, srv, key: str) -> dict:
    return {"base_url": srv.base_url if kind == "openai" else srv.root_url, "api_key_env": key}


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "examples.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_batch_records_equal_the_synchronous_run(kind: str, api_key_env, tmp_path: Path, capsys) -> None:
    mode = {"provider": "openai"} if kind == "openai" else {}
    with serve_batches(kind, reply, **mode) as srv:
        opts = _opts(kind, srv, api_key_env[0])
        sync = evaluate(SPECS[kind], "sample", "none", out=tmp_path / "sync", model_options=opts, limit=6,
                        both_orders=True, n_boot=10)
        n_sync = srv.n_posts
        res = evaluate(SPECS[kind], "sample", "none", out=tmp_path / "batch", model_options=opts, limit=6,
                       both_orders=True, n_boot=10, batch=True)
        assert srv.n_posts > n_sync and not srv.refused
        routes = {r.path for r in srv.records[n_sync:] if r.method == "POST"}
        assert routes <= {"/v1/files", "/v1/batches", "/v1/messages/batches"}  # nothing synchronous
    assert res.records == sync.records and _records(res.path) == _records(sync.path)
    assert sync.summary.model_info["judge_retried"] > 0  # the retry round happened (a second batch)
    assert len(srv.batches) == 2 and res.summary.model_info == {**sync.summary.model_info,
                                                                   "engine_stats": res.summary.model_info["engine_stats"]}
    assert res.summary.cost.batch is True
    assert res.summary.cost.output_tokens == sync.summary.cost.output_tokens
    assert res.summary.cost.usd == pytest.approx(sync.summary.cost.usd / 2, rel=1e-6)
    subs = json.loads((res.path / "batches.json").read_text())
    assert [s["batch_id"] for s in subs] == list(srv.batches) and all(s["custom_ids"] for s in subs)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("batch ")]
    assert any("submitted" in ln for ln in lines) and any(("completed" in ln) or ("ended" in ln) for ln in lines)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_failed_items_resubmitted_once_expired_then_invalid(kind: str, api_key_env, tmp_path: Path) -> None:
    flaky, doomed, healed = set(), set(), []

    def fail(cid: str, n: int) -> bool:  # one item fails on its first submission
        if n == 1 and not flaky and cid not in doomed:
            flaky.add(cid)
        return cid in flaky and n == 1

    def expire(cid: str, n: int) -> bool:  # another item expires every time it is sent (until healed)
        if not doomed and cid not in flaky:
            doomed.add(cid)
        return cid in doomed and not healed

    with serve_batches(kind, lambda b: "Result: A", fail_fn=fail, expire_fn=expire) as srv:
        opts = _opts(kind, srv, api_key_env[0])
        res = evaluate(SPECS[kind], "sample", "none", out=tmp_path, model_options=opts, limit=4, n_boot=10, batch=True)
        (f,), (d,) = flaky, doomed
        assert srv.submitted[f] == 2 and srv.submitted[d] == 2  # once, and once more; never a third time
        bad = [r for r in res.records if r.credit is None]
        assert len(bad) == 1 and "expired" in bad[0].model_dump_json() and "2 submissions" in bad[0].model_dump_json()
        assert res.summary.metrics.n_invalid == 1
        healed.append(True)  # --retry-failed: the invalid item, and only it, goes out again
        n = len(srv.batches)
        again = evaluate(SPECS[kind], "sample", "none", out=tmp_path, model_options=opts, limit=4, n_boot=10,
                         batch=True, retry_failed=True)
        assert again.summary.metrics.n_invalid == 0
        assert [it["custom_id"] for b in list(srv.batches.values())[n:] for it in b.items] == [d]


def test_no_wait_submits_records_and_exits_then_collects(api_key_env, tmp_path: Path, capsys) -> None:
    from prbench.testing.cli import run_cli

    with serve_batches("openai", lambda b: "Result: A") as srv:
        args = ["eval", "-m", SPECS["openai"], "--data", "sample", "--limit", "3", "--condition", "none,oracle",
                "--out", str(tmp_path), "--base-url", srv.base_url, "--api-key-env", api_key_env[0], "--batch",
                "--quiet"]
        code, _, err = run_cli(capsys, *args, "--no-wait")
        assert code == BatchPending.exit_code == 4 and len(srv.batches) == 2  # every run submitted, then one exit
        assert "2 run(s)" in err.strip().splitlines()[-1]
        code, _, err = run_cli(capsys, *args)
        assert code == 0, err
        assert len(srv.batches) == 2  # collected, nothing resubmitted
    assert len(list(tmp_path.rglob("summary.json"))) == 2


def test_kill_while_polling_then_resume_creates_one_batch(api_key_env, tmp_path: Path) -> None:
    with serve_batches("openai", lambda b: "Result: A", timeline=(0.5, 3.0, 0.2)) as srv:
        args = [sys.executable, "-m", "prbench", "eval", "-m", SPECS["openai"], "--data", "sample", "--limit", "3",
                "--out", str(tmp_path), "--base-url", srv.base_url, "--api-key-env", api_key_env[0], "--batch",
                "--quiet"]
        env = {**os.environ, "PRBENCH_BATCH_POLL": "0.05,0.2", "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not any('"batch_id": "batch' in p.read_text() for p in tmp_path.rglob("batches.json")) \
                and time.monotonic() < deadline:  # submitted and recorded (not a fixed sleep: loaded machines lag)
            time.sleep(0.05)
        time.sleep(0.3)  # polling now
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert len(srv.batches) == 1
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert len(srv.batches) == 1  # resumed polling the recorded batch; nothing submitted twice
        assert "submitted" not in done.stderr and "completed" in done.stderr
    (summary,) = list(tmp_path.rglob("summary.json"))
    assert json.loads(summary.read_text())["metrics"]["n_invalid"] == 0


def test_study_eval_stage_in_batches(api_key_env, tmp_path: Path, capsys) -> None:
    from prbench.testing.cli import run_cli

    with serve_batches("openai", lambda b: "Result: A") as srv:
        (tmp_path / "study.yaml").write_text(
            f"name: b\ndata: sample\nlimit: 3\nconditions: [none]\nout: {tmp_path / 'out'}\nstages: [eval]\n"
            f"models:\n  - spec: baseline:length\n  - spec: {SPECS['openai']}\n"
            f"    options: {{base_url: '{srv.base_url}', api_key_env: {api_key_env[0]}}}\n    max_usd: 1.0\n",
            encoding="utf-8")
        code, _, err = run_cli(capsys, "study", str(tmp_path / "study.yaml"), "--batch", "--quiet")
        assert code == 0, err
        assert len(srv.batches) == 1 and {r.path for r in srv.records if r.method == "POST"} == {"/v1/files",
                                                                                                  "/v1/batches"}
    (ledger,) = (tmp_path / "out").rglob("batches.json")
    summary = json.loads((ledger.parent / "summary.json").read_text())
    assert summary["cost"]["batch"] is True and summary["cost"]["max_usd"] == 1.0


def test_build_generates_and_validates_through_batches(api_key_env, tmp_path: Path) -> None:
    from prbench.build import BuildConfig, build_benchmark
    from prbench.store.cache import NullCache
    from prbench.testing.records import make_records

    rows = [{k: v for k, v in r.items() if k not in ("chosen", "rejected")} for r in make_records(4)]
    (tmp_path / "src.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    def reply(body: dict) -> str:
        text = body["messages"][-1]["content"]
        if "Rate the answer" in text:
            return json.dumps(dict.fromkeys(("factuality", "relevance", "helpfulness", "rubric_fit"), 2 + len(text) % 3))
        return f"An answer of {len(text) % 7} points about the topic."

    with serve_batches("openai", reply, provider="openai") as gen, serve_batches("anthropic", reply) as val:
        cfg = BuildConfig(source=str(tmp_path / "src.jsonl"), generator="openai:gpt-4.1-mini",
                          validator="anthropic:claude-haiku-4-5", top_k=3, batch_size=2,
                          generator_options={"base_url": gen.base_url, "api_key_env": api_key_env[0]},
                          validator_options={"base_url": val.root_url, "api_key_env": api_key_env[0]})
        sync = build_benchmark(cfg, tmp_path / "sync", cache=NullCache())
        n_gen, n_val = gen.n_posts, val.n_posts
        res = build_benchmark(cfg, tmp_path / "batch", cache=NullCache(), batch=True)
        assert len(gen.batches) == 1 and len(val.batches) == 1 and not gen.refused and not val.refused
        assert {r.path for r in gen.records[n_gen:] if r.method == "POST"} == {"/v1/files", "/v1/batches"}
        assert {r.path for r in val.records[n_val:] if r.method == "POST"} == {"/v1/messages/batches"}
    assert res.records == sync.records and res.counts == sync.counts
    assert res.written["calls"] == sync.written["calls"]
    assert (tmp_path / "batch" / "decisions.jsonl").read_text() == (tmp_path / "sync" / "decisions.jsonl").read_text()
    assert res.summary.cost is not None and res.summary.cost.batch is True and set(res.written["cost"]["engines"]) == {
        "openai:gpt-4.1-mini", "anthropic:claude-haiku-4-5"}


def test_kill_between_submit_and_record_adopts_the_batch(api_key_env, tmp_path: Path, monkeypatch) -> None:
    from prbench.engines import batch as batch_mod

    real = batch_mod.Store.confirm

    def killed(self, sub, batch_id):  # the provider accepted the batch; the process dies before recording it
        if batch_id is not None:
            raise KeyboardInterrupt
        real(self, sub, batch_id)

    with serve_batches("openai", lambda b: "Result: A") as srv:
        opts = _opts("openai", srv, api_key_env[0])
        monkeypatch.setattr(batch_mod.Store, "confirm", killed)
        with pytest.raises(KeyboardInterrupt):
            evaluate(SPECS["openai"], "sample", "none", out=tmp_path, model_options=opts, limit=3, n_boot=10,
                     batch=True)
        (ledger,) = tmp_path.rglob("batches.json")
        assert [s["batch_id"] for s in json.loads(ledger.read_text())] == [None] and len(srv.batches) == 1
        monkeypatch.setattr(batch_mod.Store, "confirm", real)
        res = evaluate(SPECS["openai"], "sample", "none", out=tmp_path, model_options=opts, limit=3, n_boot=10,
                       batch=True)
        assert len(srv.batches) == 1 and res.summary.metrics.n_invalid == 0  # found by its token, not resent
        assert [s["batch_id"] for s in json.loads(ledger.read_text())] == list(srv.batches)


# -- limits and failures (#38 item 4) ---------------------------------------------------------------------------
def test_default_limits_are_the_providers_cited_ones_and_split_keeps_within_them(monkeypatch) -> None:
    from prbench.engines import batch as batch_mod
    from prbench.testing import batch_server

    assert batch_mod.limit_for("openai") == batch_mod.LIMITS["openai"]
    assert (batch_mod.LIMITS["openai"].requests, batch_mod.LIMITS["openai"].bytes) == batch_server.OPENAI_LIMITS
    assert (batch_mod.LIMITS["anthropic"].requests,
            batch_mod.LIMITS["anthropic"].bytes) == batch_server.ANTHROPIC_LIMITS == (100_000, 256 * 1024 * 1024)
    env = batch_mod.ENVELOPE  # room kept for the wrapper of the lines
    limit = batch_mod.BatchLimit(3, 25 + env, "test")
    items = [(f"k{i}", b"x" * (10 if i != 4 else 20)) for i in range(8)]
    groups = batch_mod.split(items, limit)
    assert [k for g in groups for k in g] == [k for k, _ in items]  # order kept, nothing lost
    sizes = dict(items)
    assert all(len(g) <= 3 and sum(len(sizes[k]) for k in g) <= 25 for g in groups) and len(groups) == 5
    with pytest.raises(PrbenchError, match="over the batch limit"):
        batch_mod.split([("big", b"x" * 26)], limit)
    monkeypatch.setenv("PRBENCH_BATCH_LIMIT", "60000,10")
    with pytest.raises(PrbenchError, match="at most the provider's"):  # configuration may only lower the limit
        batch_mod.limit_for("openai")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_job_over_the_request_limit_goes_out_as_several_batches(kind: str, api_key_env, tmp_path: Path,
                                                                 monkeypatch) -> None:
    with serve_batches(kind, reply, max_requests=5) as srv:
        opts = _opts(kind, srv, api_key_env[0])
        sync = evaluate(SPECS[kind], "sample", "none", out=tmp_path / "sync", model_options=opts, limit=6,
                        both_orders=True, n_boot=10)
        monkeypatch.setenv("PRBENCH_BATCH_LIMIT", "5,1000000")  # the stand-in's lowered limit, by configuration
        res = evaluate(SPECS[kind], "sample", "none", out=tmp_path / "batch", model_options=opts, limit=6,
                       both_orders=True, n_boot=10, batch=True)
        sizes = [len(b.items) for b in srv.batches.values()]
    assert max(sizes) == 5 and sum(sizes) > 12 and len(sizes) >= 4  # 12 first requests in 3 batches, then retries
    assert res.records == sync.records and res.summary.metrics == sync.summary.metrics
    assert res.summary.cost.usd == pytest.approx(sync.summary.cost.usd / 2, rel=1e-6)


def test_a_failed_batch_gives_the_providers_reason_verbatim(api_key_env, tmp_path: Path, capsys) -> None:
    """Over the stand-in's (lowered) limit without the matching configuration, OpenAI fails the batch as a whole:
    its reason appears in batches.json, in each item's result, and in the command's one error line."""
    from prbench.testing.cli import run_cli

    with serve_batches("openai", reply, max_requests=2) as srv:
        args = ["eval", "-m", SPECS["openai"], "--data", "sample", "--limit", "3", "--out", str(tmp_path),
                "--base-url", srv.base_url, "--api-key-env", api_key_env[0], "--batch", "--quiet"]
        code, _, err = run_cli(capsys, *args)
        assert len(srv.batches) == 2  # sent, failed, sent once more, failed: then one line, nothing more
    reason = "a batch takes at most 2 requests and"
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("error: ") and "failed: batch_too_large: The batch input file holds 3" in last
    assert reason in last
    (subs,) = tmp_path.rglob("batches.json")
    assert all(reason in s["reason"] for s in json.loads(subs.read_text()))
    rows = [json.loads(x) for x in (subs.parent / "batch_results.jsonl").read_text().splitlines()]
    assert rows and all(reason in r["error"] for r in rows)


def test_anthropic_batch_failure_reason_reaches_the_records(api_key_env, tmp_path: Path) -> None:
    with serve_batches("anthropic", reply, fail_batch=lambda n: "Overloaded: try again later") as srv:
        res = evaluate(SPECS["anthropic"], "sample", "none", out=tmp_path, model_options=_opts("anthropic", srv,
                       api_key_env[0]), limit=2, n_boot=10, batch=True)
    bad = [r for r in res.records if r.credit is None]
    assert len(bad) == 2 and all("errored: api_error: Overloaded: try again later" in r.model_dump_json() for r in bad)


def test_a_batch_over_anthropics_size_limit_is_refused_in_one_line(api_key_env, tmp_path: Path, capsys) -> None:
    from prbench.testing.cli import run_cli

    with serve_batches("anthropic", reply, max_bytes=2000) as srv:
        code, _, err = run_cli(capsys, "eval", "-m", SPECS["anthropic"], "--data", "sample", "--limit", "3", "--out",
                               str(tmp_path), "--base-url", srv.root_url, "--api-key-env", api_key_env[0], "--batch",
                               "--quiet")
        assert not srv.batches
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "refused a batch of 3 requests: HTTP 413" in err and "maximum allowed number of bytes" in err
    (subs,) = tmp_path.rglob("batches.json")
    assert json.loads(subs.read_text()) == []  # the intent is forgotten: nothing reached the provider


# -- money (#42 items 1-5) -------------------------------------------------------------------------------------
def _cost(summary_dir: Path) -> dict:
    (s,) = summary_dir.rglob("summary.json")
    c = json.loads(s.read_text())["cost"]
    return {k: c[k] for k in ("usd", "input_tokens", "output_tokens", "requests")}


@pytest.mark.parametrize("mangle_kind", ["strangers_and_repeats", "conflict", "garbage"])
def test_results_file_strangers_repeats_conflicts_and_garbage(mangle_kind: str, api_key_env, tmp_path: Path,
                                                             capsys) -> None:
    first = []

    def mangle(lines: list[str]) -> list[str]:
        if first:  # only the first results file is damaged
            return lines
        first.append(True)
        if mangle_kind == "strangers_and_repeats":  # every line twice, and a line for an id nobody sent
            stranger = json.loads(lines[0]) | {"custom_id": "not-ours"}
            return [x for ln in lines for x in (ln, ln)] + [json.dumps(stranger)]
        if mangle_kind == "conflict":  # the first line again with another answer
            other = json.loads(lines[0])
            other["response"]["body"]["choices"][0]["message"]["content"] += " Result: B"
            return [*lines, json.dumps(other)]
        return [lines[0][:40], "garbage {", *lines[1:]]  # a torn line and garbage: the rest still used

    with serve_batches("openai", lambda b: "Result: A") as clean_srv:
        clean = evaluate(SPECS["openai"], "sample", "none", out=tmp_path / "clean", batch=True, limit=4, n_boot=10,
                         model_options=_opts("openai", clean_srv, api_key_env[0]))
    with serve_batches("openai", lambda b: "Result: A", mangle=mangle) as srv:
        res = evaluate(SPECS["openai"], "sample", "none", out=tmp_path / "bad", batch=True, limit=4, n_boot=10,
                       model_options=_opts("openai", srv, api_key_env[0]))
        resent = [it["custom_id"] for b in list(srv.batches.values())[1:] for it in b.items]
    err = capsys.readouterr().err
    assert res.records == clean.records and _cost(tmp_path / "bad") == _cost(tmp_path / "clean")
    if mangle_kind == "strangers_and_repeats":
        assert not resent and "1 result line(s) for custom ids it did not hold" in err
    else:
        assert len(resent) == 1  # the conflicting / damaged item alone goes out again, decided by no file order
        assert ("different results for" in err) if mangle_kind == "conflict" else ("line 1 damaged" in err)


def test_damaged_run_folder_batch_files(api_key_env, tmp_path: Path, capsys) -> None:
    from prbench.testing.cli import run_cli

    with serve_batches("openai", lambda b: "Result: A") as srv:
        args = ["eval", "-m", SPECS["openai"], "--data", "sample", "--limit", "4", "--out", str(tmp_path), "--base-url",
                srv.base_url, "--api-key-env", api_key_env[0], "--batch", "--quiet"]
        assert run_cli(capsys, *args)[0] == 0
        want = _cost(tmp_path)
        (subs,) = tmp_path.rglob("batches.json")
        folder = subs.parent
        results = folder / "batch_results.jsonl"
        for f in ("examples.jsonl", "summary.json"):
            (folder / f).unlink()
        lines = results.read_text().splitlines()
        results.write_text("\n".join([lines[0][:30], *lines[1:]]) + "\n")  # a torn line
        code, _, err = run_cli(capsys, *args)
        assert code == 0 and f"{results}:1: damaged line skipped" in err
        assert len(srv.batches) == 1 and _cost(tmp_path) == want  # downloaded again, nothing resubmitted
        good = subs.read_text()
        for damage, where in (('[{"batch_id": "x", "custom_ids": [1', "not readable as JSON"),
                              ('["batch_000001"]', "batch 0: expected an object"), ('{"a": 1}', "expected a list")):
            subs.write_text(damage)
            code, _, err = run_cli(capsys, *args, "--overwrite")
            assert code == 2 and len(err.strip().splitlines()) == 1 and f"{subs}" in err and where in err, err
        subs.write_text(good)


def test_no_wait_then_collect_with_other_settings(api_key_env, tmp_path: Path, capsys) -> None:
    from prbench.testing.cli import run_cli

    with serve_batches("openai", lambda b: "Result: A") as srv:
        base = ["eval", "-m", SPECS["openai"], "--data", "sample", "--out", str(tmp_path), "--base-url",
                srv.base_url, "--api-key-env", api_key_env[0], "--quiet"]
        assert run_cli(capsys, *base, "--limit", "6", "--batch", "--no-wait")[0] == 4
        for other, says in ((["--seed", "7", "--batch"], "other run settings"),
                            ([], "still in provider batches; collect them with --batch")):
            code, _, err = run_cli(capsys, *base, "--limit", "6", *other)
            assert code == 2 and len(err.strip().splitlines()) == 1 and says in err, err
        assert len(srv.batches) == 1 and srv.n_posts == 2  # the upload and the batch: nothing else sent
        code, _, err = run_cli(capsys, *base, "--limit", "4", "--batch")  # fewer items: the whole batch is paid
        assert code == 0, err
        (ledger,) = tmp_path.rglob("cost.json")
        assert json.loads(ledger.read_text())["requests"] == 6
        assert run_cli(capsys, *base, "--limit", "6", "--batch")[0] == 0
        assert len(srv.batches) == 1
    with serve_batches("openai", lambda b: "Result: A") as srv2:
        evaluate(SPECS["openai"], "sample", "none", out=tmp_path / "ref", batch=True, limit=6, n_boot=10,
                 model_options=_opts("openai", srv2, api_key_env[0]))
    (summary,) = [p for p in tmp_path.rglob("summary.json") if "ref" not in p.parts]
    assert _cost(summary.parent) == _cost(tmp_path / "ref")


MOMENTS = {  # where a batch run is killed (-9): a file's state that says the run has reached that point
    "submitted": lambda d: (d / "batches.json").is_file(),
    "second submission": lambda d: (d / "batches.json").is_file() and d.joinpath("batches.json").read_text().count(
        '"batch_id": "batch') >= 2,
    "first results": lambda d: (d / "batch_results.jsonl").is_file(),
    "second results": lambda d: (d / "batch_results.jsonl").is_file() and len(
        {json.loads(x).get("batch_id") for x in (d / "batch_results.jsonl").read_text().splitlines() if x}) >= 2,
    "records": lambda d: (d / "examples.jsonl").is_file(),
}


def test_kill_9_at_five_moments_then_rerun_costs_what_one_run_costs(api_key_env, tmp_path: Path) -> None:
    env = {**os.environ, "PRBENCH_BATCH_POLL": "0.05,0.1", "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    with serve_batches("openai", reply, timeline=(0.2, 0.6, 0.2)) as srv:
        def args(out: Path) -> list[str]:
            return [sys.executable, "-m", "prbench", "eval", "-m", SPECS["openai"], "--data", "sample", "--limit", "6",
                    "--both-orders", "--out", str(out), "--base-url", srv.base_url, "--api-key-env", api_key_env[0],
                    "--batch", "--quiet"]

        done = subprocess.run(args(tmp_path / "clean"), env=env, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr
        want = _cost(tmp_path / "clean")
        assert want["requests"] > 12  # the judge's parse retries made a second batch
        killed = []
        for name, reached in MOMENTS.items():
            out = tmp_path / name.replace(" ", "-")
            proc = subprocess.Popen(args(out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline and not any(
                    reached(d) for d in out.rglob("*") if d.is_dir()):
                time.sleep(0.005)
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                killed.append(name)
            proc.wait()
            again = subprocess.run(args(out), env=env, capture_output=True, text=True, timeout=120,
                              check=False)
            assert again.returncode == 0, (name, again.stderr)
            assert _cost(out) == want, name
    assert len(killed) >= 4, killed  # the last moment may come after the run finished on a fast machine


def test_batch_module_imports_no_engine() -> None:
    """#40 item 4: the circle openai_engine -> batch -> anthropic_engine is cut: each engine names its own batch
    endpoints (`batch_api()`), and `RequestFailed` lives in `engines.base`."""
    import ast

    import prbench.engines.batch as batch_mod

    tree = ast.parse(Path(batch_mod.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in imported if m.endswith("_engine")}, imported
