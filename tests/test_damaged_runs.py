"""Issue 42 items 6-9: one damaged run folder is one `skipped: FILE:LINE: reason` line under every reader.

A runs folder holds healthy eval runs of three RMs, their Best-of-N and RL results, and one victim run
that gets one kind of damage per case. Each of the five readers (leaderboard, report, meta, export eee,
compare) must report the healthy runs, say `skipped:` once naming the victim's file, exit 0 (compare,
which reads exactly the two runs it is given, refuses with that one line instead) and never hang (an
alarm fails a case that blocks, e.g. on a FIFO).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import pytest
from test_meta import credits_with_mean, values_with_mean, write_ds, write_eval_run

IDS = [f"item-{i:03d}" for i in range(8)]
RMS = ("rm:a", "rm:b", "rm:c")


def _edit_summary(edit: Callable[[dict], None]) -> Callable[[Path], str]:
    def go(run: Path) -> str:
        s = json.loads((run / "summary.json").read_text())
        edit(s)
        (run / "summary.json").write_text(json.dumps(s))
        return "summary.json"
    return go


def _write(name: str, text: str | bytes) -> Callable[[Path], str]:
    def go(run: Path) -> str:
        p = run / name
        p.unlink()
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        return name
    return go


def _replace(name: str, how: str) -> Callable[[Path], str]:
    def go(run: Path) -> str:
        p = run / name
        p.unlink()
        if how == "dir":
            p.mkdir()
        elif how == "fifo":
            os.mkfifo(p)
        elif how == "loop":
            p.symlink_to(p.name)
        elif how == "dangling":
            p.symlink_to("nowhere.json")
        return name
    return go


def _lines(edit: Callable[[list[str]], list[str]]) -> Callable[[Path], str]:
    def go(run: Path) -> str:
        p = run / "examples.jsonl"
        p.write_text("".join(line + "\n" for line in edit(p.read_text().splitlines())))
        return "examples.jsonl"
    return go


def _record(field: str, value: object) -> Callable[[list[str]], list[str]]:
    def edit(lines: list[str]) -> list[str]:
        rec = json.loads(lines[2])
        rec[field] = value
        return [*lines[:2], json.dumps(rec), *lines[3:]]
    return edit


def _unreadable(run: Path) -> str:
    (run / "examples.jsonl").chmod(0)
    return "examples.jsonl"


def _nan(s: dict) -> None:
    s["metrics"]["accuracy"] = float("nan")


DEEP = "[" * 100_000 + "]" * 100_000
BIG = "1" * 5000
EVAL_DAMAGE: dict[str, Callable[[Path], str]] = {
    "examples cut to half": _lines(lambda lines: lines[:4]),
    "examples empty": _lines(lambda lines: []),
    "examples missing": lambda run: ((run / "examples.jsonl").unlink(), "summary.json")[1],
    "examples a directory": _replace("examples.jsonl", "dir"),
    "examples a FIFO": _replace("examples.jsonl", "fifo"),
    "examples a symlink loop": _replace("examples.jsonl", "loop"),
    "examples unreadable": _unreadable,
    "examples deep nesting": _lines(lambda lines: [*lines[:3], DEEP, *lines[3:]]),
    "examples 5000-digit integer": _lines(lambda lines: [*lines[:3], '{"id": "x", "credit": ' + BIG + "}",
                                                         *lines[3:]]),
    "examples torn line": _lines(lambda lines: [*lines[:3], lines[3][:20], *lines[4:]]),
    "examples duplicate id": _lines(lambda lines: [*lines, lines[0]]),
    "credit 7": _lines(_record("credit", 7)),
    "record without id": _lines(_record("id", None)),
    "accuracy edited": _edit_summary(lambda s: s.update(accuracy=0.99) or s["metrics"].update(accuracy=0.99)),
    "accuracy NaN": _edit_summary(_nan),
    "n_total edited": _edit_summary(lambda s: s.update(n_total=63)),
    "metrics missing": _edit_summary(lambda s: s.pop("metrics")),
    "run says bon": _edit_summary(lambda s: s.update(run="bon", format=1)),
    "unknown kind": _edit_summary(lambda s: s.update(run="nosuch", format=1)),
    "summary 5000-digit integer": _write("summary.json", '{"format": 1, "run": "eval", "n": ' + BIG + "}"),
    "summary deep nesting": _write("summary.json", DEEP),
    "summary a list": _write("summary.json", "[1, 2]"),
    "summary torn": _write("summary.json", '{"format": 1, "run": "eval", "n"'),
    "summary not UTF-8": _write("summary.json", b'{"model": "\xff\xfe"}'),
    "summary missing": lambda run: ((run / "summary.json").unlink(), "summary.json")[1],
    "summary a directory": _replace("summary.json", "dir"),
    "summary a symlink loop": _replace("summary.json", "loop"),
    "summary a dangling symlink": _replace("summary.json", "dangling"),
    "summary a FIFO": _replace("summary.json", "fifo"),
}
BON_DAMAGE: dict[str, Callable[[Path], str]] = {
    "bon per-item value edited": lambda run: _edit_json(run / "downstream.json",
                                                        lambda d: d["per_item"][IDS[0]].update({"4": 0.0})),
    "bon curve NaN": lambda run: _edit_json(run / "downstream.json", lambda d: d["expected"].__setitem__(0, float("nan"))),
    "bon oracle not numbers": lambda run: _edit_json(run / "downstream.json", lambda d: d.update(oracle="high")),
}


def _edit_json(path: Path, edit: Callable[[dict], None]) -> str:
    d = json.loads(path.read_text())
    edit(d)
    path.write_text(json.dumps(d))
    return path.name


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs") / "runs"
    for j, rm in enumerate((*RMS, "rm:victim")):
        write_eval_run(root / "eval", rm, credits_with_mean(3 + j, 8), ids=IDS)
        write_ds(root / "downstream", rm, {i: {1: 1.0, 2: 1.2, 4: v} for i, v in
                                          zip(IDS, values_with_mean(1.2 + 0.1 * j, 8))}, setting="bon")
    return root


def victim(root: Path, kind: str) -> Path:
    return next(p.parent for p in (root / ("eval" if kind == "eval" else "downstream")).rglob("*")
                if "victim" in str(p.parent.relative_to(root))
                and p.name in ("examples.jsonl", "downstream.json", "summary.json"))


@pytest.fixture()
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Warnings the readers log: on a terminal they reach stderr (logging's last-resort handler), here caplog."""
    caplog.set_level("WARNING")
    return caplog


