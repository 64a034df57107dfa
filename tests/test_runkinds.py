"""Run kinds: one checked reader for meta, report, leaderboard and export; one group key per kind (issue 28, 31.8, 31.12)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_meta import credits_with_mean, values_with_mean, write_ds, write_eval_run, write_pa_run

from prbench.errors import DataError
from prbench.meta import meta_evaluate
from prbench.runkinds import kinds, open_run, scan_runs

RMS = ["rm:a", "rm:b", "rm:c"]
IDS = [f"item-{i:03d}" for i in range(10)]
FAST = {"n_boot": 20, "n_perm": 20, "seed": 0}


def make_runs(root: Path) -> Path:
    """Eval runs of three RMs and their RL results, in one runs folder."""
    for rm, right, down in zip(RMS, [9, 7, 5], [1.8, 1.0, 1.2]):
        write_eval_run(root / "eval", rm, credits_with_mean(right, 10), ids=IDS)
        write_ds(root / "downstream", rm, dict(zip(IDS, values_with_mean(down, 10))))
    return root


def test_every_builtin_kind_is_registered_with_its_models() -> None:
    by_name = {k.name: k for k in kinds()}
    assert {"eval", "bon", "rl", "rgd", "policy-accuracy", "icl", "build", "sample", "plan"} <= set(by_name)
    assert by_name["eval"].summary_model is not None and by_name["eval"].record_model is not None
    assert {k.setting for k in kinds() if k.role == "downstream"} >= {"bon", "rl", "rgd", "policy_accuracy"}


def test_the_kinds_commands_are_the_clis_commands() -> None:
    """Each kind declaring a `command` is `prbench <name>` with that command (built-in kinds through the plug-ins'
    path); `prbench.cli.COMMANDS` names only those kinds (for their place in --help) and no other kind."""
    import typer

    from prbench.cli import COMMANDS, _register, app
    from prbench.registry import resolve

    _register()
    declared = {k.name: type(k).command for k in kinds() if type(k).command is not None}
    assert {n for n, target in COMMANDS.items() if target is None} == set(declared) >= {"eval", "bon", "build"}
    commands = {c.name: c.callback for c in app.registered_commands}
    groups = {g.name: g.typer_instance for g in app.registered_groups}
    for name, target in declared.items():
        made = resolve(target)
        if isinstance(made, typer.Typer):
            assert groups[name] is made
        else:
            assert commands[name] is getattr(made, "callback", made)


def test_the_capability_packages_kinds_name_their_parts_by_reference() -> None:
    """Every built-in run kind is a package of `prbench.capabilities` whose kind names its settings, driver, stage,
    command and report block by direct reference, not by a "module:attr" string (issue 49). Settings other stages
    read (the planner's, the samples', build's pipeline) sit below the capabilities."""
    by_name = {k.name: k for k in kinds()}
    below = {"sample": "prbench.config", "plan": "prbench.config", "build": "prbench.build.settings"}
    for name in ("eval", "build", "bon", "rl", "rgd", "policy-accuracy", "icl", "sample", "plan"):
        cls = type(by_name[name])
        package = f"prbench.capabilities.{name.replace('-', '_')}"
        assert cls.__module__ == f"{package}.kind", (name, cls.__module__)
        assert cls.settings_model.__module__ == below.get(name, f"{package}.settings"), name
        for part in ("settings_model", "driver", "stage", "command", "report_section"):
            assert not isinstance(getattr(cls, part), str), (name, part)
        assert callable(by_name[name].driver) and cls.command is not None


def test_each_kinds_driver_takes_its_settings_model() -> None:
    """A kind's `settings_model` and `driver` say what runs: the driver takes that model (or one built on it)."""
    import typing

    from prbench.registry import resolve

    declared = [k for k in kinds() if k.driver is not None]
    assert {k.name for k in declared} >= {"eval", "bon", "rl", "rgd", "policy-accuracy", "icl", "sample", "plan",
                                          "build"}
    for k in declared:
        model = resolve(k.settings_model)
        hints = typing.get_type_hints(resolve(k.driver))
        takes = [t for h in hints.values() for t in (h, *typing.get_args(h)) if isinstance(t, type)]
        assert any(issubclass(t, model) for t in takes), (k.name, model, hints)


def test_the_kinds_report_sections_are_the_pages() -> None:
    """The sections a kind renders whole come from its `report_id` and `report_section`; each is a section of the
    page, and the page imports none of them itself."""
    from prbench.report.html import SECTIONS

    own = {k.report_id: k.name for k in kinds() if k.report_id is not None}
    assert own == {"leaderboard": "eval", "build": "build", "bon": "bon"}
    assert set(own) <= {sid for sid, _ in SECTIONS}
    html = (Path(__file__).parents[1] / "src/prbench/report/html.py").read_text(encoding="utf-8")
    assert "leaderboard_section" not in html and "prbench.capabilities.bon.report" not in html and "report.build" not in html


def test_open_run_names_the_torn_line_and_the_damaged_summary(tmp_path: Path) -> None:
    runs = make_runs(tmp_path / "runs")
    folder = open_run(next((runs / "eval").rglob("summary.json"))).path
    with (folder / "examples.jsonl").open("a", encoding="utf-8") as fh:
        fh.write('{"id": "torn", "cre')
    with pytest.raises(DataError, match=r"examples.jsonl:11: not a JSON record"):
        open_run(folder)
    (folder / "summary.json").write_text('{"model": "x", "metr', encoding="utf-8")
    with pytest.raises(DataError, match=r"summary.json:1: damaged JSON"):
        open_run(folder)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "prbench", *args], check=False, capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PRBENCH_CACHE_DIR": str(cwd / "cache")}, timeout=300)


