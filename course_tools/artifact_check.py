"""Check what a notebook run left in its artifacts folder (.ci/device-sweep, and the tests'
nbval and browser runs): the files the notebook promises, and that every conclusion it printed
follows from the numbers it recorded beside it. Where a notebook's rule is the course's code
(`course_utils.verdict`), the check re-runs that same rule: it catches a stale or edited record,
not a wrong rule, which the unit tests check.

- `conclusions.json` (notebooks whose cells call `course_utils.timing.record`): each verdict's
  word and percentage are derived again here from its samples, with code of its own (all pairs of
  samples, numpy medians), so a sentence such as "slower" over rounds that overlap fails whoever
  wrote it.
- `results.json` of notebooks 3 and 3b: the regime they printed (overhead-, per-example-,
  memory-bandwidth- or compute-bound, below both roofs, no single part dominating, undecided or
  withheld) is derived again from the batch sweep (and 3b's measured roofline) they recorded,
  3b's by re-running `course_utils.verdict.regime`, the rule its cells call, on the numbers it
  recorded (this confirms the record, not the rule: the unit tests check the rule); 3b's recorded
  limits and step times must be the ones its rounds give, its mixed-precision speed withheld on
  a busy machine (and then absent from conclusions.json), and each pair of section 4's models
  given the lean its split gives (scipy's exact binomial test), none with a model at chance;
  what it says an undecided run rules out, and its side of the ridge (none from busy sets, from
  a limit whose sets all ran starved, or from a peak a training run beat), must be what its
  numbers give.
- Notebook 3's load rule (`load_problems`), section 2's and 3b's: other programs above
  `timing.BUSY` of the cores in a round of a set give no verdict from it; its record must say so
  for section 2 and for the sweep, and hold conclusions.json only after a quiet section 2. Its
  cross-check (`cross_check_problems`): section 2's loop, measured again in the sweep, that moved
  beyond the line's tolerance gives no verdict either, and the record must say so.
- The thresholds come from the course's code, never from the record checked (`THRESHOLDS`,
  `ALL_REDUCE_THRESHOLDS`): a record that stores another value, or none, fails, so a notebook
  edit that stops saving one cannot turn its gate off.
- `results.json` of notebook 3c: the all-reduce's two lines (up to 1 MiB, and from 4 to 16 MiB
  with an intercept of its own) are fitted again from the rounds it recorded, a measured size
  beyond the tolerance the notebook states must have been flagged (with
  one replica: every size within the tolerance of the loop alone, or flagged), and "alpha
  dominates" (or the bytes, or too close to call within the line's worst error) must follow,
  withheld as in 3b when other programs used more than `timing.BUSY` of the cores during a set
  of its rounds; the all-reduce's share of a step withheld then too, when the line misses a size
  beyond the tolerance, or when the step's own rounds were busy; the step's time, a share given
  and the addition's cost of a large byte re-derived from their own rounds.

Example:
    $ .venv/bin/python -m course_tools.artifact_check notebooks/03_single_vs_distributed.ipynb
    notebooks/03_single_vs_distributed.ipynb: artifacts as promised
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
from scipy.stats import binomtest

from course_tools import output_check
from course_tools.paths import artifacts_folder
from course_utils import timing, verdict

#: Files each notebook must leave in its artifacts folder (glob patterns).
EXPECTED_ARTIFACTS: dict[str, list[str]] = {
    "01_keras_fit_mnist": [
        "checkpoints/ckpt_1.weights.h5",
        "mnist_model.keras",
        "logs/train/events.out.tfevents.*",
        "fault_tolerance/*/ckpt_*.keras",
        "learning_curves.png",
    ],
    "02_custom_loop_fashion_mnist": [
        "checkpoints/checkpoint",
        "checkpoints/ckpt-*.index",
        "checkpoints/ckpt-*.data-*",
        "learning_curves.png",  # conclusions.json only on a quiet machine: checked when written
    ],
    "03_single_vs_distributed": ["results.json"],  # conclusions.json only on a quiet machine
    "03b_where_time_goes": ["results.json"],  # conclusions.json only when its speed was printed
    "03c_allreduce_and_profile": ["results.json", "profile/plugins/profile/*/*.xplane.pb"],
    "05_svhn_solution": [
        "fit_model.keras",
        "custom_model.keras",
        "single_model.keras",
        "results.json",
        "fit_ckpt/ckpt_*.weights.h5",
        "custom_ckpt/ckpt-*.index",
    ],
}
#: Notebooks whose results.json holds a batch sweep and the regime printed from it.
REGIME_NOTEBOOKS = ("03_single_vs_distributed", "03b_where_time_goes")
#: Notebooks whose results.json holds the all-reduce's rounds and the line fitted through them.
ALL_REDUCE_NOTEBOOKS = ("03c_allreduce_and_profile",)
#: The thresholds 3b's verdict uses, from the code: its record must store exactly these.
THRESHOLDS = {
    "busy": timing.BUSY,
    "line_tolerance": verdict.LINE_TOLERANCE,
    "min_rounds": verdict.MIN_ROUNDS,
    "majority": verdict.MAJORITY,
    "count_margin": verdict.COUNT_MARGIN,
}
#: The thresholds 3c's call and share use, from the code: its record must store exactly these.
ALL_REDUCE_THRESHOLDS = {"busy": timing.BUSY, "tolerance": verdict.ALL_REDUCE_TOLERANCE}


def expected_word(record: dict) -> str:
    """The word a verdict must use: "faster" when every sample of a is above every sample of b,
    "slower" when below, else "within noise" (as `course_utils.timing.compare` promises)."""
    a, b = record["a_samples"], record["b_samples"]
    if all(x > y for x, y in itertools.product(a, b)):
        return "faster"
    if all(y > x for x, y in itertools.product(a, b)):
        return "slower"
    return "within noise"


def conclusion_problems(path: Path) -> list[str]:
    """One line per recorded verdict at `path` that its own samples contradict."""
    records = json.loads(Path(path).read_text())
    if not records:
        return [f"{path.name} holds no conclusions"]
    found = []
    for record in records:
        where = f"{path.name}: {record['sentence']!r}"
        ratio = float(np.median(record["a_samples"]) / np.median(record["b_samples"]))
        word, sentence = expected_word(record), record["sentence"]
        claimed = re.findall(r"(\d+)% (faster|slower)", sentence)
        if not math.isclose(record["speed_ratio"], ratio, rel_tol=1e-9):
            found.append(f"{where}: speed ratio {record['speed_ratio']}, the samples give {ratio}")
        elif record["word"] != word:
            found.append(f"{where}: the samples say {word!r}")
        elif record["a"] not in sentence or record["b"] not in sentence:
            found.append(f"{where}: does not name {record['a']!r} and {record['b']!r}")
        elif word == "within noise" and ("within noise" not in sentence or claimed):
            found.append(f"{where}: the samples say 'within noise'")
        elif word != "within noise" and claimed != [(f"{100 * abs(ratio - 1):.0f}", word)]:
            found.append(f"{where}: the samples say {100 * abs(ratio - 1):.0f}% {word}")
    return found


def sweep_ms(results: dict) -> list[float]:
    """The sweep's ms per step: notebook 3b's (its record holds the step's intensity) are its
    points' fastest rounds (`verdict.sweep_ms`); notebook 3's, each point's median round
    (examples per second) worked out again, as `timing.RunResult.step_ms` does, where the point
    recorded its rounds."""
    if "intensity" in results:
        return verdict.sweep_ms(results)
    return [
        1000 * point["global_batch"] / float(np.median(point["rounds"]))
        if point.get("rounds")
        else point["step_ms"]
        for point in results["sweep"]
    ]


def expected_regime(results: dict) -> str | None:
    """The verdict notebooks 3 and 3b give for a sweep. Notebook 3: a line through (batch,
    ms/step) gives the fixed part of a step, overhead-bound when it is over half the step, else
    per-example-bound, and none (None) when the fixed part is below zero. Notebook 3b (its record
    holds the step's intensity): `verdict.regime`, the rule its cells call, from the rounds it
    recorded."""
    if "intensity" in results:
        return verdict.regime(results)
    batches = [point["global_batch"] for point in results["sweep"]]
    step_ms = sweep_ms(results)
    per_example_ms, fixed_ms, _ = verdict.sweep_line(batches, step_ms)
    if fixed_ms < 0:  # no fixed part worth reading: the notebook records no regime
        return None
    fixed_share = fixed_ms / step_ms[batches.index(results["batch"])]
    return "overhead-bound" if fixed_share > 0.5 or per_example_ms <= 0 else "per-example-bound"


def threshold_problems(results: dict, thresholds: dict[str, float]) -> list[str]:
    """One line per threshold the record does not store, or stores with another value than the
    code's: the check then uses the code's, and says so.

    >>> threshold_problems({"busy": 0.5}, {"busy": 0.2, "tolerance": 0.25})
    ['busy 0.5 recorded, the code says 0.2', 'tolerance not recorded (the code says 0.25)']
    """
    found = []
    for key, value in thresholds.items():
        if key not in results:
            found.append(f"{key} not recorded (the code says {value:g})")
        elif not math.isclose(results[key], value):
            found.append(f"{key} {results[key]:g} recorded, the code says {value:g}")
    return found


def limit_problems(results: dict) -> list[str]:
    """Notebook 3b's limits: each recorded limit and its low end must be the ones its sets of
    rounds give (the fastest round of all, at least the fastest training run for the peak; the
    fastest of the other sets), times the physical devices."""
    found = []
    for (name, (value, low)), key in zip(
        verdict.limits_of(results).items(), ("peak_flops", "memory_bandwidth")
    ):
        if not math.isclose(results[key], value):
            found.append(f"{key} {results[key]:.4g}, its sets of rounds give {value:.4g}")
        recorded_low = results["limits"][name][1]
        if not math.isclose(recorded_low, low):
            found.append(f"the {name}'s low end {recorded_low:.4g}, its sets give {low:.4g}")
    return found


def ridge_problems(results: dict) -> list[str]:
    """Notebook 3b's record: what it says an undecided run rules out (`verdict.ruled_out`) and
    its side of the ridge (`verdict.ridge`: none from busy sets, a limit whose sets all ran
    starved, or a peak a training run beat), each against what its own numbers give, when
    recorded."""
    found = []
    if "ruled_out" in results and results["ruled_out"] != verdict.ruled_out(results):
        found.append(
            f"ruled out {results['ruled_out']}, its record says {verdict.ruled_out(results)}"
        )
    if "ridge" in results and results["ridge"] != verdict.ridge(results):
        found.append(
            f"side of the ridge {results['ridge']!r}, its record says {verdict.ridge(results)!r}"
        )
    return found


def regime_problems(path: Path) -> list[str]:
    """The regime recorded at `path` if its own sweep says another one, (3) what is wrong with its
    line, and (3b) its limits and thresholds: the regime is worked out at the code's thresholds,
    whatever the record stores."""
    results = json.loads(Path(path).read_text())
    found = []
    if "intensity" in results:  # notebook 3b
        found += [f"{path.name}: {p}" for p in threshold_problems(results, THRESHOLDS)]
        results |= THRESHOLDS
        found += [f"{path.name}: {p}" for p in ridge_problems(results)]
    else:  # notebook 3: its line checked at every point, as 3b's is
        tolerance = {"line_tolerance": verdict.LINE_TOLERANCE}
        found += [f"{path.name}: {p}" for p in threshold_problems(results, tolerance)]
        said = verdict.line_problem(
            [point["global_batch"] for point in results["sweep"]],
            list(sweep_ms(results)),
            verdict.LINE_TOLERANCE,
        )
        if results.get("line_problem") != said:
            found.append(
                f"{path.name}: line_problem {results.get('line_problem')!r}, "
                f"its sweep says {said!r}"
            )
        for point, median in zip(results["sweep"], sweep_ms(results)):
            if not point.get("rounds"):
                found.append(
                    f"{path.name}: no rounds recorded at a batch of {point['global_batch']}"
                )
            elif not math.isclose(point["step_ms"], median, rel_tol=1e-6):
                found.append(
                    f"{path.name}: {point['step_ms']:.2f} ms per step at a batch of "
                    f"{point['global_batch']}, its median round gives {median:.2f}"
                )
    regime = expected_regime(results)
    if results["regime"] != regime:
        found.append(f"{path.name}: regime {results['regime']!r}, its sweep says {regime!r}")
    if "peak_rounds" in results:
        found += [f"{path.name}: {problem}" for problem in limit_problems(results)]
    for point, fastest in zip(
        results["sweep"], sweep_ms(results) if "intensity" in results else []
    ):
        if not math.isclose(point["fastest_ms"], fastest):  # 3b's: its fastest round's ms
            found.append(
                f"{path.name}: {point['fastest_ms']:.2f} ms per step at a batch of "
                f"{point['global_batch']}, its fastest round gives {fastest:.2f}"
            )
    return found


def load_problems(path: Path) -> list[str]:
    """Notebook 3's load rule: `busy` (section 2) and `sweep_busy` (the sweep, which decides the
    regime) must be what the loads recorded beside their rounds give at `timing.BUSY`, the code's
    threshold; conclusions.json lies beside the record exactly when section 2 was not busy (its
    verdicts printed)."""
    results = json.loads(Path(path).read_text())
    found = []
    for flag, loads in (("busy", "core_loads"), ("sweep_busy", "sweep_loads")):
        if flag not in results or loads not in results:
            found.append(f"{path.name}: {flag} or {loads} not recorded")
            continue
        most = max(results[loads], default=0.0)
        if results[flag] != (most > timing.BUSY):
            found.append(
                f"{path.name}: {flag} {results[flag]}, with other programs at up to {most:.0%} "
                f"of the cores (the rule: over {timing.BUSY:.0%})"
            )
    most = max(results.get("core_loads", []), default=0.0)
    written = (path.parent / "conclusions.json").exists()
    if most > timing.BUSY and written:
        found.append(
            f"conclusions.json: verdicts recorded, though section 2 printed none (other "
            f"programs at up to {most:.0%} of the cores)"
        )
    elif most <= timing.BUSY and not written:
        found.append("conclusions.json not written, though section 2 printed its verdicts")
    return found


LINES = ("small", "large")  # 3c's two ranges of sizes, a line through each


def fit_line(sizes: list, seconds: list) -> tuple[float, float]:
    """(intercept, beta) through (size, seconds), each residual weighted by 1 / time (relative
    errors), as notebook 3c's own `fit_line`, written again here."""
    y = np.asarray(seconds, dtype=float)
    intercept, beta = np.polyfit(np.asarray(sizes, dtype=float), y, 1, w=1 / y)[::-1]
    return float(intercept), float(beta)


def all_reduce_fit(results: dict) -> dict:
    """Notebook 3c's line, fitted again from its rounds with code of its own: each size's time is
    its fastest round less the loop's fastest; a line through the small sizes (alpha, beta) and
    one through the large (an intercept and beta of their own), each weighting every residual by
    1 / time (relative errors)."""
    rounds = {key: value for key, value in results["samples"].items() if key != "loop alone"}
    overhead = min(results["samples"]["loop alone"])
    seconds = {int(size): min(value) - overhead for size, value in rounds.items()}
    fitted = {part: fit_line(results[part], [seconds[s] for s in results[part]]) for part in LINES}

    def line(size: int) -> float:
        intercept, beta = fitted["small" if size <= max(results["small"]) else "large"]
        return intercept + beta * size

    errors = {size: line(size) / t - 1 for size, t in seconds.items()}
    (alpha, beta_small), (alpha_large, beta_large) = fitted["small"], fitted["large"]
    return {
        "alpha": alpha,
        "beta_small": beta_small,
        "alpha_large": alpha_large,
        "beta_large": beta_large,
        "seconds": seconds,
        "errors": errors,
    }


def step_share_problems(results: dict, name: str) -> list[str]:
    """Notebook 3c's section 4: the all-reduce's share of a step (`step_share`) must be withheld
    (null) with one replica, when other programs used more than `timing.BUSY` of the cores
    during the step's rounds (`step_load`) or during a set of the line's rounds (`loads`), and
    when the line misses a measured size beyond the tolerance (`flagged`) or its alpha exceeds a
    size's whole time beyond the line's worst miss (`verdict.alpha_above`): as its alpha-or-bytes
    call, and as 3b withholds its verdict."""
    missing = [k for k in ("step_load", "step_share", "loads", "flagged") if k not in results]
    if missing:
        return [f"{name}: {', '.join(missing)} not recorded"]
    if results["step_share"] is None:
        return []
    given = f"{name}: a share of a step given"
    if results["replicas"] == 1:
        return [f"{given} with one replica"]
    found = []
    if results["step_load"] > timing.BUSY:
        found.append(
            f"{given} while other programs used {100 * results['step_load']:.0f}% of the cores "
            "during the step's rounds"
        )
    if max(results["loads"], default=0.0) > timing.BUSY:
        found.append(
            f"{given} from a line measured while other programs used "
            f"{100 * max(results['loads']):.0f}% of the cores"
        )
    if results["flagged"]:
        found.append(f"{given} from a line that misses a measured size (flagged)")
    contradicted = verdict.alpha_above(all_reduce_fit(results))  # as section 2's call
    if contradicted:
        found.append(f"{given} from a line whose {contradicted}")
    return found


def step_and_addition_problems(results: dict, name: str) -> list[str]:
    """Notebook 3c's step and its costs of a large byte, from their rounds: the step's time is
    its rounds' fastest (`step_rounds`), a share of it given is the line's time at the gradients'
    size over that time, and the all-reduce's and the addition's printed costs of a large byte
    (`reduce_line`, `add_line`, none with one replica) are what their rounds and loads give
    (`verdict.jump_line` on this module's `fit_line`: no trend above `timing.BUSY`)."""
    needed = ("step_rounds", "add_samples", "add_line", "add_load", "reduce_line")
    missing = [k for k in needed if k not in results]
    if missing:
        return [f"{name}: {', '.join(missing)} not recorded"]
    found, fastest = [], min(results["step_rounds"])
    if not math.isclose(results["fastest_ms"], fastest, rel_tol=1e-9):
        found.append(
            f"{name}: step {results['fastest_ms']:.3f} ms, its rounds' fastest {fastest:.3f}"
        )
    if results["step_share"] is not None and results["replicas"] > 1:  # 1: step_share_problems
        fit, size = all_reduce_fit(results), results["gradient_bytes"]
        share = (1 + fit["errors"][size]) * fit["seconds"][size] * 1000 / fastest  # line / step
        if not math.isclose(results["step_share"], share, rel_tol=1e-6):
            found.append(
                f"{name}: step share {results['step_share']:.4f}, its rounds give {share:.4f}"
            )
    samples = {int(size): t for size, t in results["add_samples"].items()}
    said = {"add_line": None, "reduce_line": None}  # none with one replica
    if samples:
        ranges = (results["small"], results["large"], fit_line, verdict.ALL_REDUCE_TOLERANCE)
        reduce = {int(k): t for k, t in results["samples"].items() if k != "loop alone"}
        reduce = {k: t for k, t in reduce.items() if k in ranges[0] or k in ranges[1]}
        load = max(results.get("loads", []), default=0.0)  # missing: step_share_problems
        less = min(results["samples"]["loop alone"])
        quick = results.get("quick", False)  # a trend stated in quick is labelled a smoke test
        said["reduce_line"] = verdict.jump_line(
            "all-reduce", reduce, ranges, load=load, less=less, quick=quick
        )
        what, load = "addition over the same bytes", results["add_load"]
        said["add_line"] = verdict.jump_line(what, samples, ranges, load=load, quick=quick)
    for key, what in (("reduce_line", "all-reduce"), ("add_line", "addition")):
        if results[key] != said[key]:
            found.append(f"{name}: {what} {results[key]!r} printed, its rounds give {said[key]!r}")
    return found


def all_reduce_problems(path: Path) -> list[str]:
    """Notebook 3c's all-reduce at `path`: the recorded line must be the one its rounds give, a
    measured size beyond the stated tolerance of it must have been flagged, and "alpha dominates"
    must follow from the line at the gradients' size, or be withheld when the line misses a size
    beyond the tolerance (as 3b's sweep line) or when other programs used
    more than `timing.BUSY` of the cores during a set of rounds (`loads`). With one replica
    nothing is sent: nothing is fitted, and every size must be within the tolerance of the loop
    alone, or flagged. The share of a step, as `step_share_problems`. The tolerance and the busy
    share are the code's (`ALL_REDUCE_THRESHOLDS`); a record storing others, or none, fails."""
    results = json.loads(Path(path).read_text())
    if results["replicas"] == 1 and "alpha" in results:
        return [f"{path.name}: a line fitted with one replica"]
    found = [f"{path.name}: {p}" for p in threshold_problems(results, ALL_REDUCE_THRESHOLDS)]
    found += step_share_problems(results, path.name) + step_and_addition_problems(
        results, path.name
    )
    tolerance, flagged = verdict.ALL_REDUCE_TOLERANCE, results.get("flagged", False)
    if results["replicas"] == 1:
        overhead = min(results["samples"]["loop alone"])
        worst = max(
            abs(min(value) / overhead - 1)
            for key, value in results["samples"].items()
            if key != "loop alone"
        )
        if worst > tolerance and not flagged:
            found.append(
                f"{path.name}: with one replica a size differs from the loop alone by "
                f"{100 * worst:.0f}% (tolerance {100 * tolerance:.0f}%), not flagged"
            )
        return found
    fit = all_reduce_fit(results)
    for key in ("alpha", "beta_small", "alpha_large", "beta_large"):
        if key not in results:
            found.append(f"{path.name}: {key} not recorded")
        elif not math.isclose(results[key], fit[key], rel_tol=1e-6, abs_tol=1e-12):
            found.append(f"{path.name}: {key} {results[key]:.4g}, its rounds give {fit[key]:.4g}")
    for size, error in fit["errors"].items():
        if abs(error) > tolerance and not flagged:
            found.append(
                f"{path.name}: at {size / 1024:,.0f} KiB the line misses the measured time by "
                f"{100 * error:+.0f}% (tolerance {100 * tolerance:.0f}%), not flagged"
            )
    # the code's rule, on the line fitted again here (as 3b's verdict.regime)
    dominates = verdict.all_reduce_call(
        fit, results["gradient_bytes"], results.get("loads", []), timing.BUSY
    )
    if results["dominates"] != dominates:
        found.append(f"{path.name}: {results['dominates']!r} printed, its line says {dominates!r}")
    return found


def speed_problems(path: Path) -> list[str]:
    """Notebook 3b's mixed-precision speed (section 4): the load during its rounds must be
    recorded (`speed_load`), and the line printed (`speed`) withheld when other programs used
    more than `timing.BUSY` of the cores then, as every verdict of 3b; a verdict otherwise (its
    word is checked against its samples in conclusions.json). conclusions.json lies beside the
    record exactly when the speed was printed, not withheld (as notebook 3's `load_problems`)."""
    results = json.loads(Path(path).read_text())
    if "speed_load" not in results or "speed" not in results:
        return [f"{path.name}: the mixed-precision speed's load or line not recorded"]
    load, line = results["speed_load"], results["speed"]
    if (load > timing.BUSY) != line.startswith("withheld: the machine was busy"):
        return [f"{path.name}: mixed precision's speed {line!r} printed with others at {load:.0%}"]
    written = (path.parent / "conclusions.json").exists()
    if load > timing.BUSY and written:
        return [f"conclusions.json: a speed recorded, though {path.name} withheld it ({line!r})"]
    if load <= timing.BUSY and not written:
        return [f"conclusions.json not written, though {path.name} printed a speed ({line!r})"]
    return []


def lean_problems(path: Path) -> list[str]:
    """Notebook 3b's section 4: each pair's lean (`leans`: the `fit` and the loop pair) worked out
    again from its split (images only the mixed-precision model gets right, only float32's) and
    its accuracies on `test_images` images: none when a model is not above chance (0.1 + 3 x
    sqrt(0.1 x 0.9 / n)), else the side the split favours when scipy's exact binomial test at
    1/2 gives under 5%, "no lean beyond the noise" otherwise."""
    results = json.loads(Path(path).read_text())
    if "leans" not in results or "test_images" not in results:
        return [f"{path.name}: section 4's leans or its number of test images not recorded"]
    chance = 0.1 + 3 * math.sqrt(0.1 * 0.9 / results["test_images"])
    found = []
    for pair, said in results["leans"].items():
        (mixed, float32), accuracy = said["only"], said["accuracy"]
        policy = next(name for name in accuracy if name != "float32")
        p = binomtest(min(mixed, float32), mixed + float32).pvalue if mixed + float32 else 1.0
        lean = f"leans to {policy if mixed > float32 else 'float32'}"
        if min(accuracy.values()) <= chance:
            lean = "no comparison (a model at chance level)"
        elif p >= 0.05:
            lean = "no lean beyond the noise"
        if said["lean"] != lean:
            found.append(f"{path.name}: the {pair} pair {said['lean']!r}, its split gives {lean!r}")
    return found


def fit_gap_problems(path: Path) -> list[str]:
    """Notebook 3's cell that sets `fit` beside the loop at one step a call: the sweep line's
    fixed part it compares with (`fixed_ms`) worked out again from the sweep, and the gap
    (`fit_minus_loop_ms`) from the two runs' median rounds where their verdict was recorded."""
    results = json.loads(Path(path).read_text())
    if "fixed_ms" not in results:
        return [f"{path.name}: fixed_ms not recorded"]
    batches = [point["global_batch"] for point in results["sweep"]]
    _, fixed_ms, _ = verdict.sweep_line(batches, sweep_ms(results))
    found = []
    if not math.isclose(results["fixed_ms"], fixed_ms, rel_tol=1e-6, abs_tol=1e-9):
        found.append(
            f"{path.name}: fixed_ms {results['fixed_ms']:.3f}, its sweep gives {fixed_ms:.3f}"
        )
    conclusions = path.parent / "conclusions.json"
    records = json.loads(conclusions.read_text()) if conclusions.exists() else []
    for record in records:
        if record["a"].endswith("1 step/call") and record["b"].endswith("+ fit"):
            ms = [
                1000 * results["batch"] / float(np.median(record[k]))
                for k in ("b_samples", "a_samples")
            ]
            if not math.isclose(
                results["fit_minus_loop_ms"], ms[0] - ms[1], rel_tol=1e-6, abs_tol=1e-6
            ):
                found.append(
                    f"{path.name}: fit_minus_loop_ms {results['fit_minus_loop_ms']:.3f}, "
                    f"the recorded rounds give {ms[0] - ms[1]:.3f}"
                )
    return found


def cross_check_problems(path: Path) -> list[str]:
    """Notebook 3's cross-check: `noisy_cross_check` must be what `cross_check_moved` (section 2's
    loop against its repeat in the sweep) gives at `verdict.LINE_TOLERANCE`, the code's own."""
    results = json.loads(Path(path).read_text())
    if "cross_check_moved" not in results or "noisy_cross_check" not in results:
        return [f"{path.name}: cross_check_moved or noisy_cross_check not recorded"]
    moved, noisy = results["cross_check_moved"], results["noisy_cross_check"]
    if noisy != (abs(moved) > verdict.LINE_TOLERANCE):
        return [
            f"{path.name}: noisy_cross_check {noisy}, with a repeat that moved {moved:+.0%} "
            f"(the rule: over {verdict.LINE_TOLERANCE:.0%})"
        ]
    return []


def problems(notebook: Path, since: float = 0.0) -> list[str]:
    """What is wrong with what a run of `notebook` (in its own folder) left in its artifacts
    folder: a promised file missing, or older than `since` (seconds since the epoch, when the
    run started: a file an earlier run left does not count), and conclusions or a regime that
    their own numbers contradict."""
    folder = artifacts_folder(notebook)
    found = []
    for pattern in EXPECTED_ARTIFACTS.get(notebook.stem, []):
        if not [p for p in folder.glob(pattern) if p.stat().st_mtime >= since]:
            found.append(f"{pattern} not written under {folder}")
    if (folder / "conclusions.json").exists():
        found += conclusion_problems(folder / "conclusions.json")
    if notebook.stem in REGIME_NOTEBOOKS and (folder / "results.json").exists():
        found += regime_problems(folder / "results.json")
    if notebook.stem == "03_single_vs_distributed" and (folder / "results.json").exists():
        found += load_problems(folder / "results.json")
        found += cross_check_problems(folder / "results.json")
        found += fit_gap_problems(folder / "results.json")
    if notebook.stem == "03b_where_time_goes" and (folder / "results.json").exists():
        found += speed_problems(folder / "results.json")
        found += lean_problems(folder / "results.json")
    if notebook.stem in ALL_REDUCE_NOTEBOOKS and (folder / "results.json").exists():
        found += all_reduce_problems(folder / "results.json")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path, help="the notebooks that ran")
    parser.add_argument("--since", type=float, default=0.0, help="when the run started (epoch)")
    args = parser.parse_args(argv)
    found = {str(notebook): problems(notebook, since=args.since) for notebook in args.notebooks}
    return output_check.report(found, clean="artifacts as promised")


if __name__ == "__main__":
    sys.exit(main())
