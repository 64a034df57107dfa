"""The reward server at a trainer's concurrency, on 127.0.0.1: 2,048 rollouts at once, none lost.

The RM is a test double with a GPU RM's shape: each forward call costs `FORWARD_S` whatever its
batch (it sleeps, releasing the GIL as a GPU kernel would), and its score is a hash of exactly
what it reads (question, posts shown, answer), so any mix-up of items, orders or users
between requests shows up as a wrong number. Without cross-request batching 2,048 single-item
requests would take 2,048 forwards (~60 s); batched they take a few dozen.

Clients, replayed from the frameworks' own code:
- OpenRLHF 0.11.2 (`openrlhf/utils/agent.py`, lines 327-365, `_fetch_rewards_via_http`, and its inner
  `_post_request`, lines 347-362): one `aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=180))` per
  request, `session.post(url, json={"query": [q], "prompts": [p], "labels": [label]})`,
  `response.raise_for_status()`, `await response.json()`; one query per request
  (`SingleTurnAgentExecutor.execute`, line 292). OpenRLHF retries 5 times 1 s apart; here the
  first try must succeed (no retry). The module itself cannot be imported (`openrlhf/utils/__init__`
  imports deepspeed through `utils.utils.get_strategy`), so the call is replayed exactly.
- verl 0.9.1: `RewardLoopWorker.compute_score_batch` (`verl/experimental/reward_loop/reward_loop.py`,
  lines 138-143) creates one task per item and gathers them all; `NaiveRewardManager.run_single`
  (`reward_manager/naive.py`, lines 34-99; the async branch, lines 66-73) awaits `compute_score(data_source=, solution_str=,
  ground_truth=, extra_info=)` with `num_turns` and `rollout_reward_scores` added to `extra_info`.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import resource
import threading
import time
from collections.abc import Sequence

import httpx
import pytest

from prbench.context.conditions import View, build_view
from prbench.context.retrieval import load_retriever
from prbench.data import load_examples
from prbench.integrations.export import openrlhf_rows, verl_rows
from prbench.integrations.verl import compute_score_async
from prbench.rewards.base import PointwiseRM, Score
from prbench.serve.server import Limits, ThreadedServer, create_app

N = 2048
FORWARD_S = 0.03
POLICY = "builtin:smollm2-135m-instruct"


class SlowHashRM(PointwiseRM):
    """A GPU-shaped RM double: `FORWARD_S` per forward of up to `batch` items; score = hash of its input."""

    spec = "test:slow-hash"

    def __init__(self, batch: int = 64):
        self.batch, self.forwards = batch, 0
        self._lock = threading.Lock()

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        for _ in range(0, len(batch), self.batch):
            time.sleep(FORWARD_S)
            with self._lock:
                self.forwards += 1
        return [Score(expected(v, r)) for v, r in batch]


def expected(view: View, response: str) -> float:
    """A number that changes with anything the RM reads: the question, the posts shown, the answer."""
    shown = "\n".join(p.text for p in view.posts)
    digest = hashlib.sha256(f"{view.question}\n{shown}\n{response}".encode()).digest()
    return int.from_bytes(digest[:6], "big") / 2**48


@pytest.fixture(scope="module", autouse=True)
def enough_file_descriptors():
    """Client and server share this process: 2 descriptors per connection, plus the rest."""
    need = 2 * N + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.fail(f"open-file hard limit {hard} is under {need}: run the tests with `ulimit -n {need}`")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture(scope="module")
def items():
    return load_examples("sample", "source")


@pytest.fixture(scope="module")
def server(items):
    rm = SlowHashRM()
    app = create_app(rm, "profile", top_k=10, policy_template=POLICY, items=items)
    # The 2,048 clients share this process (and its GIL) with the server: on a loaded machine a client
    # can connect and write its headers more than the default 10 s later. That deadline is for clients
    # with their own CPU; here it would count the test's own lag as lost rewards.
    with ThreadedServer(app, limits=Limits(header_timeout=120, body_timeout=120)) as srv:
        yield srv, rm


def answers(items) -> list[tuple[int, str]]:
    """(item index, answer) for N distinct rollouts: every item sampled many times, as in GRPO/PPO."""
    return [(i % len(items), f"Answer {i}: {items[i % len(items)].profile[i % 3].text[:60].strip()}") for i in range(N)]


def truth(items, pairs) -> list[float]:
    ret = load_retriever("bm25")
    views = [build_view(it, "profile", retriever=ret, top_k=10) for it in items]
    return [expected(views[k], a) for k, a in pairs]


def stats(srv) -> dict:
    return httpx.get(f"{srv.base_url}/stats", timeout=30).json()


def test_openrlhf_2048_concurrent_single_item_requests_none_lost(server, items) -> None:
    import aiohttp
    from transformers import AutoTokenizer

    from prbench.capabilities.rl.driver import resolve_policy

    srv, rm = server
    tok = AutoTokenizer.from_pretrained(resolve_policy(POLICY))
    rows = openrlhf_rows(items, condition="profile", top_k=10)
    prompts = [tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
    prompt_ids = [tok(text=p, add_special_tokens=False)["input_ids"] for p in prompts]
    pairs = answers(items)
    queries = [tok.decode(prompt_ids[k] + tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id],
                          skip_special_tokens=False) for k, a in pairs]
    before, forwards = stats(srv), rm.forwards

    async def post_once(data: dict) -> list[float]:  # agent.py:347-362 with try_max_times=1
        timeout = aiohttp.ClientTimeout(total=180)
        async with aiohttp.ClientSession(timeout=timeout) as session, \
                session.post(f"{srv.base_url}/get_reward", json=data) as response:
            response.raise_for_status()
            return (await response.json())["rewards"]

    async def main() -> list:
        return await asyncio.gather(*[post_once({"query": [q], "prompts": [prompts[k]], "labels": [rows[k]["label"]]})
                                      for q, (k, _) in zip(queries, pairs)], return_exceptions=True)

    got = asyncio.run(main())
    errors = [g for g in got if isinstance(g, BaseException)]
    assert not errors, f"{len(errors)} of {N} requests failed, first: {errors[0]!r}"
    rewards = [g[0] for g in got]
    assert all(math.isfinite(r) for r in rewards)
    assert rewards == pytest.approx(truth(items, pairs), abs=1e-12)
    after = stats(srv)
    assert after["served"] - before["served"] == N and after["queued"] == 0
    assert after["fallback"] == before["fallback"] == 0 and after["rejected"] == before["rejected"] == 0
    assert after["failed"] == after["abandoned"] == 0
    assert rm.forwards - forwards < N / 4, "items of concurrent requests were not batched"
    assert after["batch_size"]["max"] > 1


def test_verl_2048_concurrent_compute_score_async_none_lost(server, items) -> None:
    srv, _ = server
    rows = verl_rows(items, condition="profile", top_k=10)
    pairs = answers(items)
    before = stats(srv)

    async def run_single(k: int, answer: str) -> float:  # naive.py:66-73, the async branch of run_single (34-99)
        row = rows[k]
        extra_info = {**row["extra_info"], "num_turns": None, "rollout_reward_scores": {}}
        result = await compute_score_async(data_source=row["data_source"], solution_str=answer,
                                           ground_truth=row["reward_model"]["ground_truth"], extra_info=extra_info,
                                           url=srv.base_url)
        assert result["prbench_invalid"] == 0.0
        return result["score"]

    async def compute_score_batch() -> list[float]:  # reward_loop.py:138-143
        return await asyncio.gather(*[asyncio.create_task(run_single(k, a)) for k, a in pairs])

    scores = asyncio.run(compute_score_batch())
    assert all(math.isfinite(s) for s in scores)
    assert scores == pytest.approx(truth(items, pairs), abs=1e-12)
    after = stats(srv)
    assert after["served"] - before["served"] == N and after["queued"] == 0
    assert after["fallback"] == 0 and after["rejected"] == before["rejected"] == 0
    assert after["failed"] == after["abandoned"] == 0
    assert after["requests"] - before["requests"] <= N // 64 + 8  # the client sends concurrent calls together
