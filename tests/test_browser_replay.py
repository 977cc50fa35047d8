"""The Replay / Compare tab in headless Chromium: choose a gallery run, replay it, watch its
tokens arrive with their fates and the charts drawn; compare two runs and read both runs'
numbers; a bad upload gets one line and changes nothing. Saves a screenshot (and, with
SPECLAB_WRITE_SCREENSHOT=1, the README's docs/replay-compare.png).

Same approach as tests/test_browser.py: Debian's chromium and the playwright package, never
`playwright install`. A replay loads no model: the app is served with a loader that fails.
"""
import json
import os

import pytest

from app import metrics
from app.recorded import gallery, gallery_trace
from tests.support import free_port
from tests.test_browser import ARGS, ARTIFACTS, CHROMIUM, README_SCREENSHOT as LIVE_SCREENSHOT, _missing

README_SCREENSHOT = LIVE_SCREENSHOT.with_name("replay-compare.png")
CHARTS = "[...document.querySelectorAll('{root} .js-plotly-plot')].map(e => (e.layout && e.layout.title && e.layout.title.text) || '')"

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def url():
    if _missing():
        pytest.skip(_missing())
    from app.ui import build_demo

    def loader(*a, **k):
        raise AssertionError("a replay must not load a model")
    demo = build_demo(loader)
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


@pytest.fixture(scope="module")
def page(url):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(url)
        page.wait_for_selector("#sd-stream", timeout=60_000)
        page.get_by_role("tab", name="Replay / Compare", exact=True).click()
        page.wait_for_selector("#sd-replay-stream", timeout=30_000)
        yield page
        browser.close()


def _choose(page, label: str, option: str) -> None:
    """Pick `option` (a substring of its label) in the Gradio dropdown labelled `label`."""
    box = page.get_by_label(label, exact=True)
    box.click()
    box.fill(option)
    page.get_by_role("option").filter(has_text=option).first.click()


def test_replay_a_gallery_run(page):
    entry = next(e for e in gallery() if e["pair"] == "embedded")
    trace = gallery_trace(entry)
    _choose(page, "Recorded run (demo_models/recorded)", entry["prompt"][:30])
    page.get_by_role("radio", name="instant").check()
    page.get_by_role("button", name="Replay", exact=True).click()
    page.wait_for_selector("#sd-replay-stream #stream-end", timeout=60_000)
    shown = page.locator("#sd-replay-stream .tok").evaluate_all("els => els.map(e => e.dataset.fate)")
    expected = [p.fate for s in trace.steps for p in s.pieces]
    assert shown == expected  # every token of the recorded run, in order, with its fate
    assert "Replayed:" in page.locator("#sd-replay-status").inner_text()
    assert entry["device_name"] in page.locator("#sd-replay-status").inner_text()  # its provenance
    charts = CHARTS.format(root="")
    page.wait_for_function(f"{charts}.filter(t => t.includes('Roofline')).length >= 1", timeout=30_000)
    stats = page.locator("#sd-replay-stats").inner_text()
    assert f"{metrics.summary(trace)['mean_acceptance_length']:.2f} tokens per drafting step" in stats
    assert "Traceback" not in page.content()


def test_compare_shows_both_runs_numbers(page):
    embedded = next(e for e in gallery() if e["pair"] == "embedded")
    flagship = next(e for e in gallery() if e["pair"] != "embedded")
    _choose(page, "Run A", embedded["prompt"][:30])
    _choose(page, "Run B", flagship["prompt"][:30])
    page.get_by_role("button", name="Compare", exact=True).click()
    page.wait_for_selector("#sd-compare table", timeout=60_000)
    table = page.locator("#sd-compare").inner_text()
    for e in (embedded, flagship):
        s = metrics.summary(gallery_trace(e))
        assert f"{s['tokens_per_s']:.1f} tokens/s" in table
        assert f"{s['mean_acceptance_length']:.2f} (1 + {s['accepted']} accepted" in table
        assert f"{s['speedup']:.2f}x median" in table   # the run's own interleaved spread
    assert "AMD" in table or "recorded" in table
    charts = CHARTS.format(root="#sd-compare-rooflines")  # both runs' rooflines, whatever ran before
    page.wait_for_function(f"{charts}.filter(t => t.includes('Roofline')).length == 2", timeout=30_000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.wait_for_timeout(800)
    page.screenshot(path=str(ARTIFACTS / "replay-compare.png"), full_page=True)
    if os.environ.get("SPECLAB_WRITE_SCREENSHOT") == "1":
        page.set_viewport_size({"width": 1366, "height": 768})
        page.locator("#sd-compare").scroll_into_view_if_needed()
        page.wait_for_timeout(800)
        README_SCREENSHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(README_SCREENSHOT))
        page.set_viewport_size({"width": 1600, "height": 1000})


def test_a_bad_upload_gets_one_line_and_changes_nothing(page, tmp_path):
    stream = page.locator("#sd-replay-stream [data-testid=token-stream]")
    before = stream.inner_html()  # the run replayed by the first test
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"prompt": "x", "settings": {}, "prompt_ids": [], "steps": "nope"}))
    page.locator("input[type=file]").set_input_files(str(bad))
    page.get_by_text("steps must be a list", exact=False).first.wait_for(timeout=30_000)
    page.wait_for_timeout(500)
    assert stream.inner_html() == before
