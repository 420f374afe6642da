"""The course as a student meets it: JupyterLab from the course's .venv in a real browser.

One JupyterLab server, started as `make lab` starts it (the .venv's `jupyter lab`, with the
settings `make setup` installs), is driven by Debian's Chromium through Playwright. Each notebook
(but those in NOT_IN_THE_BROWSER, below) is opened from the file browser and run with Run > Run
All Cells, with 3 simulated devices (more replicas than this machine has cores, so the batch split
is not a 2-device special case) in the quick profile. The test then checks what a student would
look at:

- the notebook opens unmodified (closing it untouched asks nothing), and no announcement box
  covers it;
- the kernel is the .venv's Python, it finished, and every code cell ran;
- no error output, except in the cells the notebook itself tags `raises-exception` (the
  exercise's stubs and its checks), and never a NameError (a check cell must say which question
  to answer first);
- no stderr output and no warning in any output (course_tools/output_check.py, the device
  sweep's check); every image output is rendered by the browser (it decoded to a picture);
- the files the notebook promises exist, and its printed conclusions follow from its own numbers;
- shutting the kernel down leaves no process of it running.

Screenshots go to build/browser/ (the notebook after its run, and its first plot).
Where Chromium or Playwright is missing the test skips with the reason, and tests/test_notebooks.py
runs those notebooks under nbval instead; CI (.ci/run) installs Chromium and sets
COURSE_REQUIRE=browser,..., and there a missing browser fails the test.

Run it alone:  pytest tests/test_browser.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import portpicker
import psutil
import pytest
from helpers import ROOT, require_or_skip

from course_tools import artifact_check, browser, output_check
from course_tools.paths import course_notebooks
from course_tools.processes import process_tree

DEVICES = 3
#: Notebooks the browser leaves to nbval (tests/test_notebooks.py), with the reason: the suite's
#: time goes to one notebook after another here, so a notebook whose kernel only starts worker
#: processes and reads their logs is run once, under nbval.
NOT_IN_THE_BROWSER = {
    "04_multi_worker": "every worker is a process of its own; the kernel writes their scripts, "
    "starts them and reads their logs (no plot), which nbval checks as well: its one run is "
    "tests/test_slurm.py's, with a Slurm cluster up",
    "appendix_a_parameter_server_and_backup": "every task is a process of its own; the kernel "
    "starts them and reads their logs, which nbval checks as well",
}
#: Every other notebook, in course order: (folder, file).
NOTEBOOKS = [
    (path.parent.name, path.name)
    for path in course_notebooks(ROOT)
    if path.stem not in NOT_IN_THE_BROWSER
]
RUN_TIMEOUT_S = 900  # one notebook's Run All
SCREENSHOTS = ROOT / "build" / "browser"
NEWS_PROMPT = "official Jupyter news"


pytestmark = [pytest.mark.slow, pytest.mark.timeout(len(NOTEBOOKS) * RUN_TIMEOUT_S)]


class Lab:
    """A JupyterLab server started as `make lab` starts it, on a copy of the course."""

    def __init__(self, root: Path, home: Path) -> None:
        self.root = root
        self.port = portpicker.pick_unused_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "COURSE_PROFILE": "quick",
            "COURSE_DEVICES": str(DEVICES),
            # A private user folder: no user-level kernel or setting of this machine's interferes,
            # so the kernel and the settings are the .venv's, as `make setup` installed them.
            "JUPYTER_CONFIG_DIR": str(home / "config"),
            "JUPYTER_DATA_DIR": str(home / "data"),
            "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
            "JUPYTER_PLATFORM_DIRS": "0",
        }
        env.setdefault("COURSE_DATA", "auto")
        env.pop("JUPYTER_PATH", None)
        self.log = open(home / "lab.log", "w")
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "jupyter"),
                "lab",
                "--no-browser",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0",
                "--IdentityProvider.token=",
                # window.jupyterapp: the test reads the notebook's model (cells run, modified)
                # instead of guessing from the page or waiting fixed times.
                "--LabApp.expose_app_in_browser=True",
                f"--ServerApp.root_dir={root}",
                *(["--allow-root"] if os.geteuid() == 0 else []),  # as `make lab` does
            ],
            env=env,
            cwd=root,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                self.api("status")
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"JupyterLab did not start:\n{(home / 'lab.log').read_text()[-3000:]}"
                    ) from None
                time.sleep(0.5)

    def api(self, path: str):
        """GET /api/<path> (sessions, kernels, ...), decoded."""
        with urllib.request.urlopen(f"{self.url}/api/{path}", timeout=10) as response:
            return json.loads(response.read())

    def kernel_processes(self) -> list[psutil.Process]:
        return process_tree(self.process.pid)[1:]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def test_the_device_sweep_leaves_to_this_test_what_it_runs():
    """.ci/device-sweep skips these notebooks at `browser_count` because this test runs them
    there, and its `count_free` notebooks are the ones this test leaves to nbval."""
    sweep = (ROOT / ".ci" / "device-sweep").read_text()
    assert f"\nbrowser_count={DEVICES}\n" in sweep
    count_free = re.search(r"\ncount_free=\((.*)\)\n", sweep)
    assert count_free and set(count_free.group(1).split()) == set(NOT_IN_THE_BROWSER)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_or_skip("browser", browser.missing())  # CI (COURSE_REQUIRE=browser,...): fails
    root = tmp_path_factory.mktemp("course")
    for folder in {folder for folder, _ in NOTEBOOKS}:
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("artifacts"))
    server = Lab(root, tmp_path_factory.mktemp("jupyter_home"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def page(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = browser.launch(playwright)
        context = chromium.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{lab.url}/lab")
        page.locator(".jp-DirListing-item").first.wait_for()
        yield page
        context.close()
        chromium.close()


def open_from_file_browser(page, folder: str, name: str) -> None:
    """Double-click the folder, then the notebook, in the file browser on the left."""
    listing = page.locator(".jp-FileBrowser .jp-DirListing-content")
    page.locator(".jp-FileBrowser .jp-BreadCrumbs-home").click()
    listing.locator(".jp-DirListing-itemText", has_text=folder).dblclick()
    listing.locator(".jp-DirListing-itemText", has_text=name).dblclick()
    page.locator(".jp-NotebookPanel:visible .jp-Notebook").wait_for()


#: The open notebook as JupyterLab's own model has it, once its kernel is connected and the
#: kernel's name and language (which JupyterLab writes into the notebook) have arrived.
NOTEBOOK_STATE = """async () => {
  const panel = window.jupyterapp.shell.currentWidget;
  await panel.sessionContext.ready;
  const kernel = panel.sessionContext.session.kernel;
  await Promise.all([kernel.info, kernel.spec]);
  await new Promise(resolve => setTimeout(resolve, 0));  // JupyterLab's own handlers first
  const cells = panel.content.model.cells;
  let code = 0, unrun = 0;
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type !== 'code') continue;
    code += 1;
    if (cell.executionCount === null) unrun += 1;
  }
  return {kernel: kernel.status, dirty: panel.model.dirty, code, unrun};
}"""


def notebook_state(page) -> dict:
    """{"kernel": its status, "dirty": modified, "code": code cells, "unrun": without a count}."""
    return page.evaluate(NOTEBOOK_STATE)


def current_tab_is_dirty(page) -> bool:
    return notebook_state(page)["dirty"]


def wait_until_finished(page, seconds: float) -> None:
    """Run All has finished when every code cell has an execution count and the kernel is idle
    (JupyterLab clears the count of each cell it queues, and sets it when the cell has run)."""
    deadline = time.monotonic() + seconds
    while True:
        state = notebook_state(page)
        if state["unrun"] == 0 and state["kernel"] == "idle":
            return
        assert time.monotonic() < deadline, (
            f"Run All not finished after {seconds} s: {state['unrun']} of {state['code']} code "
            f"cells without an execution count, kernel {state['kernel']}"
        )
        time.sleep(0.5)


def save(page) -> None:
    page.locator(".jp-NotebookPanel:visible .jp-Notebook").click(position={"x": 5, "y": 5})
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while current_tab_is_dirty(page):
        assert time.monotonic() < deadline, "the notebook did not save"
        time.sleep(0.2)


def image_report(page) -> tuple[int, list[str]]:
    """(images in the outputs, those the browser could not decode)."""
    return page.evaluate(
        """() => {
          const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
            .find(p => p.offsetParent !== null);
          const images = [...panel.querySelectorAll('.jp-OutputArea-output img')];
          return [images.length,
                  images.filter(i => !(i.complete && i.naturalWidth > 0))
                        .map(i => i.src.slice(0, 80))];
        }"""
    )


def menu(page, top: str, item: str) -> None:
    """Click `item` in the menu bar's `top` menu, as a student would."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{top}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def shut_down_kernel(page) -> None:
    menu(page, "Kernel", "Shut Down Kernel")
    dialog = page.locator(".jp-Dialog")  # asks for a confirmation in some versions
    if dialog.count():
        dialog.locator("button.jp-mod-accept").click()


