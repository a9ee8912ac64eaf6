"""The report people read: `snakemake --report report.html` (`make report`) on a finished run of
the tiny end-to-end config, checked as data (every result in its category, every caption
rendered) and as a page opened in a real headless browser, Chromium from Debian packages (the
report is a JavaScript app: what a reader sees exists only after its scripts ran)."""

from __future__ import annotations

import base64
import csv
import html
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from conftest import copy_project
from test_workflow_e2e import run

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
# What `make report` runs in the repository root.
REPORT_COMMAND = ["snakemake", "--report", "report.html", "--report-stylesheet", "report/style.css"]
# The narrowest window the report is laid out for: wider, the text and the figures only get more
# room (the menu takes a fixed share of the window).
WINDOW = (1280, 900)
# The narrowest a figure may be shown: narrower, its labels and legends cannot be read.
FIGURE_WIDTH = 600
# The experiment whose page the browser opens: the first of tests/workflow/test_workflow_e2e.py's
# tiny config, the only one on its dataset (so its category opens straight on its results).
DATASET, ARCH = "digits", "cnn"


def build_report(project: Path) -> Path:
    # The captions and the stylesheet (report/), in case the project was made without them.
    shutil.copytree(REPO / "report", project / "report", dirs_exist_ok=True)
    run(REPORT_COMMAND, project)
    return project / "report.html"


@pytest.fixture(scope="module")
def project(finished_run, tmp_path_factory) -> Path:
    """This module's copy of the finished run, with its report.html, built once for both tests
    (the browser's pages are written beside it under their own names)."""
    project = copy_project(finished_run, tmp_path_factory.mktemp("report") / "project")
    build_report(project)
    return project


def embedded(page: str, name: str):
    """The JSON the report embeds as `var <name> = ...;` in its <script id="<name>"> (- for _)."""
    script = name.replace("_", "-")
    match = re.search(rf'<script id="{script}">\s*var {name} = (.*?);\s*</script>', page, re.S)
    assert match, f"report.html embeds no `{name}`"
    return json.loads(match.group(1))


def test_every_result_is_in_its_category_with_its_caption(project):
    page = (project / "report.html").read_text(encoding="utf-8")
    categories, results = embedded(page, "categories"), embedded(page, "results")
    where = {
        path: (category, subcategory)
        for category, subcategories in categories.items()
        for subcategory, paths in subcategories.items()
        for path in paths
    }
    figures = sorted(p.name for p in (project / "results/figures").glob("*.png"))
    assert figures and {f"results/figures/{name}" for name in figures} <= set(where), (
        "a figure is missing from the report"
    )
    tables = sorted(p.name for p in (project / "results/tables").glob("*.csv"))
    assert {f"results/tables/{name}" for name in tables} <= set(where), "a table is missing"
    assert not [path for path in where if not path.endswith((".csv", ".png"))], (
        "only csv tables and PNG figures are in the report (md and tex stay files)"
    )
    expected = {
        "results/tables/auroc.csv": ("Headline", "AUROC"),
        "results/tables/tests.csv": ("Headline", "Paired tests"),
        "results/figures/auroc-vs-gap.png": ("Headline", "Target models"),
        f"results/figures/roc-{DATASET}-{ARCH}.png": (f"Dataset {DATASET}", f"{ARCH} targets"),
        f"results/figures/scaling-{DATASET}-{ARCH}.png": (f"Dataset {DATASET}", f"{ARCH} targets"),
        f"results/tables/metrics-{DATASET}-{ARCH}.csv": (f"Dataset {DATASET}", f"{ARCH} targets"),
        "results/figures/roc-breast_cancer-lr_ref_catboost.png": (
            "Dataset breast_cancer",
            "lr targets, catboost references",
        ),
        "results/tables/hparam_tpr.csv": ("Hyperparameter study", "TPR at fixed FPR"),
        "results/figures/hparam-roc-digits_s3.png": ("Hyperparameter study", "TPR at fixed FPR"),
        "results/tables/hparam_baselines.csv": ("Hyperparameter study", "TPR at fixed FPR"),
        "results/figures/hparam-baselines.png": ("Hyperparameter study", "TPR at fixed FPR"),
        "results/tables/hparam_blackbox.csv": ("Hyperparameter study", "Black-box setting"),
        "results/tables/llm.csv": ("Language models", "Attacks"),
        "results/figures/llm-em-iterations.png": ("Language models", "EM-MIA"),
        "results/tables/privacy_audit.csv": ("Privacy audit", "Lower bounds on epsilon"),
        "results/figures/privacy-audit.png": ("Privacy audit", "Lower bounds on epsilon"),
        "records/report/cost.csv": ("Cost", "Time and memory"),
        "records/report/families.csv": ("Cost", "Attack families"),
    }
    assert {path: where.get(path) for path in expected} == expected
    params = yaml.safe_load((project / "params.yaml").read_text())
    description = embedded(page, "workflow_desc")
    assert "System Message" not in description, description
    assert re.search(rf'class="docutils literal">{params["profile"]}<', description)
    for path, result in results.items():
        caption = result["caption"]
        assert "System Message" not in caption, f"the caption of {path} has reST errors:\n{caption}"
        assert result["labels"] and result["labels"]["result"], path
        # Each caption names the settings it comes from.
        assert re.search(rf'class="docutils literal">{params["profile"]}<', caption), path
    auroc = results["results/tables/auroc.csv"]["caption"]
    assert f"{params['splits']['repeats']} target models per experiment" in auroc
    assert f"{params['splits']['n_reference']} reference" in auroc
    assert all(attack in auroc for attack in params["attacks"])
    assert "<table" in auroc and "model-lira" in auroc  # the caption shows the table itself


