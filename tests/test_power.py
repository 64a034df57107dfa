"""prbench.stats.power: the closed form against a Monte-Carlo simulation of the test it names, pilots, the reverse."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prbench.errors import PrbenchError
from prbench.stats.power import (
    Design,
    chance_design,
    intra_user_correlation,
    items_needed,
    min_detectable_difference,
    paired_design,
    pilot_design,
    resolvable,
)

Z = 1.959963984540054  # z_{0.975}


def _draw(rng: np.random.Generator, values: np.ndarray, probs: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return values[rng.choice(len(values), size=shape, p=probs)]


def simulate(values: list[float], probs: list[float], *, users: int, per_user: int, icc: float, reps: int,
             rng: np.random.Generator) -> np.ndarray:
    """Clustered per-item scores with marginal `probs` on `values` and intra-user correlation exactly `icc`:
    each item copies its user's template score with probability sqrt(icc), else draws afresh."""
    v, p = np.asarray(values, float), np.asarray(probs, float)
    template = _draw(rng, v, p, (reps, users, 1))
    fresh = _draw(rng, v, p, (reps, users, per_user))
    copy = rng.random((reps, users, per_user)) < np.sqrt(icc)
    return np.where(copy, template, fresh)


def mc_power(scores: np.ndarray) -> float:
    """Share of replicates where the two-sided Wald test with a user-clustered (CR0) SE rejects mean 0."""
    reps, users, m = scores.shape
    n = users * m
    mean = scores.reshape(reps, -1).mean(axis=1)
    resid = scores.sum(axis=2) - m * mean[:, None]
    se = np.sqrt((resid**2).sum(axis=1)) / n
    return float(np.mean(np.abs(mean) / se > Z))


def mc_items(values: list[float], probs: list[float], *, per_user: int, icc: float, guess: int, power: float,
             seed: int) -> float:
    """The n (items) at which the simulated power crosses `power`: power measured at users counts around the
    guess, then the crossing interpolated linearly (20,000 replicates per point)."""
    rng = np.random.default_rng(seed)
    grid = sorted({max(round(guess * f / per_user), 2) for f in (0.85, 0.92, 1.0, 1.08, 1.15)})
    pw = [mc_power(simulate(values, probs, users=u, per_user=per_user, icc=icc, reps=20_000, rng=rng)) for u in grid]
    ns = np.array(grid, float) * per_user
    assert pw[0] < power < pw[-1], f"simulated power {pw} does not bracket {power} on {ns}"
    return float(np.interp(power, pw, ns))


def test_chance_matches_monte_carlo() -> None:
    """One RM at 60% against chance, items independent: credit - 0.5 in {-0.5, +0.5}."""
    ss = items_needed(0.10, chance_design(0.60), power=0.8)
    assert ss.items == 189  # (1.96 + 0.8416)^2 * 0.24 / 0.01 = 188.4
    n_mc = mc_items([-0.5, 0.5], [0.4, 0.6], per_user=1, icc=0.0, guess=ss.items, power=0.8, seed=1)
    assert abs(n_mc - ss.items) <= 0.05 * ss.items, (n_mc, ss.items)


def test_paired_matches_monte_carlo() -> None:
    """Two RMs on the same items: A right / B wrong 17.5%, the reverse 12.5% (discordance 0.30, diff 0.05)."""
    ss = items_needed(0.05, paired_design(0.30, 0.05), power=0.8)
    assert 930 <= ss.items <= 940
    n_mc = mc_items([1.0, -1.0, 0.0], [0.175, 0.125, 0.70], per_user=1, icc=0.0, guess=ss.items, power=0.8, seed=2)
    assert abs(n_mc - ss.items) <= 0.05 * ss.items, (n_mc, ss.items)


