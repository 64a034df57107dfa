"""A new built-in downstream capability is one package under prbench/capabilities/ and one line in registry.py
(issue 49: every built-in run kind in the plug-in's shape).

The test copies src/prbench, adds `agree` (docs/extending.md's metric, in tree) there as one package (settings,
driver, kind, stage, command, report block) and one line of `RUNKINDS`, and nothing else; then, in fresh processes
on the copy, `prbench agree` is a command whose runs meta ranks, and a study whose stages include `agree` runs it,
meta ranks the RMs on it and the report shows its block.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from test_plugin_metric import STUDY, check_agree_in_meta_and_report, cli, write_bench

SRC = Path(__file__).resolve().parents[1] / "src" / "prbench"
LINE = '    "agree": "prbench.capabilities.agree.kind:KIND",\n'
BESIDE = '    "bon": "prbench.capabilities.bon.kind:KIND",\n'  # a built-in capability's line of RUNKINDS

PACKAGE = {
    "__init__.py": '''"""agree: per pair, does the RM prefer the user's chosen response (a downstream metric)."""
''',
    "settings.py": '''"""agree's settings, and the study's `agree:` section."""

from typing import ClassVar

from pydantic import BaseModel, ConfigDict


class AgreeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    condition: str = "none"


class AgreeStage(AgreeSettings):
    spec_fields: ClassVar[dict[str, str]] = {"rms": "rm"}  # resolved and checked when the study loads
    rms: list[str]
''',
    "driver.py": '''"""agree's driver: one RM's per-pair agreement with the user, as downstream.json."""

from pathlib import Path

from prbench.capabilities.agree.settings import AgreeSettings
from prbench.downstream.results import DownstreamResult, write_downstream
from prbench.store.records import PointwiseRecord


def run_agree(rm: str, data: str, out: Path, settings: AgreeSettings) -> Path:
    from prbench import evaluate

    res = evaluate(rm, data, settings.condition)  # scored in memory (no run folder), as typed records
    recs = [PointwiseRecord.model_validate(r) for r in res.records]
    vals = {rec.id: float(rec.credit) for rec in recs if rec.credit is not None}
    mean = sum(vals.values()) / len(vals)
    return write_downstream(out, DownstreamResult(
        rm=rm, setting="agree", k=[1], first_k=[mean], expected=[mean], ci_low=[None], ci_high=[None],
        per_item={i: {"1": v} for i, v in vals.items()}, grader="none", n_items=len(vals),
        scale="credit, 0-1", extra={"condition": settings.condition}))
''',
    "stage.py": '''"""agree's study stage."""

from pathlib import Path

from prbench.capabilities.agree.driver import run_agree
from prbench.capabilities.agree.settings import AgreeStage
from prbench.store.runs import slug
from prbench.study.context import PlannedRun, StudyContext, stage
from prbench.study.stages import downstream_dir, needs


def _section(ctx: StudyContext) -> AgreeStage:
    return needs(ctx.cfg.section("agree", AgreeStage), "agree")


def _plan(ctx: StudyContext) -> list[PlannedRun]:
    return [PlannedRun("agree", rm, 0, 0) for rm in _section(ctx).rms]


@stage("agree", _plan, order=75, section=AgreeStage, why="the RMs")
def run_agree_stage(ctx: StudyContext) -> None:
    s = _section(ctx)
    ctx.outputs["agree"] = [str(run_agree(rm, ctx.data, Path(downstream_dir(ctx, "agree", slug(rm))), s))
                            for rm in s.rms]
''',
    "command.py": '''"""`prbench agree`."""

from pathlib import Path
from typing import Annotated

import typer

from prbench.capabilities.agree.driver import run_agree
from prbench.capabilities.agree.settings import AgreeSettings
from prbench.store.runs import slug


def agree(rm: Annotated[list[str], typer.Option("--rm", help="RM spec (repeatable).")], data: str = "sample",
          condition: str = "none", out: Annotated[Path, typer.Option(help="Folder of the runs.")] = Path("agree")
          ) -> None:
    """Agreement with the user: per pair, does the RM prefer the chosen response."""
    for spec in rm:
        typer.echo(run_agree(spec, data, out / slug(spec), AgreeSettings(condition=condition)))
''',
    "report.py": '''"""agree's block of the report's downstream section."""

from prbench.report import widgets as w
from prbench.report.data import ReportData
from prbench.runkinds import RunKind


