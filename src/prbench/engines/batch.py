"""Batch mode: a run's API requests sent as provider batches (half price), replies landing as the
same records a synchronous run writes.

How: the run is computed in passes. In a collecting pass the engine answers each request from the
run folder's results (`batch_results.jsonl`) or defers it (`Deferred`: the record is discarded);
the deferred requests of a pass go out as one batch per endpoint, custom id = the request's cache
key. When a pass defers nothing, every reply is known and the real pass writes the records through
the synchronous code path (same seeds, positions, parse rules); a judge's parse retries simply show
up as a further, smaller batch.

- Submissions (`batches.json`: batch id, provider, custom ids) are written before anything is
  awaited, so a killed process polls the same batches on resume and never submits twice.
- Results are matched by custom id, never by position. An item that failed or expired (an
  error-file line or a non-succeeded result, whatever its shape) is resubmitted once, then
  answered as a failed request: an invalid record with the reason.
- Polling starts at ~1 s and backs off to 60 s (`PRBENCH_BATCH_POLL=start,cap` seconds); one line
  per poll on stderr (state, counts, elapsed). `wait=False` submits, records and raises
  `BatchPending`; the same command later collects.
- OpenAI and compatible servers with `/v1/files` + `/v1/batches` (Gemini's included), and
  Anthropic Message Batches through the native engine.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prbench.errors import PrbenchError

CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("prbench_batch_key", default=None)
MAX_SUBMISSIONS = 2  # an item is sent at most twice: once, and once more after a failure or expiry
ROUTES = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
ENDED_OPENAI = ("completed", "failed", "expired", "cancelled")


class Deferred(Exception):
    """The request's reply is not known yet: it goes into the next batch."""


class BatchPending(PrbenchError):
    """Batches are submitted and recorded; run the same command again to collect (exit 4)."""

    exit_code = 4


def poll_schedule() -> tuple[float, float]:
    raw = os.environ.get("PRBENCH_BATCH_POLL", "1,60")
    try:
        start, cap = (float(x) for x in raw.split(","))
    except ValueError:
        raise PrbenchError(f"PRBENCH_BATCH_POLL={raw!r}: expected 'start,cap' seconds, e.g. 1,60") from None
    return start, cap


class Store:
    """The run folder's batch ledger: submissions and results by custom id."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.subs_path, self.results_path = self.folder / "batches.json", self.folder / "batch_results.jsonl"
        self.submissions: list[dict[str, Any]] = (
            json.loads(self.subs_path.read_text(encoding="utf-8")) if self.subs_path.is_file() else [])
        self.results: dict[str, dict[str, Any]] = {}
        if self.results_path.is_file():
            for line in self.results_path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    r = json.loads(line)
                    self.results[r["custom_id"]] = r  # a later line (the resubmission's) wins
        self.pending: dict[str, tuple[str, dict[str, Any], str]] = {}  # key -> (endpoint, body, engine spec)
        self.retry_base: dict[str, int] = {}

    def sent(self, key: str) -> int:
        return sum(key in s["custom_ids"] for s in self.submissions) - self.retry_base.get(key, 0)

    def forget_failures(self) -> None:
        """--retry-failed: failed items may be sent (twice) again; successes are kept."""
        for key, r in self.results.items():
            if r.get("body") is None:
                self.retry_base[key] = sum(key in s["custom_ids"] for s in self.submissions)

    def open_ids(self) -> set[str]:
        return {k for s in self.submissions if not s.get("ended") for k in s["custom_ids"]}

    def confirm(self, sub: dict[str, Any], batch_id: str | None) -> None:
        """The provider's id of an intended submission (None: it never reached the provider, forget it)."""
        if batch_id is None:
            self.submissions.remove(sub)
        else:
            sub["batch_id"] = batch_id
        self._write_subs()

    def answer(self, key: str | None, endpoint: str, body: dict[str, Any], owner: str = "") -> dict[str, Any]:
        """The reply body for this request, or Deferred; RequestFailed after its last allowed submission."""
        from prbench.engines.openai_engine import RequestFailed

        if key is None:
            raise PrbenchError("batch mode: a request outside the engine's keyed calls (a bug)")
        r = self.results.get(key)
        if r is not None and r.get("body") is not None:
            return r["body"]
        if key in self.open_ids():
            raise Deferred(key)
        if r is not None and r.get("body") is None and self.sent(key) >= MAX_SUBMISSIONS:
            raise RequestFailed(f"batch: {r['error']} (after {self.sent(key)} submissions)")
        self.pending[key] = (endpoint, body, owner)
        raise Deferred(key)

    def record_submission(self, sub: dict[str, Any]) -> None:
        self.submissions.append(sub)
        self._write_subs()

    def _write_subs(self) -> None:
        tmp = self.subs_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.submissions, indent=1), encoding="utf-8")
        os.replace(tmp, self.subs_path)  # atomic: a kill never leaves half a ledger

    def add_results(self, sub: dict[str, Any], rows: list[tuple[str, Any, str | None]]) -> None:
        """Keep a finished batch's results (matched by custom id) and mark it ended."""
        wanted = set(sub["custom_ids"])
        seen = set()
        with self.results_path.open("a", encoding="utf-8") as fh:
            for cid, body, error in rows:
                if cid not in wanted or cid in seen:
                    continue  # not ours, or a duplicate line: never matched by position
                seen.add(cid)
                row = {"custom_id": cid, "body": body, "error": error}
                self.results[cid] = row
                fh.write(json.dumps(row) + "\n")
            for cid in sorted(wanted - seen):  # no line at all: failed with the batch's final state
                row = {"custom_id": cid, "body": None, "error": f"no result (batch {sub.get('state', 'ended')})"}
                self.results[cid] = row
                fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        sub["ended"] = True
        self._write_subs()


