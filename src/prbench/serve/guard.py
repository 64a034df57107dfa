"""Connection limits for the reward server: a cap on open connections and deadlines for slow clients.

Why: a trainer opens thousands of connections at once, and a slow or idle client must not hold a
file descriptor forever. uvicorn's own settings cover neither, so its HTTP protocol is wrapped.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
from collections import deque
from dataclasses import dataclass
from typing import Any

from prbench.errors import PrbenchError

log = logging.getLogger(__name__)


DISCONNECT = "prbench.disconnect"  # the scope extension: a future that resolves when the client goes away
LATE_REARMS = 6  # a loop that far behind (7 header timeouts) drops the connection after all


def _unread(transport: Any) -> bool:
    """Whether the connection's socket holds bytes the event loop has not read yet (peeked, not taken)."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        with socket.fromfd(sock.fileno(), sock.family, sock.type) as dup:  # a dup: the loop's socket is untouched
            return bool(dup.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:  # nothing to read (BlockingIOError), or the socket is gone
        return False


BUSY_REPLY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\nconnection: close\r\n"
              b"retry-after: 1\r\ncontent-length: 20\r\n\r\ntoo many connections")


def _base_protocol(parser: str) -> tuple[type, bool]:
    """uvicorn's httptools protocol where httptools is installed (and `parser` is not "h11"), else h11's."""
    try:
        if parser == "h11":
            raise ImportError
        import httptools  # noqa: F401 - uvicorn's httptools protocol needs it
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
        return HttpToolsProtocol, True
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol
        return H11Protocol, False


class DisconnectWatch:
    """For uvicorn's HTTP protocols: each request gets a future, `scope["extensions"]["prbench.disconnect"]`,
    that resolves if its client goes away before the reply, so the app need not keep a task per request
    awaiting `receive()` just to learn that."""

    loop: asyncio.AbstractEventLoop
    _gone: deque[asyncio.Future] | None = None  # one per request not yet answered, oldest first

    def _watch(self, scope: dict) -> None:
        extensions = scope.setdefault("extensions", {})
        if DISCONNECT not in extensions:
            if self._gone is None:
                self._gone = deque()
            extensions[DISCONNECT] = gone = self.loop.create_future()
            self._gone.append(gone)

    def _answered(self) -> None:
        if self._gone:
            self._gone.popleft()  # a later close of this connection is not this request's client leaving

    def _left(self) -> None:
        while self._gone:
            gone = self._gone.popleft()
            if not gone.done():
                gone.set_result(None)


def guarded_protocol(max_connections: int, header_timeout: float, on_busy: Any = None, parser: str = "auto") -> type:
    """uvicorn's HTTP protocol with a connection cap and a deadline for each request's headers.

    httptools' C parser where installed (uvicorn[standard]; several times less CPU per request than
    pure-Python h11, which is what caps single-item throughput), else h11. A connection past the cap
    is answered 503 with Retry-After (and counted by `on_busy`), then closed: the client reads a
    reply it can retry on, never a reset. Each request's client leaving is a future (`DisconnectWatch`).
    """
    Base, fast = _base_protocol(parser)

    class Guarded(DisconnectWatch, Base):  # type: ignore[valid-type,misc]  # a base chosen at run time (parser)
        _header_timer: asyncio.TimerHandle | None = None
        _late = 0

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]  # uvicorn narrows the transport
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.write(BUSY_REPLY)
                transport.close()
                if on_busy is not None:
                    on_busy()
                return
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
                if _unread(self.transport) and self._late < LATE_REARMS:
                    # the bytes came in time and wait in the kernel: the loop is behind (a burst of
                    # thousands of connects on busy cores), not the client. Closing now would reset
                    # a good request (close with unread data sends RST), so look again later.
                    self._late += 1
                    self._arm()
                    return
                self.transport.close()  # no complete request headers in time (slow or idle client)

        if fast:
            def on_headers_complete(self) -> None:
                super().on_headers_complete()
                self._disarm()
                self._watch(self.scope)
        else:
            def handle_events(self) -> None:
                super().handle_events()  # type: ignore[misc]  # h11's protocol has it, httptools' does not
                if self.cycle is not None and not self.cycle.response_complete:
                    self._disarm()
                    self._watch(self.cycle.scope)

        def on_response_complete(self) -> None:
            self._answered()
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._left()
            super().connection_lost(exc)

    return Guarded


@dataclass(frozen=True)
class Limits:
    """Connection limits (seconds, counts); the defaults take 4,096 concurrent trainer clients with room to spare."""

    max_connections: int = 8192
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    idle_timeout: float = 5.0

    def __post_init__(self) -> None:
        timeouts = {"header_timeout": self.header_timeout, "body_timeout": self.body_timeout,
                    "idle_timeout": self.idle_timeout}
        for name, value in timeouts.items():  # `not >` also refuses nan (issue 42.15)
            if not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise PrbenchError(f"--{name.replace('_', '-')} must be a finite number of seconds > 0, got {value!r}")
        if not (isinstance(self.max_connections, int) and self.max_connections >= 1):
            raise PrbenchError(f"--max-connections must be >= 1, got {self.max_connections!r}")

    def uvicorn_config(self, app: Any = None) -> dict[str, Any]:
        """uvicorn settings: the guarded protocol, and a listen backlog as deep as the connection cap
        (uvicorn's default 2,048 would leave a burst of 4,096 connects waiting on SYN retries)."""
        service = getattr(app, "service", None)
        on_busy = (lambda: service.stats.count_rejected(503)) if service is not None else None
        return {"http": guarded_protocol(self.max_connections, self.header_timeout, on_busy),
                "timeout_keep_alive": self.idle_timeout, "backlog": self.max_connections,
                # no X-Forwarded-* rewriting (nothing trusted stands in front) and no Date/Server
                # headers: less work per request on the single-item hot path
                "proxy_headers": False, "server_header": False, "date_header": False}


def check_fd_limit(limits: Limits) -> None:
    """Raise the open-file soft limit to fit `max_connections` (up to the hard limit); else say what to set.

    Each connection is a file descriptor: with the common soft limit of 1,024 a burst of concurrent
    clients would fail in accept() (the kernel then resets the connections waiting in the backlog).
    """
    need = limits.max_connections + 256
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
        if soft < need:
            log.warning("open-file limit %d is under --max-connections %d + 256: run `ulimit -n %d` (hard limit %s) "
                        "before serve-reward, or lower --max-connections", soft, limits.max_connections, need,
                        "unlimited" if hard == resource.RLIM_INFINITY else hard)
    try:
        with open("/proc/sys/net/core/somaxconn") as fh:
            somaxconn = int(fh.read().strip())
    except (OSError, ValueError):
        return
    if somaxconn < min(limits.max_connections, 4096):
        log.warning("net.core.somaxconn is %d: a burst of more concurrent connects may wait on retries; "
                    "run `sysctl -w net.core.somaxconn=%d` to take them at once", somaxconn,
                    min(limits.max_connections, 65535))
