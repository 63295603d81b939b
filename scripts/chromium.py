"""Headless Chromium driven by selenium, for the dashboard: its screenshot
(scripts/dashboard_screenshot.py) and its browser test (tests/unit/test_dashboard_browser.py).

Chromium and its driver come from the system packages (Debian: ``apt-get install chromium
chromium-driver``), selenium from PyPI (the ``test`` extra). ``start`` raises ``NoBrowser``,
saying what to install, where one is missing.
"""

from __future__ import annotations

import shutil
import tempfile

INSTALL = "apt-get install chromium chromium-driver"
# What headless Chromium needs on a build machine (root, no GPU, no network beyond loopback):
# no sandbox, no GPU process, and none of its own background traffic.
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


class NoBrowser(RuntimeError):
    pass


def find() -> tuple[str, str]:
    """The Chromium binary and its driver; ``NoBrowser`` if either is missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        raise NoBrowser(f"no Chromium{' driver' if browser else ''} on PATH: {INSTALL}")
    return browser, driver


def start(width: int = 1600, height: int = 1100):
    """A selenium WebDriver on a fresh headless Chromium (its own profile folder, removed with it)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise NoBrowser("no selenium: pip install selenium (it is in the test extra)") from None
    browser, driver = find()
    profile = tempfile.TemporaryDirectory(prefix="pipeline-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in FLAGS + [f"--user-data-dir={profile.name}", f"--window-size={width},{height}"]:
        options.add_argument(flag)
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    chrome._pipeline_profile = profile  # lives as long as the driver
    chrome.set_page_load_timeout(60)
    return chrome


# The pipeline's plots as the page holds them: its Bokeh document's data sources (named by
# pipeline/scheduler/dashboard_plots.py), and the canvases Bokeh drew (in its shadow roots).
PLOTS_STATE_JS = """
const doc = (window.Bokeh && Bokeh.documents.length) ? Bokeh.documents[0] : null;
if (!doc) return null;
function canvases(root) {
  let out = [];
  for (const el of root.querySelectorAll('*')) {
    if (el.tagName === 'CANVAS' && el.width >= 100 && el.height >= 100) out.push(el);
    if (el.shadowRoot) out = out.concat(canvases(el.shadowRoot));
  }
  return out;
}
function series(source, columns) {
  if (!source) return null;
  const n = source.data.time.length;
  const out = {n: n, first: n ? source.data.time[0] : null, last: n ? source.data.time[n - 1] : null};
  for (const c of columns) {
    const values = Array.from(source.data[c]).filter(v => v !== null && Number.isFinite(v));
    out[c + '_last'] = n ? source.data[c][n - 1] : null;
    out[c + '_max'] = values.length ? Math.max(...values) : null;
  }
  return out;
}
const shards = {};
for (const model of doc.all_models) {
  if (model.name && model.name.startsWith('pipeline-shard-')) {
    shards[model.name.slice('pipeline-shard-'.length)] = series(model, ['requests_per_s', 'in_flight']);
  }
}
const figures = Array.from(doc.all_models).filter(m => m.name && m.type === 'Figure').map(m => m.name);
return {job: series(doc.get_model_by_name('pipeline-job'), ['rows_done', 'rows_total', 'rows_with_error']),
        shards: shards, figures: figures.sort(), canvases: canvases(document).length};
"""


def plots_state(chrome) -> dict | None:
    """What the loaded /pipeline page shows (None until its Bokeh document is there)."""
    return chrome.execute_script(PLOTS_STATE_JS)
