"""The `--html` page in a real headless Chromium: its charts render, its script runs, the console stays
clean."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from tests.simulation.conftest import seed002_args, seed002_trace

from oomguard.cli import main as oomguard

# Debian ships `chromium-headless-shell` (small) and `chromium`; other systems name Chrome differently.
BROWSERS = (
    "chromium-headless-shell",
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
)
BROWSER = next((path for name in BROWSERS if (path := shutil.which(name))), None)
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no headless Chromium on PATH (Debian: apt-get install chromium-headless-shell)"
)

# Each series' stroke in the page's style.
COLOURS = {
    "kv": (0x1F, 0x77, 0xB4),
    "running": (0x94, 0x67, 0xBD),
    "waiting": (0xFF, 0x7F, 0x0E),
    "peak": (0x2C, 0xA0, 0x2C),
}
HEADROOM_RED = (0xD6, 0x27, 0x28)


class Page:
    def __init__(self, path: Path, summary: dict) -> None:
        self.path = path
        self.summary = summary


@pytest.fixture(scope="module")
def page(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Page:
    """Seed 002's traffic (a 153,853-token prompt among short requests), padded layout: one OOM step."""
    tmp = tmp_path_factory.mktemp("html")
    html = tmp / "sim.html"
    out = tmp / "summary.json"
    argv = [
        "simulate",
        *seed002_args(shared_data, seed002_trace(tmp), "padded"),
        "--html",
        str(html),
        "--json",
        "--no-fix-search",
    ]
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert oomguard(argv) == 1  # the padded step passes the headroom
    out.write_text(buffer.getvalue())
    return Page(html, json.loads(buffer.getvalue()))


