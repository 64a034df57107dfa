"""Rate limits as users meet them: error classes, server retry hints, AIMD concurrency, RPM/TPM caps.

Why: a per-minute quota outlasts five quick jittered retries, an exhausted quota never comes back
by retrying, and a 429 storm from 32 threads only makes the storm longer. So:

- `classify(status, headers, body)` sorts a failed response into `quota` (stop the run: credit or
  a daily quota is gone; what finished is cached, so re-running resumes), `rate_limit` (back off,
  honour the server's hint), `retry` (408/409/5xx/529, timeouts) or `final` (other 4xx).
  `x-should-retry: true|false` overrides, as in the openai client (`_base_client._should_retry`).
- `retry_hint(headers, body)` reads `retry-after-ms`, `retry-after` (seconds or HTTP date), the
  hints inside error bodies ("Please try again in 1.5s" / "in 20ms" / "6m0s" from OpenAI,
  `RetryInfo.retryDelay: "12s"` from Gemini) and `x-ratelimit-reset-*` durations.
- `Limiter` is an AIMD concurrency limit: it halves (at most once per `cooldown` seconds) when a
  429 arrives, pauses every worker until the server's hint has passed, and grows by one after
  `limit` successes in a row. Optional `rpm` / `tpm` caps are sliding one-minute windows.
- `RunStats` counts requests, retries, 429s, tokens in/out and the seconds spent waiting.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

from prbench.errors import QuotaExhausted  # noqa: F401  (re-exported: its home before prbench.errors)

QUOTA_CODES = ("insufficient_quota", "billing_hard_limit_reached", "quota_exceeded")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_BODY_HINT = re.compile(r"(?:try again|retry) in\s+((?:\d+(?:\.\d+)?(?:ms|h|m|s))+)", re.IGNORECASE)


def parse_duration(text: str) -> float | None:
    """'1.5s', '20ms', '6m0s', '1h2m3s', '12s' -> seconds; None when it is not a duration."""
    text = text.strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date); None when absent or bad."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - time.time()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)


def _lower(headers: Mapping[str, str] | None) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in (headers or {}).items()}


def _error_obj(body: Any) -> dict[str, Any]:
    if isinstance(body, list) and body:  # Gemini wraps its error in a one-element list at times
        body = body[0]
    if isinstance(body, dict):
        err = body.get("error", body)
        return err if isinstance(err, dict) else {"message": str(err)}
    return {"message": str(body or "")}


def retry_hint(headers: Mapping[str, str] | None, body: Any = None) -> float | None:
    """The server's 'wait this long' in seconds, from headers first, then the error body."""
    h = _lower(headers)
    if "retry-after-ms" in h:
        try:
            return max(0.0, float(h["retry-after-ms"]) / 1000.0)
        except ValueError:
            pass
    seconds = parse_retry_after(h.get("retry-after"))
    if seconds is not None:
        return seconds
    err = _error_obj(body)
    for detail in err.get("details") or []:
        if isinstance(detail, dict) and "retryDelay" in detail:
            found = parse_duration(str(detail["retryDelay"]))
            if found is not None:
                return found
    m = _BODY_HINT.search(str(err.get("message") or ""))
    if m:
        return parse_duration(m.group(1))
    parsed = [parse_duration(v) for k, v in h.items() if k.startswith("x-ratelimit-reset")]
    resets = [r for r in parsed if r is not None]
    return max(resets) if resets else None


@dataclass(frozen=True)
class Failure:
    kind: str  # quota | rate_limit | retry | final
    wait: float | None
    message: str


def is_quota(status: int, body: Any) -> bool:
    """429s that retrying cannot fix: OpenAI insufficient_quota, Gemini per-day quota, billing limits."""
    err = _error_obj(body)
    code = str(err.get("code") or "") + " " + str(err.get("type") or "")
    if any(c in code for c in QUOTA_CODES):
        return True
    message = str(err.get("message") or "").lower()
    if "exceeded your current quota" in message and "per minute" not in message:
        return True
    for detail in err.get("details") or []:
        for violation in (detail.get("violations") or []) if isinstance(detail, dict) else []:
            if "perday" in str(violation.get("quotaId", "")).lower():
                return True
    return False


