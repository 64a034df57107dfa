"""A deterministic pointwise RM whose Ray actor process dies once, mid-run (tests/test_ray_cluster.py).

With `die_marker`, scoring the example `die_at` kills the whole process (os._exit, like an OOM
kill or a lost node) the first time only: the marker file records that it happened, and every
later construction (Ray restarting the actor) appends a line to `<marker>.restarts`.
"""

from __future__ import annotations

import os
from pathlib import Path

from prbench.rewards.base import PointwiseRM, Score


class DyingLength(PointwiseRM):
    spec = "py:dying"

    def __init__(self, die_marker: str | None = None, die_at: str | None = None, **_: object):
        self.marker, self.die_at = die_marker, die_at
        if self.marker and Path(self.marker).exists():
            with open(self.marker + ".restarts", "a") as fh:
                fh.write(f"{os.getpid()}\n")

    def score(self, batch):
        if self.marker and not Path(self.marker).exists() and any(v.example_id == self.die_at for v, _ in batch):
            Path(self.marker).write_text(str(os.getpid()))
            os._exit(1)
        return [Score(len(r.split()) + 0.25 * len(v.posts)) for v, r in batch]
