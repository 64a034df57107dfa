"""Reward models: one interface for scalar RMs, judges, baselines and personalized RMs."""

from prbench.rewards.base import PairQuery, PairwiseRM, PointwiseRM, RewardModel, Score, Verdict, load_rm

__all__ = ["PairQuery", "PairwiseRM", "PointwiseRM", "RewardModel", "Score", "Verdict", "load_rm"]
