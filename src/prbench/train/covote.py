"""`covote-nn`: the nearest-neighbour rule over a person's own judgments, the reference that trains nothing.

The rule (item-item collaborative filtering, as a kNN recommender reads ratings):

- the table: every training person's signed judgments, from their profile (`prbench.context.judgments`:
  a vote or stance +1 / -1, a plain or written post +1, a past choice `{prompt, chosen, rejected}`
  its chosen answer +1 and its rejected one -1) and from their training pair (chosen +1,
  rejected -1). Texts are keyed after folding case and white space, so a statement or answer
  matches itself however it was spaced;
- the similarity of texts a and b: sum over the people who judged both of s_pa * s_pb, divided
  by (n_ab + `shrink`): +1 when everyone who judged both judged them alike, -1 when oppositely,
  pulled toward 0 when few people judged both;
- the score of a response y for a person: sum_j s_j * sim(y, e_j) over the `neighbours` judgments
  e_j of the person (as the view shows them: profile items, past choices, or history pairs) with
  the largest |sim(y, e_j)|; a text the person judged themselves counts with similarity 1.

A text no training person judged has similarity 0 with everything, so its score is 0 (a tie
against another such text): the rule carries over to new people, not to new texts. It is the
bar a trained method has to clear on data where many people judge the same texts (votes on
statements, crowd workers choosing between the same model answers); `prbench train` measures
it beside the candidates in the same folds (`prbench.train.methods.recommend`).

`prbench train covote-nn --data D --out DIR` writes the table (`table.json`); `covote-nn:DIR`
loads it as a reward model.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from prbench.config import MethodView, count, opt
from prbench.context.judgments import Evidence, post_evidence
from prbench.data.pairs import PreferencePair
from prbench.errors import PrbenchError
from prbench.rewards.base import PointwiseRM, Score
from prbench.specs import RMOptions
from prbench.store.cache import Cache
from prbench.train import TrainResult, write_log
from prbench.train.methods import Method
from prbench.version import __version__

KIND = "covote-nn"
TABLE_FILE = "table.json"


class CovoteConfig(MethodView):
    """The nearest-neighbour rule's two numbers and the views it reads (the whole profile by default)."""

    neighbours: int = count(10, "Judgments of the person each response is compared with (largest |similarity|).",
                            100_000)
    shrink: float = opt(5.0, "Pseudo-count pulling a similarity toward 0 when few people judged both texts.", ge=0)
    top_k: int = count(100, "Profile items each view shows; the rule reads all of the person's judgments.", 10_000)


def text_key(text: str) -> str:
    """How a text is matched: case and white space folded."""
    return " ".join(text.casefold().split())


def signed(evidence: Iterable[Evidence]) -> list[tuple[str, float]]:
    """(key, sign) of the evidence that carries a verdict (a pass or neutral vote carries none)."""
    return [(text_key(e.text), e.sign) for e in evidence if e.sign and e.text.strip()]


class CovoteTable:
    """Who judged which text how: text key -> {person: sign}, the rule's whole state."""

    def __init__(self, votes: dict[str, dict[str, float]], users: Sequence[str]):
        self.votes, self.users = votes, list(users)

    @classmethod
    def from_pairs(cls, pairs: Sequence[PreferencePair]) -> CovoteTable:
        votes: dict[str, dict[str, float]] = defaultdict(dict)
        users: dict[str, None] = {}
        for p in pairs:
            users[p.user_id] = None
            judged = signed(post_evidence(p.profile)) + [(text_key(p.chosen), 1.0), (text_key(p.rejected), -1.0)]
            for key, sign in judged:  # a later judgment of the same text by the same person wins
                votes[key][p.user_id] = sign
        return cls(dict(votes), list(users))

    def similarity(self, a: str, b: str, shrink: float) -> float:
        va, vb = self.votes.get(a), self.votes.get(b)
        if not va or not vb:
            return 0.0
        both = va.keys() & vb.keys()
        return sum(va[u] * vb[u] for u in both) / (len(both) + shrink) if both else 0.0

    def score(self, response: str, evidence: Sequence[tuple[str, float]], neighbours: int, shrink: float) -> float:
        y = text_key(response)
        sims = sorted(((1.0 if key == y else self.similarity(y, key, shrink), sign) for key, sign in evidence),
                      key=lambda s: -abs(s[0]))[:neighbours]
        return float(sum(sim * sign for sim, sign in sims))


