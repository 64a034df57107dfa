"""Faults of models and of the network are counted, never guessed, and never lose or duplicate work.

Model faults: an RM returning NaN/inf or an error, a judge returning empty or garbage text, an
engine error: each such example is recorded as invalid (`credit: null` plus a reason), counted in
the summary (`n_invalid`; pairwise `parse_failures`) and excluded from accuracy; never a tie,
never a side. HTTP faults, against the real loopback OpenAI-compatible server: 429 with and
without Retry-After, 500/502/503, connection resets, client timeouts, malformed and truncated
bodies, slow replies. Retries are bounded (server requests are counted exactly), every example
lands in examples.jsonl exactly once, and `--retry-failed` later asks the server again only
for the examples that failed.
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from prbench import evaluate
from prbench.context.conditions import View
from prbench.engines.base import Engine, Generation, GenParams, Messages
from prbench.errors import PrbenchError
from prbench.rewards import PairQuery, PairwiseRM, PointwiseRM, Score, Verdict
from prbench.store.cache import NullCache
from prbench.testing.cli import run_cli
from prbench.testing.openai_server import Fault
from prbench.testing.records import make_records

RECORDS = make_records(12)
CHOSEN = {r["id"]: r["chosen"] for r in RECORDS}
ITEM = re.compile(r"\(item (\d+)\)")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))


def data_file(tmp_path: Path, n: int = 12) -> str:
    path = tmp_path / "bench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS[:n]), encoding="utf-8")
    return str(path)


def ids_once(run_path: Path, n: int) -> list[dict[str, Any]]:
    """Every line of examples.jsonl parses, and each expected id appears exactly once, in order."""
    lines = (run_path / "examples.jsonl").read_text(encoding="utf-8").splitlines()
    recs = [json.loads(line) for line in lines]
    assert [r["id"] for r in recs] == [r["id"] for r in RECORDS[:n]]
    return recs


# -- model faults: pointwise --------------------------------------------------------------------
class Faulty(PointwiseRM):
    """Scores chosen 2, rejected 1, except for planted faults (by example id)."""

    spec = "test:faulty"
    FAULTS: ClassVar[dict[str, tuple[str | None, str | None]]] = {"ex-001": ("nan", None), "ex-002": (None, "inf"), "ex-003": ("-inf", None),
              "ex-004": ("nan", "nan"), "ex-005": ("error", None), "ex-006": ("tie", "tie"),
              "ex-007": ("tie", "tie")}

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        out = []
        for view, response in batch:
            is_chosen = response == CHOSEN[view.example_id]
            fault = self.FAULTS.get(view.example_id, (None, None))[0 if is_chosen else 1]
            base = 2.0 if is_chosen else 1.0
            out.append({None: Score(base), "nan": Score(math.nan), "inf": Score(math.inf),
                        "-inf": Score(-math.inf), "error": Score(base, error="CUDA out of memory"),
                        "tie": Score(1.5)}[fault])
        return out


def test_non_finite_scores_and_errors_are_invalid_never_ties(tmp_path: Path) -> None:
    res = evaluate(Faulty(), data_file(tmp_path), "none", out=tmp_path / "runs", n_boot=50)
    m = res.summary.metrics
    assert m.n_invalid == 5 and m.n == 7 and m.n_total == 12
    assert m.ties == 2  # the two real ties only: no invalid pair became a tie
    assert m.accuracy == pytest.approx((5 * 1.0 + 2 * 0.5) / 7)
    assert m.accuracy_invalid_as_wrong == pytest.approx(6 / 12)
    by_id = {r["id"]: r for r in ids_once(res.path, 12)}
    for i in ("ex-001", "ex-002", "ex-003", "ex-004", "ex-005"):
        assert by_id[i]["credit"] is None and by_id[i]["invalid"], by_id[i]
    assert by_id["ex-001"]["score_chosen"] is None and by_id["ex-001"]["score_rejected"] == 1.0
    assert by_id["ex-002"]["score_rejected"] is None
    assert by_id["ex-005"]["invalid"] == "CUDA out of memory"
    assert by_id["ex-006"]["credit"] == 0.5 and "invalid" not in by_id["ex-006"]
    # failures are not cached: a fixed RM re-scores exactly the failed examples
    asked: list[str] = []

    class Fixed(Faulty):
        FAULTS: ClassVar[dict] = {}

        def score(self, batch):
            asked.extend(v.example_id for v, _ in batch)
            return super().score(batch)

    again = evaluate(Fixed(), data_file(tmp_path), "none", out=tmp_path / "runs", retry_failed=True, n_boot=50)
    assert sorted(set(asked)) == ["ex-001", "ex-002", "ex-003", "ex-004", "ex-005"]
    assert again.summary.metrics.n_invalid == 0 and again.summary.resumed_from == 7
    ids_once(again.path, 12)


# -- model faults: pairwise ---------------------------------------------------------------------
class Verdicts(PairwiseRM):
    """A pairwise RM that knows the answer key, except for planted faults."""

    spec = "test:verdicts"
    FAULTS: ClassVar[dict[str, Any]] = {"ex-001": Verdict(None, raw="I like both."),            # parse failure
                              "ex-002": Verdict(None, raw="", error="engine: HTTP 500"),  # engine failure
                              "ex-003": Verdict("A", raw="Result: A", error="engine: truncated body"),
                              "ex-004": Verdict("tie", raw="Result: tie")}

    def compare(self, batch: Sequence[PairQuery]) -> list[Verdict]:
        out = []
        for q in batch:
            fault = self.FAULTS.get(q.view.example_id)
            if fault is not None:
                out.append(fault)
            else:
                out.append(Verdict("A" if q.response_a == CHOSEN[q.view.example_id] else "B"))
        return out


def test_pairwise_failures_are_invalid_and_counted(tmp_path: Path) -> None:
    res = evaluate(Verdicts(), data_file(tmp_path), "none", out=tmp_path / "runs", n_boot=50)
    m = res.summary.metrics
    assert m.n_invalid == 3 and m.n == 9 and m.ties == 1
    assert m.accuracy == pytest.approx((8 + 0.5) / 9)
    assert m.pairwise.parse_failures == 2 and m.pairwise.verdicts == 12
    by_id = {r["id"]: r for r in ids_once(res.path, 12)}
    assert by_id["ex-001"]["invalid"] == "unparseable verdict"
    assert by_id["ex-002"]["invalid"] == "engine: HTTP 500"
    assert by_id["ex-003"]["credit"] is None  # an error wins over a letter that came with it
    # both orders: one failed order makes the pair invalid, not a tie
    both = evaluate(Verdicts(), data_file(tmp_path), "none", out=tmp_path / "both", both_orders=True, n_boot=50)
    assert both.summary.metrics.n_invalid == 3


class OddLetters(Verdicts):
    FAULTS: ClassVar[dict[str, Any]] = {"ex-001": Verdict("a"), "ex-002": Verdict("C"), "ex-003": Verdict("")}  # type: ignore[dict-item]


def test_out_of_vocabulary_verdicts_are_invalid_not_a_side(tmp_path: Path) -> None:
    res = evaluate(OddLetters(), data_file(tmp_path), "none", n_boot=20)
    assert res.summary.metrics.n_invalid == 3


class ShortRM(PointwiseRM):
    spec = "test:short"

    def score(self, batch):
        return [Score(1.0) for _ in batch][:-1]  # a plug-in bug: one score missing


def test_rm_returning_the_wrong_number_of_scores_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PrbenchError, match="test:short"):
        evaluate(ShortRM(), data_file(tmp_path), "none", n_boot=20)


def test_rm_crash_mid_run_keeps_finished_chunks_and_resume_is_identical(tmp_path: Path) -> None:
    calls = {"n": 0}

    class Crashy(PointwiseRM):
        spec = "test:crashy"

        def score(self, batch):
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("CUDA error: device-side assert triggered")
            return [Score(float(len(r))) for _, r in batch]

    class Healthy(Crashy):
        def score(self, batch):
            return [Score(float(len(r))) for _, r in batch]

    data = data_file(tmp_path)
    with pytest.raises(RuntimeError, match="device-side assert"):
        evaluate(Crashy(), data, "none", out=tmp_path / "a", batch_size=1, cache=NullCache())
    run = next((tmp_path / "a").rglob("examples.jsonl")).parent
    # kept: the first chunk (one batch, 1 item) and the next (four batches); the third died in flight
    assert len((run / "examples.jsonl").read_text().splitlines()) == 1 + 4
    assert not (run / "summary.json").exists()
    resumed = evaluate(Healthy(), data, "none", out=tmp_path / "a", batch_size=1, cache=NullCache())
    clean = evaluate(Healthy(), data, "none", out=tmp_path / "b", batch_size=1, cache=NullCache())
    assert resumed.summary.resumed_from == 1 + 4
    assert (resumed.path / "examples.jsonl").read_bytes() == (clean.path / "examples.jsonl").read_bytes()


# -- model faults: judges -----------------------------------------------------------------------
def _item(text: str) -> int:
    return int(ITEM.search(text).group(1))


def _last_user(body: dict[str, Any]) -> str:
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]


def _slot(prompt: str, tag: str) -> str:
    m = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", prompt, re.DOTALL)
    return m.group(1) if m else ""


def oracle_verdict(prompt: str) -> str:
    return "Result: A" if _slot(prompt, "response_a") in CHOSEN.values() else "Result: B"


class ScriptedEngine(Engine):
    """An in-process engine: empty text, garbage, engine errors and good verdicts, by item number."""

    spec = "test:scripted-engine"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def generate(self, prompts: Sequence[Messages], params: GenParams | Sequence[GenParams]) -> list[Generation]:
        out = []
        for p in prompts:
            text = p[-1]["content"]
            i = _item(text)
            self.calls.append(i)
            if i == 0:
                out.append(Generation(""))
            elif i == 1:
                out.append(Generation("   \n"))
            elif i == 2:
                out.append(Generation("Both are lovely answers, really, I could not say."))
            elif i == 3:
                out.append(Generation("Result: A or B"))
            elif i == 4:
                out.append(Generation("", finish_reason="error", error="RequestFailed: HTTP 503"))
            else:
                out.append(Generation(oracle_verdict(text)))
        return out


def test_judge_empty_and_garbage_output_counted(tmp_path: Path) -> None:
    from prbench.rewards.judges import load_judge

    engine = ScriptedEngine()
    judge = load_judge(engine, retries_on_parse_failure=1)
    res = evaluate(judge, data_file(tmp_path), "profile", out=tmp_path / "runs", n_boot=50)
    m, info = res.summary.metrics, res.summary.model_info
    assert m.n_invalid == 5 and m.n == 7 and m.accuracy == 1.0
    assert m.pairwise.parse_failures == 5  # four unreadable verdicts + one engine error: no verdict
    assert info["judge_parse_failures"] == 4 and info["judge_engine_errors"] == 1
    # each unreadable reply was retried once (bounded); engine errors are not parse failures: no retry
    assert sorted(engine.calls) == sorted(list(range(12)) + [0, 1, 2, 3])
    recs = {r["id"]: r for r in ids_once(res.path, 12)}
    assert recs["ex-004"]["invalid"].startswith("engine:") and recs["ex-000"]["invalid"] == "unparseable verdict"


@pytest.fixture()
def key(api_key_env: tuple[str, str]) -> str:
    return api_key_env[0]


def http_options(srv: Any, key: str, **kw: Any) -> dict[str, Any]:
    # a generous timeout: a loaded CI machine must not turn a healthy reply into a retry (counts are exact)
    opts = {"base_url": srv.base_url, "api_key_env": key, "max_retries": 3, "backoff_base": 0.01,
            "backoff_max": 0.05, "timeout": 5.0, "concurrency": 4}
    opts.update(kw)
    return opts


def test_openai_judge_empty_and_garbage_replies_counted(fake_openai, key: str, tmp_path: Path) -> None:
    def reply(body: dict[str, Any]) -> str:
        prompt = _last_user(body)
        i = _item(prompt)
        return {0: "", 1: "I cannot decide between them.", 2: "Result: maybe"}.get(i % 4, oracle_verdict(prompt))

    srv = fake_openai(reply)
    res = evaluate("judge:openai:fake-model", data_file(tmp_path), "none", out=tmp_path / "runs",
                   model_options=http_options(srv, key), n_boot=50)
    m = res.summary.metrics
    assert m.n_invalid == 9 and m.n == 3 and m.accuracy == 1.0
    assert m.pairwise.parse_failures == 9
    assert srv.n_posts == 12 + 9  # one retry per unreadable reply, no more
    ids_once(res.path, 12)
    # the pointwise judge: an empty or off-scale rating is invalid, never a number
    srv2 = fake_openai(lambda body: {0: "", 1: "Score: 42"}.get(_item(_last_user(body)) % 3, "Score: 7"))
    pw = evaluate("judge:openai:fake-model", data_file(tmp_path, 6), "none", n_boot=20,
                  model_options={**http_options(srv2, key), "mode": "pointwise"})
    assert pw.summary.metrics.n_invalid == 4 and pw.summary.metrics.ties == 2


# -- HTTP faults --------------------------------------------------------------------------------
FAULTS: list[Fault | None] = [
    Fault.rate_limit(), Fault.rate_limit(retry_after="0"), Fault.server_error(500), Fault.server_error(502),
    Fault.server_error(503), Fault.reset(), Fault.delay(4.0),  # 4 s > client timeout 2 s: a timeout
    Fault.malformed(), Fault.truncated(), Fault.short_body(), Fault.http_status(408),
    Fault.delay(0.5),  # slow but within the timeout: no retry
]


def first_attempt_faults(faults: list[Fault | None]) -> Any:
    """Item i's first request gets faults[i]; every later request is served normally."""
    seen: set[int] = set()
    lock = threading.Lock()

    def schedule(n: int, body: dict[str, Any]) -> Fault | None:
        i = _item(_last_user(body))
        with lock:
            if i in seen:
                return None
            seen.add(i)
        return faults[i]

    return schedule


