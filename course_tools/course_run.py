"""`course run`: execute every notebook in order into build/, stop at the first failure.

Each notebook runs in a fresh kernel in its own folder (`runner.execute`); the executed copies
and a summary (summary.json, summary.md) go to build/. exercises/ is left out: its stubs raise by
design.

Example:
    $ course run --profile quick --devices 3 --only 03
    Running 1 notebook(s) with COURSE_PROFILE=quick into /home/me/course/build
    [1/1] notebooks/03_single_vs_distributed.ipynb: ok in 95.2 s
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from course_tools.paths import course_root, executed_notebooks
from course_tools.runner import ExecutionResult, execute


def notebooks_to_run(root: Path, only: list[str] | None = None) -> list[Path]:
    """The notebooks that run clean, in course order (`paths.executed_notebooks`); `only` keeps
    those whose file name contains one of the strings."""
    paths = executed_notebooks(root)
    if only:
        paths = [p for p in paths if any(key in p.name for key in only)]
    return paths


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


def run(args: argparse.Namespace) -> int:
    """Execute the notebooks in order into build/, stop at the first failure, write a summary."""
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
    print(f"Running {len(paths)} notebook(s) with COURSE_PROFILE={args.profile} into {build}")
    results = []
    for index, path in enumerate(paths, 1):
        label = f"[{index}/{len(paths)}] {path.parent.name}/{path.name}"
        result = execute(
            path, build / path.name, env=env, cell_timeout=args.cell_timeout, progress=label
        )
        results.append(result)
        print(f"{label}: {'ok' if result.ok else 'FAILED'} in {result.seconds:.1f} s")
        if not result.ok:
            print(
                f"\nFirst failing cell of {path.name} (executed copy: "
                f"{result.output_path}):\n{result.error}",
                file=sys.stderr,
            )
            break
    write_summary(build, results, paths, env)
    return 0 if all(r.ok for r in results) and len(results) == len(paths) else 1


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
    build: Path, results: list[ExecutionResult], paths: list[Path], env: dict[str, str]
) -> None:
    """build/summary.json and build/summary.md: the settings and one row per notebook."""
    rows = summary_rows(results, paths)
    build.mkdir(parents=True, exist_ok=True)
    (build / "summary.json").write_text(json.dumps({"settings": env, "notebooks": rows}, indent=2))
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
    lines += ["", f"Total: {total:.1f} s"]
    (build / "summary.md").write_text("\n".join(lines) + "\n")
    print(f"Summary: {build / 'summary.md'}")