# --- the page in a browser -----------------------------------------------------------------------


def chromium() -> str:
    """Chromium's executable; installed from Debian packages when missing (needs root)."""
    found = shutil.which("chromium")
    if found:
        return found
    if not shutil.which("apt-get"):
        pytest.skip(
            "chromium is not installed, and there is no apt-get to install the Debian "
            "package `chromium`"
        )
    if os.geteuid() != 0:
        pytest.skip(
            f"chromium is not installed, and `apt-get install -y chromium` needs root "
            f"(this test runs as uid {os.geteuid()})"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "chromium"]
    result = subprocess.run(install, capture_output=True, text=True, env=env)
    if result.returncode:  # the package lists may be missing or stale
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True, env=env)
        result = subprocess.run(install, capture_output=True, text=True, env=env)
    found = shutil.which("chromium")
    if result.returncode or not found:
        pytest.skip(
            f"`{' '.join(install)}` failed ({result.returncode}):\n"
            f"{(result.stdout + result.stderr)[-2000:]}"
        )
    return found


def open_page(browser: str, page: Path, screenshot: Path, seconds: int = 20) -> str:
    """Load `page` in headless Chromium, let its scripts run (`seconds` of virtual time), write a
    screenshot and return the rendered DOM."""
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={screenshot.parent / 'chromium-profile'}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        f"--virtual-time-budget={seconds * 1000}",
        "--dump-dom",
        f"--screenshot={screenshot}",
        page.as_uri(),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (
        f"chromium failed ({result.returncode}):\n{result.stderr[-2000:]}"
    )
    data = screenshot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is no PNG"
    assert (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")) == WINDOW
    return result.stdout


def visible(dom: str) -> str:
    """The rendered DOM without its <script> elements: what the page shows, not the data the
    scripts carry (the report embeds every result and caption in them)."""
    return re.sub(r"<script\b.*?</script>", "", dom, flags=re.S | re.I)


class Tables(HTMLParser):
    """The text of every table cell, table by table, row by row."""

    def __init__(self, markup: str):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._open: list[list[list[str]]] = []
        self._cell: list[str] | None = None
        self.feed(markup)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._open.append([])
        elif tag == "tr" and self._open:
            self._open[-1].append([])
        elif tag in ("td", "th") and self._open:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._open and self._open[-1]:
            self._open[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table" and self._open:
            self.tables.append(self._open.pop())

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


Step = tuple[str, str, str | None]


def clicking(page: Path, steps: list[Step], name: str) -> Path:
    """A copy of the report that, once loaded, clicks through `steps` as a reader would: each
    (selector, text, inside) clicks the element matching `selector` whose text is `text`, or the
    first element matching `inside` within it. The body records how far it got, and in
    `data-layout` what the reader saw before the first step and after each (`layout`)."""
    script = """<style>
/* The layout as it settles, not a frame of the menu's width animation. */
* { transition: none !important; }
</style>
<script>
// The figures shown beside the menu ([file name, width in px]); the first table in the page's
// text: where its last column ends and where the part of the page that shows it ends (the
// window's edge, or that of a box that scrolls or clips it), and its bottom; the workflow graph's
// top.
function layout() {
  var view = {figures: Array.from(document.querySelectorAll("img"))
    .filter(function (img) { return !img.closest("nav"); })
    .map(function (img) {
      var name = /filename=([^;]+);/.exec(img.src);
      return [name ? name[1] : img.src.slice(0, 40), img.getBoundingClientRect().width];
    })};
  var table = Array.from(document.querySelectorAll(".prose table"))
    .find(function (element) { return !element.closest("nav"); });
  if (table) {
    var last = table.querySelector("tr").lastElementChild, shown = window.innerWidth;
    for (var box = last.parentElement; box; box = box.parentElement) {
      if (getComputedStyle(box).overflowX !== "visible") {
        var edge = box.getBoundingClientRect().left + box.clientLeft + box.clientWidth;
        shown = Math.min(shown, edge);
      }
    }
    view.table = {right: last.getBoundingClientRect().right, shown: shown,
                  bottom: table.getBoundingClientRect().bottom};
  }
  var graph = document.getElementById("rulegraph");
  if (graph) { view.graph = graph.getBoundingClientRect().top; }
  return view;
}
window.addEventListener("load", function () {
  var steps = %s, done = 0, seen = [];
  function next() {
    seen.push(layout());
    document.body.setAttribute("data-layout", JSON.stringify(seen));
    if (done === steps.length) { document.body.setAttribute("data-clicked", "all"); return; }
    var step = steps[done];
    var found = Array.from(document.querySelectorAll(step[0]))
      .find(function (element) { return element.textContent.trim() === step[1]; });
    if (step[2] && found) { found = found.querySelector(step[2]); }
    if (!found) { document.body.setAttribute("data-missing", step[1]); return; }
    found.click();
    done += 1;
    setTimeout(next, 500);
  }
  setTimeout(next, 500);
});
</script>""" % json.dumps(steps)
    text = page.read_text(encoding="utf-8")
    head, body_end, tail = text.rpartition("</body>")
    assert body_end, "report.html has no </body>"
    copy = page.with_name(name)
    copy.write_text(head + script + body_end + tail, encoding="utf-8")
    return copy


def layouts(dom: str) -> list[dict]:
    """What `clicking`'s reader saw before the first step and after each."""
    found = re.search(r'<body[^>]*\sdata-layout="([^"]*)"', dom)
    assert found, "the page recorded no layout"
    return json.loads(html.unescape(found.group(1)))


def opening_every_figure(categories: dict, results: dict) -> tuple[list[Step], list[str]]:
    """The steps that open every figure of the report from the menu, as a reader would (its
    category, its subcategory where the category has several, its row's eye button, back to the
    menu), and the figure each step's layout shows ("" where it shows none)."""
    steps: list[Step] = []
    shows: list[str] = []
    for category, subcategories in categories.items():
        for subcategory, paths in subcategories.items():
            for path in paths:
                if not path.endswith(".png"):
                    continue
                opening = [("nav a", category, None)]
                if len(subcategories) > 1:
                    opening.append(("nav a", subcategory, None))
                opening += [
                    ("nav tr", results[path]["labels"]["result"], "a"),
                    ("nav a", "Results", None),
                ]  # the breadcrumb back to the menu
                steps += opening
                shows += [""] * (len(opening) - 2) + [Path(path).name, ""]
    return steps, shows


def test_the_report_opens_in_chromium_on_the_headline_and_shows_the_figures(project, tmp_path):
    browser = chromium()
    page = project / "report.html"
    text = page.read_text(encoding="utf-8")

    # The first page: the workflow's description with the headline table, the menu of categories.
    landing = visible(
        open_page(browser, clicking(page, [], "landing.html"), tmp_path / "report.png")
    )
    assert "miaflow: a membership-inference benchmark" in landing
    assert "A higher score means more likely a member" in landing
    for category in (
        "Headline",
        f"Dataset {DATASET}",
        "Hyperparameter study",
        "Language models",
        "Cost",
    ):
        assert f"<span>{category}</span>" in landing, f"no category {category!r} in the menu"
    with (project / "results/tables/auroc.csv").open(encoding="utf-8", newline="") as handle:
        auroc = [[" ".join(cell.split()) for cell in row] for row in csv.reader(handle)]
    shown = [table for table in Tables(landing).tables if table and table[0] == auroc[0]]
    assert shown, f"the headline table {auroc[0]} is not on the first page"
    assert shown[0] == auroc, "the headline table on the first page differs from auroc.csv"
    assert any(
        row[0] == "model-lira" and re.fullmatch(r"0\.\d{3} ± 0\.\d{3}( \((best|n\.s\.)\))?", row[1])
        for row in shown[0][1:]
    )
    # ... and below it the verdicts, as make run's summary says them
    with (project / "results/tables/verdicts.csv").open(encoding="utf-8", newline="") as handle:
        verdicts = [[" ".join(cell.split()) for cell in row] for row in csv.reader(handle)]
    assert verdicts in Tables(landing).tables, "the verdicts are not on the first page"
    # ... the whole table: its last column inside the window, neither cut off nor scrolled out of
    # sight, and the workflow graph below it, not beside it.
    seen = layouts(landing)[0]
    assert seen["table"]["right"] <= seen["table"]["shown"] + 0.5, (
        f"the headline table's last column is cut off at {WINDOW[0]} px: {seen}"
    )
    assert seen.get("graph", float("inf")) >= seen["table"]["bottom"], (
        f"the workflow graph is beside the headline table, not below it: {seen}"
    )

    # A reader opens the dataset's category and the ROC figure of its target model.
    figure = f"roc-{DATASET}-{ARCH}.png"
    navigate = clicking(
        page,
        [
            ("nav a", f"Dataset {DATASET}", None),
            ("nav tr", "ROC curves of every attack (log-log)", "a"),
        ],
        "roc.html",
    )
    opened = visible(open_page(browser, navigate, tmp_path / "report-roc.png"))
    assert 'data-clicked="all"' in opened, re.findall(r'data-missing="[^"]*"', opened)
    assert f"Dataset {DATASET}" in opened  # the breadcrumbs: the category opened on its results
    for label in (
        "ROC curves of every attack (log-log)",
        "Every metric of every attack",
        "AUROC against the number of reference models",
    ):
        assert label in opened, f"the {DATASET} page does not list {label!r}"
    images = re.findall(r'<img src="data:image/png;[^"]*?base64,([^"]+)"', opened)
    expected = (project / "results/figures" / figure).read_bytes()
    assert any(base64.b64decode(html.unescape(data)) == expected for data in images), (
        f"the page shows no {figure}"
    )

    # ... and the description of the headline table: what it is, from which settings, the table.
    navigate = clicking(
        page,
        [
            ("nav a", "Headline", None),
            ("nav a", "AUROC", None),
            ("nav tr", "AUROC per attack and experiment (TDDBench Table 4)", "a:nth-of-type(2)"),
        ],
        "auroc.html",
    )
    described = visible(open_page(browser, navigate, tmp_path / "report-auroc.png"))
    assert 'data-clicked="all"' in described, re.findall(r'data-missing="[^"]*"', described)
    assert "Description" in described and "TDDBench Table 4" in described
    assert auroc in Tables(described).tables

    # Every figure, opened from the menu, is shown wide enough to be read.
    steps, shows = opening_every_figure(embedded(text, "categories"), embedded(text, "results"))
    navigate = clicking(page, steps, "figures.html")
    dom = open_page(browser, navigate, tmp_path / "report-figures.png", seconds=20 + len(steps))
    assert 'data-clicked="all"' in dom, re.findall(r'data-missing="[^"]*"', dom)
    widths = {
        name: [width for figure, width in seen["figures"] if figure == name]
        for name, seen in zip(shows, layouts(dom)[1:])
        if name
    }
    assert sorted(widths) == sorted(p.name for p in (project / "results/figures").glob("*.png"))
    narrow = {
        name: width for name, width in widths.items() if len(width) != 1 or width[0] < FIGURE_WIDTH
    }
    assert not narrow, f"figures shown narrower than {FIGURE_WIDTH} px at {WINDOW[0]} px: {narrow}"
