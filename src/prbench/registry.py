"""Named registries: one per extension point (reward models, engines, graders, retrievers,
data formats, study stages, run kinds) and the built-in training methods.

A kind is found by the prefix of its spec string (`hf:DIR` -> the `hf` entry). Each entry is a
lazy `"module:attr"` target, so naming a kind imports nothing until it is used. Built-in kinds
are listed here in the same form third-party packages use in their entry points
(`[project.entry-points."prbench.rewards"] myrm = "mypkg.rm:build"`), so both go through one
code path. A factory is called as `factory(rest, **options)`, `rest` being the spec after the
first colon.

This module imports no concrete class: targets are strings until `get` resolves them.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prbench.errors import SpecError

Factory = Callable[..., Any]


@dataclass
class Registry:
    """Names -> factories for one extension point, with entry-point plug-ins."""

    kind: str  # what an entry is, for messages ("reward model", "engine", ...)
    group: str  # the entry-point group third-party packages declare
    builtins: dict[str, str] = field(default_factory=dict)
    _added: dict[str, str | Factory] = field(default_factory=dict, repr=False)
    _plugins: dict[str, Any] | None = field(default=None, repr=False)  # name -> EntryPoint
    _resolved: dict[str, Factory] = field(default_factory=dict, repr=False)

    def register(self, name: str, target: str | Factory | None = None) -> Any:
        """Add a kind: `register("x", "pkg.mod:build")`, `register("x", build)` or `@register("x")`."""
        if target is None:
            def wrap(fn: Factory) -> Factory:
                self.register(name, fn)
                return fn
            return wrap
        if name in self.builtins:
            raise SpecError(f"{self.kind} {name!r} is built in; choose another name")
        self._added[name] = target
        self._resolved.pop(name, None)
        return target

    def unregister(self, name: str) -> None:
        self._added.pop(name, None)
        self._resolved.pop(name, None)

    def plugins(self) -> dict[str, Any]:
        """Entry points of installed distributions in this registry's group (read once)."""
        if self._plugins is None:
            from importlib.metadata import entry_points

            self._plugins = {ep.name: ep for ep in entry_points(group=self.group)}
        return self._plugins

    def refresh(self) -> None:
        """Forget what was read from installed distributions (after installing one at run time)."""
        self._plugins = None
        self._resolved = {k: v for k, v in self._resolved.items() if k in self.builtins or k in self._added}

    def names(self) -> list[str]:
        return sorted({*self.builtins, *self._added, *self.plugins()})

    def added_names(self) -> list[str]:
        """The names not built in: registered in this process or installed as plug-ins."""
        return sorted({*self._added, *self.plugins()} - set(self.builtins))

    def __contains__(self, name: str) -> bool:
        return name in self.builtins or name in self._added or name in self.plugins()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> Factory:
        """The factory registered as `name`; an unknown name lists the known ones."""
        if name in self._resolved:
            return self._resolved[name]
        if name in self.builtins:
            target: Any = self.builtins[name]
        elif name in self._added:
            target = self._added[name]
        elif name in self.plugins():
            ep = self.plugins()[name]
            try:
                target = ep.load()
            except Exception as e:  # a broken plug-in must say which one it is
                dist = getattr(getattr(ep, "dist", None), "name", "?")
                raise SpecError(f"{self.kind} plug-in {name!r} ({ep.value}, from {dist}) failed to load: "
                                f"{type(e).__name__}: {e}") from e
        else:
            raise SpecError(self.unknown(name))
        factory = resolve(target)
        self._resolved[name] = factory
        return factory

    def unknown(self, name: str, extra: list[str] | None = None) -> str:
        """The message for an unknown name: the known ones and the closest match."""
        known = sorted({*self.names(), *(extra or [])})
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"unknown {self.kind} {name!r} (known: {', '.join(known)}){hint}"

    def build(self, spec: str, **options: Any) -> Any:
        """`prefix:rest` -> `factory(rest, **options)`."""
        prefix, _, rest = spec.partition(":")
        return self.get(prefix)(rest, **options)


def resolve(target: str | Any) -> Any:
    """`"package.module:attr"` -> the object; anything else is the object itself (a run kind's direct reference)."""
    if not isinstance(target, str):
        return target
    module, sep, attr = target.partition(":")
    if not sep:
        raise SpecError(f"registry target {target!r} must be 'module:attr'")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj



