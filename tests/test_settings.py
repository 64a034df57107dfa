"""One settings model per driver: the CLI's options, the Python API and the study's sections agree.

Each command built with `settings_command` must offer every field of its driver's model as an
option with the model's default; each driver must refuse an unknown keyword with the closest
name; each study section must be the driver's model (so its defaults are the driver's).
"""

from __future__ import annotations

import inspect

import pytest

from prbench.build.settings import BuildSettings
from prbench.capabilities.bon.settings import BonSettings, BonStage
from prbench.capabilities.eval.settings import EvalSettings
from prbench.capabilities.policy_accuracy.settings import PolicyAccuracySettings, PolicyAccuracyStage
from prbench.capabilities.rgd.settings import RGDSettings, RGDStage
from prbench.capabilities.rl.settings import RLSettings, RLStage
from prbench.config import PlanSettings, SampleSettings
from prbench.errors import PrbenchError
from prbench.train import finetune, gpo, lore, pal, pref, style, synthesizeme, vpl

# (command function, parameter that receives the settings, the model)
COMMANDS = [
    ("prbench.capabilities.eval.command:eval_cmd", EvalSettings, {"condition", "until", "until_max"}),
    ("prbench.capabilities.build.command:build", BuildSettings, set()),
    ("prbench.capabilities.plan.command:plan_cmd", PlanSettings, set()),
    ("prbench.capabilities.sample.command:sample", SampleSettings, set()),
    ("prbench.capabilities.bon.command:bon", BonSettings, set()),
    ("prbench.capabilities.rl.command:rl", RLSettings, set()),
    ("prbench.capabilities.rgd.command:rgd", RGDSettings, {"w"}),
    ("prbench.capabilities.policy_accuracy.command:policy_accuracy", PolicyAccuracySettings, {"w"}),
    ("prbench.cli.train:lore", lore.LoReConfig, set()),
    ("prbench.cli.train:vpl", vpl.VPLConfig, set()),
    ("prbench.cli.train:pal", pal.PALConfig, set()),
    ("prbench.cli.train:finetune", finetune.FinetuneConfig, set()),
    ("prbench.cli.train:style", style.StyleConfig, set()),
    ("prbench.cli.train:pref", pref.PReFConfig, set()),
    ("prbench.cli.train:gpo", gpo.GPOConfig, set()),
    ("prbench.cli.train:synthesizeme", synthesizeme.SynthesizeMeConfig, set()),
]


def _resolve(target: str):
    from prbench.cli import train
    from prbench.registry import resolve

    module, _, name = target.partition(":")
    if module == "prbench.cli.train" and name in train.COMMANDS:  # built from the method registry, one per method
        return train.COMMANDS[name]
    return resolve(target)


@pytest.mark.parametrize("target, model, own", COMMANDS, ids=[c[0].split(":")[1] for c in COMMANDS])
def test_every_settings_field_is_an_option_with_the_models_default(target, model, own) -> None:
    params = inspect.signature(_resolve(target)).parameters
    for name, field in model.model_fields.items():
        if name in own:  # the command declares it itself (a list of values, or a sweep)
            assert name in params, name
            continue
        assert name in params, f"{target}: no --{name.replace('_', '-')}"
        default = params[name].default
        expected = ",".join(map(str, field.default)) if isinstance(field.default, list) else field.default
        assert default == expected, (name, default, expected)


DRIVERS = [
    ("prbench:evaluate", ("baseline:length", "sample"), "evaluate", "batch_sise", "batch_size"),
    ("prbench.capabilities.bon.driver:best_of_n", ("x", ["baseline:length"], "embedding:builtin:minilm-l6"), "bon",
     "kss", "ks"),
    ("prbench.capabilities.rl.driver:train_rl", ("hf:x", "baseline:length", [], "out"), "rl", "stepz", "steps"),
    ("prbench.capabilities.sample.driver:sample_policy", ("openai:m", [], "out"), "sample", "temprature", "temperature"),
    ("prbench.capabilities.plan.driver:plan", ("openai:m", [], "out.jsonl"), "plan", "top_kk", "top_k"),
]


@pytest.mark.parametrize("target, args, _name, typo, meant", DRIVERS, ids=[d[2] for d in DRIVERS])
def test_drivers_refuse_unknown_keywords_with_the_closest_name(tmp_path, target, args, _name, typo, meant) -> None:
    with pytest.raises(PrbenchError, match=f"unknown option '{typo}'; did you mean '{meant}'"):
        _resolve(target)(*args, **{typo: 1})


def test_study_sections_are_the_drivers_settings() -> None:
    from prbench.study import config as study

    for section, model in [(study.SampleStage, SampleSettings), (BonStage, BonSettings), (RLStage, RLSettings),
                           (RGDStage, RGDSettings), (study.PlannerStage, PlanSettings),
                           (PolicyAccuracyStage, PolicyAccuracySettings)]:
        assert issubclass(section, model)
        for name, field in model.model_fields.items():
            assert section.model_fields[name].default == field.default, (section.__name__, name)


def test_the_limit_rule_is_one_line_everywhere() -> None:
    for model in (EvalSettings, BuildSettings, SampleSettings, RLSettings,
                  PlanSettings):
        for bad in (0, -1, True, 2.5):
            with pytest.raises(PrbenchError, match=r"^limit must be a whole number >= 1 \(or unset for every item\)"):
                model.build(limit=bad)
