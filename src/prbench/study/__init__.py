"""Studies: one YAML file runs a whole study (eval, planner, downstream, meta, report) end to end."""

from prbench.study.config import StudyConfig, load_study_config
from prbench.study.runner import run_study

__all__ = ["StudyConfig", "load_study_config", "run_study"]