def test_every_http_fault_in_one_eval_run(fake_openai, key: str, tmp_path: Path) -> None:
    srv = fake_openai(lambda body: oracle_verdict(_last_user(body)), faults=first_attempt_faults(FAULTS))
    t0 = time.monotonic()
    res = evaluate("judge:openai:fake-model", data_file(tmp_path), "profile", out=tmp_path / "runs",
                   model_options=http_options(srv, key, timeout=2.0), n_boot=50)
    m, stats = res.summary.metrics, res.summary.model_info["engine_stats"]
    assert m.n_invalid == 0 and m.accuracy == 1.0 and m.n == 12
    assert srv.n_posts == 11 * 2 + 1  # every faulted item exactly once more; the slow one once
    assert stats["retries"] == 11 and stats["failures"] == 0 and stats["requests"] == 23
    ids_once(res.path, 12)
    assert time.monotonic() - t0 < 30


def test_permanent_failures_bounded_counted_and_retried_alone(fake_openai, key: str, tmp_path: Path) -> None:
    broken = {"on": True}
    srv = fake_openai(lambda body: oracle_verdict(_last_user(body)),
                      faults=lambda n, body: Fault.server_error(503) if broken["on"] and _item(_last_user(body))
                      in (1, 4) else None)
    data = data_file(tmp_path)
    opts = http_options(srv, key, max_retries=2)
    res = evaluate("judge:openai:fake-model", data, "none", out=tmp_path / "runs", model_options=opts, n_boot=50)
    m = res.summary.metrics
    assert m.n_invalid == 2 and m.n == 10
    assert srv.n_posts == 10 + 2 * 3  # max_retries=2: three attempts per failing item, never more
    assert res.summary.model_info["engine_stats"]["failures"] == 2
    recs = {r["id"]: r for r in ids_once(res.path, 12)}
    assert recs["ex-001"]["invalid"].startswith("engine: HTTP 503") and "after 3 attempts" in recs["ex-001"]["invalid"]

    broken["on"] = False
    srv.clear()
    again = evaluate("judge:openai:fake-model", data, "none", out=tmp_path / "runs", model_options=opts,
                     retry_failed=True, n_boot=50)
    assert sorted(_item(_last_user(b)) for b in srv.requests) == [1, 4]  # only the failed ones
    assert again.summary.metrics.n_invalid == 0 and again.summary.resumed_from == 10
    clean = evaluate("judge:openai:fake-model", data, "none", out=tmp_path / "clean", model_options=opts, n_boot=50)
    assert (again.path / "examples.jsonl").read_bytes() == (clean.path / "examples.jsonl").read_bytes()


