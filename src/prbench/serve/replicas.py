"""`serve-reward --replicas N`: the same reward server, N model copies behind Ray Serve.

Why: one RM copy on one device caps the rewards a trainer can get per second; with several GPUs
(on one node or several), Ray Serve spreads requests over copies. Each replica runs the very app
`create_app` builds (same endpoints, payloads, status codes, its own cross-request batcher and
item queue), mounted as the replica's ASGI ingress; Ray Serve's HTTP proxy binds the given host
(loopback by default) and routes to replicas. `/stats` and `/health` answer for the replica that
took the request (`pid` tells which). Connection caps and header timeouts are the proxy's (Ray
Serve's own), not `Limits`; admission past a replica's queue is still 503 with Retry-After.

A local Ray is started on 127.0.0.1 only (Ray's non-cluster mode, which must be set before the
first `import ray` in the process) unless RAY_ADDRESS names a cluster. GPUs per replica default
to a 1/N share of the cluster's GPUs (at most one each), as for `prbench eval --workers`.
"""

from __future__ import annotations

import os
from typing import Any

from prbench.errors import PrbenchError
from prbench.runtime.extras import require

APP_NAME = "prbench-reward"


class RewardReplica:
    """One model copy: builds the reward app inside the replica process (the RM loads there)."""

    def __init__(self, rm: str, condition: str, app_options: dict[str, Any]):
        from prbench.serve.server import create_app

        self.reward_app = create_app(rm, condition, **app_options)  # `app` is the ingress wrapper's own property

    def __serve_build_asgi_app__(self) -> Any:
        return self.reward_app


def start_replicas(rm: str, condition: str = "none", *, replicas: int = 2, gpus_per_replica: float | None = None,
                   host: str = "127.0.0.1", port: int = 8000, ray_address: str | None = None,
                   **app_options: Any) -> str:
    """Deploy `replicas` copies of the reward app and return the proxy's base URL (does not block)."""
    from prbench.evaluation.distributed import default_gpus, loopback_ray, start_local

    address = ray_address or os.environ.get("RAY_ADDRESS") or None
    ray = require("ray", "ray") if address else loopback_ray()
    serve = require("ray.serve", "ray")

    if replicas < 1:
        raise PrbenchError(f"--replicas must be >= 1, got {replicas}")
    if gpus_per_replica is not None and gpus_per_replica < 0:
        raise PrbenchError(f"--gpus-per-replica must be >= 0, got {gpus_per_replica}")
    if not isinstance(rm, str):
        raise PrbenchError("--replicas needs an RM spec (each replica loads its own copy)")
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:  # a Ray of our own, on loopback only
            start_local(ray, replicas + 1)
    if gpus_per_replica is None:
        gpus_per_replica = default_gpus(ray.cluster_resources().get("GPU", 0), replicas)
    queue = app_options.get("batching")
    deployment = serve.deployment(
        serve.ingress()(RewardReplica), name="reward", num_replicas=replicas,
        ray_actor_options={"num_cpus": 1, "num_gpus": gpus_per_replica},
        # Ray Serve's default (5 in flight per replica) would queue the trainer's burst in the proxy
        # instead of in the replica's batcher, where it can be batched
        max_ongoing_requests=queue.queue_items if queue is not None else 16_384)
    serve.start(http_options={"host": host, "port": port})
    serve.run(deployment.bind(rm, condition, app_options), name=APP_NAME, route_prefix="/")
    return f"http://{host}:{port}"


def stop_replicas() -> None:
    """Remove the deployment and, when this process started Ray, stop it too."""
    ray = require("ray", "ray")
    if ray.is_initialized():
        require("ray.serve", "ray").shutdown()
        ray.shutdown()