class OpenAIBatches:
    """OpenAI's Batch API (`/v1/files` + `/v1/batches`), as the openai client 3.57.0 calls it."""

    def __init__(self, engine: Any):
        self.client = engine._get_client()

    def submit(self, endpoint: str, items: list[tuple[str, dict[str, Any]]], token: str) -> str:
        url = ROUTES[endpoint]
        lines = "".join(json.dumps({"custom_id": k, "method": "POST", "url": url, "body": b}) + "\n" for k, b in items)
        f = self.client.files.create(file=("prbench-batch.jsonl", lines.encode("utf-8"), "application/jsonl"),
                                     purpose="batch")
        return self.client.batches.create(input_file_id=f.id, endpoint=url, completion_window="24h",
                                          metadata={"prbench_submission": token}).id

    def find(self, token: str) -> str | None:
        """The batch a killed process created but did not record (its metadata token), if any."""
        for b in self.client.batches.list(limit=100):
            if (b.metadata or {}).get("prbench_submission") == token:
                return b.id
        return None

    def poll(self, batch_id: str) -> tuple[str, dict[str, int], bool]:
        b = self.client.batches.retrieve(batch_id)
        counts = b.request_counts.model_dump() if b.request_counts else {}
        return b.status, counts, b.status in ENDED_OPENAI

    def results(self, batch_id: str) -> list[tuple[str, Any, str | None]]:
        b = self.client.batches.retrieve(batch_id)
        rows: list[tuple[str, Any, str | None]] = []
        for fid in (b.output_file_id, b.error_file_id):
            if not fid:
                continue
            for line in self.client.files.content(fid).text.splitlines():
                if line.strip():
                    rows.append(_openai_line(json.loads(line)))
        return rows


def _openai_line(obj: dict[str, Any]) -> tuple[str, Any, str | None]:
    """(custom id, reply body or None, reason) of one output- or error-file line, whatever its shape."""
    resp, err = obj.get("response") or {}, obj.get("error")
    if resp.get("status_code") == 200 and not err and isinstance(resp.get("body"), dict):
        return str(obj.get("custom_id")), resp["body"], None
    detail = err or (resp.get("body") or {}).get("error") or resp.get("body") or "no response"
    if isinstance(detail, dict):
        detail = detail.get("message") or detail.get("code") or json.dumps(detail)[:200]
    status = f"HTTP {resp['status_code']}: " if resp.get("status_code") else ""
    return str(obj.get("custom_id")), None, f"{status}{str(detail)[:200]}"


