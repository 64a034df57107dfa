"""One table of trainable personalized RMs, and the driver every `prbench train <method>` goes through.

`train_method` (1) cuts the data by the protocol (seen/unseen users x train/test items),
trains the method on the seen part and measures it (`prbench.train.protocol`), (2) trains the
final model on all pairs (`refit`, the default except for `finetune`, where the protocol
model is kept to save a second fine-tuning run), and (3) writes `protocol.json` beside the
weights, so `prbench eval` shows the protocol in the run summary and warns about a model that
fits its training users far better than unseen ones. Too little data for the protocol (fewer
than 4 users) is said in `protocol.json`, never silently skipped.

`prbench train --data D --out DIR` (no method named) trains the method that cross-validation over
the people of D recommends (`prbench.train.recommend`); DEFAULT_METHOD only when D has too few
people to cross-validate: the method with the best unseen-user accuracy on real persona text (the
DSP persona split, benchmarks/real_text.py; numbers in benchmarks/RESULTS_methods.md and
docs/methods.md).
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

from prbench.config import Settings
from prbench.data.pairs import PreferencePair
from prbench.errors import PrbenchError
from prbench.registry import BUILTIN_METHODS, REWARDS, Registry, resolve
from prbench.store.cache import Cache
from prbench.train import TrainResult
from prbench.train.protocol import ProtocolConfig, ProtocolReport, headline, run_protocol, split_protocol

DEFAULT_METHOD = "style"  # what runs when the data has too few users for the recommendation's folds


@dataclass(frozen=True)
class Method:
    """One trainable personalized RM: how to train it, its settings, the RM prefix its folder loads with.

    Each built-in trainer module declares its own `METHOD` (train/lore.py ...), listed in
    `prbench.registry.BUILTIN_METHODS`. A plug-in declares one in its entry points:
    `[project.entry-points."prbench.methods"] mine = "pkg.mod:METHOD"`; `prbench train mine` is then a
    command (from `config`'s fields) and the recommendation can measure it. `train`, `config` and `rm`
    are the objects, or their "module:attr" targets. `cost` orders methods for ties (lower is cheaper;
    about CPU minutes for a few hundred users); `recommend` puts it among the default candidates of
    `prbench train` with no method named.
    """

    name: str
    train: str | Callable[..., TrainResult]  # the trainer, or its "module:function"
    config: str | type[Settings]  # its `prbench.config.Settings` model, or its "module:Class"
    spec: str  # the RM prefix its folder loads with
    doc: str = ""  # the CLI command's help
    refit: bool = True
    cost: float = 1.0
    recommend: bool = False
    command: bool = True  # `prbench train NAME` is its settings model and nothing else (bt, pal have their own)
    rm: str | Callable[..., Any] | None = None  # its RM factory, if REWARDS has none: folders load as `spec:FOLDER`

    def load(self) -> tuple[Callable[..., TrainResult], Any]:
        return resolve(self.train), self.settings()

    def settings(self) -> Any:
        """The settings model (a plug-in's by its target: the CLI builds a command from it)."""
        return resolve(self.config)


class MethodRegistry(Registry):
    """The training methods: the built-ins `prbench.registry.BUILTIN_METHODS` lists, plug-ins from the
    `prbench.methods` entry-point group."""

    def __getitem__(self, name: str) -> Method:
        method = self.get(name)
        if not isinstance(method, Method):
            raise PrbenchError(f"training method {name!r}: its entry point gives a {type(method).__name__}, "
                               "not a prbench.train.methods.Method")
        return method

    def register(self, name: str, target: Any = None) -> Any:
        """As `Registry.register`; a Method that names its RM (`rm`) registers that too, under its `spec`."""
        if isinstance(target, Method) and target.rm and target.spec not in REWARDS:
            REWARDS.register(target.spec, target.rm)
        return super().register(name, target)

    def unregister(self, name: str) -> None:
        method = self._added.get(name)
        if isinstance(method, Method) and method.rm:
            REWARDS.unregister(method.spec)
        super().unregister(name)

    def methods(self) -> list[Method]:
        return [self[name] for name in self.names()]


METHODS = MethodRegistry("training method", "prbench.methods", BUILTIN_METHODS)


def make_config(method: str, options: dict[str, Any]) -> Any:
    """The method's settings with `options` set (None: the default); an unknown option names the closest."""
    if method not in METHODS:
        raise PrbenchError(METHODS.unknown(method))
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
    recommendation: Any = None,
) -> tuple[TrainResult, ProtocolReport]:
    """Train `method` with the protocol (see module docstring); returns (result, what protocol.json holds).

    `recommendation`: the `prbench.train.recommend.Recommendation` that chose `method`, recorded in
    `protocol.json` beside the protocol's numbers."""
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
    if recommendation is not None:
        report["recommendation"] = recommendation.model_dump(mode="json")
    if run_protocol_check:
        try:
            split = split_protocol(pairs, pcfg, item_key=item_key) if item_key else split_protocol(pairs, pcfg)
        except PrbenchError as exc:
            split = None
            report["skipped"] = f"protocol not run: {exc}"
            warnings.warn(report["skipped"], stacklevel=2)
        if split is not None:
            scratch = Path(tempfile.mkdtemp(prefix="prbench-protocol-"))
            try:
                fn(split.train, scratch / "model", cfg, cache=cache)
                if not is_main_process():  # a launched run's other ranks train; rank 0 measures and writes
                    return TrainResult(out), ProtocolReport.model_validate(report)
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
            return result, ProtocolReport.model_validate(report)
    else:
        from prbench.train import read_log

        result = TrainResult(out, read_log(out))
        report["trained_on"] = "seen users x train items only (no refit)"
    typed = ProtocolReport.model_validate(report)
    (out / "protocol.json").write_text(json.dumps(typed.dump(), indent=1, default=str), encoding="utf-8")
    from prbench.manifest import seal

    seal(out)
    return result, typed


def _rm_options(method: str, cache: Cache | None) -> dict[str, Any]:
    if METHODS[method].spec == "finetune":
        return {"device": "cpu"}
    if METHODS[method].spec == "synthesizeme":
        return {}
    return {"encoder_cache": cache} if cache is not None else {}


def options_for(method: str, options: dict[str, Any]) -> dict[str, Any]:
    """The common options (seed, encoder ...) that `method`'s settings have; the others are not its own."""
    fields = METHODS[method].settings().model_fields
    return {k: v for k, v in options.items() if k in fields}
