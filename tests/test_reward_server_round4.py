"""The reward server, round four (issue 51: items 4, 5, 6, 14, 15, 16, 18 and the fuzz), all on 127.0.0.1.

vLLM's answers are cited from vLLM 0.24.0 (the version verl 0.9.1 pairs with; `prbench.serve.protocols`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence

import httpx
import pytest

from prbench.context.conditions import View
from prbench.data import load_examples
from prbench.engines.base import Engine, Generation, GenParams, Messages
from prbench.errors import PrbenchError
from prbench.integrations.export import verl_rows, write_parquet
from prbench.rewards.base import PointwiseRM, Score, load_rm
from prbench.serve.batcher import Batching
from prbench.serve.chat import load_tokenizer
from prbench.serve.guard import Limits
from prbench.serve.server import ThreadedServer, create_app

TOKENIZER = "builtin:smollm2-135m-instruct"  # the RM template of /classify and the policy's of /get_reward


class HashRM(PointwiseRM):
    """Score = a hash of everything the RM reads: question, each post's text and stance, the answer."""

    spec = "test:hash"

    def __init__(self, delay: float = 0.0):
        self.delay = delay

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        time.sleep(self.delay)
        out = []
        for view, response in batch:
            text = "\n".join([view.question, *(f"{p.stance}:{p.text}" for p in view.posts), response])
            out.append(Score(int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big") / 2**40 - 100))
        return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """verl rows of the sample items (`prbench export verl`), their parquet and one rendered rollout."""
    items = load_examples("sample", "source")
    rows = verl_rows(items, condition="profile", top_k=3)
    path = write_parquet(rows, tmp_path_factory.mktemp("verl") / "train.parquet")
    tok = load_tokenizer(TOKENIZER)
    chat = [*rows[0]["prompt"], {"role": "assistant", "content": "an answer"}]
    prompt = tok.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
    if tok.bos_token and prompt.startswith(tok.bos_token):
        prompt = prompt[len(tok.bos_token):]
    return rows, str(path), prompt


def classify_app(users: str, rm: PointwiseRM | None = None, **kw):
    return create_app(rm or HashRM(), "profile", top_k=3, users=users, rm_template=TOKENIZER, **kw)


def vllm_shape(r: httpx.Response, status: int) -> dict:
    """The body of a vLLM error (`ErrorResponse`: engine/protocol.py lines 60-68), checked."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["code"] == status and isinstance(body["error"]["message"], str)
    return body["error"]


def raw_request(port: int, path: str, body: bytes, headers: Sequence[str] = ()) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    head = [f"POST {path} HTTP/1.1", *(headers or ["Host: 127.0.0.1", "Content-Type: application/json"]),
            f"Content-Length: {len(body)}"]
    s.sendall("\r\n".join(head).encode() + b"\r\n\r\n" + body)
    return s


def status_of(s: socket.socket) -> int:
    data = b""
    while b"\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    return int(data.split(b" ", 2)[1]) if data else 0


# -- item 4 -----------------------------------------------------------------------------------------
def test_classify_and_pooling_clients_that_leave_while_queued_are_499_abandoned_never_500(setup) -> None:
    """Item 4: vLLM's error body looked up `HTTPStatus(499)`, which raised: a 500 per client that left."""
    _, users, prompt = setup
    app = classify_app(users, HashRM(delay=0.6), max_batch=1, batching=Batching(max_items=1, max_wait_ms=0))
    body = json.dumps({"input": prompt, "use_activation": False}).encode()
    with ThreadedServer(app) as srv:
        first = raw_request(srv.port, "/classify", body)  # the RM is busy with it for 0.6 s
        time.sleep(0.2)
        leaving = [raw_request(srv.port, path, body) for path in ("/classify", "/pooling") * 5]
        time.sleep(0.2)
        for s in leaving:
            s.close()
        assert status_of(first) == 200
        time.sleep(1.5)
        stats = httpx.get(f"{srv.base_url}/stats").json()
    assert stats["rejected_by_status"] == {"499": 10} and stats["abandoned"] == 10 and stats["served"] == 1, stats


# -- item 5 -----------------------------------------------------------------------------------------
class _Asked:
    """A timer handle that reports the time it was asked for while it fires earlier, as uvloop's do."""

    def __init__(self, handle: asyncio.TimerHandle, when: float):
        self.handle, self.asked = handle, when

    def when(self) -> float:
        return self.asked

    def cancel(self) -> None:
        self.handle.cancel()

    def cancelled(self) -> bool:
        return self.handle.cancelled()


class EarlyTimers(asyncio.SelectorEventLoop):
    """An event loop whose timers fire 5 ms early (uvloop rounds to whole milliseconds: up to ~1 ms)."""

    def call_later(self, delay, callback, *args, context=None):  # type: ignore[override]
        handle = super().call_later(delay - 0.005, callback, *args, context=context)
        return _Asked(handle, handle.when() + 0.005)


def test_a_slow_body_is_408_even_when_timers_fire_early() -> None:
    """Item 5: `read_body` compared the clock with its own timer's `when()`; a timer fired early (uvloop)
    made the body deadline look like someone else's cancel, and the request ended as a 500."""
    app = create_app(HashRM(), "none", body_timeout=0.2)
    sent: list[dict] = []

    async def one_slow_request() -> None:
        chunks = [{"type": "http.request", "body": b'{"items": [', "more_body": True}]

        async def receive() -> dict:
            if chunks:
                return chunks.pop()
            await asyncio.sleep(3600)  # the rest of the body never comes
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/score",
                 "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]}
        await asyncio.wait_for(app(scope, receive, send), 10)

    loop = EarlyTimers()
    try:
        loop.run_until_complete(one_slow_request())
    finally:
        loop.close()
        app.batcher.close()
    assert sent[0]["status"] == 408 and b"not received within 0.2 s" in sent[1]["body"]

    # and over real sockets on uvicorn's own loop (uvloop where installed): 40 slow bodies, 40 answers of 408
    app = create_app(HashRM(), "none")
    with ThreadedServer(app, limits=Limits(body_timeout=0.3)) as srv:
        socks = []
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
            s.sendall(b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{\"items\"")
            socks.append(s)
        assert Counter(status_of(s) for s in socks) == {408: 40}


# -- item 6 -----------------------------------------------------------------------------------------
def test_the_chat_form_refuses_malformed_messages_in_vllm_shape_and_reads_text_parts(setup) -> None:
    """Item 6: 8 malformed `messages` shapes answered 500. Now vLLM 0.24.0's reading (chat_utils.py lines
    323-353, 1567-1605, 1743-1760): role required; content a string, text parts (joined by newlines) or
    null / absent (no text); other types 400. prbench refuses what it cannot score: an empty list, a
    non-text part, a tool call."""
    rows, users, _ = setup
    head = list(rows[0]["prompt"])
    with ThreadedServer(classify_app(users)) as srv:
        def post(path: str, messages: object) -> httpx.Response:
            return httpx.post(f"{srv.base_url}{path}", json={"messages": messages, "use_activation": False},
                              timeout=30)

        def reward(r: httpx.Response) -> float:
            assert r.status_code == 200, r.text
            data = r.json()["data"][-1]
            return data["probs"][-1] if "probs" in data else data["data"][-1]

        for path in ("/classify", "/pooling"):
            as_string = reward(post(path, [*head, {"role": "assistant", "content": "one\ntwo"}]))
            parts = [{"type": "text", "text": "one"}, "two"]
            assert reward(post(path, [*head, {"role": "assistant", "content": parts}])) == as_string
            empty = reward(post(path, [*head, {"role": "assistant", "content": ""}]))
            assert reward(post(path, [*head, {"role": "assistant", "content": None}])) == empty
            assert reward(post(path, [*head, {"role": "assistant"}])) == empty
            refused = {
                "empty list": [],
                "content int": [*head, {"role": "assistant", "content": 7}],
                "content dict": [*head, {"role": "assistant", "content": {"text": "x"}}],
                "image part": [*head, {"role": "assistant", "content": [{"type": "image_url", "image_url": {}}]}],
                "part without text": [*head, {"role": "assistant", "content": [{"type": "text"}]}],
                "no role": [*head, {"content": "an answer"}],
                "tool call": [*head, {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
                "not a message": [*head, "an answer"],
                "user content null": [{**head[-1], "content": None}, {"role": "assistant", "content": "x"}],
            }
            for why, messages in refused.items():
                err = vllm_shape(post(path, messages), 400)
                assert err["type"] in ("Bad Request", "BadRequestError"), (why, err)
            err = vllm_shape(post(path, refused["tool call"]), 400)
            assert "tool_calls" in err["message"] and err["param"].startswith("body.messages")
        stats = httpx.get(f"{srv.base_url}/stats").json()
    assert "500" not in stats["rejected_by_status"], stats


# -- item 14 ----------------------------------------------------------------------------------------
def test_vllm_routes_keep_vllm_error_shape_refuse_an_empty_input_and_name_a_lone_surrogate(setup) -> None:
    """Item 14: 413, a wrong Host, 401 and 403 answered `{"detail": ...}` on vLLM's routes; `input: []`
    answered 200 with `data: []` (verl reads `data[-1]`); a lone surrogate escape was "unexpected end of
    hex escape"."""
    _, users, prompt = setup
    app = classify_app(users, token="tok-51", max_body_bytes=50_000)
    auth = {"authorization": "Bearer tok-51"}
    with ThreadedServer(app) as srv:
        for path in ("/classify", "/pooling"):
            url = f"{srv.base_url}{path}"
            vllm_shape(httpx.post(url, json={"input": prompt}), 401)
            vllm_shape(httpx.post(url, json={"input": prompt}, headers={"authorization": "Bearer nope"}), 403)
            err = vllm_shape(httpx.post(url, json={"input": prompt}, headers={**auth, "host": "evil.example"}), 400)
            assert "Host header" in err["message"]
            vllm_shape(httpx.post(url, json={"input": "x" * 60_000}, headers=auth), 413)
            # vLLM 0.24.0: renderers/base.py lines 369-375 raise ValueError, create_error_response makes it a 400
            err = vllm_shape(httpx.post(url, json={"input": []}, headers=auth), 400)
            assert err == {"message": "You must pass at least one prompt", "type": "BadRequestError",
                           "param": None, "code": 400}
            body = b'{"input": "abc\\ud800def"}'
            err = vllm_shape(httpx.post(url, content=body, headers={**auth, "content-type": "application/json"}), 400)
            assert "lone surrogate escape \\ud800" in err["message"], err
            assert httpx.post(url, json={"input": prompt}, headers=auth).status_code == 200
        vllm_shape(httpx.get(f"{srv.base_url}/v1/models"), 401)
        # prbench's own routes keep their `detail`
        for path, body in (("/score", b'{"items": [{"query": "q\\udc00", "response": "r", "profile": []}]}'),
                           ("/get_reward", b'{"query": ["\\ud83d"]}')):
            r = httpx.post(f"{srv.base_url}{path}", content=body, headers={**auth, "content-type": "application/json"})
            assert r.status_code == 400 and "lone surrogate escape" in r.json()["detail"], r.text
        assert httpx.post(f"{srv.base_url}/score", json={"items": []}).json() == {"detail": "missing bearer token"}


# -- item 15 ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("headers", [
    ["Host: evil.example", "Host: 127.0.0.1", "Content-Type: application/json"],
    ["Host: 127.0.0.1", "Host: evil.example", "Content-Type: application/json"],
    ["Host: 127.0.0.1", "Content-Type: application/json", "Content-Type: application/json"],
    ["Host: 127.0.0.1", "Content-Type: application/json", "Authorization: Bearer a", "Authorization: Bearer b"],
], ids=["foreign-host-first", "own-host-first", "content-type-twice", "authorization-twice"])
def test_a_repeated_host_content_type_or_authorization_header_is_400(headers) -> None:
    """Item 15: a repeated header kept its last value, so two Hosts (foreign first) passed the DNS-rebinding
    check. RFC 9112 section 3.2: more than one Host is a 400; the others are never lists (RFC 9110 5.3)."""
    with ThreadedServer(create_app(HashRM(), "none")) as srv:
        body = b'{"items": [{"query": "q", "response": "a b"}]}'
        assert status_of(raw_request(srv.port, "/score", body)) == 200
        assert status_of(raw_request(srv.port, "/score", body, headers)) == 400
        s = raw_request(srv.port, "/score", body, headers)
        reply = b""
        while not reply.endswith(b"}"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
        s.close()
        assert b"header is repeated" in reply


# -- item 16 ----------------------------------------------------------------------------------------
def test_score_honours_and_checks_stances_as_get_reward_does() -> None:
    """Item 16: /score read a profile item as `{id, text, category}` only: `agree` and `disagree` on the
    same text scored alike and a misspelt stance was accepted, while /get_reward honoured and checked it."""
    app = create_app(HashRM(), "profile", policy_template=TOKENIZER)
    post = {"id": "p1", "text": "Rent caps help tenants."}
    with ThreadedServer(app) as srv, httpx.Client(base_url=srv.base_url, timeout=30) as http:
        def score(stance: str | None) -> httpx.Response:
            profile = [{**post, "stance": stance} if stance else post]
            return http.post("/score", json={"items": [{"id": "q1", "query": "What should the city do?",
                                                        "response": "Cap rents.", "profile": profile}]})

        agree, disagree, wrote = (score(s).json()["scores"][0] for s in ("agree", "disagree", None))
        assert len({agree, disagree, wrote}) == 3
        label = json.dumps({"id": "q1", "question": "What should the city do?",
                            "profile": [{**post, "stance": "disagree"}]})
        query = "<|im_start|>user\nWhat should the city do?<|im_end|>\n<|im_start|>assistant\nCap rents.<|im_end|>"
        assert http.post("/get_reward", json={"query": [query], "labels": [label]}).json()["rewards"] == [disagree]
        bad = score("disagre")
        assert bad.status_code == 422 and "items[0].profile.0.stance" in bad.json()["detail"], bad.text
        assert "unknown stance 'disagre'" in bad.json()["detail"]
        # a past choice and a plain string are read too, as in a file and in a /get_reward label
        choice = {"prompt": "How should replies read?", "chosen": "Short.", "rejected": "Long."}
        ok = http.post("/score", json={"items": [{"query": "q", "response": "r", "profile": [choice, "a post"]}]})
        assert ok.status_code == 200 and ok.json()["invalid"] == 0


class OneGrader(Engine):
    """A rubric grader's engine that grades every aspect 1 (`prbench.downstream.grader`'s reply format)."""

    spec = "scripted:grader"

    def generate(self, prompts: Sequence[Messages], params: GenParams | Sequence[GenParams]) -> list[Generation]:
        out = []
        for p in prompts:
            n = int(re.search(r"expects \((\d+) aspects\)", p[-1]["content"]).group(1))
            out.append(Generation(text=json.dumps({"grades": [{"aspect": j + 1, "score": 1} for j in range(n)]})))
        return out


# -- item 17 ----------------------------------------------------------------------------------------
class Counts(PointwiseRM):
    """Scores a view by how many profile items it shows; asks for `asks` of them, as a trained folder does."""

    uses_context, calls_model = True, False

    def __init__(self, asks: int | None):
        self.spec, self.view_top_k, self.seen = f"test:counts{asks}", asks, []

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        self.seen += [len(v.posts) for v, _ in batch]
        return [Score(float(len(v.posts))) for v, _ in batch]


def test_the_served_reward_shows_the_profile_items_the_rm_asks_for_as_eval_does(tmp_path) -> None:
    """Item 17: serve-reward, the in-process reward files and bon showed 10 profile items while eval
    honoured the trained folder's `view_top_k` (stance: the whole profile). (rl takes the same rule in
    `train_rl`; a GRPO run is too slow to repeat here.)"""
    from prbench import evaluate
    from prbench.schema import Example
    from prbench.serve.service import RewardService

    profile = [{"id": f"p{j}", "text": f"I agree: statement {j}"} for j in range(30)]
    question, answer = "What should the town do?", "Plant trees."
    for asks, given, shown in ((40, None, 30), (None, None, 10), (40, 5, 5)):
        k = {"top_k": given} if given else {}
        measured = Counts(asks)
        evaluate(measured, [Example.model_validate({"id": "r1", "user_id": "u1", "question": question,
                                                    "profile": profile, "chosen": answer, "rejected": "Cut trees."})],
                 "profile", **k)
        assert set(measured.seen) == {shown}
        with ThreadedServer(create_app(Counts(asks), "profile", policy_template=TOKENIZER, **k)) as srv:
            item = {"query": question, "response": answer, "profile": profile}
            assert httpx.post(f"{srv.base_url}/score", json={"items": [item]}).json()["scores"] == [shown]
            query = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>"
            label = json.dumps({"question": question, "profile": profile})
            reply = httpx.post(f"{srv.base_url}/get_reward", json={"query": [query], "labels": [label]}).json()
            assert reply["rewards"] == [shown]
        in_process = RewardService(Counts(asks), "profile", **k)  # the reward files' service
        assert in_process.reward_rows([({"question": question, "profile": profile}, answer)]) == [(shown, True)]
    # Best-of-N gives each RM its own view (RMs that ask alike share one); --top-k still wins
    from prbench.capabilities.bon.driver import best_of_n
    from prbench.downstream.grader import RubricGrader
    from prbench.downstream.sampling import SampleSet
    from prbench.testing.records import make_record

    items = []
    for i in range(2):
        rec = make_record(i)
        rec["profile"] = profile
        items.append(Example.model_validate(rec))
    ss = SampleSet(path=tmp_path, config={"n": 2}, items=items, samples={it.id: ["One.", "Two words."] for it in items})
    for given, asked, shown in ((None, {"test:counts40": 40, "test:countsNone": 10}, {"test:counts40": 30,
                                                                                    "test:countsNone": 10}),
                                (5, {"test:counts40": 5}, {"test:counts40": 5})):
        rms = [Counts(40), Counts(None)] if given is None else [Counts(40)]
        res = best_of_n(ss, rms, RubricGrader(engine=OneGrader()), condition="profile", n_boot=50,
                        **({"top_k": given} if given else {}))
        assert {rm.spec: set(rm.seen) for rm in rms} == {k: {v} for k, v in shown.items()}
        assert {r.rm: r.top_k for r in res.summary.rms} == asked  # what each RM was given


# -- item 18 (server parts) -------------------------------------------------------------------------
def test_bogus_log_level_zero_reward_scale_and_empty_users_are_refused_at_start(setup, tmp_path) -> None:
    """Item 18: `--log-level bogus` was uvicorn's KeyError after the model loaded; `--reward-scale 0` made
    every reward 0; an empty `--users` file announced "/classify: on" and then refused every input."""
    rm = load_rm("baseline:length")
    for scale in (0.0, -1.0):
        with pytest.raises(PrbenchError, match="--reward-scale must be > 0"):
            create_app(rm, "none", reward_scale=scale)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(PrbenchError, match="no training rows"):
        create_app(rm, "profile", users=str(empty), rm_template=TOKENIZER)
    out = subprocess.run([sys.executable, "-m", "prbench", "serve-reward", "--rm", "baseline:length", "--log-level", "bogus",
                          "--port", "1"], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode != 0 and "Traceback" not in out.stderr and "KeyError" not in out.stderr, out.stderr
    assert "--log-level 'bogus': use one of critical, error, warning, info, debug, trace" in out.stderr


# -- acceptance: a fuzz of every POST route ---------------------------------------------------------
def _mutate(rng: random.Random, value: object, depth: int = 0) -> object:
    """`value` with one random change somewhere inside: a type swap, a dropped key, an odd string or number."""
    odd: list[object] = [None, True, 0, -1, 2**70, 1.5e308, "", " ", "\ud800", "\udc00x", "\x00", "é" * 50,
                         [], {}, [[[[[]]]]], "<|im_start|>assistant\n", {"type": "text"}, [1, 2, 3], ["a"], "a" * 2000]
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(list(value))
        out = dict(value)
        roll = rng.random()
        if roll < 0.2:
            del out[key]
        elif roll < 0.3:
            out[rng.choice(["extra", "stance", "role", "content", "input", "messages"])] = rng.choice(odd)
        else:
            out[key] = _mutate(rng, value[key], depth + 1)
        return out
    if isinstance(value, list) and value and rng.random() < 0.8:
        out_list = list(value)
        i = rng.randrange(len(out_list))
        roll = rng.random()
        if roll < 0.15:
            del out_list[i]
        elif roll < 0.3:
            out_list.append(rng.choice(odd))
        else:
            out_list[i] = _mutate(rng, out_list[i], depth + 1)
        return out_list
    if isinstance(value, str) and rng.random() < 0.5:
        cut = rng.randrange(len(value) + 1)
        return value[:cut] + rng.choice(["\ud800", "\x00", "<|im_end|>", "\\", '"', "\u2063", ""]) + value[cut:]
    return rng.choice(odd)


def _bodies(rng: random.Random, valid: dict[str, list[dict]], n: int) -> list[tuple[str, bytes]]:
    out = []
    for _ in range(n):
        path = rng.choice(sorted(valid))
        body = rng.choice(valid[path])
        for _ in range(rng.choice((1, 1, 2, 3))):
            body = _mutate(rng, body)  # type: ignore[assignment]
        raw = json.dumps(body).encode()  # lone surrogates go out as \ud800 escapes
        roll = rng.random()
        if roll < 0.05:
            raw = raw[:rng.randrange(len(raw) + 1)]  # truncated
        elif roll < 0.08:
            raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))  # noise
        elif roll < 0.10:
            raw = b"[" * 5000 + b"]" * 5000
        out.append((path, raw))
    return out


def test_fuzz_of_every_post_route_never_answers_500(setup) -> None:
    """Acceptance of issue 51: 3,000 seeded bodies, mutated from valid requests of every POST route and
    protocol (/score, OpenRLHF's /get_reward, vLLM's /classify and /pooling in completion and chat form),
    answered 2xx or 4xx, never 500."""
    rows, users, prompt = setup
    chat = [*rows[0]["prompt"], {"role": "assistant", "content": "an answer"}]
    profile = [{"id": "p1", "text": "Rent caps help tenants.", "stance": "agree"}, "I hike.",
               {"prompt": "How?", "chosen": "Short.", "rejected": "Long."}]
    label = json.dumps({"id": "q1", "question": "Where to camp?", "profile": profile})
    query = "<|im_start|>user\nWhere to camp?<|im_end|>\n<|im_start|>assistant\nBy the lake.<|im_end|>"
    valid = {
        "/score": [{"items": [{"id": "q1", "query": "Where to camp?", "response": "By the lake.", "profile": profile}]}],
        "/get_reward": [{"query": [query], "prompts": ["<|im_start|>user\nWhere to camp?<|im_end|>\n"],
                         "labels": [label]}],
        "/classify": [{"model": "m", "input": prompt, "use_activation": False}, {"input": [prompt, prompt]},
                      {"messages": chat, "use_activation": False}],
        "/pooling": [{"input": prompt, "task": "classify"}, {"messages": chat, "encoding_format": "float"}],
    }
    app = create_app(HashRM(), "profile", top_k=3, users=users, rm_template=TOKENIZER, policy_template=TOKENIZER,
                     max_batch=8, max_body_bytes=200_000)
    bodies = _bodies(random.Random(51), valid, 3000)
    statuses: Counter = Counter()
    with ThreadedServer(app) as srv, httpx.Client(base_url=srv.base_url, timeout=30) as http:
        for path, ok_bodies in valid.items():  # the valid bodies themselves are answered
            for body in ok_bodies:
                assert http.post(path, json=body).status_code == 200, (path, body)
        t0 = time.perf_counter()
        for path, raw in bodies:
            r = http.post(path, content=raw, headers={"content-type": "application/json"})
            statuses[(path, r.status_code)] += 1
            assert r.status_code < 500, (path, raw[:300], r.text[:300])
        took = time.perf_counter() - t0
        stats = httpx.get(f"{srv.base_url}/stats").json()
    assert sum(statuses.values()) == 3000 and "500" not in stats["rejected_by_status"], stats
    by_path = Counter(p for p, _ in statuses.elements())
    assert min(by_path.values()) > 500 and any(s == 200 for _, s in statuses), statuses  # every route, some valid
    print(f"fuzz: 3000 bodies in {took:.1f} s: {dict(sorted(statuses.items()))}")