class AnthropicBatches:
    """Anthropic's Message Batches, as the anthropic client 2.10.0 calls them."""

    def __init__(self, engine: Any):
        self.client = engine._get_client()

    def submit(self, endpoint: str, items: list[tuple[str, dict[str, Any]]], token: str) -> str:
        return self.client.messages.batches.create(requests=[{"custom_id": k, "params": b} for k, b in items]).id

    def find(self, token: str) -> str | None:
        return None  # Message Batches carry no metadata: an unrecorded submission is sent again

    def poll(self, batch_id: str) -> tuple[str, dict[str, int], bool]:
        b = self.client.messages.batches.retrieve(batch_id)
        return b.processing_status, b.request_counts.model_dump(), b.processing_status == "ended"

    def results(self, batch_id: str) -> list[tuple[str, Any, str | None]]:
        rows: list[tuple[str, Any, str | None]] = []
        for r in self.client.messages.batches.results(batch_id):
            res = r.result
            if res.type == "succeeded":
                rows.append((r.custom_id, res.message.model_dump(mode="json"), None))
            else:
                err = getattr(res, "error", None)
                detail = getattr(getattr(err, "error", None), "message", None) if err is not None else None
                rows.append((r.custom_id, None, f"{res.type}" + (f": {detail}" if detail else "")))
        return rows


def adapter_for(engine: Any) -> Any:
    from prbench.engines.anthropic_engine import AnthropicEngine

    return AnthropicBatches(engine) if isinstance(engine, AnthropicEngine) else OpenAIBatches(engine)


