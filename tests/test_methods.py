"""Personalized RM methods on planted-preference users (known truth) and under the seen/unseen protocol.

Planted users (`synth_users`, three dimensions, twins kept together so every held-out set is
balanced): each method must beat chance on seen users, and the expected orderings hold:
LoRe (published, free user weights) and PAL at chance on unseen users with no shots and far
above it with k = 8; LoRe with the profile prior above chance already at k = 0; controls
(no context, wrong profile) at chance. Writing-persona users (`synth_personas`): the
recommended default beats `baseline:lexical` on user- and question-disjoint held-out users.
Embeddings are cached in pytest's cache folder, so only the first run pays for the encoder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prbench.data.pairs import pairs_from_examples, users_of
from prbench.data.synth_personas import synth_persona_examples
from prbench.data.synth_users import synth_examples, twin_group
from prbench.errors import PrbenchError
from prbench.train.methods import DEFAULT_METHOD, METHODS, make_config, spec_for, train_method
from prbench.train.protocol import (
    ProtocolConfig,
    control_mean,
    headline,
    run_protocol,
    split_protocol,
    user_breakdown,
)


def _curve(rep):
    return {c["k"]: c["mean"] for c in rep["unseen"]["curve"]}


# --------------------------------------------------------------------------- the split


def test_split_is_user_and_item_disjoint_and_exhaustive(planted, planted_config):
    s = planted
    seen = set(users_of(s.train)) | set(users_of(s.seen_test))
    unseen = set(users_of(s.unseen_pool)) | set(users_of(s.unseen_test))
    assert seen and unseen and not seen & unseen
    assert all(twin_group(u) not in {twin_group(v) for v in seen} for u in unseen)  # twins stay together
    train_items = {p.prompt.lower() for p in s.train + s.unseen_pool}
    assert not train_items & {p.prompt.lower() for p in s.seen_test + s.unseen_test}
    all_pairs = pairs_from_examples(synth_examples(40, 16, seed=0, dimensions=("diet", "mood", "social")))
    parts = s.train + s.seen_test + s.unseen_pool + s.unseen_test
    assert sorted(p.key for p in parts) == sorted(p.key for p in all_pairs)
    again = split_protocol(list(reversed(all_pairs)), planted_config, user_group=twin_group)
    assert [p.key for p in again.unseen_test] == [p.key for p in s.unseen_test]
    with pytest.raises(PrbenchError, match="at least 4 users"):
        split_protocol(all_pairs[:20], planted_config)


# --------------------------------------------------------------------------- planted users, per method


def test_lore_profile_prior_reads_unseen_users_from_their_profile(planted, method_protocol):
    rep, _rm = method_protocol("lore", planted)
    k = _curve(rep)
    assert rep["seen"]["mean"] >= 0.75
    assert k[0] >= 0.7  # no labelled pair of the new user: the profile alone
    c = rep["controls"]
    assert 0.35 <= c["no_context"]["mean"] <= 0.65 and 0.3 <= c["wrong_profile"]["mean"] <= 0.65
    assert k[0] > c["no_context"]["mean"] + 0.15 and k[0] > c["wrong_profile"]["mean"] + 0.15
    assert rep["unseen"]["adaptable"] and set(k) == {0, 2, 8}


def test_lore_published_adapts_from_k_shots(planted, method_protocol):
    rep, _ = method_protocol("lore", planted, prior="none")
    k = _curve(rep)
    assert rep["seen"]["mean"] >= 0.8
    assert 0.35 <= k[0] <= 0.65  # a new user with no shots: the uniform mixture
    assert k[2] > k[0] + 0.1 and k[8] > k[0] + 0.2 and k[8] >= k[2]
    assert rep["controls"]["wrong_user_shots"]["mean"] < k[8] - 0.2  # another user's shots do not help


def test_vpl_recovers_seen_users_and_reads_the_profile(planted, method_protocol):
    rep, _rm = method_protocol("vpl", planted)
    k = _curve(rep)
    assert rep["train"]["mean"] >= 0.8 and rep["seen"]["mean"] > 0.55
    assert k[0] > rep["controls"]["no_context"]["mean"]
    assert 0.35 <= rep["controls"]["no_context"]["mean"] <= 0.65


def test_pal_failure_mode_is_visible_and_shots_fix_it(planted, method_protocol):
    rep, _ = method_protocol("pal", planted)
    k = _curve(rep)
    assert rep["train"]["mean"] >= 0.9 and rep["seen"]["mean"] >= 0.7
    assert 0.3 <= k[0] <= 0.65 and k[8] > k[0] + 0.2
    assert rep["gap"] > 0.3 and any("memorises its training pairs" in w for w in rep["warnings"])
    assert rep["warnings"] and rep["caught"] == rep["warnings"]


def test_context_bt_has_no_k_shot_state_and_is_blind_without_context(planted, method_protocol):
    rep, rm = method_protocol("context-bt", planted)
    assert [c["k"] for c in rep["unseen"]["curve"]] == [0] and not rep["unseen"]["adaptable"]
    assert rep["seen"]["mean"] > 0.7 and _curve(rep)[0] > 0.7
    assert 0.35 <= rep["controls"]["no_context"]["mean"] <= 0.65
    assert rm.seen_users() == set(users_of(planted.train))


# --------------------------------------------------------------------------- persona users: the default


def test_default_method_beats_lexical_on_unseen_persona_users(minilm_cache, tmp_path):
    from prbench.data.synth_personas import question_group

    pairs = pairs_from_examples(synth_persona_examples(32, 20, seed=5))
    cfg = ProtocolConfig(ks=(0,), draws=1, holdout_users=0.375, n_boot=200)
    split = split_protocol(pairs, cfg, item_key=lambda p: question_group(p.prompt))
    assert not {question_group(p.prompt) for p in split.train} & {question_group(p.prompt) for p in split.unseen_test}
    fn, _ = METHODS[DEFAULT_METHOD].load()
    fn(split.train, tmp_path / "m", make_config(DEFAULT_METHOD, {}), cache=minilm_cache)
    from prbench.rewards import load_rm

    rep = run_protocol(load_rm(spec_for(DEFAULT_METHOD, tmp_path / "m"), encoder_cache=minilm_cache), split, cfg)
    h = headline(rep)
    k0, lexical, embedding = h.unseen_k0, control_mean(h, "baseline:lexical"), control_mean(h, "baseline:embedding")
    assert k0 is not None and lexical is not None and embedding is not None
    print(f"persona users, unseen k=0: {DEFAULT_METHOD} {k0:.3f}, lexical {lexical:.3f}, embedding {embedding:.3f}")
    assert k0 >= 0.75
    assert k0 > lexical + 0.1 and k0 > embedding + 0.1


# --------------------------------------------------------------------------- folders, adaptation, eval summary


def test_lore_and_vpl_adapt_replaces_shots_and_changes_the_fingerprint(planted, minilm_cache, tmp_path):
    from prbench.rewards import load_rm
    from prbench.train.lore import LoReConfig, train_lore
    from prbench.train.vpl import VPLConfig, train_vpl

    train_lore(planted.train, tmp_path / "lore", LoReConfig(epochs=3, prior="none"), cache=minilm_cache)
    train_vpl(planted.train, tmp_path / "vpl", VPLConfig(steps=5), cache=minilm_cache)
    user = planted.unseen_pool[0].user_id
    shots = [p for p in planted.unseen_pool if p.user_id == user][:3]
    for spec in (f"lore:{tmp_path / 'lore'}", f"vpl:{tmp_path / 'vpl'}"):
        rm = load_rm(spec, encoder_cache=minilm_cache)
        before = rm.fingerprint()
        rm.adapt(user, shots)
        assert rm.fingerprint() != before and user in rm.adapted
        rm.adapt(user, [])
        assert rm.fingerprint() == before
        assert rm.seen_users() == set(users_of(planted.train))
    meta = json.loads((tmp_path / "vpl" / "prbench_rm.json").read_text())
    assert meta["kind"] == "vpl" and meta["loads_as"] == "vpl:<dir>"
    with pytest.raises(PrbenchError, match=r"holds a 'vpl' model.*vpl:"):
        load_rm(f"lore:{tmp_path / 'vpl'}")


def test_user_breakdown_splits_seen_and_unseen_and_warns():
    class RM:
        def seen_users(self):
            return {"a", "b"}

    recs = [{"user_id": u, "credit": c} for u, cs in {"a": [1, 1], "b": [1, 0], "c": [0, 0], "d": [0.5, 0]}.items()
            for c in cs] + [{"user_id": "e", "credit": None}]
    out = user_breakdown(recs, RM(), n_boot=50)
    assert out["users"]["n_users"] == 4 and out["users"]["mean"] == pytest.approx((1 + 0.5 + 0 + 0.25) / 4)
    assert out["users"]["worst_decile"] == 0.0
    assert out["seen"]["pair_accuracy"] == 0.75 and out["unseen"]["pair_accuracy"] == pytest.approx(0.125)
    assert "far better than new ones" in out["warning"]
    assert "seen" not in user_breakdown(recs, object(), n_boot=50)


def test_cli_default_trains_the_recommended_method_and_eval_reports_the_protocol(minilm_cache, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from prbench.cli import _register, app
    from prbench.data import write_examples

    _register()  # what main() does before parsing: attach `train`, `eval`, ...
    data = tmp_path / "train.jsonl"
    examples = synth_persona_examples(12, 6, seed=2, history=4)
    write_examples(examples, data)
    runner = CliRunner()
    out = tmp_path / "rm"
    res = runner.invoke(app, ["train", "--data", str(data), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    rec = report["recommendation"]  # no method named: the candidates cross-validated over the people of the file
    assert {r["method"] for r in rec["candidates"]} == {m for m in METHODS.names() if METHODS[m].recommend}
    assert [r["method"] for r in rec["references"]] == ["covote-nn"] and rec["scored_people"] == 12
    assert rec["why"].startswith(report["method"]) and report["loads_as"] == f"{METHODS[report['method']].spec}:{out}"
    assert {"train", "seen", "unseen_k0", "baseline:lexical"} <= set(report["protocol"])
    protocol = json.loads((out / "protocol.json").read_text())
    assert [c["k"] for c in protocol["unseen"]["curve"]] == [0, 1, 2, 4, 8, 16]
    res = runner.invoke(app, ["eval", "-m", report["loads_as"], "-d", str(data), "-c", "profile", "--out",
                              str(tmp_path / "runs"), "--json", "--quiet"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)[0]
    assert summary["model_info"]["protocol"]["unseen"]["curve"][0]["k"] == 0
    per_user = summary["per_user"]
    assert per_user["seen"]["n_users"] == len(users_of(pairs_from_examples(examples)))  # refit: all users seen
    assert per_user["users"]["n_users"] == 12
    res = runner.invoke(app, ["eval", "-m", report["loads_as"], "-d", str(data), "-c", "history", "--out",
                              str(tmp_path / "runs"), "--json", "--quiet"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)[0]  # the same protocol and per-user split, the earlier pairs as shots
    assert summary["condition"] == "history" and summary["model_info"]["protocol"]["unseen"]["curve"][0]["k"] == 0
    assert summary["model_info"]["scored_from_history"] > 0 and summary["per_user"]["users"]["n_users"] == 12
    res = runner.invoke(app, ["train", "--data", str(data)])
    assert isinstance(res.exception, PrbenchError)


def test_finetune_trains_minilm_and_a_decoder_with_lora_through_trl(tiny_rm, tmp_path):
    from prbench.rewards import load_rm
    from prbench.train.finetune import FinetuneConfig, train_finetune
    from prbench.train.protocol import pair_credits

    pairs = pairs_from_examples(synth_persona_examples(8, 2, seed=1, posts=4))
    for name, base in (("enc", "builtin:minilm-l6"), ("dec", str(tiny_rm))):
        out = tmp_path / name
        res = train_finetune(pairs, out, FinetuneConfig(base_model=base, max_steps=2, batch_size=4, top_k=2))
        assert res.log and (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
        meta = json.loads((out / "prbench_rm.json").read_text())
        assert meta["kind"] == "finetune" and meta["family"] == ("encoder" if name == "enc" else "decoder")
        assert meta["train"]["lora"] is (name == "dec")
        rm = load_rm(f"finetune:{out}", device="cpu")
        assert rm.seen_users() == set(users_of(pairs))
        credits, _ = pair_credits(rm, pairs[:4], "profile", ProtocolConfig(top_k=2))
        assert all(c in (0.0, 0.5, 1.0) for c in credits)


def test_train_method_refuses_unknown_methods_and_options(planted):
    with pytest.raises(PrbenchError, match="did you mean 'lore'"):
        train_method("lorre", planted.train, "x")
    with pytest.raises(PrbenchError, match="unknown option"):
        make_config("lore", {"rnak": 3})


def test_study_stage_compares_methods(planted, minilm_cache, tmp_path):
    from prbench.study.config import parse_study
    from prbench.study.runner import plan_study, run_study

    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(p.model_dump_json() + "\n" for p in planted.train + planted.unseen_test), encoding="utf-8")
    cfg = parse_study(
        "name: p\ndata: pairs.jsonl\nout: study\nmodels: [{spec: 'baseline:length'}]\nstages: [personalize]\n"
        "personalize: {methods: [lore, pal], ks: [0, 4], draws: 1, options: {lore: {epochs: 20}, pal: {epochs: 10}}}\n",
        "inline")
    assert [r.stage for r in plan_study(cfg, tmp_path)] == ["personalize", "personalize"]
    ctx = run_study(cfg, tmp_path, quiet=True)
    assert ctx.outputs.personalize is not None
    comp = json.loads(Path(ctx.outputs.personalize.json_file).read_text())
    assert [r["method"] for r in comp["rows"]] == ["lore", "pal"]
    assert comp["best_unseen_k0"] == "lore"
    assert (tmp_path / "study" / "personalize" / "comparison.csv").is_file()


def test_history_pairs_are_the_shots_of_lore_pal_and_vpl(minilm_cache, tmp_path):
    """Under `history` a view's earlier pairs are the user's k shots (fitted per view), so unseen
    users are read from their own choices and a wrong user's choices fall to chance."""
    from prbench import evaluate
    from prbench.rewards import load_rm
    from prbench.rewards.baselines import context_units

    examples = synth_persona_examples(40, 12, seed=3, history=8)
    assert [len(e.history) for e in examples[:10]] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 8]
    assert all(h.time < e.time for e in examples for h in e.history)
    train_users = sorted({e.user_id for e in examples})[:30]
    pairs = pairs_from_examples([e for e in examples if e.user_id in train_users])
    unseen = [e for e in examples if e.user_id not in train_users and len(e.history) >= 2]
    acc, runs = {}, {}
    for method in ("lore", "pal", "vpl"):
        fn, _ = METHODS[method].load()
        fn(pairs, tmp_path / method, make_config(method, {}), cache=minilm_cache)
        rm = load_rm(spec_for(method, tmp_path / method), encoder_cache=minilm_cache)
        for cond in ("history", "wrong-history", "profile"):
            runs[method, cond] = evaluate(rm, unseen, cond)
            acc[method, cond] = runs[method, cond].summary.accuracy
        assert rm.run_info()["scored_from_history"] >= 2 * len(unseen)  # every history view, both responses
    for cond in ("history", "profile"):
        acc["baseline:lexical", cond] = evaluate("baseline:lexical", unseen, cond).summary.accuracy
    print({f"{m}/{c}": round(a, 3) for (m, c), a in acc.items()})
    assert acc["lore", "history"] >= 0.8 and acc["lore", "history"] > acc["lore", "wrong-history"] + 0.2
    assert acc["lore", "history"] > acc["baseline:lexical", "history"]
    assert acc["pal", "history"] > acc["pal", "profile"] + 0.2  # PAL has no use for posts, but fits shots
    # VPL: an unseen user without shots is z = 0 whatever the view; only the shown pairs move its scores
    vpl = [[r.score_chosen for r in runs["vpl", c].records] for c in ("history", "wrong-history")]
    assert vpl[0] != vpl[1]
    from prbench.context.conditions import build_view
    from prbench.context.retrieval import load_retriever

    shown = build_view(unseen[0], "history", retriever=load_retriever("bm25"))
    assert context_units(shown) == [h.chosen for h in shown.pairs]  # the baselines compare with what they preferred


