"""`course run`: execute every notebook into build/, and start none after a failure.

Each notebook runs in a fresh kernel (`runner.execute`) whose working folder is build/, not the
checkout: the files a notebook writes go to build/artifacts/<name>/, beside the executed copies and
a summary (summary.json, summary.md). So two runs with different build folders (`make course`, the
tests, CI's device sweep) and a student's own session in notebooks/ never share a folder.
exercises/ is left out: its stubs raise by design.

Two notebooks run at a time (`--jobs`), because one notebook keeps about one core busy: a
kernel's Python and a small model's steps leave the second core mostly idle. A notebook that
times itself (its code calls `timing.Timer`: its verdicts come from its own timings) runs alone
instead, so that another notebook does not slow down what it measures; the others share the
machine first, then the timed ones run one after another, in course order. After a failure no
notebook starts.

Example:
    $ course run --profile quick --devices 3 --only 03
    Running 1 notebook(s) with COURSE_PROFILE=quick into /home/me/course/build
    [1/1] notebooks/03_single_vs_distributed.ipynb: ok in 95.2 s
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

import nbformat

from course_tools.paths import course_root, executed_notebooks
from course_tools.runner import ExecutionResult, execute


def notebooks_to_run(root: Path, only: list[str] | None = None) -> list[Path]:
    """The notebooks that run clean, in course order (`paths.executed_notebooks`); `only` keeps
    those whose file name contains one of the strings."""
    paths = executed_notebooks(root)
    if only:
        paths = [p for p in paths if any(key in p.name for key in only)]
    return paths


def times_itself(path: Path) -> bool:
    """Whether the notebook times itself (a code cell calls `timing.Timer`; every verdict the
    course prints from a measurement is timed that way): such a notebook runs with nothing beside
    it, so that another notebook does not slow down what it measures."""
    notebook = nbformat.read(path, as_version=4)
    return any(c.cell_type == "code" and "timing.Timer(" in c.source for c in notebook.cells)


def schedule(paths: list[Path], alone: set[Path]) -> list[list[Path]]:
    """The order of the run: first the notebooks that may share the machine (one group, run
    `--jobs` at a time), then each of those in `alone` in a group of its own; course order
    within. For example 01, 02 (alone), 04 -> [[01, 04], [02]]."""
    shared = [p for p in paths if p not in alone]
    return ([shared] if shared else []) + [[p] for p in paths if p in alone]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `course run`."""
    parser.add_argument(
        "--profile",
        choices=("quick", "cpu", "full"),
        default="quick",
        help="quick (default): small and fast; cpu: sized for a laptop without GPU; full: original",
    )
    parser.add_argument("--devices", type=int, help="simulated devices (COURSE_DEVICES)")
    parser.add_argument(
        "--build-dir", help="where executed copies and the summary go (default: build/)"
    )
    parser.add_argument(
        "--cell-timeout", type=int, default=900, help="seconds per cell (default: 900)"
    )
    parser.add_argument(
        "--only", nargs="*", help="run only notebooks whose name contains one of these"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="notebooks at a time, but those that time themselves run alone (default: 2, or 1 "
        "on one core)",
    )


