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
    assert sync.summary["model_info"]["judge_retried"] > 0  # the retry round happened (a second batch)
    assert len(srv.batches) == 2 and res.summary["model_info"] == {**sync.summary["model_info"],
                                                                   "engine_stats": res.summary["model_info"]["engine_stats"]}
    assert res.summary["cost"]["batch"] is True
    assert res.summary["cost"]["output_tokens"] == sync.summary["cost"]["output_tokens"]
    assert res.summary["cost"]["usd"] == pytest.approx(sync.summary["cost"]["usd"] / 2, rel=1e-6)
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
        bad = [r for r in res.records if r.get("credit") is None]
        assert len(bad) == 1 and "expired" in json.dumps(bad[0]) and "2 submissions" in json.dumps(bad[0])
        assert res.summary["metrics"]["n_invalid"] == 1
        healed.append(True)  # --retry-failed: the invalid item, and only it, goes out again
        n = len(srv.batches)
        again = evaluate(SPECS[kind], "sample", "none", out=tmp_path, model_options=opts, limit=4, n_boot=10,
                         batch=True, retry_failed=True)
        assert again.summary["metrics"]["n_invalid"] == 0
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
        while not list(tmp_path.rglob("batches.json")) and time.monotonic() < deadline:
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
    from prbench.cache import NullCache
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
    assert res.summary["calls"] == sync.summary["calls"]
    assert (tmp_path / "batch" / "decisions.jsonl").read_text() == (tmp_path / "sync" / "decisions.jsonl").read_text()
    assert res.summary["cost"]["batch"] is True and set(res.summary["cost"]["engines"]) == {
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
        assert len(srv.batches) == 1 and res.summary["metrics"]["n_invalid"] == 0  # found by its token, not resent
        assert [s["batch_id"] for s in json.loads(ledger.read_text())] == list(srv.batches)
