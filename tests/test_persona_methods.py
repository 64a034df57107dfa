"""Real-text-shaped persona users, the persona-space default, PReF / GPO / SynthesizeMe, swap test, validity card.

No shared data: DSP-shaped items are generated here (four personas, each with its own function
words and punctuation, answering the same topic words), so the DSP split builder and the style
model are tested on the same shape as the real file; planted-preference users (`synth_users`)
for the MiniLM methods; a planted LLM on a real 127.0.0.1 OpenAI-compatible server for
SynthesizeMe; planted RMs (one reading the user, one ignoring them) for the swap test and the
validity card.
"""

from __future__ import annotations

import json
import random
import re

import pytest

from prbench.data.dsp_personas import PERSONAS, build_splits, load_questions
from prbench.errors import DataError, PrbenchError
from prbench.rewards.base import PointwiseRM, Score
from prbench.train.methods import METHODS, make_config, spec_for
from prbench.train.protocol import (
    ProtocolConfig,
    pair_credits,
    per_user,
    run_protocol,
    split_protocol,
    swap_test,
)

VOICE = {
    "academy": ("furthermore the evidence suggests", "consequently", "; moreover"),
    "business": ("bottom line for your roi", "action item", " - deliverable"),
    "entertainment": ("wow this is super fun", "haha awesome", "!!"),
    "literature": ("like a quiet river of dusk", "the heart whispers", " ... "),
}
TOPICS = [f"topic{i} item{i} thing{i % 7} matter{i % 11}" for i in range(120)]


def _answer(persona: str, topic: str, rng: random.Random) -> str:
    a, b, c = VOICE[persona]
    words = topic.split()
    return " ".join(f"{rng.choice(words)} {rng.choice((a, b, c))}" for _ in range(8)) + "."


def fake_dsp(n: int = 120, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"query": f"How about {TOPICS[i]}?", "responses": {p: _answer(p, TOPICS[i], rng) for p in PERSONAS}}
            for i in range(n)]


@pytest.fixture(scope="module")
def dsp_split():
    return build_splits(fake_dsp(), "persona", train_users=16, test_users=8, train_pairs=8, test_pairs=6)


# --------------------------------------------------------------------------- the real-text split builder


def test_dsp_splits_are_user_and_question_disjoint(tmp_path):
    path = tmp_path / "dsp.json"
    path.write_text(json.dumps(fake_dsp()))
    questions = load_questions(path)
    for variant in ("persona", "mixed", "short"):
        s = build_splits(questions, variant, train_users=8, test_users=8, train_pairs=5, test_pairs=5)
        train_q = {p.prompt for p in s["train"]} | {q.text for p in s["train"] for q in p.profile}
        test_q = {p.prompt for p in s["test"]} | {q.text for p in s["test"] for q in p.profile}
        assert not {p.user_id for p in s["train"]} & {p.user_id for p in s["test"]}
        assert not {p.prompt for p in s["train"]} & {p.prompt for p in s["test"]}
        assert not train_q & test_q  # no question, and no profile text, crosses the split
        texts = {t for item in questions for t in item["responses"].values()}
        for p in s["train"] + s["test"]:
            assert p.chosen != p.rejected and {p.chosen, p.rejected} <= texts
            assert p.chosen not in {q.text for q in p.profile}
            assert len(p.profile) == (3 if variant == "short" else 20)
        if variant == "persona":  # balanced personas; the chosen answer is the user's own persona
            first = {p.user_id: p.category.split(">")[0] for p in s["test"]}
            assert sorted(first.values()) == sorted(PERSONAS * 2)
            assert all(q.category == p.category.split(">")[0] for p in s["test"] for q in p.profile)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"query": "q", "responses": {"academy": "x"}}]))
    with pytest.raises(DataError, match="responses.business"):
        load_questions(bad)
    with pytest.raises(PrbenchError, match="too few"):
        build_splits(questions[:20], "persona")


