"""A learned stance space over a person's signed judgments: `stance:<dir>` (`prbench train stance`).

Why: the style and embedding methods read a profile as a bag of text, so on data where people
differ in what they *endorse* rather than how they write (Polis votes: the same statements,
agreed by some, rejected by others) they sit at chance. Raw sentence similarity to what a person
agreed with is barely better (53% on polis-dev's mirrored test): statements on one side of a
debate are not closer in MiniLM space to each other than to the other side. Which statements go
together is learned from training people's votes.

Formula. phi(t) = the frozen, L2-normalised sentence embedding of text t (MiniLM by default);
for each of M ensemble members m, z_m(t) = normalise(P_m^T phi(t)) with a learned P_m (d x B).
A person's evidence is what `prbench.judgments` reads from the view: (e_j, s_j) with s_j = +1
for what they agreed with / wrote / chose, -1 for what they rejected (0-sign items are dropped).
With c_j = z_m(y) . z_m(e_j):

    mean readout:     r_m(y) = mean_j s_j c_j              (a latent user vector: mean_j s_j z_m(e_j))
    nearest readout:  r_m(y) = tau lse_j+(c_j / tau) - tau lse_j-(c_j / tau)
                      (soft maximum similarity to an agreed item minus to a rejected one)

and r(y) = mean_m r_m(y) summed over the chosen readouts. No evidence: every score 0 (a tie),
so `none` is chance by construction and `wrong-profile` reads another person's stances.
k shots (`adapt`, or the pairs a `history` view shows) add their chosen answer as +1 and the
rejected one as -1 evidence. Nothing per training user is stored but their names.
Training (`prbench.train.stance`): Bradley-Terry on leave-two-out draws from each training
person's judgments: one agreed and one rejected item are held out, a random subset of the rest is
the evidence, the margin r(agreed) - r(rejected) is pushed up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prbench.conditions import View
from prbench.extras import require
from prbench.judgments import Evidence, pair_evidence, post_evidence
from prbench.rewards.base import Score
from prbench.rewards.heads import HeadReward
from prbench.rewards.pal import shown_pairs, torch_threads

READOUTS = ("mean", "nearest")


def build_stance(config: dict[str, Any]) -> Any:
    torch = require("torch", "hf")
    nn = torch.nn

    class StanceModel(nn.Module):  # type: ignore[name-defined]  # torch is imported lazily
        """M projections P_m of the frozen features; `readout` turns similarities into a reward."""

        def __init__(self, dim: int, rank: int, members: int, readouts: Sequence[str], tau: float):
            super().__init__()
            self.proj = nn.Parameter(torch.randn(members, dim, rank) / dim**0.5)
            self.readouts, self.tau = tuple(readouts), float(tau)

        def space(self, phi: Any) -> Any:
            """(M, n, B): each member's normalised view of the texts `phi` (n, d)."""
            z = torch.einsum("nd,mdb->mnb", phi, self.proj)
            return z / (z.norm(dim=-1, keepdim=True) + 1e-6)

        def reward(self, y: Any, ev: Any, sign: Any, mask: Any) -> Any:
            """r(y) per row: `y` (n, d) responses, `ev` (n, J, d) evidence, `sign`/`mask` (n, J)."""
            n, j, d = ev.shape
            zy = self.space(y)  # (M, n, B)
            ze = self.space(ev.reshape(n * j, d)).reshape(zy.shape[0], n, j, -1)
            sim = (ze * zy.unsqueeze(2)).sum(-1)  # (M, n, J)
            out = torch.zeros_like(sim[:, :, 0])
            if "mean" in self.readouts:
                out = out + (sim * sign * mask).sum(-1) / mask.sum(-1).clamp(min=1)
            if "nearest" in self.readouts:
                out = out + self._nearest(sim, sign, mask)
            return out.mean(0)

        def _nearest(self, sim: Any, sign: Any, mask: Any) -> Any:
            big = torch.finfo(sim.dtype).min
            parts = []
            for side in (sign > 0, sign < 0):
                keep = (mask > 0) & side
                lse = torch.logsumexp((sim / self.tau).masked_fill(~keep, big), -1) * self.tau
                parts.append(torch.where(keep.any(-1), lse, torch.zeros_like(lse)))
            return parts[0] - parts[1]

    return StanceModel(config["feature_dim"], config["rank"], config["members"], config["readouts"],
                       config["tau"])


def signed(evidence: Sequence[Evidence]) -> list[tuple[str, float]]:
    """(text, sign) of the evidence that carries a verdict (0-sign items say nothing of the person)."""
    return [(e.text, e.sign) for e in evidence if e.sign != 0 and e.text.strip()]


def pad_evidence(rows: Sequence[Sequence[tuple[str, float]]], table: Any, index: dict[str, int]) -> tuple[Any, ...]:
    """(features (n, J, d), sign (n, J), mask (n, J)) of per-row evidence, J the longest row (at least 1)."""
    torch = require("torch", "hf")
    width = max([len(r) for r in rows] + [1])
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    sign = torch.zeros(len(rows), width)
    mask = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        for j, (text, s) in enumerate(r):
            ids[i, j], sign[i, j], mask[i, j] = index[text], s, 1.0
    return table[ids], sign, mask


class StanceReward(HeadReward):
    """Scores (view, response) with a folder written by `prbench train stance` (module docstring)."""

    kind_name = "stance"
    build = staticmethod(build_stance)

    def evidence(self, view: View) -> list[tuple[str, float]]:
        """The view's signed evidence: shown history pairs, else shown posts; plus `adapt`ed shots of its user."""
        if view.pairs:
            return signed(pair_evidence(shown_pairs(view)))
        own = signed(post_evidence(view.posts[: view.shown_posts]))
        user = self.user_of(view)
        return own + list(self.adapted.get(user, ())) if user is not None else own

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        if not batch:
            return []
        torch = require("torch", "hf")
        rows = [self.evidence(v) for v, _ in batch]
        for (v, _), r in zip(batch, rows):
            if not r:
                self.counts["no_evidence"] += 1
            elif v.pairs:
                self.counts["from_history"] += 1
        texts = list(dict.fromkeys([t for r in rows for t, _ in r] + [y for _, y in batch]))
        table = self._tensor(texts)
        index = {t: i for i, t in enumerate(texts)}
        ev, sign, mask = pad_evidence(rows, table, index)
        with torch.no_grad(), torch_threads():
            values = self.model.reward(table[[index[y] for _, y in batch]], ev, sign, mask)
        return [Score(float(v)) for v in values]

    def adapt(self, user: str, pairs: Sequence[Any]) -> None:
        """k labelled pairs of `user` become evidence: chosen +1, rejected -1 (replaces earlier shots)."""
        self.adapted.pop(user, None)
        if pairs:
            self.adapted[user] = tuple(signed(pair_evidence(pairs)))

    def fit_shots(self, shot_lists: Sequence[Sequence[Any]]) -> list[Any]:
        return [tuple(signed(pair_evidence(s))) for s in shot_lists]