def run(args: argparse.Namespace) -> int:
    """Execute the notebooks into build/ (`schedule`), stop after a failure, write a summary."""
    root = course_root()
    build = Path(args.build_dir or root / "build").resolve()
    env = {"COURSE_PROFILE": args.profile}
    if args.devices:
        env["COURSE_DEVICES"] = str(args.devices)
    paths = notebooks_to_run(root, args.only)
    if not paths:
        which = f" whose name contains {' or '.join(args.only)}" if args.only else ""
        print(f"No notebooks{which} found under {root}.", file=sys.stderr)
        return 1
    if args.jobs < 1:
        print(f"course run: --jobs must be at least 1 (got {args.jobs}).", file=sys.stderr)
        return 2
    print(f"Running {len(paths)} notebook(s) with COURSE_PROFILE={args.profile} into {build}")
    build.mkdir(parents=True, exist_ok=True)  # every kernel's working folder
    # One at a time: course order. Else the notebooks that time themselves wait for the others.
    groups = [paths] if args.jobs == 1 else schedule(paths, {p for p in paths if times_itself(p)})
    labels = {p: f"[{i}/{len(paths)}] {p.parent.name}/{p.name}" for i, p in enumerate(paths, 1)}
    results: list[ExecutionResult] = []
    started = time.monotonic()

    def one(path: Path, *, bar: bool, cancel: threading.Event | None = None) -> ExecutionResult:
        progress = labels[path] if bar else None  # two bars at once would garble each other
        if not bar:
            print(f"{labels[path]}: started", flush=True)
        result = execute(
            path,
            build / path.name,
            cwd=build,
            env=env,
            cell_timeout=args.cell_timeout,
            progress=progress,
            cancel=cancel,
        )
        print(f"{labels[path]}: {'ok' if result.ok else 'FAILED'} in {result.seconds:.1f} s")
        return result

    for group in groups:
        results += run_group(group, one, min(args.jobs, len(group)))
        if not all(r.ok for r in results):
            failed = next(r for r in results if not r.ok)
            print(
                f"\nFirst failing cell of {failed.path.name} (executed copy: "
                f"{failed.output_path}):\n{failed.error}",
                file=sys.stderr,
            )
            break
    results.sort(key=lambda r: paths.index(r.path))
    write_summary(build, results, paths, env, wall=time.monotonic() - started)
    return 0 if all(r.ok for r in results) and len(results) == len(paths) else 1


def run_group(
    group: list[Path], one: Callable[..., ExecutionResult], jobs: int
) -> list[ExecutionResult]:
    """Run `group`'s notebooks `jobs` at a time, in order (with a progress bar when one at a
    time); after a failure start no other."""
    results, waiting = [], list(group)
    cancel = threading.Event()
    pool = ThreadPoolExecutor(jobs)
    try:
        running: set[Future] = set()
        while waiting or running:
            while waiting and len(running) < jobs and all(r.ok for r in results):
                running.add(pool.submit(one, waiting.pop(0), bar=jobs == 1, cancel=cancel))
            if not running:
                break
            done, running = wait(running, return_when=FIRST_COMPLETED)
            results += [future.result() for future in done]
    finally:  # Ctrl-C: the running kernels are killed before it goes on
        cancel.set()
        pool.shutdown(wait=True, cancel_futures=True)
    return results


def summary_rows(results: list[ExecutionResult], paths: list[Path]) -> list[dict]:
    """One row per notebook: how it went, or "not run" after the first failure."""
    rows = [
        {
            "notebook": f"{r.path.parent.name}/{r.path.name}",
            "ok": r.ok,
            "seconds": round(r.seconds, 1),
            "executed_copy": r.output_path.name,
            "error": r.error.strip().splitlines()[-1] if r.error.strip() else "",
        }
        for r in results
    ]
    ran = {r.path for r in results}
    rows += [
        {
            "notebook": f"{p.parent.name}/{p.name}",
            "ok": None,
            "seconds": None,
            "executed_copy": "",
            "error": "not run",
        }
        for p in paths
        if p not in ran
    ]
    return rows


def write_summary(
    build: Path,
    results: list[ExecutionResult],
    paths: list[Path],
    env: dict[str, str],
    *,
    wall: float,
) -> None:
    """build/summary.json and build/summary.md: the settings, one row per notebook, and the
    run's wall-clock seconds (less than the notebooks' sum when two ran at a time)."""
    rows = summary_rows(results, paths)
    build.mkdir(parents=True, exist_ok=True)
    summary = {"settings": env, "notebooks": rows, "wall_seconds": round(wall, 1)}
    (build / "summary.json").write_text(json.dumps(summary, indent=2))
    lines = [
        "# Course run",
        "",
        f"Settings: {', '.join(f'{k}={v}' for k, v in env.items())}",
        "",
        "| notebook | result | seconds | executed copy |",
        "|---|---|---|---|",
    ]
    for row in rows:
        status = {True: "ok", False: f"FAILED: {row['error']}", None: "not run"}[row["ok"]]
        seconds = row["seconds"] if row["seconds"] is not None else ""
        lines.append(f"| {row['notebook']} | {status} | {seconds} | {row['executed_copy']} |")
    total = sum(r["seconds"] or 0 for r in rows)
    lines += ["", f"Total: {total:.1f} s of notebook time, {wall:.1f} s from start to end"]
    (build / "summary.md").write_text("\n".join(lines) + "\n")
    print(f"Summary: {build / 'summary.md'}")
