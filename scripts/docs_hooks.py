"""MkDocs hook: the CLI reference page is generated from the typer commands at build time.

`docs/reference/cli.md` holds the marker `<!-- prbench-cli -->`; this hook replaces it with one
section per command (its help text and a table of its options), walked from the real click tree,
so the page cannot drift from `prbench --help`.
"""

from __future__ import annotations

import inspect

MARKER = "<!-- prbench-cli -->"


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _param_row(param) -> str:
    import click

    if isinstance(param, click.Argument):
        name = f"`{param.human_readable_name}` (argument)"
    else:
        name = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    if param.required:
        default = "required"
    elif getattr(param, "is_flag", False) and not param.secondary_opts:
        default = "off"
    elif param.default is None or param.default == () or callable(param.default):
        default = ""
    elif isinstance(param.default, bool) and param.secondary_opts:
        default = param.opts[0] if param.default else param.secondary_opts[0]
    else:
        default = f"`{param.default}`"
    return f"| {name} | {_cell(getattr(param, 'help', '') or '')} | {_cell(default)} |"


def _section(path: list[str], cmd) -> list[str]:
    help_text = inspect.cleandoc(cmd.help or "").split("\f")[0].strip()
    lines = [f"## {' '.join(path)}", "", help_text, ""]
    params = [p for p in cmd.params if p.name != "help" and not getattr(p, "hidden", False)]
    if params:
        lines += ["| option | what | default |", "|---|---|---|", *map(_param_row, params), ""]
    return lines


def _walk(path: list[str], cmd) -> list[tuple[list[str], object]]:
    out = []
    if getattr(cmd, "callback", None) is not None or not hasattr(cmd, "commands"):
        out.append((path, cmd))
    for name in sorted(getattr(cmd, "commands", {})):
        sub = cmd.commands[name]
        if not getattr(sub, "hidden", False):
            out += _walk([*path, name], sub)
    return out


def cli_reference() -> str:
    """Markdown for every prbench command, from the same click tree `prbench --help` prints."""
    import typer

    from prbench.cli import _metavars, _register, app

    _register()
    root = typer.main.get_command(app)
    _metavars(root)
    lines: list[str] = []
    for path, cmd in _walk(["prbench"], root):
        if len(path) > 1:
            lines += _section(path, cmd)
    return "\n".join(lines)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown
