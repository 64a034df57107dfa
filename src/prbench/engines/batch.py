"""Batch mode: a run's API requests sent as provider batches (half price), replies landing as the
same records a synchronous run writes.

How: the run is computed in passes. In a collecting pass the engine answers each request from the
run folder's results (`batch_results.jsonl`) or defers it (`Deferred`: the record is discarded);
the deferred requests of a pass go out as batches per endpoint, custom id = the request's cache
key, split within the provider's request and byte limits (`LIMITS`, cited) and polled together.
When a pass defers nothing, every reply is known and the real pass writes the records through
the synchronous code path (same seeds, positions, parse rules); a judge's parse retries simply show
up as a further, smaller batch.

- Submissions (`batches.json`: batch id, provider, custom ids, the run settings' digest) are written
  before anything is awaited, so a killed process polls the same batches on resume and never
  submits twice; batches made under other run settings are refused, not collected.
- Results are matched by custom id, never by position; strangers, repeats and damaged lines are
  dropped or refused (`Store.add_results`, `Store._read_results`). An item that failed or expired
  (an error-file line or a non-succeeded result, whatever its shape) is resubmitted once, then
  answered as a failed request: an invalid record with the reason, the provider's own words. A batch
  that fails as a whole twice stops the run with that reason (`BatchFailed`).
- Money comes from the files: each engine's ledger gets its batches' usage from
  `batch_results.jsonl` (`Store.settle`), recomputed, never accumulated in memory.
- Polling starts at ~1 s and backs off to 60 s (`PRBENCH_BATCH_POLL=start,cap` seconds); one line
  per poll on stderr (state, counts, elapsed). `wait=False` submits, records and raises
  `BatchPending`; the same command later collects.
- OpenAI and compatible servers with `/v1/files` + `/v1/batches` (Gemini's included), and
  Anthropic Message Batches through the native engine; each engine names its own (`batch_api()`),
  so this module imports no engine.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import hashlib
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prbench.engines.base import RequestFailed
from prbench.errors import BatchFailed, BatchPending, PrbenchError

CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("prbench_batch_key", default=None)
MAX_SUBMISSIONS = 2  # an item is sent at most twice: once, and once more after a failure or expiry
ROUTES = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
ENDED_OPENAI = ("completed", "failed", "expired", "cancelled")
SCOPE = ("limit", "n_boot")  # settings that change no request (how many items; bootstrap draws): batches carry across


@dataclass(frozen=True)
class BatchLimit:
    """The most requests and bytes one provider batch may hold, and where that is written."""

    requests: int
    bytes: int
    source: str


# OpenAI: "The file can contain up to 50,000 requests, and can be up to 200 MB in size" (openai-python 3.57.0
# resources/batches.py, `input_file_id`; platform.openai.com/docs/api-reference/batch/create). Anthropic: "A Message
# Batch is limited to either 100,000 Message requests or 256 MB in size, whichever is reached first"
# (docs.claude.com/en/docs/build-with-claude/batch-processing, "Batch limitations"; the API reference's
# `requests` maxItems 100000). Both read 2026-12. OpenAI-compatible batch APIs (Gemini's) get OpenAI's.
LIMITS = {"openai": BatchLimit(50_000, 200 * 1024 * 1024, "platform.openai.com/docs/api-reference/batch/create"),
          "anthropic": BatchLimit(100_000, 256 * 1024 * 1024,
                                  "docs.claude.com/en/docs/build-with-claude/batch-processing")}


class Deferred(Exception):
    """The request's reply is not known yet: it goes into the next batch."""


def poll_schedule() -> tuple[float, float]:
    raw = os.environ.get("PRBENCH_BATCH_POLL", "1,60")
    try:
        start, cap = (float(x) for x in raw.split(","))
    except ValueError:
        raise PrbenchError(f"PRBENCH_BATCH_POLL={raw!r}: expected 'start,cap' seconds, e.g. 1,60") from None
    return start, cap


def limit_for(kind: str) -> BatchLimit:
    """The provider's cited limit (`LIMITS`), or `$PRBENCH_BATCH_LIMIT` ('requests,bytes'; lower only)."""
    cited = LIMITS["anthropic" if kind == "anthropic" else "openai"]
    raw = os.environ.get("PRBENCH_BATCH_LIMIT")
    if not raw:
        return cited
    try:
        n, size = (int(x) for x in raw.split(","))
    except ValueError:
        raise PrbenchError(f"PRBENCH_BATCH_LIMIT={raw!r}: expected 'requests,bytes', e.g. 1000,10000000") from None
    if not (0 < n <= cited.requests and 0 < size <= cited.bytes):
        raise PrbenchError(f"PRBENCH_BATCH_LIMIT={raw!r}: each must be positive and at most the provider's "
                           f"({cited.requests} requests, {cited.bytes} bytes; {cited.source})")
    return BatchLimit(n, size, f"$PRBENCH_BATCH_LIMIT (cited: {cited.source})")


