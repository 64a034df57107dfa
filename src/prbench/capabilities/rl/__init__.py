"""RL: a policy fine-tuned with the RM as reward (TRL GRPO), graded on held-out items.

settings.py: `RLSettings` and the study's `rl:` section; driver.py: `train_rl`; kind.py: the `rl` run kind;
stage.py: the study stage; command.py: `prbench rl`. Its runs are a block of the report's downstream section.
"""
