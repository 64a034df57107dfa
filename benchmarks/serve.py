"""Reward server under concurrent RL clients: the new server against today's and OpenRLHF's loop.

Measured in one run, same RMs, same items, same machine, the servers alternated round by round:
- `new`: `prbench serve-reward` as it is now (`prbench.serve`: a plain ASGI app, bodies validated
  from bytes, one loop wake-up per batch, cross-request batching in a worker thread), on uvicorn's
  default loop (uvloop, which the `serve` extra installs);
- `new-asyncio`: the same on the stdlib asyncio loop: what the code alone gained over `today`;
- `today`: the server on main before `prbench.serve` (FastAPI routes, json.loads then pydantic,
  one loop wake-up per request), read from git history at efb137a (`baseline_package`), on the
  asyncio loop as main installs it (its dependencies have no uvloop);
- `null`: a server that does no work at all (GPU-shaped rows only): what each load generator can
  send on this machine, the ceiling every server's wall-clock rate is read against;
- `openrlhf`: a loop like OpenRLHF 0.11.2's own `serve_rm` (`openrlhf/cli/serve_rm.py`, lines
  128-135: `get_reward` scores each request as it arrives, inside the async handler, so the
  event loop is blocked while the RM runs).
Load generators (`serve_clients.py`): `aiohttp`, the trainers' own client (a new session, so a new
connection, per request, no retry: verl's and OpenRLHF's `_post_request`), and `lean`, a raw
asyncio HTTP/1.1 client with the same pattern (a new connection per request) at a fraction of the
client CPU: on a 2-core machine the client competes with the server for the cores. At each level C,
C clients each send single-item requests back to back until the level's items are done; then the
same items again as 50-item requests, all sent at once. Reported: rewards/s, p50/p99 request
latency, items lost (any error or non-200 reply), server and client CPU per reward.

    python benchmarks/serve.py            # about 15 minutes on a 2-core CPU
    python benchmarks/serve.py --fixed-only --rounds 3
    python benchmarks/serve.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import serve_clients as clients

BASELINE_COMMIT = "efb137a"  # main before the reward server became `prbench.serve` (#39)


def baseline_package(root: Path) -> Path:
    """`root` holding `baseline_serve/`: `prbench.downstream.{server,batcher,chat,items}` as they were at
    BASELINE_COMMIT, read with `git show` (a baseline from history, not a second copy in the tree), with
    their imports of each other made local. Needs the git checkout."""
    import re

    pkg = root / "baseline_serve"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    for name in ("server", "batcher", "chat", "items"):
        text = subprocess.run(["git", "-C", str(HERE.parent), "show", f"{BASELINE_COMMIT}:src/prbench/downstream/{name}.py"],
                              check=True, capture_output=True, text=True).stdout
        text = re.sub(r"\bprbench\.downstream\.(server|batcher|chat|items)\b", r"baseline_serve.\1", text)
        (pkg / f"{name}.py").write_text(text, encoding="utf-8")
    return root
KINDS = ("new", "new-asyncio", "today", "openrlhf", "null")
LOOPS = {"new": "auto", "new-asyncio": "asyncio", "today": "asyncio", "openrlhf": "auto", "null": "auto"}
GENERATORS = ("lean", "aiohttp")
WRK = shutil.which("wrk")  # Debian's wrk, where installed: a C generator, as a cross-check of the ceiling
WRK_KINDS = ("new", "today", "null")
WRK_SECONDS = 5
WRK_CLIENTS = 512  # a fixed-duration run: at 2,048 connections a slow server answers few within it
LEVELS = (1, 64, 512, 2048)
FIXED_LEVELS = (512, 2048)
FIXED_MIN_ITEMS = 2048  # GPU-shaped rows: at least this many items a level (4 requests per client at 512)
FIXED_FORWARD_S = 0.01
ANSWER_CHARS = 120
# The clients run on the same busy cores: 2,048 aiohttp sessions in one process can take longer than
# the server's default 10 s to write their headers, which the server rightly drops as slow clients.
# Both servers get the same longer deadlines, so `lost` counts the servers' losses, not the client's lag.
HEADER_TIMEOUT_S = 120.0


# -- the servers (each runs in its own process) -------------------------------------------------
def _baseline_app(score):
    """A baseline server: `score` as POST /score (it reads the raw request), and /health."""
    import fastapi

    app = fastapi.FastAPI()
    score.__annotations__ = {"request": fastapi.Request}
    app.post("/score")(score)

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    return app


def openrlhf_app(rm, condition: str = "none"):
    """OpenRLHF's serve_rm loop: the RM runs inside the async handler, one request at a time."""

    from prbench.serve.protocols import ScoreRequest
    from prbench.serve.service import RewardService

    service = RewardService(rm, condition)

    async def score(request):  # type: ignore[no-untyped-def]
        data = await request.json()
        items = ScoreRequest.model_validate(data).items
        pairs = [(SourceItem(id=f"b{i}", question=it.query, category="server", profile=[], rubric_aspects=[]),
                  it.response) for i, it in enumerate(items)]
        return {"scores": [s.value for s in service.score_pairs(pairs)]}  # blocks the event loop, as serve_rm does

    return _baseline_app(score)


