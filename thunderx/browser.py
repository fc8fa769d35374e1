"""Render HTML in headless Chromium (Debian's `chromium`), for tests and documentation images."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(args, timeout=90):
    with tempfile.TemporaryDirectory() as profile:
        cmd = [find_chromium(), *FLAGS, f"--user-data-dir={profile}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def render(html: str, png_path: str | None = None, size=(1280, 900)) -> str:
    """Load `html` as a page; return the DOM after load, and write a screenshot if asked."""
    with tempfile.NamedTemporaryFile("w", suffix=".html", delete=False) as f:
        f.write(
            f"<!doctype html><html><head><meta charset='utf-8'></head><body>{html}</body></html>"
        )
        page = f.name
    try:
        dom = _run(["--dump-dom", f"file://{page}"]).stdout
        if png_path is not None:
            _run(
                [
                    f"--screenshot={os.path.abspath(png_path)}",
                    f"--window-size={size[0]},{size[1]}",
                    f"file://{page}",
                ]
            )
        return dom
    finally:
        os.unlink(page)
