"""`prbench view`: an interactive results viewer over run folders, as one static folder or served on 127.0.0.1.

The folder is `index.html`, `app.js`, `style.css` (plain JS shipped as package data: no build step,
no CDN, no request leaves the folder) and `data.js` (`prbench.viewer.data.collect`, read through
`prbench.runkinds`). Why `data.js` and not `data.json`: Chromium refuses `fetch` of a local file
from a page opened at file://, so the data arrives as a script that sets a global.
"""

from prbench.viewer.bundle import serve, write_bundle
from prbench.viewer.data import collect

__all__ = ["collect", "serve", "write_bundle"]