def train_covote(pairs: Sequence[PreferencePair], out: str | Path, config: CovoteConfig | None = None, *,
                 cache: Cache | None = None) -> TrainResult:
    """Write the table of the training people's judgments (nothing is fitted: no loss, no seed needed)."""
    cfg = config or CovoteConfig()
    if not pairs:
        raise PrbenchError("train_covote: no training pairs")
    table = CovoteTable.from_pairs(pairs)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / TABLE_FILE).write_text(json.dumps({"users": table.users, "votes": table.votes}, ensure_ascii=False),
                                  encoding="utf-8")
    (out / "config.json").write_text(json.dumps(
        {"arch": KIND, "neighbours": cfg.neighbours, "shrink": cfg.shrink, "view_top_k": cfg.top_k,
         "condition": cfg.condition, "users": table.users,
         "train": {**cfg.model_dump(), "pairs": len(pairs), "users": len(table.users), "texts": len(table.votes),
                   "prbench": __version__}}, indent=1, ensure_ascii=False), encoding="utf-8")
    (out / "prbench_rm.json").write_text(json.dumps(
        {"kind": KIND, "loads_as": f"{KIND}:<dir>", "condition": cfg.condition, "encoder": None,
         "trained_users": len(table.users)}, indent=1), encoding="utf-8")
    log = [{"epoch": 1, "loss": 0.0, "texts": len(table.votes)}]
    write_log(out, log)  # seals the folder
    return TrainResult(out, log)


class CovoteOptions(RMOptions):
    """What a `covote-nn` folder takes: the evaluator's options; `encoder_cache` is accepted (every method's RM
    is handed one by the protocol) and unused, since the rule embeds nothing."""

    encoder_cache: Any = None


class CovoteRM(PointwiseRM):
    """Scores (view, response) by the nearest-neighbour rule (module docstring) over a `covote-nn` folder."""

    calls_model = False
    options_model = CovoteOptions

    def __init__(self, path: str | Path, *, batch_size: int | None = None, seed: int = 0, encoder_cache: Any = None):
        from prbench.manifest import verify

        folder = Path(path).expanduser()
        self.path, self.spec = str(path), f"{KIND}:{path}"
        verify(folder, self.spec)
        try:
            self.config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            raw = json.loads((folder / TABLE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PrbenchError(f"{self.spec}: expected config.json and {TABLE_FILE} (train with `prbench train "
                               f"{KIND}`): {exc}") from None
        if self.config.get("arch") != KIND:
            raise PrbenchError(f"{self.spec}: this folder holds a {self.config.get('arch')!r} model, not {KIND}")
        self.table = CovoteTable(raw["votes"], raw["users"])
        self.neighbours, self.shrink = int(self.config["neighbours"]), float(self.config["shrink"])
        self.digest = hashlib.sha256((folder / TABLE_FILE).read_bytes()).hexdigest()[:16]
        self.counts = {"no_evidence": 0}

    @property
    def view_top_k(self) -> int | None:
        return self.config.get("view_top_k")

    def seen_users(self) -> set[str]:
        """The people whose judgments fill the table (eval's seen/unseen split reads this)."""
        return set(self.table.users)

    def fingerprint(self) -> dict[str, Any]:
        return {"spec": self.spec, "arch": KIND, "table": self.digest, "neighbours": self.neighbours,
                "shrink": self.shrink}

    def run_info(self) -> dict[str, Any]:
        return {"arch": KIND, "trained_users": len(self.table.users), "scored_without_evidence": self.counts["no_evidence"]}

    def score(self, batch: Sequence[tuple[Any, str]]) -> list[Score]:
        out = []
        for view, response in batch:
            evidence = signed(view.evidence())  # shown profile items, past choices, or history pairs
            if not evidence:
                self.counts["no_evidence"] += 1
            out.append(Score(self.table.score(response, evidence, self.neighbours, self.shrink)))
        return out


METHOD = Method("covote-nn", train_covote, CovoteConfig, "covote-nn",
                "Write the nearest-neighbour reference. A table of how the training people judged each text; a "
                "response scores by the person's judgments of the texts people judged alike; covote-nn:OUT.", cost=0)
