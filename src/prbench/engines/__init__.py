"""Model runtimes behind one interface: generation and log-likelihood."""

from prbench.engines.base import Engine, Generation, GenParams, Messages, load_engine

__all__ = ["Engine", "GenParams", "Generation", "Messages", "load_engine"]
