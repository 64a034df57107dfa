"""Write the viewer folder, and serve it on 127.0.0.1 (stdlib http.server: static files need no framework)."""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Callable, Sequence
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from prbench.errors import PrbenchError
from prbench.viewer.data import collect, to_js

ASSETS = ("index.html", "app.js", "style.css")
MARK = ".prbench-view"  # a folder holding it was written by `prbench view --bundle`: rewriting it is safe


def write_bundle(paths: Sequence[str | Path], out: str | Path, data: dict[str, Any] | None = None) -> Path:
    """The viewer as one static folder `out` (index.html opens it, from file:// or any static host)."""
    folder = Path(out)
    if folder.exists() and (not folder.is_dir() or (any(folder.iterdir()) and not (folder / MARK).exists())):
        raise PrbenchError(f"{folder}: exists and is not an empty folder or an earlier viewer bundle; "
                           "choose another --bundle folder")
    folder.mkdir(parents=True, exist_ok=True)
    static = resources.files("prbench.viewer").joinpath("static")
    for name in ASSETS:
        (folder / name).write_bytes(static.joinpath(name).read_bytes())
    text = to_js(collect(paths) if data is None else data)
    tmp = folder / "data.js.tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(folder / "data.js")
    (folder / MARK).write_text("written by prbench view --bundle\n", encoding="utf-8")
    return folder


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(paths: Sequence[str | Path], port: int = 0, ready: Callable[[str], None] | None = None) -> None:
    """Build the bundle in a temporary folder and serve it on 127.0.0.1:`port` until interrupted."""
    with tempfile.TemporaryDirectory(prefix="prbench-view-") as tmp:
        folder = write_bundle(paths, Path(tmp) / "view")
        handler = functools.partial(_Quiet, directory=str(folder))
        try:
            server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        except OSError as exc:
            raise PrbenchError(f"127.0.0.1:{port}: cannot listen ({exc.strerror}); choose another --port") from None
        with server:
            url = f"http://127.0.0.1:{server.server_address[1]}/"
            (ready or print)(url)
            try:
                server.serve_forever()
            finally:
                shutil.rmtree(folder, ignore_errors=True)
