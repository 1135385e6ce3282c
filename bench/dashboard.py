"""The dashboard's first paint with many sandboxes: a real daemon (``hutch serve`` in a
throwaway state directory) holding N sandboxes of the fake provider (the page's cost is the
daemon's listing and rendering and the browser's, not the sandboxes'), opened in Debian's
chromium (headless, driven by playwright) through the one-time link of ``hutch ui``.

    python bench/dashboard.py [--sandboxes 500] [--loads 5]

For each load of ``/`` (the first after logging in, then reloads): the server's time to the
first byte, the HTML's size, and the browser's first contentful paint and DOMContentLoaded,
from the page's own Performance API; then the time of one live refresh of the sandbox table
(the fragment the page fetches every 2 s). Prints one JSON document and stops the daemon by pid.
Not part of bench/run.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hutch.client import Client
from hutch.config import Settings
from hutch.server.home import socket_answers

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
TIMING = """async () => {
  const paint = await new Promise((resolve) => {
    const seen = performance.getEntriesByName("first-contentful-paint")[0];
    if (seen) { resolve(seen); return; }
    new PerformanceObserver((list) => resolve(list.getEntriesByName("first-contentful-paint")[0]))
      .observe({type: "paint", buffered: true});
    setTimeout(() => resolve(null), 20000);
  });
  const nav = performance.getEntriesByType("navigation")[0];
  return {ttfb_ms: nav.responseStart - nav.requestStart, html_bytes: nav.transferSize,
          response_end_ms: nav.responseEnd, dom_content_loaded_ms: nav.domContentLoadedEventEnd,
          first_contentful_paint_ms: paint ? paint.startTime : null,
          rows: document.querySelectorAll("#sandboxes tr[data-sandbox]").length};
}"""
REFRESH = """async () => {
  const t = performance.now();
  const r = await fetch("/ui/fragments/sandboxes", {credentials: "same-origin"});
  const text = await r.text();
  return {ms: performance.now() - t, bytes: text.length, count: r.headers.get("x-hutch-count")};
}"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sandboxes", type=int, default=500)
    ap.add_argument("--loads", type=int, default=5)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="hutch-bench-dash-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_")} | {"HUTCH_HOME": str(home)}
    log = open(home / "daemon.log", "ab")  # noqa: SIM115 - the child's
    proc = subprocess.Popen([sys.executable, "-m", "hutch", "serve"], env=env, stdout=log, stderr=log)
    settings = Settings.load(home=home)
    try:
        deadline = time.monotonic() + 60
        while not socket_answers(settings.socket_path):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the daemon did not start: " + (home / "daemon.log").read_text()[-2000:])
            time.sleep(0.05)
        c = Client(settings, autostart=False)
        t = time.perf_counter()
        for i in range(args.sandboxes):
            c.create({"provider": "fake", "name": f"bench-{i:04d}", "labels": {"bench": "dashboard", "i": str(i)}})
        made_s = time.perf_counter() - t
        ui = subprocess.run([sys.executable, "-m", "hutch", "ui", "--json"], env=env, capture_output=True, text=True, check=True)
        link = json.loads(ui.stdout)
        result = measure(link["url"], args.loads, home)
        result |= {"sandboxes": args.sandboxes, "provider": "fake", "create_all_s": round(made_s, 1)}
        result["load_average"] = os.getloadavg()[0]
        print(json.dumps(result, indent=2))
        return 0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(home, ignore_errors=True)


def measure(url: str, loads: int, home: Path) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    base = url.split("/ui/")[0]
    runs: list[dict[str, Any]] = []
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(home / "profile"), executable_path=CHROMIUM, headless=True, args=ARGS, viewport={"width": 1400, "height": 1000}
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(120_000)
            page.goto(url)  # the login link: its form posts itself, then / is loaded
            page.wait_for_url(base + "/")
            page.wait_for_load_state("load")
            runs.append(page.evaluate(TIMING))
            for _ in range(loads - 1):
                page.goto(base + "/", wait_until="load")
                runs.append(page.evaluate(TIMING))
            refresh = [page.evaluate(REFRESH) for _ in range(3)]
        finally:
            context.close()
    keys = ("ttfb_ms", "first_contentful_paint_ms", "dom_content_loaded_ms")
    return {
        "first_load": {k: round(v, 1) if isinstance(v, float) else v for k, v in runs[0].items()},
        "median_of_loads": {k: round(statistics.median(r[k] for r in runs if r[k] is not None), 1) for k in keys},
        "paints_seen": sum(1 for r in runs if r["first_contentful_paint_ms"] is not None),
        "loads": len(runs),
        "html_bytes": runs[-1]["html_bytes"],
        "rows": runs[-1]["rows"],
        "refresh_median_ms": round(statistics.median(r["ms"] for r in refresh), 1),
        "refresh_bytes": refresh[-1]["bytes"],
    }


if __name__ == "__main__":
    sys.exit(main())
