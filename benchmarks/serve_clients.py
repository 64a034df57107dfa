"""Load generators for benchmarks/serve.py: the trainers' aiohttp client and a lean one.

Why two: on a 2-core machine the client process competes with the server for the same cores, so
the client's own CPU per request caps what any server can be shown to do. `aiohttp` is what verl's
Reward Loop and OpenRLHF send with (a new session, so a new connection, per request); `lean` is
a raw asyncio-protocol HTTP/1.1 client (uvloop when installed) that costs a small fraction of
that per request, in two modes: `fresh` (a new connection per request, as the trainers do) and
`keepalive` (one connection per client, reused). Both count an item as scored only when its
request got a 200 whose JSON body holds a finite score for it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

LEAN_MODES = ("fresh", "keepalive")


def finite_scores(body: bytes | dict) -> int:
    data = json.loads(body) if isinstance(body, bytes) else body
    return sum(isinstance(s, float) and math.isfinite(s) for s in data["scores"])


def summary(work_items: int, scored: int, lat: list[float], wall: float) -> dict:
    lat.sort()
    pick = (lambda q: lat[min(len(lat) - 1, math.ceil(q * len(lat)) - 1)] * 1000) if lat else (lambda q: math.nan)
    return {"items": work_items, "lost": work_items - scored, "rewards_s": scored / wall, "p50_ms": pick(0.5),
            "p99_ms": pick(0.99), "wall_s": wall}


def split(work: list[dict], clients: int, size: int) -> list[list[list[dict]]]:
    """Each client's requests: `work` cut into `size`-item requests, dealt round-robin to `clients`."""
    requests = [work[i:i + size] for i in range(0, len(work), size)]
    return [requests[c::clients] for c in range(min(clients, len(requests)))]


# -- aiohttp: the trainers' client ------------------------------------------------------------------
async def aiohttp_level(url: str, work: list[dict], clients: int, size: int) -> dict:
    """verl 0.9.1's `_post_request` / OpenRLHF's: one aiohttp session (one connection) per request, no retry."""
    import aiohttp

    lat: list[float] = []
    timeout = aiohttp.ClientTimeout(total=300)

    async def post(session: aiohttp.ClientSession, batch: list[dict]) -> int:
        t = time.perf_counter()
        try:
            async with session.post(url, json={"items": batch}) as r:
                if r.status != 200:
                    return 0
                body = await r.json()
        except Exception:  # noqa: BLE001 - a reset, a timeout, a refused connect: all count as lost
            return 0
        lat.append(time.perf_counter() - t)
        return finite_scores(body)

    async def client(mine: list[list[dict]]) -> int:
        done = 0
        for batch in mine:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                done += await post(session, batch)
        return done

    t = time.perf_counter()
    scored = sum(await asyncio.gather(*[client(m) for m in split(work, clients, size)]))
    return summary(len(work), scored, lat, time.perf_counter() - t)


# -- lean: a raw HTTP/1.1 client --------------------------------------------------------------------
class _Exchange(asyncio.Protocol):
    """One HTTP/1.1 connection: write a request, read one Content-Length reply, hand it to `on_reply`."""

    def __init__(self, on_reply: Callable[[int, bytes], None], on_lost: Callable[[], None]):
        self.on_reply, self.on_lost = on_reply, on_lost
        self.buf = bytearray()
        self.need = -1  # bytes of the whole reply once its headers are in
        self.body_at = 0
        self.status = 0
        self.transport: asyncio.Transport | None = None
        self.waiting = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, request: bytes) -> None:
        self.buf.clear()
        self.need = -1
        self.waiting = True
        self.transport.write(request)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.need < 0:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).split(b"\r\n")
            self.status = int(head[0].split(b" ", 2)[1])
            length = next((int(h.split(b":", 1)[1]) for h in head[1:] if h[:15].lower() == b"content-length:"), 0)
            self.body_at = end + 4
            self.need = self.body_at + length
        if len(self.buf) >= self.need:
            self.waiting = False
            self.on_reply(self.status, bytes(self.buf[self.body_at:self.need]))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiting:
            self.waiting = False
            self.on_lost()


