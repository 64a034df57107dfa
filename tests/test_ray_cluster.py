"""Ray as users run it: a cluster reached through RAY_ADDRESS, an actor killed mid-run, actors released.

One local cluster for the module (`ray start --head --block` in its own process group, ~20 s on
2 cores), with its own auth token so it never touches another session's Ray; the driver reaches
it only through RAY_ADDRESS (as inside `ray job submit` or a KubeRay pod). Teardown kills that
process group only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prbench.cache import NullCache
from prbench.distributed import default_gpus, shutdown
from prbench.evaluate import evaluate
from prbench.testing.records import make_records

PLUGIN = Path(__file__).parent / "data" / "ray" / "dying_rm.py"
SPEC = f"py:{PLUGIN}:DyingLength"
RAY = str(Path(sys.executable).with_name("ray"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(16).hex()}
    proc = subprocess.Popen([RAY, "start", "--head", "--block", "--num-cpus=2", "--num-gpus=0", f"--port={port}",
                             "--include-dashboard=false", "--disable-usage-stats"],
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    saved = {k: os.environ.get(k) for k in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    os.environ.update({"RAY_ADDRESS": f"127.0.0.1:{port}", "RAY_AUTH_MODE": "token",
                       "RAY_AUTH_TOKEN": env["RAY_AUTH_TOKEN"]})
    try:
        import ray

        deadline = time.time() + 240  # a loaded 2-core machine can take minutes
        while True:  # wait until the head answers, then leave the connecting to prbench
            try:
                ray.init(log_to_driver=False)
                ray.shutdown()
                break
            except Exception:  # noqa: BLE001 - not up yet (connection or auth errors of any kind)
                assert time.time() < deadline, "ray head did not start"
                if proc.poll() is not None:  # the head exited (e.g. a Ray started beside it took its port): again
                    proc = subprocess.Popen(proc.args, env=env, start_new_session=True,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
        yield port
    finally:
        shutdown()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        current = Path("/tmp/ray/ray_current_cluster")  # what `ray stop` would clean up, if it is ours
        if current.is_file() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ray-data") / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in make_records(16)), encoding="utf-8")
    return path


def free_cpus(ray) -> float:
    deadline = time.time() + 20
    while ray.available_resources().get("CPU", 0) < 2 and time.time() < deadline:
        time.sleep(0.2)
    return ray.available_resources().get("CPU", 0)


@pytest.mark.slow
def test_ray_address_run_and_an_actor_killed_mid_run_give_single_process_bytes(cluster, data, tmp_path) -> None:
    import ray

    single = evaluate(SPEC, str(data), "profile", out=tmp_path / "one", batch_size=1, cache=NullCache())
    # 1. RAY_ADDRESS only (no --ray-address): joins the cluster without asking for num_cpus
    joined = evaluate(SPEC, str(data), "profile", out=tmp_path / "two", batch_size=1, cache=NullCache(), workers=2)
    assert ray.is_initialized() and ray.cluster_resources()["CPU"] == 2  # the existing cluster, not a new one
    assert free_cpus(ray) == 2  # both actors released
    assert (joined.path / "examples.jsonl").read_bytes() == (single.path / "examples.jsonl").read_bytes()
    # 2. one actor process dies while scoring the third chunk (of four): restarted, chunk resubmitted
    marker = tmp_path / "died"
    killed = evaluate(SPEC, str(data), "profile", out=tmp_path / "three", batch_size=1, cache=NullCache(), workers=2,
                      model_options={"die_marker": str(marker), "die_at": single.records[9]["id"]})
    assert marker.exists(), "the actor was never killed: the test proves nothing"
    assert Path(f"{marker}.restarts").read_text().split(), "Ray did not restart the dead actor"
    assert (killed.path / "examples.jsonl").read_bytes() == (single.path / "examples.jsonl").read_bytes()
    assert killed.summary["n_total"] == 16 and killed.summary["accuracy"] == single.summary["accuracy"]
    assert free_cpus(ray) == 2


def test_default_gpu_share() -> None:
    assert default_gpus(0, 4) == 0.0
    assert default_gpus(1, 4) == 0.25  # fewer GPUs than workers: shares, not all on cuda:0 unreserved
    assert default_gpus(8, 2) == 1.0
