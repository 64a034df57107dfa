"""Reward server over real HTTP on 127.0.0.1: same scores as in-process, 4xx for bad input, auth."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

import httpx
import pytest

from prbench.context.conditions import View, build_view
from prbench.context.retrieval import load_retriever
from prbench.errors import PrbenchError
from prbench.rewards.base import PointwiseRM, Score, load_rm
from prbench.schema import Example
from prbench.serve.server import ThreadedServer, create_app, token_from_env
from prbench.testing.records import make_records

TOKEN = "test-token-123"


class NaNOnBad(PointwiseRM):
    """Scores word count, but fails (NaN) on answers containing BAD."""

    spec = "test:nan-on-bad"

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        return [Score(math.nan, error="boom") if "BAD" in r else Score(float(len(r.split()))) for _, r in batch]


@pytest.fixture(scope="module")
def examples() -> list[Example]:
    return [Example.model_validate(r) for r in make_records(6)]


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory) -> PointwiseRM:
    from prbench.testing.tiny import make_tiny_seq_classifier

    path = make_tiny_seq_classifier(tmp_path_factory.mktemp("rm"), seed=3)
    return load_rm(f"hf:{path}", device="cpu", batch_size=4)


def payload_item(ex: Example, response: str, **extra) -> dict:
    item = {"id": ex.id, "query": ex.question, "response": response,
            "profile": [p.model_dump() for p in ex.profile]}
    item.update(extra)
    return item


def test_scores_match_in_process(examples, tiny_rm) -> None:
    app = create_app(tiny_rm, "profile", top_k=3, max_batch=64)
    items = [payload_item(ex, r) for ex in examples for r in (ex.chosen, ex.rejected)]
    ret = load_retriever("bm25")
    direct = tiny_rm.score([(build_view(ex, "profile", retriever=ret, top_k=3), r)
                            for ex in examples for r in (ex.chosen, ex.rejected)])
    with ThreadedServer(app) as srv:
        assert srv.host == "127.0.0.1"
        health = httpx.get(f"{srv.base_url}/health").json()
        assert health["status"] == "ok" and health["condition"] == "profile"
        got = httpx.post(f"{srv.base_url}/score", json={"items": items}, timeout=60).json()
        # one item at a time gives the same numbers (batch composition must not matter)
        single = httpx.post(f"{srv.base_url}/score", json={"items": items[3:4]}, timeout=60).json()
    assert got["invalid"] == 0 and got["condition"] == "profile"
    assert got["scores"] == pytest.approx([s.value for s in direct], abs=1e-5)
    assert single["scores"][0] == pytest.approx(direct[3].value, abs=1e-5)


def test_condition_none_ignores_profile_and_oracle_needs_rubric(examples) -> None:
    rm = load_rm("baseline:lexical")
    ex = examples[0]
    with ThreadedServer(create_app(rm, "none")) as srv:
        a = httpx.post(f"{srv.base_url}/score", json={"items": [payload_item(ex, ex.chosen)]}).json()
        b = httpx.post(f"{srv.base_url}/score", json={"items": [{"query": ex.question, "response": ex.chosen}]}).json()
        assert a["scores"] == b["scores"]
    with ThreadedServer(create_app(rm, "oracle")) as srv:
        r = httpx.post(f"{srv.base_url}/score", json={"items": [payload_item(ex, ex.chosen)]})
        assert r.status_code == 422 and "rubric_aspects" in r.text
        aspects = [{"aspect": a.aspect, "reason": a.reason, "evidence": a.evidence} for a in ex.rubric_aspects]
        r = httpx.post(f"{srv.base_url}/score", json={"items": [payload_item(ex, ex.chosen, rubric_aspects=aspects)]})
        assert r.status_code == 200
        view = build_view(ex, "oracle", retriever=load_retriever("bm25"))
        assert r.json()["scores"][0] == pytest.approx(rm.score([(view, ex.chosen)])[0].value)


def test_bad_payloads_are_4xx_never_500(examples) -> None:
    ex = examples[0]
    good = payload_item(ex, "fine answer")
    bad_bodies: list[tuple[bytes | dict | list | str, int]] = [
        (b"{not json", 400),
        (b"\xff\xfe\x00garbage", 400),
        (b"", 400),
        ([1, 2, 3], 422),
        ({"nope": []}, 422),
        ({"items": "x"}, 422),
        ({"items": [{"query": "q"}]}, 422),                                  # missing response
        ({"items": [{"query": 5, "response": "r", "profile": []}]}, 422),    # wrong type
        ({"items": [{"query": "", "response": "r", "profile": []}]}, 422),   # empty query
        ({"items": [{"query": "q", "response": None, "profile": []}]}, 422),
        ({"items": [{"query": "q", "response": "r", "profile": [{"id": "p", "text": 3}]}]}, 422),
        ({"items": [{"query": "q", "response": "r", "profile": "not a list"}]}, 422),
        ({"items": [{"query": "q", "response": "r"}]}, 422),                 # profile condition without profile
        ({"items": [good] * 5}, 413),                                        # over max_batch
        ({"items": [{**good, "response": "x" * 5000}]}, 413),                # over max_body_bytes
    ]
    with ThreadedServer(create_app(load_rm("baseline:length"), "profile", max_batch=4, max_body_bytes=4000)) as srv:
        url = f"{srv.base_url}/score"
        for body, status in bad_bodies:
            if isinstance(body, bytes):
                r = httpx.post(url, content=body, headers={"content-type": "application/json"})
            else:
                r = httpx.post(url, json=body)
            assert r.status_code == status, (body if not isinstance(body, dict) else str(body)[:80], r.text)
        assert httpx.get(url).status_code == 405
        ok = httpx.post(url, json={"items": [good, good]})
        assert ok.status_code == 200 and ok.json()["scores"] == [2.0, 2.0]
        assert httpx.post(url, json={"items": []}).json()["scores"] == []


def test_chunked_oversize_body_is_413() -> None:
    with ThreadedServer(create_app(load_rm("baseline:length"), "none", max_body_bytes=1000)) as srv:
        def gen():
            for _ in range(50):
                yield b'{"items": [' + b" " * 100
        r = httpx.post(f"{srv.base_url}/score", content=gen(), headers={"content-type": "application/json"})
        assert r.status_code == 413


def test_nan_scores_are_null_and_counted() -> None:
    with ThreadedServer(create_app(NaNOnBad(), "none")) as srv:
        r = httpx.post(f"{srv.base_url}/score", json={"items": [
            {"query": "q", "response": "one two"}, {"query": "q", "response": "BAD answer"}]})
        assert r.status_code == 200
        body = r.json()
        assert body["scores"] == [2.0, None] and body["invalid"] == 1
        assert httpx.get(f"{srv.base_url}/health").json()["invalid"] == 1


def test_token_auth() -> None:
    with ThreadedServer(create_app(load_rm("baseline:length"), "none", token=TOKEN)) as srv:
        url = f"{srv.base_url}/score"
        body = {"items": [{"query": "q", "response": "a b"}]}
        missing = httpx.post(url, json=body)
        assert missing.status_code == 401 and missing.headers.get("www-authenticate") == "Bearer"
        assert httpx.post(url, json=body, headers={"Authorization": "Basic abc"}).status_code == 401
        assert httpx.post(url, json=body, headers={"Authorization": "Bearer wrong"}).status_code == 403
        ok = httpx.post(url, json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and ok.json()["scores"] == [2.0]
        # auth is checked before the body is read: bad JSON without a token is still 401
        assert httpx.post(url, content=b"{bad").status_code == 401
        # every route needs the token (issue 42.16): /health and /stats too
        assert httpx.get(f"{srv.base_url}/health").status_code == 401
        assert httpx.get(f"{srv.base_url}/stats", headers={"Authorization": "Bearer wrong"}).status_code == 403
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(f"{srv.base_url}/health", headers=auth).json()["auth"] is True


def test_token_from_env(monkeypatch) -> None:
    monkeypatch.delenv("PRB_TEST_TOKEN", raising=False)
    assert token_from_env("PRB_TEST_TOKEN") is None
    with pytest.raises(PrbenchError, match="PRB_TEST_TOKEN"):
        token_from_env("PRB_TEST_TOKEN", required=True)
    monkeypatch.setenv("PRB_TEST_TOKEN", " tok ")
    assert token_from_env("PRB_TEST_TOKEN") == "tok"


def test_unsupported_setups_refused() -> None:
    with pytest.raises(PrbenchError, match="wrong-profile"):
        create_app(load_rm("baseline:length"), "wrong-profile")
    with pytest.raises(PrbenchError, match="planner"):
        create_app(load_rm("baseline:length"), "planner")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CLI = "from prbench.cli import command_app; command_app('serve-reward')()"


@pytest.mark.slow
def test_cli_serve_reward_reads_token_from_env() -> None:
    """The real command: loopback bind, token from the environment (never argv)."""
    port = _free_port()
    env = {**os.environ, "PRB_CLI_TOKEN": TOKEN}
    proc = subprocess.Popen([sys.executable, "-c", CLI, "serve-reward", "--rm", "baseline:length", "--port", str(port),
                             "--token-env", "PRB_CLI_TOKEN", "--log-level", "warning"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 401:  # up, and /health wants the token
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.time() < deadline, "server did not start"
            time.sleep(0.2)
        assert TOKEN not in " ".join(proc.args)
        body = {"items": [{"query": "q", "response": "a b c"}]}
        assert httpx.post(f"{url}/score", json=body).status_code == 401
        ok = httpx.post(f"{url}/score", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.json()["scores"] == [3.0]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


# -- hardening (issue 21, point 7) ------------------------------------------------------------
def _raw(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(5)
    return s


def _closed(s: socket.socket) -> bool:
    """True when the server has closed this connection (reads EOF, possibly after a reply)."""
    try:
        while True:
            data = s.recv(4096)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_connection_cap_and_header_timeout_free_descriptors(parser, monkeypatch) -> None:
    from prbench.serve.server import Limits

    if parser == "h11":  # the guard's fallback where httptools is not installed
        monkeypatch.setitem(sys.modules, "httptools", None)

    limits = Limits(max_connections=4, header_timeout=0.6, body_timeout=5, idle_timeout=5)
    with ThreadedServer(create_app(load_rm("baseline:length"), "none"), limits=limits) as srv:
        idle = [_raw(srv.port) for _ in range(4)]
        time.sleep(0.1)
        over = _raw(srv.port)
        busy = over.recv(4096)
        assert busy.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in busy  # answered and closed at once
        assert _closed(over)
        slow = idle[0]
        slow.sendall(b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never finish
        t0 = time.time()
        assert all(_closed(s) for s in idle)  # idle and slow clients are dropped after header_timeout
        assert time.time() - t0 < 4
        assert httpx.get(f"{srv.base_url}/health", timeout=5).status_code == 200
        assert httpx.get(f"{srv.base_url}/stats", timeout=5).json()["rejected_by_status"] == {"503": 1}
        for s in [*idle, over]:
            s.close()


def test_body_timeout_is_408_and_idle_keepalive_closes() -> None:
    from prbench.serve.server import Limits

    limits = Limits(max_connections=8, header_timeout=5, body_timeout=0.5, idle_timeout=0.4)
    with ThreadedServer(create_app(load_rm("baseline:length"), "none"), limits=limits) as srv:
        s = _raw(srv.port)
        s.sendall(b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"it")
        reply = s.recv(4096)
        assert reply.startswith(b"HTTP/1.1 408"), reply[:80]
        s.close()
        k = _raw(srv.port)
        k.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert k.recv(4096).startswith(b"HTTP/1.1 200")
        t0 = time.time()
        assert _closed(k) and time.time() - t0 < 3  # kept alive, then closed when idle
        k.close()


def test_binding_beyond_loopback_needs_a_flag_and_empty_tokens_are_errors(monkeypatch) -> None:
    from typer.testing import CliRunner

    from prbench.cli import _register, app
    from prbench.serve.server import check_bind

    for host in ("", "0.0.0.0", "::", "10.1.2.3"):
        with pytest.raises(PrbenchError, match="allow-remote"):
            check_bind(host, "tok", allow_remote=False)
    check_bind("0.0.0.0", "tok", allow_remote=True)
    check_bind("127.0.0.1", None, allow_remote=False)
    monkeypatch.setenv("PRB_EMPTY", "")
    with pytest.raises(PrbenchError, match="PRB_EMPTY is set but empty"):
        token_from_env("PRB_EMPTY")
    monkeypatch.setenv("PRB_EMPTY", "   ")
    with pytest.raises(PrbenchError, match="empty"):
        token_from_env("PRB_EMPTY", required=True)
    with pytest.raises(PrbenchError, match="empty"):
        create_app(load_rm("baseline:length"), "none", token=" ")
    _register()
    monkeypatch.delenv("PRBENCH_REWARD_TOKEN", raising=False)
    res = CliRunner().invoke(app, ["serve-reward", "--rm", "baseline:length", "--host", "0.0.0.0"])
    assert res.exit_code != 0 and "allow-remote" in str(res.exception or res.output)
    res = CliRunner().invoke(app, ["serve-reward", "--rm", "baseline:length", "--token-env", "PRB_EMPTY"])
    assert res.exit_code != 0 and "empty" in str(res.exception or res.output)


def test_urls_are_redacted() -> None:
    from prbench.store.runs import redact_url  # one redaction rule for run folders and the server

    assert redact_url("http://user:pass@host:8000/v1?api_key=abc&model=m&token=t") == \
        "http://REDACTED@host:8000/v1?api_key=REDACTED&model=m&token=REDACTED"
    assert redact_url("https://host/v1") == "https://host/v1"
    assert "sekrit" not in redact_url("http://h/?Signature=sekrit&X-Amz-Credential=sekrit")


# -- batching, admission, clients under load (issue 27) ------------------------------------------
class SlowLength(PointwiseRM):
    """Word count after `delay` s per call (a busy GPU): keeps the queue full for the admission tests."""

    spec = "test:slow-length"

    def __init__(self, delay: float):
        self.delay = delay

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        time.sleep(self.delay)
        return [Score(float(len(r.split()))) for _, r in batch]


def test_burst_past_the_queue_is_503_with_retry_after_and_counted() -> None:
    import asyncio

    from prbench.serve.batcher import Batching

    app = create_app(SlowLength(0.3), "none", max_batch=4, batching=Batching(max_items=2, max_wait_ms=0, queue_items=4))
    with ThreadedServer(app) as srv:
        async def burst() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=srv.base_url, timeout=30,
                                         limits=httpx.Limits(max_connections=40)) as http:
                return await asyncio.gather(*[http.post("/score", json={"items": [{"query": "q", "response": "a " * k}]})
                                              for k in range(1, 21)])

        replies = asyncio.run(burst())
        stats = httpx.get(f"{srv.base_url}/stats").json()
    busy = [r for r in replies if r.status_code == 503]
    ok = [r for r in replies if r.status_code == 200]
    assert len(busy) + len(ok) == 20 and busy and len(ok) >= 4
    assert all(int(r.headers["retry-after"]) >= 1 and "queue full" in r.json()["detail"] for r in busy)
    assert all(r.json()["scores"] == [float(k)] for k, r in enumerate(replies, 1) if r.status_code == 200)
    assert stats["overloaded"] == {"requests": len(busy), "items": len(busy)}
    assert stats["rejected_by_status"] == {"503": len(busy)} and stats["served"] == len(ok)
    assert stats["queued"] == 0 and stats["batch_size"]["max"] <= 2


def test_concurrent_requests_are_batched_and_each_gets_its_own_scores_in_order(examples, tiny_rm) -> None:
    import asyncio

    ret = load_retriever("bm25")
    reqs = [[payload_item(ex, f"{ex.chosen} {k}") for k in range(1 + n % 4)] for n, ex in enumerate(examples * 3)]
    direct = [[s.value for s in tiny_rm.score([(build_view(ex, "profile", retriever=ret, top_k=3), it["response"])
                                                for it in req])] for req, ex in zip(reqs, examples * 3)]
    with ThreadedServer(create_app(tiny_rm, "profile", top_k=3)) as srv:
        async def all_at_once() -> list[dict]:
            async with httpx.AsyncClient(base_url=srv.base_url, timeout=60) as http:
                rs = await asyncio.gather(*[http.post("/score", json={"items": req}) for req in reqs])
            return [r.json() for r in rs]

        got = asyncio.run(all_at_once())
        stats = httpx.get(f"{srv.base_url}/stats").json()
    for body, want in zip(got, direct):
        assert body["scores"] == pytest.approx(want, abs=1e-5)
    assert stats["served"] == sum(map(len, reqs)) and stats["batches"] < len(reqs)


def test_client_retries_503_then_succeeds_and_fails_with_one_clear_error(monkeypatch) -> None:
    from prbench.serve.batcher import Batching
    from prbench.serve.client import RewardClient, retry_delay

    assert 2.0 <= retry_delay(0, "2") <= 2.25 and 0 <= retry_delay(3, None) <= 2.0
    row = ({"id": "x", "question": "q", "profile": []}, "one two three")
    app = create_app(SlowLength(0.2), "none", max_batch=1, batching=Batching(max_items=1, max_wait_ms=0, queue_items=1))
    with ThreadedServer(app) as srv:
        client = RewardClient(url=srv.base_url, concurrency=8, retry_s=30)
        import concurrent.futures as cf

        with cf.ThreadPoolExecutor(6) as pool:
            got = list(pool.map(lambda _: client.score([row]), range(6)))
        stats = httpx.get(f"{srv.base_url}/stats").json()
    assert got == [[(3.0, True)]] * 6 and stats["overloaded"]["requests"] >= 1  # some were refused, then retried
    dead = RewardClient(url=f"http://127.0.0.1:{_free_port()}", retry_s=0.5)
    with pytest.raises(PrbenchError, match=r"failed \d+ times .*ConnectError.*no reward is made up"):
        dead.score([row])
    import asyncio

    with pytest.raises(PrbenchError, match="no reward is made up"):
        asyncio.run(dead.ascore([row]))


def test_engine_option_reaches_the_hf_classifier_loader(monkeypatch) -> None:
    """`--engine` is handed to the `hf:` RM loader (vLLM's classify path), not dropped."""
    from typer.testing import CliRunner

    from prbench.cli import _register, app
    from prbench.registry import REWARDS

    seen = {}

    def refuse(rest, engine="transformers", **options):  # record what the CLI asked for, load nothing
        seen.update(engine=engine, **options)
        raise PrbenchError(f"stop after recording engine={engine}")

    monkeypatch.setitem(REWARDS._resolved, "hf", refuse)  # the factory `hf:` resolves to, for this test only
    _register()
    monkeypatch.delenv("PRBENCH_REWARD_TOKEN", raising=False)
    res = CliRunner().invoke(app, ["serve-reward", "--rm", "hf:some/dir", "--engine", "vllm", "--batch-size", "8"])
    assert res.exit_code != 0 and "engine=vllm" in str(res.exception or res.output)
    assert seen["engine"] == "vllm" and seen["batch_size"] == 8


def test_open_file_limit_is_raised_to_fit_the_connection_cap_or_named(caplog) -> None:
    import logging
    import resource

    from prbench.serve.server import Limits, check_fd_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = hard if hard != resource.RLIM_INFINITY else 1 << 20
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        check_fd_limit(Limits(max_connections=min(2000, top - 256)))
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == min(2000, top - 256) + 256
        if hard != resource.RLIM_INFINITY:
            with caplog.at_level(logging.WARNING, logger="prbench.serve.guard"):
                check_fd_limit(Limits(max_connections=top))  # more than the hard limit allows
            assert f"ulimit -n {top + 256}" in caplog.text
            assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard  # raised as far as allowed
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_serving_package_and_the_metric_drivers_do_not_import_each_other() -> None:
    """`prbench.serve` imports no metric driver (`prbench.downstream`), and none imports it (lazy imports too)."""
    import ast
    from pathlib import Path

    pkg = Path(__file__).resolve().parents[1] / "src" / "prbench"

    def imports(path: Path) -> set[str]:
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                out.add(node.module)
        return out

    serve = {p.name: imports(p) for p in (pkg / "serve").glob("*.py")}
    drivers = {p.name: imports(p) for p in (pkg / "downstream").glob("*.py")}
    assert len(serve) >= 8 and drivers
    assert {f: sorted(m for m in mods if m.startswith("prbench.downstream")) for f, mods in serve.items()
            if any(m.startswith("prbench.downstream") for m in mods)} == {}
    assert {f: sorted(m for m in mods if m.startswith("prbench.serve")) for f, mods in drivers.items()
            if any(m.startswith("prbench.serve") for m in mods)} == {}
    assert not (pkg / "downstream" / "server.py").exists() and not (pkg / "integrations" / "client.py").exists()


def test_a_request_carries_judgments_to_the_rm_and_a_bad_stance_is_a_bad_label() -> None:
    """The label / extra_info a row carries keeps a profile's stances and past choices (#37); an unknown
    stance is one line the caller counts as a bad label, never a post the person 'wrote'."""
    import json

    from prbench.schema import ProfilePost, SourceItem
    from prbench.serve.items import item_context, item_from_context, parse_label

    posts = [ProfilePost(id="a", text="Rent caps help tenants.", stance="agree"),
             ProfilePost(id="c", text="Short answers.", stance="chose", prompt="How should replies read?",
                         rejected="Long answers.")]
    item = SourceItem(id="q1", question="What should the city do?", category="rl", profile=posts)
    ctx = parse_label(json.dumps(item_context(item, "profile")))
    assert item_from_context(ctx).profile == posts
    ctx["profile"][0]["stance"] = "disagre"
    with pytest.raises(ValueError, match=r"^malformed profile post or rubric aspect \(0\.stance: .*unknown stance"):
        item_from_context(ctx)
