"""The `course` command: check the set-up, run the notebooks headless, benchmark, grade.

course doctor                 versions, devices, settings, data and network
course run [--profile P]      execute every notebook into build/ (two at a time), with progress
course bench [--quick]        single device vs distributed throughput (course_tools.bench)
course exercise [--check]     generate exercises/ from solutions/ (course_tools.exercise)
course colab [--check]        Open in Colab badges and install cells (course_tools.colab)
course grade SUBMISSION...    grade exercise submissions (course_tools.grade.command)
"""

from __future__ import annotations

import argparse
import importlib
import sys

from course_utils.settings import SettingsError

#: Each subcommand: name -> (its module, help). Every module has `add_arguments(parser)` and
#: `run(args) -> int`.
COMMANDS = {
    "doctor": ("course_tools.doctor", "versions, devices, settings, data and network"),
    "run": ("course_tools.course_run", "execute the notebooks in order into build/"),
    "bench": (
        "course_tools.bench",
        "time single device vs distributed training and print the ratios",
    ),
    "exercise": (
        "course_tools.exercise",
        "generate exercises/ from solutions/ (or --check they match)",
    ),
    "colab": (
        "course_tools.colab",
        "write the Open in Colab badge and install cell into every notebook (or --check them)",
    ),
    "grade": (
        "course_tools.grade.command",
        "grade exercise submissions, here or as a Slurm job array: reports and gradebooks",
    ),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser. Only the module of `command` is imported (by name, with importlib),
    for its arguments: course_tools.bench imports TensorFlow, which `course exercise` or
    `course run` (whose kernels are separate processes) should not pay for."""
    parser = argparse.ArgumentParser(
        prog="course", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
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
