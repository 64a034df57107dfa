"""Spread an evaluation over Ray actors: one model load per actor, records streamed back.

Used by `evaluate(..., workers=N, ray_address=...)`. Each actor builds the RM from its spec
once and scores chunks of examples; the driver appends each chunk's records to the run folder
as it arrives, and the run is rewritten in example order at the end, so results are identical
to a single-process run: every random choice is seeded per example, never per worker.

Clusters as users run them:
- Connecting: `ray_address`, else `RAY_ADDRESS` (set inside `ray job submit` and KubeRay pods),
  joins that cluster and asks it for nothing (no `num_cpus`: Ray refuses those when connecting);
  neither starts a local Ray with `workers` CPUs.
- Surviving: actors restart after a crash (`max_restarts`), and a chunk whose actor died is
  submitted again (to a live actor), at most `chunk_retries` times, so a lost node costs time,
  not the run. Actors are killed in `finally`, also when the run fails or is interrupted.
- Resources: `gpus_per_worker` (fractional allowed, 0 for API judges); by default each actor
  gets a 1/workers share of the cluster's GPUs (at most 1), so Ray gives actors different devices
  where it can instead of all of them loading onto cuda:0.
- Cache: each node uses its own default cache (SQLite WAL does not work on network
  filesystems); only actors on the driver's node share the driver's `PRBENCH_CACHE_DIR`.
- Every node needs prbench installed and the model paths present (or ship the wheel that
  `make wheel` builds with a `runtime_env`; prbench is on no package index); see docs/ray.md.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prbench.context.conditions import View
from prbench.errors import PrbenchError
from prbench.runtime.extras import require
from prbench.schema import Example

log = logging.getLogger(__name__)


class _Worker:
    """Holds one RM and scores chunks; a plain class that Ray turns into an actor."""

    def __init__(self, spec: str, options: dict[str, Any], seed: int, both_orders: bool,
                 driver_cache: tuple[str, str] | None, use_cache: bool = True):
        from prbench.rewards import load_rm

        if driver_cache is not None:  # (node id, dir): the driver's cache, on the driver's node only
            import ray

            if ray.get_runtime_context().get_node_id() == driver_cache[0]:
                os.environ["PRBENCH_CACHE_DIR"] = driver_cache[1]
        self.rm = load_rm(spec, **options)
        self.seed, self.both_orders, self.use_cache = seed, both_orders, use_cache

    def records(self, examples: list[Example], views: list[View]) -> list[dict[str, Any]]:
        from prbench.evaluation.scoring import chunk_records
        from prbench.store.cache import Cache, NullCache

        cache = Cache(namespace="scores") if self.use_cache else NullCache()
        return chunk_records(self.rm, examples, views, self.seed, self.both_orders, cache)


def check_address(address: str, source: str) -> None:
    """An http(s) address is the Ray Jobs / dashboard URL (`ray job submit`), which ray.init cannot join."""
    if address.lower().startswith(("http://", "https://")):
        raise PrbenchError(f"{source}={address} is the Ray dashboard (jobs) address, which ray.init cannot join; "
                           "use auto, <head>:6379 (the GCS port) or ray://<head>:10001 (Ray Client)")


def loopback_ray() -> Any:
    """`import ray` for a Ray of our own on 127.0.0.1: Ray turns a node address of 127.0.0.1 into the
    machine's external one unless its non-cluster mode is on (ray 2.60 `_private/services.py::
    resolve_ip_for_localhost`, read at import), so the switch is set before the import."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    return require("ray", "ray")


def start_local(ray: Any, num_cpus: int) -> None:
    """A new local Ray bound to 127.0.0.1 ("local": never a stale `ray start` cluster in /tmp/ray)."""
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             ignore_reinit_error=True, _node_ip_address="127.0.0.1")


def connect(ray: Any, ray_address: str | None, workers: int) -> None:
    """Join `ray_address` / RAY_ADDRESS as they are, or start a local Ray sized for `workers`."""
    if ray.is_initialized():
        return
    address = ray_address or os.environ.get("RAY_ADDRESS") or None
    if address:
        check_address(address, "--ray-address" if ray_address else "RAY_ADDRESS")
        ray.init(address=address, log_to_driver=False, ignore_reinit_error=True)
    else:
        start_local(ray, workers)


def default_gpus(cluster_gpus: float, workers: int) -> float:
    """A 1/workers share of the cluster's GPUs, at most one each (0 without GPUs)."""
    if cluster_gpus <= 0:
        return 0.0
    return min(1.0, cluster_gpus / workers)


def ray_chunks(
    spec: str,
    options: dict[str, Any],
    chunks: Iterable[tuple[list[Example], list[View]]],
    *,
    workers: int,
    seed: int,
    both_orders: bool,
    ray_address: str | None = None,
    gpus_per_worker: float | None = None,
    use_cache: bool = True,
    max_restarts: int = 3,
    chunk_retries: int = 3,
) -> Iterator[list[dict[str, Any]]]:
    """Yield each chunk's records as soon as an actor finishes it (completion order)."""
    ray = loopback_ray() if not (ray_address or os.environ.get("RAY_ADDRESS")) else require("ray", "ray")
    from ray.exceptions import RayActorError

    if workers < 1:
        raise PrbenchError(f"workers must be >= 1, got {workers}")
    if gpus_per_worker is not None and gpus_per_worker < 0:
        raise PrbenchError(f"--gpus-per-worker must be >= 0, got {gpus_per_worker}")
    connect(ray, ray_address, workers)
    if gpus_per_worker is None:
        gpus_per_worker = default_gpus(ray.cluster_resources().get("GPU", 0), workers)
    actor_cls = ray.remote(num_cpus=1, num_gpus=gpus_per_worker, max_restarts=max_restarts,
                           max_task_retries=0)(_Worker)
    cache_dir = os.environ.get("PRBENCH_CACHE_DIR")
    driver_cache = (ray.get_runtime_context().get_node_id(), cache_dir) if cache_dir else None
    actors = [actor_cls.remote(spec, options, seed, both_orders, driver_cache, use_cache) for _ in range(workers)]
    pending: dict[Any, tuple[int, tuple[list[Example], list[View]], int]] = {}
    retry: deque[tuple[tuple[list[Example], list[View]], int]] = deque()
    deaths = [0] * workers
    queue = iter(chunks)  # read lazily: never more chunks in flight than actors

    def submit(i: int) -> None:
        if retry:
            chunk, tries = retry.popleft()
        else:
            nxt = next(queue, None)
            if nxt is None:
                return
            chunk, tries = nxt, 0
        pending[actors[i].records.remote(*chunk)] = (i, chunk, tries)

    try:
        for i in range(workers):
            submit(i)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            i, chunk, tries = pending.pop(done[0])
            try:
                records = ray.get(done[0])
            except RayActorError as exc:
                deaths[i] += 1
                if tries + 1 > chunk_retries:
                    raise PrbenchError(f"{spec}: a chunk failed {tries + 1} times because its Ray actor died "
                                       f"({type(exc).__name__}); finished chunks are saved, rerun to resume") from None
                log.warning("Ray actor %d died (%s); resubmitting its chunk of %d examples", i, type(exc).__name__,
                            len(chunk[0]))
                retry.append((chunk, tries + 1))
                if deaths[i] <= max_restarts:  # Ray restarts it: it takes work again
                    submit(i)
                elif not pending:
                    raise PrbenchError(f"{spec}: every Ray actor died more than {max_restarts} times; finished "
                                       "chunks are saved, rerun to resume") from None
                continue
            yield records
            submit(i)
    finally:
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                log.debug("actor already gone", exc_info=True)


def shutdown() -> None:
    """Stop (or disconnect from) the Ray that prbench started or joined (tests call this)."""
    ray = require("ray", "ray")
    if ray.is_initialized():
        ray.shutdown()


ProgressFn = Callable[[int, int], None]
