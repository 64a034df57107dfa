"""`finetune:<dir>`: a folder written by `prbench train finetune`, scored as a sequence classifier.

The same scoring as `hf:<dir>` (one-step chat templating, counted truncation), plus what the
training run recorded: the training users (so an eval splits seen from unseen users) and the
protocol numbers (`protocol.json`) in the run summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prbench.errors import PrbenchError
from prbench.rewards.classifier import ClassifierOptions, SequenceClassifierRM
from prbench.rewards.heads import read_meta, read_protocol
from prbench.specs import Kind, local_path


class FinetunedRM(SequenceClassifierRM):
    def __init__(self, path: str, spec: str | None = None, **options: Any):
        super().__init__(path, spec=spec or f"finetune:{path}", **options)
        self.meta = read_meta(path)

    def seen_users(self) -> set[str]:
        return set(self.meta.get("users", []))

    def run_info(self) -> dict[str, Any]:
        info = {**super().run_info(), "arch": "finetune", "trained_users": len(self.seen_users()),
                "family": self.meta.get("family")}
        protocol = read_protocol(self.path)
        if protocol is not None:
            info["protocol"] = protocol
        return info

    @property
    def path(self) -> str:
        return self.model_id


def _load_finetuned(rest: str, **options: Any) -> FinetunedRM:
    from prbench.rewards.folders import require_folder

    require_folder(f"finetune:{rest}", rest, "finetune")
    if not (Path(rest) / "prbench_rm.json").is_file():
        raise PrbenchError(f"finetune:{rest}: no prbench_rm.json (train with `prbench train finetune`)")
    from prbench.manifest import verify

    verify(rest, f"finetune:{rest}")
    return FinetunedRM(rest, **options)


load_finetuned = Kind(_load_finetuned, model_class=lambda rest: FinetunedRM, options_model=ClassifierOptions,
                      resolve_spec=lambda rest, root: local_path(rest, root, False))