def test_training_methods_are_one_registry_and_the_cli_list_is_derived_from_it():
    """A plug-in `Method` (here registered at run time, as an entry point of `prbench.methods` would be) gets a
    `prbench train NAME` command and a config; an entry point that is not a Method is refused in one line."""
    from prbench.cli.train import _simple_methods
    from prbench.train.methods import Method

    names = [name for name, _, _ in _simple_methods()]
    assert names == [m for m in METHODS.names() if METHODS[m].command]
    assert "stance" in names and "pal" not in names  # pal and bt have commands of their own
    mine = Method("mine", "prbench.train.stance:train_stance", "prbench.train.stance:StanceConfig", "stance",
                  "Train mine.", cost=1.5)
    METHODS.register("mine", mine)
    METHODS.register("broken", "prbench.train.methods:DEFAULT_METHOD")
    try:
        assert METHODS["mine"] is mine and make_config("mine", {"rank": 8}).rank == 8
        assert ("mine", METHODS["mine"].settings(), "Train mine.") in _simple_methods()
        with pytest.raises(PrbenchError, match="'broken': its entry point gives a str, not a"):
            METHODS["broken"]
        with pytest.warns(UserWarning, match="prbench train broken: not available"):
            assert "broken" not in [n for n, _, _ in _simple_methods()]
    finally:
        METHODS.unregister("mine")
        METHODS.unregister("broken")
    with pytest.raises(PrbenchError, match="unknown training method 'mien'"):
        make_config("mien", {})
