"""Issue 51, round four (readers and files): each finding is a one-line refusal or the right behaviour.

1: a reader checks every figure it publishes against the records (an edited CI, category or per-user figure
is one `skipped:` line naming the field); 8: a key in the base URL's query never reaches a record or the
terminal; 9: the ledger counts what was sent, settled from disk after kill -9; 10: every file read is
bounded before it allocates (sparse files); 11: a FIFO is refused, never waited on; 12: `prbench power`
refuses nonsense; 13: `train --out` onto a file is refused before any work; 18: the smaller ones.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from prbench import evaluate
from prbench.testing.records import make_records

PRBENCH = [sys.executable, "-m", "prbench"]


def run_cli(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr plus the warnings logged) of one in-process CLI call."""
    from prbench.testing.cli import run_cli as run

    caplog.clear()
    code, out, err = run(capsys, *args)
    return code, out, err + "".join(f"{r.getMessage()}\n" for r in caplog.records)


def in_subprocess(code: str, *, timeout: float = 120) -> tuple[int, str, int]:
    """(exit code, stderr, peak resident memory in MiB) of `code` run by a fresh Python (ends with a FIFO's
    TimeoutExpired when it blocks). The peak is the process's own VmHWM: getrusage's ru_maxrss keeps what the
    forked copy of this (large) test process held before exec, so it read 1.7 GB after a long test session."""
    body = textwrap.indent(textwrap.dedent(code), " " * 8)
    script = ("import sys\ntry:\n    from prbench.cli import main\n    rc = 0\n    try:\n" + body +
              "\n    except SystemExit as exc:\n        rc = exc.code if isinstance(exc.code, int) else 1\n"
              "finally:\n    hwm = [ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')]\n"
              "    print(f'MAXRSS {int(hwm[0]) // 1024}', file=sys.stderr)\nsys.exit(rc)\n")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, check=False)
    rss = int(res.stderr.rsplit("MAXRSS ", 1)[1].split()[0])
    return res.returncode, res.stderr.rsplit("MAXRSS ", 1)[0], rss


def cli_code(*args: str) -> str:
    return f"sys.argv = {['prbench', *args]!r}\nmain()"


# -- 1: readers check every published figure ------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real eval runs (a length baseline and a random one) on 21 pairs of 4 users in 3 categories."""
    root = tmp_path_factory.mktemp("round4")
    data = root / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(21)), encoding="utf-8")
    for spec in ("baseline:length", "baseline:random"):
        evaluate(spec, str(data), "none", out=root / "runs", n_boot=200)
    return root / "runs"


def _edit(path: Path, edit: Callable[[dict], None]) -> None:
    s = json.loads(path.read_text())
    edit(s)
    path.write_text(json.dumps(s))


def _ci(s: dict) -> None:
    s["metrics"].update(ci_low=0.90, ci_high=0.95)


def _groups(s: dict) -> None:
    for g in s["metrics"]["categories"]["groups"].values():
        g["accuracy"] = 0.99


def _users(s: dict) -> None:
    s["per_user"]["users"]["mean"] = 0.99


def _macro(s: dict) -> None:
    s["metrics"]["categories"]["macro"]["ci_high"] = 0.99


EDITS = {"ci": (_ci, "metrics.ci_low", "90.0"), "categories": (_groups, "metrics.categories.groups.", "99.0"),
         "per user": (_users, "per_user.users.mean", None), "macro CI": (_macro, "metrics.categories.macro", None)}
READERS = ("leaderboard", "by category", "report", "export eee")


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("edit", EDITS)
def test_an_edited_figure_is_one_skipped_line_naming_it(finished: Path, tmp_path: Path, reader: str, edit: str,
                                                        capsys: pytest.CaptureFixture[str],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING")
    root = tmp_path / "runs"
    shutil.copytree(finished, root)
    victim = next(p for p in root.rglob("summary.json") if "length" in str(p))
    fn, field, shown = EDITS[edit]
    _edit(victim, fn)
    args = {"leaderboard": ["leaderboard", str(root)], "by category": ["leaderboard", str(root), "--by-category"],
            "report": ["report", str(root), "-o", str(tmp_path / "r.html"), "--n-boot", "20", "--n-perm", "20"],
            "export eee": ["export", "eee", str(root), "--out", str(tmp_path / "eee")]}[reader]
    code, out, err = run_cli(capsys, caplog, *args)
    skipped = [line for line in err.splitlines() if "skipped:" in line]
    assert code == 0 and len(skipped) == 1, err
    assert f"{victim}: {field}" in skipped[0] and "Traceback" not in err, skipped
    published = out + "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".html", ".json")
                              and "runs" not in p.parts)
    assert "baseline:random" in published  # the healthy run is still read
    assert "baseline:length" not in published.replace(str(victim.parent), "")
    if shown:
        assert f"{shown}" not in out


