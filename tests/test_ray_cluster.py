"""Ray as users run it: a cluster reached through RAY_ADDRESS, an actor killed mid-run, actors released.

One local cluster for the module (`ray start --head --block` in its own process group, ~20 s on
2 cores), bound to 127.0.0.1 (`--node-ip-address`; never the machine's external interface), with
its own auth token, temp dir and ports so it never touches another Ray on the machine;
the driver reaches it only through RAY_ADDRESS (as inside `ray job submit` or a KubeRay pod).
Teardown kills that process group only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from prbench import evaluate
from prbench.errors import PrbenchError
from prbench.evaluation.distributed import connect, default_gpus, shutdown
from prbench.store.cache import NullCache
from prbench.testing.records import make_records

PLUGIN = Path(__file__).parent / "data" / "ray" / "dying_rm.py"
SPEC = f"py:{PLUGIN}:DyingLength"
RAY = str(Path(sys.executable).with_name("ray"))


def free_ports(n: int) -> list[int]:
    """n distinct free ports, held open together so none is handed out twice."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def head_answers(env: dict[str, str]) -> bool:
    """Whether a fresh driver process can join the head (a probe in-process could leave Ray half-initialised)."""
    probe = "import ray; ray.init(log_to_driver=False); ray.shutdown()"
    try:
        return subprocess.run([sys.executable, "-c", probe], check=False, env=env, capture_output=True, timeout=90).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def reload_ray_token() -> None:
    """Make this process read RAY_AUTH_TOKEN again. Ray caches the token of the first cluster a
    process touched (an earlier test's local Ray, token from ~/.ray/auth_token) and would offer
    it to this head: "InvalidAuthToken" in a full run, never alone (CI failed so)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    # RayConfig reads RAY_AUTH_MODE once per process: an earlier local Ray left it 'disabled', and the token
    # offered to this head was then none ("RAY_AUTH_MODE is currently 'disabled'" in a full run). Re-read
    # the config before the token, in the order of Ray 2.60's own
    # `ray/_private/authentication_test_utils.py::reset_auth_token_state`.
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@pytest.fixture(scope="module")
def cluster():
    # Its own temp dir and every port chosen here: the other pytest worker's local Ray instances share
    # neither /tmp/ray (session links, ray_current_cluster) nor Ray's fixed default ports with this head.
    temp = Path(tempfile.mkdtemp(prefix="prb-ray-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    port, node, objects, agent, agent_grpc, runtime_env, metrics = free_ports(7)
    log = temp / "head.log"
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(16).hex()}
    args = [RAY, "start", "--head", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=2", "--num-gpus=0", f"--port={port}",
            f"--temp-dir={temp}", f"--node-manager-port={node}", f"--object-manager-port={objects}",
            f"--dashboard-agent-listen-port={agent}",
            f"--dashboard-agent-grpc-port={agent_grpc}", f"--runtime-env-agent-port={runtime_env}",
            f"--metrics-export-port={metrics}", "--include-dashboard=false", "--disable-usage-stats"]

    def start() -> subprocess.Popen:
        with log.open("ab") as out:
            return subprocess.Popen(args, env=env, start_new_session=True, stdout=out, stderr=subprocess.STDOUT)

    proc, starts = start(), 1
    saved = {k: os.environ.get(k) for k in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    env["RAY_ADDRESS"] = f"127.0.0.1:{port}"
    os.environ.update({k: env[k] for k in saved})
    reload_ray_token()
    try:
        deadline = time.time() + 240  # a loaded 2-core machine can take minutes
        while not head_answers(env):
            exited = proc.poll() is not None
            if time.time() > deadline or (exited and starts == 3):
                tail = log.read_text(errors="replace")[-3000:]
                pytest.fail(f"ray head did not answer ({starts} starts); its output ends:\n{tail}")
            if exited:  # e.g. a port taken between choosing and binding it: again, the log keeps its output
                proc, starts = start(), starts + 1
            time.sleep(1)
        yield port
    finally:
        shutdown()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        shutil.rmtree(temp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reload_ray_token()


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
    assert [n["NodeManagerAddress"] for n in ray.nodes()] == ["127.0.0.1"]  # bound to loopback only
    assert free_cpus(ray) == 2  # both actors released
    assert (joined.path / "examples.jsonl").read_bytes() == (single.path / "examples.jsonl").read_bytes()
    # 2. one actor process dies while scoring the third chunk (of four): restarted, chunk resubmitted
    marker = tmp_path / "died"
    killed = evaluate(SPEC, str(data), "profile", out=tmp_path / "three", batch_size=1, cache=NullCache(), workers=2,
                      model_options={"die_marker": str(marker), "die_at": single.records[9].id})
    assert marker.exists(), "the actor was never killed: the test proves nothing"
    assert Path(f"{marker}.restarts").read_text().split(), "Ray did not restart the dead actor"
    assert (killed.path / "examples.jsonl").read_bytes() == (single.path / "examples.jsonl").read_bytes()
    assert killed.summary.n_total == 16 and killed.summary.accuracy == single.summary.accuracy
    assert free_cpus(ray) == 2


def test_default_gpu_share() -> None:
    assert default_gpus(0, 4) == 0.0
    assert default_gpus(1, 4) == 0.25  # fewer GPUs than workers: shares, not all on cuda:0 unreserved
    assert default_gpus(8, 2) == 1.0


def test_a_dashboard_address_gets_one_line_naming_what_ray_init_joins(monkeypatch) -> None:
    """`RAY_ADDRESS=http://head:8265` (the `ray job submit` form) fails inside ray.init with "Invalid
    address format"; prbench says which forms ray.init joins, before Ray starts anything."""
    import ray

    shutdown()  # the cluster test may have left this process joined
    monkeypatch.setenv("RAY_ADDRESS", "http://10.0.0.5:8265")
    with pytest.raises(PrbenchError) as err:
        connect(ray, None, 2)
    msg = str(err.value)
    assert msg.startswith("RAY_ADDRESS=http://10.0.0.5:8265 is the Ray dashboard") and "\n" not in msg
    assert all(form in msg for form in ("auto", "<head>:6379", "ray://<head>:10001"))
    with pytest.raises(PrbenchError, match="^--ray-address=https://h:8265 "):
        connect(ray, "https://h:8265", 2)
    assert not ray.is_initialized()


