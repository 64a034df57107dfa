"""verl's own reward-model path against `prbench serve-reward` on 127.0.0.1: vLLM's `/classify`.

verl 0.9.1 with `reward.reward_model.enable=True` and no custom reward function sends each rollout
to the reward router as vLLM's pooling API. Its client cannot be imported here
(`verl/experimental/reward_loop/reward_loop.py` imports ray, tensordict, omegaconf and
`verl.protocol` at module level), so the two methods are replayed exactly, cited line by line:

- `RewardLoopWorker._preprocess_reward_inputs` (lines 197-229): `chat = list(raw_prompt)`; the
  response is `input_tokenizer.decode(valid_response_ids)` with `eos_token` replaced by "";
  `chat.append({"role": "assistant", "content": response})`; `rm_prompt =
  reward_model_tokenizer.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)`;
  a leading `bos_token` is cut off.
- `RewardLoopWorker.compute_score_disrm` (lines 231-242, the vllm branch): payload `{"model":
  model_path, "input": rm_prompt, "use_activation": False}` to `classify`; reward
  `output["data"][-1]["probs"][-1]`.
- `RewardLoopWorker._post_request` (lines 157-195): a new `aiohttp.ClientSession(timeout=
  aiohttp.ClientTimeout(total=None))` per request, `session.post(url, json=payload)`,
  `resp.raise_for_status()`, `await resp.json()`; 4xx is not retried. Retries on 5xx are left out:
  here the first try must succeed.
- `compute_score_batch` (lines 138-143): one task per rollout, all gathered at once.

The rows are `prbench export verl`'s (`raw_prompt` is the row's `prompt`), the RM tokenizer is
SmolLM2's (its chat template adds a default system turn), and the RM is a hash of exactly what it
reads, so any mix-up of users, items or answers shows as a wrong number.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence

import httpx
import pytest

from prbench.context.conditions import View
from prbench.data import load_examples
from prbench.integrations.export import verl_rows, write_parquet
from prbench.rewards.base import PointwiseRM, Score
from prbench.serve.chat import load_tokenizer
from prbench.serve.server import ThreadedServer, create_app
from prbench.serve.service import RewardService

TOKENIZER = "builtin:smollm2-135m-instruct"
MODEL_PATH = "/models/prbench-rm"  # what verl sends as `model` (its reward_model.model_path)
N = 1000


class HashRM(PointwiseRM):
    """Score = a hash of the question, the posts shown and the answer (read exactly as the RM would)."""

    spec = "test:hash"

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        out = []
        for view, response in batch:
            text = "\n".join([view.question, *(p.text for p in view.posts), response])
            out.append(Score(int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big") / 2**40 - 100))
        return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    items = load_examples("sample", "source")
    rows = verl_rows(items, condition="profile", top_k=3)
    path = write_parquet(rows, tmp_path_factory.mktemp("verl") / "train.parquet")
    return rows, str(path), load_tokenizer(TOKENIZER)


def verl_rm_prompt(tok, raw_prompt: list[dict], response_text: str) -> tuple[str, str]:
    """(rm_prompt, solution_str) of one rollout: `_preprocess_reward_inputs` and naive.py's decode."""
    ids = tok.encode(response_text, add_special_tokens=False) + [tok.eos_token_id]
    chat = list(raw_prompt)
    rollout_response = tok.decode(ids).replace(tok.eos_token, "")
    chat.append({"role": "assistant", "content": rollout_response})
    rm_prompt = tok.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
    if tok.bos_token is not None and rm_prompt.startswith(tok.bos_token):
        rm_prompt = rm_prompt[len(tok.bos_token):]
    return rm_prompt, tok.decode(ids, skip_special_tokens=True)


async def verl_rewards(base_url: str, prompts: list[str]) -> list[float]:
    import aiohttp

    async def post_request(payload: dict, endpoint: str) -> dict:
        timeout = aiohttp.ClientTimeout(total=None)
        async with aiohttp.ClientSession(timeout=timeout) as session:  # noqa: SIM117 - verl's own nesting
            async with session.post(f"{base_url}/{endpoint}", json=payload) as resp:
                resp.raise_for_status()
                return await resp.json()

    async def compute_score_disrm(rm_prompt: str) -> float:
        output = await post_request({"model": MODEL_PATH, "input": rm_prompt, "use_activation": False}, "classify")
        return output["data"][-1]["probs"][-1]

    return list(await asyncio.gather(*[asyncio.create_task(compute_score_disrm(p)) for p in prompts]))


