"""Policy accuracy (paper B): share of pairs where the reward-guided policy gives the chosen answer the higher
guided log-likelihood.

settings.py: `PolicyAccuracySettings` and the study's `policy_accuracy:` section; driver.py: `policy_accuracy`;
kind.py: the `policy-accuracy` run kind; stage.py: the study stage; command.py: `prbench policy-accuracy`;
report.py: its block of the report's downstream section.
"""