@dataclass
class DerivedRegistry(Registry):
    """A registry that also lists entries another extension point declares (a training method's RM, a run kind's
    stage): `derive()` finds them once, `refresh()` forgets them; an entry of its own wins over a derived one."""

    _derived: dict[str, Any] | None = field(default=None, repr=False)

    def derive(self) -> dict[str, Any]:
        """Name -> target or object of each derived entry."""
        raise NotImplementedError

    def derived(self) -> dict[str, Any]:
        if self._derived is None:
            self._derived = self.derive()
        return self._derived

    def refresh(self) -> None:
        super().refresh()
        self._derived = None

    def names(self) -> list[str]:
        return sorted({*super().names(), *self.derived()})

    def __contains__(self, name: str) -> bool:
        return super().__contains__(name) or name in self.derived()

    def get(self, name: str) -> Factory:
        if not super().__contains__(name) and name in self.derived():
            if name not in self._resolved:
                target = self.derived()[name]
                self._resolved[name] = resolve(target)
            return self._resolved[name]
        return super().get(name)


@dataclass
class RewardRegistry(DerivedRegistry):
    """Reward models: built-ins, `prbench.rewards` plug-ins, and the RM of every training method that names one
    (`prbench.train.methods.Method.rm`: a built-in method's, or a `prbench.methods` plug-in's), so a trainable RM
    is one module declared by one line (here, or an entry point): its folder loads as `<method spec>:FOLDER`."""

    methods_group: str = "prbench.methods"
    methods: dict[str, str] = field(default_factory=dict)  # the built-in training methods: name -> "module:METHOD"

    def derive(self) -> dict[str, Any]:
        """RM prefix -> factory target of each built-in or installed training method that names its RM."""
        from importlib.metadata import entry_points

        found: dict[str, Any] = {}
        for target in self.methods.values():  # a built-in that fails to import is a bug: it raises
            method = resolve(target)
            spec, rm = getattr(method, "spec", None), getattr(method, "rm", None)
            if spec and rm and spec not in self.builtins:
                found[spec] = rm
        for ep in entry_points(group=self.methods_group):
            try:
                method = ep.load()
            except Exception:  # noqa: BLE001, S112  (METHODS names a broken plug-in when it is used)
                continue
            spec, rm = getattr(method, "spec", None), getattr(method, "rm", None)
            if spec and rm and spec not in self.builtins:
                found[spec] = rm
        return found


# Training methods (`prbench train NAME`): name -> the `prbench.train.methods.Method` its trainer module declares.
# prbench.train.methods.METHODS is their registry (with the `prbench.methods` plug-ins); a method that names its
# RM (`Method.rm`) needs no line in REWARDS.
BUILTIN_METHODS = {
    "lore": "prbench.train.lore:METHOD",
    "vpl": "prbench.train.vpl:METHOD",
    "style": "prbench.train.style:METHOD",
    "stance": "prbench.train.stance:METHOD",
    "pref": "prbench.train.pref:METHOD",
    "gpo": "prbench.train.gpo:METHOD",
    "synthesizeme": "prbench.train.synthesizeme:METHOD",
    "finetune": "prbench.train.finetune:METHOD",
    "pal": "prbench.train.pal:METHOD",
    "context-bt": "prbench.train.bt:METHOD",
    "covote-nn": "prbench.train.covote:METHOD",
}

REWARDS = RewardRegistry("reward model", "prbench.rewards", {
    "hf": "prbench.rewards.classifier:load_classifier",
    "bt": "prbench.rewards.trained:load_bt",
    "pal": "prbench.rewards.trained:load_pal",
    "lore": "prbench.rewards.lore:LoReReward",
    "vpl": "prbench.rewards.vpl:VPLReward",
    "style": "prbench.rewards.style:StyleReward",
    "stance": "prbench.rewards.stance:StanceReward",
    "covote-nn": "prbench.train.covote:CovoteRM",
    "pref": "prbench.rewards.pref:PReFReward",
    "gpo": "prbench.rewards.gpo:GPOReward",
    "synthesizeme": "prbench.rewards.synthesizeme:SynthesizeMeReward",
    "finetune": "prbench.rewards.finetuned:load_finetuned",
    "baseline": "prbench.rewards.baselines:load_baseline",
    "judge": "prbench.rewards.judges:load_judge",
    "pmi": "prbench.rewards.likelihood:PMIReward",
    "lik": "prbench.rewards.likelihood:LikelihoodReward",
    "py": "prbench.rewards.plugin:load_plugin",
}, methods=BUILTIN_METHODS)

