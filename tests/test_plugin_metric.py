"""A third-party downstream metric and study stage, installed as a dist-info on the path (issue 28, deliverable 2).

The plug-in is three pieces, as docs/extending.md shows: a driver (`run_agree`), its settings
model (`AgreeSettings`) and its run kind (`AgreeKind`), plus the study stage that runs the driver.
It is found through the entry-point groups `prbench.runkinds` and `prbench.stages`; meta and the
report pick its runs up with no change to prbench.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from prbench.registry import RUNKINDS, STAGES
from prbench.testing.records import make_records

PLUGIN = '''
"""agree: per pair, does the RM prefer the user's chosen response (its eval credit), as a downstream metric."""
from pydantic import BaseModel, ConfigDict

from prbench.downstream.results import DownstreamResult, write_downstream
from prbench.runkinds.downstream import DownstreamKind
from prbench.study.context import PlannedRun, Stage


class AgreeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rms: list[str]
    condition: str = "none"


def run_agree(rm, data, out, settings):
    from prbench import evaluate

    res = evaluate(rm, data, settings.condition)
    vals = {str(r["id"]): float(r["credit"]) for r in res.records if r.get("credit") is not None}
    mean = sum(vals.values()) / len(vals)
    return write_downstream(out, DownstreamResult(
        rm=rm, setting="agree", k=[1], first_k=[mean], expected=[mean], ci_low=[None], ci_high=[None],
        per_item={i: {"1": v} for i, v in vals.items()}, grader="none", n_items=len(vals), scale="credit, 0-1",
        extra={"condition": settings.condition}))


class AgreeKind(DownstreamKind):
    name = "agree"
    title = "Agreement with the user"
    setting = "agree"
    short = "Agree"
    value_definition = "1 when the RM prefers the chosen response, 0.5 tie, 0 otherwise"


KIND = AgreeKind()


def _plan(ctx):
    return [PlannedRun("agree", rm, 0, 0) for rm in ctx.cfg.sections["agree"].rms]


def _run(ctx):
    s = ctx.cfg.sections["agree"]
    ctx.outputs["agree"] = [str(run_agree(rm, ctx.data, ctx.runs / "downstream" / "agree" / rm.replace(":", "_"), s))
                            for rm in s.rms]


STAGE = Stage("agree", _plan, _run, order=75, section=AgreeSettings)
'''

STUDY = """\
name: plug
data: bench.jsonl
out: out
conditions: [none]
models:
  - spec: baseline:length
  - spec: baseline:lexical
  - spec: baseline:random
stages: [report, agree, eval, meta]
agree: {rms: [baseline:length, baseline:lexical, baseline:random]}
"""


@pytest.fixture()
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    site = tmp_path / "site"
    (site / "prb_agree-0.1.dist-info").mkdir(parents=True)
    (site / "prb_agree.py").write_text(PLUGIN, encoding="utf-8")
    (site / "prb_agree-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: prb-agree\nVersion: 0.1\n")
    (site / "prb_agree-0.1.dist-info" / "entry_points.txt").write_text(
        "[prbench.runkinds]\nagree = prb_agree:KIND\n\n[prbench.stages]\nagree = prb_agree:STAGE\n")
    monkeypatch.syspath_prepend(str(site))
    RUNKINDS.refresh()
    STAGES.refresh()
    yield site
    monkeypatch.undo()
    sys.modules.pop("prb_agree", None)
    RUNKINDS.refresh()
    STAGES.refresh()


def test_plugin_metric_and_stage_run_in_a_study_and_reach_meta_and_report(installed: Path, tmp_path: Path) -> None:
    from prbench.study.config import load_study_config
    from prbench.study.runner import run_study

    assert "agree" in RUNKINDS and "agree" in STAGES
    (tmp_path / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in make_records(9)), encoding="utf-8")
    (tmp_path / "study.yaml").write_text(STUDY, encoding="utf-8")
    cfg, root = load_study_config(tmp_path / "study.yaml")
    assert cfg.sections["agree"].rms == ["baseline:length", "baseline:lexical", "baseline:random"]
    ctx = run_study(cfg, root, quiet=True)
    assert list(ctx.outputs["timings"]) == ["eval", "agree", "meta", "report"]  # ranks, not the listed order
    meta = json.loads((tmp_path / "out" / "meta" / "meta.json").read_text())
    (row,) = [r for r in meta["rows"] if r["setting"]["setting"] == "agree"]
    assert row["n_rms"] == 3 and row["setting"]["label"] == "Agree [none]"
    assert meta["definitions"]["agree_value"].startswith("1 when the RM prefers")
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "<h3>Agreement with the user</h3>" in html and "Agree [none]" in html


def test_a_plugin_stage_section_is_validated_at_load(installed: Path, tmp_path: Path) -> None:
    from prbench.errors import DataError
    from prbench.study.config import parse_study

    with pytest.raises(DataError, match=r"study.yaml:10: agree.rms"):
        parse_study(STUDY.replace("agree: {rms: [baseline:length, baseline:lexical, baseline:random]}",
                                  "agree: {rms: 3}"), "study.yaml")
    with pytest.raises(DataError, match=r"stages.1: stage 'agree' needs a 'agree' section"):
        parse_study(STUDY.replace("agree: {rms: [baseline:length, baseline:lexical, baseline:random]}\n", ""),
                    "study.yaml")
