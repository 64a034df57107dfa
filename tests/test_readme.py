"""The README's commands and Python example, executed, so the README cannot drift from the code.

Every `prbench ...` line of the README's bash blocks must match one rule below, in order:
- `run`: executed in this process through `prbench.cli.main` (in a fresh folder, one walk
  through the README top to bottom), with local stand-ins for what this machine lacks: the
  built-in SmolLM2 becomes a tiny random model of the same kind (the real SmolLM2 paths are
  tested in test_builtin / test_judges / test_rgd and by the demo), `https://...` and
  OPENAI_BASE_URL a loopback OpenAI-compatible server, `DIR` a tiny sequence classifier;
- `error`: a line that needs the hub, checked to fail at once with exit 2 and one line;
- `parse`: a line that needs a GPU, API keys with real replies, a human or long training: its
  options and values are parsed by the real command (names, types, required options), not run.
A new README line that matches no rule fails the test: add it here.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

# (pattern on the README line, mode, why)
RULES: list[tuple[str, str, str]] = [
    (r"^prbench data convert QiyaoMa/", "error", "hub dataset: offline it must fail at once"),
    (r"^prbench eval -m hf:Skywork/", "error", "hub model and its converted data: fails at once offline"),
    (r"--device cuda", "parse", "needs a GPU"),
    (r"^prbench train --data ", "parse", "LoRe with its protocol, minutes on CPU; tests/test_methods.py trains it"),
    (r"^prbench rl ", "error", "hub policy + GPU: fails at once offline"),
    (r"--workers 2", "parse", "starts a Ray cluster (~15 s); test_determinism runs it"),
    (r"^prbench plan train ", "parse", "TRL fine-tuning on a LaMP-QA training file"),
    (r"^prbench build agreement ", "parse", "needs a sheet filled in by people"),
    (r"^prbench build ", "parse", "generator and validator endpoints with real model replies"),
    (r"^prbench serve-reward ", "parse", "a server that runs until stopped; test_reward_server runs it"),
    (r"^prbench study my-study.yaml", "parse", "the user's own study file"),
    (r"^prbench ", "run", "runs here"),
]
# Item caps for the slowest lines (decoding with a reward call per candidate token), so the
# whole walk stays near a minute on an idle 2-core CPU.
CAPS = {"rgd": 1, "policy-accuracy": 2, "icl": 2}
NOT_PRBENCH = {"make demo": "the demo itself (tests/test_study.py runs the demo preset)",
               "make test": "this test suite"}


def bash_lines() -> list[str]:
    text = README.read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        for line in block.splitlines():
            line = re.split(r"\s{2,}#", line.strip(), maxsplit=1)[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def python_example() -> str:
    [code] = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    return code


def rule(line: str) -> tuple[str, str]:
    for pattern, mode, why in RULES:
        if re.search(pattern, line):
            return mode, why
    raise AssertionError(f"README line matches no rule of tests/test_readme.py: {line}")


def reply(body: dict) -> str:
    """The loopback endpoint: rubric grades for grading prompts, a verdict for judge prompts."""
    prompt = body["messages"][-1]["content"]
    m = re.search(r"expects \((\d+) aspects\)", prompt)
    if m:
        return json.dumps({"grades": [{"aspect": j + 1, "score": 1} for j in range(int(m.group(1)))]})
    if "what this person will most likely expect" in prompt:  # the planner prompt (prompts/planner.txt)
        return "1. Concrete steps: they ask how to do it\n2. Their situation: the posts describe it"
    return "Result: A"


def substitute(line: str, stand_ins: dict[str, str]) -> list[str]:
    # a random tiny LM writes no parseable aspects, and a planner run with none is refused (no context):
    # the loopback endpoint plans instead
    line = line.replace("--planner builtin:smollm2-135m-instruct",
                        f"--planner openai:gpt-4o-mini --base-url {stand_ins['url']}")
    line = line.replace("builtin:smollm2-135m-instruct", f"hf:{stand_ins['lm']}")
    line = line.replace("hf:DIR", f"hf:{stand_ins['rm']}").replace("--base-model DIR", f"--base-model {stand_ins['lm']}")
    line = line.replace("https://...", stand_ins["url"]).replace("LAMPQA_TRAIN", "sample:source")
    args = shlex.split(line)[1:]
    if args[:1] == ["compare"]:
        args = ["compare", *stand_ins["two_runs"]]
    cap = CAPS.get(args[0])
    if cap is not None and "--limit" in args:  # fewer items than the README's first-try variant: time budget
        at = args.index("--limit") + 1
        args[at] = str(min(cap, int(args[at])))
    if args[0] == "eval" and "baseline:embedding" in args and "wrong-profile" in line and "--limit" not in args:
        args += ["--limit", "21"]  # the four-condition baseline line: MiniLM over every profile is the slow part
    return args


def main(*args: str) -> int:
    from prbench.cli import main as cli_main

    code = 0
    with mock.patch.object(sys, "argv", ["prbench", *args]):
        try:
            cli_main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code


def parse(args: list[str]) -> None:
    """Parse a command line with the real command (option names, types, required options), without running it."""
    import typer

    from prbench.cli import _metavars, _register, app

    _register()
    cmd = typer.main.get_command(app)
    _metavars(cmd)
    path = ["prbench"]
    while hasattr(cmd, "commands") and args and args[0] in cmd.commands:
        path.append(args[0])
        cmd, args = cmd.commands[args[0]], args[1:]
    assert len(path) > 1, f"no such command: {args}"
    with cmd.make_context(" ".join(path), list(args)) as ctx:
        assert ctx.params is not None


def test_every_readme_line_has_a_rule() -> None:
    lines = bash_lines()
    assert len(lines) > 35
    for line in lines:
        if line in NOT_PRBENCH:
            continue
        assert line.startswith("prbench "), f"README command that is neither prbench nor make: {line}"
        rule(line)


def test_readme_commands_and_python_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str], tiny_lm: Path, tiny_rm: Path) -> None:
    from prbench.testing.openai_server import serve

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MY_KEY", "loopback-key")
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-key")
    ran: list[str] = []
    timings: list[tuple[float, str]] = []
    with serve(reply) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        stand_ins = {"lm": str(tiny_lm), "rm": str(tiny_rm), "url": server.base_url, "two_runs": []}
        for line in bash_lines():
            if line in NOT_PRBENCH:
                continue
            mode, _ = rule(line)
            if line.startswith("prbench compare"):
                stand_ins["two_runs"] = sorted(str(p.parent) for p in Path("runs").rglob("summary.json")
                                               if "baseline_lexical" in str(p) or "baseline_embedding" in str(p))[:2]
            args = substitute(line, stand_ins)
            if mode == "parse":
                parse(args)
                continue
            capsys.readouterr()
            t0 = time.perf_counter()
            code = main(*args)
            timings.append((round(time.perf_counter() - t0, 1), line))
            _, err = capsys.readouterr()
            if mode == "error":
                assert code == 2, (line, err)
                assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), (line, err)
                assert "Traceback" not in err
                continue
            assert code == 0, f"{line}\n-> exit {code}\n{err[-3000:]}"
            ran.append(line)
    print("\n".join(f"{t:6.1f} s  {line}" for t, line in sorted(timings, reverse=True)[:8]), file=sys.__stderr__)
    assert len(ran) >= 25
    assert (tmp_path / "report.html").exists() and (tmp_path / "runs" / "leaderboard.csv").exists()

    (tmp_path / "python").mkdir()
    monkeypatch.chdir(tmp_path / "python")  # its own runs/: the README's first eval line ran on fewer items here
    namespace: dict[str, object] = {}
    exec(compile(python_example(), "README.md (Python example)", "exec"), namespace)  # noqa: S102
    res = namespace["res"]
    assert 0 <= res.summary["accuracy"] <= 1 and Path(res.path, "examples.jsonl").exists()
    assert len(namespace["items"]) == 10