# --------------------------------------------------------------------------- the default: the persona space


def _scores(rm, pairs):
    cfg = ProtocolConfig()
    out = {}
    for cond in ("profile", "wrong-profile", "none"):
        credits, users = pair_credits(rm, pairs, cond, cfg)
        acc = per_user(credits, users)
        out[cond] = sum(acc.values()) / len(acc)
    return out


def test_style_default_reads_unseen_users_persona_from_their_texts(dsp_split, tmp_path):
    from prbench.rewards import load_rm
    from prbench.train.methods import DEFAULT_METHOD

    assert DEFAULT_METHOD == "style"
    fn, _ = METHODS["style"].load()
    fn(dsp_split["train"], tmp_path / "m", make_config("style", {}))
    rm = load_rm(spec_for("style", tmp_path / "m"))
    got = _scores(rm, dsp_split["test"])
    lexical = _scores(load_rm("baseline:lexical"), dsp_split["test"])
    assert got["profile"] >= 0.9 and got["profile"] >= lexical["profile"] + 0.05
    assert got["none"] == 0.5  # no posts: no user, every score 0
    assert 0.3 <= got["wrong-profile"] <= 0.7
    user = dsp_split["test"][0].user_id  # k shots move an unseen user; none puts them back on the prior
    before = rm.fingerprint()
    rm.adapt(user, [p for p in dsp_split["test"] if p.user_id == user][:3])
    assert rm.fingerprint() != before and user in rm.adapted
    rm.adapt(user, [])
    assert rm.fingerprint() == before


# --------------------------------------------------------------------------- PReF and GPO on planted users


def _curve(rep):
    return {c["k"]: c["mean"] for c in rep["unseen"]["curve"]}


def test_pref_fits_seen_users_and_few_response_adaptation_helps_unseen_ones(planted, method_protocol):
    rep, _ = method_protocol("pref", planted)
    k = _curve(rep)
    assert rep["seen"]["mean"] >= 0.8  # known users on new questions
    assert 0.35 <= k[0] <= 0.65  # a new user with no pair: the average user
    assert k[2] > k[0] + 0.1 and k[8] > k[2] + 0.05
    assert rep["controls"]["wrong_user_shots"]["mean"] < k[8] - 0.2
    assert rep["swap"]["k"] > 0 and rep["swap"]["drop"] > 0.1 and rep["swap"]["ci_low"] > 0


def test_gpo_reads_pairs_in_context_and_shots_help_unseen_users(planted, method_protocol):
    rep, _ = method_protocol("gpo", planted)
    k = _curve(rep)
    assert rep["seen"]["mean"] >= 0.7 and rep["train"]["mean"] >= 0.8
    assert k[0] > rep["controls"]["no_context"]["mean"] + 0.15  # the shown posts are context too
    assert k[8] > k[0]
    assert rep["swap"]["drop"] > 0.1


# --------------------------------------------------------------------------- SynthesizeMe with a planted LLM

MARK = {"formal": "indeed", "casual": "hey"}


def _planted_llm(body: dict) -> str:
    """Induction: the marker most preferred (a wrong one when sampling, so verification must choose).
    Judging: 9 when the shown persona's marker is in the response, 2 when another one is, 5 without persona."""
    text = body["messages"][-1]["content"]
    if "describe this person" in text:
        preferred = " ".join(re.findall(r"Preferred answer: (.*)", text))
        best = max(MARK, key=lambda s: preferred.count(MARK[s]))
        if body.get("temperature", 0) > 0:
            best = next(s for s in MARK if s != best)
        return f"This person likes {best} answers."
    persona = re.search(r"likes (\w+) answers", text)
    response = text.split("<response>")[1].split("</response>")[0]
    if persona is None:
        return "No idea.\nScore: 5"
    return "Fits.\nScore: 9" if MARK[persona.group(1)] in response else "Does not fit.\nScore: 2"


