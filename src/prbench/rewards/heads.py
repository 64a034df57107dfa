"""What the frozen-encoder personalized RMs (LoRe, VPL) share: folder format, user evidence, identity.

A head folder is `config.json` + `model.safetensors` (safetensors only: loading never runs
pickled code) + `prbench_rm.json` (`kind`, `loads_as`) + `train_log.jsonl`, and `protocol.json`
when the trainer measured seen vs unseen users. `HeadReward` gives each kind the same
user handling: the user a view stands for (`view.user_id`; none under `none`), the posts it
shows (the evidence of the profile condition), the history pairs it shows (fitted as shots),
few-shot `adapt(user, pairs)` that replaces earlier shots of that user, the set of training
users (for the seen/unseen split of an eval), and a fingerprint over weights and adaptations.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prbench.context.conditions import View
from prbench.errors import PrbenchError
from prbench.rewards.base import PointwiseRM
from prbench.rewards.pal import Embedder, context_items, shots_key, shown_pairs, view_user
from prbench.runtime.extras import require
from prbench.specs import RMOptions, local_path
from prbench.store.cache import Cache, content_key

CONFIG_FILE, WEIGHTS_FILE, META_FILE, PROTOCOL_FILE = "config.json", "model.safetensors", "prbench_rm.json", "protocol.json"


def save_head(out: str | Path, config: dict[str, Any], module: Any, *, kind: str) -> Path:
    """Write the folder; `loads_as` names the spec to evaluate it with (`<dir>` = this folder)."""
    from safetensors.torch import save_file

    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    (path / CONFIG_FILE).write_text(json.dumps(config, indent=1, ensure_ascii=False), encoding="utf-8")
    save_file({k: v.detach().contiguous() for k, v in module.state_dict().items()}, str(path / WEIGHTS_FILE))
    (path / META_FILE).write_text(json.dumps(
        {"kind": kind, "loads_as": f"{kind}:<dir>", "condition": config.get("condition"),
         "encoder": config["encoder"], "trained_users": len(config.get("users", []))}, indent=1), encoding="utf-8")
    return path


def load_head(path: str | Path, kind: str, build: Callable[[dict[str, Any]], Any]) -> tuple[dict[str, Any], Any]:
    """(config, module in eval mode); a folder of another kind is refused with the spec to use."""
    from prbench.manifest import load_weights, verify
    from prbench.rewards.folders import require_folder

    p = Path(path)
    require_folder(f"{kind}:{path}", p, kind)
    verify(p, f"{kind}:{path}")
    if not (p / CONFIG_FILE).is_file() or not (p / WEIGHTS_FILE).is_file():
        raise PrbenchError(f"{kind}:{path}: expected {CONFIG_FILE} and {WEIGHTS_FILE} (train with `prbench train {kind}`)")
    config = json.loads((p / CONFIG_FILE).read_text(encoding="utf-8"))
    if config.get("arch") != kind:
        meta = read_meta(p)
        hint = f"; load it as {meta['loads_as'].replace('<dir>', str(path))}" if meta.get("loads_as") else ""
        raise PrbenchError(f"{kind}:{path}: this folder holds a {config.get('arch')!r} model, not {kind}{hint}")
    module = build(config)
    load_weights(module, p / WEIGHTS_FILE, f"{kind}:{path}")
    return config, module.eval()


def read_meta(path: str | Path) -> dict[str, Any]:
    try:
        return json.loads((Path(path) / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def read_protocol(path: str | Path) -> dict[str, Any] | None:
    p = Path(path) / PROTOCOL_FILE
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


class HeadOptions(RMOptions):
    """Options of a trained head: an embedding cache, and a pairs file whose unseen users are fitted at load."""

    encoder_cache: Any = None  # a prbench.store.cache.Cache
    adapt: str | None = None


class HeadReward(PointwiseRM):
    """Base of LoRe / VPL rewards: loading, user identity, evidence, adaptation bookkeeping."""

    kind_name = ""
    adaptable = True  # has per-user state that k labelled pairs can set (the k-shot protocol uses it)
    options_model = HeadOptions
    resolve_spec = staticmethod(lambda rest, root: local_path(rest, root, False))

    def adapt(self, user: str, pairs: Sequence[Any]) -> None:
        """Set `user`'s state from exactly these labelled pairs (each method its own way; none: the prior)."""
        raise NotImplementedError(f"{type(self).__name__} does not define adapt()")

    def __init__(self, path: str, spec: str | None = None, encoder_cache: Cache | None = None,
                 adapt: str | None = None, **_: Any):
        self.path = str(path)
        self.spec = spec or f"{self.kind_name}:{path}"
        self.config, self.model = load_head(path, self.kind_name, self.build)
        self.embed = Embedder(self.config["encoder"], cache=encoder_cache)
        self.users: dict[str, int] = {u: i for i, u in enumerate(self.config.get("users", []))}
        self.adapted: dict[str, Any] = {}
        self.fitted: dict[str, Any] = {}  # history shots -> state (`history_states`)
        self.counts = {"unknown_user": 0, "no_evidence": 0, "from_history": 0}
        if adapt:
            from prbench.data.pairs import load_pairs

            pairs = load_pairs(adapt)
            for user in dict.fromkeys(p.user_id for p in pairs):
                if user not in self.users:
                    self.adapt(user, [p for p in pairs if p.user_id == user])

    build: Callable[[dict[str, Any]], Any]

    # ---- identity and evidence

    @staticmethod
    def user_of(view: View) -> str | None:
        return view_user(view)

    @staticmethod
    def posts_of(view: View) -> list[str]:
        """Profile evidence; a history view's pairs are shots (`history_states`), not posts."""
        return [] if view.pairs else context_items(view)

    def user_rows(self, views: Sequence[View], trained: Any, fallback: Any) -> list[Any]:
        """Per view, the user's state: fitted on the history it shows, else adapted with `adapt`, else the
        training row `trained[i]`, else `fallback` (counted as an unknown user, or no evidence without a user)."""
        torch = require("torch", "hf")
        rows = []
        for v, shots in zip(views, self.history_states(views)):
            u = self.user_of(v)
            if shots is not None:
                rows.append(shots)
            elif u in self.adapted:
                rows.append(torch.as_tensor(self.adapted[u]))
            elif u in self.users:
                rows.append(trained[self.users[u]])
            else:
                self.counts["unknown_user" if u is not None else "no_evidence"] += 1
                rows.append(fallback)
        return rows

    def history_states(self, views: Sequence[View]) -> list[Any]:
        """Per view, the per-user state fitted on the history pairs it shows (None where it shows none).

        Under `history` the shown pairs ARE the user's evidence, fitted as `adapt` fits k shots,
        and any stored state of that user is set aside: the condition decides what the RM knows,
        so `wrong-history` stays a real control for training users too. Memoised by content.
        """
        keys = [shots_key(shown_pairs(v)) if v.pairs else None for v in views]
        new = {k: shown_pairs(v) for k, v in zip(keys, views) if k is not None and k not in self.fitted}
        if new:
            self.fitted.update(zip(new, self.fit_shots(list(new.values()))))
        self.counts["from_history"] += sum(k is not None for k in keys)
        return [None if k is None else self.fitted[k] for k in keys]

    def fit_shots(self, shot_lists: Sequence[Sequence[Any]]) -> list[Any]:
        """One state per list of labelled pairs (prompt, chosen, rejected); each kind fits its own."""
        raise NotImplementedError

    @property
    def view_top_k(self) -> int | None:
        """The profile items the trainer asked each view to show (`prbench.rewards.base.view_top_k`), if any."""
        return self.config.get("view_top_k")

    def seen_users(self) -> set[str]:
        """Users the weights were trained on (the eval's seen/unseen split reads this)."""
        return set(self.users)

    def _tensor(self, texts: Sequence[str]):
        torch = require("torch", "hf")
        return torch.from_numpy(self.embed(list(texts)))

    # ---- cache identity and summaries

    def fingerprint(self) -> dict[str, Any]:
        digest = hashlib.sha256((Path(self.path) / WEIGHTS_FILE).read_bytes()).hexdigest()[:16]
        adapted = content_key({u: _plain(v) for u, v in sorted(self.adapted.items())})[:16]
        return {"spec": self.spec, "arch": self.kind_name, "weights": digest, "adapted": adapted,
                "encoder": self.config["encoder"]}

    def run_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"arch": self.kind_name, "trained_users": len(self.users),
                                "adapted_users": len(self.adapted), "condition": self.config.get("condition"),
                                "scored_unknown_user": self.counts["unknown_user"],
                                "scored_without_evidence": self.counts["no_evidence"],
                                "scored_from_history": self.counts["from_history"]}
        protocol = read_protocol(self.path)
        if protocol is not None:
            info["protocol"] = protocol
        return info


def _plain(v: Any) -> Any:
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in sorted(v.items())}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v
