"""The course as a website: static HTML pages from the executed notebooks, and their check.

`course run` writes an executed copy of each notebook under build/, with what produced it in the
copy's metadata (`course_run`: profile, devices, data, versions, date). `build` turns those
copies into a static site with Sphinx, MyST-NB and sphinx-book-theme, offline, without executing
anything again:

- the README is the home page; its links to notebooks become links to their pages, its links to
  other files of the repository point to the repository;
- each notebook is a page with its outputs and plots, and a note under its title saying which
  profile, devices and data produced them, with links to open it in Colab and to its source;
- the exercise is shown as handed out (without outputs), followed by its solution's page.

`check` then opens the built site as a reader would: every page is present, every link inside the
site resolves (file and #anchor), and every image of the site loads in Chromium (Playwright).

    $ python -m course_tools.site             # build/ -> build/site/html, then check it
    $ python -m course_tools.site --check-only

From Python (after `course run`), the same two steps:

    from course_tools import site

    html = site.build(Path("."), Path("build"))
    problems = site.check(html, site.page_paths(Path(".")))  # [] when all is well
"""

from __future__ import annotations

import argparse
import functools
import http.server
import re
import shutil
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import nbformat

from course_tools import browser, require
from course_tools.colab import BRANCH, repository_url
from course_tools.paths import HANDOUT_FOLDER, course_notebooks
from course_tools.paths import PACKAGE_ROOT as ROOT

TITLE = "Distributed training with TensorFlow and Keras"
#: The notice a note cell starts with (the check looks for it on every notebook page).
NOTE_MARK = "About this page."
DATA_WORDS = {
    "synthetic": "the synthetic stand-in data (same shapes and classes as the real datasets)",
    "tfds": "the real datasets (tensorflow-datasets)",
    "auto": "the real datasets where they were available, else the synthetic stand-in "
    "(the outputs say which)",
}
PROFILE_WORDS = {
    "quick": "small subsets and few epochs: a test run, its numbers are not the lesson's",
    "cpu": "sized for a laptop without GPU",
    "full": "the original course's sizes",
}
CONF = """\
# Written by course_tools/site.py: the site is built from executed copies, never run here.
project = {title!r}
html_title = {title!r}
extensions = ["myst_nb"]
nb_execution_mode = "off"
myst_heading_anchors = 3
html_theme = "sphinx_book_theme"
html_theme_options = {{
    "repository_url": {repository!r},
    "repository_branch": {branch!r},
    "use_repository_button": True,
    "use_source_button": True,
    "use_download_button": True,
    "launch_buttons": {{"colab_url": "https://colab.research.google.com"}},
    "show_toc_level": 2,
}}
html_static_path = []
exclude_patterns = ["_build"]
"""


class SiteError(RuntimeError):
    """The site cannot be built as asked (with what to do)."""


#: Titles in the table of contents where a notebook's own title would repeat another's.
TOC_TITLES = {"exercises": "Exercise (as handed out)", "solutions": "Exercise: the solution"}


def page_paths(root: Path = ROOT) -> list[str]:
    """The notebooks of the site, as paths relative to the repository, in reading order: the
    course's order (`paths.course_notebooks`), except that the exercise as handed out comes
    before its solution."""
    paths = [f"{p.parent.name}/{p.name}" for p in course_notebooks(root)]
    return sorted(paths, key=lambda page: page.startswith("solutions/"))


def is_handout(page: str) -> bool:
    """Whether the site shows `page` as handed out (no executed copy, no outputs)."""
    return page.split("/")[0] == HANDOUT_FOLDER


def colab_url(relative_path: str, repository: str) -> str:
    github = repository.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{github}/blob/{BRANCH}/{relative_path}"


def run_note(record: dict, relative_path: str, repository: str) -> str:
    """The note under a page's title: what produced its outputs, and where to run or read it."""
    links = (
        f"[Open in Colab]({colab_url(relative_path, repository)}) · "
        f"[Source]({repository}/blob/{BRANCH}/{relative_path})"
    )
    if not record:
        return (
            f"**{NOTE_MARK}** The notebook as handed out, without outputs: run it yourself "
            "(its solution, with outputs, is the next page). " + links
        )
    devices = record.get("devices")
    kind = record.get("device_kind", "CPU")
    where = (
        f"{devices} simulated CPU device{'s' if devices != 1 else ''} (on one machine's cores)"
        if kind == "CPU"
        else f"{devices} logical GPU{'s' if devices != 1 else ''}"
    )
    profile = record.get("profile", "")
    data = record.get("data", "")
    return (
        f"**{NOTE_MARK}** The outputs below come from running this notebook with `course run` "
        f"on {record.get('date', '?')}: profile `{profile}` "
        f"({PROFILE_WORDS.get(profile, 'as set')}), {where}, "
        f"{DATA_WORDS.get(data, f'COURSE_DATA={data}')}; TensorFlow {record.get('tensorflow')}, "
        f"Keras {record.get('keras')}, Python {record.get('python')}; "
        f"{record.get('seconds', '?')} s in all. Your numbers will differ with other settings "
        "and hardware; the notebook's conclusions are computed from each run's own numbers. "
        + links
    )