def _echo(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class Runner:
    """Submit, poll and collect the batches of one run (see module docstring)."""

    def __init__(self, engine: Any, store: Store, echo: Callable[[str], None] = _echo):
        self.engine, self.store, self.echo = engine, store, echo
        self.ledger = engine.ledger  # the run's ledger for this engine (prbench.cost.tracking), if any
        self.api = adapter_for(engine)

    def mine(self, sub: dict[str, Any]) -> bool:
        return sub.get("engine", self.engine.spec) == self.engine.spec

    def recover(self) -> None:
        """Submissions recorded as intended but without an id (killed mid-submit): adopt or forget them."""
        for sub in [s for s in self.store.submissions if s.get("batch_id") is None and self.mine(s)]:
            found = self.api.find(sub["token"])
            self.echo(f"batch submission {sub['token']}: " + (f"found {found}" if found else "never made, resending"))
            self.store.confirm(sub, found)

    def await_open(self) -> None:
        self.recover()
        start, cap = poll_schedule()
        for sub in [s for s in self.store.submissions if not s.get("ended") and self.mine(s)]:
            t0, wait = time.monotonic(), start
            while True:
                state, counts, ended = self.api.poll(sub["batch_id"])
                done = ", ".join(f"{k} {v}" for k, v in counts.items())
                self.echo(f"batch {sub['batch_id']}: {state} ({done}), {time.monotonic() - t0:.0f}s")
                if ended:
                    break
                time.sleep(wait)
                wait = min(cap, wait * 1.5)
            sub["state"] = state
            rows = self.api.results(sub["batch_id"])
            if self.ledger is not None:
                for _, body, _ in rows:
                    if body is not None:
                        self.ledger.settle(0.0, self.engine._usage(body))
            self.store.add_results(sub, rows)

    def submit_pending(self) -> None:
        by_endpoint: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for key, (endpoint, body, owner) in sorted(self.store.pending.items()):
            if owner == self.engine.spec:
                by_endpoint.setdefault(endpoint, []).append((key, body))
        if not by_endpoint:
            return
        if self.ledger is not None and self.ledger.max_usd is not None:  # the whole batch must fit the cap
            limit = self.engine.profile.token_param
            estimate = sum(self.ledger.price.usd(_prompt_tokens(b), 0, int(b.get(limit) or b.get("max_tokens") or 0),
                                                 batch=True) for items in by_endpoint.values() for _, b in items)
            if self.ledger.spent() + estimate > self.ledger.max_usd:
                from prbench.cost import BudgetExceeded

                raise BudgetExceeded(f"{self.engine.spec}: not submitting a batch of {sum(map(len, by_endpoint.values()))} "
                                     f"requests: ${self.ledger.spent():.4f} spent, ~${estimate:.4f} more would pass "
                                     f"--max-usd {self.ledger.max_usd:g}")
        for endpoint, items in by_endpoint.items():
            sub = {"batch_id": None, "token": uuid.uuid4().hex, "provider": self.engine.profile.provider,
                   "engine": self.engine.spec, "endpoint": endpoint, "custom_ids": [k for k, _ in items],
                   "submitted_at": time.time()}
            self.store.record_submission(sub)  # the intent first: a kill mid-submit is found again by its token
            self.store.confirm(sub, self.api.submit(endpoint, items, sub["token"]))
            self.echo(f"batch {sub['batch_id']}: submitted {len(items)} requests")


def _prompt_tokens(body: dict[str, Any]) -> int:
    from prbench.cost import estimate_input_tokens

    return estimate_input_tokens(body.get("messages") or body.get("prompt") or "")


class ReadOnly:
    """A cache seen by a collecting pass: it reads (nothing cached is deferred and paid again) but keeps
    nothing, so the real pass finds and counts exactly what a synchronous run would."""

    def __init__(self, cache: Any):
        self.cache = cache

    def get(self, key: str) -> Any:
        return self.cache.get(key)

    def get_many(self, keys: Any) -> dict[str, Any]:
        return self.cache.get_many(keys)

    def put(self, key: str, value: Any) -> None:
        return None

    def put_many(self, items: Any) -> None:
        return None


@contextlib.contextmanager
def reading_only(obj: Any) -> Iterator[None]:
    """`obj.cache` made read-only for the block."""
    kept = obj.cache
    obj.cache = ReadOnly(kept)
    try:
        yield
    finally:
        obj.cache = kept


def optional(on: bool, model: Any, folder: str | Path | None, collect: Callable[[], Any], **options: Any) -> Any:
    """`batched(...)` when `on`, else a context that does nothing."""
    if not on:
        return contextlib.nullcontext()
    if folder is None:
        raise PrbenchError("--batch needs an output folder (--out): batch ids are kept there")
    return batched(model, folder, collect, **options)


@contextlib.contextmanager
def batched(models: Any, folder: str | Path, collect: Callable[[], None], *, wait: bool = True,
            retry_failed: bool = False, echo: Callable[[str], None] = _echo) -> Iterator[Store]:
    """Answer every request of `collect()` through batches (one runner per API engine of `models`, one
    model or a list), then yield: the caller's real pass (the same requests) is answered from the run
    folder. Counters and in-memory memos of the collecting passes are undone, so the real pass counts
    (and makes) the calls a synchronous run makes."""
    from prbench.cost import engines_of

    owners = list(models) if isinstance(models, (list, tuple)) else [models]
    engines: list[Any] = []
    for m in owners:
        engines += [e for e in engines_of(m) if all(e is not x for x in engines)]
    if not engines:
        raise PrbenchError("--batch applies to API engines (openai:, anthropic:); this model sends no API requests")
    store = Store(folder)
    if retry_failed:
        store.forget_failures()
    runners = list({e.spec: Runner(e, store, echo) for e in reversed(engines)}.values())  # one per spec: one submitter
    counters = [(obj, name, copy.deepcopy(getattr(obj, name))) for obj in [*owners, *engines]
                for name in ("counts", "stats", "adjusted", "counter", "_memo") if getattr(obj, name, None) is not None]
    for e in engines:
        e.batch = store
    try:
        while True:
            for r in runners:
                r.await_open()
            store.pending.clear()
            collect()
            if not store.pending:
                break
            for r in runners:
                r.submit_pending()
            store.pending.clear()
            if not wait:
                raise BatchPending(f"{', '.join(e.spec for e in engines)}: batches submitted and recorded in "
                                   f"{store.subs_path}; run the same command again to collect them")
        for obj, name, saved in counters:
            setattr(obj, name, saved)
        yield store
    finally:
        for e in engines:
            e.batch = None
