"""RL with the RM as reward: reward function through conditions, a tiny GRPO run, held-out grading."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from prbench.capabilities.rl.driver import RMReward, _rows, split_holdout, train_rl
from prbench.context.conditions import View, build_view
from prbench.context.retrieval import load_retriever
from prbench.downstream.results import read_downstream
from prbench.downstream.sampling import policy_messages
from prbench.errors import PrbenchError
from prbench.prompts import load_prompt
from prbench.rewards.base import PointwiseRM, Score, load_rm
from prbench.schema import Example
from prbench.testing.openai_server import serve
from prbench.testing.records import make_record

ANSWER = re.compile(r"<<<ANSWER\n(.*)\nANSWER>>>", re.DOTALL)


def short_items(n: int) -> list[Example]:
    out = []
    for i in range(n):
        rec = make_record(i)
        rec["profile"] = rec["profile"][:3]
        out.append(Example.model_validate(rec))
    return out


def grading_reply(body: dict) -> str:
    prompt = body["messages"][-1]["content"]
    answer = ANSWER.search(prompt).group(1)
    n = int(re.search(r"expects \((\d+) aspects\)", prompt).group(1))
    score = min(2, len(answer.split()) % 3)
    return json.dumps({"grades": [{"aspect": j + 1, "score": score} for j in range(n)]})


@pytest.fixture(autouse=True)
def _cache_dir(request, tmp_path, monkeypatch) -> None:
    if "smollm2" not in request.node.name:  # the builtin model is converted once into the user's cache
        monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


class Recorder(PointwiseRM):
    """Remembers the views it was shown; NaN for empty answers."""

    spec = "test:recorder"

    def __init__(self) -> None:
        self.views: list[View] = []

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        self.views.extend(v for v, _ in batch)
        return [Score(math.nan, error="empty") if not r.strip() else Score(float(len(r))) for _, r in batch]


@pytest.mark.parametrize("condition", ["none", "profile", "oracle"])
def test_reward_views_match_conditions_and_no_narrative(condition: str) -> None:
    items = short_items(3)
    ret = load_retriever("bm25")
    prompt = load_prompt("policy_answer")
    rows = _rows(items, [build_view(it, "profile", retriever=ret, top_k=2) for it in items], condition, prompt, 100)
    for row in rows:
        assert "narrative" not in row and "I care about" not in json.dumps(row)  # narrative text and evidence spans
        assert ("rubric_aspects" in row) == (condition == "oracle")
    rm = Recorder()
    reward = RMReward(rm, condition, retriever=ret, top_k=2)
    cols = {k: [r.get(k) for r in rows] for k in ("example_id", "question", "profile", "rubric_aspects")}
    completions = [[{"role": "assistant", "content": f"answer {i}"}] for i in range(3)]
    out = reward([r["prompt"] for r in rows], completions, **cols)
    assert out == [8.0, 8.0, 8.0]
    for it, seen in zip(items, rm.views):
        expected = build_view(it, condition, retriever=ret, top_k=2)
        assert seen.prompt() == expected.prompt() and seen.example_id == it.id
    # an invalid score gets the batch's mean valid reward (neutral), and is counted
    out = reward([r["prompt"] for r in rows], ["long answer here", "  ", "x"], **cols)
    assert out[1] == pytest.approx((16 + 1) / 2) and reward.stats.invalid == 1


def test_policy_prompt_is_the_sampling_prompt() -> None:
    it = short_items(1)[0]
    view = build_view(it, "profile", retriever=load_retriever("bm25"), top_k=2)
    [row] = _rows([it], [view], "profile", load_prompt("policy_answer"), 100)
    assert row["prompt"] == policy_messages(view, load_prompt("policy_answer"), 100)
    assert it.question in row["prompt"][0]["content"] and it.profile[0].text in row["prompt"][0]["content"]


def test_holdout_split_is_stable() -> None:
    items = short_items(10)
    train, held = split_holdout(items, 0.3, seed=0)
    assert held and train and not {i.id for i in train} & {i.id for i in held}
    _, held2 = split_holdout(list(reversed(items)), 0.3, seed=0)
    assert sorted(i.id for i in held2) == sorted(i.id for i in held)
    with pytest.raises(PrbenchError):
        split_holdout(items, 1.5, seed=0)


def test_bad_settings_refused(tmp_path) -> None:
    with pytest.raises(PrbenchError, match="num-generations"):
        train_rl("hf:x", "baseline:length", short_items(2), tmp_path, num_generations=1)
    with pytest.raises(PrbenchError, match="rubric"):
        train_rl("hf:x", "baseline:length", short_items(2), tmp_path, policy_condition="oracle")
    with pytest.raises(PrbenchError, match="unknown condition 'wrong-profile' \\(use none, profile, planner, oracle\\)"):
        train_rl("hf:x", "baseline:length", short_items(2), tmp_path, condition="wrong-profile")


def test_tiny_grpo_run_with_lora_and_grading(tmp_path) -> None:
    from prbench.testing.tiny import make_tiny_causal_lm, make_tiny_seq_classifier

    lm = make_tiny_causal_lm(tmp_path / "lm", seed=0)
    rm = load_rm(f"hf:{make_tiny_seq_classifier(tmp_path / 'rm', seed=1)}", device="cpu")
    t0 = time.time()
    with serve(grading_reply) as grader_srv:
        res = train_rl(f"hf:{lm}", rm, short_items(6), tmp_path / "rl", grader="openai:grader", condition="profile",
                       steps=2, lr=1e-3, lora=True, lora_r=4, num_generations=2, prompts_per_step=1,
                       max_completion_length=8, top_k=2, holdout=0.34, eval_max_new_tokens=8, n_boot=100,
                       grader_options={"engine_options": {"base_url": grader_srv.base_url}}, device="cpu",
                       gradient_checkpointing=False)
        n_grader_posts = len(grader_srv.requests)
    wall = time.time() - t0
    s = res.summary
    steps = [h for h in s["log_history"] if "reward" in h]
    assert len(steps) == 2 and all(math.isfinite(h["reward"]) for h in steps)
    assert s["reward"]["scored"] == 2 * 2 and s["reward"]["invalid"] == 0
    assert (tmp_path / "rl" / "policy" / "config.json").exists()
    assert not list((tmp_path / "rl" / "policy").glob("adapter_*"))  # LoRA merged into a plain checkpoint
    d = read_downstream(tmp_path / "rl")
    assert d.setting == "rl" and d.k == [1] and d.rm == "hf:" + str(tmp_path / "rm")
    assert d.n_items == s["heldout_items"] == 2 and d.expected == d.first_k
    assert "base" in d.extra and d.extra["base"]["n_items"] == 2
    # distinct held-out answers (trained + base, greedy) each graded once
    assert 1 <= n_grader_posts <= 4
    print(f"tiny GRPO (2 steps, LoRA) + eval: {wall:.1f}s")


@pytest.mark.slow
def test_builtin_smollm2_two_steps(tmp_path) -> None:
    """The real 135M model for 2 GRPO steps on CPU (no grading): the path users run."""
    t0 = time.time()
    res = train_rl("builtin:smollm2-135m-instruct", "baseline:length", short_items(3), tmp_path / "rl", steps=2,
                   lr=1e-5, num_generations=2, prompts_per_step=1, max_completion_length=8, top_k=2, holdout=0.34,
                   device="cpu", gradient_checkpointing=False)
    rewards = [h["reward"] for h in res.summary["log_history"] if "reward" in h]
    assert len(rewards) == 2 and all(r > 0 for r in rewards)  # length reward of non-empty answers
    assert (Path(res.summary["policy_dir"]) / "model.safetensors").exists()
    print(f"smollm2 GRPO 2 steps: {time.time() - t0:.1f}s")


def test_cli_and_study_share_one_rl_config(tmp_path, capsys) -> None:
    """`prbench rl` and a study's `rl` section build the same RLSettings: the same config.json."""
    import yaml

    from prbench.study.config import load_study_config
    from prbench.study.runner import plan_study, run_study
    from prbench.testing.cli import run_cli
    from prbench.testing.tiny import make_tiny_causal_lm

    lm = make_tiny_causal_lm(tmp_path / "lm", seed=0)
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(it.model_dump(mode="json")) + "\n" for it in short_items(4)), encoding="utf-8")
    own = {"steps": 1, "lr": 1e-3, "num_generations": 2, "prompts_per_step": 1, "max_completion_length": 4,
           "top_k": 2, "holdout": 0.25, "gradient_checkpointing": False}
    flags = [f"--{k.replace('_', '-')}" + ("" if isinstance(v, bool) else f"={v}") for k, v in own.items()]
    flags = [f if f != "--gradient-checkpointing" else "--no-gradient-checkpointing" for f in flags]
    code, out, err = run_cli(capsys, "rl", "--policy", f"hf:{lm}", "--rm", "baseline:length", "--data", str(data),
                             "--out", str(tmp_path / "cli"), "--device", "cpu", "--json", *flags)
    assert code == 0, err
    assert json.loads(out)["reward"]["scored"] == 2
    cli_cfg = json.loads((tmp_path / "cli" / "config.json").read_text())
    assert cli_cfg["steps"] == 1 and cli_cfg["split"] == "train" and cli_cfg["compare_base"] is True

    study = {"name": "rl", "data": str(data), "out": str(tmp_path / "study"), "stages": ["rl"],
             "models": [{"spec": "baseline:length"}],
             "rl": {"policy": f"hf:{lm}", "rms": ["baseline:length"], **own}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study), encoding="utf-8")
    cfg, root = load_study_config(tmp_path / "study.yaml")
    planned = plan_study(cfg, root)
    assert [(p.stage, p.model_calls) for p in planned] == [("rl", 1 * 1 * 2)]  # steps x prompts x answers
    run_study(cfg, root, quiet=True)
    (study_run,) = (tmp_path / "study" / "runs" / "downstream" / "rl").glob("*/config.json")
    assert json.loads(study_run.read_text()) == cli_cfg  # one default per option, everywhere
    with pytest.raises(PrbenchError, match="num_generations"):
        train_rl(f"hf:{lm}", "baseline:length", str(data), tmp_path / "x", num_generations=5000)