def test_an_untouched_run_passes_every_recomputed_check(finished: Path) -> None:
    """The check recomputes what the driver wrote, bit for bit: a fresh run is never refused (n_boot recorded)."""
    from prbench.runkinds import open_run

    for summary in finished.rglob("summary.json"):
        run = open_run(summary.parent)
        assert json.loads(summary.read_text())["metrics"]["n_boot"] == 200 and run.summary is not None


# -- 10, 11: bounded reads, no FIFO ---------------------------------------------------------------------------
def _sparse(path: Path, size: str) -> Path:
    path.unlink(missing_ok=True)
    subprocess.run(["truncate", "-s", size, str(path)], check=True)
    return path


def test_a_2gb_sparse_examples_file_is_skipped_in_bounded_memory(finished: Path, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    shutil.copytree(finished, root)
    victim = next(p for p in root.rglob("examples.jsonl") if "length" in str(p))
    _sparse(victim, "2G")
    code, err, rss = in_subprocess(cli_code("leaderboard", str(root)))
    skipped = [line for line in err.splitlines() if "skipped:" in line]
    assert code == 0 and len(skipped) == 1 and str(victim) in skipped[0], err
    assert "longer than" in skipped[0], skipped
    assert rss < 1200, f"{rss} MiB to refuse a 2 GB sparse file"


def test_a_1gb_sparse_users_file_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    users = _sparse(tmp_path / "users.jsonl", "1G")
    code, err, rss = in_subprocess(f"""
        from prbench.errors import PrbenchError
        from prbench.serve.items import read_rows
        try:
            read_rows({str(users)!r})
        except PrbenchError as exc:
            print("error:", exc, file=sys.stderr)
    """)
    assert code == 0 and f"error: {users}:1: line longer than" in err, err
    assert rss < 1200, f"{rss} MiB to refuse a 1 GB sparse file"


def test_a_large_json_data_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    data = _sparse(tmp_path / "bench.json", "1G")
    code, err, rss = in_subprocess(cli_code("data", "validate", str(data)))
    assert code == 2 and err.count("\n") == 1 and f"{data}: " in err and "read whole" in err, err
    assert rss < 1200


@pytest.mark.parametrize("reader", ["validate", "train", "eval", "serve-reward --users"])
def test_a_fifo_is_refused_by_every_data_reader(tmp_path: Path, reader: str) -> None:
    fifo = tmp_path / "bench.jsonl"
    os.mkfifo(fifo)
    code = {"validate": cli_code("data", "validate", str(fifo)),
            "train": cli_code("train", "lore", "--data", str(fifo), "--out", str(tmp_path / "m")),
            "eval": cli_code("eval", "-q", "-m", "baseline:length", "--data", str(fifo), "--out", str(tmp_path / "r")),
            "serve-reward --users": f"""
                from prbench.errors import PrbenchError
                from prbench.serve.items import read_rows
                try:
                    read_rows({str(fifo)!r})
                except PrbenchError as exc:
                    print("error:", exc, file=sys.stderr)
                    sys.exit(2)
            """}[reader]
    rc, err, _ = in_subprocess(code, timeout=60)  # the old readers opened the FIFO twice and waited for ever
    assert rc == 2 and err.strip() == f"error: {fifo}: a FIFO, not a file; give a regular file" or \
        reader.startswith("serve") and rc == 2 and f"{fifo}: a FIFO, not a file" in err, err


# -- 12: power ------------------------------------------------------------------------------------------------
POWER_NONSENSE = {
    "icc nan": (["--icc", "nan"], "--icc"), "icc inf": (["--icc", "inf"], "--icc"),
    "icc 1.5": (["--icc", "1.5"], "--icc"), "icc -0.1": (["--icc", "-0.1"], "--icc"),
    "items-per-user inf": (["--items-per-user", "inf"], "--items-per-user"),
    "items-per-user 0": (["--items-per-user", "0"], "--items-per-user"),
    "items-per-user -3": (["--items-per-user", "-3"], "--items-per-user"),
    "items-per-user 1e308": (["--items-per-user", "1e308"], "--items-per-user"),
    "diff 1e-300": (["--diff", "1e-300"], "too small to detect"), "diff 1e308": (["--diff", "1e308"], "--diff"),
    "diff nan": (["--diff", "nan"], "--diff"),
    "accuracy beside discordance": (["--accuracy", "0.7"], "give one of them"),
}


def test_power_refuses_nonsense_in_one_line(capsys: pytest.CaptureFixture[str],
                                            caplog: pytest.LogCaptureFixture) -> None:
    base = ["power", "--discordance", "0.3", "--diff", "0.05"]
    for name, (extra, says) in POWER_NONSENSE.items():
        args = [*base, *extra] if extra[0] != "--diff" else ["power", "--discordance", "0.3", *extra]
        code, out, err = run_cli(capsys, caplog, *args)
        assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: ") and says in err, \
            (name, err, out)
    code, out, _ = run_cli(capsys, caplog, *base, "--icc", "0.05", "--items-per-user", "10")
    assert code == 0 and "1355 items from 136 users" in out and "ICC 0.050" in out
    code, out, _ = run_cli(capsys, caplog, "power", "--help")
    assert "a fraction (0.05 = 5 points)" in " ".join(out.split())


# -- 13: train --out onto the data file ------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["train"], ["train", "lore"], ["train", "bt", "--frozen-encoder"]])
def test_train_out_onto_a_file_is_refused_before_any_work(tmp_path: Path, command: list[str]) -> None:
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(24)), encoding="utf-8")
    before = data.read_bytes()
    for out in (data, data / "model"):
        rc, err, _ = in_subprocess(cli_code(*command, "--data", str(data), "--out", str(out)))
        assert rc == 2 and err.count("\n") == 1, err
        assert err.startswith(f"error: --out {out}: {data} is a file, not a folder"), err
    assert data.read_bytes() == before


