"""First contact, part 5 (#50): a demo that keeps its word, `--until` that says when its rule never acted, docs
and help that match what the commands do."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from prbench.testing.cli import run_cli
from prbench.testing.records import make_records

ROOT = Path(__file__).resolve().parents[1]


# -- #50.4: `--until` on a small set ---------------------------------------------------------------------------
def test_until_on_the_63_pair_sample_says_the_rule_did_not_decide(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the first look was at 100 items, so all 63 were scored and the exhausted data was reported as the
    rule's decision ("ci=0.03 met at 63 of 63 items ... (+-0.000)")."""
    args = ["eval", "-m", "baseline:length", "-m", "baseline:lexical", "-c", "profile", "--until", "ci=0.03",
            "--out", str(tmp_path / "runs"), "--n-boot", "50"]
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    said = [ln for ln in out.splitlines() if ln.startswith("stopped:")]
    assert said == [("stopped: ran out of items: the rule did not decide (all 63 items scored before ci=0.03 could "
                     "stop the run; the answer is the fixed-n accuracy and its 95% CI)")], out
    assert "met at 63 of 63" not in out
    code, out, err = run_cli(capsys, *args, "--json")  # stored: read back from the folders, the same verdict
    assert code == 0, err
    for s in json.loads(out):
        assert s["sequential"]["decided_by_rule"] is False and "versus" not in s["sequential"]
        assert s["metrics"]["ci_low"] < s["accuracy"] < s["metrics"]["ci_high"]  # the fixed-n CI is the answer


