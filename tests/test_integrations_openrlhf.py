"""OpenRLHF against `prbench serve-reward` on 127.0.0.1, replaying OpenRLHF 0.11.2's own request code.

OpenRLHF cannot be installed here (it needs deepspeed, vLLM, flash-attn) and its request helper is
an aiohttp method of `SingleTurnAgentExecutor` (aiohttp is not installed either), so the call is
replayed exactly as OpenRLHF 0.11.2 makes it (wheel `openrlhf-0.11.2-cp311-cp311-manylinux1_x86_64`):

- prompt: `openrlhf/datasets/prompts_dataset.py::preprocess_data` with `--data.apply_chat_template`:
  `tokenizer.apply_chat_template(data[input_key], tokenize=False, add_generation_prompt=True)`;
  label: `data[label_key]`.
- query: `openrlhf/utils/agent.py::SingleTurnAgentExecutor.execute`: prompt ids from
  `hf_tokenizer(text=prompt, add_special_tokens=False)`, then
  `query = hf_tokenizer.decode(prompt_ids + action_ids, skip_special_tokens=False)`.
- request: `_fetch_rewards_via_http`: `session.post(url, json={"query": [...], "prompts": [...],
  "labels": [...]})`, no Authorization header, `response.raise_for_status()`, `await response.json()`.
- reading: `execute` takes `scores` (else `rewards`) and `rewards`; `samples_generator.py` builds
  `torch.tensor([reward_val])` and `torch.tensor([value])` for each `extra_logs` entry.
- local reward function: `spec_from_file_location("reward_func", path)`, called through
  `asyncio.to_thread(reward_func, queries[i:i+1], prompts[i:i+1], labels[i:i+1])`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
import torch

from prbench.context.conditions import View, build_view
from prbench.context.retrieval import load_retriever
from prbench.data import load_examples
from prbench.evaluation.scoring import score_cached
from prbench.integrations import openrlhf as openrlhf_hook
from prbench.integrations.export import openrlhf_rows
from prbench.rewards.base import PointwiseRM, Score, load_rm
from prbench.serve.chat import load_splitter
from prbench.serve.server import ThreadedServer, create_app
from prbench.store.cache import NullCache

POLICY = "builtin:smollm2-135m-instruct"


@pytest.fixture(scope="module")
def policy_tok():
    from transformers import AutoTokenizer

    from prbench.capabilities.rl.driver import resolve_policy

    return AutoTokenizer.from_pretrained(resolve_policy(POLICY))


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory) -> Path:
    from prbench.testing.tiny import make_tiny_seq_classifier

    return make_tiny_seq_classifier(tmp_path_factory.mktemp("rm"), seed=5)


@pytest.fixture(scope="module")
def items():
    return load_examples("sample", "source", limit=4)


def rollout(tok, row: dict, answer: str) -> tuple[str, str, str]:
    """(query, prompt, label) exactly as OpenRLHF 0.11.2 builds them for one generated answer."""
    prompt = tok.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
    prompt_ids = tok(text=prompt, add_special_tokens=False, return_tensors="pt")["input_ids"][0].tolist()
    action_ids = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]  # vLLM stops at EOS
    query = tok.decode(prompt_ids + action_ids, skip_special_tokens=False)
    return query, prompt, row["label"]


def openrlhf_post(url: str, queries: list[str], prompts: list[str], labels: list) -> dict:
    """`_fetch_rewards_via_http` for one server, then `execute`'s reading of the reply."""
    payload = {"query": queries, "prompts": prompts, "labels": labels}
    r = httpx.post(url, content=json.dumps(payload).encode(), headers={"Content-Type": "application/json"},
                   timeout=180)
    r.raise_for_status()
    info = r.json()
    score = info.get("scores")
    if score is None:
        score = info.get("rewards")
    for value in (info.get("extra_logs") or {}).values():
        torch.tensor([value])  # samples_generator.py: every extra log must become a tensor
    return {"reward": torch.tensor([info.get("rewards")]), "score": torch.tensor([score]), "raw": info}


