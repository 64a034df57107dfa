"""Reward-guided decoding (ARGS-style): a frozen policy steered token by token by the RM, scored by rubric grade
or gold-answer metric.

settings.py: `RGDSettings` and the study's `rgd:` section; driver.py: `run_rgd`; kind.py: the `rgd` run kind;
stage.py: the study stage; command.py: `prbench rgd`. Its runs are a block of the report's downstream section.
"""
