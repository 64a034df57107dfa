"""Personalized reward models: pairs and splits, PAL, the context BT head, and TRL fine-tuning.

Acceptance (fixed seeds, synthetic planted preferences on three dimensions, one per category;
held-out users are unseen in training, split by complementary twins so the held-out set is
balanced):
- PAL-A and PAL-B with few-shot adaptation (mixture weights fitted on half of each held-out
  user's pairs) reach >= 0.8 on the other half;
- the BT head over frozen MiniLM features reading the profile view reaches >= 0.8;
- the same head under condition `none` (user-blind) stays within 0.35-0.65.
"BT with profile" here is the frozen-encoder head (`train_context_bt`), not a fine-tuned LLM:
the TRL path (`train_bt`) is tested for plumbing only (runs, logs, saves, reloads, repeats).

Embeddings are cached in pytest's cache folder, so only the first run pays for the encoder.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from prbench.context.conditions import View
from prbench.data import write_examples
from prbench.data.pairs import (
    PreferencePair,
    load_pairs,
    pair_from_example,
    pairs_from_examples,
    split_by_user,
    users_of,
)
from prbench.data.synth_users import synth_examples, twin_group
from prbench.errors import DataError, PrbenchError
from prbench.store.cache import Cache

DIMS = ("diet", "mood", "social")  # Lifestyle, Arts, Society


# --------------------------------------------------------------------------- pairs and splits


def _pair(user: str, i: int, **kw) -> PreferencePair:
    return PreferencePair(user_id=user, prompt=f"q{i}", chosen=f"good {i}", rejected=f"bad {i}", id=f"{user}-{i}", **kw)


def test_pair_from_example_keeps_user_and_falls_back_to_id():
    ex = synth_examples(2, 1, seed=0)[0]
    p = pair_from_example(ex)
    assert (p.user_id, p.prompt, p.chosen, p.id) == (ex.user_id, ex.question, ex.chosen, ex.id)
    assert p.profile == ex.profile
    anonymous = ex.model_copy(update={"user_id": None})
    assert pair_from_example(anonymous).user_id == ex.id


def test_load_pairs_reads_pairs_and_benchmark_records(tmp_path):
    path = tmp_path / "mixed.jsonl"
    ex = synth_examples(2, 1, seed=0)[0]
    rows = [{"user_id": 7, "prompt": "Q?", "chosen": "a", "rejected": "b",
             "profile": [{"id": 1, "text": "post"}]},
            ex.model_dump(mode="json", exclude_none=True)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    pairs = load_pairs(path)
    assert pairs[0].user_id == "7" and pairs[0].profile[0].id == "1" and pairs[0].id is None
    assert pairs[0].key.startswith("pair-") and pairs[0].key == load_pairs(path)[0].key
    assert pairs[1].user_id == ex.user_id and pairs[1].id == ex.id


def test_load_pairs_errors_name_file_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"user_id": "u", "prompt": "q", "chosen": "a", "rejected": "b"}\n'
                    '{"user_id": "u", "prompt": "q", "chosen": "a"}\n', encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_pairs(path)
    assert (err.value.file, err.value.line, err.value.field) == (str(path), 2, "rejected")
    path.write_text('{"user_id": "u", "prompt": "q", "chosen": " ", "rejected": "b"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r":1: chosen"):
        load_pairs(path)
    path.write_text('{"id": "x", "user_id": "u", "prompt": "q", "chosen": "a", "rejected": "b"}\n' * 2,
                    encoding="utf-8")
    with pytest.raises(DataError, match="duplicate id"):
        load_pairs(path)


@pytest.mark.parametrize("by", ["pair", "user"])
def test_split_by_user_puts_every_pair_in_exactly_one_part(by):
    pairs = [_pair(f"u{u}", i) for u in range(10) for i in range(u + 1)]
    parts = split_by_user(pairs, (0.8, 0.1, 0.1), seed=3, by=by)
    keys = [p.key for part in parts for p in part]
    assert sorted(keys) == sorted(p.key for p in pairs)
    assert split_by_user(list(reversed(pairs)), (0.8, 0.1, 0.1), seed=3, by=by) == parts  # order-free
    assert split_by_user(pairs, (0.8, 0.1, 0.1), seed=4, by=by) != parts
    if by == "user":  # users are disjoint across parts
        owners = [set(users_of(part)) for part in parts]
        assert not (owners[0] & owners[1] or owners[0] & owners[2] or owners[1] & owners[2])
        assert [len(o) for o in owners] == [8, 1, 1]
    else:  # every user keeps at least 80% (rounded down) of their pairs in training
        train = parts[0]
        assert set(users_of(train)) == {f"u{u}" for u in range(10)}
        for u in range(10):
            assert int(0.8 * (u + 1)) <= sum(p.user_id == f"u{u}" for p in train) <= u + 1


def test_split_by_user_groups_and_validation():
    pairs = [_pair(f"t{t}{s}", i) for t in range(6) for s in "ab" for i in range(2)]
    train, test = split_by_user(pairs, (0.5, 0.5), seed=0, by="user", group=lambda u: u[:-1])
    for part in (train, test):
        users = set(users_of(part))
        assert all(u[:-1] + ("b" if u.endswith("a") else "a") in users for u in users)  # twins together
    with pytest.raises(PrbenchError, match="sum to 1"):
        split_by_user(pairs, (0.5, 0.4))
    with pytest.raises(PrbenchError, match="group"):
        split_by_user(pairs, (0.5, 0.5), by="pair", group=lambda u: u)


# --------------------------------------------------------------------------- shared synthetic data


@pytest.fixture(scope="module")
def embed_cache(request, tmp_path_factory) -> Cache:
    """Encoder outputs persist in pytest's cache dir (deterministic given the text)."""
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    base = cache.mkdir("prbench-embeddings") if cache is not None else tmp_path_factory.mktemp("emb")
    return Cache(Path(base) / "minilm.sqlite", namespace="embeddings")


