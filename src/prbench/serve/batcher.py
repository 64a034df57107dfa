"""Cross-request batching for the reward server: many small requests, few large RM calls.

Why: an RL trainer sends one rollout per request, thousands at once. Scoring each request alone
under a lock caps throughput at one forward pass per request; gathering the items of concurrent
requests into one RM batch pays each forward once for up to `max_items` items.

- Admission is a bounded queue counted in items (`queue_items`) and in request bytes
  (`queue_bytes`): a request whose items do not fit now is refused at once (`Overloaded`, the
  server's 503 with Retry-After), and one that could never fit (`TooLarge`, 413), never queued forever.
- One worker thread takes requests in arrival order until a batch holds `max_items` items or the
  oldest waiting request has waited `max_wait_ms` (under load the worker is busy scoring, so the
  queue is already full and nothing waits); a request is never split, so its items stay in order.
  A request wakes the worker only when the worker is idle or the batch is now full: a wake-up per
  request would make it take the GIL from the event loop once per request while it waits.
- Results go back to the event loop in one `call_soon_threadsafe` per batch (not one per request:
  each wakes the loop through its self-pipe); the loop never blocks.
- A request whose client went away (`gone` resolves) while queued is dropped before scoring, and
  one already being scored is not answered: both are counted `abandoned`, never `served`.
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
    queue_bytes: int = 256 * 1024 * 1024  # request bytes admitted and not yet answered

    def __post_init__(self) -> None:
        if min(self.max_items, self.queue_items, self.queue_bytes) < 1 or not (0 <= self.max_wait_ms < math.inf):
            raise PrbenchError("batching: max_items, queue_items and queue_bytes must be >= 1, max_wait_ms >= 0 "
                               "and finite")


class TooLarge(Exception):
    """A request bigger than the whole queue: waiting cannot help (413, not 503)."""


class Abandoned(Exception):
    """The client went away before its scores came back (its request task ends with this)."""


class Overloaded(Exception):
    """The queue cannot take these items now; `retry_after` is whole seconds for the client to wait."""

    def __init__(self, retry_after: int):
        super().__init__(f"queue full, retry after {retry_after} s")
        self.retry_after = retry_after


@dataclass(eq=False)
class _Job:
    work: Sequence[Any]
    nbytes: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    t0: float = field(default_factory=time.perf_counter)
    state: str = "queued"   # -> "scoring" -> done; or "abandoned" when the client went away


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
        self._bytes = 0         # their request bytes
        self._thread: threading.Thread | None = None
        self._closed = False
        self._idle = False      # the worker waits for a first job (not for a batch to fill)
        self.served = self.batches = self.rejected_items = self.rejected_requests = 0
        self.abandoned = self.failed = 0
        self.busy_s = 0.0
        self.sizes: deque[int] = deque(maxlen=RECENT)
        self.latencies_ms: deque[float] = deque(maxlen=RECENT)

    async def submit(self, work: Sequence[Any], nbytes: int = 0, gone: asyncio.Future | None = None) -> list[Any]:
        """Scores of `work`; `gone` resolves when the client has gone away (its items are then dropped)."""
        if not work:
            return []
        if len(work) > self.cfg.queue_items or nbytes > self.cfg.queue_bytes:
            raise TooLarge(f"a request of {len(work)} items and {nbytes} bytes can never fit the queue "
                           f"({self.cfg.queue_items} items, {self.cfg.queue_bytes} bytes): send smaller requests")
        loop = asyncio.get_running_loop()
        job = _Job(work, nbytes, loop, loop.create_future())
        with self._cond:
            if self._closed:
                raise PrbenchError("the reward batcher is closed")
            if (self._admitted + len(work) > self.cfg.queue_items
                    or (self._admitted and self._bytes + nbytes > self.cfg.queue_bytes)):
                self.rejected_items += len(work)
                self.rejected_requests += 1
                raise Overloaded(self._retry_after())
            self._admitted += len(work)
            self._bytes += nbytes
            self._waiting += len(work)
            self._jobs.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="prbench-batcher", daemon=True)
                self._thread.start()
            if self._idle or self._waiting >= self.cfg.max_items:
                # wake the worker only when it waits for a first job or its batch is now full: a wake-up
                # per request would make it take the GIL once per request while it waits for company
                self._cond.notify()
        if gone is not None:
            gone.add_done_callback(lambda _: self._abandon(job))
        return await job.future

    def _abandon(self, job: _Job) -> None:
        """The client went away: a queued job leaves the queue now; one being scored is not answered."""
        with self._cond:
            if job.state == "queued":
                self._waiting -= len(job.work)
                self._release(job)
            elif job.state != "scoring":
                return
            job.state = "abandoned"
            self.abandoned += len(job.work)
        if not job.future.done():  # called on the job's own loop (a done-callback): end the request task
            job.future.set_exception(Abandoned())

    def _release(self, job: _Job) -> None:
        self._admitted -= len(job.work)
        self._bytes -= job.nbytes

    def _retry_after(self) -> int:
        """Seconds until the queue has drained at the measured rate (1 when nothing is measured yet)."""
        rate = self.served / self.busy_s if self.busy_s > 0 else 0.0
        return max(1, min(60, math.ceil(self._admitted / rate))) if rate > 0 else 1

    def _take(self) -> list[_Job] | None:
        with self._cond:
            while True:
                while self._jobs and self._jobs[0].state == "abandoned":
                    self._jobs.popleft()
                if self._jobs or self._closed:
                    break
                self._idle = True
                self._cond.wait()
                self._idle = False
            if self._closed and not self._jobs:
                return None
            deadline = self._jobs[0].t0 + self.cfg.max_wait_ms / 1000
            while self._waiting < self.cfg.max_items and (left := deadline - time.perf_counter()) > 0:
                self._cond.wait(left)
            jobs: list[_Job] = []
            n = 0
            while self._jobs and (not jobs or n + len(self._jobs[0].work) <= self.cfg.max_items):
                job = self._jobs.popleft()
                if job.state == "abandoned":
                    continue
                job.state = "scoring"
                n += len(job.work)
                jobs.append(job)
            self._waiting -= n
            return jobs

    def _run(self) -> None:
        while (jobs := self._take()) is not None:
            if not jobs:
                continue
            flat = [w for job in jobs for w in job.work]
            t = time.perf_counter()
            try:
                got = list(self.score(flat))
                results: Sequence[Any] | BaseException = got if len(got) == len(flat) else PrbenchError(
                    f"RM returned {len(got)} results for {len(flat)} items")
            except Exception as exc:  # noqa: BLE001 - the RM failed: every request of the batch gets the error
                results = exc
            done = time.perf_counter()
            parts, at = [], 0
            for job in jobs:
                parts.append(results if isinstance(results, BaseException) else results[at:at + len(job.work)])
                at += len(job.work)
                self.latencies_ms.append((done - job.t0) * 1000)
            with self._cond:
                self.busy_s += done - t
                self.batches += 1
                self.sizes.append(len(flat))
                answered = 0
                for job in jobs:
                    self._release(job)
                    if job.state == "scoring":
                        job.state = "done"
                        answered += len(job.work)
                if isinstance(results, BaseException):
                    self.failed += answered
                else:
                    self.served += answered
            for loop in {job.loop for job in jobs}:  # one wake-up per loop for the whole batch
                mine = [(job, part) for job, part in zip(jobs, parts) if job.loop is loop]
                loop.call_soon_threadsafe(self._resolve, mine)

    @staticmethod
    def _resolve(answers: list[tuple[_Job, Any]]) -> None:
        for job, part in answers:
            if job.future.done():  # cancelled with its request task
                continue
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
            return {"served": self.served, "queued": self._admitted, "queued_bytes": self._bytes, "batches": self.batches, "batched": self.served,
                    "failed": self.failed, "abandoned": self.abandoned,
                    "overloaded": {"requests": self.rejected_requests, "items": self.rejected_items},
                    "batch_size": {**percentiles(sizes, 0), "mean": round(sum(sizes) / len(sizes), 2) if sizes else 0},
                    "latency_ms": percentiles(lat),
                    "max_batch_items": self.cfg.max_items, "max_wait_ms": self.cfg.max_wait_ms,
                    "queue_items": self.cfg.queue_items, "queue_bytes": self.cfg.queue_bytes}