def test_a_damaged_run_is_one_line_in_meta_report_and_leaderboard_alike(tmp_path: Path) -> None:
    """A torn examples.jsonl line in one run and a damaged summary.json in another: one line each, the same everywhere."""
    runs = make_runs(tmp_path / "runs")
    for rm in ("rm:d", "rm:e"):
        write_eval_run(runs / "eval", rm, credits_with_mean(3, 10), ids=IDS)
    torn, damaged = (next(p.parent for p in (runs / "eval").rglob("summary.json") if tag in str(p))
                     for tag in ("rm_d", "rm_e"))
    with (torn / "examples.jsonl").open("a", encoding="utf-8") as fh:
        fh.write('{"id": "x", "credit": 1.0, "categ')
    (damaged / "summary.json").write_text('{"model": "rm:e",\n "metr', encoding="utf-8")
    where = sorted([f"skipped: {torn / 'examples.jsonl'}:11: ", f"skipped: {damaged / 'summary.json'}:2: damaged JSON"])
    results = {
        "meta": _cli("meta", "--runs", str(runs), "--downstream", str(runs / "downstream"), "--out",
                     str(tmp_path / "meta"), "--n-boot", "20", "--n-perm", "20", "-q", cwd=tmp_path),
        "report": _cli("report", str(runs), "-o", str(tmp_path / "r.html"), "--n-boot", "20", "--n-perm", "20", "-q",
                       cwd=tmp_path),
        "leaderboard": _cli("leaderboard", str(runs), "--json", cwd=tmp_path),
    }
    for name, res in results.items():
        assert res.returncode == 0, (name, res.stderr)
        lines = sorted(ln for ln in res.stderr.splitlines() if ln.strip())
        assert len(lines) == 2 and all(ln.startswith(w) for ln, w in zip(lines, where)), (name, res.stderr)
        assert "Traceback" not in res.stderr
    meta = json.loads((tmp_path / "meta" / "meta.json").read_text())
    assert meta["rows"][0]["rms"] == RMS and sum(n.startswith("skipped: ") for n in meta["notes"]) == 2
    assert str(torn / "examples.jsonl") in (tmp_path / "r.html").read_text(encoding="utf-8")  # listed under provenance
    assert sorted(r["model"] for r in json.loads(results["leaderboard"].stdout)["rows"]) == RMS