@pytest.fixture(scope="module")
def synth(embed_cache):
    """40 users x 12 items; 10 held-out users (5 twin pairs); their pairs halved: adapt / evaluate."""
    from prbench.rewards.pal import Embedder

    examples = synth_examples(40, 12, seed=0, dimensions=DIMS)
    pairs = pairs_from_examples(examples)
    train, _, test = split_by_user(pairs, (0.75, 0.0, 0.25), seed=0, by="user", group=twin_group)
    adapt, _, held = split_by_user(test, (0.5, 0.0, 0.5), seed=0, by="pair")
    texts = {t for p in pairs for t in (p.prompt, p.chosen, p.rejected, *(q.text for q in p.profile))}
    Embedder(cache=embed_cache)(sorted(texts))  # warm the encoder once for every test below
    return {"examples": examples, "train": train, "test": test, "adapt": adapt, "held": held}


def _views(pairs, condition="profile", with_user=True):
    return [View(example_id=p.key, question=p.prompt, condition=condition,
                 meta={"user_id": p.user_id} if with_user else {}) for p in pairs]


def _accuracy(rm, pairs, views) -> float:
    chosen = rm.score([(v, p.chosen) for v, p in zip(views, pairs)])
    rejected = rm.score([(v, p.rejected) for v, p in zip(views, pairs)])
    margins = np.array([c.value - r.value for c, r in zip(chosen, rejected)])
    return float(np.mean((margins > 0) + 0.5 * (margins == 0)))


# --------------------------------------------------------------------------- PAL


@pytest.mark.parametrize("arch", ["pal-a", "pal-b"])
def test_pal_few_shot_adaptation_reads_held_out_users(arch, synth, embed_cache, tmp_path):
    from prbench.rewards import load_rm
    from prbench.train.pal import PALConfig, train_pal

    out = tmp_path / arch
    result = train_pal(synth["train"], out, PALConfig(arch=arch, seed=0), cache=embed_cache)
    assert result.log[-1]["accuracy"] > 0.9  # fits its training users
    rm = load_rm(f"pal:{out}", encoder_cache=embed_cache)
    held, views = synth["held"], _views(synth["held"])
    uniform = _accuracy(rm, held, views)  # unseen users, no data: the uniform mixture
    assert 0.35 <= uniform <= 0.65
    for user in users_of(synth["adapt"]):
        rm.adapt(user, [p for p in synth["adapt"] if p.user_id == user])
    adapted = _accuracy(rm, held, views)
    print(f"{arch}: held-out users, uniform mixture {uniform:.3f}, few-shot adapted {adapted:.3f}")
    assert adapted >= 0.8
    assert rm.run_info()["adapted_users"] == len(users_of(held))


