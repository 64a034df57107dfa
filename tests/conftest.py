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


# -- personalized-method tests (test_methods.py, test_persona_methods.py) ---------------------------


@pytest.fixture(scope="session")
def minilm_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """MiniLM embeddings in pytest's cache folder: every method test and every run pays the encoder once."""
    from prbench.store.cache import Cache

    pc = getattr(request.config, "cache", None)
    base = pc.mkdir("prbench-embeddings") if pc is not None else tmp_path_factory.mktemp("emb")
    return Cache(Path(base) / "minilm.sqlite", namespace="embeddings")


@pytest.fixture(scope="session")
def planted_config() -> Any:
    """The protocol the planted-user method tests run: few k values and draws, so a method takes seconds."""
    from prbench.train.protocol import ProtocolConfig

    return ProtocolConfig(ks=(0, 2, 8), draws=2, holdout_users=0.3, n_boot=200)


@pytest.fixture(scope="session")
def planted(planted_config: Any) -> Any:
    """Planted-preference users (`synth_users`: diet, mood, social) split by the protocol, twins kept together."""
    from prbench.data.pairs import pairs_from_examples
    from prbench.data.synth_users import synth_examples, twin_group
    from prbench.train.protocol import split_protocol

    pairs = pairs_from_examples(synth_examples(40, 16, seed=0, dimensions=("diet", "mood", "social")))
    return split_protocol(pairs, planted_config, user_group=twin_group)


@pytest.fixture()
def method_protocol(minilm_cache: Any, planted_config: Any, tmp_path: Path) -> Callable[..., tuple[dict, Any]]:
    """`run(method, split, **options)`: train on the split's training users, run the protocol on the
    trained RM; returns (report with the warnings it raised under `caught`, the RM)."""
    import warnings

    from prbench.rewards import load_rm
    from prbench.train.methods import METHODS, make_config, spec_for
    from prbench.train.protocol import run_protocol

    def run(method: str, split: Any, **options: Any) -> tuple[dict, Any]:
        fn, _ = METHODS[method].load()
        fn(split.train, tmp_path / method, make_config(method, options), cache=minilm_cache)
        rm = load_rm(spec_for(method, tmp_path / method), encoder_cache=minilm_cache)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rep = run_protocol(rm, split, planted_config)
        rep["caught"] = [str(w.message) for w in caught]
        return rep, rm

    return run
