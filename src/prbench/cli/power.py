"""`prbench power`: items and users needed for a comparison, or the smallest difference finished runs resolve."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from prbench.cli.options import Json
from prbench.errors import PrbenchError


def _records(run: Path) -> list[dict[str, Any]]:
    """A run folder's per-item records (a pilot may be unfinished: no summary needed)."""
    from prbench.store.runs import read_records

    path = run / "examples.jsonl" if run.is_dir() else run
    if not path.is_file():
        raise PrbenchError(f"{run}: no examples.jsonl (give an eval run folder)")
    return read_records(path)


def power_cmd(
    diff: Annotated[float | None, typer.Option(help="Accuracy difference to detect, a fraction (0.05 = 5 points). "
                                                     "With one --pilot or --accuracy: against chance.")] = None,
    discordance: Annotated[float | None, typer.Option(
        help="Two RMs: share of items where exactly one of them is right (assumed).")] = None,
    accuracy: Annotated[float | None, typer.Option(help="One RM against chance: its assumed accuracy.")] = None,
    icc: Annotated[float, typer.Option(help="Intra-user correlation of the per-item score (assumed).")] = 0.0,
    items_per_user: Annotated[float, typer.Option(help="Items per user (size-weighted mean).")] = 1.0,
    pilot: Annotated[list[Path] | None, typer.Option(
        help="A pilot run folder (once: against chance; twice: the paired comparison). Its observed spread, "
             "intra-user correlation and items per user replace the assumptions.")] = None,
    resolve: Annotated[list[Path] | None, typer.Option(
        help="Finished run folder(s): print the smallest difference they resolve at their own n.")] = None,
    power: Annotated[float, typer.Option(help="Probability of detecting the difference.")] = 0.8,
    alpha: Annotated[float, typer.Option(help="Two-sided level.")] = 0.05,
    json_out: Json = False,
) -> None:
    """Pairs needed to detect a difference.

    Pairs and users needed to detect an accuracy difference between two RMs (paired, clustered by user) or
    against chance; or the reverse: the smallest difference finished runs resolve.
    """
    from prbench.cli.output import emit_json
    from prbench.stats import power as pw

    if resolve:
        if len(resolve) > 2:
            raise PrbenchError("--resolve takes one run (against a fixed value) or two (the paired comparison)")
        recs = [_records(p) for p in resolve]
        mde = pw.resolvable(recs[0], recs[1] if len(recs) == 2 else None, power=power, alpha=alpha)
        if mde is None:
            raise PrbenchError(f"{', '.join(map(str, resolve))}: fewer than 2 validly scored shared items")
        if json_out:
            emit_json({"min_detectable_difference": mde, "power": power, "alpha": alpha})
        else:
            typer.echo(f"smallest resolvable difference: {100 * mde:.1f} points (power {power:g}, level {alpha:g})")
        return
    given = [name for name, v in (("--pilot", pilot), ("--discordance", discordance), ("--accuracy", accuracy))
             if v is not None and v != []]
    if len(given) > 1:  # each names the design; a second one would be silently ignored
        raise PrbenchError(f"{' and '.join(given)} each set the design: give one of them")
    if pilot:
        if len(pilot) > 2:
            raise PrbenchError("--pilot takes one run (against chance) or two (the paired comparison)")
        recs = [_records(p) for p in pilot]
        design = pw.pilot_design(recs[0], recs[1] if len(recs) == 2 else None)
        diff = diff if diff is not None else design.observed_diff
    elif discordance is not None:
        if diff is None:
            raise PrbenchError("--discordance needs --diff (the difference to detect)")
        design = pw.paired_design(discordance, diff, icc=icc, items_per_user=items_per_user)
    elif accuracy is not None:
        design = pw.chance_design(accuracy, icc=icc, items_per_user=items_per_user)
        diff = diff if diff is not None else accuracy - 0.5
    else:
        raise PrbenchError("give --discordance (two RMs), --accuracy (one RM against chance) or --pilot RUN")
    if diff is None or diff == 0:
        raise PrbenchError("nothing to detect: give --diff (the pilot observed no difference)")
    ss = pw.items_needed(diff, design, power=power, alpha=alpha)
    if json_out:
        emit_json(ss.as_dict())
        return
    typer.echo(f"{ss.items} items from {ss.users} users detect a {100 * ss.diff:.1f}-point difference with power "
               f"{power:g} at level {alpha:g} (per-item sd {design.sd:.3f}, design effect {ss.design_effect:.2f} "
               f"= 1 + ({design.items_per_user:.1f} - 1) x ICC {design.icc:.3f})")