def test_verl_reward_loop_client_gets_in_process_rewards(setup) -> None:
    rows, users, tok = setup
    rollouts = [(n % len(rows), f"Answer {n}: {rows[n % len(rows)]['extra_info']['question'][:40]} ({n % 7})")
                for n in range(N)]
    prompts, solutions = zip(*(verl_rm_prompt(tok, rows[k]["prompt"], text) for k, text in rollouts))
    app = create_app(HashRM(), "profile", top_k=3, users=users, rm_template=TOKENIZER,
                     served_model_name=MODEL_PATH)
    with ThreadedServer(app) as srv:
        got = asyncio.run(verl_rewards(srv.base_url, list(prompts)))
        stats = httpx.get(f"{srv.base_url}/stats").json()
        other = httpx.post(f"{srv.base_url}/classify", json={"model": "other", "input": prompts[0]})
        models = httpx.get(f"{srv.base_url}/v1/models").json()
    service = RewardService(HashRM(), "profile", top_k=3)
    want = [v for v, _ in service.reward_rows([(rows[k]["extra_info"], s) for (k, _), s in zip(rollouts, solutions)])]
    assert got == want  # exactly: the same item, user and answer text reached the RM
    assert len(set(got)) > N // 2 and stats["fallback"] == 0 and stats["served"] == N
    assert models["data"][0]["id"] == MODEL_PATH
    assert other.status_code == 404 and other.json()["error"]["type"] == "Not Found"  # --served-model-name


def test_classify_refuses_what_vllm_refuses_in_vllm_error_shape(setup) -> None:
    rows, users, tok = setup
    prompt, _ = verl_rm_prompt(tok, rows[0]["prompt"], "an answer")
    app = create_app(HashRM(), "profile", top_k=3, users=users, rm_template=TOKENIZER)
    with ThreadedServer(app) as srv:
        url = f"{srv.base_url}/classify"
        # vLLM 0.24.0: truncate_prompt_tokens >= -1 (base/protocol.py line 28), truncation_side left|right (29)
        for bad, param in (({"truncate_prompt_tokens": -5}, "body.truncate_prompt_tokens"),
                           ({"truncation_side": "middle"}, "body.truncation_side"),
                           ({"use_activation": [1]}, "body.use_activation")):
            r = httpx.post(url, json={"input": prompt, **bad})
            assert r.status_code == 400, r.text
            body = r.json()
            assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
            assert body["error"]["type"] == "Bad Request" and body["error"]["code"] == 400
            assert body["error"]["param"] == param
        # validate_json_request (serve/utils/api_utils.py lines 342-348): only application/json
        r = httpx.post(url, content=b'{"input": "x"}', headers={"content-type": "text/plain"})
        assert r.status_code == 400 and "Only 'application/json'" in r.json()["error"]["message"]
        # unknown fields are ignored, as OpenAIBaseModel's extra="allow" does (engine/protocol.py lines 28-57)
        ok = httpx.post(url, json={"model": "any/name", "input": prompt, "use_activation": False,
                                   "not_a_vllm_field": 1})  # no --served-model-name: any model name
        assert ok.status_code == 200 and ok.json()["data"][0]["num_classes"] == 1
        # an input whose prompt is not a served row's: vLLM's shape, naming the input
        r = httpx.post(url, json={"input": "<|im_start|>user\nwho?<|im_end|>\n<|im_start|>assistant\nx"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "input"
        # the chat form gives the same reward as the rendered one; the default activation is a sigmoid
        chat = [*rows[0]["prompt"], {"role": "assistant", "content": "an answer"}]
        raw = httpx.post(url, json={"input": prompt, "use_activation": False}).json()["data"][0]["probs"][0]
        via_chat = httpx.post(url, json={"messages": chat, "use_activation": False}).json()["data"][0]["probs"][0]
        sig = httpx.post(url, json={"input": prompt}).json()["data"][0]["probs"][0]
        pooled = httpx.post(f"{srv.base_url}/pooling", json={"input": prompt, "use_activation": False}).json()
    assert raw == via_chat and sig == pytest.approx(1 / (1 + 2.718281828459045 ** -raw))
    assert pooled["data"][0]["data"] == [raw] and pooled["object"] == "list"