# -- 8: a key in the base URL's query ---------------------------------------------------------------------------
SECRET = "SEKRIT-0123456789abcdef"


@pytest.mark.parametrize("path", ["/v1", "/wrong"])
def test_a_key_in_the_base_url_query_stays_a_query_and_is_never_written(tmp_path: Path, path: str) -> None:
    """The query goes with each request as a query (never spliced into the path), and no record, file or terminal
    line holds the key, also when the server echoes the path it was sent in an error (`no route ...`)."""
    from prbench.testing.openai_server import serve

    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(4)), encoding="utf-8")
    env = {**os.environ, "PRBENCH_CACHE_DIR": str(tmp_path / "cache"), "PRB_ROUND4_KEY": "local-key"}
    with serve(lambda body: "A") as srv:
        url = f"{srv.base_url.removesuffix('/v1')}{path}?api_key={SECRET}&region=eu"
        res = subprocess.run([*PRBENCH, "eval", "-q", "-m", "judge:openai:m", "--data", str(data), "--base-url", url,
                              "--api-key-env", "PRB_ROUND4_KEY", "--out", str(tmp_path / "runs"), "-M", "max_retries=0"],
                             env=env, capture_output=True, text=True, timeout=300, check=False)
        sent = [r.path for r in srv.records if r.method == "POST"]
    assert sent and all(p == f"{path}/chat/completions?api_key={SECRET}&region=eu" for p in sent), sent
    if path == "/v1":
        assert res.returncode == 0, res.stderr
    else:
        assert res.returncode != 0 and "no route" in res.stderr and "REDACTED" in res.stderr, res.stderr
    assert SECRET not in res.stdout + res.stderr
    written = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert any(p.name == "examples.jsonl" for p in written)
    assert not [p for p in written if SECRET.encode() in p.read_bytes()]


def test_redaction_covers_a_bare_path_and_bool_switches_are_no_secret() -> None:
    from prbench.store.runs import redact_url, refuse_secrets

    assert redact_url(f"no route /v1/?api_key={SECRET}chat/completions") == \
        "no route /v1/?api_key=REDACTED"
    assert redact_url(f"HTTP 404: no route /v1/chat/completions?region=eu&token={SECRET}") == \
        "HTTP 404: no route /v1/chat/completions?region=eu&token=REDACTED"
    refuse_secrets({"no_api_key": True, "api_key_env": "MY_KEY"})  # --no-api-key was refused as "a secret"


# -- 18: the smaller ones ---------------------------------------------------------------------------------------
def test_a_run_without_config_is_one_skipped_line_not_a_second_row(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING")
    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(12)), encoding="utf-8")
    for condition in ("none", "profile"):
        evaluate("baseline:length", str(data), condition, out=tmp_path / "runs", n_boot=50)
    victim = next((tmp_path / "runs").rglob("profile/config.json"))
    victim.unlink()
    code, out, err = run_cli(capsys, caplog, "leaderboard", str(tmp_path / "runs"), "--json")
    skipped = [line for line in err.splitlines() if "skipped:" in line]
    assert code == 0 and len(skipped) == 1 and f"{victim}: missing" in skipped[0], err
    rows = json.loads(out)["rows"]
    assert len(rows) == 1 and set(rows[0]["cells"]) >= {"none"} and "profile" not in rows[0]["cells"], rows


def test_data_detect_on_an_empty_folder_refuses_as_validate_does(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "empty").mkdir()
    for command in ("detect", "validate"):
        code, out, err = run_cli(capsys, caplog, "data", command, str(tmp_path / "empty"))
        assert code == 2 and out == "" and err.count("\n") == 1 and "folder holds no .jsonl" in err, (command, err)


