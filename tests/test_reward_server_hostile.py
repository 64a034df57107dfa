"""The reward server's edges (issue 42, items 11-16), all on 127.0.0.1: hostile labels, clients that
leave, large distinct items, requests bigger than the queue, flags that would break it, browsers."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

import httpx
import pytest

from prbench.context.conditions import View
from prbench.errors import PrbenchError
from prbench.rewards.base import PointwiseRM, Score, load_rm
from prbench.serve.batcher import Batcher, Batching, TooLarge
from prbench.serve.guard import Limits
from prbench.serve.server import ThreadedServer, check_bind, create_app, public_name

POLICY = "builtin:smollm2-135m-instruct"
HOSTILE_LABELS = ["[" * 50000, "1" * 5000, '{"id": ' + "9" * 5000 + "}", '{"question": "q", "profile": ' + "[" * 5000 + "]}",
                  "null", "", 7]


class SlowLength(PointwiseRM):
    """Word count after `delay` s per call, counting the items it was asked to score."""

    spec = "test:slow-length"

    def __init__(self, delay: float):
        self.delay, self.scored = delay, 0

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        time.sleep(self.delay)
        self.scored += len(batch)
        return [Score(float(len(r.split()))) for _, r in batch]


def test_hostile_labels_get_the_fallback_never_a_500_and_the_connection_lives() -> None:
    """Item 11: deep nesting and 5,000-digit numbers in a label are a bad label (fallback), not a crash."""
    app = create_app(load_rm("baseline:length"), "profile", policy_template=POLICY, fallback_reward=-1.0)
    with ThreadedServer(app) as srv, httpx.Client(base_url=srv.base_url, timeout=30) as http:
        for label in HOSTILE_LABELS:
            r = http.post("/get_reward", json={"query": ["<|im_start|>assistant\nhi"], "labels": [label]})
            assert r.status_code == 200, (str(label)[:40], r.text[:200])
            assert r.json()["rewards"] == [-1.0] and r.json()["extra_logs"]["prbench_invalid"] == [1.0]
        # the same keep-alive connection still answers
        assert http.get("/stats").json()["invalid_reasons"]["bad_label"] == len(HOSTILE_LABELS)


def test_openrlhf_reward_func_returns_the_fallback_for_hostile_labels(monkeypatch) -> None:
    from prbench.integrations import openrlhf

    monkeypatch.setenv("PRBENCH_RM", "baseline:length")
    monkeypatch.setenv("PRBENCH_POLICY_TEMPLATE", POLICY)
    monkeypatch.setenv("PRBENCH_FALLBACK_REWARD", "-2")
    out = openrlhf.reward_func(["<|im_start|>assistant\nhi"] * len(HOSTILE_LABELS), [""] * len(HOSTILE_LABELS),
                               HOSTILE_LABELS)
    assert out["rewards"].tolist() == [-2.0] * len(HOSTILE_LABELS) and out["extra_logs"]["prbench_invalid"] == 1.0


def _send_raw(port: int, body: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


def test_clients_that_leave_while_queued_are_abandoned_not_scored() -> None:
    """Item 12: the work of a client that disconnected is dropped before the RM sees it."""
    rm = SlowLength(0.6)
    app = create_app(rm, "none", max_batch=1, batching=Batching(max_items=1, max_wait_ms=0))
    with ThreadedServer(app) as srv:
        first = _send_raw(srv.port, b'{"items": [{"query": "q", "response": "a b"}]}')  # busy for 0.6 s
        time.sleep(0.2)
        leaving = [_send_raw(srv.port, b'{"items": [{"query": "q", "response": "c d e"}]}') for _ in range(10)]
        time.sleep(0.2)
        for s in leaving:
            s.close()
        assert first.recv(4096).startswith(b"HTTP/1.1 200")
        first.close()
        time.sleep(1.5)
        stats = httpx.get(f"{srv.base_url}/stats").json()
    assert stats["abandoned"] == 10 and stats["served"] == 1 and rm.scored == 1, stats
    assert stats["queued"] == 0 and stats["queued_bytes"] == 0


def test_a_client_that_leaves_is_abandoned_under_any_asgi_server_too() -> None:
    """Without the guarded protocol's disconnect future (another ASGI server), the app learns that a
    client left from `receive()` and drops its queued items all the same."""
    rm = SlowLength(0.5)
    app = create_app(rm, "none", max_batch=1, batching=Batching(max_items=1, max_wait_ms=0))
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]

    async def request(body: bytes, leave_after: float | None) -> list[dict]:
        sent: list[dict] = []
        first = True

        async def receive() -> dict:
            nonlocal first
            if first:
                first = False
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(leave_after if leave_after is not None else 3600)
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/score", "headers": headers}
        assert "extensions" not in scope  # as a server without prbench's protocol builds it
        await app(scope, receive, send)
        return sent

    async def both() -> tuple[list[dict], list[dict]]:
        busy = asyncio.ensure_future(request(b'{"items": [{"query": "q", "response": "a b"}]}', None))
        await asyncio.sleep(0.1)  # the RM is busy with the first request
        left = await request(b'{"items": [{"query": "q", "response": "c d e"}]}', 0.1)
        return await busy, left

    try:
        served, left = asyncio.run(both())
    finally:
        app.batcher.close()
    assert served[0]["status"] == 200 and left[0]["status"] == 499
    stats = app.batcher.stats()
    assert stats["abandoned"] == 1 and stats["served"] == 1 and rm.scored == 1, stats


def test_the_batcher_flushes_a_full_batch_without_waiting_out_max_wait() -> None:
    """The worker is woken when a batch fills (not on every request): a full batch is scored at once,
    not after `max_wait_ms` (a minute here, so a missed wake-up fails the test)."""
    batcher = Batcher(lambda work: [w * 10 for w in work], Batching(max_items=4, max_wait_ms=60_000))

    async def four() -> list[list[int]]:
        first = asyncio.ensure_future(batcher.submit([0]))
        await asyncio.sleep(0.3)  # the worker now waits for company
        rest = [batcher.submit([n]) for n in range(1, 4)]
        return await asyncio.wait_for(asyncio.gather(first, *rest), 20)

    try:
        assert asyncio.run(four()) == [[0], [10], [20], [30]]
        assert batcher.stats()["batch_size"]["max"] == 4
    finally:
        batcher.close()


def test_view_cache_is_bounded_in_bytes_under_large_distinct_items() -> None:
    """Item 13: Views of large distinct items are kept within a byte cap (default 64 MB), not 4,096 items."""
    app = create_app(load_rm("baseline:length"), "profile", view_cache_bytes=300_000, max_body_bytes=200_000)
    big = "word " * 20_000  # ~100 KB of profile text per item
    with ThreadedServer(app) as srv, httpx.Client(base_url=srv.base_url, timeout=60) as http:
        for n in range(12):
            item = {"id": f"u{n}", "query": f"question {n}", "response": "a b", "profile": [{"id": 1, "text": big}]}
            assert http.post("/score", json={"items": [item]}).json()["scores"] == [2.0]
            cache = http.get("/stats").json()["view_cache"]
            assert cache["bytes"] <= 300_000 and cache["items"] <= 3, cache
    assert app.service.views.max_bytes == 300_000


def test_a_request_bigger_than_the_queue_is_refused_clearly() -> None:
    """Item 14: never 503 + Retry-After forever: refused at start, or 413 from the batcher."""
    with pytest.raises(PrbenchError, match="--max-batch 8 is over --queue-items 4"):
        create_app(load_rm("baseline:length"), "none", max_batch=8, batching=Batching(queue_items=4))
    batcher = Batcher(lambda work: list(work), Batching(queue_items=4))
    with pytest.raises(TooLarge, match="can never fit the queue"):
        asyncio.run(batcher.submit([1, 2, 3, 4, 5]))
    assert asyncio.run(batcher.submit([1, 2])) == [1, 2]
    batcher.close()


@pytest.mark.parametrize("bad", [{"header_timeout": math.nan}, {"body_timeout": -1.0}, {"idle_timeout": math.inf},
                                 {"max_connections": 0}])
def test_limits_refuse_values_that_break_the_server(bad) -> None:
    """Item 15: `--header-timeout nan` killed every connection with a traceback."""
    with pytest.raises(PrbenchError, match="must be"):
        Limits(**bad)


def test_sizes_and_port_are_checked() -> None:
    rm = load_rm("baseline:length")
    for kw in ({"max_batch": 0}, {"max_batch": -5}, {"max_body_bytes": -1}, {"body_timeout": math.nan}):
        with pytest.raises(PrbenchError, match="must be"):
            create_app(rm, "none", **kw)
    with pytest.raises(PrbenchError, match="0-65535"):
        check_bind("127.0.0.1", None, False, 70000)


CLI = "from prbench.cli import command_app; command_app('serve-reward')()"


def test_cli_checks_the_rm_before_announcing_and_says_what_sigterm_did() -> None:
    bad = subprocess.run([sys.executable, "-c", CLI, "serve-reward", "--rm", "baseline:nosuch"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode != 0 and "serving" not in bad.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "PRBENCH_REWARD_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "prbench", "serve-reward", "--rm", "baseline:length",
                             "--port", str(port), "--log-level", "warning"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 90
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read() if proc.poll() else "no start"
            time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "serving baseline:length" in err and "serve-reward stopped by SIGTERM" in err
    assert "resume with" not in err and "work finished before it is kept" not in err and proc.returncode == 0


def test_browsers_are_hostile_host_media_type_and_no_local_paths() -> None:
    """Item 16: a web page (or a DNS-rebinding one) cannot drive a token-less local server."""
    with ThreadedServer(create_app(load_rm("baseline:length"), "none")) as srv:
        url = f"{srv.base_url}/score"
        body = b'{"items": [{"query": "q", "response": "a b"}]}'
        ok = httpx.post(url, content=body, headers={"content-type": "application/json; charset=utf-8"})
        assert ok.status_code == 200
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""):
            assert httpx.post(url, content=body, headers={"content-type": ctype}).status_code == 415
        for host in ("evil.example", "127.0.0.1.evil.example:80", "localhost.attacker.net"):
            for path in ("/score", "/health", "/stats"):
                r = httpx.request("POST" if path == "/score" else "GET", f"{srv.base_url}{path}", content=body,
                                  headers={"host": host, "content-type": "application/json"})
                assert r.status_code == 400 and "Host header" in r.text, (host, path)
        for host in ("localhost", f"localhost:{srv.port}", "[::1]", f"127.0.0.1:{srv.port}"):
            assert httpx.get(f"{srv.base_url}/health", headers={"host": host}).status_code == 200


def test_public_name_keeps_only_the_last_folder() -> None:
    class Named(PointwiseRM):
        spec = "hf:/home/someone/private/runs/bt"

        def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
            return []

    assert public_name(Named()) == "hf:bt"
    with ThreadedServer(create_app(Named(), "none")) as srv:
        health = httpx.get(f"{srv.base_url}/health").text
        stats = httpx.get(f"{srv.base_url}/stats").text
    assert "/home/someone" not in health and "/home/someone" not in stats
