"""Shared fixtures. Keep them cheap (tiny models are built once per session) and documented.

- `tiny_lm`, `tiny_lm_qwen2`, `tiny_lm_plain` (no chat template, no pad token), `tiny_rm`:
  paths of tiny random checkpoints from `prbench.testing.tiny` (session scope, read-only use).
- `tiny_engine`: a `TransformersEngine` on `tiny_lm` (CPU, batch_size 4; session scope, so
  do not change its attributes in a test).
- `fake_openai`: a factory for `prbench.testing.openai_server.serve(...)`; servers stop at teardown.
- `api_key_env`: sets a throwaway API key in a fresh environment variable; yields (name, key).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the Hub
# One intra-op thread unless told otherwise: test models are tiny, and on a shared or busy
# machine OpenMP threads spin against each other (measured: 20-50x slower generation with 2).
# Must be set before torch is first imported; override with OMP_NUM_THREADS=N.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
# Every Ray the tests start (prbench's local Ray, the `ray start` head) binds to 127.0.0.1: Ray 2.60
# turns a loopback node address into the machine's external one (`ray/_private/services.py`,
# `resolve_ip_for_localhost` -> `get_node_ip_address`) unless ENABLE_RAY_CLUSTER is off
# (`ray/_private/ray_constants.py`, read at import: set before ray is first imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from prbench.testing.tiny import make_tiny_causal_lm

    return make_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm"), seed=0)


@pytest.fixture(scope="session")
def tiny_lm_qwen2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from prbench.testing.tiny import make_tiny_causal_lm

    return make_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm_qwen2"), seed=0, arch="qwen2")


@pytest.fixture(scope="session")
def tiny_lm_plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from prbench.testing.tiny import make_tiny_causal_lm

    return make_tiny_causal_lm(
        tmp_path_factory.mktemp("tiny_lm_plain"), seed=0, chat_template=False, pad_token=False
    )


@pytest.fixture(scope="session")
def tiny_rm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from prbench.testing.tiny import make_tiny_seq_classifier

    return make_tiny_seq_classifier(tmp_path_factory.mktemp("tiny_rm"), num_labels=1, seed=0)


@pytest.fixture(scope="session")
def tiny_engine(tiny_lm: Path) -> Any:
    from prbench.engines.transformers_engine import TransformersEngine

    return TransformersEngine(str(tiny_lm), device="cpu", batch_size=4)


@pytest.fixture()
def fake_openai() -> Iterator[Callable[..., Any]]:
    from prbench.testing.openai_server import serve

    with contextlib.ExitStack() as stack:

        def start(*args: Any, **kwargs: Any) -> Any:
            return stack.enter_context(serve(*args, **kwargs))

        yield start


@pytest.fixture()
def api_key_env(monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    name = f"PRBENCH_TEST_KEY_{uuid.uuid4().hex[:8].upper()}"
    key = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv(name, key)
    return name, key