def _with_note(notebook, note: str):
    """`notebook` with `note` right under its title (the first line of its first cell, when that
    is a markdown heading), else at the top."""
    first = notebook.cells[0] if notebook.cells else None
    if first is not None and first.cell_type == "markdown" and first.source.startswith("# "):
        title, _, rest = first.source.partition("\n")
        first.source = f"{title}\n\n{note}\n\n{rest.lstrip()}"
    else:
        notebook.cells.insert(0, nbformat.v4.new_markdown_cell(note))
    return notebook


def _home_page(root: Path, repository: str, pages: list[str]) -> str:
    """The README as the home page: links to pages stay, links to other repository files go to
    the repository; a table of contents of the notebooks at the end."""

    def relink(match: re.Match) -> str:
        text, target = match[1], match[2]
        if re.match(r"^[a-z]+:|^#|^/", target):
            return match[0]
        path = target.split("#")[0]
        if path in pages:
            return match[0]
        kind = "tree" if (root / path).is_dir() else "blob"
        anchor = target[len(path) :]  # "#section" or "": GitHub's page keeps the heading anchors
        return f"[{text}]({repository}/{kind}/{BRANCH}/{path.rstrip('/')}{anchor})"

    readme = (root / "README.md").read_text()
    readme = re.sub(r"\[((?:[^\[\]]|\[[^\]]*\]\([^)]*\))*)\]\(([^)\s]+)\)", relink, readme)
    toc = "\n".join(
        f"{TOC_TITLES[p.split('/')[0]]} <{p.removesuffix('.ipynb')}>"
        if p.split("/")[0] in TOC_TITLES
        else p.removesuffix(".ipynb")
        for p in pages
    )
    return f"{readme}\n\n```{{toctree}}\n:hidden:\n:caption: Notebooks\n\n{toc}\n```\n"


def prepare(root: Path, executed: Path, source: Path) -> list[str]:
    """Write the Sphinx project into `source` from the executed copies in `executed`."""
    repository = repository_url(root)
    pages = page_paths(root)
    missing = [p for p in pages if not is_handout(p) and not (executed / Path(p).name).exists()]
    if missing:
        raise SiteError(
            f"No executed copy of {', '.join(missing)} in {executed}: run `course run` (or "
            "`make course`) first; the site shows the outputs of that run."
        )
    if source.exists():
        shutil.rmtree(source)
    for page in pages:
        folder = page.split("/")[0]
        if not is_handout(page):
            notebook = nbformat.read(executed / Path(page).name, as_version=4)
            record = notebook.metadata.get("course_run", {})
            if not record:
                raise SiteError(
                    f"{executed / Path(page).name} does not say what produced it (no "
                    "course_run metadata): run it again with `course run`."
                )
        else:
            notebook = nbformat.read(root / page, as_version=4)
            record = {}
        _with_note(notebook, run_note(record, page, repository))
        (source / folder).mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, source / page)
    (source / "index.md").write_text(_home_page(root, repository, pages))
    (source / "conf.py").write_text(CONF.format(title=TITLE, repository=repository, branch=BRANCH))
    return pages


def build(root: Path = ROOT, build_dir: Path | None = None) -> Path:
    """Build the site from the executed copies in `build_dir` (default root/build); return the
    folder of its HTML (build_dir/site/html). Sphinx warnings (a broken reference, a missing
    image) fail the build."""
    from sphinx.cmd.build import build_main

    build_dir = build_dir or root / "build"
    source, html = build_dir / "site" / "source", build_dir / "site" / "html"
    prepare(root, build_dir, source)
    if html.exists():
        shutil.rmtree(html)
    status = build_main(
        [
            "-b",
            "html",
            "-W",
            "--keep-going",
            "-q",
            "-d",
            str(build_dir / "site" / "doctrees"),
            str(source),
            str(html),
        ]
    )
    if status != 0:
        raise SiteError(f"Sphinx failed (exit {status}); its messages are above.")
    return html