def test_train_shows_a_library_warning_as_one_line(tmp_path: Path) -> None:
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(24)), encoding="utf-8")
    rc, err, _ = in_subprocess("""
        import warnings
        from unittest import mock
        from prbench.errors import PrbenchError

        def warns(*args, **kwargs):
            warnings.warn("The least populated class in y has only 1 members,\\n  which is less than n_splits",
                          UserWarning, stacklevel=1)
            raise PrbenchError("stopped after the warning")

        with mock.patch("prbench.train.methods.train_method", warns):
    """.rstrip(" ") + textwrap.indent(cli_code("train", "lore", "--data", str(data), "--out", str(tmp_path / "m")), " " * 12))
    assert rc == 2, err
    assert err.splitlines() == ["warning: The least populated class in y has only 1 members,",
                                "error: stopped after the warning"], err


# -- 9: the ledger counts what was sent -------------------------------------------------------------------------
def test_kill_9_of_a_judge_run_never_under_counts_what_was_sent(tmp_path: Path) -> None:
    """The stand-in counts the requests it received; a run killed with SIGKILL mid-chunk and resumed must have
    cost.json count at least as many (answered-but-unsaved and in-flight requests included), and at most those
    the killed process had journalled but not yet put on the wire."""
    import signal
    import time

    from prbench.testing.openai_server import serve

    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(48)), encoding="utf-8")
    env = {**os.environ, "PRBENCH_CACHE_DIR": str(tmp_path / "cache"), "PRB_ROUND4_KEY": "local-key"}

    def slow(body: dict) -> str:
        time.sleep(0.05)
        return "A"

    with serve(slow) as srv:
        args = [*PRBENCH, "eval", "-q", "-m", "judge:openai:m", "--data", str(data), "--base-url", srv.base_url,
                "--api-key-env", "PRB_ROUND4_KEY", "--out", str(tmp_path / "runs"), "--batch-size", "4"]
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            recorded = list((tmp_path / "runs").rglob("examples.jsonl"))
            if recorded and recorded[0].read_text().count("\n") >= 4 and srv.n_posts >= 12:
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_at = srv.n_posts
        folder = next((tmp_path / "runs").rglob("examples.jsonl")).parent
        kept = (folder / "examples.jsonl").read_text().count("\n")
        assert kept < 48
        res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == 0, res.stderr
        time.sleep(0.2)  # the stand-in's last handler threads
        received = srv.n_posts
    ledger = json.loads((folder / "cost.json").read_text())
    assert received > killed_at  # the resumed run sent what the killed one had not recorded
    assert received <= ledger["requests"] <= received + 8, (received, ledger["requests"], killed_at, kept)


def test_the_journal_carries_an_older_ledger_and_counts_unsettled_requests_once(tmp_path: Path) -> None:
    from prbench import cost

    price = cost.price_for("openai", "gpt-4.1-mini")
    journal = cost.Journal(tmp_path / cost.JOURNAL_FILE)
    older = {"input_tokens": 1000, "output_tokens": 100, "requests": 5, "usd": 0.5}  # a cost.json of before
    led = cost.Ledger(price, earlier=older, label="openai:gpt-4.1-mini", journal=journal)
    assert not journal.path.exists()  # nothing sent, nothing written (a finished run opens on read-only media)
    led.settle(led.reserve("hello", 10), {"input_tokens": 7, "output_tokens": 3})
    led.reserve("x" * 30, 20)  # sent, then the process dies before the reply
    again = cost.Ledger(price, earlier=led.summary(), label="openai:gpt-4.1-mini", journal=journal)
    assert again.requests == 7 and again.input_tokens == 1000 + 7 + 10 and again.total("output_tokens") == 123
    assert again.usd == pytest.approx(0.5 + price.usd(17, 0, 23))
    assert cost.Ledger(price, label="openai:gpt-4.1-mini", journal=journal).requests == 7  # read twice: once


def test_an_overlong_line_is_passed_over_and_repair_keeps_the_records_after_it(tmp_path: Path) -> None:
    from prbench.store.runs import MAX_LINE_BYTES, scan_records

    path = tmp_path / "examples.jsonl"
    with path.open("wb") as fh:
        fh.write(b'{"id": "a", "credit": 1.0}\n')
        fh.seek(MAX_LINE_BYTES + (1 << 25), os.SEEK_CUR)  # a sparse hole: a line of 96 MB of zero bytes
        fh.write(b'\n{"id": "b", "credit": 0.0}\n')
    records, problems = scan_records(path)
    assert [r["id"] for r in records] == ["a", "b"]
    assert problems == [(2, "unreadable", None, f"a line longer than {MAX_LINE_BYTES} bytes (damaged?)")]