def test_until_decided_on_the_sample_decides_before_the_end_or_says_it_did_not(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: "decided=0.02 met at 63 of 63 items: decided: lexical > length", a verdict the exhausted data made
    (a without-replacement sequence is exact on the whole set). Now the looks start at 13 of 63, and the rule
    separates the two before the last item."""
    code, out, err = run_cli(capsys, "eval", "-m", "baseline:length", "-m", "baseline:lexical", "-c", "profile",
                             "--until", "decided", "--out", str(tmp_path / "runs"), "--n-boot", "50")
    assert code == 0, err
    [said] = [ln for ln in out.splitlines() if ln.startswith("stopped:")]
    met = re.match(r"stopped: decided=0\.02 met at (\d+) of 63 items: decided: baseline:lexical \[profile\] > "
                   r"baseline:length \[profile\]$", said)
    assert met and int(met.group(1)) < 63, said


def test_until_looks_scale_with_the_data_and_progress_counts_items(tmp_path: Path) -> None:
    """300 pairs, a coin (baseline:random) under ci=0.001: before, the first look was at 100 items and the progress
    lines' totals were look sizes (100, 110, 121, ...); now the first look is a fifth of the data and every
    progress total is the 300 items the run may come to score."""
    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(300)), encoding="utf-8")
    res = subprocess.run(
        [sys.executable, "-m", "prbench", "eval", "-m", "baseline:random", "--data", str(data), "--until", "ci=0.001",
         "--out", str(tmp_path / "runs"), "--n-boot", "20"],
        capture_output=True, text=True, check=False,
        env={**os.environ, "PRBENCH_PROGRESS_SECONDS": "0.01", "PRBENCH_CACHE_DIR": str(tmp_path / "cache")})
    assert res.returncode == 0, res.stderr
    totals = {int(m) for m in re.findall(r"baseline:random \[none\]: (?:started, )?\d+/(\d+)", res.stderr)}
    assert totals == {300}, res.stderr[-2000:]
    [folder] = [p.parent for p in (tmp_path / "runs").rglob("summary.json")]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["sequential"]["n_used"] == 300 and summary["sequential"]["decided_by_rule"] is False
    assert "stopped: ran out of items: the rule did not decide (all 300 items" in res.stdout


# -- #50.5 / #50.8 / #50.9: help that matches the commands ------------------------------------------------------
def test_eval_help_lists_every_rm_prefix_and_groups_until_with_cost(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `-m` named six kinds (no style:, stance:, bt:, ...), `--until` sat under "Other options", and
    `--split` said "of a hub dataset" though it also picks the rows of a local file."""
    from prbench.registry import REWARDS

    code, out, _ = run_cli(capsys, "eval", "--help")
    assert code == 0
    flat = " ".join(out.split())
    model_help = flat.split("-m, --model SPEC")[1].split("-d, --data")[0]
    missing = [name for name in REWARDS if f"{name}:" not in model_help.replace(" ", "")]
    assert not missing, missing
    group = out.split("\nCost and stopping (API calls, --until):\n")[1].split("\n\n")[0]
    assert "--until " in group and "--until-max" in group and "--max-usd" in group
    assert "Other options" not in out
    assert "or the rows of a local file that name a `split`" in flat



def test_progress_says_encoding_once_the_encoder_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: "loading builtin:minilm-l6 (running 6m56s)" while MiniLM encoded (no step said what came after
    the load), and a line after a step counted its running time from the step's start."""
    import time

    from prbench.engines.builtin import encode_texts, load_sentence_encoder
    from prbench.runtime.progress import progress

    lines: list[str] = []

    class Err:
        def write(self, text: str) -> int:
            lines.extend(ln for ln in text.splitlines() if ln.strip())
            return len(text)

        def flush(self) -> None:
            return None

        def isatty(self) -> bool:
            return False

    monkeypatch.setenv("PRBENCH_PROGRESS_SECONDS", "0.01")
    monkeypatch.setattr(sys, "stderr", Err())
    with progress() as bar:
        bar.add_task("embed", total=None)
        encoder = load_sentence_encoder("builtin:minilm-l6")
        time.sleep(0.05)
        encode_texts(encoder, [f"text number {i} about hiking and baking" for i in range(64)])
    monkeypatch.undo()
    said = [ln for ln in lines if ln.startswith("embed: ")]
    encoding = [i for i, ln in enumerate(said) if ln.startswith("embed: encoding 64 texts, 0 done")]
    assert encoding, said
    assert not [ln for ln in said[encoding[0]:] if "loading" in ln], said


def test_the_copyable_classify_and_pooling_requests_in_the_docs_are_answered(tmp_path: Path) -> None:
    """Before: no copyable request for `/classify` or `/pooling`: a user had to render prompts with the RM
    tokenizer found in prbench's model cache. The three bodies on docs/rl.md are sent as written to a real
    server on 127.0.0.1 started as the page says; the rendered one is what SmolLM2's template renders."""
    import httpx

    from prbench.data import load_examples
    from prbench.integrations.export import verl_rows, write_parquet
    from prbench.serve.chat import load_tokenizer
    from prbench.serve.server import ThreadedServer, create_app
    from prbench.serve.service import RewardService

    page = (ROOT / "docs" / "rl.md").read_text(encoding="utf-8")
    section = page.split("### A request by hand (`/classify`, `/pooling`)")[1].split("\n## ")[0]
    assert "--policy-condition none" in section and "--rm-template builtin:smollm2-135m-instruct" in section
    classify, pooling, chat = (json.loads(b) for b in re.findall(r"```json\n(.*?)\n```", section, re.DOTALL))
    rows = verl_rows(load_examples("sample", "source"), condition="profile", policy_condition="none")
    tok = load_tokenizer("builtin:smollm2-135m-instruct")
    answer = chat["messages"][-1]["content"]
    assert chat["messages"][:-1] == rows[0]["prompt"]
    assert classify["input"] == tok.apply_chat_template([*rows[0]["prompt"], {"role": "assistant", "content": answer}],
                                                       add_generation_prompt=False, tokenize=False)
    users = write_parquet(rows, tmp_path / "verl" / "train.parquet")
    app = create_app("baseline:lexical", "profile", users=str(users), rm_template="builtin:smollm2-135m-instruct")
    with ThreadedServer(app) as srv:
        got = [httpx.post(f"{srv.base_url}{route}", json=body, timeout=60)
               for route, body in (("/classify", classify), ("/pooling", pooling), ("/classify", chat))]
    assert [r.status_code for r in got] == [200, 200, 200], [r.text for r in got]
    values = [r.json()["data"][0]["probs"][0] if "probs" in r.json()["data"][0] else r.json()["data"][0]["data"][0]
              for r in got]
    from prbench.rewards.base import load_rm

    service = RewardService(load_rm("baseline:lexical"), "profile")
    [(want, _)] = service.reward_rows([(rows[0]["extra_info"], answer)])
    assert values == [want] * 3, (values, want)


# -- #50.1: a demo that fits its promise ------------------------------------------------------------------------
def test_the_default_demo_is_the_small_grid_and_full_keeps_the_whole_study() -> None:
    """Before: `prbench demo` was the whole study (planner, five conditions, 24 samples: 41 min under load) with
    no smaller choice. Now the default plans about half the model calls and no planner stage, `--full` the
    whole study; both announce a duration."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}  # the plan table's width: no wrapped cell

    def plan(*extra: str) -> list[dict]:
        res = subprocess.run([sys.executable, "-m", "prbench", "study", *extra, "--dry-run", "--json"],
                             capture_output=True, text=True, check=False, env=env)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    small, full = plan("--preset", "demo"), plan("--preset", "demo-full")
    calls = {name: sum(r["model_calls"] for r in p) for name, p in (("small", small), ("full", full))}
    assert calls["small"] <= 0.55 * calls["full"], calls
    assert "plan" not in {r["stage"] for r in small} and "plan" in {r["stage"] for r in full}
    res = subprocess.run([sys.executable, "-m", "prbench", "demo", "--full", "--dry-run"], capture_output=True,
                         text=True, check=False, env=env)
    assert res.returncode == 0 and "planner builtin:smollm2-135m-instruct" in res.stdout, res.stderr
    from prbench.study.config import load_study_config

    for preset in ("demo", "demo-full"):
        cfg, _ = load_study_config(None, preset)
        assert re.search(r"\d+ min", cfg.estimates["duration"]), cfg.estimates