@pytest.fixture()
def alarm() -> Iterator[None]:
    """Fail a case that blocks (a reader opening a FIFO would wait for a writer for ever)."""
    def hung(*_: object) -> None:
        raise TimeoutError("the reader hung")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str, logs: pytest.LogCaptureFixture | None = None
            ) -> tuple[int, str, str]:
    """(exit code, stdout, stderr and the warnings logged, one per line) of one in-process CLI call."""
    from prbench.cli import main

    capsys.readouterr()
    if logs is not None:
        logs.clear()
    code = 0
    with mock.patch.object(sys, "argv", ["prbench", *args]):
        try:
            main()
        except SystemExit as exc:
            code = int(exc.code or 0)
    out = capsys.readouterr()
    logged = "".join(f"{r.getMessage()}\n" for r in logs.records) if logs is not None else ""
    return code, out.out, out.err + logged


READERS = {"leaderboard": (), "report": (pytest.mark.slow,), "meta": (), "export": ()}  # reader -> its marks


def read(reader: str, root: Path, tmp: Path, capsys: pytest.CaptureFixture[str], logs: pytest.LogCaptureFixture
         ) -> tuple[int, str, str]:
    args = {"leaderboard": ["leaderboard", str(root)],
            "report": ["report", str(root), "-o", str(tmp / "r.html"), "--n-boot", "20", "--n-perm", "20"],
            "meta": ["meta", "-r", str(root / "eval"), "-D", str(root / "downstream"), "-o", str(tmp / "meta"),
                     "--n-boot", "20", "--n-perm", "20"],
            "export": ["export", "eee", str(root), "--out", str(tmp / "eee")]}[reader]
    return run_cli(capsys, *args, logs=logs)