ENVELOPE = 1024  # bytes kept free in each batch for what wraps its lines (`{"requests": [...]}`, file headers)


def split(items: list[tuple[str, bytes]], limit: BatchLimit) -> list[list[str]]:
    """Keys grouped in order into batches within the limit's requests and bytes (`items`: key, its line)."""
    groups: list[list[str]] = []
    size, room = 0, max(1, limit.bytes - ENVELOPE)
    for key, line in items:
        if len(line) > room:
            raise PrbenchError(f"batch request {key} is {len(line)} bytes, over the batch limit of {limit.bytes} "
                               f"({limit.source})")
        if not groups or len(groups[-1]) >= limit.requests or size + len(line) > room:
            groups.append([])
            size = 0
        groups[-1].append(key)
        size += len(line)
    return groups


def _echo(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _config_of(folder: Path) -> dict[str, Any] | None:
    """The run's settings (config.json) less `SCOPE`: what a batch's requests were made under."""
    try:
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return {k: v for k, v in cfg.items() if k not in SCOPE} if isinstance(cfg, dict) else None


def _digest(cfg: dict[str, Any] | None) -> str | None:
    return None if cfg is None else hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Store:
    """The run folder's batch ledger: submissions (`batches.json`) and results (`batch_results.jsonl`) by
    custom id. Read strictly: a damaged submissions file is one line naming it; a damaged results line is
    skipped with a warning and its batch is downloaded again (the provider keeps results)."""

    def __init__(self, folder: str | Path, echo: Callable[[str], None] = _echo):
        self.folder = Path(folder)
        self.echo = echo
        self.subs_path, self.results_path = self.folder / "batches.json", self.folder / "batch_results.jsonl"
        self.config = _digest(_config_of(self.folder))
        self.submissions = self._read_subs()
        self.results: dict[str, dict[str, Any]] = {}  # custom id -> its latest row
        self.rows: list[dict[str, Any]] = []  # every kept row (what is billed: one per batch and custom id)
        self._read_results()
        self.pending: dict[str, tuple[str, dict[str, Any], str]] = {}  # key -> (endpoint, body, engine spec)
        self.retry_base: dict[str, int] = {}
        self.send_missing = False  # True outside batch mode: stored replies answer, the rest is sent at once

    def _read_subs(self) -> list[dict[str, Any]]:
        if not self.subs_path.is_file():
            return []
        try:
            subs = json.loads(self.subs_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PrbenchError(f"{self.subs_path}: not readable as JSON ({exc}); it records the run's provider "
                               f"batches: restore it, or move it away to submit anew (paid batches are lost)") from None
        if not isinstance(subs, list):
            raise PrbenchError(f"{self.subs_path}: expected a list of batch submissions, found "
                               f"{type(subs).__name__}")
        for i, sub in enumerate(subs):
            ids = sub.get("custom_ids") if isinstance(sub, dict) else None
            if not (isinstance(ids, list) and all(isinstance(k, str) for k in ids)
                    and isinstance(sub.get("batch_id"), (str, type(None))) and isinstance(sub.get("engine", ""), str)):
                raise PrbenchError(f"{self.subs_path}: batch {i}: expected an object with batch_id, engine and a "
                                   f"list of custom_ids, found {json.dumps(sub)[:80]}")
        return subs

    def _read_results(self) -> None:
        if not self.results_path.is_file():
            return
        ended = {k: s for s in self.submissions if s.get("ended") for k in s["custom_ids"]}
        with self.results_path.open("rb") as fh:
            for n, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                    if not (isinstance(row, dict) and isinstance(row.get("custom_id"), str)
                            and isinstance(row.get("body"), (dict, type(None)))
                            and isinstance(row.get("error"), (str, type(None)))):
                        raise TypeError("expected {custom_id, body, error}")
                except (ValueError, TypeError) as exc:
                    self.echo(f"warning: {self.results_path}:{n}: damaged line skipped ({str(exc)[:60]}); its "
                              f"batch's results are downloaded again")
                    continue
                self.rows.append(row)
                self.results[row["custom_id"]] = row  # a later line (the resubmission's) wins
        for key, sub in ended.items():  # an ended batch missing a result (a damaged or lost line): fetch it again
            if key not in self.results:
                sub["ended"] = False

    def sent(self, key: str) -> int:
        return sum(key in s["custom_ids"] for s in self.submissions) - self.retry_base.get(key, 0)

    def forget_failures(self) -> None:
        """--retry-failed: failed items may be sent (twice) again; successes are kept."""
        for key, r in self.results.items():
            if r.get("body") is None:
                self.retry_base[key] = sum(key in s["custom_ids"] for s in self.submissions)

    def open_ids(self) -> set[str]:
        return {k for s in self.submissions if not s.get("ended") for k in s["custom_ids"]}

    def check(self, batch_mode: bool) -> None:
        """Refuse, in one line, to use batches made under other run settings, or (outside batch mode) to send
        requests that are still in a provider batch."""
        other = [s for s in self.submissions if s.get("config") not in (None, self.config)]
        if other:
            raise PrbenchError(f"{self.subs_path}: {len(other)} batch(es) (first {other[0].get('batch_id')}) were "
                               f"submitted under other run settings than {self.folder / 'config.json'} now holds "
                               f"(seed, condition, model options ...); collect them with the settings they were made "
                               f"with, or move batches.json and batch_results.jsonl away to start anew")
        waiting = self.open_ids()
        if waiting and not batch_mode:
            raise PrbenchError(f"{self.subs_path}: {len(waiting)} requests are still in provider batches; collect "
                               f"them with --batch (nothing is sent twice), or move batches.json away to send "
                               f"everything at the synchronous price")

    def confirm(self, sub: dict[str, Any], batch_id: str | None) -> None:
        """The provider's id of an intended submission (None: it never reached the provider, forget it)."""
        if batch_id is None:
            self.submissions.remove(sub)
        else:
            sub["batch_id"] = batch_id
        self._write_subs()

    def answer(self, key: str | None, endpoint: str, body: dict[str, Any], owner: str = "") -> dict[str, Any] | None:
        """The reply body for this request, or Deferred; RequestFailed after its last allowed submission.
        Outside batch mode (`send_missing`): the stored reply, or None (the caller sends the request)."""
        if key is None:
            raise PrbenchError("batch mode: a request outside the engine's keyed calls (a bug)")
        r = self.results.get(key)
        if r is not None and r.get("body") is not None:
            return r["body"]
        if self.send_missing:
            return None
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
        """Keep a finished batch's results, matched by custom id and never by position: lines for ids the
        batch did not hold are dropped, identical repeats kept once, conflicting repeats refused (the item
        counts as failed, with a warning): nothing is billed twice or chosen by file order."""
        wanted, batch_id = set(sub["custom_ids"]), sub.get("batch_id")
        have = {r["custom_id"] for r in self.rows if r.get("batch_id") == batch_id}  # re-downloaded: keep the rest
        got: dict[str, list[tuple[Any, str | None]]] = {}
        for cid, body, error in rows:
            if cid in wanted:
                got.setdefault(cid, []).append((body, error))
        if unknown := sum(1 for cid, _, _ in rows if cid not in wanted):
            self.echo(f"warning: batch {batch_id}: {unknown} result line(s) for custom ids it did not hold, ignored")
        with self.results_path.open("a", encoding="utf-8") as fh:
            for cid in sorted(wanted - have):
                answers = got.get(cid, [])
                distinct = {json.dumps(a, sort_keys=True) for a in answers}
                if not answers:  # no line at all: failed with the batch's final state
                    body, error = None, f"no result (batch {sub.get('state', 'ended')}{sub.get('reason', '')})"
                elif len(distinct) > 1:
                    self.echo(f"warning: batch {batch_id}: {len(answers)} different results for {cid}; none used")
                    body, error = None, f"conflicting results ({len(answers)} lines) in batch {batch_id}"
                else:
                    body, error = answers[0]
                row = {"custom_id": cid, "batch_id": batch_id, "body": body, "error": error}
                self.results[cid] = row
                self.rows.append(row)
                fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        sub["ended"] = True
        self._write_subs()

    def usage(self, engine: Any) -> dict[str, int]:
        """What `engine`'s batches cost, from the results on disk: one billed reply per (batch, custom id)."""
        mine = {k for s in self.submissions if s.get("engine", engine.spec) == engine.spec for k in s["custom_ids"]}
        total: dict[str, int] = {"requests": 0}
        for row in {(r.get("batch_id"), r["custom_id"]): r for r in self.rows if r.get("body") is not None}.values():
            if row["custom_id"] in mine:
                for k, v in engine._usage(row["body"]).items():
                    total[k] = total.get(k, 0) + int(v)
                total["requests"] += 1
        return total

    def settle(self, engines: list[Any]) -> None:
        """Each engine's ledger gets its batches' spend as the files on disk say (never from memory)."""
        for e in engines:
            if getattr(e, "ledger", None) is not None:
                e.ledger.set_batch_usage(self.usage(e))


class OpenAIBatches:
    """OpenAI's Batch API (`/v1/files` + `/v1/batches`), as the openai client 3.57.0 calls it."""

    kind = "openai"

    def __init__(self, engine: Any):
        self.client = engine._get_client()

    @staticmethod
    def line(key: str, endpoint: str, body: dict[str, Any]) -> bytes:
        return (json.dumps({"custom_id": key, "method": "POST", "url": ROUTES[endpoint], "body": body}) + "\n").encode()

    def submit(self, endpoint: str, items: list[tuple[str, dict[str, Any]]], token: str) -> str:
        url = ROUTES[endpoint]
        lines = b"".join(self.line(k, endpoint, b) for k, b in items)
        f = self.client.files.create(file=("prbench-batch.jsonl", lines, "application/jsonl"), purpose="batch")
        return self.client.batches.create(input_file_id=f.id, endpoint=url, completion_window="24h",
                                          metadata={"prbench_submission": token}).id

    def find(self, token: str) -> str | None:
        """The batch a killed process created but did not record (its metadata token), if any."""
        for b in self.client.batches.list(limit=100):
            if (b.metadata or {}).get("prbench_submission") == token:
                return b.id
        return None

    def poll(self, batch_id: str) -> tuple[str, dict[str, int], bool, str]:
        """(state, counts, ended, the provider's own reason when the whole batch failed or expired)."""
        b = self.client.batches.retrieve(batch_id)
        counts = b.request_counts.model_dump() if b.request_counts else {}
        errors = [e for e in ((b.errors.data or []) if b.errors else [])]
        reason = "; ".join(": ".join(str(x) for x in (e.code, f"line {e.line}" if e.line else None, e.message) if x)
                           for e in errors)
        return b.status, counts, b.status in ENDED_OPENAI, reason

    def results(self, batch_id: str, echo: Callable[[str], None]) -> list[tuple[str, Any, str | None]]:
        b = self.client.batches.retrieve(batch_id)
        rows: list[tuple[str, Any, str | None]] = []
        for name, fid in (("output", b.output_file_id), ("error", b.error_file_id)):
            if not fid:
                continue
            for n, line in enumerate(self.client.files.content(fid).text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                    if not isinstance(obj, dict) or not isinstance(obj.get("custom_id"), str):
                        raise TypeError("no custom_id")
                except (ValueError, TypeError) as exc:
                    echo(f"warning: batch {batch_id}: {name} file {fid} line {n} damaged ({str(exc)[:60]}); skipped")
                    continue
                rows.append(_openai_line(obj))
        return rows


def _openai_line(obj: dict[str, Any]) -> tuple[str, Any, str | None]:
    """(custom id, reply body or None, reason) of one output- or error-file line, whatever its shape."""
    resp, err = obj.get("response") or {}, obj.get("error")
    resp = resp if isinstance(resp, dict) else {}
    if resp.get("status_code") == 200 and not err and isinstance(resp.get("body"), dict):
        return str(obj.get("custom_id")), resp["body"], None
    body = resp.get("body")
    detail = err or (body.get("error") if isinstance(body, dict) else None) or body or "no response"
    if isinstance(detail, dict):
        detail = ": ".join(str(detail[k]) for k in ("code", "message") if detail.get(k)) or json.dumps(detail)[:200]
    status = f"HTTP {resp['status_code']}: " if resp.get("status_code") else ""
    return str(obj.get("custom_id")), None, f"{status}{str(detail)[:300]}"


class AnthropicBatches:
    """Anthropic's Message Batches, as the anthropic client (2.16.0 installed) calls them."""

    kind = "anthropic"

    def __init__(self, engine: Any):
        self.client = engine._get_client()

    @staticmethod
    def line(key: str, endpoint: str, body: dict[str, Any]) -> bytes:
        return (json.dumps({"custom_id": key, "params": body}) + ",").encode()  # its share of the request body

    def submit(self, endpoint: str, items: list[tuple[str, dict[str, Any]]], token: str) -> str:
        return self.client.messages.batches.create(requests=[{"custom_id": k, "params": b} for k, b in items]).id

    def find(self, token: str) -> str | None:
        return None  # Message Batches carry no metadata: an unrecorded submission is sent again

    def poll(self, batch_id: str) -> tuple[str, dict[str, int], bool, str]:
        b = self.client.messages.batches.retrieve(batch_id)
        return b.processing_status, b.request_counts.model_dump(), b.processing_status == "ended", ""

    def results(self, batch_id: str, echo: Callable[[str], None]) -> list[tuple[str, Any, str | None]]:
        rows: list[tuple[str, Any, str | None]] = []
        for r in self.client.messages.batches.results(batch_id):
            res = r.result
            if res.type == "succeeded":
                rows.append((r.custom_id, res.message.model_dump(mode="json"), None))
            else:
                err = getattr(getattr(res, "error", None), "error", None)
                detail = ": ".join(str(x) for x in (getattr(err, "type", None), getattr(err, "message", None)) if x)
                rows.append((r.custom_id, None, f"{res.type}" + (f": {detail}" if detail else "")))
        return rows


BatchAPI = OpenAIBatches | AnthropicBatches  # what an engine's `batch_api()` gives


class Runner:
    """Submit, poll and collect the batches of one engine (see module docstring)."""

    def __init__(self, engine: Any, store: Store, echo: Callable[[str], None] = _echo):
        self.engine, self.store, self.echo = engine, store, echo
        self.ledger = engine.ledger  # the run's ledger for this engine (prbench.cost.tracking), if any
        self.api = engine.batch_api()

    def mine(self, sub: dict[str, Any]) -> bool:
        return sub.get("engine", self.engine.spec) == self.engine.spec

    def recover(self) -> None:
        """Submissions recorded as intended but without an id (killed mid-submit): adopt or forget them."""
        for sub in [s for s in self.store.submissions if s.get("batch_id") is None and self.mine(s)]:
            found = self.api.find(sub["token"])
            self.echo(f"batch submission {sub['token']}: " + (f"found {found}" if found else "never made, resending"))
            self.store.confirm(sub, found)

    def await_open(self) -> None:
        """Poll every open batch of this engine together (the provider runs them concurrently); keep each
        one's results as it ends, and settle the spend from the files after each."""
        self.recover()
        start, cap = poll_schedule()
        waiting = [s for s in self.store.submissions if not s.get("ended") and self.mine(s)]
        t0, wait = time.monotonic(), start
        while waiting:
            for sub in list(waiting):
                state, counts, ended, reason = self.api.poll(sub["batch_id"])
                done = ", ".join(f"{k} {v}" for k, v in counts.items())
                self.echo(f"batch {sub['batch_id']}: {state} ({done}), {time.monotonic() - t0:.0f}s"
                          + (f": {reason}" if reason else ""))
                if not ended:
                    continue
                sub["state"] = state
                if reason:
                    sub["reason"] = f": {reason}"
                self.store.add_results(sub, self.api.results(sub["batch_id"], self.echo))
                self.store.settle([self.engine])
                waiting.remove(sub)
                self._refuse_twice_failed(sub, state, reason)
            if waiting:
                time.sleep(wait)
                wait = min(cap, wait * 1.5)

    def _refuse_twice_failed(self, sub: dict[str, Any], state: str, reason: str) -> None:
        """A batch the provider failed as a whole (not item by item) is resubmitted once; twice: one line."""
        if state != "failed" or not reason:
            return
        if all(self.store.sent(k) >= MAX_SUBMISSIONS for k in sub["custom_ids"]):
            raise BatchFailed(f"{self.engine.spec}: batch {sub['batch_id']} failed: {reason} "
                              f"({len(sub['custom_ids'])} requests, after {MAX_SUBMISSIONS} submissions; see "
                              f"{self.store.subs_path})")

    def submit_pending(self) -> None:
        by_endpoint: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for key, (endpoint, body, owner) in sorted(self.store.pending.items()):
            if owner == self.engine.spec:
                by_endpoint.setdefault(endpoint, []).append((key, body))
        if not by_endpoint:
            return
        self._check_budget(by_endpoint)
        limit = limit_for(self.api.kind)
        for endpoint, items in by_endpoint.items():
            bodies = dict(items)
            for keys in split([(k, self.api.line(k, endpoint, b)) for k, b in items], limit):
                self._submit(endpoint, [(k, bodies[k]) for k in keys])

    def _submit(self, endpoint: str, items: list[tuple[str, dict[str, Any]]]) -> None:
        sub = {"batch_id": None, "token": uuid.uuid4().hex, "provider": self.engine.profile.provider,
               "engine": self.engine.spec, "endpoint": endpoint, "custom_ids": [k for k, _ in items],
               "submitted_at": time.time(), "config": self.store.config}
        self.store.record_submission(sub)  # the intent first: a kill mid-submit is found again by its token
        try:
            batch_id = self.api.submit(endpoint, items, sub["token"])
        except Exception as exc:
            self.store.confirm(sub, None)
            status = getattr(exc, "status_code", None)
            if status is None or not hasattr(exc, "body"):
                raise  # transport trouble: the caller's usual error
            raise PrbenchError(f"{self.engine.spec}: the provider refused a batch of {len(items)} requests: HTTP "
                               f"{status}: {getattr(exc, 'message', exc)}") from None
        self.store.confirm(sub, batch_id)
        self.echo(f"batch {sub['batch_id']}: submitted {len(items)} requests")

    def _check_budget(self, by_endpoint: dict[str, list[tuple[str, dict[str, Any]]]]) -> None:
        """The whole submission must fit --max-usd (estimated at the batch price, output at its cap)."""
        if self.ledger is None or self.ledger.max_usd is None or self.ledger.price is None:
            return
        from prbench.cost import BudgetExceeded, estimate_input_tokens

        cap = self.engine.profile.token_param
        estimate = sum(self.ledger.price.usd(estimate_input_tokens(b.get("messages") or b.get("prompt") or ""), 0,
                                             int(b.get(cap) or b.get("max_tokens") or 0), batch=True)
                       for items in by_endpoint.values() for _, b in items)
        if self.ledger.spent() + estimate > self.ledger.max_usd:
            raise BudgetExceeded(f"{self.engine.spec}: not submitting a batch of {sum(map(len, by_endpoint.values()))} "
                                 f"requests: ${self.ledger.spent():.4f} spent, ~${estimate:.4f} more would pass "
                                 f"--max-usd {self.ledger.max_usd:g}")


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


def _engines(models: Any) -> list[Any]:
    from prbench.cost import engines_of

    engines: list[Any] = []
    for m in (list(models) if isinstance(models, (list, tuple)) else [models]):
        engines += [e for e in engines_of(m) if all(e is not x for x in engines)]
    return engines


def optional(on: bool, model: Any, folder: str | Path | None, collect: Callable[[], Any], **options: Any) -> Any:
    """`batched(...)` when `on`; else, for a folder that holds batches, a context whose engines answer from
    their stored replies (settled into the ledger from the files) and send only the rest; else nothing."""
    if not on:
        has = folder is not None and any((Path(folder) / f).is_file() for f in ("batches.json", "batch_results.jsonl"))
        return answering_from(model, folder) if has else contextlib.nullcontext()
    if folder is None:
        raise PrbenchError("--batch needs an output folder (--out): batch ids are kept there")
    return batched(model, folder, collect, **options)


@contextlib.contextmanager
def answering_from(models: Any, folder: str | Path | None) -> Iterator[Store]:
    """Outside batch mode, in a folder with batches: their replies are used (and billed from the files)."""
    engines = _engines(models)
    if folder is None:
        raise PrbenchError("a folder with batches needs its path (a bug)")
    store = Store(folder)
    store.check(batch_mode=False)
    store.send_missing = True
    store.settle(engines)
    for e in engines:
        e.batch = store
    try:
        yield store
    finally:
        for e in engines:
            e.batch = None


@contextlib.contextmanager
def batched(models: Any, folder: str | Path, collect: Callable[[], None], *, wait: bool = True,
            retry_failed: bool = False, echo: Callable[[str], None] = _echo) -> Iterator[Store]:
    """Answer every request of `collect()` through batches (one runner per API engine of `models`, one
    model or a list), then yield: the caller's real pass (the same requests) is answered from the run
    folder. Counters and in-memory memos of the collecting passes are undone, so the real pass counts
    (and makes) the calls a synchronous run makes. Spend is settled from the folder's files."""
    owners = list(models) if isinstance(models, (list, tuple)) else [models]
    engines = _engines(models)
    if not engines:
        raise PrbenchError("--batch applies to API engines (openai:, anthropic:); this model sends no API requests")
    store = Store(folder, echo)
    store.check(batch_mode=True)
    store.settle(engines)
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
