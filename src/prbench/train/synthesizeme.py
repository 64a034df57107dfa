"""SynthesizeMe "training" (`prbench.rewards.synthesizeme` for the method): a verified persona per training user.

Nothing is fitted by gradient: each training user's persona is induced and verified on their
own pairs with the engine and judge the settings name, and stored in `personas.json` with its
held-out accuracy. The folder loads as `synthesizeme:<dir>`; new users are induced at scoring
time from their k shots (`adapt`) or from shown history pairs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from prbench.cache import Cache
from prbench.config import SynthesizeMeConfig
from prbench.data.pairs import PreferencePair
from prbench.errors import PrbenchError
from prbench.rewards.synthesizeme import PERSONAS_FILE, Synthesizer, open_parts
from prbench.train import TrainResult, user_index, write_log
from prbench.version import __version__


def train_synthesizeme(pairs: Sequence[PreferencePair], out: str | Path, config: SynthesizeMeConfig | None = None, *,
                       cache: Cache | None = None) -> TrainResult:
    cfg = config or SynthesizeMeConfig()
    if not pairs:
        raise PrbenchError("train_synthesizeme: no training pairs")
    settings = {"arch": "synthesizeme", **cfg.model_dump(),
                "engine_options": {"base_url": cfg.base_url, "api_key_env": cfg.api_key_env}}
    engine, judge = open_parts(settings)
    synth = Synthesizer(engine, judge, settings)
    users, _ = user_index(pairs)
    personas, log = {}, []
    for i, user in enumerate(users, 1):
        personas[user] = synth.synthesize(user, [p for p in pairs if p.user_id == user])
        log.append({"epoch": i, "user": user, "loss": 0.0, "accuracy": personas[user]["verify_accuracy"]})
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    settings.update({"users": users, "train": {"pairs": len(pairs), "users": len(users), "prbench": __version__}})
    (out / "config.json").write_text(json.dumps(settings, indent=1), encoding="utf-8")
    (out / PERSONAS_FILE).write_text(json.dumps(personas, indent=1, ensure_ascii=False), encoding="utf-8")
    (out / "prbench_rm.json").write_text(json.dumps({"kind": "synthesizeme", "loads_as": "synthesizeme:<dir>",
                                                     "engine": cfg.engine, "trained_users": len(users)}, indent=1),
                                         encoding="utf-8")
    write_log(out, log)
    return TrainResult(out, log)
