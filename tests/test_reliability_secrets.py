"""Secrets and untrusted files: keys only from the environment and only in the Authorization header;
no model code or pickle runs unless asked; the reward server answers bad requests with 4xx.

- A judge eval and a benchmark build run as real `prbench` processes against the loopback
  server, with a distinctive key in the environment (`--api-key-env` names the variable). The
  key reaches the server in every request's Authorization header, and appears in no file of
  the run folders, the build folder, the cache folder, a report, nor in stdout/stderr.
- No CLI option takes a secret's value: only the name of an environment variable.
- `trust_remote_code` is False on every load path unless the user passes it; a model folder
  with planted remote code or a planted pickle never executes it; PAL loads safetensors only.
- The reward server binds 127.0.0.1 by default and meets malformed requests with 4xx, never 500.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import pickle
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prbench.testing.openai_server import Fault
from prbench.testing.records import make_records

SECRET = "sk-test-SECRET-1234567890"
SECRET_ENV = "PRBENCH_SECRET_TEST_KEY"
FRAGMENTS = (SECRET.encode(), b"SECRET-1234567890")
RECORDS = make_records(8)
CHOSEN = {r["chosen"] for r in RECORDS}
ITEM = re.compile(r"\(item (\d+)\)")


def _prompt(body: dict[str, Any]) -> str:
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]


def reply(body: dict[str, Any]) -> str:
    """Judge verdicts and build answers/validations, from the request alone."""
    text = _prompt(body)
    i = int(ITEM.search(text).group(1))
    if "<response_a>" in text:
        if i == 3:
            return "no idea"  # a parse failure: its raw text is kept and must not matter
        a = re.search(r"<response_a>\n(.*?)\n</response_a>", text, re.DOTALL).group(1)
        return f"Result: {'A' if a in CHOSEN else 'B'}"
    topic = ["hiking", "baking", "chess", "poetry"][i % 4]
    if "What THIS PERSON EXPECTS" in text:
        return f"Spend a cheap and relaxed Saturday on {topic}, then rest at home on Sunday."
    if "does NOT want" in text:
        return "Book a guided city tour on Saturday and a long brunch on Sunday."
    answer = text.split("<<<ANSWER\n", 1)[1].split("\nANSWER>>>", 1)[0]
    return json.dumps({"factuality": 5, "relevance": 5, "helpfulness": 5, "rubric_fit": 5 if topic in answer else 1})


def faults(n: int, body: dict[str, Any]) -> Fault | None:
    """Rate limits, a 500, a reset and a final 400 along the way: retries and failures get logged."""
    return {1: Fault.rate_limit(retry_after="0"), 2: Fault.server_error(500), 3: Fault.reset(),
            4: Fault.rate_limit()}.get(n) or (Fault.http_status(400) if "(item 6)" in _prompt(body)
                                              and "<response_a>" in _prompt(body) else None)


def files_under(*roots: Path) -> Iterable[Path]:
    for root in roots:
        if root.exists():
            yield from (p for p in root.rglob("*") if p.is_file())


def assert_no_secret(where: str, data: bytes) -> None:
    for frag in FRAGMENTS:
        assert frag not in data, f"the API key leaked into {where}"


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {**os.environ, SECRET_ENV: SECRET, "PRBENCH_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(home),
            "XDG_CACHE_HOME": str(home / ".cache"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "OPENAI_LOG": "debug"}  # even the SDK's own debug logging must not carry the key


@pytest.mark.slow
def test_judge_eval_and_build_never_write_the_key(fake_openai, env: dict[str, str], tmp_path: Path) -> None:
    srv = fake_openai(reply, faults=faults)
    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    source = tmp_path / "source.jsonl"
    source.write_text("".join(json.dumps({k: v for k, v in r.items() if k not in ("chosen", "rejected")}) + "\n"
                              for r in RECORDS[:4]), encoding="utf-8")
    runs, build = tmp_path / "runs", tmp_path / "build"
    procs = [
        subprocess.run([sys.executable, "-m", "prbench", "eval", "-m", "judge:openai:fake-model", "--base-url",
                        srv.base_url, "--api-key-env", SECRET_ENV, "--data", str(data), "--out", str(runs),
                        "-c", "none,profile"], env=env, capture_output=True, timeout=300, check=False),
        subprocess.run([sys.executable, "-m", "prbench", "build", "--source", str(source), "--generator",
                        "openai:fake-model", "--validator", "openai:fake-model", "--generator-base-url", srv.base_url,
                        "--validator-base-url", srv.base_url, "--api-key-env", SECRET_ENV, "--out", str(build),
                        "--top-k", "3", "--batch-size", "2"], env=env, capture_output=True, timeout=300, check=False),
        # an error with --debug: the traceback must not show the key either
        subprocess.run([sys.executable, "-m", "prbench", "--debug", "eval", "-m", "judge:openai:fake-model",
                        "--base-url", srv.base_url, "--api-key-env", SECRET_ENV, "--data",
                        str(tmp_path / "missing.jsonl"), "--out", str(runs)], env=env, capture_output=True,
                       timeout=300, check=False),
    ]
    assert procs[0].returncode == 0, procs[0].stderr.decode()[-3000:]
    assert procs[1].returncode == 0, procs[1].stderr.decode()[-3000:]
    assert procs[2].returncode == 1 and b"Traceback" in procs[2].stderr
    # the key was really used: in the Authorization header of every request, and nowhere else in them
    posts = [r for r in srv.records if r.method == "POST"]
    assert len(posts) > 20
    auth = [{k.lower(): v for k, v in r.headers.items()}.get("authorization") for r in posts]
    assert auth == [f"Bearer {SECRET}"] * len(posts)
    assert all(SECRET not in json.dumps(r.body) for r in posts)
    assert b"retry" in procs[0].stderr.lower()  # retries were logged (where a careless log line would leak)
    # run folders, the build, the cache, HOME: every byte
    scanned = list(files_under(runs, build, tmp_path / "cache", tmp_path / "home"))
    assert any(p.name == "examples.jsonl" for p in scanned) and any(p.suffix == ".sqlite" for p in scanned)
    assert any(p.name == "build_config.json" for p in scanned)
    for p in scanned:
        assert_no_secret(str(p), p.read_bytes())
    for i, proc in enumerate(procs):
        assert_no_secret(f"stdout of process {i}", proc.stdout)
        assert_no_secret(f"stderr of process {i}", proc.stderr)
    # the names are recorded (so a run says which variable it used), never the value
    config = json.loads(next(runs.rglob("config.json")).read_text())
    assert config["model_options"]["api_key_env"] == SECRET_ENV

    # a report over these runs, when the report command exists
    try:
        from prbench.cli.meta import report as report_cmd  # noqa: F401
    except ImportError:
        return
    rep = subprocess.run([sys.executable, "-c", "from prbench.cli import command_app; command_app('report')()",
                          "report", str(runs), "-o", str(tmp_path / "report.html"), "--n-boot", "50",
                          "--n-perm", "50"], env=env, capture_output=True, timeout=300, check=False)
    assert rep.returncode == 0, rep.stderr.decode()[-2000:]
    assert_no_secret("report stdout/stderr", rep.stdout + rep.stderr)
    assert_no_secret("report.html", (tmp_path / "report.html").read_bytes())


def test_in_process_objects_logs_and_summaries_hold_no_key(fake_openai, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from prbench import evaluate
    from prbench.rewards import load_rm

    monkeypatch.setenv(SECRET_ENV, SECRET)
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    srv = fake_openai(reply, faults=faults)
    opts = {"base_url": srv.base_url, "api_key_env": SECRET_ENV, "backoff_base": 0.01, "backoff_max": 0.02}
    judge = load_rm("judge:openai:fake-model", **opts)
    caplog.set_level("DEBUG")
    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    res = evaluate(judge, str(data), "profile", out=tmp_path / "runs", model_options=opts, n_boot=20)
    assert res.summary.metrics.n_invalid == 2  # the 400 and the unreadable verdict
    for where, blob in [("summary", res.summary.model_dump_json()),
                        ("records", json.dumps([r.model_dump() for r in res.records])),
                        ("repr", repr(judge) + repr(judge.engine)), ("fingerprint", json.dumps(judge.fingerprint())),
                        ("run_info", json.dumps(judge.run_info(), default=str)),
                        ("logs", "\n".join(r.getMessage() for r in caplog.records))]:
        assert_no_secret(where, blob.encode())
    assert_no_secret("pickle", pickle.dumps(judge.engine))
    assert any("retry" in r.getMessage() for r in caplog.records)


def test_no_cli_option_takes_a_secret_value() -> None:
    """Secrets are named by environment variable (`--api-key-env`, `--token-env`), never passed in argv."""
    import click
    from typer.main import get_command

    from prbench import cli

    cli._register()  # every command: the run kinds' and the others
    secretish = re.compile(r"(api[-_]?key|token|secret|password|passwd|credential)", re.IGNORECASE)
    found: list[str] = []

    def walk(cmd: click.Command, path: str) -> None:
        for p in cmd.params:
            for opt in getattr(p, "opts", []) + getattr(p, "secondary_opts", []):
                if secretish.search(opt) and not opt.endswith("-env") and opt not in ("--require-token",):
                    found.append(f"{path} {opt}")
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}")

    walk(get_command(cli.app), "prbench")
    assert not found, f"options that would put a secret in argv / shell history: {found}"


def test_missing_key_fails_fast_naming_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from prbench import evaluate
    from prbench.errors import PrbenchError

    monkeypatch.delenv("PRBENCH_UNSET_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS[:2]), encoding="utf-8")
    with pytest.raises(PrbenchError, match="PRBENCH_UNSET_KEY"):
        evaluate("judge:openai:gpt-x", str(data), "none", out=tmp_path / "runs", n_boot=10,
                 model_options={"api_key_env": "PRBENCH_UNSET_KEY", "max_retries": 0})
    assert not any((tmp_path / "runs").rglob("examples.jsonl"))


def test_a_server_echoing_the_key_does_not_leak_it(fake_openai, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    import prbench.testing.openai_server as server_mod
    from prbench import evaluate

    monkeypatch.setenv(SECRET_ENV, SECRET)
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    srv = fake_openai(reply, faults=lambda n, body: Fault.http_status(401))

    original = server_mod._Handler._send_json

    def echo_key(self, status, payload, extra_headers=None):
        if status == 401:  # what some gateways answer (OpenAI itself masks all but the last 4 characters)
            payload = {"error": {"message": f"Incorrect API key provided: {SECRET}", "type": "invalid_request_error"}}
        return original(self, status, payload, extra_headers)

    monkeypatch.setattr(server_mod._Handler, "_send_json", echo_key)
    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS[:2]), encoding="utf-8")
    caplog.set_level("DEBUG")
    res = evaluate("judge:openai:fake-model", str(data), "none", out=tmp_path / "runs", n_boot=10,
                   model_options={"base_url": srv.base_url, "api_key_env": SECRET_ENV})
    assert res.summary.metrics.n_invalid == 2
    for p in files_under(tmp_path / "runs"):
        assert_no_secret(str(p), p.read_bytes())
    assert_no_secret("logs", "\n".join(r.getMessage() for r in caplog.records).encode())


def test_a_key_passed_as_an_option_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prbench import evaluate
    from prbench.errors import PrbenchError

    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS[:2]), encoding="utf-8")
    try:
        evaluate("baseline:length", str(data), "none", out=tmp_path / "runs", model_options={"api_key": SECRET})
    except PrbenchError:
        pass
    for p in files_under(tmp_path / "runs"):
        assert_no_secret(str(p), p.read_bytes())


# -- model files: no remote code, no pickles ----------------------------------------------------
class _Recorder:
    """Stands in for a transformers Auto class: records each from_pretrained's kwargs, then delegates."""

    def __init__(self, real: Any, log: list[tuple[str, dict[str, Any]]]):
        self.real, self.log = real, log

    def from_pretrained(self, *args: Any, **kwargs: Any) -> Any:
        self.log.append((self.real.__name__, dict(kwargs)))
        return self.real.from_pretrained(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture()
def load_log(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    import transformers

    log: list[tuple[str, dict[str, Any]]] = []
    for name in ("AutoTokenizer", "AutoModelForSequenceClassification", "AutoModelForCausalLM", "AutoModel",
                 "AutoConfig"):
        monkeypatch.setattr(transformers, name, _Recorder(getattr(transformers, name), log))
    return log


def test_trust_remote_code_is_off_unless_asked(load_log, tiny_rm: Path, tiny_lm: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from prbench.context.retrieval import load_retriever
    from prbench.engines.base import load_engine
    from prbench.rewards import load_rm

    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    load_rm(f"hf:{tiny_rm}", device="cpu")
    load_engine(f"hf:{tiny_lm}", device="cpu")
    load_rm(f"judge:hf:{tiny_lm}", device="cpu")
    contriever = load_retriever(f"contriever:{tiny_lm}")
    contriever.scores("a question", ["a post", "another post"])
    assert {name for name, _ in load_log} >= {"AutoTokenizer", "AutoModelForSequenceClassification",
                                                "AutoModelForCausalLM", "AutoModel"}
    assert all(not kw.get("trust_remote_code") for _, kw in load_log), load_log
    # the CLI leaves it off by default and passes it through when asked
    from prbench.cli.options import set_options as model_options

    assert "trust_remote_code" not in model_options(trust_remote_code=False, mode=None)
    load_log.clear()
    load_rm(f"hf:{tiny_rm}", device="cpu", **model_options(trust_remote_code=True))
    assert load_log and all(kw.get("trust_remote_code") is True for _, kw in load_log)


EVIL_MODULE = """
from pathlib import Path
Path({marker!r}).write_text("remote code ran")
from transformers import LlamaConfig as EvilConfig, LlamaForSequenceClassification as EvilModel
"""


class _Evil:
    """Unpickling this runs code: the payload a malicious checkpoint carries."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('pickle ran')",))


def test_planted_remote_code_and_pickles_never_run(tiny_rm: Path, tmp_path: Path) -> None:
    from prbench.rewards import load_rm

    # 1. remote code: auto_map points at a module in the folder that writes a marker when imported
    remote = tmp_path / "remote"
    shutil.copytree(tiny_rm, remote)
    marker = tmp_path / "remote-code-ran"
    (remote / "evil.py").write_text(EVIL_MODULE.format(marker=str(marker)), encoding="utf-8")
    cfg = json.loads((remote / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForSequenceClassification": "evil.EvilModel"}
    (remote / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    with contextlib.suppress(Exception):  # refusing is fine; running the code is not
        load_rm(f"hf:{remote}", device="cpu")
    assert not marker.exists(), "a model folder's own code ran without trust_remote_code"

    # 2. a pickle instead of safetensors weights
    pickled = tmp_path / "pickled"
    shutil.copytree(tiny_rm, pickled)
    marker2 = tmp_path / "pickle-ran"
    for f in pickled.glob("*.safetensors"):
        f.unlink()
    (pickled / "pytorch_model.bin").write_bytes(pickle.dumps({"weights": _Evil(marker2)}))
    with pytest.raises(Exception):  # noqa: B017 - any refusal will do
        load_rm(f"hf:{pickled}", device="cpu")
    assert not marker2.exists(), "a pickled checkpoint was unpickled with code execution"


def test_pal_loads_safetensors_only(tmp_path: Path) -> None:
    import torch

    from prbench.errors import PrbenchError
    from prbench.manifest import seal
    from prbench.rewards.pal import build_model, load_folder, save_folder

    config = {"arch": "pal-a", "embed_dim": 8, "hidden": 0, "dim": 4, "k_prototypes": 2, "users": ["u1", "u2"],
              "encoder": "unused"}
    torch.manual_seed(0)
    folder = save_folder(tmp_path / "pal", config, build_model(config))
    seal(folder)  # as `prbench train pal` leaves it: a folder without its manifest is refused (#42 item 10a)
    marker = tmp_path / "pal-pickle-ran"
    for name in ("pytorch_model.bin", "model.pt", "model.pkl", "training_args.bin"):
        (folder / name).write_bytes(pickle.dumps(_Evil(marker)))
    cfg, model = load_folder(folder)  # the planted pickles are ignored
    assert cfg["arch"] == "pal-a" and sum(p.numel() for p in model.parameters()) > 0
    # weights that are a pickle under the safetensors name are refused, not unpickled
    (folder / "model.safetensors").write_bytes(pickle.dumps(_Evil(marker)))
    with pytest.raises(Exception):  # noqa: B017
        load_folder(folder)
    # no safetensors at all: a clear error, even with pickles lying next to it
    (folder / "model.safetensors").unlink()
    with pytest.raises(PrbenchError, match="model.safetensors"):
        load_folder(folder)
    assert not marker.exists()


# -- the reward server ----------------------------------------------------------------------------
def test_reward_server_defaults_are_safe() -> None:
    from prbench.cli.downstream import serve_reward
    from prbench.serve.server import ThreadedServer, create_app, serve

    assert inspect.signature(serve).parameters["host"].default == "127.0.0.1"
    assert inspect.signature(ThreadedServer).parameters["host"].default == "127.0.0.1"
    assert inspect.signature(serve_reward).parameters["host"].default == "127.0.0.1"
    params = inspect.signature(create_app).parameters
    assert params["max_batch"].default <= 1024 and params["max_body_bytes"].default <= 10_000_000
    # the token comes from an environment variable; the CLI has no option for its value
    assert "token_env" in inspect.signature(serve_reward).parameters
    assert "token" not in inspect.signature(serve_reward).parameters


@pytest.fixture(scope="module")
def reward_server() -> Any:
    from prbench.rewards import load_rm
    from prbench.serve.server import ThreadedServer, create_app

    app = create_app(load_rm("baseline:length"), "profile", token="tok-123", max_batch=4, max_body_bytes=20_000)
    with ThreadedServer(app) as srv:
        yield srv


def _post(srv: Any, body: bytes, token: str | None = "tok-123", ctype: str = "application/json") -> int:
    import httpx

    headers = {"content-type": ctype}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(f"{srv.base_url}/score", content=body, headers=headers, timeout=30).status_code


def _raw_http(srv: Any, request: bytes) -> int:
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(request)
        head = s.recv(100).decode("latin-1")
    return int(head.split()[1]) if head.startswith("HTTP/") else 400


def test_reward_server_malformed_requests_are_4xx(reward_server: Any) -> None:
    srv = reward_server
    item = {"query": "where to hike", "response": "r", "profile": [{"id": "p", "text": "I love hiking"}]}
    cases: list[tuple[bytes, int]] = [
        (b"", 400), (b"{", 400), (b"\xff\xfe", 400), (b"null", 422), (b"NaN", 422), (b'"items"', 422),
        (json.dumps({"items": [item] * 5}).encode(), 413),                       # too many items
        (json.dumps({"items": [{**item, "response": "x" * 30_000}]}).encode(), 413),  # body too big
        (json.dumps({"items": [{**item, "query": None}]}).encode(), 422),
        (json.dumps({"items": [{**item, "profile": [{"id": [], "text": "hiking"}]}]}).encode(), 422),
        # a lone surrogate escape cannot be decoded into text: a 400 naming it, on every route (#51 item 14)
        (json.dumps({"items": [{**item, "query": "q\ud800"}]}, ensure_ascii=True).encode(), 400),
        (json.dumps({"items": [{"response": "r"}]}).encode(), 422),
        (json.dumps({"items": {"0": item}}).encode(), 422),
        (json.dumps({"items": [item]}).encode(), 200),
    ]
    for body, status in cases:
        assert _post(srv, body) == status, body[:60]
    assert _post(srv, json.dumps({"items": [item]}).encode(), token=None) == 401
    assert _post(srv, json.dumps({"items": [item]}).encode(), token="wrong") == 403
    assert _post(srv, json.dumps({"items": [item]}).encode(), ctype="text/plain") in (200, 415)
    for raw in (b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
                b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\nAuthorization: Bearer tok-123\r\n\r\n",
                (b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n"
                 b"Authorization: Bearer tok-123\r\n\r\n{"),
                b"GARBAGE\r\n\r\n"):
        assert 400 <= _raw_http(srv, raw) < 500, raw


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats() | st.text(max_size=30),
                    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=12), kids, max_size=5),
                    max_leaves=15)
ITEMS = st.fixed_dictionaries({}, optional={"query": JSON | st.text(max_size=20), "response": JSON | st.text(max_size=20),
                                             "profile": JSON | st.lists(st.fixed_dictionaries(
                                                 {}, optional={"id": JSON, "text": JSON, "category": JSON}), max_size=3),
                                             "rubric_aspects": JSON, "id": JSON})


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(payload=JSON | st.fixed_dictionaries({"items": st.lists(ITEMS, max_size=6)}) | st.fixed_dictionaries(
    {"items": JSON}))
def test_reward_server_fuzz_never_500(reward_server: Any, payload: Any) -> None:
    body = json.dumps(payload).encode()
    status = _post(reward_server, body)
    assert status in (200, 400, 413, 422), (status, body[:200])


def test_reward_server_hostile_json_is_400(reward_server: Any) -> None:
    assert _post(reward_server, b"[" * 50_00 + b"]" * 50_00) == 400
    assert _post(reward_server, b'{"items": [{"query": "q", "response": "r", "id": ' + b"1" * 5000 + b"}]}") == 400
