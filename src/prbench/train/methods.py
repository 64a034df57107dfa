"""One table of trainable personalized RMs, and the driver every `prbench train <method>` goes through.

`train_method` (1) cuts the data by the protocol (seen/unseen users x train/test items),
trains the method on the seen part and measures it (`prbench.train.protocol`), (2) trains the
final model on all pairs (`refit`, the default except for `finetune`, where the protocol
model is kept to save a second fine-tuning run), and (3) writes `protocol.json` beside the
weights, so `prbench eval` shows the protocol in the run summary and warns about a model that
fits its training users far better than unseen ones. Too little data for the protocol (fewer
than 4 users) is said in `protocol.json`, never silently skipped.

DEFAULT_METHOD is what `prbench train --data D --out DIR` trains: the method with the best
unseen-user accuracy on real persona text (the DSP persona split of `prbench.data.dsp_personas`,
benchmarks/real_text.py; numbers in benchmarks/RESULTS_methods.md and docs/methods.md), where
it also holds on the synthetic persona check (benchmarks/train_methods.py --check).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prbench.cache import Cache
from prbench.data.pairs import PreferencePair
from prbench.errors import PrbenchError
from prbench.train import TrainResult
from prbench.train.protocol import ProtocolConfig, headline, run_protocol, split_protocol

DEFAULT_METHOD = "style"


@dataclass(frozen=True)
class Method:
    name: str
    train: str  # "module:function"
    config: str  # "module:Class", a `prbench.config.Settings` model
    spec: str  # the RM prefix its folder loads with
    refit: bool = True

    def load(self) -> tuple[Callable[..., TrainResult], type]:
        from prbench.registry import resolve

        return resolve(self.train), resolve(self.config)


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("lore", "prbench.train.lore:train_lore", "prbench.config:LoReConfig", "lore"),
    Method("style", "prbench.train.style:train_style", "prbench.config:StyleConfig", "style"),
    Method("pref", "prbench.train.pref:train_pref", "prbench.config:PReFConfig", "pref"),
    Method("gpo", "prbench.train.gpo:train_gpo", "prbench.config:GPOConfig", "gpo"),
    Method("synthesizeme", "prbench.train.synthesizeme:train_synthesizeme", "prbench.config:SynthesizeMeConfig",
           "synthesizeme"),
    Method("vpl", "prbench.train.vpl:train_vpl", "prbench.config:VPLConfig", "vpl"),
    Method("pal", "prbench.train.pal:train_pal", "prbench.config:PALConfig", "pal"),
    Method("context-bt", "prbench.train.bt:train_context_bt", "prbench.config:ContextBTConfig", "pal"),
    Method("finetune", "prbench.train.finetune:train_finetune", "prbench.config:FinetuneConfig", "finetune",
           refit=False),
)}


def make_config(method: str, options: dict[str, Any]) -> Any:
    """The method's settings with `options` set (None: the default); an unknown option names the closest."""
    if method not in METHODS:
        from prbench.registry import Registry

        raise PrbenchError(Registry("training method", "-", dict.fromkeys(METHODS, "")).unknown(method))
    _, cls = METHODS[method].load()
    return cls.build(**{k: v for k, v in options.items() if v is not None})


def spec_for(method: str, folder: str | Path) -> str:
    return f"{METHODS[method].spec}:{folder}"


def train_method(
    method: str,
    pairs: Sequence[PreferencePair],
    out: str | Path,
    options: dict[str, Any] | None = None,
    *,
    protocol: ProtocolConfig | None = None,
    run_protocol_check: bool = True,
    refit: bool | None = None,
    item_key: Callable[[PreferencePair], str] | None = None,
    cache: Cache | None = None,
) -> tuple[TrainResult, dict[str, Any]]:
    """Train `method` with the protocol (see module docstring); returns (result, protocol dict)."""
    from prbench.rewards import load_rm
    from prbench.train import is_main_process, launched

    cfg = make_config(method, dict(options or {}))
    fn, _ = METHODS[method].load()
    out = Path(out)
    condition = getattr(cfg, "condition", "profile")
    if method == "pal":
        condition = "profile"  # PAL ignores context; the protocol still shows it the same views
    pcfg = protocol or ProtocolConfig(condition=condition if condition != "none" else "profile",
                                      top_k=getattr(cfg, "top_k", None) or 10, seed=getattr(cfg, "seed", 0))
    refit = METHODS[method].refit if refit is None else refit
    if refit and run_protocol_check and launched():  # two trainings: the launcher's process group ends after one
        raise PrbenchError(f"{method} under torchrun / accelerate launch trains once: add --no-refit (keep the "
                           "protocol's model) or --no-protocol")
    report: dict[str, Any] = {"method": method, "refit": refit}
    if run_protocol_check:
        try:
            split = split_protocol(pairs, pcfg, **({"item_key": item_key} if item_key else {}))
        except PrbenchError as exc:
            split = None
            report["skipped"] = f"protocol not run: {exc}"
            warnings.warn(report["skipped"], stacklevel=2)
        if split is not None:
            scratch = Path(tempfile.mkdtemp(prefix="prbench-protocol-"))
            try:
                fn(split.train, scratch / "model", cfg, cache=cache)
                if not is_main_process():  # a launched run's other ranks train; rank 0 measures and writes
                    return TrainResult(out), report
                rm = load_rm(spec_for(method, scratch / "model"), **_rm_options(method, cache))
                report.update(run_protocol(rm, split, pcfg, encoder=getattr(cfg, "encoder", None)))
                report["headline"] = headline(report)
                if not refit:
                    if out.exists():
                        shutil.rmtree(out)
                    shutil.copytree(scratch / "model", out)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    if refit or "headline" not in report:
        result = fn(pairs, out, cfg, cache=cache)
        if not is_main_process():
            return result, report
    else:
        from prbench.train import read_log

        result = TrainResult(out, read_log(out))
        report["trained_on"] = "seen users x train items only (no refit)"
    (out / "protocol.json").write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    from prbench.manifest import seal

    seal(out)
    return result, report


def _rm_options(method: str, cache: Cache | None) -> dict[str, Any]:
    if METHODS[method].spec == "finetune":
        return {"device": "cpu"}
    if METHODS[method].spec == "synthesizeme":
        return {}
    return {"encoder_cache": cache} if cache is not None else {}