def _chromium(page: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    command = [
        BROWSER,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=3000",
        *args,
        page.as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)


class Dom(HTMLParser):
    """Elements of the dumped DOM: (tag, attributes) in document order, and the readout's text."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.readout = ""
        self._in_readout = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        self._in_readout = a.get("id") == "readout"

    def handle_endtag(self, tag: str) -> None:
        self._in_readout = False

    def handle_data(self, data: str) -> None:
        if self._in_readout:
            self.readout += data

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def _path_commands(d: str) -> list[str]:
    return re.findall(r"[MHV]", d)


def test_the_charts_render_step_drawn_and_the_script_ran(page: Page, tmp_path: Path) -> None:
    done = _chromium(page.path, tmp_path, "--dump-dom", "--window-size=1000,1400")
    dom = Dom()
    dom.feed(done.stdout)
    assert dom.find("html")[0].get("data-chart") == "ready"  # set by the page's script, last
    for key in COLOURS:
        (path,) = dom.find("path", **{"class": f"series {key}"})
        commands = _path_commands(path["d"])
        # Step-drawn: one move, then horizontal runs and vertical jumps only (no sloped segment), ending
        # with a horizontal run to the end of the last step.
        assert commands[0] == "M" and commands[-1] == "H"
        assert all(c in "HV" for c in commands[1:])
        assert all(a != b for a, b in itertools.pairwise(commands[1:-1])), key
    assert len(dom.find("circle", **{"class": "oom"})) == page.summary["oom_events"] >= 1
    assert len(dom.find("line", **{"class": "cross"})) == 4  # the script's crosshair, one per chart
    # The readout starts at the slice holding the highest activation peak.
    assert dom.readout.startswith(f"step {page.summary['peak_step']} at ")
    assert f"activation peak {page.summary['peak_bytes'] / 2**30:.2f} GiB of 11.80 GiB" in dom.readout


@pytest.mark.parametrize("width", [1000, 1400])
def test_nothing_is_cut_or_scrolls_sideways(page: Page, tmp_path: Path, width: int) -> None:
    done = _chromium(page.path, tmp_path, "--dump-dom", f"--window-size={width},1400")
    dom = Dom()
    dom.feed(done.stdout)
    # The page's script lists every element wider than its box, and the page itself if wider than the window.
    assert dom.find("html")[0].get("data-overflow") == ""


def test_the_console_stays_clean(page: Page, tmp_path: Path) -> None:
    done = _chromium(page.path, tmp_path, "--dump-dom")
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []


@pytest.mark.parametrize("width", [1000, 1400])
def test_the_screenshot_shows_every_series_and_the_headroom(page: Page, tmp_path: Path, width: int) -> None:
    image = pytest.importorskip("matplotlib.image")
    shot = tmp_path / "page.png"
    _chromium(page.path, tmp_path, f"--screenshot={shot}", f"--window-size={width},1500", "--hide-scrollbars")
    pixels = (image.imread(str(shot))[:, :, :3] * 255).round().astype(int)

    def columns(rgb: tuple[int, int, int]) -> int:
        """Pixel columns holding this colour: a series drawn across the plot covers most of its width."""
        return int(((abs(pixels - rgb) <= 24).all(axis=2)).any(axis=0).sum())

    for key, rgb in COLOURS.items():
        assert columns(rgb) > width // 3, key
    assert columns(HEADROOM_RED) > width // 3


# ----- the data-parallel page ------------------------------------------------------------------------------

AZURE = "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"
RANK_RGB = ((0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E), (0x2C, 0xA0, 0x2C))  # dp/report.py RANK_COLOURS


@pytest.fixture(scope="module")
def dp_page(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two minutes of the Azure conversation trace through DP 3 behind vLLM's balancer."""
    page = tmp_path_factory.mktemp("dp") / "dp.html"
    argv = [
        "simulate",
        str(shared_data / AZURE),
        "--model",
        "Qwen/Qwen3-8B",
        "--gpu",
        "H100",
        "--window",
        "0:120",
        "--html",
        str(page),
        "--",
        "vllm",
        "serve",
        "Qwen/Qwen3-8B",
        "-dp",
        "3",
        "--max-model-len",
        "8192",
    ]
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        assert oomguard(argv) == 0
    return page


def test_dp_charts_are_step_drawn_a_path_per_rank(dp_page: Path, tmp_path: Path) -> None:
    done = _chromium(dp_page, tmp_path, "--dump-dom", "--window-size=1000,1400")
    dom = Dom()
    dom.feed(done.stdout)
    assert dom.find("html")[0].get("data-chart") == "ready"
    paths = dom.find("path", **{"class": "rank"})
    assert sorted(p["data-rank"] for p in paths) == ["0", "0", "0", "1", "1", "1", "2", "2", "2"]
    for path in [*paths, *dom.find("path", **{"class": "imb"})]:
        commands = _path_commands(path["d"])
        assert commands[0] == "M" and commands[-1] == "H"
        assert all(c in "HV" for c in commands[1:])  # no sloped segment between two steps
    assert len(dom.find("line", **{"class": "head"})) == 1  # the 15% line


@pytest.mark.parametrize("width", [1000, 1400])
def test_dp_page_is_not_cut_and_shows_every_rank(dp_page: Path, tmp_path: Path, width: int) -> None:
    done = _chromium(dp_page, tmp_path, "--dump-dom", f"--window-size={width},1400")
    dom = Dom()
    dom.feed(done.stdout)
    assert dom.find("html")[0].get("data-overflow") == ""
    image = pytest.importorskip("matplotlib.image")
    shot = tmp_path / "dp.png"
    _chromium(dp_page, tmp_path, f"--screenshot={shot}", f"--window-size={width},2000", "--hide-scrollbars")
    pixels = (image.imread(str(shot))[:, :, :3] * 255).round().astype(int)

    def columns(rgb: tuple[int, int, int]) -> int:
        return int(((abs(pixels - rgb) <= 24).all(axis=2)).any(axis=0).sum())

    for rgb in RANK_RGB:
        assert columns(rgb) > width // 4, rgb
    assert columns(HEADROOM_RED) > width // 3