class _Links(HTMLParser):
    """The link targets of one HTML page: <a href>, <img src>, <link href>, <script src>; and
    the ids it defines."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        attribute = {"a": "href", "img": "src", "link": "href", "script": "src"}.get(tag)
        if attribute and attrs.get(attribute):
            self.links.append((tag, attrs[attribute]))


@functools.cache
def _parse(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def broken_links(html: Path) -> list[str]:
    """Every link inside the site whose file or #anchor does not exist ("page: link")."""
    _parse.cache_clear()
    problems = []
    pages = [p for p in html.rglob("*.html") if "_static" not in p.relative_to(html).parts]
    for page in sorted(pages):  # (_static holds the theme's template fragments, not pages)
        for tag, link in _parse(page).links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
                continue  # outside the site
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            where = f"{page.relative_to(html)}: {tag} {link}"
            if not target.is_relative_to(html.resolve()) or not target.exists():
                problems.append(f"{where} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                if unquote(parts.fragment) not in _parse(target).ids:
                    problems.append(f"{where} (no such anchor)")
    return problems


def _serve(html: Path):
    """A static file server for `html` on a free loopback port, in a thread."""
    handler = functools.partial(_QuietHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # one line per request is noise here
        pass


def image_outputs(notebook_path: Path) -> int:
    """How many image outputs (PNG, JPEG, SVG) a notebook holds."""
    notebook = nbformat.read(notebook_path, as_version=4)
    kinds = ("image/png", "image/jpeg", "image/svg+xml")
    return sum(
        any(kind in output.get("data", {}) for kind in kinds)
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )


def images_not_shown(
    html: Path, expected: dict[str, int], chromium: str = browser.CHROMIUM
) -> list[str]:
    """Open each page (path under `html` -> how many output images it must show) in Chromium;
    list the site's images it could not show, and the pages that show fewer output images than
    their notebook holds."""
    from playwright.sync_api import sync_playwright

    server = _serve(html)
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    problems = []
    try:
        with sync_playwright() as playwright:
            chromium_browser = browser.launch(playwright, chromium)
            page = chromium_browser.new_page()
            for relative, count in {"index.html": 0, **expected}.items():
                page.goto(urljoin(base, relative), wait_until="load")
                images = page.evaluate(
                    "() => [...document.images].map(i => [i.src, i.complete && i.naturalWidth > 0])"
                )
                for src, shown in images:
                    if src.startswith(base) and not shown:
                        problems.append(f"{relative}: image {src.removeprefix(base)} not shown")
                outputs = sum(shown for src, shown in images if "/_images/" in src)
                if outputs < count:
                    problems.append(f"{relative}: shows {outputs} of its {count} output images")
            chromium_browser.close()
    finally:
        server.shutdown()
    return problems


#: The one problem `make site` reports without failing when no browser is there (CI, whose
#: COURSE_REQUIRE names the browser, fails on it).
IMAGES_NOT_CHECKED = "images not checked"


def check(html: Path, pages: list[str], chromium: str = browser.CHROMIUM) -> list[str]:
    """What is wrong with the built site (empty when nothing): missing pages, notes or plots,
    broken internal links, images Chromium cannot show."""
    problems = []
    if not (html / "index.html").exists():
        return [f"no home page: {html / 'index.html'}"]
    for page in pages:
        file = html / (page.removesuffix(".ipynb") + ".html")
        if not file.exists():
            problems.append(f"page missing: {file.relative_to(html)}")
        elif NOTE_MARK not in file.read_text(encoding="utf-8"):
            problems.append(f"{file.relative_to(html)}: no note on what produced it")
    problems += broken_links(html)
    source = html.parent / "source"  # the notebooks the pages were built from (`prepare`)
    expected = {
        page.removesuffix(".ipynb") + ".html": image_outputs(source / page)
        for page in pages
        if (source / page).exists()
    }
    if reason := browser.missing(chromium):
        problems.append(f"{IMAGES_NOT_CHECKED}: {reason}")
    else:
        problems += images_not_shown(html, expected, chromium)
    return problems


def failed(problems: list[str], *, browser_required: bool) -> bool:
    """Whether `make site` fails: on any problem, except the images left unchecked for want of a
    browser (said, not failed) unless a browser is required (CI: COURSE_REQUIRE=browser,...)."""
    return any(browser_required or not p.startswith(IMAGES_NOT_CHECKED) for p in problems)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--build-dir", type=Path, help="where `course run` wrote its copies (default: build/)"
    )
    parser.add_argument("--check-only", action="store_true", help="check the built site only")
    parser.add_argument("--chromium", default=browser.CHROMIUM, help="Chromium for the check")


def run(args: argparse.Namespace) -> int:
    build_dir = (args.build_dir or ROOT / "build").resolve()
    html = build_dir / "site" / "html"
    try:
        if not args.check_only:
            build(ROOT, build_dir)
    except SiteError as exc:
        print(f"site: {exc}", file=sys.stderr)
        return 1
    try:
        browser_required = require.is_required("browser")
    except require.RequireError as exc:
        print(f"site: {exc}", file=sys.stderr)
        return 2
    problems = check(html, page_paths(ROOT), args.chromium)
    for problem in problems:
        print(f"site: {problem}", file=sys.stderr)
    if failed(problems, browser_required=browser_required):
        return 1
    pages = len(list(html.rglob("*.html")))
    checked = "pages and links checked" if problems else "pages, links and images checked"
    print(f"Site: {html / 'index.html'} ({pages} HTML files; {checked})")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
