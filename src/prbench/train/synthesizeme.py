"""SynthesizeMe "training" (`prbench.rewards.synthesizeme` for the method): a verified persona per training user.

Nothing is fitted by gradient: each training user's persona is induced and verified on their
own pairs with the engine and judge the settings name, and stored in `personas.json` with its
held-out accuracy. The folder loads as `synthesizeme:<dir>`; new users are induced at scoring
time from their k shots (`adapt`) or from shown history pairs.

Each user costs tens of engine calls (an API bill, or minutes of a local LLM), so every finished
user is appended to `.personas.partial.jsonl` in the folder as it completes: a rerun with the
same settings and the same pairs of that user reuses it (a half-written last line is dropped),
and the file goes once `personas.json` is written.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from prbench.config import EngineAccess, MethodView, count, field_of, opt
from prbench.data.pairs import PreferencePair
from prbench.errors import PrbenchError
from prbench.rewards.synthesizeme import PERSONAS_FILE, Synthesizer, open_parts
from prbench.runtime.progress import beat
from prbench.store.cache import Cache, content_key
from prbench.train import TrainResult, user_index, write_log
from prbench.train.methods import Method
from prbench.version import __version__


class SynthesizeMeConfig(MethodView):
    """SynthesizeMe: an LLM induces each user's persona from their pairs, verified on held-out pairs; a judge reads it."""

    engine: str = opt("builtin:smollm2-135m-instruct", "Engine that induces personas and judges (any judge: engine).",
                      metavar="SPEC")
    candidates: int = count(3, "Persona candidates drawn per user (the best on held-out pairs is kept).", 64)
    verify_share: float = opt(0.5, "Share of a user's pairs held out to verify the candidates.", ge=0, lt=1)
    max_shots: int = count(8, "Most pairs shown to the engine when inducing.", 4096)
    max_chars: int = count(600, "Characters kept of each question and answer in the induction prompt.", 10**6)
    max_new_tokens: int = count(160, "Token limit of a persona.", 1 << 16)
    judge_tokens: int = count(128, "Token limit of a judge's reply.", 1 << 16)
    judge_route: Literal["auto", "text", "likelihood"] = opt(
        "auto", "How the judge's score is read: text (it writes 'Score: N'), likelihood (expected digit from its "
                "first-token probabilities), auto (likelihood for local engines, text for API judges).", metavar="NAME")
    base_url: str | None = field_of(EngineAccess, "base_url")
    api_key_env: str | None = field_of(EngineAccess, "api_key_env")


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
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    done = _Finished(out / PARTIAL_FILE, content_key({k: v for k, v in settings.items() if k != "engine_options"},
                                                    (settings["engine_options"] or {}).get("base_url")))
    personas: dict[str, dict[str, Any]] = {}
    log: list[dict[str, Any]] = []
    for i, user in enumerate(users, 1):
        mine = [p for p in pairs if p.user_id == user]
        persona = done.get(user, mine)
        if persona is None:
            beat(f"synthesizeme: persona of user {i}/{len(users)} ({user})")
            persona = done.add(user, mine, synth.synthesize(user, mine))
        personas[user] = persona
        log.append({"epoch": i, "user": user, "loss": 0.0, "accuracy": personas[user]["verify_accuracy"]})
    unread = [u for u in users if personas[u].get("verified_on") and personas[u]["verify_accuracy"] is None]
    if unread:  # the judge gave no readable score on any held-out pair of these users: their personas are unverified
        warnings.warn(f"synthesizeme: the judge ({cfg.engine}) gave no readable score on the held-out pairs of "
                      f"{len(unread)} of {len(users)} users, so their personas are unverified and scoring with this "
                      "judge will count its replies as parse failures; use a judge that follows the score format",
                      stacklevel=2)
    settings.update({"users": users, "unverified_users": len(unread),
                     "train": {"pairs": len(pairs), "users": len(users), "prbench": __version__}})
    (out / "config.json").write_text(json.dumps(settings, indent=1), encoding="utf-8")
    (out / PERSONAS_FILE).write_text(json.dumps(personas, indent=1, ensure_ascii=False), encoding="utf-8")
    (out / "prbench_rm.json").write_text(json.dumps({"kind": "synthesizeme", "loads_as": "synthesizeme:<dir>",
                                                     "engine": cfg.engine, "trained_users": len(users)}, indent=1),
                                         encoding="utf-8")
    (out / PARTIAL_FILE).unlink(missing_ok=True)
    write_log(out, log)
    return TrainResult(out, log)


PARTIAL_FILE = ".personas.partial.jsonl"  # hidden: the manifest and fingerprints never read it


class _Finished:
    """The users a killed run finished (see module docstring), keyed by settings and the user's pairs."""

    def __init__(self, path: Path, settings_key: str):
        self.path, self.key, self.found = path, settings_key, {}
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # the line a kill cut short
                if isinstance(row, dict) and row.get("settings") == settings_key:
                    self.found[(row.get("user"), row.get("pairs"))] = row.get("result")

    @staticmethod
    def _pairs_key(pairs: Sequence[PreferencePair]) -> str:
        return content_key(sorted((p.key, p.prompt, p.chosen, p.rejected) for p in pairs))

    def get(self, user: str, pairs: Sequence[PreferencePair]) -> dict[str, Any] | None:
        return self.found.get((user, self._pairs_key(pairs)))

    def add(self, user: str, pairs: Sequence[PreferencePair], result: dict[str, Any]) -> dict[str, Any]:
        row = {"settings": self.key, "user": user, "pairs": self._pairs_key(pairs), "result": result}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return result


METHOD = Method("synthesizeme", train_synthesizeme, SynthesizeMeConfig, "synthesizeme",
                "Train SynthesizeMe. An LLM induces and verifies each user's persona; a judge reads it; "
                "synthesizeme:OUT.", cost=100)