def test_pal_same_seed_same_final_loss(synth, embed_cache, tmp_path):
    from prbench.train.pal import PALConfig, train_pal

    runs = [train_pal(synth["train"], tmp_path / f"r{i}", PALConfig(epochs=3, seed=s), cache=embed_cache)
            for i, s in enumerate((5, 5, 6))]
    assert runs[0].final_loss == runs[1].final_loss
    assert runs[0].final_loss != runs[2].final_loss
    log = [json.loads(line) for line in (tmp_path / "r0" / "train_log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2, 3] and all({"loss", "accuracy"} <= set(r) for r in log)


def test_pal_folder_identity_adaptation_and_safe_loading(synth, embed_cache, tmp_path):
    """Trained users score via meta user_id or the stored example-id map; adapted users persist."""
    from prbench.rewards import load_rm
    from prbench.rewards.pal import PALReward
    from prbench.train.pal import PALConfig, train_pal

    out = tmp_path / "pal"
    train_pal(synth["train"], out, PALConfig(epochs=5, seed=0), adapt_pairs=synth["adapt"], cache=embed_cache)
    assert {f.name for f in out.iterdir()} == {"config.json", "model.safetensors", "prbench_rm.json",
                                               "train_log.jsonl", "prbench_manifest.json"}
    rm = load_rm(f"pal:{out}", encoder_cache=embed_cache)
    assert isinstance(rm, PALReward) and rm.spec == f"pal:{out}"
    trained = synth["train"][:6]
    by_meta = rm.score([(v, p.chosen) for v, p in zip(_views(trained), trained)])
    by_example_id = rm.score([(v, p.chosen) for v, p in zip(_views(trained, with_user=False), trained)])
    assert [s.value for s in by_meta] == pytest.approx([s.value for s in by_example_id], abs=1e-6)
    # Condition `none` withholds the user: no lookup by example id, the uniform mixture scores.
    blind = rm.score([(v, p.chosen) for v, p in zip(_views(trained, "none", with_user=False), trained)])
    assert rm.run_info()["scored_with_uniform_mixture"] == len(trained)
    assert [s.value for s in blind] != pytest.approx([s.value for s in by_meta], abs=1e-6)
    # Batch composition does not change a score.
    alone = [rm.score([(v, p.chosen)])[0].value for v, p in zip(_views(trained), trained)]
    assert alone == pytest.approx([s.value for s in by_meta], abs=1e-5)
    # Adapted users were saved as rows of the table: no adaptation needed at load.
    assert synth["held"][0].user_id in rm.users
    # A stranger gets the uniform mixture, and it is counted.
    stranger = View(example_id="nobody", question="q", condition="profile", meta={"user_id": "stranger"})
    assert np.allclose(rm.mixture("stranger"), 1 / 8)
    rm.score([(stranger, "an answer")])
    assert rm.run_info()["scored_with_uniform_mixture"] == len(trained) + 1
    # `adapt=` at load: few-shot weights for users of a pairs file.
    plain = tmp_path / "plain"
    train_pal(synth["train"], plain, PALConfig(epochs=5, seed=0), cache=embed_cache)
    pairs_file = tmp_path / "adapt.jsonl"
    pairs_file.write_text("".join(p.model_dump_json() + "\n" for p in synth["adapt"]), encoding="utf-8")
    rm2 = load_rm(f"pal:{plain}", adapt=str(pairs_file), encoder_cache=embed_cache)
    assert set(rm2.adapted) == set(users_of(synth["adapt"]))
    assert rm2.fingerprint() != load_rm(f"pal:{plain}", encoder_cache=embed_cache).fingerprint()


def test_pal_missing_files_is_a_clear_error(tmp_path):
    from prbench.rewards.pal import PALReward

    with pytest.raises(PrbenchError, match="model.safetensors"):
        PALReward(str(tmp_path))


# --------------------------------------------------------------------------- BT head on frozen features


def test_context_bt_reads_the_profile_and_is_blind_without_it(synth, embed_cache, tmp_path):
    from prbench.rewards import load_rm
    from prbench.train.bt import ContextBTConfig, pair_views, train_context_bt

    accs = {}
    for condition in ("profile", "none"):
        out = tmp_path / condition
        result = train_context_bt(synth["train"], out, ContextBTConfig(condition=condition, seed=0),
                                  eval_pairs=synth["test"], cache=embed_cache)
        rm = load_rm(f"pal:{out}", encoder_cache=embed_cache)
        views = pair_views(synth["test"], condition)  # the same views evaluation builds
        accs[condition] = _accuracy(rm, synth["test"], views)
        assert accs[condition] == pytest.approx(result.log[-1]["eval_accuracy"], abs=1e-9)
    print(f"context BT on held-out users: profile {accs['profile']:.3f}, none {accs['none']:.3f}")
    assert accs["profile"] >= 0.8
    assert 0.35 <= accs["none"] <= 0.65


def test_context_bt_same_seed_same_final_loss(synth, embed_cache, tmp_path):
    from prbench.train.bt import ContextBTConfig, train_context_bt

    losses = [train_context_bt(synth["train"], tmp_path / f"r{i}", ContextBTConfig(epochs=2, seed=s),
                               cache=embed_cache).final_loss for i, s in enumerate((1, 1, 2))]
    assert losses[0] == losses[1] != losses[2]


# --------------------------------------------------------------------------- TRL RewardTrainer


@pytest.fixture(scope="module")
def few_pairs(synth):
    return synth["train"][:8]


def _trl(few_pairs, tiny_rm, out, **kw):
    from prbench.train.bt import BTConfig, train_bt

    cfg = BTConfig(**{"condition": "profile", "top_k": 2, "epochs": 2, "batch_size": 4, "lr": 1e-3,
                      "max_length": 1024, **kw})
    return train_bt(few_pairs, out, str(tiny_rm), cfg, eval_pairs=few_pairs[:4])


def test_trl_bt_trains_logs_saves_and_reloads_as_hf(few_pairs, tiny_rm, tmp_path):
    from prbench.rewards import load_rm
    from prbench.train.bt import pair_views

    out = tmp_path / "bt"
    result = _trl(few_pairs, tiny_rm, out)
    assert [r["epoch"] for r in result.log] == [1.0, 2.0]
    assert all({"loss", "accuracy", "eval_accuracy"} <= set(r) for r in result.log)
    assert json.loads((out / "train_log.jsonl").read_text().splitlines()[-1]) == result.log[-1]
    meta = json.loads((out / "prbench_rm.json").read_text())
    assert meta["condition"] == "profile" and meta["kind"] == "bt"
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert not list(out.glob("*.bin")) and not list(out.glob("*.pt"))
    rm = load_rm(f"hf:{out}", device="cpu")
    views = pair_views(few_pairs[:2], "profile", top_k=2)
    scores = rm.score([(views[0], few_pairs[0].chosen), (views[1], few_pairs[1].rejected)])
    assert all(s.valid for s in scores)


def test_trl_bt_same_seed_same_final_loss(few_pairs, tiny_rm, tmp_path):
    a = _trl(few_pairs, tiny_rm, tmp_path / "a", seed=3).final_loss
    b = _trl(few_pairs, tiny_rm, tmp_path / "b", seed=3).final_loss
    assert a == b


def test_trl_bt_lora_is_merged_into_a_plain_hf_folder(few_pairs, tiny_rm, tmp_path):
    from transformers import AutoModelForSequenceClassification

    out = tmp_path / "lora"
    _trl(few_pairs, tiny_rm, out, lora=True, lora_r=4)
    assert not (out / "adapter_config.json").exists()
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.num_labels == 1


def test_trl_bt_refuses_to_drop_pairs_silently(few_pairs, tiny_rm, tmp_path):
    with pytest.raises(PrbenchError, match="exceed max_length"):
        _trl(few_pairs, tiny_rm, tmp_path / "short", max_length=64)


# --------------------------------------------------------------------------- CLI


def test_cli_train_pal_and_frozen_bt(synth, embed_cache, tmp_path, monkeypatch):
    import typer
    from typer.testing import CliRunner

    from prbench.cli import train as train_cli

    data = tmp_path / "train.jsonl"
    write_examples([e for e in synth["examples"] if e.user_id in set(users_of(synth["train"]))][:60], data)
    runner = CliRunner()
    res = runner.invoke(train_cli.app, ["pal", "--data", str(data), "--out", str(tmp_path / "pal"),
                                        "--epochs", "2", "--k-prototypes", "4", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["final"]["epoch"] == 2
    cfg = json.loads((tmp_path / "pal" / "config.json").read_text())
    assert cfg["k_prototypes"] == 4 and cfg["arch"] == "pal-a"
    res = runner.invoke(train_cli.app, ["bt", "--data", str(data), "--out", str(tmp_path / "bt"),
                                        "--frozen-encoder", "--condition", "profile", "--epochs", "1"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "bt" / "config.json").read_text())["condition"] == "profile"
    res = runner.invoke(train_cli.app, ["bt", "--data", str(data), "--out", str(tmp_path / "x")])
    assert isinstance(res.exception, PrbenchError)
    assert isinstance(train_cli.app, typer.Typer)