def direct(rm: PointwiseRM, items, answers: Sequence[str], top_k: int) -> list[float]:
    """What `prbench eval` computes for these (item, answer) pairs: one item at a time, like the server."""
    ret = load_retriever("bm25")
    return [score_cached(rm, [(build_view(it, "profile", retriever=ret, top_k=top_k), a)], NullCache())[0].value
            for it, a in zip(items, answers)]


ANSWERS = ["Meter for the highlights and push one stop.", "Try a cheap 50mm.", "Use a tripod at dusk.",
           "Keep notes on each roll."]


def test_openrlhf_payload_gets_finite_rewards_equal_to_eval_scoring(policy_tok, rm_dir, items) -> None:
    rm = load_rm(f"hf:{rm_dir}", device="cpu", batch_size=4)
    rows = openrlhf_rows(items, condition="profile", top_k=3)
    app = create_app(rm, "profile", top_k=3, policy_template=load_splitter(POLICY))
    expected = direct(rm, items, ANSWERS, top_k=3)
    with ThreadedServer(app) as srv:
        got = []
        for row, answer in zip(rows, ANSWERS):
            q, p, lab = rollout(policy_tok, row, answer)
            assert q.endswith(policy_tok.eos_token)  # special tokens are in the query, as OpenRLHF sends it
            out = openrlhf_post(f"{srv.base_url}/get_reward", [q], [p], [lab])
            assert out["raw"]["rewards"] == out["raw"]["scores"]
            assert out["raw"]["extra_logs"] == {"prbench_invalid": [0.0]}
            got.append(out["reward"].item())
        stats = httpx.get(f"{srv.base_url}/stats").json()
    assert all(math.isfinite(v) for v in got)
    assert got == pytest.approx(expected, abs=1e-6)
    assert len(set(got)) == len(got)  # different answers, different rewards: the answer was really read
    assert stats["items"] == 4 and stats["invalid"] == 0


def test_prompt_missing_uses_the_template_and_batches_are_item_wise(policy_tok, rm_dir, items) -> None:
    """Without `prompts` the answer is found after the template's assistant header; several queries at once."""
    rm = load_rm(f"hf:{rm_dir}", device="cpu", batch_size=4)
    rows = openrlhf_rows(items, condition="profile", top_k=3)
    made = [rollout(policy_tok, row, a) for row, a in zip(rows, ANSWERS)]
    with ThreadedServer(create_app(rm, "profile", top_k=3, policy_template=POLICY)) as srv:
        r = httpx.post(f"{srv.base_url}/get_reward", json={"query": [m[0] for m in made],
                                                          "labels": [m[2] for m in made]})
    assert r.status_code == 200
    assert r.json()["rewards"] == pytest.approx(direct(rm, items, ANSWERS, top_k=3), abs=1e-5)


class NaNOnBad(PointwiseRM):
    spec = "test:nan-on-bad"

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        return [Score(math.nan, error="boom") if "BAD" in r else Score(float(len(r.split()))) for _, r in batch]


def test_invalid_items_get_the_fallback_and_are_counted(policy_tok, items) -> None:
    rows = openrlhf_rows(items[:2], condition="profile")
    good_q, good_p, good_l = rollout(policy_tok, rows[0], "two words")
    bad_q, bad_p, _ = rollout(policy_tok, rows[0], "a BAD answer")
    app = create_app(NaNOnBad(), "profile", policy_template=POLICY, fallback_reward=-1.5,
                     items=items)
    with ThreadedServer(app) as srv:
        url = f"{srv.base_url}/get_reward"
        body = openrlhf_post(url, [good_q, bad_q, good_q, good_q, "no template here"],
                             [good_p, bad_p, good_p, good_p, ""],
                             [good_l, good_l, "not json", json.dumps({"id": "nope"}), good_l])["raw"]
        assert body["rewards"] == [2.0, -1.5, -1.5, -1.5, -1.5]
        assert body["extra_logs"]["prbench_invalid"] == [0.0, 1.0, 1.0, 1.0, 1.0]
        # a label naming only an id is looked up in the served items
        only_id = openrlhf_post(url, [good_q], [good_p], [json.dumps({"id": items[0].id})])["raw"]
        assert only_id["rewards"] == [2.0]
        stats = httpx.get(f"{srv.base_url}/stats").json()
        # a malformed request as a whole is a 4xx, never a 500 or a reward
        assert httpx.post(url, json={"query": "x"}).status_code == 422
        assert httpx.post(url, json={"query": ["a", "b"], "labels": [good_l]}).status_code == 422
        assert httpx.post(url, content=b"{oops", headers={"Content-Type": "application/json"}).status_code == 400
    assert stats["invalid"] == 4 and stats["items"] == 6 and stats["fallback_reward"] == -1.5
    assert stats["invalid_reasons"] == {"rm_failed": 1, "bad_label": 2, "no_response": 1}