def agree_section(d: ReportData, kind: RunKind) -> str:
    rows = [[r.ds.rm, w.numc(w.fnum(r.ds.expected[0]))] for r in sorted(d.of_kind(kind), key=lambda r: r.ds.rm)]
    return "<h3>Agreement with the user</h3>" + w.table(
        ["RM", w.Cell("agreement", "num")], rows, caption="in-tree agree block: share of pairs the RM gets right")
''',
    "kind.py": '''"""agree's run kind, naming its parts."""

from prbench.capabilities.agree.command import agree
from prbench.capabilities.agree.driver import run_agree
from prbench.capabilities.agree.report import agree_section
from prbench.capabilities.agree.settings import AgreeSettings
from prbench.capabilities.agree.stage import run_agree_stage
from prbench.runkinds.downstream import DownstreamKind


class AgreeKind(DownstreamKind):
    name = "agree"
    title = "Agreement with the user"
    setting = "agree"
    short = "Agree"
    value_definition = "1 when the RM prefers the chosen response, 0.5 tie, 0 otherwise"
    settings_model = AgreeSettings
    driver = staticmethod(run_agree)
    stage = run_agree_stage
    command = staticmethod(agree)
    report_section = staticmethod(agree_section)


KIND = AgreeKind()
''',
}
BLOCK = "in-tree agree block: share of pairs the RM gets right"
RMS = ("baseline:length", "baseline:lexical", "baseline:random")


def copy_with_agree(dest: Path) -> Path:
    """src/prbench copied to `dest`, plus the `agree` package and its one line in registry.py; the new PYTHONPATH."""
    pkg = dest / "prbench"
    shutil.copytree(SRC, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    registry = pkg / "registry.py"
    text = registry.read_text(encoding="utf-8")
    assert BESIDE in text, "registry.py's RUNKINDS lists no capability package (prbench.capabilities.<name>.kind)"
    registry.write_text(text.replace(BESIDE, BESIDE + LINE), encoding="utf-8")
    (pkg / "capabilities" / "agree").mkdir()
    for name, code in PACKAGE.items():
        (pkg / "capabilities" / "agree" / name).write_text(code, encoding="utf-8")
    return dest


def test_a_capability_added_in_tree_as_one_package_runs_in_cli_study_meta_and_report(tmp_path: Path) -> None:
    src = copy_with_agree(tmp_path / "src")
    changed = [p.relative_to(src).as_posix() for p in sorted(src.rglob("*.py"))
               if not (SRC.parent / p.relative_to(src)).is_file()
               or (SRC.parent / p.relative_to(src)).read_bytes() != p.read_bytes()]
    assert changed == sorted(["prbench/registry.py", *(f"prbench/capabilities/agree/{n}" for n in PACKAGE)])
    write_bench(tmp_path)
    prbench = cli({**os.environ, "PYTHONPATH": str(src), "PRBENCH_CACHE_DIR": str(tmp_path / "cache")}, tmp_path)

    r = prbench("agree", "--help")  # the CLI: a command from the kind
    assert r.returncode == 0 and "--rm" in r.stdout, r.stderr
    r = prbench("eval", *(a for rm in RMS for a in ("-m", rm)), "--data", "bench.jsonl", "-o", "runs", "-q")
    assert r.returncode == 0, r.stderr
    r = prbench("agree", *(a for rm in RMS for a in ("--rm", rm)), "--data", "bench.jsonl", "--out", "runs/agree")
    assert r.returncode == 0, r.stderr
    r = prbench("meta", "--runs", "runs", "--downstream", "runs/agree", "--out", "meta", "-q", "--n-boot", "20",
                "--n-perm", "20")
    assert r.returncode == 0, r.stderr
    (row,) = [r for r in json.loads((tmp_path / "meta" / "meta.json").read_text())["rows"]
              if r["setting"]["setting"] == "agree"]
    assert row["n_rms"] == 3

    (tmp_path / "study.yaml").write_text(STUDY, encoding="utf-8")  # the study: stages listed out of rank order
    r = prbench("study", "study.yaml", "--json")
    assert r.returncode == 0, r.stderr
    assert list(json.loads(r.stdout)["timings"]) == ["eval", "agree", "meta", "report"]
    check_agree_in_meta_and_report(tmp_path / "out", BLOCK)  # meta ranks on it, the report shows its own block

    (tmp_path / "study.yaml").write_text(STUDY.replace("rms: [", "rms: [nosuch:x, "), encoding="utf-8")
    r = prbench("study", "study.yaml", "--dry-run")  # its section's specs are checked at load, with their line
    assert r.returncode != 0 and "study.yaml:10: agree.rms.0" in r.stderr, r.stderr