def test_docs_runtime_env_ships_the_wheel_make_builds(tmp_path) -> None:
    """docs/ray.md's runtime_env passes Ray's own RuntimeEnv validation (ray 2.60 runtime_env/runtime_env.py:
    `pip` as {"packages", "pip_install_options"}) and names the wheel `make wheel` writes to dist/."""
    import re
    import zipfile

    from ray.runtime_env import RuntimeEnv

    root = Path(__file__).resolve().parents[1]
    docs = (root / "docs" / "ray.md").read_text(encoding="utf-8")
    [env_json] = re.findall(r"--runtime-env-json \\\n\s*'(.*?)'", docs)  # the only one: no `{"pip": ["prbench[..]"]}`
    env = RuntimeEnv(**json.loads(env_json))
    [wheel_path] = env["pip"]["packages"]
    assert env["pip"]["pip_install_options"] == ["--no-index"]
    make = (root / "Makefile").read_text(encoding="utf-8")
    assert "$(PIP) wheel -q --no-deps --no-build-isolation -w dist ." in make
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path), str(root)], check=True, capture_output=True, timeout=300)
    [built] = tmp_path.glob("prbench-*.whl")
    assert Path(wheel_path).name == built.name  # the docs name the file make wheel writes
    names = zipfile.ZipFile(built).namelist()
    assert "prbench/prompts/policy_answer.txt" in names and "prbench/presets/demo.yaml" in names