def _planted_pairs(users: int, per_user: int):
    from prbench.data.pairs import PreferencePair
    from prbench.schema import ProfilePost

    pairs = []
    for u in range(users):
        style = "formal" if u % 2 == 0 else "casual"
        other = "casual" if style == "formal" else "formal"
        for i in range(per_user):
            pairs.append(PreferencePair(
                user_id=f"u{u}", prompt=f"question {i} about subject {i % 5}?", id=f"u{u}-{i}",
                chosen=f"{MARK[style]}, answer {i} on subject {i % 5}", rejected=f"{MARK[other]}, answer {i} on subject",
                profile=[ProfilePost(id=f"u{u}-p", text="a neutral post about the weather")]))
    return pairs


def test_synthesizeme_induces_verified_personas_and_shots_help_unseen_users(fake_openai, api_key_env, tmp_path):
    from prbench.rewards import load_rm

    srv = fake_openai(_planted_llm)
    opts = {"engine": "openai:planted", "base_url": srv.base_url, "api_key_env": api_key_env[0], "candidates": 2}
    pairs = _planted_pairs(8, 6)
    split = split_protocol(pairs, ProtocolConfig(holdout_users=0.25, holdout_items=0.5),
                           item_key=lambda p: p.prompt)
    fn, _ = METHODS["synthesizeme"].load()
    fn(split.train, tmp_path / "m", make_config("synthesizeme", opts))
    personas = json.loads((tmp_path / "m" / "personas.json").read_text())
    for user, got in personas.items():  # the sampled (wrong) candidate lost the held-out check
        style = "formal" if int(user[1:]) % 2 == 0 else "casual"
        assert got["persona"] == f"This person likes {style} answers." and got["verify_accuracy"] == 1.0
        assert sorted(acc for _, acc in got["candidates"]) == [0.0, 1.0]
    rm = load_rm(spec_for("synthesizeme", tmp_path / "m"))
    rep = run_protocol(rm, split, ProtocolConfig(ks=(0, 2), draws=1, controls=False, n_boot=100))
    curve = {c["k"]: c["mean"] for c in rep["unseen"]["curve"]}
    assert rep["seen"]["mean"] == 1.0  # beats chance on seen users
    assert curve[0] == 0.5 and curve[2] == 1.0  # no persona: the judge cannot tell; 2 shots: it can
    assert rm.seen_users() == {p.user_id for p in split.train}


def test_synthesizeme_training_killed_midway_resumes_without_asking_again(fake_openai, api_key_env, tmp_path,
                                                                          monkeypatch):
    from prbench.rewards.synthesizeme import Synthesizer
    from prbench.train.synthesizeme import PARTIAL_FILE

    srv = fake_openai(_planted_llm)
    opts = make_config("synthesizeme", {"engine": "openai:planted", "base_url": srv.base_url,
                                        "api_key_env": api_key_env[0], "candidates": 2})
    pairs, fn = _planted_pairs(4, 4), METHODS["synthesizeme"].load()[0]
    fn(pairs, tmp_path / "whole", opts)
    asked_whole = len(srv.requests)
    real, calls = Synthesizer.synthesize, []

    def killed_at_the_third_user(self, user, mine):
        calls.append(user)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, user, mine)

    monkeypatch.setattr(Synthesizer, "synthesize", killed_at_the_third_user)
    with pytest.raises(KeyboardInterrupt):
        fn(pairs, tmp_path / "m", opts)
    with (tmp_path / "m" / PARTIAL_FILE).open("a") as fh:
        fh.write('{"settings": "cut sho')  # a kill mid-line
    monkeypatch.setattr(Synthesizer, "synthesize", real)
    before = len(srv.requests)
    fn(pairs, tmp_path / "m", opts)
    assert len(srv.requests) - before == asked_whole // 2  # only users u2 and u3 asked again (same cost each)
    assert (tmp_path / "m" / "personas.json").read_text() == (tmp_path / "whole" / "personas.json").read_text()
    assert not (tmp_path / "m" / PARTIAL_FILE).exists()
    changed = make_config("synthesizeme", {**opts.model_dump(), "max_chars": 300})
    fn(pairs, tmp_path / "m", changed)  # other settings: nothing reused
    assert len(srv.requests) - before == asked_whole // 2 + asked_whole