def request_bytes(url: str, batch: Sequence[dict], close: bool) -> bytes:
    parts = urlsplit(url)
    body = json.dumps({"items": list(batch)}, separators=(",", ":")).encode()
    head = (f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{'Connection: close' if close else 'Connection: keep-alive'}\r\n\r\n")
    return head.encode() + body


async def lean_level(url: str, work: list[dict], clients: int, size: int, mode: str = "fresh") -> dict:
    """`clients` clients each send their requests back to back over a raw socket: a new connection per
    request (`fresh`, the trainers' pattern) or one kept-alive connection per client (`keepalive`)."""
    if mode not in LEAN_MODES:
        raise ValueError(f"mode must be one of {LEAN_MODES}")
    loop = asyncio.get_running_loop()
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    lat: list[float] = []

    async def client(mine: list[list[dict]]) -> int:
        done = 0
        proto: _Exchange | None = None
        for batch in mine:
            req = request_bytes(url, batch, close=False)
            reply: asyncio.Future = loop.create_future()

            def got(status: int, body: bytes, reply: asyncio.Future = reply) -> None:
                if not reply.done():
                    reply.set_result((status, body))

            def lost(reply: asyncio.Future = reply) -> None:
                if not reply.done():
                    reply.set_result((0, b""))

            t = time.perf_counter()
            try:
                if proto is None or proto.transport is None or proto.transport.is_closing():
                    _, proto = await loop.create_connection(lambda: _Exchange(got, lost), host, port)
                proto.on_reply, proto.on_lost = got, lost
                proto.send(req)
                status, body = await asyncio.wait_for(reply, 300)
            except (OSError, asyncio.TimeoutError):
                status, body = 0, b""
            if status == 200:
                lat.append(time.perf_counter() - t)
                try:
                    done += finite_scores(body)
                except (ValueError, KeyError, TypeError):
                    pass
            if mode == "fresh" or status != 200:
                if proto is not None and proto.transport is not None:
                    proto.transport.close()
                proto = None
        if proto is not None and proto.transport is not None:
            proto.transport.close()
        return done

    t = time.perf_counter()
    scored = sum(await asyncio.gather(*[client(m) for m in split(work, clients, size)]))
    return summary(len(work), scored, lat, time.perf_counter() - t)


# -- wrk: a C load generator, where installed ---------------------------------------------------------
WRK_SCRIPT = """
local n = 0
local query = %s
local response = %s
request = function()
  n = n + 1
  local body = '{"items":[{"id":"w' .. n .. '","query":' .. query .. ',"response":' .. response .. '}]}'
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"%s}, body)
end
"""


def wrk_level(wrk: str, url: str, item: dict, connections: int, seconds: int, close: bool) -> dict:
    """`wrk` with `connections` connections posting single-item requests (each a new item id) for `seconds`:
    kept alive, or `Connection: close` (a new connection per request). wrk reads no reply body, so an item
    counts as scored when its request got a 2xx (the other generators check the score itself)."""
    import re
    import subprocess
    import tempfile

    header = ', ["Connection"] = "close"' if close else ""
    lua = WRK_SCRIPT % (json.dumps(json.dumps(item["query"])), json.dumps(json.dumps(item["response"])), header)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
        fh.write(lua)
    out = subprocess.run([wrk, "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "60s", "--latency", "-s", fh.name, url],
                         capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    done = int(re.search(r"(\d+) requests in ([\d.]+)s", out).group(1))
    wall = float(re.search(r"requests in ([\d.]+)s", out).group(1))
    bad = int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", out)) else 0
    errors = sum(int(x) for x in m.groups()) if (m := re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)) else 0

    def ms(q: str) -> float:
        got = re.search(rf"^\s+{q}%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
        return float(got.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[got.group(2)] if got else math.nan

    return {"items": done + errors, "lost": bad + errors, "rewards_s": (done - bad) / wall, "p50_ms": ms("50"),
            "p99_ms": ms("99"), "wall_s": wall}


def run(coro_factory: Callable[[], object], lean: bool) -> dict:
    """Run one level in a fresh event loop: uvloop's for the lean client when installed."""
    if lean:
        try:
            import uvloop

            return uvloop.run(coro_factory())  # type: ignore[arg-type]
        except ImportError:
            pass
    return asyncio.run(coro_factory())  # type: ignore[arg-type]
