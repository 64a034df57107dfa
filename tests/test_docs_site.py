"""The documentation site builds in MkDocs' strict mode (what `make docs` runs): a broken link,
a page missing from the nav, an API object mkdocstrings cannot find or a CLI reference that fails
to generate is a failed build, so `make test` catches it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_site_builds_strictly_with_cli_and_api_reference(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT / "src")}
    # no -q: MkDocs counts strict-mode warnings only at the log level it shows
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0 and "WARNING" not in out.stderr, out.stderr[-3000:]
    cli = (tmp_path / "site" / "reference" / "cli.html").read_text(encoding="utf-8")
    for command in ("prbench eval", "prbench serve-reward", "prbench data validate", "prbench train lore"):
        assert f">{command}<" in cli, command  # a heading per command
    assert "<!-- prbench-cli -->" not in cli and "--max-invalid" in cli
    api = (tmp_path / "site" / "reference" / "api.html").read_text(encoding="utf-8")
    assert "Evaluate one RM" in api  # the docstring of prbench.evaluate, rendered by mkdocstrings
    assert (tmp_path / "site" / "report.png").exists()
    # opened from disk (file://), every link lands on a page, never a directory listing (#50)
    site = tmp_path / "site"
    for page in (site / "index.html", site / "guides" / "evaluate.html"):
        html = page.read_text(encoding="utf-8")
        links = {h.split("#")[0] for h in re.findall(r'href="([^"]+)"', html)
                 if not h.startswith(("http:", "https:", "mailto:", "#", "data:"))} - {""}
        assert links and not [h for h in links if h.endswith("/")], page
        missing = [h for h in links if not (page.parent / h).resolve().is_file()]
        assert not missing, (page, missing)
    assert "python -m http.server -d site" in (site / "index.html").read_text(encoding="utf-8")
