"""Cross-request batching for the reward server: many small requests, few large RM calls.

Why: an RL trainer sends one rollout per request, thousands at once. Scoring each request alone
under a lock caps throughput at one forward pass per request; gathering the items of concurrent
requests into one RM batch pays each forward once for up to `max_items` items.

- Admission is a bounded queue counted in items (`queue_items`): a request whose items do not
  fit is refused at once (`Overloaded`, the server's 503 with Retry-After), never queued forever.
- One worker thread takes requests in arrival order until a batch holds `max_items` items or the
  oldest waiting request has waited `max_wait_ms` (under load the worker is busy scoring, so the
  queue is already full and nothing waits); a request is never split, so its items stay in order.
- Results go back to each request's event loop with `call_soon_threadsafe`; the loop never blocks.
- Counters (served, queued, batches, rejected, abandoned) and recent batch sizes and latencies
  feed the server's `/stats`.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prbench.errors import PrbenchError

RECENT = 20_000  # batch sizes and latencies kept for the percentiles


@dataclass(frozen=True)
class Batching:
    """Batch and queue sizes. Defaults measured in benchmarks/RESULTS_serve.md."""

    max_items: int = 64          # items per RM call
    max_wait_ms: float = 2.0     # longest a lone request waits for company
    queue_items: int = 16_384    # items admitted and not yet answered (4x 4,096 single-item clients)

    def __post_init__(self) -> None:
        if self.max_items < 1 or self.queue_items < 1 or not (0 <= self.max_wait_ms < math.inf):
            raise PrbenchError("batching: max_items and queue_items must be >= 1, max_wait_ms >= 0 and finite")


class Overloaded(Exception):
    """The queue cannot take these items now; `retry_after` is whole seconds for the client to wait."""

    def __init__(self, retry_after: int):
        super().__init__(f"queue full, retry after {retry_after} s")
        self.retry_after = retry_after


@dataclass
class _Job:
    work: Sequence[Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    t0: float = field(default_factory=time.perf_counter)


def percentiles(values: Sequence[float], digits: int = 1) -> dict[str, float]:
    """p50/p90/p99/max of `values` (nearest rank); zeros when empty."""
    if not values:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    s = sorted(values)
    pick = lambda q: s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]
    return {"p50": round(pick(0.5), digits), "p90": round(pick(0.9), digits), "p99": round(pick(0.99), digits),
            "max": round(s[-1], digits)}


class Batcher:
    """`await submit(work)` -> `score(work)`'s results for these items, scored with other requests' items."""

    def __init__(self, score: Callable[[list[Any]], Sequence[Any]], batching: Batching | None = None):
        self.score, self.cfg = score, batching or Batching()
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._waiting = 0       # items in _jobs
        self._admitted = 0      # items admitted and not yet answered (waiting + being scored)
        self._thread: threading.Thread | None = None
        self._closed = False
        self.served = self.batches = self.rejected_items = self.rejected_requests = 0
        self.abandoned = self.failed = 0
        self.busy_s = 0.0
        self.sizes: deque[int] = deque(maxlen=RECENT)
        self.latencies_ms: deque[float] = deque(maxlen=RECENT)

    async def submit(self, work: Sequence[Any]) -> list[Any]:
        if not work:
            return []
        loop = asyncio.get_running_loop()
        job = _Job(work, loop, loop.create_future())
        with self._cond:
            if self._closed:
                raise PrbenchError("the reward batcher is closed")
            if self._admitted + len(work) > self.cfg.queue_items:
                self.rejected_items += len(work)
                self.rejected_requests += 1
                raise Overloaded(self._retry_after())
            self._admitted += len(work)
            self._waiting += len(work)
            self._jobs.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="prbench-batcher", daemon=True)
                self._thread.start()
            self._cond.notify()
        return await job.future

    def _retry_after(self) -> int:
        """Seconds until the queue has drained at the measured rate (1 when nothing is measured yet)."""
        rate = self.served / self.busy_s if self.busy_s > 0 else 0.0
        return max(1, min(60, math.ceil(self._admitted / rate))) if rate > 0 else 1

    def _take(self) -> list[_Job] | None:
        with self._cond:
            while not self._jobs and not self._closed:
                self._cond.wait()
            if self._closed and not self._jobs:
                return None
            deadline = self._jobs[0].t0 + self.cfg.max_wait_ms / 1000
            while self._waiting < self.cfg.max_items and (left := deadline - time.perf_counter()) > 0:
                self._cond.wait(left)
            jobs = [self._jobs.popleft()]
            n = len(jobs[0].work)
            while self._jobs and n + len(self._jobs[0].work) <= self.cfg.max_items:
                n += len(self._jobs[0].work)
                jobs.append(self._jobs.popleft())
            self._waiting -= n
            return jobs

    def _run(self) -> None:
        while (jobs := self._take()) is not None:
            flat = [w for job in jobs for w in job.work]
            t = time.perf_counter()
            try:
                results: Sequence[Any] | BaseException = list(self.score(flat))
                if len(results) != len(flat):
                    results = PrbenchError(f"RM returned {len(results)} results for {len(flat)} items")
            except Exception as exc:  # noqa: BLE001 - the RM failed: every request of the batch gets the error
                results = exc
            done = time.perf_counter()
            at = 0
            for job in jobs:
                part = results if isinstance(results, BaseException) else results[at:at + len(job.work)]
                at += len(job.work)
                job.loop.call_soon_threadsafe(self._resolve, job, part)
                self.latencies_ms.append((done - job.t0) * 1000)
            with self._cond:
                self.busy_s += done - t
                self.batches += 1
                self.sizes.append(len(flat))
                self._admitted -= len(flat)
                if isinstance(results, BaseException):
                    self.failed += len(flat)
                else:
                    self.served += len(flat)

    def _resolve(self, job: _Job, part: Any) -> None:
        if job.future.done():  # the client went away (request cancelled) before its scores came back
            with self._cond:
                self.abandoned += len(job.work)
            return
        if isinstance(part, BaseException):
            job.future.set_exception(part)
        else:
            job.future.set_result(part)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def stats(self) -> dict[str, Any]:
        with self._cond:
            sizes, lat = list(self.sizes), list(self.latencies_ms)
            return {"served": self.served, "queued": self._admitted, "batches": self.batches, "batched": self.served,
                    "failed": self.failed, "abandoned": self.abandoned,
                    "overloaded": {"requests": self.rejected_requests, "items": self.rejected_items},
                    "batch_size": {**percentiles(sizes, 0), "mean": round(sum(sizes) / len(sizes), 2) if sizes else 0},
                    "latency_ms": percentiles(lat),
                    "max_batch_items": self.cfg.max_items, "max_wait_ms": self.cfg.max_wait_ms,
                    "queue_items": self.cfg.queue_items}
