"""The `course` command: check the set-up, run the notebooks headless, benchmark, grade.

course doctor                 versions, devices, settings, data and network
course run [--profile P]      execute every notebook in order into build/, with progress
course bench [--quick]        single device vs distributed throughput (course_utils.tools.bench)
course exercise [--check]     generate exercises/ from solutions/ (course_utils.tools.exercise)
course colab [--check]        Open in Colab badges and install cells (course_utils.tools.colab)
course grade SUBMISSION...    grade exercise submissions (course_utils.tools.grading)
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from course_utils.settings import SettingsError
from course_utils.tools import gpu

#: Folders `course run` executes, in this order. exercises/ is left out: its stubs raise by design.
RUN_FOLDERS = ("notebooks", "solutions")


def course_root(start: Path | None = None) -> Path:
    """The course checkout: the current folder (or a parent) holding notebooks/, else the package's
    parent."""
    here = (start or Path.cwd()).resolve()
    for folder in [here, *here.parents]:
        if (folder / "notebooks").is_dir() and (folder / "course_utils").is_dir():
            return folder
    return Path(__file__).resolve().parents[2]


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def row(label: str, value: str) -> None:
    """One line of `course doctor`: a label column, then the value."""
    print(f"{label:<21}{value}")


def doctor(args: argparse.Namespace) -> int:
    """Print what the course will run on; exit 0 when it can run, 1 when something blocks it."""
    from course_utils import data, setup

    settings = setup(verbose=False)
    import tensorflow as tf

    row("python", f"{platform.python_version()} ({sys.executable})")
    for package in (
        "tensorflow",
        "keras",
        "tf_keras",
        "tensorflow-datasets",
        "tensorboard",
        "nbval",
    ):
        row(package, _version(package))
    legacy = os.environ.get("TF_USE_LEGACY_KERAS", "") in ("1", "true", "True")
    row("keras flavour", "tf_keras (TF_USE_LEGACY_KERAS=1)" if legacy else "Keras 3 (import keras)")
    gpus = tf.config.list_physical_devices("GPU")
    row("physical GPUs", f"{len(gpus)}" + (f" ({', '.join(g.name for g in gpus)})" if gpus else ""))
    gpu.report(row)  # TensorFlow's CUDA/cuDNN build, CUDA libraries, driver, what to do
    logical = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    row("logical devices", f"{len(logical)} ({', '.join(d.name for d in logical)})")
    row(
        "settings",
        f"COURSE_PROFILE={settings.profile} COURSE_DEVICES={settings.devices} "
        f"COURSE_DATA={settings.data}",
    )
    addresses = [spec.download_address for spec in data.SPECS.values()]
    # Each check may wait NETWORK_TIMEOUT_S: in parallel.
    with ThreadPoolExecutor(len(addresses)) as pool:
        reachable = dict(zip(data.SPECS, pool.map(lambda a: data.can_reach(*a), addresses)))
    missing = []
    for name in data.SPECS:
        prepared = data.is_prepared(name)
        if settings.data == "synthetic":
            use = "synthetic (COURSE_DATA=synthetic)"
        elif prepared or reachable[name]:
            use = "real data"
        else:
            missing.append(name)
            use = (
                "synthetic stand-in"
                if settings.data == "auto"
                else "MISSING: COURSE_DATA=tfds will fail"
            )
        disk = "prepared on disk" if prepared else "not on disk"
        server = "reachable" if reachable[name] else "unreachable"
        where = f"{disk}, server {server}"
        row(f"data {name}", f"{use} ({where})")
    row("network", "online" if any(reachable.values()) else "offline: no download server answered")
    from course_utils.cluster import leftover_workers

    leftovers = leftover_workers()
    row(
        "cluster workers",
        f"{len(leftovers)} left running"
        + (f": pids {[p.pid for p in leftovers]}" if leftovers else ""),
    )
    from course_utils.tools import sandbox

    available, detail = sandbox.status()
    row("grading sandbox", detail if available else f"UNAVAILABLE: {detail}")
    return 1 if settings.data == "tfds" and missing else 0


def notebooks_to_run(root: Path, only: list[str] | None = None) -> list[Path]:
    """The course notebooks in order; `only` keeps those whose file name contains one of the
    strings."""
    paths = [p for folder in RUN_FOLDERS for p in sorted((root / folder).glob("*.ipynb"))]
    if only:
        paths = [p for p in paths if any(key in p.name for key in only)]
    return paths


def run(args: argparse.Namespace) -> int:
    """Execute the notebooks in order into build/, stop at the first failure, write a summary."""
    from course_utils.tools.runner import execute

    root = course_root()
    build = Path(args.build_dir or root / "build").resolve()
    env = {"COURSE_PROFILE": args.profile}
    if args.devices:
        env["COURSE_DEVICES"] = str(args.devices)
    paths = notebooks_to_run(root, args.only)
    if not paths:
        print(f"No notebooks found under {root} ({', '.join(RUN_FOLDERS)}).", file=sys.stderr)
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
    _write_summary(build, results, paths, env)
    return 0 if all(r.ok for r in results) and len(results) == len(paths) else 1


def _write_summary(build: Path, results: list, paths: list[Path], env: dict[str, str]) -> None:
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
        lines.append(
            f"| {row['notebook']} | {status} | "
            f"{row['seconds'] if row['seconds'] is not None else ''} | {row['executed_copy']} |"
        )
    total = sum(r["seconds"] or 0 for r in rows)
    lines += ["", f"Total: {total:.1f} s"]
    (build / "summary.md").write_text("\n".join(lines) + "\n")
    print(f"Summary: {build / 'summary.md'}")


#: Subcommands that live in their own modules: name -> (module, help). Each module has
#: `add_arguments(parser)` and `run(args) -> int`.
PLUGGED_COMMANDS = {
    "bench": (
        "course_utils.tools.bench",
        "time single device vs distributed training and print the ratios",
    ),
    "exercise": (
        "course_utils.tools.exercise",
        "generate exercises/ from solutions/ (or --check they match)",
    ),
    "colab": (
        "course_utils.tools.colab",
        "write the Open in Colab badge and install cell into every notebook (or --check them)",
    ),
    "grade": (
        "course_utils.tools.grading",
        "grade exercise submissions: reports and a CSV gradebook",
    ),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser. Plugged subcommands get their module's arguments only when `command`
    names them: importing course_utils.tools.bench imports TensorFlow, which `course exercise` or
    `course run` (whose kernels are separate processes) should not pay for."""
    parser = argparse.ArgumentParser(
        prog="course", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "doctor", help="versions, devices, settings, data and network"
    ).set_defaults(func=doctor)
    run_parser = commands.add_parser("run", help="execute the notebooks in order into build/")
    run_parser.add_argument(
        "--profile",
        choices=("quick", "cpu", "full"),
        default="quick",
        help="quick (default): small and fast; cpu: sized for a laptop without GPU; full: original",
    )
    run_parser.add_argument("--devices", type=int, help="simulated devices (COURSE_DEVICES)")
    run_parser.add_argument(
        "--build-dir", help="where executed copies and the summary go (default: build/)"
    )
    run_parser.add_argument(
        "--cell-timeout", type=int, default=900, help="seconds per cell (default: 900)"
    )
    run_parser.add_argument(
        "--only", nargs="*", help="run only notebooks whose name contains one of these"
    )
    run_parser.set_defaults(func=run)
    for name, (module_name, help_text) in PLUGGED_COMMANDS.items():
        sub = commands.add_parser(name, help=help_text)
        if name == command:
            module = importlib.import_module(module_name)
            module.add_arguments(sub)
            sub.set_defaults(func=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    try:
        return args.func(args)
    except SettingsError as exc:
        print(f"course: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("course: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
