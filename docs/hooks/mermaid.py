"""The architecture pictures (```mermaid blocks) drawn in the reader's browser by a copy of Mermaid
shipped with the site: Material would otherwise fetch it from a CDN, and a site served on a LAN
without the internet would show the diagrams' source. The copy is the npm package the repository's
package.json pins (`npm ci`, which `make lint` and `make docs` run first)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
MERMAID = ROOT / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
SHIPPED = "javascripts/mermaid.min.js"  # mkdocs.yml's extra_javascript names it


def on_post_build(config: Any, **kwargs: Any) -> None:
    if not MERMAID.is_file():
        raise PluginError(f"{MERMAID} is missing: run `npm ci` at the repository's root (make docs does)")
    target = Path(config["site_dir"]) / SHIPPED
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(MERMAID, target)
