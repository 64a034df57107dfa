"""A learned stance space over a person's signed judgments: `stance:<dir>` (`prbench train stance`).

Why: the style and embedding methods read a profile as a bag of text, so on data where people
differ in what they *endorse* rather than how they write (Polis votes: the same statements,
agreed by some, rejected by others) they sit at chance. Raw sentence similarity to what a person
agreed with is barely better (53% on polis-dev's mirrored test): statements on one side of a
debate are not closer in MiniLM space to each other than to the other side. Which statements go
together is learned from training people's votes.

Formula. phi(t) = the frozen, L2-normalised sentence embedding of text t (MiniLM by default);
for each of M ensemble members m, z_m(t) = normalise(P_m^T phi(t)) with a learned P_m (d x B).
A person's evidence is what `prbench.context.judgments` reads from the view: (e_j, s_j) with s_j = +1
for what they agreed with / wrote / chose, -1 for what they rejected (0-sign items are dropped).
With c_j = z_m(y) . z_m(e_j):

    mean readout:     r_m(y) = mean_j s_j c_j              (a latent user vector: mean_j s_j z_m(e_j))
    nearest readout:  r_m(y) = tau lse_j+(c_j / tau) - tau lse_j-(c_j / tau)
                      (soft maximum similarity to an agreed item minus to a rejected one)

and r(y) = mean_m r_m(y) summed over the chosen readouts, plus w_v r_votes(y) (below). No evidence:
every score 0 (a tie),
so `none` is chance by construction and `wrong-profile` reads another person's stances.
k shots (`adapt`, or the pairs a `history` view shows) add their chosen answer as +1 and the
rejected one as -1 evidence.

Co-vote readout (`votes`, docs/methods.md). What the projection cannot learn from text alone is
which statements the *same people* voted alike on. From the training people's signed judgments,
V (texts x people, +1 / -1, 0 unjudged), each text's mean vote m_i = sum_p V_ip / (n_i + prior)
(shrunk toward 0 when few judged it) is taken out of its judgments: C_ip = V_ip - m_i where
judged, else 0. The co-vote kernel K = C C^T / mean_i |C_i|^2 says how two texts' deviations from
the crowd go together over the people who judged both (scaled so its mean diagonal is 1, whatever
the number of people). It is stored as factors q_i (rank R SVD of the scaled C, K ~ q_a . q_b).
A text y borrows the factor (and mean) of the training text nearest to it in the frozen feature
space when their cosine is at least `votes_match` (the same statement: 1.0), else q(y) = 0.
The person's evidence, centered the same way, gives a user vector u = mean_j (s_j - m_j) q(e_j),
and r_votes(y) = q(y) . u = mean_j (s_j - m_j) K(e_j, y): what the person's departures from the
crowd on their judged texts say of y, through the training people who judged both. Why centered:
a text most people agree with tells nothing of *this* person when they agree too; the departures
do (on polis-dev's held-out training people the uncentered ridge fit of the signs read 63.5%, the
centered kernel 70.6%, `benchmarks/polis_select.py`). A past choice is two judgments (chosen +1,
rejected -1), so it enters as its chosen minus its rejected text's factor, each centered.
It knows only texts the training people judged (or near-duplicates of them); elsewhere it is 0
and the projection decides. Stored per training person: nothing (the people's columns are
dropped); per judged text its frozen feature, its factor and its mean.
Training (`prbench.train.stance`): Bradley-Terry on leave-two-out draws from each training
person's judgments: one agreed and one rejected item are held out, a random subset of the rest is
the evidence, the margin r(agreed) - r(rejected) is pushed up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prbench.context.conditions import View
from prbench.context.judgments import Evidence, pair_evidence, post_evidence
from prbench.errors import OutdatedModel, PrbenchError
from prbench.rewards.base import Score
from prbench.rewards.heads import HeadReward
from prbench.rewards.pal import shown_pairs, torch_threads
from prbench.runtime.extras import require

READOUTS = ("mean", "nearest")


def build_stance(config: dict[str, Any]) -> Any:
    torch = require("torch", "hf")
    nn = torch.nn

    class StanceModel(nn.Module):  # type: ignore[name-defined]  # torch is imported lazily
        """M projections P_m of the frozen features; `readout` turns similarities into a reward."""

        def __init__(self, dim: int, rank: int, members: int, readouts: Sequence[str], tau: float,
                     votes: dict[str, Any]):
            super().__init__()
            self.proj = nn.Parameter(torch.randn(members, dim, rank) / dim**0.5)
            self.readouts, self.tau = tuple(readouts), float(tau)
            texts, factors = int(votes.get("texts", 0)), int(votes.get("rank", 0))
            self.register_buffer("vote_keys", torch.zeros(texts, dim))  # frozen features of the judged texts
            self.register_buffer("vote_factors", torch.zeros(texts, factors))  # their co-vote factors q_i
            self.register_buffer("vote_means", torch.zeros(texts))  # their shrunk mean votes m_i
            self.votes_weight, self.votes_match = float(votes.get("weight", 0.0)), float(votes.get("match", 1.0))

        def space(self, phi: Any) -> Any:
            """(M, n, B): each member's normalised view of the texts `phi` (n, d)."""
            z = torch.einsum("nd,mdb->mnb", phi, self.proj)
            return z / (z.norm(dim=-1, keepdim=True) + 1e-6)

        def reward(self, y: Any, ev: Any, sign: Any, mask: Any, votes: bool = True) -> Any:
            """r(y) per row: `y` (n, d) responses, `ev` (n, J, d) evidence, `sign`/`mask` (n, J).
            `votes` False: the projection's readouts alone (training fits them; the factors are fixed)."""
            n, j, d = ev.shape
            zy = self.space(y)  # (M, n, B)
            ze = self.space(ev.reshape(n * j, d)).reshape(zy.shape[0], n, j, -1)
            sim = (ze * zy.unsqueeze(2)).sum(-1)  # (M, n, J)
            out = torch.zeros_like(sim[:, :, 0])
            if "mean" in self.readouts:
                out = out + (sim * sign * mask).sum(-1) / mask.sum(-1).clamp(min=1)
            if "nearest" in self.readouts:
                out = out + self._nearest(sim, sign, mask)
            out = out.mean(0)
            if votes and self.votes_weight and self.vote_factors.numel():
                out = out + self.votes_weight * self.covote(y, ev, sign, mask)
            return out

        def factors(self, phi: Any) -> tuple[Any, Any]:
            """(q, m) of each row of `phi` (..., d): the nearest judged text's factor and mean vote if close
            enough, else 0 and 0."""
            cos = phi @ self.vote_keys.T
            best, at = cos.max(-1)
            known = best >= self.votes_match
            zero = torch.zeros((), dtype=self.vote_factors.dtype)
            return (torch.where(known.unsqueeze(-1), self.vote_factors[at], zero),
                    torch.where(known, self.vote_means[at], zero))

        def covote(self, y: Any, ev: Any, sign: Any, mask: Any) -> Any:
            """r_votes(y) = q(y) . mean_j (s_j - m_j) q(e_j): the person's departures from the crowd, read at y."""
            qe, me = self.factors(ev)  # (n, J, R), (n, J)
            weight = (sign - me) * mask
            u = (qe * weight.unsqueeze(-1)).sum(1) / mask.sum(-1, keepdim=True).clamp(min=1)
            return (self.factors(y)[0] * u).sum(-1)

        def _nearest(self, sim: Any, sign: Any, mask: Any) -> Any:
            big = torch.finfo(sim.dtype).min
            parts = []
            for side in (sign > 0, sign < 0):
                keep = (mask > 0) & side
                lse = torch.logsumexp((sim / self.tau).masked_fill(~keep, big), -1) * self.tau
                parts.append(torch.where(keep.any(-1), lse, torch.zeros_like(lse)))
            return parts[0] - parts[1]

    votes = config.get("votes") or {}
    if votes.get("texts") and "prior" not in votes:  # the uncentered ridge readout of folders before #47
        raise OutdatedModel("this folder holds the earlier uncentered co-vote readout, which this prbench no longer "
                           "scores: retrain it with `prbench train stance`")
    return StanceModel(config["feature_dim"], config["rank"], config["members"], config["readouts"],
                       config["tau"], votes)