def test_synthesizeme_warns_when_its_judge_never_writes_a_readable_score(fake_openai, api_key_env, tmp_path):
    """What SmolLM2-135M does on real text: it paraphrases instead of ending with "Score: N"."""
    srv = fake_openai(lambda body: "This person likes answers." if "describe this person" in
                      body["messages"][-1]["content"] else "The response talks about the subject at length.")
    opts = make_config("synthesizeme", {"engine": "openai:planted", "base_url": srv.base_url,
                                        "api_key_env": api_key_env[0], "candidates": 1})
    with pytest.warns(UserWarning, match=r"no readable score on the held-out pairs of 2 of 2 users"):
        METHODS["synthesizeme"].load()[0](_planted_pairs(2, 4), tmp_path / "m", opts)
    assert json.loads((tmp_path / "m" / "config.json").read_text())["unverified_users"] == 2


def test_synthesizeme_trains_and_evaluates_through_the_cli(fake_openai, api_key_env, tmp_path):
    from typer.testing import CliRunner

    from prbench.cli import _register, app
    from prbench.data import write_examples

    _register()
    srv = fake_openai(_planted_llm)
    write_examples(_planted_pairs(4, 4), tmp_path / "pairs.jsonl")
    res = CliRunner().invoke(app, ["train", "synthesizeme", "--data", str(tmp_path / "pairs.jsonl"), "--out",
                                   str(tmp_path / "m"), "--engine", "openai:planted", "--base-url", srv.base_url,
                                   "--api-key-env", api_key_env[0], "--no-protocol", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["loads_as"] == f"synthesizeme:{tmp_path / 'm'}"


# --------------------------------------------------------------------------- swap test and validity card


class Planted(PointwiseRM):
    """Reads the user's marker from the shown posts (`reads_user`), or only the response length."""

    def __init__(self, reads_user: bool):
        self.reads_user, self.spec = reads_user, f"planted:{reads_user}"

    def score(self, batch):
        out = []
        for view, resp in batch:
            shown = " ".join(p.text for p in view.posts)
            mark = "indeed" if "indeed" in shown else "hey" if "hey" in shown else None
            out.append(Score(float(mark is not None and mark in resp) if self.reads_user else float(len(resp.split()))))
        return out


def _marked_pairs():
    from prbench.schema import ProfilePost

    pairs = _planted_pairs(12, 8)
    return [p.model_copy(update={"profile": [ProfilePost(id=f"{p.user_id}-p", text=f"I say {p.chosen.split(',')[0]}")]})
            for p in pairs]


def test_swap_test_is_zero_for_a_user_blind_rm_and_positive_for_a_personalized_one():
    split = split_protocol(_marked_pairs(), ProtocolConfig(holdout_users=0.5), item_key=lambda p: p.prompt)
    cfg = ProtocolConfig(n_boot=200)
    blind, personal = swap_test(Planted(False), split, cfg), swap_test(Planted(True), split, cfg)
    assert blind["k"] == 0 and blind["drop"] == 0.0 and blind["p_value"] == 1.0
    assert personal["drop"] > 0.3 and personal["ci_low"] > 0.1 and personal["own"] == 1.0


def test_validity_card_gain_is_zero_without_personalization_and_positive_with_it(tmp_path):
    from prbench import evaluate
    from prbench.schema import Example
    from prbench.store.cache import NullCache

    examples = [Example(id=p.key, question=p.prompt, chosen=p.chosen, rejected=p.rejected, profile=p.profile,
                        rubric_aspects=[], category="Lifestyle_and_Personal_Development", user_id=p.user_id)
                for p in _marked_pairs()]
    cards = {}
    for reads in (False, True):
        out = tmp_path / str(reads)
        order = ("profile", "wrong-profile") if reads else ("wrong-profile", "profile")  # either may finish last
        for condition in order:
            evaluate(Planted(reads), examples, condition, out=out, cache=NullCache())
        summary = json.loads(next(out.rglob("profile/summary.json")).read_text())
        cards[reads] = summary["validity"]
        assert "validity" not in json.loads(next(out.rglob("wrong-profile/summary.json")).read_text())
    blind, personal = cards[False], cards[True]
    assert blind["gain"]["diff"] == 0.0 and blind["gain"]["p_value"] == 1.0
    assert personal["gain"]["diff"] > 0.3 and personal["gain"]["p_value"] < 0.01 and personal["gain"]["ci_low"] > 0
    assert blind["length"]["prefers_longer"] == 1.0 and blind["length"]["p_value"] < 0.01
    assert personal["context_share"] == 1.0 and personal["position"]["applicable"] is False
    from prbench.leaderboard import leaderboard, render_rows
    from prbench.report.html import build_report

    head, body = render_rows(leaderboard(tmp_path / "True"))
    gain = head.index("gain over control (pts)")
    assert next(b for b in body if b[1] == "profile")[gain].startswith("+")
    page = build_report(tmp_path / "True", tmp_path / "report.html", n_boot=50, n_perm=50).read_text()
    assert "Validity, " in page and "gain over <code>wrong-profile</code>" in page


def test_a_control_finishing_during_a_condition_rerun_never_puts_back_the_old_summary(tmp_path, monkeypatch):
    """The race `validity.settle` closes: the control reads the condition's summary to add the card while a
    rerun of the condition (more items) rewrites it; the control must not write the old one back."""
    import threading

    from prbench import evaluate
    from prbench.evaluation import validity
    from prbench.schema import Example
    from prbench.store.cache import NullCache

    examples = [Example(id=p.key, question=p.prompt, chosen=p.chosen, rejected=p.rejected, profile=p.profile,
                        rubric_aspects=[], category="Lifestyle_and_Personal_Development", user_id=p.user_id)
                for p in _marked_pairs()]
    rm, out = Planted(True), tmp_path / "runs"
    for condition in ("profile", "wrong-profile"):
        evaluate(rm, examples, condition, out=out, cache=NullCache(), limit=8)
    real_read, rerun = validity._read, []

    def read_then_race(folder):
        found = real_read(folder)
        if folder.name == "profile" and not rerun:  # the control holds the old condition summary now
            rerun.append(threading.Thread(target=evaluate, args=(rm, examples, "profile"),
                                          kwargs={"out": out, "cache": NullCache()}))
            rerun[0].start()
            rerun[0].join(timeout=3)  # unlocked, the rerun would write its summary here
        return found

    monkeypatch.setattr(validity, "_read", read_then_race)
    evaluate(rm, examples, "wrong-profile", out=out, cache=NullCache())  # extends to every item, then the card
    rerun[0].join()
    summary = json.loads(next(out.rglob("profile/summary.json")).read_text())
    assert summary["n_total"] == len(examples) and summary["validity"]["n_shared"] == len(examples)


def test_synthesizeme_runs_offline_on_smollm2(tmp_path):
    """The real default engine end to end: SmolLM2-135M writes each persona, the judge reads it (tiny budget)."""
    from prbench.context.conditions import View
    from prbench.rewards import load_rm

    pairs = _planted_pairs(1, 2)  # one user, no verification split: one generation, then one judge call
    fn, _ = METHODS["synthesizeme"].load()
    fn(pairs, tmp_path / "m", make_config("synthesizeme", {"candidates": 1, "verify_share": 0.0, "max_new_tokens": 24,
                                                           "judge_tokens": 24}))
    personas = json.loads((tmp_path / "m" / "personas.json").read_text())
    assert set(personas) == {"u0"} and personas["u0"]["persona"].strip() and personas["u0"]["verified_on"] == 0
    rm = load_rm(spec_for("synthesizeme", tmp_path / "m"))
    scores = rm.score([(View(example_id="x", question=pairs[0].prompt, condition="profile", user_id="u0"), pairs[0].chosen)])
    assert len(scores) == 1 and rm.counts["with_persona"] == 1
    # a local engine reads its score by likelihood (auto): a number, where the text route read none (#32)
    assert type(rm.judge).__name__ == "ScoreByLikelihood" and scores[0].valid and 1 <= scores[0].value <= 9


def test_synthesizeme_likelihood_route_verifies_personas_with_a_tiny_model(tiny_lm, tmp_path):
    """Every held-out pair gets a reading (a random tiny model writes no "Score: N"), so personas are verified."""
    from prbench.context.conditions import View
    from prbench.rewards import load_rm

    pairs = _planted_pairs(2, 4)
    fn, _ = METHODS["synthesizeme"].load()
    fn(pairs, tmp_path / "m", make_config("synthesizeme", {"engine": f"hf:{tiny_lm}", "candidates": 2,
                                                           "max_new_tokens": 8}))
    personas = json.loads((tmp_path / "m" / "personas.json").read_text())
    assert all(p["verified_on"] == 2 and p["verify_accuracy"] is not None for p in personas.values())
    assert json.loads((tmp_path / "m" / "config.json").read_text())["unverified_users"] == 0
    rm = load_rm(spec_for("synthesizeme", tmp_path / "m"))
    view = View(example_id="x", question=pairs[0].prompt, condition="profile", user_id="u0")
    scores = rm.score([(view, pairs[0].chosen), (view, pairs[0].rejected)])
    assert all(s.valid and 1 <= s.value <= 9 for s in scores) and rm.fingerprint()["route"] == "likelihood"


def test_synthesizeme_score_route_choice():
    """auto: likelihood for local engines, text for API judges; a folder from before the route reads text."""
    from prbench.rewards.synthesizeme import ScoreByLikelihood, judge_route

    assert judge_route({"engine": "builtin:smollm2-135m-instruct", "judge_route": "auto"}) == "likelihood"
    assert judge_route({"engine": "hf:/models/x", "judge_route": "auto"}) == "likelihood"
    assert judge_route({"engine": "openai:gpt-5.1", "judge_route": "auto"}) == "text"
    assert judge_route({"engine": "openai:gpt-5.1", "judge_route": "likelihood"}) == "likelihood"
    assert judge_route({"engine": "builtin:smollm2-135m-instruct"}) == "text"
    with pytest.raises(PrbenchError, match="judge_route"):
        judge_route({"engine": "hf:x", "judge_route": "logits"})
    inf = float("-inf")
    half = -0.6931471805599453
    assert ScoreByLikelihood.expected({"1": half, "9": half, **{str(i): inf for i in range(2, 9)}}) == pytest.approx(5)
    assert ScoreByLikelihood.expected({str(i): inf for i in range(1, 10)}) is None
    assert ScoreByLikelihood.expected({"3": 0.0}) == 3  # digits the engine did not report count as impossible


def test_synthesizeme_likelihood_route_refuses_an_engine_without_token_probabilities(tmp_path):
    from prbench.engines.base import Engine
    from prbench.errors import SpecError
    from prbench.rewards.synthesizeme import ScoreByLikelihood

    class TextOnly(Engine):
        spec = "textonly:x"

        def generate(self, prompts, params):  # pragma: no cover - never reached
            raise AssertionError

    with pytest.raises(SpecError, match="choice_logprobs"):
        ScoreByLikelihood(TextOnly())