def test_clustered_paired_matches_monte_carlo() -> None:
    """Ten items per user with intra-user correlation 0.1 (design effect 1.9), diff 0.08, power 0.9."""
    design = paired_design(0.30, 0.08, icc=0.10, items_per_user=10)
    assert design.design_effect == pytest.approx(1.9)
    ss = items_needed(0.08, design, power=0.9)
    assert ss.users == -(-ss.items // 10)
    n_mc = mc_items([1.0, -1.0, 0.0], [0.19, 0.11, 0.70], per_user=10, icc=0.10, guess=ss.items, power=0.9, seed=3)
    assert abs(n_mc - ss.items) <= 0.05 * ss.items, (n_mc, ss.items)
    unclustered = items_needed(0.08, paired_design(0.30, 0.08), power=0.9)
    assert ss.items > 1.8 * unclustered.items  # ignoring the users would under-size the study


def test_reverse_is_the_inverse() -> None:
    design = paired_design(0.3, 0.05, icc=0.05, items_per_user=8)
    ss = items_needed(0.05, design)
    mde = min_detectable_difference(ss.items, design)
    assert mde == pytest.approx(0.05, rel=0.01)
    assert min_detectable_difference(4 * ss.items, design) == pytest.approx(mde / 2, rel=1e-9)


def _records(credits: list[float | None], users: list[str]) -> list[dict]:
    return [{"id": f"i{k}", "credit": c, "user_id": u} for k, (c, u) in enumerate(zip(credits, users, strict=True))]


def test_pilot_design_recovers_planted_icc_and_discordance() -> None:
    rng = np.random.default_rng(7)
    scores = simulate([1.0, -1.0, 0.0], [0.2, 0.1, 0.7], users=400, per_user=6, icc=0.2, reps=1, rng=rng)[0]
    users = [f"u{u}" for u in range(400) for _ in range(6)]
    b = [0.0 if s >= 0 else 1.0 for s in scores.ravel()]  # B right only where A - B = -1
    a = [bb + s for bb, s in zip(b, scores.ravel(), strict=True)]
    design = pilot_design(_records(a, users), _records(b, users))
    assert design.icc == pytest.approx(0.2, abs=0.05)
    assert design.items_per_user == 6
    assert design.sd**2 == pytest.approx(0.3 - 0.1**2, abs=0.03)
    assert design.observed_diff == pytest.approx(0.1, abs=0.03)
    assert design.n_pilot == 2400


def test_pilot_pairs_only_items_both_scored() -> None:
    a = _records([1, 0, None, 1], ["u1", "u1", "u2", "u2"])
    b = _records([0, 0, 1, None], ["u1", "u1", "u2", "u2"])
    design = pilot_design(a, b)
    assert design.n_pilot == 2 and design.observed_diff == 0.5


def test_icc_of_unequal_users_and_no_users() -> None:
    icc, m_eff = intra_user_correlation([1, 1, 1, 0, 0, 0, 0], ["a", "a", "a", "b", "b", "b", "b"])
    assert icc == 1.0 and m_eff == pytest.approx((9 + 16) / 7)
    assert intra_user_correlation([1, 0, 1], ["a", "b", "c"]) == (0.0, 1.0)
    # records without a user: every item its own cluster
    design = pilot_design([{"id": str(i), "credit": float(i % 2)} for i in range(10)])
    assert design.items_per_user == 1.0 and design.icc == 0.0


def test_resolvable_of_a_finished_run() -> None:
    recs = _records([1.0, 0.0] * 200, [f"u{i // 4}" for i in range(400)])
    mde = resolvable(recs)
    assert mde == pytest.approx((Z + 0.8416212335729143) * np.std([1.0, 0.0] * 200, ddof=1) / np.sqrt(400), rel=1e-6)
    assert resolvable(_records([1.0], ["u"])) is None
    assert resolvable(_records([1.0] * 50, ["u"] * 50)) > 0  # a spread of 0 falls back to the binary bound


@pytest.mark.parametrize("bad", [{"discordance": 0.0, "diff": 0.0}, {"discordance": 0.1, "diff": 0.2}])
def test_impossible_designs_refused(bad: dict) -> None:
    with pytest.raises(PrbenchError):
        paired_design(**bad)
    with pytest.raises(PrbenchError, match="strictly between"):
        items_needed(0.1, Design(sd=0.5), power=1.0)


def test_cli_power(capsys: pytest.CaptureFixture[str]) -> None:
    from prbench.testing.cli import run_cli

    code, out, _ = run_cli(capsys, "power", "--diff", "0.05", "--discordance", "0.3", "--icc", "0.05",
                           "--items-per-user", "8", "--json")
    assert code == 0
    got = json.loads(out)
    assert got["items"] == items_needed(0.05, paired_design(0.3, 0.05, icc=0.05, items_per_user=8)).items
    code, out, _ = run_cli(capsys, "power", "--diff", "0.1", "--accuracy", "0.6")
    assert code == 0 and "189" in out
    code, _, err = run_cli(capsys, "power", "--diff", "0.05")
    assert code == 2 and "--discordance" in err


def test_cli_power_from_pilot_and_resolve(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from prbench.testing.cli import run_cli

    for name, credits in (("a", [1.0, 1.0, 0.0, 1.0] * 50), ("b", [1.0, 0.0, 0.0, 0.0] * 50)):
        run = tmp_path / name
        run.mkdir()
        (run / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records(
            credits, [f"u{i // 5}" for i in range(200)])))
    code, out, err = run_cli(capsys, "power", "--pilot", str(tmp_path / "a"), "--pilot", str(tmp_path / "b"), "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["design"]["observed_diff"] == pytest.approx(0.5) and got["design"]["n_pilot"] == 200
    code, out, err = run_cli(capsys, "power", "--resolve", str(tmp_path / "a"), "--resolve", str(tmp_path / "b"),
                             "--json")
    assert code == 0, err
    assert json.loads(out)["min_detectable_difference"] == pytest.approx(
        resolvable(_records([1.0, 1.0, 0.0, 1.0] * 50, [f"u{i // 5}" for i in range(200)]),
                   _records([1.0, 0.0, 0.0, 0.0] * 50, [f"u{i // 5}" for i in range(200)])))