from prbench.schema import SourceItem


def fixed_cost_rm(forward_s: float = FIXED_FORWARD_S, batch: int = 64):
    """A GPU-shaped RM: each forward of up to `batch` items costs `forward_s` (a sleep, as a kernel frees the GIL)."""
    from prbench.rewards.base import PointwiseRM, Score

    class FixedCost(PointwiseRM):
        spec = "bench:fixed-cost"

        def score(self, items):  # type: ignore[no-untyped-def]
            for _ in range(0, len(items), batch):
                time.sleep(forward_s)
            return [Score(float(len(r))) for _, r in items]

    return FixedCost()


async def null_app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    """A server that does no work at all: the most the clients can send on this machine."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    body = b'{"status":"ok","scores":[1.0]}' if scope["path"] == "/health" else b'{"scores":[1.0]}'
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def run_server(kind: str, port: int, rm_dir: str, max_wait_ms: float | None = None) -> None:
    import torch
    import uvicorn

    from prbench.rewards.base import load_rm

    torch.set_num_threads(1)  # a shared 2-core machine: one intra-op thread per server, the same for all
    rm = fixed_cost_rm() if rm_dir == "fixed" else load_rm(f"hf:{rm_dir}", device="cpu", batch_size=64)
    loop = LOOPS[kind]
    if kind in ("new", "new-asyncio"):
        from prbench.serve.batcher import Batching
        from prbench.serve.guard import Limits, check_fd_limit
        from prbench.serve.server import create_app

        limits = Limits(header_timeout=HEADER_TIMEOUT_S, body_timeout=HEADER_TIMEOUT_S)
        check_fd_limit(limits)
        batching = Batching() if max_wait_ms is None else Batching(max_wait_ms=max_wait_ms)
        app = create_app(rm, "none", max_batch=64, batching=batching)
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", loop=loop, **limits.uvicorn_config(app))
    elif kind == "today":  # main's server before `prbench.serve`, read from git history
        sys.path.insert(0, str(baseline_package(Path(tempfile.mkdtemp(prefix="baseline-serve-")))))
        from baseline_serve.batcher import Batching as OldBatching
        from baseline_serve.server import Limits as OldLimits
        from baseline_serve.server import check_fd_limit as old_fd_limit
        from baseline_serve.server import create_app as old_create_app

        limits = OldLimits(header_timeout=HEADER_TIMEOUT_S, body_timeout=HEADER_TIMEOUT_S)
        old_fd_limit(limits)
        app = old_create_app(rm, "none", max_batch=64, batching=OldBatching())
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", loop=loop, **limits.uvicorn_config(app))
    elif kind == "null":
        uvicorn.run(null_app, host="127.0.0.1", port=port, log_level="error", backlog=8192, loop=loop)
    else:
        uvicorn.run(openrlhf_app(rm), host="127.0.0.1", port=port, log_level="error", loop=loop)


# -- the clients --------------------------------------------------------------------------------
def items(n: int) -> list[dict]:
    from prbench.data import load_examples

    exs = load_examples("sample", "source")
    return [{"id": f"{exs[i % len(exs)].id}-{i}", "query": exs[i % len(exs)].question,
             "response": f"{(exs[i % len(exs)].chosen if i % 2 else exs[i % len(exs)].rejected)[:ANSWER_CHARS]} ({i})"}
            for i in range(n)]


def start(kind: str, rm_dir: str, max_wait_ms: float | None = None) -> tuple[subprocess.Popen, str]:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    wait = [] if max_wait_ms is None else ["--max-wait-ms", str(max_wait_ms)]
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--port", str(port), "--rm-dir", rm_dir, *wait])
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"{kind} server did not start")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used: the server's own cost, whatever the machine's load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid: int, quiet_cpu_s: float = 0.02, limit_s: float = 60.0) -> None:
    """Wait until the server is idle (under `quiet_cpu_s` of CPU in half a second): a fixed-duration
    generator (wrk) leaves requests in flight when it stops, which must not be counted in the next row."""
    deadline = time.time() + limit_s
    while time.time() < deadline:
        before = cpu_s(pid)
        time.sleep(0.5)
        if cpu_s(pid) - before < quiet_cpu_s:
            return


def serve_levels(kind: str, rm: str, levels: tuple[int, ...], generators: tuple[str, ...],
                 max_wait_ms: float | None = None) -> list[dict]:
    """One server of `kind` up, every level x request size x generator measured against it, then down."""
    sizes = (1,) if kind == "null" else (1, 50)  # null answers one score per request: 50-item rows mean nothing
    proc, url = start(kind, rm, max_wait_ms)
    rows = []
    try:
        clients.run(lambda: clients.lean_level(f"{url}/score", items(16), 1, 1), lean=True)  # warm-up
        for c in levels:
            work = items(max(FIXED_MIN_ITEMS if rm == "fixed" else 256, c))
            for size in sizes:
                for gen in generators:
                    senders = c if size == 1 else len(work)
                    if gen.startswith("wrk"):
                        if size != 1 or kind not in WRK_KINDS or c != WRK_CLIENTS:
                            continue  # its script sends single-item requests; its rows are a cross-check
                        level = partial(clients.wrk_level, WRK, f"{url}/score", work[0], c, WRK_SECONDS,
                                        close=gen == "wrk")
                    elif gen == "lean":
                        level = partial(clients.lean_level, f"{url}/score", work, senders, size)
                    else:
                        level = partial(clients.aiohttp_level, f"{url}/score", work, senders, size)
                    settle(proc.pid)
                    cpu0, mine0 = cpu_s(proc.pid), os.times()
                    res = level() if gen.startswith("wrk") else clients.run(level, lean=gen == "lean")
                    cpu, mine = cpu_s(proc.pid) - cpu0, os.times()
                    done = max(1, res["items"] - res["lost"])
                    res["server_cpu_ms_per_reward"] = 1000 * cpu / done
                    mine_s = mine.user + mine.system - mine0.user - mine0.system
                    if gen.startswith("wrk"):
                        mine_s = mine.children_user + mine.children_system - mine0.children_user - mine0.children_system
                    res["client_cpu_ms_per_request"] = 1000 * mine_s / max(1, -(-res["items"] // size))
                    name = kind if max_wait_ms is None else f"{kind}, max wait {max_wait_ms:g} ms"
                    rows.append({"rm": "fixed-cost" if rm == "fixed" else "tiny-transformer", "server": name,
                                 "generator": gen, "clients": c, "request_items": size, "loadavg": os.getloadavg()[0],
                                 **res})
                    print(json.dumps(rows[-1]), flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return rows


KEY = ("rm", "server", "generator", "clients", "request_items")
MEASURES = ("lost", "rewards_s", "p50_ms", "p99_ms", "server_cpu_ms_per_reward", "client_cpu_ms_per_request")


def medians(rows: list[dict]) -> list[dict]:
    """One row per (rm, server, generator, clients, request size): the median of its rounds (lost: the sum)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in KEY), []).append(r)
    out = []
    for key, rs in groups.items():
        med = {m: (sum(r[m] for r in rs) if m == "lost" else statistics.median(r[m] for r in rs)) for m in MEASURES}
        out.append({**dict(zip(KEY, key)), "rounds": len(rs), "items": sum(r["items"] for r in rs), **med,
                    "rewards_s_range": [min(r["rewards_s"] for r in rs), max(r["rewards_s"] for r in rs)]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fixed-only", action="store_true", help="only the GPU-shaped RM rows")
    ap.add_argument("--rounds", type=int, default=3, help="GPU-shaped rows: servers alternated this many times")
    ap.add_argument("--transformer-only", action="store_true", help="only the CPU transformer rows")
    ap.add_argument("--transformer-rounds", type=int, default=1, help="CPU transformer rows: servers alternated")
    ap.add_argument("--transformer-levels", type=lambda s: tuple(int(x) for x in s.split(",")), default=LEVELS,
                    help="CPU transformer rows: client counts, comma-separated")
    ap.add_argument("--serve", choices=KINDS)
    ap.add_argument("--port", type=int)
    ap.add_argument("--rm-dir")
    ap.add_argument("--max-wait-ms", type=float)
    ap.add_argument("--out", default=str(HERE / "results_serve.json"))
    args = ap.parse_args()
    if args.serve:
        run_server(args.serve, args.port, args.rm_dir, args.max_wait_ms)
        return
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 16384), hard))
    from prbench.testing.tiny import make_tiny_seq_classifier

    started, load_before, rows = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg(), []
    fixed_levels = (512,) if args.quick else FIXED_LEVELS
    for rnd in range(0 if args.transformer_only else 1 if args.quick else args.rounds):
        for kind in KINDS:
            if kind == "openrlhf" and rnd > 0:
                continue  # 10-30x slower than the others: one round says what it is
            rows += serve_levels(kind, "fixed", fixed_levels, GENERATORS + (("wrk", "wrk-keepalive") if WRK else ()))
    if not args.fixed_only:  # the CPU transformer: the RM, not HTTP, sets the pace; the trainers' client only
        tiny = str(make_tiny_seq_classifier(tempfile.mkdtemp(prefix="prb-serve-bench-"), seed=1, hidden_size=32))
        for _ in range(1 if args.quick else args.transformer_rounds):
            for kind in ("new", "today", "openrlhf"):
                rows += serve_levels(kind, tiny, (1, 64) if args.quick else args.transformer_levels, ("aiohttp",))
    table = medians(rows)
    Path(args.out).write_text(json.dumps({
        "command": "python benchmarks/serve.py " + " ".join(sys.argv[1:]), "started": started, "cpus": os.cpu_count(),
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "python": sys.version.split()[0],
        "uvloop": importlib.util.find_spec("uvloop") is not None, "medians": table, "rows": rows}, indent=1))
    print("| RM | server | generator | clients | items/request | lost | rewards/s | p50 ms | p99 ms | "
          "server CPU ms/reward | client CPU ms/request |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in table:
        print(f"| {r['rm']} | {r['server']} | {r['generator']} | {r['clients']} | {r['request_items']} | {r['lost']} | "
              f"{r['rewards_s']:.0f} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['server_cpu_ms_per_reward']:.3f} | "
              f"{r['client_cpu_ms_per_request']:.3f} |")


if __name__ == "__main__":
    main()
