"""Strict loopback stand-ins of the OpenAI Batch API and Anthropic Message Batches, for tests.

Why: batch mode must survive what real batch endpoints do: states that advance over minutes, items
that fail while the rest succeed, windows that expire, results out of request order. Rules and
shapes come from the clients' types (openai 3.57.0 `types/batch.py`, `types/batch_create_params.py`,
`types/file_purpose.py`, `resources/batches.py`; anthropic 2.10.0 `types/messages/message_batch.py`,
`batch_create_params.py`, `message_batch_*_result.py`) and the providers' batch guides
(platform.openai.com/docs/guides/batch: JSONL lines of custom_id/method/url/body, one endpoint per
batch, output and error files, `batch_expired` lines; docs.claude.com/en/docs/build-with-claude/
batch-processing: custom_id `^[a-zA-Z0-9_-]{1,64}$` unique per batch, results in any order).

Both servers take `timeline=(validating, in_progress, finalizing)` seconds (Anthropic: their sum is
`in_progress`), and per-item schedules called with (custom_id, n-th submission of that id):
`fail_fn` -> an error for that item, `expire_fn` -> the item expires (the batch ends `expired`).
Results are written in reverse request order, so matching by position would fail. `batches` holds
every created batch.

Limits, enforced as the providers state them: OpenAI takes at most 50,000 requests and 200 MB per batch
input file (openai 3.57.0 `resources/batches.py`, `input_file_id`), Anthropic 100,000 requests or 256 MB per
batch (docs.claude.com batch-processing "Batch limitations"; the API reference's `requests` maxItems
100000). `max_requests` / `max_bytes` lower them for a test. Over the limit, OpenAI's batch ends `failed`
with an `errors` entry, Anthropic's create answers 400 (too many requests) or 413 `request_too_large`
(the documented error type for an oversized request); the messages are the stand-in's own words.
`fail_batch(n)` (n-th batch created, from 1) returns a reason to fail that whole batch with (OpenAI: a
`failed` batch with that error; Anthropic: every item `errored` with it), or None. `mangle(lines)` edits
the JSONL lines of each results file before it is served (duplicates, strangers, garbage).
"""

from __future__ import annotations

import contextlib
import email.parser
import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prbench.testing.anthropic_server import AnthropicServer, anthropic_error, native_refusal
from prbench.testing.openai_server import OpenAIServer, refusal

ItemFn = Callable[[str, int], bool]
BatchFn = Callable[[int], "str | None"]
MangleFn = Callable[[list[str]], list[str]]
OPENAI_LIMITS = (50_000, 200 * 1024 * 1024)  # requests, bytes of the input file
ANTHROPIC_LIMITS = (100_000, 256 * 1024 * 1024)  # requests, bytes of the create request
OPENAI_ENDPOINTS = ("/v1/responses", "/v1/chat/completions", "/v1/embeddings", "/v1/completions",
                    "/v1/moderations", "/v1/images/generations", "/v1/images/edits", "/v1/videos")
OPENAI_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
OPENAI_BATCH_FIELDS = {"completion_window", "endpoint", "input_file_id", "metadata", "output_expires_after"}
ANTHROPIC_BATCH_FIELDS = {"requests", "user_profile_id", "workspace_id"}
CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_ids = itertools.count(1)


@dataclass
class Batch:
    """One created batch: its lines, when it was created, and (once ended) its results."""

    id: str
    items: list[dict[str, Any]]
    created: float
    meta: dict[str, Any] = field(default_factory=dict)
    results: list[dict[str, Any]] | None = None
    expired: bool = False


class _Batches:
    """What both stand-ins share: the timeline and the per-item schedules."""

    def _init_batches(self, timeline: tuple[float, float, float], fail_fn: ItemFn | None,
                      expire_fn: ItemFn | None, limits: tuple[int, int], fail_batch: BatchFn | None,
                      mangle: MangleFn | None) -> None:
        self.timeline = timeline
        self.fail_fn = fail_fn or (lambda cid, n: False)
        self.expire_fn = expire_fn or (lambda cid, n: False)
        self.max_requests, self.max_bytes = limits
        self.fail_batch = fail_batch or (lambda n: None)
        self.mangle = mangle or (lambda lines: lines)
        self.batches: dict[str, Batch] = {}
        self.submitted: dict[str, int] = {}
        self._batch_lock = threading.Lock()

    def _new_batch(self, prefix: str, items: list[dict[str, Any]], **meta: Any) -> Batch:
        with self._batch_lock:
            b = Batch(f"{prefix}{next(_ids):06d}", items, time.monotonic(), meta)
            for it in items:
                self.submitted[it["custom_id"]] = self.submitted.get(it["custom_id"], 0) + 1
                it["_n"] = self.submitted[it["custom_id"]]
            self.batches[b.id] = b
            return b

    def _phase(self, b: Batch) -> int:
        """0 validating, 1 in progress, 2 finalizing, 3 ended."""
        age = time.monotonic() - b.created
        bounds = list(itertools.accumulate(self.timeline))
        return next((i for i, t in enumerate(bounds) if age < t), 3)


