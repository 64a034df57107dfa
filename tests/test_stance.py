"""The stance method (`prbench.rewards.stance`) on planted judgments, and `recommend` choosing by cross-validation.

Planted votes: two camps of people vote on the same statements of two sides of a debate; a record
is a person's agreed vs rejected statement, and every statement pair appears for one person of
each camp with opposite labels, so any scorer that ignores the person gets exactly 50%. The
statements all open the same way ("We should ..."), so the profile's words and character n-grams
are the same for both camps: only the signs ("I agree:" / "I disagree:") tell them apart.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from prbench.data.pairs import PreferencePair
from prbench.schema import ProfilePost
from prbench.train.methods import METHODS, make_config, spec_for
from prbench.train.protocol import ProtocolConfig, pair_credits
from prbench.train.recommend import CVSettings, recommend

SIDES = {
    "transit": ["We should build more bus lanes downtown", "We should make trains free for students",
                "We should add night buses to every suburb", "We should fund a light rail line to the airport",
                "We should put a tram on the main avenue", "We should run the metro all night on weekends"],
    "cars": ["We should widen the ring road for commuters", "We should build more parking garages downtown",
             "We should cut the fuel tax for drivers", "We should raise the motorway speed limit",
             "We should add lanes to the harbour bridge", "We should let cars park free on Sundays"],
}
FAST = {"epochs": 8, "members": 2}  # stance-only settings: the other candidates keep their defaults


SHARED = "The city should publish its traffic counts every month."


def planted_votes(people: int, seed: int = 0, agrees: bool = True) -> list[PreferencePair]:
    """Mirrored records of two camps (module docstring): person i of camp A and of camp B judge the same pair.
    `agrees=False` keeps the disagree votes and one agree vote both camps share: what a person endorses says
    nothing of their camp, so a method that reads endorsed texts (style, the baselines) has nothing to go on
    and only the signs tell the camps apart."""
    rng = random.Random(seed)
    out = []
    for i in range(people // 2):
        a, b = rng.choice(SIDES["transit"]), rng.choice(SIDES["cars"])
        for camp, (chosen, rejected) in (("transit", (a, b)), ("cars", (b, a))):
            other = "cars" if camp == "transit" else "transit"
            votes = [(t, "agree") for t in SIDES[camp] if t != chosen] if agrees else [(SHARED, "agree")]
            votes += [(t, "disagree") for t in SIDES[other] if t != rejected]
            rng.shuffle(votes)
            profile = [ProfilePost(id=f"{camp}{i}-{j}", text=f"I {s}: {t}") for j, (t, s) in enumerate(votes[:6])]
            out.append(PreferencePair(user_id=f"{camp}-{i}", prompt=f"What should the city do about traffic? ({i % 4})",
                                      chosen=chosen, rejected=rejected, profile=profile, id=f"{camp}-{i}"))
    return out


def _accuracy(rm: Any, pairs: list[PreferencePair], condition: str) -> float:
    credits, _ = pair_credits(rm, pairs, condition, ProtocolConfig(condition=condition))
    return sum(c for c in credits if c is not None) / len(credits)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, minilm_cache: Any) -> tuple[Any, list[PreferencePair]]:
    from prbench.rewards import load_rm

    out = tmp_path_factory.mktemp("stance") / "m"
    fn, _ = METHODS["stance"].load()
    fn(planted_votes(40, seed=0), out, make_config("stance", FAST), cache=minilm_cache)
    return load_rm(spec_for("stance", out), encoder_cache=minilm_cache), planted_votes(40, seed=1)


def test_stance_reads_signed_judgments_of_unseen_people(trained: tuple[Any, list[PreferencePair]]) -> None:
    rm, test = trained  # new people (other seed), the same debate
    assert _accuracy(rm, test, "profile") >= 0.9
    assert _accuracy(rm, test, "none") == 0.5  # no evidence: every score 0, every pair a tie


def test_stance_flips_with_the_signs_not_the_texts(trained: tuple[Any, list[PreferencePair]]) -> None:
    """The same statements with every verdict reversed must reverse the preference: it reads stances."""
    rm, test = trained
    pair = test[0]
    a, b, c, d = own_and_flipped_scores(rm, pair)
    assert a > b and c < d


def test_stance_shots_are_evidence(trained: tuple[Any, list[PreferencePair]]) -> None:
    """k shots (adapt) of a person with no profile decide their preference, and are forgotten on adapt([])."""
    from prbench.context.conditions import View

    rm, test = trained
    person = test[0]
    bare = View(example_id="y", question=person.prompt, condition="profile", user_id=person.user_id)
    assert rm.score([(bare, person.chosen)])[0].value == rm.score([(bare, person.rejected)])[0].value == 0
    shots = [p.model_copy(update={"user_id": person.user_id}) for p in test[2:8:2]]  # same camp as test[0]
    rm.adapt(person.user_id, shots)
    try:
        assert rm.score([(bare, person.chosen)])[0].value > rm.score([(bare, person.rejected)])[0].value
    finally:
        rm.adapt(person.user_id, [])
    assert rm.score([(bare, person.chosen)])[0].value == 0


def test_stance_trains_on_pairs_without_rubric_narrative_or_category(tmp_path: Path, minilm_cache: Any) -> None:
    """What a minimal prb record gives a method (id, user, question, profile, chosen, rejected) is enough."""
    from prbench.errors import PrbenchError
    from prbench.train.stance import train_stance

    pairs = planted_votes(8)
    assert all(p.category is None and not p.rubric_aspects for p in pairs)
    result = train_stance(pairs, tmp_path / "m", make_config("stance", FAST), cache=minilm_cache)
    assert len(result.log) == FAST["epochs"] and (tmp_path / "m" / "config.json").is_file()
    with pytest.raises(PrbenchError, match="no training pairs"):
        train_stance([], tmp_path / "empty", cache=minilm_cache)


# --------------------------------------------------------------------------- recommendation by cross-validation


CHEAP = CVSettings(folds=2, n_boot=200, references=())


def test_recommend_keeps_stance_where_people_differ_in_what_they_endorse(minilm_cache: Any) -> None:
    rec = recommend(planted_votes(48, agrees=False), ["style", "stance"], {"seed": 0, **FAST}, settings=CHEAP,
                    cache=minilm_cache)
    rows = {r.method: r for r in rec.candidates}
    assert rec.method == "stance", rec.why
    assert (rows["stance"].profile_mean or 0) > 0.85 and (rows["style"].profile_mean or 1) < 0.7
    assert (rows["stance"].mean or 0) > (rows["style"].mean or 1) + 0.1  # mirrored: what the person's own data adds
    assert "best mirrored accuracy over 48 held-out people" in rec.why


def test_recommend_keeps_style_where_people_differ_in_how_they_write(minilm_cache: Any) -> None:
    from prbench.data.pairs import pairs_from_examples
    from prbench.data.synth_personas import synth_persona_examples

    pairs = pairs_from_examples(synth_persona_examples(24, 8, seed=0))
    rec = recommend(pairs, ["stance", "style"], {"seed": 0, **FAST}, settings=CHEAP, cache=minilm_cache)
    rows = {r.method: r for r in rec.candidates}
    assert rec.method == "style", rec.why
    assert (rows["style"].mean or 0) >= (rows["stance"].mean or 0) - CHEAP.margin, rows


def test_cli_train_without_a_method_falls_back_to_the_default_when_the_protocol_cannot_run(tmp_path: Path) -> None:
    """Three people cannot be cross-validated: the default method trains, and the CLI says why."""
    from typer.testing import CliRunner

    from prbench.cli import _register, app
    from prbench.train.methods import DEFAULT_METHOD

    _register()
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(p.model_dump_json(exclude_none=True) + "\n" for p in planted_votes(6)[:3]),
                    encoding="utf-8")
    res = CliRunner().invoke(app, ["train", "--data", str(data), "--out", str(tmp_path / "m"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["method"] == DEFAULT_METHOD
    assert "no recommendation by measurement" in res.output and "at least 4 users" in res.output


def own_and_flipped_scores(rm: Any, pair: Any) -> tuple[float, ...]:
    """Scores of (chosen, rejected) under the person's profile, then under it with every agree and disagree
    swapped: an RM that reads the signs prefers chosen first and rejected second."""
    from prbench.context.conditions import View

    flipped = [post.model_copy(update={"text": post.text.replace("I agree:", "I was:").replace(
        "I disagree:", "I agree:").replace("I was:", "I disagree:")}) for post in pair.profile]
    own, other = (View(example_id="x", question=pair.prompt, condition="profile", posts=tuple(p), user_id="p")
                  for p in (pair.profile, flipped))
    return tuple(s.value for s in rm.score([(own, pair.chosen), (own, pair.rejected), (other, pair.chosen),
                                            (other, pair.rejected)]))