def covote_factors(people: Sequence[Sequence[tuple[str, float]]], rank: int, prior: float
                   ) -> tuple[list[str], Any, Any]:
    """(judged texts, their factors (T, R), their mean votes (T,)) of the centered co-vote kernel (module
    docstring). R is capped at min(T, people); texts nobody signed are left out."""
    import numpy as np

    texts = list(dict.fromkeys(t for items in people for t, s in items if s))
    index = {t: i for i, t in enumerate(texts)}
    rows, cols, vals = [], [], []
    for j, items in enumerate(people):
        for t, s in dict(items).items():
            if s:
                rows.append(index[t])
                cols.append(j)
                vals.append(float(np.sign(s)))
    r = min(rank, len(texts), len(people))
    if r < 1:
        return [], np.zeros((0, 0), dtype=np.float32), np.zeros(0, dtype=np.float32)
    from scipy.sparse import csr_matrix
    from scipy.sparse.linalg import svds

    rows_a, vals_a = np.asarray(rows), np.asarray(vals)
    counts = np.bincount(rows_a, minlength=len(texts))
    means = np.bincount(rows_a, weights=vals_a, minlength=len(texts)) / (counts + prior)
    centered = vals_a - means[rows_a]  # only judged cells: an unjudged one stays 0, not -m_i
    scale = np.sqrt(max(float(np.sum(centered**2)) / len(texts), 1e-12))
    c = csr_matrix((centered / scale, (rows, cols)), shape=(len(texts), len(people)), dtype=np.float64)
    if r < min(c.shape) - 1:
        u, sv, _ = svds(c, k=r, random_state=0)
    else:  # svds needs k < min(shape); a small matrix is decomposed whole
        u, sv, _ = np.linalg.svd(c.toarray(), full_matrices=False)
    order = np.argsort(-sv)[:r]
    return texts, (u[:, order] * sv[order]).astype(np.float32), means.astype(np.float32)


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

    def __init__(self, path: str, *args: Any, **kwargs: Any):
        try:
            super().__init__(path, *args, **kwargs)
        except OutdatedModel as exc:  # a folder trained before the centered readout (#47)
            raise PrbenchError(f"stance:{path}: {exc}") from None

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