def close_current(page) -> None:
    page.locator(
        ".lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-current .lm-TabBar-tabCloseIcon"
    ).click()


@pytest.mark.parametrize("folder, name", NOTEBOOKS, ids=[Path(n).stem for _, n in NOTEBOOKS])
def test_notebook_runs_clean_in_jupyterlab(lab, page, folder: str, name: str):
    stem = Path(name).stem
    open_from_file_browser(page, folder, name)
    state = notebook_state(page)  # waits until its kernel's name and language have arrived
    assert state["unrun"] == state["code"] > 0, f"{name} was committed with outputs: {state}"
    assert not state["dirty"], (
        f"{name} shows as modified right after opening (are the settings of "
        "`python -m course_tools.lab`, which make setup runs, installed?)"
    )

    menu(page, "Run", "Run All Cells")
    wait_until_finished(page, RUN_TIMEOUT_S)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / f"{stem}.png")
    assert page.get_by_text(NEWS_PROMPT).count() == 0, (
        "JupyterLab's news box is shown (make setup installs the setting that turns it off)"
    )
    images, broken = image_report(page)
    if images:
        first_image = page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output img").first
        # Twice: cells outside the view have estimated heights until shown (content-visibility).
        for _ in range(2):
            first_image.evaluate("image => image.scrollIntoView({block: 'center'})")
            time.sleep(0.5)
        page.screenshot(path=SCREENSHOTS / f"{stem}-plot.png")
    save(page)

    sessions = [s for s in lab.api("sessions") if s["path"] == f"{folder}/{name}"]
    assert len(sessions) == 1, sessions
    kernel_id = sessions[0]["kernel"]["id"]
    kernels = [p for p in lab.kernel_processes() if any(kernel_id in a for a in p.cmdline())]
    assert kernels, f"no kernel process for {kernel_id}"
    executable = Path(kernels[0].cmdline()[0])
    assert Path(sys.prefix) in executable.parents, f"the kernel runs {executable}, not the .venv's"
    before = set(lab.kernel_processes())
    shut_down_kernel(page)
    deadline = time.monotonic() + 60
    while any(k["id"] == kernel_id for k in lab.api("kernels")):
        assert time.monotonic() < deadline, "the kernel did not shut down"
        time.sleep(0.5)
    close_current(page)
    _, alive = psutil.wait_procs(list(before), timeout=30)
    left = [" ".join(p.cmdline())[:120] for p in alive if p.is_running()]

    executed = nbformat.read(lab.root / folder / name, as_version=4)
    code = [(i, c) for i, c in enumerate(executed.cells) if c.cell_type == "code"]
    not_run = [i for i, c in code if c.execution_count is None]
    assert not not_run, f"{name}: cells {not_run} did not run"
    unexpected, name_errors, stderr_texts = [], [], []
    for i, cell in code:
        for out in cell.outputs:
            # What JupyterLab saved is what it showed. (Its page renders tracebacks with the
            # stderr mime type too, and leaves cells outside the view empty until scrolled to.)
            if out.output_type == "stream" and out.name == "stderr":
                stderr_texts.append(f"cell {i}: {out.text[:300]}")
            if out.output_type != "error":
                continue
            line = f"cell {i}: {out.ename}: {out.evalue[:200]}"
            if out.ename == "NameError":
                name_errors.append(line)
            elif "raises-exception" not in cell.metadata.get("tags", []):
                unexpected.append(line)
    assert not unexpected, f"{name}: errors a student would not expect:\n" + "\n".join(unexpected)
    assert not name_errors, f"{name}: a cell fails on a missing name:\n" + "\n".join(name_errors)
    assert not stderr_texts, f"{name}: stderr output:\n" + "\n---\n".join(stderr_texts)
    # The device sweep's own check (warnings in any output text too), so that it need not run
    # these notebooks again at this count.
    assert not (found := output_check.problems(lab.root / folder / name)), f"{name}: {found}"
    pngs = sum("image/png" in o.get("data", {}) for _, c in code for o in c.outputs)
    assert images >= pngs, f"{name}: {pngs} image outputs, {images} shown"
    assert not broken, f"{name}: images the browser could not show: {broken}"
    assert not left, f"{name}: processes left running after the kernel shut down: {left}"

    # the files it promises, its conclusions and regime against its own numbers
    assert not (found := artifact_check.problems(lab.root / folder / name)), f"{name}: {found}"