class OpenAIBatchServer(OpenAIServer, _Batches):
    """OpenAI's `/v1/files` + `/v1/batches` on 127.0.0.1; chat replies as `OpenAIServer` gives them."""

    def __init__(self, reply_fn: Any = None, *, timeline: tuple[float, float, float] = (0.2, 0.3, 0.1),
                 fail_fn: ItemFn | None = None, expire_fn: ItemFn | None = None,
                 max_requests: int = OPENAI_LIMITS[0], max_bytes: int = OPENAI_LIMITS[1],
                 fail_batch: BatchFn | None = None, mangle: MangleFn | None = None, **options: Any):
        super().__init__(reply_fn, **options)
        self._init_batches(timeline, fail_fn, expire_fn, (max_requests, max_bytes), fail_batch, mangle)
        self.files: dict[str, dict[str, Any]] = {}
        self.routes = {**self.routes, "/v1/files": self.upload, "/v1/batches": self.create_batch}

    def parse_body(self, headers: Mapping[str, str], raw: bytes) -> dict[str, Any]:
        ctype = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
        if not ctype.startswith("multipart/form-data"):
            return super().parse_body(headers, raw)
        msg = email.parser.BytesParser().parsebytes(f"Content-Type: {ctype}\r\n\r\n".encode() + raw)
        parts: list[Any] = list(msg.get_payload())
        return {str(part.get_param("name", header="content-disposition")): part.get_payload(decode=True)
                for part in parts}

    def refuse(self, route: str, body: dict[str, Any], headers: Mapping[str, str]) -> tuple[int, Any] | None:
        if route == "/v1/files":
            if (body.get("purpose") or b"").decode() not in OPENAI_PURPOSES or "file" not in body:
                return 400, {"error": {"message": "purpose must be one of " + ", ".join(OPENAI_PURPOSES)
                                                  + " and a file is required", "type": "invalid_request_error"}}
            return None
        if route == "/v1/batches":
            unknown = sorted(set(body) - OPENAI_BATCH_FIELDS)
            missing = sorted({"completion_window", "endpoint", "input_file_id"} - set(body))
            problem = (f"Unrecognized request argument supplied: {unknown[0]}" if unknown else
                       f"Missing required parameter: '{missing[0]}'." if missing else
                       "completion_window must be '24h'" if body["completion_window"] != "24h" else
                       f"endpoint {body['endpoint']!r} is not supported" if body["endpoint"] not in OPENAI_ENDPOINTS
                       else f"No such File object: {body['input_file_id']}" if body["input_file_id"] not in self.files
                       else None)
            return None if problem is None else (400, {"error": {"message": problem, "type": "invalid_request_error"}})
        return super().refuse(route, body, headers)

    def upload(self, body: dict[str, Any]) -> dict[str, Any]:
        fid = f"file-{next(_ids):06d}"
        self.files[fid] = {"purpose": body["purpose"].decode(), "content": body["file"]}
        return {"id": fid, "object": "file", "bytes": len(body["file"]), "created_at": int(time.time()),
                "filename": "batch.jsonl", "purpose": body["purpose"].decode(), "status": "processed"}

    def create_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        f = self.files[body["input_file_id"]]
        errors: list[dict[str, Any]] = []
        items: list[dict[str, Any]] = []
        seen: set[str] = set()
        for n, line in enumerate(f["content"].decode("utf-8").splitlines(), 1):
            try:
                item = json.loads(line)
            except ValueError:
                errors.append({"code": "invalid_json_line", "line": n, "message": "not JSON"})
                continue
            problem = ("custom_id missing or duplicated" if item.get("custom_id") in seen | {None} else
                       "method must be POST" if item.get("method") != "POST" else
                       f"url must be the batch's endpoint {body['endpoint']}" if item.get("url") != body["endpoint"]
                       else "body must be an object" if not isinstance(item.get("body"), dict) else None)
            if problem:
                errors.append({"code": "invalid_request", "line": n, "message": problem})
            else:
                seen.add(item["custom_id"])
                items.append(item)
        if f["purpose"] != "batch":
            errors.append({"code": "invalid_file", "line": None, "message": "the input file's purpose is not batch"})
        if len(items) > self.max_requests or len(f["content"]) > self.max_bytes:
            errors.append({"code": "batch_too_large", "line": None,
                           "message": f"The batch input file holds {len(items)} requests and {len(f['content'])} "
                                      f"bytes; a batch takes at most {self.max_requests} requests and "
                                      f"{self.max_bytes} bytes."})
        if not errors and (reason := self.fail_batch(len(self.batches) + 1)):
            errors.append({"code": "batch_failed", "line": None, "message": reason})
        b = self._new_batch("batch_", [] if errors else items, endpoint=body["endpoint"],
                            input_file_id=body["input_file_id"], errors=errors, metadata=body.get("metadata"))
        return self._batch_object(b)

    def _finish(self, b: Batch) -> None:
        if b.results is not None:
            return
        out: list[dict[str, Any]] = []
        for it in reversed(b.items):  # not request order
            cid, n = it["custom_id"], it["_n"]
            if self.expire_fn(cid, n):
                b.expired = True
                out.append({"id": f"req_{cid[:8]}", "custom_id": cid, "response": None,
                            "error": {"code": "batch_expired", "message": "This request could not be executed "
                                                                          "before the completion window expired."}})
                continue
            refused = refusal(self.provider, it["url"], it["body"])
            if self.fail_fn(cid, n):
                refused = (500, {"error": {"message": "The server had an error processing your request.",
                                           "type": "server_error"}})
            if refused is None:
                reply = self.routes[it["url"]](it["body"])
                out.append({"id": f"req_{cid[:8]}", "custom_id": cid, "error": None,
                            "response": {"status_code": 200, "request_id": cid[:8], "body": reply}})
            else:
                out.append({"id": f"req_{cid[:8]}", "custom_id": cid, "error": None,
                            "response": {"status_code": refused[0], "request_id": cid[:8], "body": refused[1]}})
        b.results = out
        ok = [r for r in out if r["error"] is None and r["response"]["status_code"] == 200]
        bad = [r for r in out if r not in ok]
        for name, rows in (("output", ok), ("error", bad)):
            if rows:
                fid = f"file-{next(_ids):06d}"
                lines = self.mangle([json.dumps(r) for r in rows])
                self.files[fid] = {"purpose": f"batch_{name}", "content": "".join(ln + "\n" for ln in lines).encode()}
                b.meta[f"{name}_file_id"] = fid

    def _batch_object(self, b: Batch) -> dict[str, Any]:
        phase = 3 if b.meta["errors"] else self._phase(b)
        status = ["validating", "in_progress", "finalizing", "completed"][phase]
        if b.meta["errors"]:
            status = "failed"
        elif phase == 3:
            self._finish(b)
            status = "expired" if b.expired else "completed"
        done = b.results or []
        failed = sum(1 for r in done if r["error"] is not None or r["response"]["status_code"] != 200)
        return {"id": b.id, "object": "batch", "endpoint": b.meta["endpoint"], "input_file_id": b.meta["input_file_id"],
                "completion_window": "24h", "status": status, "created_at": int(time.time()),
                "output_file_id": b.meta.get("output_file_id"), "error_file_id": b.meta.get("error_file_id"),
                "errors": {"object": "list", "data": b.meta["errors"]} if b.meta["errors"] else None,
                "metadata": b.meta.get("metadata"),
                "request_counts": {"total": len(b.items), "completed": len(done) - failed, "failed": failed}}

    def get(self, route: str) -> tuple[int, Any] | None:
        parts = route.strip("/").split("/")
        if parts == ["v1", "batches"]:  # newest first, as the API lists them
            data = [self._batch_object(b) for b in reversed(list(self.batches.values()))]
            return 200, {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                         "last_id": data[-1]["id"] if data else None, "has_more": False}
        if parts[:2] == ["v1", "batches"] and len(parts) == 3 and parts[2] in self.batches:
            return 200, self._batch_object(self.batches[parts[2]])
        if parts[:2] == ["v1", "files"] and len(parts) == 4 and parts[3] == "content" and parts[2] in self.files:
            return 200, self.files[parts[2]]["content"]
        return super().get(route)


