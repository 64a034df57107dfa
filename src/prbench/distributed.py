"""Spread an evaluation over Ray actors: one model load per actor, records streamed back.

Used by `evaluate(..., workers=N, ray_address=...)`. Each actor builds the RM from its spec
once (a GPU per actor when the cluster has them) and scores chunks of examples; the driver
appends each chunk's records to the run folder as it arrives, and the run is rewritten in
example order at the end, so results are identical to a single-process run: every random
choice is seeded per example, never per worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prbench.conditions import View
from prbench.extras import require
from prbench.schema import Example


class _Worker:
    """Holds one RM and scores chunks; a plain class that Ray turns into an actor."""

    def __init__(self, spec: str, options: dict[str, Any], seed: int, both_orders: bool, cache_dir: str | None,
                 use_cache: bool = True):
        import os

        from prbench.rewards import load_rm

        if cache_dir:
            os.environ["PRBENCH_CACHE_DIR"] = cache_dir
        self.rm = load_rm(spec, **options)
        self.seed, self.both_orders, self.use_cache = seed, both_orders, use_cache

    def records(self, examples: list[Example], views: list[View]) -> list[dict[str, Any]]:
        from prbench.cache import Cache, NullCache
        from prbench.scoring import chunk_records

        cache = Cache(namespace="scores") if self.use_cache else NullCache()
        return chunk_records(self.rm, examples, views, self.seed, self.both_orders, cache)


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
) -> Iterator[list[dict[str, Any]]]:
    """Yield each chunk's records as soon as any actor finishes it (completion order)."""
    import os

    ray = require("ray", "ray")
    if not ray.is_initialized():
        ray.init(address=ray_address, num_cpus=None if ray_address else workers, include_dashboard=False,
                 log_to_driver=False, ignore_reinit_error=True)
    if gpus_per_worker is None:
        gpus_per_worker = 1.0 if ray.cluster_resources().get("GPU", 0) >= workers else 0.0
    actor_cls = ray.remote(num_cpus=1, num_gpus=gpus_per_worker)(_Worker)
    cache_dir = os.environ.get("PRBENCH_CACHE_DIR")
    actors = [actor_cls.remote(spec, options, seed, both_orders, cache_dir, use_cache) for _ in range(workers)]
    pending: dict[Any, Any] = {}
    queue = iter(chunks)  # read lazily: never more chunks in flight than actors

    def submit(actor: Any) -> None:
        chunk = next(queue, None)
        if chunk is not None:
            pending[actor.records.remote(*chunk)] = actor

    for actor in actors:
        submit(actor)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        actor = pending.pop(done[0])
        yield ray.get(done[0])
        submit(actor)
    for a in actors:
        ray.kill(a)


def shutdown() -> None:
    """Stop a local Ray started by prbench (tests call this)."""
    ray = require("ray", "ray")
    if ray.is_initialized():
        ray.shutdown()


ProgressFn = Callable[[int, int], None]