def test_fault_storms_end_in_bounded_time(fake_openai, key: str, tmp_path: Path) -> None:
    # 429 forever with Retry-After of a quarter hour: the wait is capped (backoff_max), attempts bounded
    srv = fake_openai(faults=lambda n, body: Fault.rate_limit(retry_after=900))
    t0 = time.monotonic()
    res = evaluate("judge:openai:fake-model", data_file(tmp_path, 4), "none", n_boot=20,
                   model_options=http_options(srv, key, max_retries=2))
    assert res.summary.metrics.n_invalid == 4 and srv.n_posts == 4 * 3
    assert time.monotonic() - t0 < 15
    # nobody listening at all: connection refused is retried, counted, and the run completes
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    dead = {"base_url": f"http://127.0.0.1:{dead_port}/v1", "api_key_env": key, "max_retries": 1,
            "backoff_base": 0.01, "backoff_max": 0.02, "timeout": 1.0}
    res = evaluate("judge:openai:fake-model", data_file(tmp_path, 3), "none", n_boot=20, model_options=dead)
    assert res.summary.metrics.n_invalid == 3
    assert all(r.invalid.startswith("engine: connection error") for r in res.records)


def test_cli_retry_failed_asks_only_for_failed_ids(fake_openai, key: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`prbench eval` with a judge over HTTP; garbage replies and rate limits; then --retry-failed."""
    garbage = {"on": True}

    def reply(body: dict[str, Any]) -> str:
        prompt = _last_user(body)
        return "hmm, hard to say" if garbage["on"] and _item(prompt) in (2, 5) else oracle_verdict(prompt)

    srv = fake_openai(reply, faults=first_attempt_faults([None, Fault.rate_limit(retry_after="0"), None, None,
                                                          Fault.reset(), None]))
    data = data_file(tmp_path, 6)
    args = ["eval", "-m", "judge:openai:fake-model", "--base-url", srv.base_url, "--api-key-env", key,
            "--data", data, "--out", str(tmp_path / "runs"), "--json"]
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    [summary] = json.loads(out)
    assert summary["metrics"]["n_invalid"] == 2 and summary["metrics"]["pairwise"]["parse_failures"] == 2
    assert srv.n_posts == 6 + 2 + 2  # two faulted first attempts, one judge retry per garbage reply
    garbage["on"] = False
    srv.clear()
    code, out, err = run_cli(capsys, *args, "--retry-failed")
    assert code == 0, err
    [summary] = json.loads(out)
    assert sorted(_item(_last_user(b)) for b in srv.requests) == [2, 5]
    assert summary["metrics"]["n_invalid"] == 0 and summary["resumed_from"] == 4
    ids_once(Path(summary["path"]), 6)