class AnthropicBatchServer(AnthropicServer, _Batches):
    """Anthropic's Message Batches (`/v1/messages/batches`) on 127.0.0.1, besides the Messages API."""

    def __init__(self, reply_fn: Any = None, *, timeline: tuple[float, float, float] = (0.2, 0.3, 0.1),
                 fail_fn: ItemFn | None = None, expire_fn: ItemFn | None = None,
                 max_requests: int = ANTHROPIC_LIMITS[0], max_bytes: int = ANTHROPIC_LIMITS[1],
                 fail_batch: BatchFn | None = None, mangle: MangleFn | None = None, **options: Any):
        super().__init__(reply_fn, **options)
        self._init_batches(timeline, fail_fn, expire_fn, (max_requests, max_bytes), fail_batch, mangle)
        self.routes = {**self.routes, "/v1/messages/batches": self.create_batch}
        self._version = ""  # the anthropic-version of the batch being created (its items are checked under it)

    def refuse(self, route: str, body: dict[str, Any], headers: Mapping[str, str]) -> tuple[int, Any] | None:
        if route != "/v1/messages/batches":
            return super().refuse(route, body, headers)
        unknown = sorted(set(body) - ANTHROPIC_BATCH_FIELDS)
        if unknown or not isinstance(body.get("requests"), list) or not body["requests"]:
            return anthropic_error(400, f"{unknown[0]}: Extra inputs are not permitted" if unknown
                                   else "requests: Field required (a non-empty list)")
        ids = [r.get("custom_id") for r in body["requests"]]
        for r in body["requests"]:
            if set(r) != {"custom_id", "params"} or not CUSTOM_ID.fullmatch(str(r.get("custom_id"))):
                return anthropic_error(400, "requests: each needs exactly custom_id (^[a-zA-Z0-9_-]{1,64}$) and params")
        if len(set(ids)) != len(ids):
            return anthropic_error(400, "requests: custom_id values must be unique within a batch")
        if len(ids) > self.max_requests:
            return anthropic_error(400, f"requests: List should have at most {self.max_requests} items after "
                                        f"validation, not {len(ids)}")
        if len(json.dumps(body).encode()) > self.max_bytes:
            return anthropic_error(413, f"Request exceeds the maximum allowed number of bytes ({self.max_bytes})",
                                   "request_too_large")
        self._version = next((v for k, v in headers.items() if k.lower() == "anthropic-version"), "")
        return None

    def create_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        b = self._new_batch("msgbatch_", [dict(r) for r in body["requests"]], version=self._version,
                            reason=self.fail_batch(len(self.batches) + 1))
        return self._batch_object(b)

    def _finish(self, b: Batch) -> None:
        if b.results is not None:
            return
        out = []
        for it in reversed(b.items):
            cid, n = it["custom_id"], it["_n"]
            refused = native_refusal(it["params"], b.meta["version"])
            if self.expire_fn(cid, n):
                result: dict[str, Any] = {"type": "expired"}
            elif b.meta["reason"]:
                result = {"type": "errored", "error": anthropic_error(500, b.meta["reason"], "api_error")[1]}
            elif self.fail_fn(cid, n) or refused is not None:
                err = refused[1] if refused else anthropic_error(500, "Internal server error", "api_error")[1]
                result = {"type": "errored", "error": err}
            else:
                result = {"type": "succeeded", "message": self.message_response(it["params"])}
            out.append({"custom_id": cid, "result": result})
        b.results = out

    def _batch_object(self, b: Batch) -> dict[str, Any]:
        ended = self._phase(b) == 3
        if ended:
            self._finish(b)
        kinds = [r["result"]["type"] for r in b.results or []]
        counts = {k: kinds.count(k) for k in ("succeeded", "errored", "canceled", "expired")}
        stamp = "2026-12-01T00:00:00Z"
        return {"id": b.id, "type": "message_batch", "processing_status": "ended" if ended else "in_progress",
                "request_counts": {"processing": 0 if ended else len(b.items), **counts},
                "created_at": stamp, "expires_at": stamp, "ended_at": stamp if ended else None,
                "archived_at": None, "cancel_initiated_at": None,
                "results_url": f"{self.root_url}/v1/messages/batches/{b.id}/results" if ended else None}

    def get(self, route: str) -> tuple[int, Any] | None:
        parts = route.strip("/").split("/")
        if parts[:3] == ["v1", "messages", "batches"] and len(parts) >= 4 and parts[3] in self.batches:
            b = self.batches[parts[3]]
            if len(parts) == 4:
                return 200, self._batch_object(b)
            if parts[4:] == ["results"] and b.results is not None:
                return 200, "".join(ln + "\n" for ln in self.mangle([json.dumps(r) for r in b.results])).encode()
        return super().get(route)


@contextlib.contextmanager
def serve_batches(kind: str, reply_fn: Any = None, **options: Any) -> Iterator[Any]:
    """Run an `OpenAIBatchServer` (kind 'openai') or `AnthropicBatchServer` ('anthropic') for the block."""
    cls = {"openai": OpenAIBatchServer, "anthropic": AnthropicBatchServer}[kind]
    server = cls(reply_fn, **options).start()
    try:
        yield server
    finally:
        server.stop()
