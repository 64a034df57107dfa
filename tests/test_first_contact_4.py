"""#41 (first contact, part 4): what a new user reads is whole and true."""

from __future__ import annotations

import re
from pathlib import Path

from prbench.study.config import list_presets

ROOT = Path(__file__).resolve().parents[1]


def test_study_list_gives_each_preset_whole_sentences() -> None:
    presets = list_presets()
    assert {"demo", "personalized-rewardbench"} <= set(presets)
    for name, text in presets.items():
        assert text.endswith((".", "?", "!", ")")), (name, text)  # never cut at a YAML line break
        assert "\n" not in text and len(text) >= 40, (name, text)


def test_the_site_quick_start_runs_the_readmes_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    five = re.search(r"## Quick start: five commands\n\n```bash\n(.*?)```", readme, re.DOTALL)
    assert five
    for line in five.group(1).splitlines():
        command = line.split("#")[0].strip()
        if command and not command.startswith("prbench report"):
            assert command in quick, command  # section 3 shows the report with its own words
    assert "prbench.testing.tiny" in quick  # how to try the hf: path offline


def test_documented_eval_options_exist() -> None:
    """Every `prbench eval --option` written in the docs is an option `prbench eval` has."""
    from typer.main import get_command

    import prbench.capabilities.eval.command  # noqa: F401  (attaches `eval` to the app)
    from prbench.cli import app

    eval_cmd = get_command(app).commands["eval"]  # type: ignore[attr-defined]
    known = {opt for p in eval_cmd.params for opt in p.opts}
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        for m in re.finditer(r"prbench eval ([^\n`]*)", page.read_text(encoding="utf-8")):
            for opt in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", m.group(1)):
                assert opt in known, f"{page.relative_to(ROOT)}: prbench eval {opt} does not exist"


def test_eval_help_is_grouped_and_shows_examples(capsys) -> None:  # type: ignore[no-untyped-def]
    from prbench.testing.cli import run_cli

    code, out, _ = run_cli(capsys, "eval", "--help")
    assert code == 0
    for group in ("What to score:", "Data:", "What the RM is shown:", "Judges:", "Cost and stopping (API calls, --until):",
                  "Reruns and failures:"):
        assert f"\n{group}\n" in out, group
    assert "Examples:" in out and "prbench eval -m baseline:lexical" in out
    judges = out.split("\nJudges:\n")[1].split("\n\n")[0]
    assert "--both-orders" in judges and "--debias-position" in judges  # side by side, each saying what it does