def test_judgments_survive_the_training_row() -> None:
    """A stance or a past choice written into a row reaches the reward's view as a judgment, not as a post
    the person wrote (#37: every condition hands methods signed evidence)."""
    from prbench.schema import ProfilePost

    it = short_items(1)[0].model_copy(update={"profile": [
        ProfilePost(id="a", text="Rent caps help tenants.", stance="agree"),
        ProfilePost(id="b", text="Build more roads.", stance="disagree"),
        ProfilePost(id="c", text="Short answers.", stance="chose", prompt="How should replies read?",
                    rejected="Long answers.")]})
    ret = load_retriever("bm25")
    [row] = _rows([it], [build_view(it, "profile", retriever=ret, top_k=3)], "profile", load_prompt("policy_answer"),
                  100)
    json.dumps(row)  # a row stays plain JSON
    rm = Recorder()
    reward = RMReward(rm, "profile", retriever=ret, top_k=3)
    reward([row["prompt"]], ["an answer"], example_id=[row["example_id"]], question=[row["question"]],
           profile=[row["profile"]], rubric_aspects=[None])
    [seen] = rm.views
    assert {p.id: (p.stance, p.rejected) for p in seen.posts} == {
        "a": ("agree", None), "b": ("disagree", None), "c": ("chose", "Long answers.")}
    assert seen.prompt() == build_view(it, "profile", retriever=ret, top_k=3).prompt()
