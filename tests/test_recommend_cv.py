"""The recommendation of `prbench train` (no method named) by cross-validation over people (issue #47).

Planted candidates (registered at run time as a `prbench.methods` plug-in would be): each "trains" in no
time and is right on a planted share of pairs, so the statistics of the choice are what is tested. Each
pair has a planted difficulty u: on 80% of the pairs (a hash of the pair) every method reads the same u
(methods agree on which pairs are hard), on the rest each draws its own; a method of rate r is right where
u < r. On 150 people x 10 pairs the old rule (one protocol split, the pricier wins only when its per-user
gain's bootstrap CI is above 0) keeps the cheaper method in most seeds although it is 5 points worse.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from prbench.config import MethodView
from prbench.data.pairs import PreferencePair
from prbench.rewards.base import PointwiseRM, Score
from prbench.schema import ProfilePost
from prbench.train import TrainResult, write_log
from prbench.train.methods import METHODS, Method
from prbench.train.recommend import CVSettings, folds_for, recommend


def _unit(*parts: object) -> float:
    return int(hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:12], 16) / 16**12


class CheapConfig(MethodView):
    rate: float = 0.60


class PriceyConfig(MethodView):
    rate: float = 0.65


class EqualConfig(MethodView):
    rate: float = 0.60


def train_planted(pairs: Sequence[PreferencePair], out: str | Path, cfg: Any, *, cache: Any = None) -> TrainResult:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"arch": "planted", "rate": cfg.rate, "salt": type(cfg).__name__,
                                                 "users": sorted({p.user_id for p in pairs})}))
    write_log(out, [{"epoch": 1, "loss": 0.0}])
    return TrainResult(out, [{"epoch": 1, "loss": 0.0}])


class PlantedRM(PointwiseRM):
    """Right (chosen "good ..." above rejected "bad ...") where the pair's planted difficulty is below its rate,
    with the person's own profile; with a stranger's profile it reads the other way round (a purely personal
    method: the stranger stands for someone who chose the other way), so its mirrored accuracy is its rate."""

    calls_model = False

    def __init__(self, folder: str, **_: Any):
        cfg = json.loads((Path(folder) / "config.json").read_text())
        self.rate, self.salt, self.spec = cfg["rate"], cfg["salt"], f"planted:{folder}"

    def score(self, batch: Sequence[tuple[Any, str]]) -> list[Score]:
        out = []
        for view, response in batch:
            good, tag = response.split(" ", 1)
            shared = _unit("shared?", tag) < 0.8
            right = _unit("u", tag) < self.rate if shared else _unit("u", self.salt, tag) < self.rate
            person = tag.split("-")  # s{seed}-{person}-{i}; a tag without a person: blind to the person
            own = len(person) < 3 or [p.text for p in view.posts] == [f"person {person[1]}"]
            out.append(Score(float((good == "good") == (right == own))))
        return out


PLANTED = {
    "planted-cheap": Method("planted-cheap", f"{__name__}:train_planted", f"{__name__}:CheapConfig", "planted-cheap",
                            cost=0.5, rm=f"{__name__}:PlantedRM"),
    "planted-pricey": Method("planted-pricey", f"{__name__}:train_planted", f"{__name__}:PriceyConfig",
                             "planted-pricey", cost=1, rm=f"{__name__}:PlantedRM"),
    "planted-equal": Method("planted-equal", f"{__name__}:train_planted", f"{__name__}:EqualConfig", "planted-equal",
                            cost=1, rm=f"{__name__}:PlantedRM"),
}


@pytest.fixture()
def planted() -> Iterator[None]:
    for name, method in PLANTED.items():
        METHODS.register(name, method)
    try:
        yield
    finally:
        for name in PLANTED:
            METHODS.unregister(name)


def people(n: int, pairs_each: int, seed: int) -> list[PreferencePair]:
    """n people, each with `pairs_each` pairs of their own and a one-vote profile."""
    return [PreferencePair(user_id=f"p{u}", id=f"s{seed}-p{u}-{i}", prompt=f"question {i}",
                           chosen=f"good s{seed}-{u}-{i}", rejected=f"bad s{seed}-{u}-{i}",
                           profile=[ProfilePost(id=f"v{u}", text=f"person {u}", stance="agree")])
            for u in range(n) for i in range(pairs_each)]


QUICK = {"n_boot": 300, "references": ()}


def test_the_pricier_method_five_points_better_on_150_people_is_recommended_in_nine_of_ten_seeds(planted) -> None:
    chosen = [recommend(people(150, 10, seed), ["planted-cheap", "planted-pricey"], {"seed": seed},
                        settings=CVSettings(seed=seed, **QUICK)).method for seed in range(10)]
    assert chosen.count("planted-pricey") >= 9, chosen


def test_two_equal_methods_keep_the_cheaper_in_nine_of_ten_seeds(planted) -> None:
    chosen = [recommend(people(150, 10, seed), ["planted-equal", "planted-cheap"], {"seed": seed},
                        settings=CVSettings(seed=seed, **QUICK)).method for seed in range(10)]
    assert chosen.count("planted-cheap") >= 9, chosen


def test_every_person_is_held_out_once_and_the_numbers_pool_over_all_of_them(planted) -> None:
    pairs = people(37, 3, 0)
    rec = recommend(pairs, ["planted-cheap", "planted-pricey"], {"seed": 1}, settings=CVSettings(seed=1))
    assert rec.folds == 5 and rec.folds_run == 5 and folds_for(37)[0] == 5 and folds_for(7)[0] == 3
    assert sorted(rec.folds_of) == sorted({p.user_id for p in pairs}) and set(rec.folds_of.values()) == set(range(5))
    cheap, pricey = rec.row("planted-cheap"), rec.row("planted-pricey")
    assert rec.scored_people == 37 and cheap.n_people == pricey.n_people == 37 and len(cheap.fold_means) == 5
    assert cheap.p_best is not None and pricey.p_best is not None
    assert cheap.p_best + pricey.p_best == pytest.approx(1.0)
    assert cheap.ci_low is not None and cheap.ci_low <= (cheap.mean or 0) <= (cheap.ci_high or 1)
    # the reference rule trains nothing and is measured in the same folds, never chosen
    [ref] = rec.references
    assert ref.method == "covote-nn" and ref.reference and ref.n_people == 37 and rec.method != "covote-nn"
    assert ref.mean == 0.5 and rec.reference_note is None  # planted texts nobody else judged: the rule ties
    again = recommend(pairs, ["planted-cheap", "planted-pricey"], {"seed": 1}, settings=CVSettings(seed=1))
    timeless = {"candidates": {"__all__": {"train_seconds"}}, "references": {"__all__": {"train_seconds"}}}
    assert again.model_dump(exclude=timeless) == rec.model_dump(exclude=timeless)  # seeded


def test_a_time_budget_cuts_folds_and_says_so(planted, monkeypatch) -> None:
    import prbench.train.recommend as module

    clock = iter(range(0, 10_000, 10))  # every reading of the clock: 10 s later
    monkeypatch.setattr(module.time, "perf_counter", lambda: float(next(clock)))
    rec = recommend(people(40, 2, 0), ["planted-cheap", "planted-pricey"], {"seed": 0},
                    settings=CVSettings(budget_s=100, **QUICK))
    assert 1 <= rec.folds_run < rec.folds and rec.cut and "time budget 100 s" in rec.cut
    assert f"{rec.folds_run} of {rec.folds} folds run" in rec.cut and rec.cut in rec.why
    assert rec.scored_people == sum(f < rec.folds_run for f in rec.folds_of.values())


def test_cli_prints_the_cv_table_and_the_people_it_rests_on_and_records_it(planted, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from prbench.cli import _register, app
    data = tmp_path / "mine.jsonl"
    _write(data, people(30, 4, 3))
    _register()
    res = CliRunner().invoke(app, ["train", "--data", str(data), "--out", str(tmp_path / "rm"), "--candidates",
                                   "planted-cheap,planted-pricey", "--no-protocol"],
                               env={"COLUMNS": "200"})  # the table at a fixed width
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "recommendation: cross-validation over people, 5 of 5 folds" in out
    assert "covote-nn (reference)" in out and "P(best)" in out and "the reference trains nothing" in out
    assert "the choice rests on 30 held-out people of 30 (5 folds for 30 people" in out
    assert "recommended: planted-" in out
    assert "too few to tell" in res.stderr  # 30 people cannot tell a 5-point gain from the 1-point margin
    rec = json.loads((tmp_path / "rm" / "protocol.json").read_text())["recommendation"]
    assert rec["folds"] == 5 and rec["settings"]["margin"] == 0.01 and rec["scored_people"] == 30
    assert {c["method"] for c in rec["candidates"]} == {"planted-cheap", "planted-pricey"}
    assert [r["method"] for r in rec["references"]] == ["covote-nn"] and rec["warning"]


def _write(path: Path, pairs: Sequence[PreferencePair]) -> None:
    """The minimal record of a user's own file (test_byo_data's shape)."""
    rows = [{"id": p.id, "user_id": p.user_id, "question": p.prompt, "chosen": p.chosen, "rejected": p.rejected,
             "profile": [{"text": q.text, "stance": q.stance} for q in p.profile]} for p in pairs]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


# --------------------------------------------------------------------------- the reference rule (covote-nn)


def _choosers(n: int, start: int, spaced: bool = False) -> list[PreferencePair]:
    """People in two camps (short answers vs long ones) whose profiles are past choices `{prompt, chosen,
    rejected}` on prompts 1-5 and who judge prompt 0; `spaced` writes their profile texts with other case and
    spacing."""
    def shown(text: str) -> str:
        return "  " + text.upper().replace(" ", "   ") if spaced else text

    out = []
    for u in range(start, start + n):
        def pick(i: int, short: bool = u % 2 == 0) -> tuple[str, str]:
            a, b = f"short answer {i}", f"a long and careful answer {i}"
            return (a, b) if short else (b, a)

        profile = [ProfilePost(id=f"c{u}-{i}", text=shown(pick(i)[0]), stance="chose", prompt=f"question {i}",
                               rejected=shown(pick(i)[1])) for i in range(1, 6)]
        chosen, rejected = pick(0)
        out.append(PreferencePair(user_id=f"chooser{u}", id=f"j{u}", prompt="question 0", chosen=chosen,
                                  rejected=rejected, profile=profile))
    return out


def test_covote_nn_reads_past_choices_and_matches_texts_however_spaced(tmp_path: Path) -> None:
    """The rule over past choices: a new person's chosen and rejected answers on other prompts, compared with the
    answers they now judge by how the training people co-chose them; the person's own choices decide (wrong-profile
    is the other camp's)."""
    from prbench.rewards import load_rm
    from prbench.train.covote import CovoteConfig, train_covote
    from prbench.train.protocol import ProtocolConfig, pair_credits

    train = _choosers(20, 0)
    # training people judged other prompts too: their judged pair's answers join the table as chosen +1 / rejected -1
    train_covote(train + [p.model_copy(update={"prompt": "question 3", "id": f"{p.id}-3",
                                               "chosen": p.profile[2].text, "rejected": p.profile[2].rejected})
                          for p in train], tmp_path / "nn", CovoteConfig())
    rm = load_rm(f"covote-nn:{tmp_path / 'nn'}")
    assert rm.seen_users() == {f"chooser{u}" for u in range(20)} and rm.view_top_k == 100
    new = _choosers(8, 100, spaced=True)
    cfg = ProtocolConfig(top_k=100)
    own, _ = pair_credits(rm, new, "profile", cfg)
    other_camp = [p.model_copy(update={"profile": new[(i + 1) % 8].profile}) for i, p in enumerate(new)]
    wrong, _ = pair_credits(rm, other_camp, "profile", cfg)
    blind, _ = pair_credits(rm, new, "none", cfg)
    assert own == [1.0] * 8  # every new person's camp read off their own past choices
    assert wrong == [0.0] * 8 and blind == [0.5] * 8  # the other camp's choices mislead; no profile: ties


def test_the_reference_rule_is_said_when_it_reads_at_least_as_well_as_the_chosen_method(planted) -> None:
    """On past choices that many people share, the table of who chose what reads every held-out person (100% with
    their own profile), while a planted method blind to the person reads 50% mirrored: the reference stays a row,
    never the answer, and is named."""
    rec = recommend(_choosers(30, 0), ["planted-cheap"], {"seed": 0}, settings=CVSettings(n_boot=100))
    [ref] = rec.references
    planted = rec.row("planted-cheap")
    assert rec.method == "planted-cheap" and ref.profile_mean == 1.0 and planted.mean == 0.5  # blind: mirrored 50%
    assert (ref.mean or 0) >= 0.7  # a stranger of the other camp reads the other way, one of the same camp alike
    assert rec.reference_note and "the reference covote-nn (trains nothing) reads" in rec.reference_note