def classify(status: int, headers: Mapping[str, str] | None, body: Any, message: str = "") -> Failure:
    h = _lower(headers)
    wait = retry_hint(h, body)
    if status in (402, 429) and is_quota(status, body):
        return Failure("quota", None, message)
    forced = h.get("x-should-retry")
    if forced == "false":
        return Failure("final", None, message)
    if status == 429:
        return Failure("rate_limit", wait, message)
    if forced == "true" or status in (408, 409) or status >= 500:
        return Failure("retry", wait, message)
    return Failure("final", None, message)


@dataclass
class RunStats:
    """What a run spent: for the run summary and run_info."""

    requests: int = 0
    retries: int = 0
    rate_limited: int = 0
    failures: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    wait_s: float = 0.0
    adjusted: dict[str, int] = field(default_factory=dict)  # parameters a provider would refuse, adapted

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "retries": self.retries, "rate_limited": self.rate_limited,
                "failures": self.failures, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
                "wait_s": round(self.wait_s, 3), "adjusted": dict(self.adjusted)}

    def summary(self) -> str:
        return (f"{self.requests} requests, {self.retries} retries ({self.rate_limited} rate-limited), "
                f"{self.failures} failed, tokens in/out {self.tokens_in}/{self.tokens_out}, "
                f"{self.wait_s:.1f}s waiting")


class Limiter:
    """AIMD concurrency limit with a shared pause and optional per-minute request/token caps."""

    def __init__(self, max_concurrency: int, rpm: float | None = None, tpm: float | None = None,
                 cooldown: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.max = max(1, int(max_concurrency))
        self.limit = self.max
        self.rpm, self.tpm = rpm, tpm
        self.cooldown = cooldown
        self.clock, self.sleep = clock, sleep
        self.active = 0
        self.successes = 0
        self.pause_until = 0.0
        self.last_cut = -math.inf
        self.history: list[int] = [self.limit]  # every limit it took, in order (tests, summary)
        self._requests: deque[float] = deque()
        self._tokens: deque[tuple[float, int]] = deque()
        self._cond = threading.Condition()

    def _window_wait(self, now: float, tokens: int) -> float:
        """Seconds until one more request (of `tokens`) fits the per-minute caps."""
        while self._requests and now - self._requests[0] >= 60.0:
            self._requests.popleft()
        while self._tokens and now - self._tokens[0][0] >= 60.0:
            self._tokens.popleft()
        wait = 0.0
        if self.rpm and len(self._requests) >= self.rpm:
            wait = max(wait, 60.0 - (now - self._requests[0]))
        if self.tpm:
            used = sum(n for _, n in self._tokens)
            if used + tokens > self.tpm and self._tokens:
                need = used + tokens - self.tpm
                for t, n in self._tokens:
                    need -= n
                    if need <= 0:
                        wait = max(wait, 60.0 - (now - t))
                        break
        return wait

    def acquire(self, tokens: int = 0) -> float:
        """Block until a slot is free, the pause is over and the caps allow; returns seconds waited."""
        waited = 0.0
        with self._cond:
            while True:
                now = self.clock()
                delay = max(self.pause_until - now, self._window_wait(now, tokens))
                if self.active < self.limit and delay <= 0:
                    self.active += 1
                    self._requests.append(now)
                    if self.tpm:
                        self._tokens.append((now, tokens))
                    return waited
                if delay > 0:
                    self._cond.release()
                    try:
                        self.sleep(delay)
                    finally:
                        self._cond.acquire()
                    waited += delay
                else:
                    t0 = self.clock()
                    self._cond.wait(timeout=0.5)
                    waited += self.clock() - t0

    def release(self, outcome: str = "ok", wait: float | None = None) -> None:
        """`outcome`: ok | rate_limit | error. A rate limit halves the limit and pauses everyone."""
        with self._cond:
            self.active -= 1
            now = self.clock()
            if outcome == "rate_limit":
                self.successes = 0
                if now - self.last_cut >= self.cooldown:
                    self.limit = max(1, self.limit // 2)
                    self.last_cut = now
                    self.history.append(self.limit)
                if wait:
                    self.pause_until = max(self.pause_until, now + wait)
            elif outcome == "ok":
                self.successes += 1
                if self.limit < self.max and self.successes >= self.limit:
                    self.limit += 1
                    self.successes = 0
                    self.history.append(self.limit)
            self._cond.notify_all()
