"""Loading, validating and converting benchmark and source data."""

from prbench.data.loaders import iter_examples, load_examples, write_examples

__all__ = ["iter_examples", "load_examples", "write_examples"]
