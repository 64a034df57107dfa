"""`serve-reward --replicas 2`: two model copies behind Ray Serve on 127.0.0.1, the same endpoints and payloads.

The real command in its own process (its own local Ray, started on loopback): every socket its
process tree listens on is on 127.0.0.1, except one Ray itself opens: Ray Serve 2.60's replicas
start their inter-deployment gRPC server on `[::]:0`, hard-coded (`ray/serve/_private/replica.py`,
line 1835, `add_port_to_grpc_server(self._server, "[::]:0")`), which no option changes; the
test names that exception exactly so that any other wider bind fails it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

pytest.importorskip("ray.serve", reason="the ray extra (ray[serve]) is not installed")

CLI = "from prbench.cli import command_app; command_app('serve-reward')()"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}


def _listening(pid: int) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening socket in the process tree."""
    import psutil

    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    out = []
    for p in procs:
        try:
            out += [(p.name(), c.laddr.ip, c.laddr.port) for c in p.net_connections(kind="inet")
                    if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            pass
    return out


@pytest.mark.slow
def test_two_replicas_serve_the_same_endpoints_on_loopback() -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen([sys.executable, "-c", CLI, "serve-reward", "--rm", "baseline:length", "--port", str(port),
                             "--replicas", "2", "--max-batch-items", "8", "--queue-items", "64"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 240
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.time() < deadline, "replicas did not start"
            time.sleep(1)
        body = {"items": [{"query": "q", "response": "one two three"}, {"query": "q", "response": "a b"}]}

        async def burst(method: str, path: str, payload: dict | None = None) -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                return await asyncio.gather(*[http.request(method, path, json=payload) for _ in range(40)])

        scores = asyncio.run(burst("POST", "/score", body))
        assert all(r.status_code == 200 and r.json()["scores"] == [3.0, 2.0] for r in scores)
        # both copies answer: the first /health may come while the second copy still starts, and the router may
        # send one burst to one copy, so bursts go on (a minute at most) until both have answered
        pids: set[int] = set()
        until = time.time() + 60
        while len(pids) < 2 and time.time() < until:
            pids |= {r.json()["pid"] for r in asyncio.run(burst("GET", "/health"))}
        assert len(pids) == 2, pids
        assert httpx.post(f"{url}/score", json={"items": "x"}, timeout=30).status_code == 422
        openrlhf = httpx.post(f"{url}/get_reward", json={"query": ["q"], "prompts": ["q"], "labels": ["{}"]}, timeout=30)
        assert openrlhf.status_code == 422 and "--policy-template" in openrlhf.json()["detail"]
        stats = httpx.get(f"{url}/stats", timeout=30).json()
        assert stats["max_batch_items"] == 8 and stats["queue_items"] == 64 and stats["fallback"] == 0
        sockets = _listening(proc.pid)
        assert ("ray::ProxyActor", "127.0.0.1", port) in sockets  # the HTTP proxy: loopback only
        wide = [s for s in sockets if s[1] not in LOOPBACK]
        assert wide and all(name.startswith("ray::ServeReplica") and ip == "::" for name, ip, _ in wide), wide
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
