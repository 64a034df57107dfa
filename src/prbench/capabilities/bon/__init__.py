"""Best-of-N: a policy's N answers per item reranked by each RM, the pick graded by a rubric grader.

settings.py: `BonSettings` and the study's `bon:` section; driver.py: `best_of_n`; kind.py: the `bon` run kind
(meta's settings per k); stage.py: the study stage; command.py: `prbench bon`; report.py: the report's section.
"""