def test_leaderboard_keeps_history_and_persona_columns(tmp_path: Path) -> None:
    from prbench.leaderboard import leaderboard, render_rows, write_leaderboard

    runs = tmp_path / "runs"
    for cond in ("none", "history", "persona", "wrong-history"):
        write_eval_run(runs, "rm:a", credits_with_mean(6, 10), ids=IDS, condition=cond)
    rows = leaderboard(runs)
    head, body = render_rows(rows, wide=True)
    assert head == ["model", "condition", "n", "accuracy % [95% CI]", "resolves (pts)"]  # resolves: prbench.stats.power
    assert [b[1] for b in body] == ["none", "history", "persona", "wrong-history"]  # the conditions' order
    assert all(cell != "-" for b in body for cell in b)
    csv_path, json_path = write_leaderboard(rows, runs)
    assert [r["condition"] for r in json.loads(json_path.read_text())["rows"]] == ["none", "history", "persona",
                                                                                 "wrong-history"]
    assert csv_path.read_text().splitlines()[0].startswith("data,model,condition,n,accuracy,ci_low,ci_high")


def test_policy_accuracy_settings_are_grouped_by_one_key_in_meta_and_report(tmp_path: Path) -> None:
    """Two runs that differ only in reward_norm are two settings for meta and two tables in the report."""
    from prbench.report import build_report

    runs = tmp_path / "runs"
    for rm, right in zip(RMS, [9, 7, 5]):
        write_eval_run(runs / "eval", rm, credits_with_mean(right, 10), ids=IDS, condition="oracle")
        for norm in ("none", "zscore"):
            path = write_pa_run(runs / norm, rm, dict(zip(IDS, credits_with_mean(right, 10))), {})
            s = json.loads((path / "summary.json").read_text())
            s["reward_norm"] = norm
            (path / "summary.json").write_text(json.dumps(s))
    pa = [r for r in scan_runs([runs]).runs if r.kind.name == "policy-accuracy"]
    assert len({r.kind.group_key(r) for r in pa}) == 2
    res = meta_evaluate([runs], [runs], **FAST)
    assert sorted(s.label for s in res.settings) == ["policy accuracy w=1 k=10 mode=full [oracle]",
                                                           "policy accuracy w=1 k=10 mode=full [oracle] #2"]
    html = build_report(runs, tmp_path / "r.html", n_boot=20, n_perm=20, meta=res).read_text(encoding="utf-8")
    assert html.count("<h4>policy builtin:smollm2-135m-instruct") == 2


def test_leaderboard_refuses_to_guess_the_identity_of_a_run_with_a_damaged_config(tmp_path: Path,
                                                                                 caplog: pytest.LogCaptureFixture
                                                                                 ) -> None:
    """A damaged config.json used to read as 'no options' (two runs merged into one row); now the run is named."""
    from prbench.leaderboard import leaderboard

    runs = make_runs(tmp_path / "runs")
    folder = next(p.parent for p in (runs / "eval").rglob("summary.json") if "rm_c" in str(p))
    (folder / "config.json").write_text('{"model_options": {"max_length": 4', encoding="utf-8")
    rows = leaderboard(runs)
    assert sorted(r.model for r in rows) == ["rm:a", "rm:b"]
    assert f"skipped: {folder / 'config.json'}:1: damaged JSON" in caplog.text


def test_policy_accuracy_records_have_their_typed_model(tmp_path: Path) -> None:
    path = write_pa_run(tmp_path, "rm:a", dict(zip(IDS, credits_with_mean(5, 10))), {IDS[0]: 1.0})
    run = open_run(path)
    recs = run.items  # the records as the kind's typed model
    assert recs[0].rm_credit == 1.0 and sum(r.credit_total for r in recs) == 5