def test_without_policy_template_openrlhf_requests_get_422_naming_the_flag(policy_tok, items) -> None:
    """Not a fallback 0.0 per item (a PPO run would train on zeros): the request is refused, the flag named."""
    rows = openrlhf_rows(items[:1], condition="none")
    q, p, lab = rollout(policy_tok, rows[0], "fine")
    with ThreadedServer(create_app(load_rm("baseline:length"), "none")) as srv:
        r = httpx.post(f"{srv.base_url}/get_reward", json={"query": [q], "prompts": [p], "labels": [lab]})
        assert r.status_code == 422 and "--policy-template" in r.json()["detail"]
        stats = httpx.get(f"{srv.base_url}/stats").json()
        assert stats["fallback"] == 0 and stats["rejected_by_status"] == {"422": 1}


def test_with_a_token_openrlhf_requests_are_refused(policy_tok, items) -> None:
    """OpenRLHF sends no Authorization header: a token-protected server answers 401 (documented)."""
    app = create_app(load_rm("baseline:length"), "none", token="t0k", policy_template=POLICY)
    with ThreadedServer(app) as srv, pytest.raises(httpx.HTTPStatusError, match="401"):
        openrlhf_post(f"{srv.base_url}/get_reward", ["q"], ["q"], ["{}"])


def test_local_reward_func_file_matches_the_server(policy_tok, rm_dir, items, monkeypatch) -> None:
    rm = load_rm(f"hf:{rm_dir}", device="cpu", batch_size=4)
    rows = openrlhf_rows(items, condition="profile", top_k=10)
    made = [rollout(policy_tok, row, a) for row, a in zip(rows, ANSWERS)]
    for key, value in {"PRBENCH_RM": f"hf:{rm_dir}", "PRBENCH_POLICY_TEMPLATE": POLICY,
                       "PRBENCH_CONDITION": "profile", "PRBENCH_DEVICE": "cpu"}.items():
        monkeypatch.setenv(key, value)
    # as OpenRLHF loads a `--reward.remote_url` ending in .py
    spec = importlib.util.spec_from_file_location("reward_func", openrlhf_hook.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    async def fetch() -> list[dict]:
        return await asyncio.gather(*[asyncio.to_thread(module.reward_func, [q], [p], [lab]) for q, p, lab in made])

    infos = asyncio.run(fetch())
    local = [float(torch.tensor([i["rewards"]]).flatten()[0]) for i in infos]
    assert all(i["extra_logs"] == {"prbench_invalid": 0.0} for i in infos)
    with ThreadedServer(create_app(rm, "profile", policy_template=POLICY)) as srv:
        served = [openrlhf_post(f"{srv.base_url}/get_reward", [q], [p], [lab])["raw"]["rewards"][0]
                  for q, p, lab in made]
    assert local == pytest.approx(served, abs=1e-6)
    assert local == pytest.approx(direct(rm, items, ANSWERS, top_k=10), abs=1e-6)


def test_export_openrlhf_rows_feed_openrlhf_preprocess(items, policy_tok) -> None:
    rows = openrlhf_rows(items, condition="oracle")
    for row, it in zip(rows, items):
        label = json.loads(row["label"])
        assert label["id"] == it.id and label["question"] == it.question
        assert [p["text"] for p in label["profile"]] == [p.text for p in it.profile]
        assert [a["aspect"] for a in label["rubric_aspects"]] == [a.aspect for a in it.rubric_aspects]
        assert "narrative" not in label
        assert isinstance(row["prompt"], list) and row["prompt"][0]["role"] == "user"
        assert it.question in row["prompt"][0]["content"]
    assert "rubric_aspects" not in json.loads(openrlhf_rows(items, condition="profile")[0]["label"])