def healthy_shown(reader: str, out: str, tmp: Path) -> bool:
    if reader == "leaderboard":
        return all(rm in out for rm in RMS)
    if reader == "report":
        return all(rm in (tmp / "r.html").read_text() for rm in RMS)
    if reader == "meta":
        return all(rm in json.loads((tmp / "meta" / "meta.json").read_text())["rows"][0]["rms"] for rm in RMS)
    specs = {json.loads(p.read_text())["model_info"]["additional_details"]["prbench_spec"]
             for p in (tmp / "eee").rglob("*.json")}
    return set(RMS) <= specs


CASES = [("eval", name) for name in EVAL_DAMAGE] + [("bon", name) for name in BON_DAMAGE]
# Every reader of each damaged kind it reads: the leaderboard reads eval runs only (a Best-of-N file is the others').
MATRIX = [pytest.param(reader, kind, damage, marks=marks, id=f"{kind}-{damage}-{reader}")
          for kind, damage in CASES for reader, marks in READERS.items() if not (reader == "leaderboard" and kind == "bon")]


@pytest.mark.parametrize("reader, kind, damage", MATRIX)
def test_one_damaged_run_is_one_skipped_line(template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             logs: pytest.LogCaptureFixture, alarm: None, reader: str, kind: str,
                                             damage: str) -> None:
    if damage == "examples unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a file without read permission")
    root = tmp_path / "runs"
    shutil.copytree(template, root, symlinks=True)
    run = victim(root, kind)
    file = (EVAL_DAMAGE | BON_DAMAGE)[damage](run)
    code, out, err = read(reader, root, tmp_path, capsys, logs)
    skipped = [line for line in err.splitlines() if "skipped:" in line]
    assert code == 0, err
    assert len(skipped) == 1, err
    assert f"{run / file}" in skipped[0] or f"{run}" in skipped[0], skipped
    assert "Traceback" not in err
    assert healthy_shown(reader, out, tmp_path)


@pytest.mark.parametrize("damage", ["examples cut to half", "examples a FIFO", "summary a list", "credit 7",
                                    "accuracy NaN", "run says bon", "summary 5000-digit integer"])
def test_compare_refuses_a_damaged_run_in_one_line(template: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str], alarm: None,
                                                   damage: str) -> None:
    """`compare` reads exactly the two runs it is given: a damaged one is one line naming its file, exit 2 (data)."""
    root = tmp_path / "runs"
    shutil.copytree(template, root, symlinks=True)
    run = victim(root, "eval")
    healthy = next(p for p in (root / "eval").rglob("summary.json") if "victim" not in str(p)).parent
    file = EVAL_DAMAGE[damage](run)
    code, _, err = run_cli(capsys, "compare", str(healthy), str(run))
    assert code == 2 and err.strip().count("\n") == 0 and str(run) in err and "Traceback" not in err, err
    assert file in err or "summary.json" in err


def test_a_newer_format_is_read_with_a_note(template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            logs: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "runs"
    shutil.copytree(template, root, symlinks=True)
    run = victim(root, "eval")
    _edit_summary(lambda s: s.update(format=99, run="eval"))(run)
    code, out, err = read("leaderboard", root, tmp_path, capsys, logs)
    assert code == 0 and "rm:victim" in out and "skipped" not in err
    assert f"note: {run / 'summary.json'}: format 99 is newer than this prbench reads" in err


def test_a_summary_that_disagrees_with_its_records_names_the_field(template: Path, tmp_path: Path) -> None:
    from prbench.errors import DataError
    from prbench.runkinds import open_run

    root = tmp_path / "runs"
    shutil.copytree(template, root, symlinks=True)
    run = victim(root, "eval")
    _lines(lambda lines: lines[:4])(run)
    with pytest.raises(DataError, match=r"summary\.json: n_total: says 8 pairs but examples\.jsonl holds 4"):
        open_run(run)
    shutil.rmtree(run)
    shutil.copytree(victim(template, "eval"), run)
    EVAL_DAMAGE["accuracy edited"](run)
    with pytest.raises(DataError, match=r"summary\.json: accuracy: says 0\.99 but the credits in examples\.jsonl "
                                        r"give 0\.75"):
        open_run(run)