ENGINES = Registry("engine", "prbench.engines", {
    "hf": "prbench.engines.transformers_engine:TransformersEngine",
    "builtin": "prbench.engines.builtin:builtin_engine",
    "openai": "prbench.engines.openai_engine:OpenAIEngine",
    "anthropic": "prbench.engines.anthropic_engine:AnthropicEngine",
    "vllm": "prbench.engines.vllm_engine:VLLMEngine",
})

# Graders named by their own prefix; any engine spec also works as a grader (an LLM rubric
# grader over that engine), see prbench.downstream.grader.load_grader.
GRADERS = Registry("grader", "prbench.graders", {
    "embedding": "prbench.downstream.embedding_grader:load_embedding_grader",
})

RETRIEVERS = Registry("retriever", "prbench.retrievers", {
    "bm25": "prbench.context.retrieval:BM25Retriever",
    "dense": "prbench.context.retrieval:DenseRetriever",
    "contriever": "prbench.context.retrieval:ContrieverRetriever",
})

# Data formats: a reader per format, see prbench.formats.
FORMATS = Registry("data format", "prbench.formats", {
    "prb": "prbench.formats.prb:PRB",
    "lamp-qa": "prbench.formats.prb:LampQA",
    "personalrewardbench": "prbench.formats.personalrewardbench:PersonalRewardBench",
    "prism": "prbench.formats.prism:Prism",
    "psoups": "prbench.formats.psoups:PSoups",
    "lamp": "prbench.formats.lamp:LaMP",
    "longlamp": "prbench.formats.lamp:LongLaMP",
    "dsp": "prbench.formats.dsp:DSP",
    "rewardbench": "prbench.formats.rewardbench:RewardBench",
    "rewardbench2": "prbench.formats.rewardbench2:RewardBench2",
    "rm-bench": "prbench.formats.rmbench:RMBench",
    "judgebench": "prbench.formats.judgebench:JudgeBench",
    "rmb": "prbench.formats.rmb:RMB",
    "trl": "prbench.formats.trl:TRL",
    "hh-rlhf": "prbench.formats.hh:HHRLHF",
})

# Run kinds: what readers (meta, report, leaderboard, compare, export) know about a finished run
# folder, and what makes one (its settings, driver, study stage, CLI command), see prbench.runkinds.
# A plug-in downstream metric registers its kind here and nothing else.
# A built-in capability is one package, prbench.capabilities.<name> (docs/extending.md), and one line here.
RUNKINDS = Registry("run kind", "prbench.runkinds", {
    "eval": "prbench.capabilities.eval.kind:KIND",
    "bon": "prbench.capabilities.bon.kind:KIND",
    "rl": "prbench.capabilities.rl.kind:KIND",
    "rgd": "prbench.capabilities.rgd.kind:KIND",
    "policy-accuracy": "prbench.capabilities.policy_accuracy.kind:KIND",
    "icl": "prbench.capabilities.icl.kind:KIND",
    "sample": "prbench.capabilities.sample.kind:KIND",
    "plan": "prbench.capabilities.plan.kind:KIND",
    "build": "prbench.capabilities.build.kind:KIND",
})


@dataclass
class StageRegistry(DerivedRegistry):
    """Study stages: each run kind's `stage` (built-in and plug-in kinds alike), plus the stages that make no run
    of a kind (meta, report, personalize) and stages registered on their own (the `prbench.stages` group)."""

    kinds: Registry | None = None

    def derive(self) -> dict[str, Any]:
        """Stage name -> Stage of every registered run kind that declares one."""
        return self._kind_stages(self.kinds.names() if self.kinds is not None else [])

    def shipped(self) -> set[str]:
        """The stages prbench itself lists (its own and its built-in run kinds'), not a plug-in's."""
        return {*self.builtins, *self._kind_stages(self.kinds.builtins if self.kinds is not None else [])}

    def _kind_stages(self, names: Iterable[str]) -> dict[str, Any]:
        """Stage name -> Stage of each named run kind that declares one."""
        found: dict[str, Any] = {}
        for name in names:
            target = getattr(self.kinds.get(name), "stage", None) if self.kinds is not None else None
            if target is not None:
                stage: Any = resolve(target)
                found[stage.name] = stage
        return found


# Study stages: name -> prbench.study.context.Stage (a planner and a runner). Those of run kinds come from RUNKINDS.
STAGES = StageRegistry("study stage", "prbench.stages", {
    "meta": "prbench.study.stages:run_meta", "report": "prbench.study.stages:run_report",
    "personalize": "prbench.study.stages:run_personalize"}, kinds=RUNKINDS)

ALL = {r.group: r for r in (REWARDS, ENGINES, GRADERS, RETRIEVERS, FORMATS, STAGES, RUNKINDS)}
