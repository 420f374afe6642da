"""Helpers for the hidden tests of the SVHN exercise: each one checks a file or a fact, or raises
`CheckError`.

The hidden tests (in `solutions/05_svhn_solution.ipynb`) run in the grader's check process, which
never runs student code, with four names defined: `settings`, `ARTIFACTS` (the submission's
artifacts folder), `FACTS` (what `grade.core.probe` found in the student's kernel) and `OBSERVED`
(what the grader saw itself: the code cells' sources and times, when each artifact last changed,
by its own clock). In the solution itself they run in the notebook's own kernel, with `OBSERVED`
None (the checks that need it are skipped). A `CheckError` message is what the student reads in
the report, so each one says what is wrong and what to do.

A point rests on what the grader observes: the saved files, measured here (accuracies, losses,
optimizer steps, each per-epoch checkpoint evaluated, whether the models differ), its own clock
(`file_times`) and the notebook's code read as code (`reading`: models created under the
strategy's scope, pipelines, `compute_loss`). The kernel's facts (mirrored variables, what the
input pipelines yield, which weights the kernel holds) only corroborate: they can take a point
away, never give one alone, and count for nothing once the kernel looks tampered with
(`assert_kernel_trusted`). One fact loosens a check, by exactly one optimizer step an epoch:
`fit_extra_steps`, a `train_ds` of unknown length, on which Keras 3's `fit` counts that step.

Example (a hidden test):

    from course_tools.grade.core import checks
    results = checks.load_results(ARTIFACTS)
    saved = checks.own_model(ARTIFACTS, "fit_model", FACTS)  # the model this run trained
    scores = checks.evaluate(saved)  # measured by the grader, not the notebook
    recorded = checks.get(results, "fit", "test_accuracy")
    checks.assert_accuracy_matches(recorded, scores, "fit test accuracy")
"""

from __future__ import annotations

import collections
import json
import math
import os
import re
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from course_tools.grade.core import fresh, reading
from course_tools.grade.core.probe import checksum, fingerprint
from course_utils import tables

if TYPE_CHECKING:
    import keras

#: The exercise's artifacts folder name (under COURSE_ARTIFACTS) and its dataset.
ARTIFACTS_NAME = "05_svhn"
DATASET = "svhn_cropped"
#: A trained model's test accuracy must beat the share of the test set's most frequent class (what
#: a model that always answers that class scores: about 0.2 on SVHN, whose digit 1 is a fifth of
#: its test set; 0.1 on a balanced set) by this much.
ACCURACY_MARGIN = 0.1
#: What the checks agree to read from a submission (the course's files are a few MB): one file,
#: the uncompressed content of a zip archive (a .keras model), and results.json.
MAX_FILE_MB = 200
MAX_UNZIPPED_MB = 256
MAX_ZIP_MEMBERS = 1000
MAX_RESULTS_KB = 1024
#: The training examples each per-epoch checkpoint is evaluated on (its training loss must fall).
TRAIN_EXAMPLES = 4096
#: Seconds per timed epoch that a checkpoint span may hold beyond the epoch's recorded time: its
#: save, and the release of the previous epoch's iterator when the clock starts after the new one is
#: made. Under a strategy that release waits for tf.data's tuning threads (notebook 1, appendix C
#: part 3): 140 s once at 8 devices on a loaded machine. `fit`'s EpochClock holds it (Keras makes
#: each epoch's iterators between `on_epoch_begin` and `on_epoch_end`), as does a custom loop that
#: times its `for` over the dataset, but a correct loop may call `iter` before starting its timer.
STARTUP_ALLOWANCE = 300


#: The most characters of one check's message: a library's error can repeat, whole, a name the
#: student wrote in a file (Keras's "Could not deserialize" repeats a layer's class name).
MESSAGE_CHARS = 2000


class CheckError(AssertionError):
    """A hidden test failed; the message tells the student what is wrong and what to do."""


def cap_message(text: str, limit: int = MESSAGE_CHARS) -> str:
    """`text`, cut after `limit` characters with a note of how many were cut.

    Example:

        cap_message("x" * 2500)  # 'xx...x... (500 characters cut)', 2,000 x's kept
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} characters cut)"


# Loaded models, test scores and dataset sizes, kept while one submission is checked.
_cache: dict = {}


def clear_cache() -> None:
    """Forget the models and scores of the previous submission (the check process calls it between
    them)."""
    _cache.clear()


def _code(observed: dict) -> reading.Code:
    """The notebook's code read from `observed` (kept while one submission is checked)."""
    kept = _cache.get("code")
    if kept is None or kept[0] is not observed:
        kept = _cache["code"] = (observed, reading.Code.of(observed))
    return kept[1]


def _cell(number: int) -> str:
    """How a message names a code cell: by its execution count in the executed notebook,
    `executed.ipynb` (`In [N]` beside the cell; `reading.Code.cells`)."""
    return f"cell [{number}]"


#: What the student reads when the code reaches what the reading cannot read
#: (`reading.Code.unreadable`), by why.
UNREADABLE = {
    "dynamic": "it cannot read code run through exec/eval/globals() ({where}): write the "
    "assignment out",
    "private": "it cannot read a private API ({where}: a name that starts with `_`, or "
    "`strategy.extended`): use the public tf.distribute API",
    "magic": "it cannot read the Python a cell magic runs ({where}): put that code in a plain "
    "cell (`%%time` and `%%capture` cells are read)",
    "module": "it cannot read what a module's names stand for once your code sets one ({where}): "
    "leave modules' attributes alone and bind the notebook's own names",
    "line": "it cannot read the Python a line magic runs ({where}): write the statement out "
    "(`%time` and `%timeit` with a statement after their options are read)",
    "model": "it reads facts of your graded models in the kernel, so it cannot read past code "
    "that sets or deletes what a model (or its fit's History) holds ({where}): use the models "
    "and the History fit gives, and leave their attributes as Keras sets them",
    "history": "it cannot read code a magic runs again from the history or a store ({where}): "
    "write that code out in the cell where it runs",
    "deep": "it cannot parse a cell nested this deep, which the kernel ran ({where}): write "
    "that expression in steps, bound to names, and leave `sys.setrecursionlimit` alone",
    "cut": f"it reads no more than the first {reading.MAX_CHARS:,} characters of the code "
    "cells, and the code from {where} on lies past them: keep data out of the code (in a file "
    "the notebook reads) so that all of your code is read",
}


def assert_readable(observed: dict | None) -> None:
    """The notebook's code is code the grader can read (`reading.Code.unreadable`: no exec,
    eval, `globals()`, `vars()`, `locals()`, `__builtins__`, `sys.modules[...]`, no private
    API): every point the reading decides rests on it. Skipped without observations."""
    if observed is None:
        return
    found = _code(observed).unreadable()
    if found:
        cell, code, why = found[0]
        where = f"{_cell(cell)}: `{code}`"
        raise CheckError(
            "the grader reads your code to check this point; " + UNREADABLE[why].format(where=where)
        )


#: The exercise's model trained by its custom loop, whose optimizer's steps are the loop's
#: `apply_gradients`: every other model (`fit_model`, `single_model`) is graded as trained by
#: its `fit`, where its optimizer makes its steps.
CUSTOM_LOOP_MODEL = "custom_model"


def _hand_steps(code: reading.Code, name: str) -> list[str]:
    """The ways the code changes model `name`'s optimizer state without training it: its step
    count written (`reading.Code.step_assignments`) and, for a model graded as trained by its
    `fit` (not `CUSTOM_LOOP_MODEL`), steps of its optimizer outside `fit`
    (`reading.Code.hand_steps`), each with its cell."""
    found = [
        f"an assignment to its optimizer's step count ({_cell(cell)}: `{text}`)"
        for cell, text in code.step_assignments(name)
    ]
    if name != CUSTOM_LOOP_MODEL:
        found += [
            f"steps of its optimizer outside fit ({_cell(cell)}: `{text}`)"
            for cell, text in code.hand_steps(name)
        ]
        found += [
            f"weights loaded into it from elsewhere ({_cell(cell)}: `{text}`)"
            for cell, text in code.hand_steps(name, loads=True)
        ]
    return found


def _tf():
    from course_utils.quiet import import_tensorflow

    return import_tensorflow()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def safe_file(path: Path, max_mb: float = MAX_FILE_MB) -> Path:
    """`path` if it is safe to open: a regular file reached without symbolic links, at most
    `max_mb`, and, for a zip archive such as a .keras model, at most MAX_UNZIPPED_MB once unpacked
    and MAX_ZIP_MEMBERS files. Otherwise CheckError saying what is wrong.

    The sizes a zip archive declares are the ones Python's zipfile (and so Keras) will unpack: it
    stops at the declared size of each member, so a decompression bomb is refused here, unopened.
    For example: `keras.models.load_model(safe_file(ARTIFACTS / "fit_model.keras"))`.
    """
    path = Path(path)
    name = path.name
    if os.path.realpath(path) != os.path.abspath(path):
        raise CheckError(f"{name} is (or is inside) a symbolic link: save real files")
    if not path.is_file():
        raise CheckError(f"{name} is not a regular file")
    size = path.stat().st_size
    if size > max_mb * 2**20:
        raise CheckError(f"{name} is {size / 2**20:.0f} MB, more than the {max_mb:g} MB allowed")
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                members = archive.infolist()
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise CheckError(f"{name} is a damaged zip archive: {exc}") from None
        unpacked = sum(member.file_size for member in members)
        if len(members) > MAX_ZIP_MEMBERS or unpacked > MAX_UNZIPPED_MB * 2**20:
            raise CheckError(
                f"{name} unpacks to {len(members)} files and {unpacked / 2**20:.0f} MB, more than "
                f"the {MAX_ZIP_MEMBERS} files and {MAX_UNZIPPED_MB} MB allowed: it is not a model "
                "saved by Keras; save it with model.save(...)"
            )
    _assert_plain_weights(path)
    return path


def _assert_plain_weights(path: Path) -> None:
    """The HDF5 weights of a .h5 file, or inside a .keras archive, are all in that file
    (`assert_plain_hdf5`); checked once per file version."""
    import io

    info = path.stat()
    key = ("plain", str(path), info.st_mtime_ns, info.st_size)
    if key in _cache:
        return
    if path.name.endswith(".h5"):
        assert_plain_hdf5(io.BytesIO(path.read_bytes()), path.name)
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if member.endswith(".h5"):
                    assert_plain_hdf5(io.BytesIO(archive.read(member)), f"{path.name}/{member}")
    _cache[key] = True


def _plain_dataset(group, name: str):
    """The dataset `name` of an HDF5 group, if it is stored in this file: no soft or external
    link on the way, no external storage (raw data in other files, which h5py would read from
    wherever the file names, relative to the reader's folder), no virtual dataset (made of other
    files' datasets). Else CheckError. (Keras's own loader refuses the same.)"""
    import h5py

    parts = name.split("/")
    for depth in range(1, len(parts) + 1):
        link = group.get("/".join(parts[:depth]), getlink=True)
        if link is None:
            raise KeyError(name)
        if not isinstance(link, h5py.HardLink):
            raise CheckError(
                f"the saved file links {'/'.join(parts[:depth])} to {type(link).__name__[:-4]} "
                "data elsewhere: save it with Keras"
            )
    dataset = group[name]
    if not isinstance(dataset, h5py.Dataset):
        raise KeyError(name)
    if dataset.external or dataset.is_virtual:
        raise CheckError(
            f"the saved file keeps {name} in other files (external or virtual dataset): save it "
            "with Keras"
        )
    return dataset


def assert_plain_hdf5(handle, name: str) -> None:
    """Every object of the HDF5 file `handle` (a path or a file object) is stored in the file
    itself: no external or soft link, no external storage, no virtual dataset; at most
    MAX_ZIP_MEMBERS * 10 objects. Else CheckError: Keras would refuse the same file when it loads
    it, and the checks read some datasets directly (`optimizer_steps`)."""
    import h5py

    found: list[tuple[str, object]] = []
    try:
        with h5py.File(handle, "r") as weights:

            def visit(path: str, link) -> None:
                found.append((path, link))
                if len(found) > MAX_ZIP_MEMBERS * 10:
                    raise CheckError(f"{name} holds more than {MAX_ZIP_MEMBERS * 10} objects")

            weights.visititems_links(visit)
            for path, link in found:
                if not isinstance(link, h5py.HardLink):
                    raise CheckError(
                        f"{name}: {path} is a {type(link).__name__} to data outside the file: "
                        "save it with Keras"
                    )
                item = weights.get(path)
                if isinstance(item, h5py.Dataset) and (item.external or item.is_virtual):
                    raise CheckError(
                        f"{name}: {path} keeps its data in other files (external or virtual "
                        "dataset): save it with Keras"
                    )
    except CheckError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged or crafted file
        raise CheckError(f"{name} cannot be read as HDF5: {type(exc).__name__}") from None


def read_json(artifacts: Path, name: str, kind: type, missing: str, writer: str):
    """The JSON file `name` in `artifacts`, holding a `kind` (dict or list); else CheckError with
    `missing` (what to do when it does not exist) or saying that `writer` should write it."""
    path = Path(artifacts) / name
    if not path.exists():
        raise CheckError(f"{ARTIFACTS_NAME}/{name} is missing: {missing}")
    try:
        value = json.loads(safe_file(path, MAX_RESULTS_KB / 1024).read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckError(
            f"{ARTIFACTS_NAME}/{name} is not valid JSON ({exc}): let {writer} write it"
        ) from None
    if not isinstance(value, kind):
        raise CheckError(
            f"{ARTIFACTS_NAME}/{name} should hold a JSON {kind.__name__}, not "
            f"{type(value).__name__}: let {writer} write it"
        )
    return value


def load_results(artifacts: Path) -> dict:
    """results.json of a run, or CheckError saying why it cannot be read."""
    missing = "run the notebook from the top (the `record` cells write it)"
    return read_json(artifacts, "results.json", dict, missing, "`record`")


def get(results: dict, *keys: str) -> Any:
    """results[k1][k2]...; CheckError naming the missing key (its recording cell did not run)."""
    value = results
    for depth, key in enumerate(keys):
        if not isinstance(value, dict) or key not in value:
            path = " > ".join(keys[: depth + 1])
            raise CheckError(
                f"results.json has no {path!r}: the cell that records it did not run (see the "
                f"errors above)"
            )
        value = value[key]
    return value


def positive(value: Any) -> bool:
    """Whether value is a finite number above zero."""
    return _is_number(value) and value > 0


#: The layers a saved model's config may declare, nested ones counted (`config_layers`): Keras
#: rebuilds a deep `Sequential` in more than linear time (300 layers 13.5 s, 700 layers 69 s, on
#: this course's 2-core host), and the shared check process builds a model that fails to load twice,
#: so three crafted 31 KB files held it for its whole 300 s (red team 35a). The exercise's models
#: have about ten; ResNet50 has 177.
MAX_MODEL_LAYERS = 200


def config_layers(path: Path) -> int:
    """How many layers the config of the .keras file `path` declares, those of nested models
    counted: every entry of every "layers" list in its config.json (0 when it has none, or when the
    file is not a readable .keras archive: the load then says why)."""
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))  # sizes capped by `safe_file`
    except (KeyError, OSError, ValueError, zipfile.BadZipFile, RecursionError):
        return 0
    found, todo = 0, [config]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            layers = node.get("layers")
            found += len(layers) if isinstance(layers, list) else 0
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return found


def load_model(path: Path) -> keras.Model:
    """Load a .keras file safely (no Lambda code); compiled when possible, to read its optimizer.
    A file that cannot be loaded is tried once per submission (its failure is kept like a model),
    and Keras's error is cut (`cap_message`): it can repeat the names the file's config holds."""
    import keras

    path = safe_file(Path(path))
    stat = path.stat()
    key = ("model", str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _cache:
        layers = config_layers(path)
        if layers > MAX_MODEL_LAYERS:  # Keras's rebuild of a deep config takes minutes
            _cache[key] = CheckError(
                f"{path.name} declares {layers:,} layers, more than the {MAX_MODEL_LAYERS} a "
                "model of this exercise may have: it is not loaded"
            )
    if key not in _cache:
        try:
            _cache[key] = keras.models.load_model(path, compile=True, safe_mode=True)
        except Exception:
            try:
                _cache[key] = keras.models.load_model(path, compile=False, safe_mode=True)
            except Exception as exc:
                error = cap_message(f"{type(exc).__name__}: {exc}", MESSAGE_CHARS // 2)
                _cache[key] = CheckError(f"{path.name} cannot be loaded: {error}")
    if isinstance(_cache[key], CheckError):
        raise CheckError(*_cache[key].args)
    return _cache[key]


def own_model(
    artifacts: Path,
    name: str,
    facts: dict,
    observed: dict | None = None,
    *,
    epochs: int | None = None,
) -> keras.Model:
    """The saved model `<name>.keras`, checked to be the `<name>` this run trained and kept in
    memory, and (with the grader's observations) not given its optimizer step count by the
    notebook's code (`reading.Code.step_assignments`). A model graded as trained by its `fit`
    (not `CUSTOM_LOOP_MODEL`) has no weights loaded or set into it anywhere in the code
    (`reading.Code.hand_steps`), and its own optimizer made `epochs` epochs of the training
    set's steps (`_assert_steps_of_every_epoch`; `epochs`: the hidden test's EPOCHS, default
    the grader's profile's, `graded_epochs`).

    This ties the files to the run: files copied from elsewhere do not match the kernel's own model,
    and a model whose weights were copied in makes no optimizer step of its own (unless its count
    is written too, which the code shows).
    """
    path = Path(artifacts) / f"{name}.keras"
    if not path.exists():
        raise CheckError(
            f"{ARTIFACTS_NAME}/{name}.keras is missing: save the trained model with "
            f'{name}.save(ARTIFACTS / "{name}.keras")'
        )
    model = load_model(path)
    assert_kernel_trusted(facts)
    fact = (facts or {}).get("models", {}).get(name)
    if not fact:
        raise CheckError(
            f"there is no model called `{name}` in the notebook's memory at the end of the run: "
            f"keep that name"
        )
    if "error" in fact:
        raise CheckError(f"`{name}` in the notebook's memory could not be read: {fact['error']}")
    if fact.get("fingerprint") != fingerprint(model):
        raise CheckError(
            f"{name}.keras does not hold the weights of `{name}` at the end of the run: save the "
            f"model after training it, and do not train it again or replace it afterwards"
        )
    kernel_steps, file_steps = fact.get("optimizer_steps"), optimizer_steps(path)
    if file_steps is not None and type(kernel_steps) is not int:
        raise CheckError(
            f"{name}.keras was saved with an optimizer that made {file_steps} steps, but the "
            f"grader cannot read the steps of `{name}` in the notebook's memory: "
            + (
                f"{fact['optimizer_unread']}. Compile {name} with one of Keras's optimizers "
                "(keras.optimizers.Adam(), or Keras's LossScaleOptimizer around one)"
                if fact.get("optimizer_unread")
                else f"it has no optimizer (it was never compiled), so the file was not saved "
                f"from it. Compile {name}, train it and save it"
            )
        )
    if file_steps is not None and kernel_steps != file_steps:
        raise CheckError(
            f"`{name}` in the notebook's memory made {kernel_steps} optimizer steps, but "
            f"{name}.keras was saved after {file_steps}: its weights were copied in from another "
            f"model (set_weights, load_weights), which is not the model trained; train {name} "
            "itself and save it"
        )
    _assert_optimizer_made_with(fact, name)
    assert_fresh_start(fact, name)
    if fact.get("moments_zero") is True and kernel_steps:
        raise CheckError(
            f"`{name}` in the notebook's memory made {kernel_steps} optimizer steps, but every "
            "moment its optimizer keeps (Adam's running averages of the gradients) is exactly "
            "0: steps of zero gradients, which count without training, so its weights came "
            f"from elsewhere; train {name} itself and save it"
        )
    assert_readable(observed)
    code = _code(observed) if observed is not None else None
    written = code.step_assignments(name) if code is not None else []
    if written:
        raise CheckError(
            f"the notebook's code writes the optimizer step count of `{name}` "
            f"({_cell(written[0][0])}: `{written[0][1]}`): a count written, like weights "
            f"copied in (set_weights, load_weights), is not the model trained; train {name} "
            "itself, leave its optimizer alone, and save it"
        )
    stepped = code.hand_steps(name) if code is not None and name != CUSTOM_LOOP_MODEL else []
    if stepped:
        raise CheckError(
            f"the notebook's code steps the optimizer of `{name}` outside fit "
            f"({_cell(stepped[0][0])}: `{stepped[0][1]}`): steps made by hand, like weights "
            f"copied in (set_weights, load_weights) or a step count written, are not the model "
            f"trained; train {name} with fit only, leave its optimizer alone, and save it"
        )
    loaded = (
        code.hand_steps(name, loads=True) if code is not None and name != CUSTOM_LOOP_MODEL else []
    )
    if loaded:
        raise CheckError(
            f"the notebook's code loads weights into `{name}` from elsewhere "
            f"({_cell(loaded[0][0])}: `{loaded[0][1]}`): a model given another's weights (from a "
            "file or checkpoint, with its optimizer's steps and moments) is not the model "
            f"trained; train {name} with fit and save it"
        )
    assert_continuity(fact, name)
    ran = fact.get("fit_epochs")
    if name != CUSTOM_LOOP_MODEL and isinstance(ran, list) and len(ran) == 2:
        ran_epochs, asked = ran
        if not ran_epochs or (type(asked) is int and ran_epochs != asked):
            done = (
                "never ran an epoch of fit from epoch 0"
                if not ran_epochs
                else f"ran {ran_epochs} of the {asked} epochs its last fit was asked for"
            )
            raise CheckError(
                f"`{name}` in the notebook's memory {done} (Keras's History of its last fit, "
                f"`{name}.history.epoch`), yet it is saved as trained: weights that came from "
                "elsewhere (set_weights, load_weights, a checkpoint) or a fit begun past epoch "
                f"0 (initial_epoch) are not the model trained; train {name} with one fit of "
                "all its epochs and save it"
            )
    _assert_fit_ran_every_batch(fact, name, facts)
    _assert_steps_of_every_epoch(fact, name, facts, epochs, observed)
    return model


#: The exercise's epochs by profile (its `EPOCHS = settings.pick(full=6, quick=3)`) and the
#: examples a replica takes a step (`PER_REPLICA_BATCH`).
EPOCHS_BY_PROFILE = {"full": 6, "quick": 3}
PER_REPLICA_BATCH = 64


def graded_epochs(observed: dict | None) -> int | None:
    """The epochs the exercise trains in the grader's run: `EPOCHS_BY_PROFILE` for the profile
    the check process was set up with (`course_utils.setup` writes COURSE_PROFILE back), when
    the grader observed the run (`observed` not None) and the profile is a resolved one; None
    otherwise (the solution's own kernel, a test of the checks)."""
    from course_utils.settings import read_settings

    if observed is None:
        return None
    try:
        profile = read_settings().profile
    except ValueError:
        return None
    if profile not in ("full", "cpu", "quick"):
        return None
    return EPOCHS_BY_PROFILE["quick" if profile == "quick" else "full"]


def _assert_steps_of_every_epoch(
    fact: dict, name: str, facts: dict, epochs: int | None, observed: dict | None
) -> None:
    """The model's own optimizer in the kernel made exactly `epochs` epochs of the training
    set's steps (`train_steps`, plus `fit_extra_steps` an epoch), for a model graded as
    trained by its `fit`: a fit whose epochs a callback ends early (`raise StopIteration`,
    `stop_training`), or of `steps_per_epoch=1` however its History reads, made fewer. With no
    weights loaded or set into the model (the reading refuses those), its count is its own.
    `epochs`: the hidden test's EPOCHS, else `graded_epochs`; the steps an epoch from the
    probe's GLOBAL_BATCH, else `PER_REPLICA_BATCH` on each of COURSE_DEVICES."""
    from course_utils.settings import read_settings

    epochs = epochs if epochs is not None else graded_epochs(observed)
    kernel_steps = fact.get("optimizer_steps")
    if name == CUSTOM_LOOP_MODEL or epochs is None or type(kernel_steps) is not int:
        return
    batch = (facts or {}).get("global_batch")
    if type(batch) is not int or batch <= 0:
        try:
            devices = read_settings().devices
        except ValueError:
            devices = None
        if not devices:
            return
        batch = PER_REPLICA_BATCH * devices
    steps, extra = train_steps(facts, batch), fit_extra_steps(facts)
    expected = epochs * steps
    if kernel_steps in (expected, expected + epochs * extra):
        return
    raise CheckError(
        f"`{name}` in the notebook's memory made {kernel_steps} optimizer steps, but "
        f"{epochs} epochs of the training set in batches of GLOBAL_BATCH make {expected}: "
        f"its fit did not run every batch of every epoch (steps_per_epoch, a callback that "
        f"ends an epoch early or stops training, or another fit), so it is not the model "
        f"the question asks for; train {name} with one fit of EPOCHS epochs over all of "
        "train_ds and save it"
    )


def _assert_fit_ran_every_batch(fact: dict, name: str, facts: dict) -> None:
    """The model's last fit ran the training set's batches each epoch (the probe's
    `fit_steps`, Keras's History `params["steps"]`): `steps_per_epoch=1` with weights loaded
    after (their steps and moments brought along) is not the model trained. Checked when the
    probe read the notebook's GLOBAL_BATCH; None is a length TensorFlow cannot know."""
    batch = (facts or {}).get("global_batch")
    if name == CUSTOM_LOOP_MODEL or "fit_steps" not in fact or type(batch) is not int:
        return
    expected, got = train_steps(facts, batch), fact["fit_steps"]
    if got != expected and not (got is None and fit_extra_steps(facts)):
        ran = "an unknown number of steps" if got is None else f"{got} step{'s' * (got != 1)}"
        raise CheckError(
            f"`{name}`'s last fit ran {ran} an epoch (Keras's History of it, "
            f"`{name}.history.params`), but the training set makes {expected} in batches of "
            f"GLOBAL_BATCH: train {name} with one fit over all of train_ds each epoch (no "
            "steps_per_epoch) and save it"
        )


def _assert_optimizer_made_with(fact: dict, name: str) -> None:
    """The optimizer whose steps the probe read (`probe.optimizer_replicas`) was made with the
    model: under the strategy its variables are mirrored by (its step counter mirrored over the
    same replicas), or outside any for a model made outside any. Another model's optimizer given
    to it (`model.optimizer = other.optimizer`, `model.compile(optimizer=other.optimizer)`, a
    LossScaleOptimizer's `inner_optimizer = ...`) counts that model's steps, not this one's."""
    counted = fact.get("optimizer_replicas")
    if type(counted) is not int:
        return  # never compiled, or a count not read (own_model says so)
    mirrored = fact.get("distributed_variables", 0) > 0
    expected = fact.get("replicas", 1) if mirrored else 0
    if counted == expected:
        return
    where = (
        f"mirrored over {tables.count(counted, 'device')}" if counted else "outside any strategy"
    )
    made = (
        f"its variables are mirrored over {tables.count(expected, 'device')}"
        if mirrored
        else "its variables are not mirrored"
    )
    raise CheckError(
        f"the optimizer of `{name}` in the notebook's memory was not made with it: {made}, but "
        f"its optimizer was made {where}, so its step count is another model's (an optimizer "
        f"given to it afterwards: `{name}.optimizer = ...`, `{name}.compile(optimizer=other"
        f".optimizer)`); compile {name} with an optimizer of its own, made with the model "
        "(inside `with strategy.scope():` for a distributed model), and train it"
    )


def assert_mirrored(facts: dict, name: str, replicas: int) -> None:
    """The model's variables were mirrored over `replicas` devices (it was built under the
    strategy)."""
    assert_kernel_trusted(facts)
    fact = (facts or {}).get("models", {}).get(name)
    if not fact:
        raise CheckError(
            f"there is no model called `{name}` in the notebook's memory at the end of the run"
        )
    if "error" in fact:
        raise CheckError(f"`{name}` in the notebook's memory could not be read: {fact['error']}")
    if fact["distributed_variables"] < fact["variables"] or fact["variables"] == 0:
        raise CheckError(
            f"{fact['distributed_variables']} of {name}'s {fact['variables']} variables are "
            f"mirrored: create (and "
            f"compile) {name} inside `with strategy.scope():`, or the strategy does not train it"
        )
    if fact["replicas"] != replicas:
        raise CheckError(
            f"{name}'s variables are mirrored over {tables.count(fact['replicas'], 'device')}, "
            f"expected {replicas}"
        )
    _assert_optimizer_made_with(fact, name)
    assert_fresh_start(fact, name)
    assert_continuity(fact, name)


def assert_fresh_start(fact: dict, name: str) -> None:
    """The training of model `name` started from fresh weights: for each optimizer that trained
    its weights, the grader's record of its first step (`fresh`, measured in the check process on
    training examples drawn at random there, `checks.measure_starts`, with the
    records covering the model's variables) scores like a fresh model, before that step
    and after it when that call made one step (`fresh.fresh_start`). Weights given before `fit`
    or before the custom loop, at `fit`'s start (`BackupAndRestore`), or inside the first step
    score far better than chance.
    Weights changed after the first step: `assert_continuity`.
    Skipped when the kernel had no grader's hook (the solution's own kernel: the probe says so
    in `start_hook`; in the grader a hook removed is tampering, `checker._facts`)."""
    if "starts" not in fact and "start_error" not in fact and "later_optimizers" not in fact:
        return
    later = fact.get("later_optimizers")
    if later:
        names = ", ".join(map(str, later))
        raise CheckError(
            f"the weights of `{name}` were stepped by a second optimizer ({names}): one whose "
            "first step came after the first optimizer training them had started, or in the "
            "same call without wrapping it (as a LossScaleOptimizer wraps its own). A graded "
            f"model is trained by one optimizer from the weights make_model() gives it (compile "
            f"{name} once and fit it once; in the custom loop, one optimizer), as the steps of "
            "another, given gradients of any values, can set its weights to anything (another "
            "model's)"
        )
    if "start_error" in fact or not fact.get("starts"):
        why = fact.get("start_error") or "no step of an optimizer training its weights"
        if why.startswith("no step"):  # a model no Keras optimizer trained: nothing started
            raise CheckError(
                f"the grader cannot tell where the training of `{name}` started: the Keras "
                f"optimizers training its weights made 0 steps that the grader saw ({why}); it "
                "keeps the weights an optimizer trains as they are just before its first step: "
                f"train {name} with a Keras optimizer (fit, or apply_gradients in the custom "
                "loop), from the weights make_model() gives it"
            )
        raise CheckError(
            f"the grader cannot tell where the training of `{name}` started ({why}): it keeps "
            f"the weights a Keras optimizer trains as they are just before its first step; "
            f"train {name} with a Keras optimizer (fit, or apply_gradients in the custom loop), "
            "from the weights make_model() gives it"
        )
    for start in fact["starts"]:
        if not isinstance(start, dict):
            continue
        after = {"loss": start.get("after_loss"), "accuracy": start.get("after_accuracy")}
        # after one step only: a first call of several steps (`steps_per_execution`) may train
        whens = [("just before", start)] + [("just after", after)] * (start.get("steps") == 1)
        for when, scores in whens:
            if fresh.fresh_start(scores):
                continue
            loss, accuracy = scores.get("loss"), scores.get("accuracy")
            shown = (
                f"a loss of {loss:.3f} and an accuracy of {accuracy:.3f}"
                if _is_number(loss) and _is_number(accuracy)
                else "scores the grader cannot read"
            )
            raise CheckError(
                f"`{name}` did not start its training from fresh weights: {when} its "
                f"optimizer's first step, its weights score {shown} on training examples "
                f"drawn at random, where a model fresh from make_model() scores about a chance's "
                f"(a loss near ln 10 = 2.30 and an accuracy near 0.1; the grader accepts a "
                f"loss from {fresh.START_LOSS_AT_LEAST} and an accuracy up to "
                f"{fresh.START_ACCURACY_AT_MOST}). Weights given to a model (set_weights, "
                "load_weights, a checkpoint or BackupAndRestore, before its fit or its loop or "
                f"inside them) are not the model trained; train {name} from make_model() itself"
            )


#: The most optimizer records of one model the check process measures (two predictions each):
#: a model trained by one optimizer has one (two with a LossScaleOptimizer), one per part a few.
#: Red team 33c held the batch's one check process for its whole time limit with 600 (one SGD per
#: layer), so that the other students' checks waited behind it.
MAX_START_RECORDS = 16


def measure_starts(fact: dict, facts: dict, arrays: dict, model: Any, examples: tuple) -> dict:
    """{"starts": [...]} or {"start_error": why} for one model (`fact`, the probe's, with its
    `start_weights`): run in the check process, on `examples` ((images, labels),
    `probe.START_EXAMPLES` training examples drawn at random, `checker._start_examples`) with a
    copy of `model` (its saved file, loaded here) given the grader's copies (`arrays`, the
    probe's `START_FILE`).

    A model's start is the union of the records (`facts["start_records"]`, in the order of their
    first steps) covering its trainable variables and any other weight of it a record trained (a
    layer frozen after its training is judged all the same): each variable from the earliest first
    step that trained it (two optimizers over two parts of a model, each its own record). Each
    record touching the model is measured, its own variables from its own copies, the others from
    that union: before its first step and after it ({"loss", "accuracy", "after_loss",
    "after_accuracy", "steps", "how"}). A trainable variable no record covers fails the model
    (`start_error` names it): an optimizer the hook did not read (`start_unmeasured`), a layer
    frozen during `fit` and unfrozen after it, raw ops."""
    plan = fact["start_weights"]
    ids, names, number = plan["ids"], plan["names"], plan["number"]
    trainable = set(plan["trainable"])
    records = [r for r in facts.get("start_records") or [] if isinstance(r, dict)]
    # judged: its trainable variables, and every weight of it an optimizer trained, trainable at
    # the probe or not (red team 33b: layers frozen before the probe hid a load from the check)
    judged = trainable | (set(ids) & {v for r in records for v in r["variables"]})
    covering = [(k, r) for k, r in enumerate(records) if judged & set(r["variables"])]
    if len(covering) > MAX_START_RECORDS:  # each costs two predictions in the shared check
        return {
            "start_error": (
                f"{len(covering)} optimizers trained its weights, each with a first step of its "
                f"own; the grader measures at most {MAX_START_RECORDS} (a model trained by one "
                "optimizer, or one per part, has one or a few)"
            )
        }
    earliest: dict = {}
    for k, record in covering:
        for i, variable in enumerate(record["variables"]):
            earliest.setdefault(variable, (k, i))
    missing = [names[j] for j, v in enumerate(ids) if v in trainable and v not in earliest]
    unmeasured = "; ".join(map(str, facts.get("start_unmeasured") or []))
    hook = f" (the grader's hook: {unmeasured})" if unmeasured else ""
    if not covering:
        return {"start_error": f"no step of an optimizer training its weights{hook}"[:600]}
    if missing:
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        return {
            "start_error": (
                f"no first step of an optimizer the grader read trained {len(missing)} of its "
                f"{len(trainable)} trainable variables: {shown}{hook}"
            )[:600]
        }
    import keras

    later = later_optimizers(covering, judged)
    if later:
        return {"later_optimizers": later}
    clone = keras.models.clone_model(model)
    starts = []
    for k, record in covering:
        own = {v: i for i, v in enumerate(record["variables"])}

        def values(when: str, k=k, own=own) -> list:
            found = []
            for j, variable in enumerate(ids):
                if variable in own:
                    found.append(arrays[f"r{k}{when}{own[variable]}"])
                elif variable in judged:
                    first, index = earliest[variable]
                    found.append(arrays[f"r{first}{when}{index}"])
                else:
                    found.append(arrays[f"m{number}w{j}"])
            return found

        loss, accuracy = start_scores(clone, values("b"), *examples)
        after_loss, after_accuracy = start_scores(clone, values("a"), *examples)
        starts.append(
            {
                "loss": loss,
                "accuracy": accuracy,
                "after_loss": after_loss,
                "after_accuracy": after_accuracy,
                "steps": int(record.get("steps", 0)),
                "how": str(record.get("how", "")),
            }
        )
    return {"starts": starts}


def later_optimizers(covering: list[tuple[int, dict]], trainable: set) -> list[str]:
    """The second optimizers (class names) among `covering` (the records touching a model,
    (index, record)): over a trainable variable that another optimizer trains, one whose first
    step came in a later call (the record's `call`), or in the same call without wrapping it or
    being wrapped by it (a `LossScaleOptimizer` and the one inside it, its `inner`, are one
    optimizer). Optimizers over two parts of a model are not second to each other.

    >>> records = [(0, {"variables": [1], "call": 3, "id": 5, "inner": 0, "optimizer": "Adam"})]
    >>> later_optimizers([*records, (1, {"variables": [1], "call": 9, "optimizer": "SGD"})], {1})
    ['SGD']
    >>> later_optimizers([*records, (1, {"variables": [1], "call": 3, "optimizer": "SGD"})], {1})
    ['Adam', 'SGD']
    >>> wrapper = {"variables": [1], "call": 3, "id": 6, "inner": 5, "optimizer": "LossScale"}
    >>> later_optimizers([*records, (1, wrapper)], {1})
    []
    """
    second: list[str] = []
    for variable in trainable:
        here = [r for _, r in covering if variable in set(r["variables"])]
        if not here:
            continue
        first = min(r.get("call", 0) for r in here)
        group = [r for r in here if r.get("call", 0) == first]
        linked = {group[0].get("id"), group[0].get("inner")} - {0, None}
        for record in group[1:]:  # one optimizer: a wrapper and the one inside it, either order
            ids = {record.get("id"), record.get("inner")} - {0, None}  # 0: wraps nothing
            if not ids & linked:  # two optimizers in one call: which is second is not known
                second += [str(r.get("optimizer", "?")) for r in group]
                break
            linked |= ids
        second += [str(r.get("optimizer", "?")) for r in here if r.get("call", 0) > first]
    return sorted(set(second))


def start_scores(model: Any, values: list, images, labels) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of `model` given the weights `values` (in `model.weights`'
    order) on `images`; its outputs read as logits, or as probabilities when every row sums to
    1 (as `evaluate`)."""
    import numpy as np

    model.set_weights(values)
    outputs = np.asarray(model.predict(images, batch_size=256, verbose=0), dtype=np.float64)
    if np.all(outputs >= 0) and np.allclose(outputs.sum(axis=1), 1.0, atol=1e-3):
        log_probs = np.log(np.clip(outputs, 1e-12, 1.0))
    else:
        shifted = outputs - outputs.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = float(-log_probs[np.arange(len(labels)), labels].mean())
    return loss, float((outputs.argmax(axis=1) == labels).mean())


def assert_continuity(fact: dict, name: str) -> None:
    """The weights of model `name` never changed between two steps of an optimizer training them,
    outside those steps (`fact["changed"]`: the grader's hook compares them with the copy the
    latest step left before every later eager call and at the probe, `fresh._check`): weights
    given after the first step (a load between two steps of the custom loop, a callback loading
    at `on_train_batch_end`, a load after the last step) are not the model trained. Called after
    the reading's findings in `own_model` (a line of code that loads is the clearer message), and
    in `assert_mirrored`. Nothing to judge without the grader's hook (no `changed`)."""
    changed = [c for c in fact.get("changed") or [] if isinstance(c, dict)]
    if changed:
        first = changed[0]
        steps = first.get("steps") or ["?"]
        largest = first.get("largest")
        by = (
            f"by up to {largest:.3g}"
            if _is_number(largest) and largest >= 0
            else "a variable unreadable or reshaped"
        )
        raise CheckError(
            f"the weights of `{name}` changed between two steps of its optimizer, outside them "
            f"({tables.count(len(changed), 'time')}): after its optimizer "
            f"({first.get('optimizer', '?')}) had made {steps[0]} steps, before "
            f"{first.get('where') or 'a later call'} (the grader's eager call "
            f"{first.get('call', '?')}), its weights differed from those its latest step left, "
            f"{by}. Weights set or loaded into a model during its training or after it "
            "(set_weights, load_weights, assign, a checkpoint restored, a callback), but the "
            "weights one of its own steps left, are not the model trained; train "
            f"{name} from make_model() with its own optimizer's steps only"
        )


def assert_kernel_trusted(facts: dict) -> None:
    """The probe found IPython's shell as IPython made it (no transformer, no replaced method that
    runs code), and the notebook's code neither reaches that shell nor changes a library the
    probe relies on (the check process adds what it reads, `checker._facts`): else none of the
    kernel's facts can be trusted."""
    tampered = (facts or {}).get("tampered")
    if tampered:
        raise CheckError(
            "the notebook changed how its kernel runs code, or uses code that can reach what "
            f"the grader keeps there ({', '.join(map(str, tampered))}): the grader cannot trust "
            "what it finds in memory; remove those lines"
        )


def train_steps(facts: dict, global_batch: int) -> int:
    """Optimizer steps in one epoch: the training set in batches of the notebook's
    GLOBAL_BATCH (the probe's `global_batch`), else of `global_batch`. Not the batches of the
    probe's `train_ds`: that is the one the notebook ends with, which need not be the one that
    trained (`assert_pipeline_code` names a later one). A wrong GLOBAL_BATCH costs question 1's
    points, not the models' step counts again; a made-up one buys no more than made-up batches
    of `train_ds` did. When the probe's `train_ds` drops the short last batch
    (`drop_remainder=True`: every batch full, one fewer), an epoch is that one step fewer: the
    examples it leaves out cost question 1's point, not the step counts again."""
    batch = (facts or {}).get("global_batch")
    if type(batch) is not int or batch <= 0:
        batch = global_batch
    count = _labels("train")["count"]
    train = ((facts or {}).get("datasets") or {}).get("train_ds") or {}
    passes = train.get("passes") if isinstance(train, dict) else None
    sizes = passes[0].get("batch_sizes") if isinstance(passes, list) and passes else None
    dropped = isinstance(sizes, list) and len(sizes) == count // batch and set(sizes) == {batch}
    return count // batch if count % batch and dropped else math.ceil(count / batch)


def optimizer_steps(path: Path) -> int | None:
    """The optimizer's step count saved in a .keras model, a .weights.h5 file or a tf.train
    checkpoint prefix (None when the file holds no optimizer). Keras's `LossScaleOptimizer`
    saves its own counter, which stays 0, beside its inner optimizer's: the inner one is read."""
    import io

    import h5py

    path = Path(path)
    if path.name.endswith((".keras", ".h5")):
        safe_file(path)
        if path.suffix == ".keras":
            with zipfile.ZipFile(path) as archive:
                handle = io.BytesIO(archive.read("model.weights.h5"))
        else:
            handle = io.BytesIO(path.read_bytes())
        try:
            with h5py.File(handle, "r") as weights:
                group = "optimizer"
                while f"{group}/inner_optimizer/vars/0" in weights:  # LossScaleOptimizer
                    group += "/inner_optimizer"
                if f"{group}/vars/0" not in weights:
                    return None
                return int(_plain_dataset(weights, f"{group}/vars/0")[()])
        except (OSError, KeyError, ValueError, TypeError) as exc:
            raise CheckError(f"{path.name} cannot be read: {type(exc).__name__}") from None
    _safe_checkpoint(path)
    try:
        reader = _tf().train.load_checkpoint(str(path))
        keys = reader.get_variable_to_shape_map()
        group = "optimizer"
        while f"{group}/inner_optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE" in keys:
            group += "/inner_optimizer"  # LossScaleOptimizer
        return int(reader.get_tensor(f"{group}/_iterations/.ATTRIBUTES/VARIABLE_VALUE"))
    except Exception:  # noqa: BLE001 - no optimizer in it, or not a checkpoint
        return None


#: The most epochs a profile trains (`full`): an excess of up to this many steps can be one an
#: epoch.
MOST_EPOCHS = 6


def fit_extra_steps(facts: dict, name: str = "train_ds") -> int:
    """The optimizer steps Keras 3's `fit` counts in an epoch beyond its batches: 1 when the
    probe read `name`'s length as unknown to TensorFlow (cardinality -2: after `filter`,
    `flat_map` or `ignore_errors`), else 0 (also when the kernel looks tampered with).

    On such a pipeline `fit` calls its train function until the data runs out. That function is
    a `tf.function` that reads the batch inside it (`one_step_on_data(iterator.get_next())`,
    keras/src/backend/tensorflow/trainer.py), and the optimizer's
    `self._iterations.assign_add(1)` (keras/src/optimizers/base_optimizer.py) does not depend on
    the batch, so in the last call TensorFlow's graph runs it before the end-of-data error
    stops the step: the count advances though nothing trains (measured with Keras 3.15: 17, 34,
    51 over three epochs of 16 batches, with and without a strategy, the weights those of 16
    steps an epoch; 16 with `run_eagerly=True`). Accepting the extra step gives nothing away:
    the file's count still has to match the epochs, plus exactly this.

        steps = EPOCHS * (train_steps(FACTS, 64) + fit_extra_steps(FACTS))
    """
    if (facts or {}).get("tampered"):
        return 0
    fact = (facts or {}).get("datasets", {}).get(name) or {}
    return 1 if fact.get("cardinality") == -2 else 0


def assert_steps(path: Path, expected: int, what: str, extra: int = 0) -> None:
    """The optimizer saved in `path` made `expected` steps, or `expected + extra` (`extra`:
    the steps Keras 3's `fit` counts beyond the batches on a pipeline of unknown length,
    `fit_extra_steps` an epoch). Otherwise one step more in each epoch is named for what it most
    likely is: that count, on a `train_ds` the probe could not read."""
    steps = optimizer_steps(path)
    if steps != expected and not (extra and steps == expected + extra):
        extra = (steps or 0) - expected
        unknown = 0 < extra <= MOST_EPOCHS and expected % extra == 0
        raise CheckError(
            f"{Path(path).name}: the optimizer saved with {what} made {steps} steps, but "
            f"{expected} make the epochs asked for: "
            + (
                f"{extra} more, one an epoch, is what Keras 3's fit counts on a "
                "train_ds whose length TensorFlow cannot know (after filter, flat_map or "
                "ignore_errors; train_ds.cardinality() is -2): keep such methods out of "
                "train_ds or, if they drop no example, state its length before batching, "
                ".apply(tf.data.experimental.assert_cardinality(NUM_TRAIN))"
                if unknown
                else "train it (and save it) as the question says"
            )
        )


def assert_epochs_trained(  # noqa: PLR0913 - the hidden tests' five, and fit's extra steps
    files: dict[int, Path],
    epochs: int,
    steps: int,
    model: keras.Model,
    what: str,
    *,
    extra_per_epoch: int = 0,
) -> None:
    """`files` ({epoch: checkpoint}) holds one checkpoint per epoch 1..epochs, each saved after
    its epoch's `steps` optimizer steps (or `steps + extra_per_epoch`, `fit_extra_steps`), with
    weights that changed from one epoch to the next."""
    numbers = sorted(files)
    if numbers != list(range(1, epochs + 1)) and len(numbers) == epochs:
        by_step = numbers == [epoch * steps for epoch in range(1, epochs + 1)]
        raise CheckError(
            f"expected the checkpoints of {what} numbered by epoch, 1 to {epochs}, found "
            f"{numbers}: {'the optimizer steps' if by_step else 'something other than the epoch'}"
            ". Number them by epoch: manager.save() once per epoch (or "
            "manager.save(checkpoint_number=epoch)); ModelCheckpoint's file name takes {epoch}"
        )
    if numbers != list(range(1, epochs + 1)):
        raise CheckError(
            f"expected a checkpoint of {what} for each of the {epochs} epochs, found epochs "
            f"{numbers}: train for EPOCHS epochs and save once per epoch"
        )
    previous, losses = None, []
    for epoch, path in sorted(files.items()):
        assert_steps(
            path, epoch * steps, f"the checkpoint of epoch {epoch}", epoch * extra_per_epoch
        )
        restored = restore(model, path)
        weights = fingerprint(restored)
        if weights == previous:
            raise CheckError(
                f"the checkpoints of epochs {epoch - 1} and {epoch} of {what} hold the same "
                "weights: the model did not train in between"
            )
        previous = weights
        losses.append(evaluate(restored, "train")["loss"])
    # measured here: weights changed by hand after the first epoch, not by training, do not fit
    # the training set better than that epoch did. (The training loss, not the test loss, which
    # rises as a model overfits; and against the first epoch only: near convergence an honest
    # epoch can end a little above the one before.)
    for epoch in range(1, len(losses)):
        if not losses[epoch] < losses[0]:
            raise CheckError(
                f"the checkpoint of epoch {epoch + 1} of {what} has a training loss of "
                f"{losses[epoch]:.4f}, no lower than epoch 1's {losses[0]:.4f} (the grader "
                "evaluates every checkpoint): train the model for each epoch"
            )


def assert_models_differ(models: dict[str, keras.Model]) -> None:
    """The models were trained separately: no two hold the same weights."""
    seen: dict[str, str] = {}
    for name, model in models.items():
        weights = fingerprint(model)
        if weights in seen:
            raise CheckError(
                f"{seen[weights]} and {name} hold the same weights: train each model itself"
            )
        seen[weights] = name


def file_times(artifacts: Path, pattern: str, observed: dict | None) -> list[float]:
    """When the files `pattern` (under `artifacts`) were last written, in seconds, sorted: by the
    grader's own clock (`observed["files"]`, which the kernel cannot set), else (the solution's
    own kernel, without observations) by the files' modification times."""
    paths = sorted(Path(artifacts).glob(pattern))
    if observed is None:
        return sorted(p.stat().st_mtime for p in paths)
    seen = observed.get("files") or {}
    times = []
    for name in (p.relative_to(artifacts).as_posix() for p in paths):
        found = seen.get(name)
        if not (isinstance(found, dict) and _is_number(found.get("changed"))):
            raise CheckError(
                f"the grader did not see {name} being written while the notebook ran: save the "
                "files the questions ask for, and no thousands of others beside them"
            )
        times.append(float(found["changed"]))
    return sorted(times)


def assert_timings_consistent(
    results: dict,
    artifacts: Path,
    epochs: int,
    epoch_examples: int | None = None,
    observed: dict | None = None,
) -> None:
    """Each run in results' comparison has a round (examples/s) per timed epoch (the first left
    out) and rounds of its own; for the runs with per-epoch checkpoints (fit, the custom loop),
    the timed epochs' seconds (`epoch_examples` / each round) fit in the time between the first
    and the last checkpoint, which spans exactly those epochs with their start-ups and saves: at
    most 3 times that span (+1 s; the grader's clock of the files is polled), at least the span
    less `STARTUP_ALLOWANCE` per timed epoch (a save, and the previous iterator's release when
    the clock leaves it out: 140 s once at 8 devices). The checkpoints' times are the grader's
    (`file_times`): setting a file's times changes nothing.

    `epoch_examples` defaults to the training set's size, the count the notebook's rounds divide
    (`examples=NUM_TRAIN`), not steps x global batch: a short last batch holds fewer examples
    (at 7 devices in the quick profile, 5 steps of 448 hold 2,240 places for 2,048 examples)."""
    if epoch_examples is None:
        epoch_examples = _labels("train")["count"]
    runs = get(results, "comparison")
    rounds = [run.get("rounds") if isinstance(run, dict) else None for run in runs]
    for run, found in zip(runs, rounds):
        if not isinstance(found, list) or len(found) != max(1, epochs - 1):
            raise CheckError(
                f"{run.get('run')!r} has {len(found or [])} timed rounds, but {epochs} epochs "
                f"give {max(1, epochs - 1)} (the first left out): time the runs' own epochs"
            )
    for i, a in enumerate(rounds):
        for b in rounds[i + 1 :]:
            if a == b:
                raise CheckError("two runs have the very same epochs' timings: time each run")
    folders = {1: ("fit_ckpt", "ckpt_*.weights.h5"), 2: ("custom_ckpt", "ckpt-*.index")}
    for index, (folder, pattern) in folders.items():
        times = file_times(artifacts, f"{folder}/{pattern}", observed)
        if len(times) != epochs or epochs < 2 or not all(positive(r) for r in rounds[index]):
            continue  # the checkpoint checks say what is wrong
        span = times[-1] - times[0]
        recorded = sum(epoch_examples / r for r in rounds[index])
        allowance = STARTUP_ALLOWANCE * len(rounds[index])
        if not span - allowance <= recorded <= span * 3 + 1:
            raise CheckError(
                f"{runs[index].get('run')!r} records {recorded:.1f} s for its timed epochs, but "
                f"their checkpoints were written {span:.1f} s apart: record the run's own timings"
            )


def min_accuracy() -> float:
    """The test accuracy a trained model must reach: the share of the graded test set's most
    frequent label plus ACCURACY_MARGIN (0.2 on a balanced set of 10 classes)."""
    return _labels("test")["majority"] + ACCURACY_MARGIN


def assert_trained(scores: dict, name: str) -> None:
    """Test accuracy clearly above always answering the test set's most frequent class."""
    bar, majority = min_accuracy(), _labels("test")["majority"]
    if not scores["accuracy"] >= bar:
        raise CheckError(
            f"{name} has a test accuracy of {scores['accuracy']:.3f}, below {bar:.3f}: always "
            f"answering the test set's most frequent class scores {majority:.3f}, and a trained "
            f"model must beat that by {ACCURACY_MARGIN}: it is not trained"
        )


def assert_accuracy_matches(recorded: Any, scores: dict, what: str) -> None:
    """An accuracy the notebook recorded is the one the grader measures on the whole test set.

    At most one example may differ (an exact tie between two logits can break either way with a
    different batch size). A larger gap means the notebook evaluated on other data: most often an
    in-memory cache after a `map` that was not filled before `evaluate`. Under a strategy Keras
    first reads one batch from an iterator it then drops; a map call cancelled in flight fails,
    the cache writer skips the failed element and the dropped iterator's prefetch reads on to the
    end, so a tf.data bug completes the cache without it: whole batches when the cache comes after
    `batch`, single examples (rarely) when it comes before. Appendix B measures it; only a cache
    filled by one complete pass first is safe.
    """
    if not _is_number(recorded):
        raise CheckError(f"the {what} is {recorded!r}, not a number")
    examples = scores["examples"]
    if abs(recorded - scores["accuracy"]) * examples > 1 + 1e-6:
        raise CheckError(
            f"the {what} is {recorded:.4f}, but the grader measures "
            f"{scores['accuracy']:.4f} for the saved model on all {examples} test examples: "
            "evaluate on the whole test set, with test_ds built without cache() (under a "
            "strategy, an unfilled cache after a map can be completed without some of the "
            "examples: appendix B shows why, notebook 1 fills its cache first)"
        )


def assert_pipeline(facts: dict, name: str, split: str, global_batch: int) -> None:
    """`name` (the probe's facts) yields every example of `split` once per pass, in batches of
    `global_batch`: the training set in a new order each pass, the test set in its own order."""
    assert_kernel_trusted(facts)
    found = facts.get("datasets", {}).get(name)
    if not found or "error" in found:
        why = found["error"] if found else "it is not defined"
        raise CheckError(f"`{name}` could not be read as (images, labels) batches: {why}")
    expected = _labels(split)
    first, second = found["passes"]
    sizes = first["batch_sizes"]
    if sum(sizes) != expected["count"] or first["sorted"] != expected["sorted"]:
        raise CheckError(
            f"one pass over `{name}` gives {sum(sizes)} examples, not the {expected['count']} of "
            f"{split}_examples once each: build it from {split}_examples (no take, skip or repeat)"
        )
    if sizes[0] != global_batch or any(size > global_batch for size in sizes):
        raise CheckError(
            f"`{name}` gives batches of {sizes[0]}; batch it with GLOBAL_BATCH ({global_batch}), "
            "which the strategy splits between the replicas"
        )
    if split == "train" and first["in_order"] == second["in_order"]:
        raise CheckError(
            f"`{name}` gives the examples in the same order every epoch: shuffle it (before "
            "batching, so that each batch is a new mix)"
        )
    if split == "train" and first["batches"] == second["batches"]:
        raise CheckError(
            f"`{name}` puts the same examples together in every epoch, only the batches' order "
            "changes: shuffle the examples before batching, not the batches after"
        )
    if split == "test" and first["in_order"] != expected["in_order"]:
        raise CheckError(
            f"`{name}` changes the order of the test examples: the test set needs no shuffle"
        )
    if split == "train":
        assert_mixed(found, name, sizes)


#: How far from a full shuffle towards no mixing at all the batches of two passes may stay (0: the
#: pairs of batch-mates kept together at random, 1: all of them). Measured with TensorFlow's
#: shuffle at 2,048, 20,000 and 73,257 (SVHN's) examples in batches of 64, 128 and 512 (one to
#: eight replicas): a buffer of 2 keeps 0.96-0.99 of the way, 10 keeps 0.73-0.96, 64 keeps
#: 0.21-0.78; 1,000 keeps at most 0.12 and 10,000 at most 0.01. Half the way parts them widely.
MIXED_AT_MOST = 0.5


#: The share of neighbours of one pass that may be neighbours again in the next (either order).
#: Measured with TensorFlow's shuffle at 2,048 and 20,000 examples: a buffer of 1,000 or 10,000
#: keeps 0-0.0024 (a full shuffle about 2 / examples: a handful of pairs), 64 keeps 0.006-0.009;
#: an order rotated by half a batch on alternate passes keeps 0.9995, runs of 16 consecutive
#: examples shuffled as blocks 0.94, eight unshuffled slices merged at random 0.017-0.028.
NEIGHBOURS_AT_MOST = 0.01


def assert_mixed(found: dict, name: str, sizes: list[int]) -> None:
    """The batches of the probe's second pass over `name` are a new mix: of the pairs of
    examples batched together in the first pass, not many more are together again than a full
    shuffle would keep (`MIXED_AT_MOST` of the way to all of them), and the order is new: few
    neighbours are neighbours again (`NEIGHBOURS_AT_MOST`). A shuffle whose buffer is a few
    examples changes the order each epoch yet moves each example a few places only; a rotation
    by half a batch makes new batches of an order kept.

    >>> assert_mixed({"kept_together": 0.07, "neighbours_kept": 0.001}, "train_ds", [128] * 16)
    >>> assert_mixed({"kept_together": 0.98}, "train_ds", [128] * 16)
    Traceback (most recent call last):
    ...
    course_tools.grade.core.checks.CheckError: `train_ds` mixes its examples too little ...
    """
    examples = sum(sizes)
    at_random = sum(s * (s - 1) for s in sizes) / (examples * (examples - 1) or 1)
    kept = found.get("kept_together")
    if at_random >= 1:
        return  # one batch: nothing to mix between batches
    if not _is_number(kept) or (kept - at_random) / (1 - at_random) > MIXED_AT_MOST:
        shown = f"{kept:.0%}" if _is_number(kept) else "an unknown share"
        raise CheckError(
            f"`{name}` mixes its examples too little between epochs: {shown} of the pairs of "
            f"examples batched together in one pass are together again in the next (a full "
            f"shuffle keeps {at_random:.1%}): give shuffle a buffer of thousands of examples, "
            "before batching"
        )
    neighbours = found.get("neighbours_kept")
    if not _is_number(neighbours) or neighbours > NEIGHBOURS_AT_MOST:
        shown = f"{neighbours:.1%}" if _is_number(neighbours) else "an unknown share"
        raise CheckError(
            f"`{name}` keeps its examples' order between epochs: {shown} of the examples next "
            "to each other in one pass are next to each other again in the next (a shuffle "
            f"keeps about {2 / max(examples, 1):.2%}), whatever batches they make: shuffle the "
            "examples themselves with a buffer of thousands, before batching"
        )


def _labels(split: str) -> dict:
    """The count and checksums of the labels of `split` (as the course loads it)."""
    key = ("labels", split)
    if key not in _cache:
        from course_utils import data

        labels = [int(label) for _, label in data.load(DATASET, split)]
        _cache[key] = {"count": len(labels), "in_order": checksum(labels)}
        counts = collections.Counter(labels)  # the most frequent label's share of them
        _cache[key]["majority"] = max(counts.values(), default=0) / max(1, len(labels))
        _cache[key]["sorted"] = checksum(labels, in_order=False)
    return _cache[key]


def assert_comparison(results: dict, artifacts: Path) -> None:
    """The verdicts in conclusions.json compare each distributed run of results.json with the
    one-device run (the first), on the runs' own epochs, and say what the noise rule says."""
    from course_utils import timing

    runs = get(results, "comparison")
    if not (
        isinstance(runs, list)
        and len(runs) == 3
        and all(isinstance(run, dict) and isinstance(run.get("rounds"), list) for run in runs)
    ):
        raise CheckError(
            "results.json should hold the 3 runs of `runs` with their epochs' speeds: make `runs` "
            "the one-device run, then fit, then the custom loop (timing.RunResult each)"
        )
    missing = "write `verdicts` (question 4) and run the cell after the chart, which records them"
    verdicts = read_json(artifacts, "conclusions.json", list, missing, "timing.record")
    one_device = runs[0]
    for run in runs[1:]:
        pair = {one_device.get("run"), run.get("run")}
        found = [v for v in verdicts if isinstance(v, dict) and {v.get("a"), v.get("b")} == pair]
        if not found:
            raise CheckError(
                f"no verdict compares {run.get('run')!r} with {one_device.get('run')!r}: add "
                "timing.compare of each distributed run with the one-device run to `verdicts`"
            )
        verdict = found[0]
        by_name = {r.get("run"): r for r in runs}
        rounds = {name: by_name[verdict[name]]["rounds"] for name in ("a", "b")}
        if any(verdict.get(f"{name}_samples") != rounds[name] for name in ("a", "b")):
            raise CheckError(
                f"the verdict on {verdict['a']!r} and {verdict['b']!r} rests on other numbers than "
                "the runs' own epochs: compare the RunResults that are in `runs`"
            )
        a, b = (timing.RunResult(verdict[n], 1.0, 1, rounds=rounds[n]) for n in ("a", "b"))
        try:
            word = timing.compare(a, b).word
        except (ValueError, TypeError) as exc:
            raise CheckError(f"the runs' epochs cannot be compared: {exc}") from None
        if verdict.get("word") != word:
            raise CheckError(
                f"the verdict on {verdict['a']!r} and {verdict['b']!r} says "
                f"{verdict.get('word')!r}, which its samples do not support: use timing.compare"
            )


def assert_created_in_scope(observed: dict | None, name: str, *, scoped: bool = True) -> None:
    """The notebook's code (read by the grader, `reading`) creates `name` inside the
    `with ....scope():` block of a strategy it makes with `tf.distribute.MirroredStrategy`
    (scoped=True) or outside any (False). Skipped without observations (the hidden tests run in
    the solution's own kernel)."""
    if observed is None:
        return
    assert_readable(observed)
    code = _code(observed)
    inside = code.assigned_in_scope(name)
    if inside is None:
        raise CheckError(f"the notebook's code never assigns `{name}`: keep that name")
    copied = code.copied(name)
    if code.fitted(name) and name in code.savers(f"{name}.keras"):
        copied = [c for c in copied if c not in reading.UNTRAINED_COPIERS]  # trained here
    copied += _hand_steps(code, name)
    if scoped and copied:
        raise CheckError(
            f"the notebook's code makes `{name}` with {copied[0]}: a copy of a model is not the "
            f"model trained; create {name} with make_model() inside `with strategy.scope():` "
            "and train it"
        )
    for saver in sorted(code.savers(f"{name}.keras") - {name}):
        if code.assigned_in_scope(saver) != scoped:
            where = "outside any strategy scope" if scoped else "inside `with strategy.scope():`"
            raise CheckError(
                f"the notebook's code saves {name}.keras from `{saver}`, which it creates {where}"
                f": train and save {name} itself"
            )
    if inside != scoped:
        raise CheckError(
            f"the notebook's code creates `{name}` inside `with strategy.scope():`: train the "
            "one-device baseline without any strategy scope"
            if not scoped
            else f"the notebook's code creates `{name}` outside any strategy scope: create (and "
            f"compile) {name} inside `with strategy.scope():` of a strategy made by "
            "tf.distribute.MirroredStrategy(...), or the strategy does not train it"
        )


#: Methods through which the reading cannot follow where the examples go (a function of their
#: own, other datasets merged in or alternated, examples left out): a pipeline made through one
#: of them is left to the instructor.
UNFOLLOWED = (
    "flat_map",
    "interleave",
    "choose_from_datasets",
    "sample_from_datasets",
    "skip",
    "take",
    "concatenate",
)

#: The names the exercise gives the examples loaded for each split.
EXAMPLES = {"train": "train_examples", "test": "test_examples"}


def assert_pipeline_code(observed: dict | None, name: str, split: str) -> None:
    """The notebook's code (read by the grader) makes `name` with a `batch`, and for the training
    set a `shuffle` before it (a buffer below `reading.SMALL_BUFFER`, as a literal or constant
    arithmetic, `reading._fold`, is none) of the
    chain that carries the training examples (not of a `Dataset.range(1)` made beside them);
    the test set is not shuffled. For the training set the
    pipeline read is the one in force where the code trains on it (`fit`, the custom loop's
    `experimental_distribute_dataset`), and `name` must not be assigned again after that: the
    probe reads the last one. A chain through a method the reading cannot follow
    (`UNFOLLOWED`) is named for the instructor. A method a helper applies in a branch (`if
    training: ds = ds.shuffle(...)`, named "shuffle?" by `reading`) may or may not have run
    for this call: it counts as there for the training set and not for the test set, and the
    kernel's facts (`assert_pipeline`, the order the probe read) decide. Skipped without
    observations."""
    if observed is None:
        return
    assert_readable(observed)
    code = _code(observed)
    places, problems = (
        code.training_places(name, baseline=BASELINE) if split == "train" else ([], [])
    )
    if problems:
        raise CheckError(_training_message(problems[0], name))
    elsewhere = code.trainings_elsewhere(name, baseline=BASELINE) if split == "train" else []
    if elsewhere:
        cell, call = elsewhere[0]
        raise CheckError(
            f"the notebook's code trains on a dataset other than `{name}` ({_cell(cell)}: "
            f"`{cap_message(call, 120)}`), made from the same examples: the grader reads "
            f"`{name}`, not that one; train on `{name}` itself"
        )
    for at in places or [None]:
        _assert_one_pipeline(code, name, split, at)
    if places:
        later = code.assigned_after(name, places[-1])
        if later:
            raise CheckError(
                f"the notebook's code assigns `{name}` again ({_cell(later[0])}"
                f"{', ...' if len(later) > 1 else ''}) after training on "
                f"it: the grader reads the `{name}` the notebook ends with, which is not the "
                "pipeline that trained; give the later dataset another name"
            )


#: The exercise's one-device baseline: its training is question 4's (`assert_baseline_code`), not
#: question 1's.
BASELINE = "single_model"

#: What question 1's message says to write (`_training_message`).
PLAIN_CALLS = (
    "write `model.fit({name}, ...)` and `strategy.experimental_distribute_dataset({name})` as "
    "plain calls"
)


def _training_message(problem: reading.TrainingProblem, name: str) -> str:
    """What the student reads for a training call the reading cannot accept (`problem`)."""
    where = f"{_cell(problem.cell)}: `{problem.code}`"
    plain = PLAIN_CALLS.format(name=name)
    both = (
        "the grader finds no `{call}` in the notebook's code (the exercise trains with fit and "
        f"with a custom loop, both on `{name}`): write that call with the name `{name}` itself"
    )
    write = (
        f"`{problem.receiver}.fit({name}, ...)`"
        if problem.receiver
        else f"`strategy.experimental_distribute_dataset({name})`"
    )
    words = {
        "reached": f"reaches `{problem.code.rsplit('.', 1)[-1]}` without calling it there "
        f"({where}), so the "
        f"grader cannot read what it trains on: {plain}",
        "looked_up": f"looks a training method up by its name ({where}), so the grader cannot "
        f"read what it trains on: {plain}",
        "unnamed": f"looks a method of a model or a strategy up by a name that is not written "
        f"out ({where}), so the grader cannot read which method it calls or what it trains "
        f"on: call the method by its name ({plain})",
        "unresolved": f"gives the training examples to a call the grader cannot follow "
        f"({where}): it cannot tell whether that call trains, nor on what; {plain}",
        "unpacked": f"gives a training call its dataset through `*`/`**` ({where}), so the "
        f"grader cannot read what it trains on: write {write} with the name `{name}` itself",
        "no_dataset": f"gives a training call no dataset the grader can find ({where}), so the "
        f"grader cannot read what it trains on: write {write} with the name `{name}` itself",
        "unfollowed": f"gives the training examples to a function the grader does not "
        f"follow ({where}: a function with a decorator other than tf.function, or whose name "
        "is bound again after its def), so it cannot read what that call trains on: write the "
        f"training call itself, or call a plain def; {plain}",
        "undistributed": f"feeds `strategy.run` from a dataset that is not distributed, made "
        f"from the training examples ({where}), so each replica is given whole batches of a "
        f"pipeline the grader does not read: iterate `train_dist = "
        f"strategy.experimental_distribute_dataset({name})` in the custom loop (for "
        "evaluation, a distributed test set)",
        "from_function": f"distributes the training examples through a function ({where}), "
        f"whose pipeline the grader does not read: write {write} instead",
        "other_dataset": f"trains on a dataset other than `{name}` ({where}): the grader reads "
        f"`{name}`, not that one; write {write} with the name `{name}` itself",
        "bound": f"binds `{name}` otherwise than by an assignment outside any function "
        f"({where}: a loop's or comprehension's variable, a parameter, `with ... as`, `global`, "
        "a function's local given to a training call), "
        f"so the grader cannot tell which pipeline a call given `{name}` trains on: bind "
        f"`{name}` only with `{name} = ...` outside any function, and give a helper's dataset "
        "parameter another name",
        "no_fit": both.format(call=f"model.fit({name}, ...)"),
        "no_distribute": both.format(call=f"strategy.experimental_distribute_dataset({name})"),
        "unread_buffer": f"shuffles `{name}` ({_cell(problem.cell)}, trained on in "
        f"{_cell(problem.trained)}) with a buffer the grader cannot read as a number "
        f"(`{problem.code}`): write the buffer as a number of thousands (`10_000`) or as the "
        "count of the training examples (`NUM_TRAIN`, `len(train_examples)`)",
    }
    if problem.kind in ("no_fit", "no_distribute"):
        return words[problem.kind]
    return f"the notebook's code {words[problem.kind]}"


def assert_baseline_code(observed: dict | None, baseline: str, name: str) -> None:
    """The notebook's code (read by the grader) trains the one-device baseline `baseline` with
    `baseline.fit(name, ...)`, the bare name of the distributed runs' pipeline, and on nothing
    else: question 4 compares the runs on the same data (question 1 judges `name` itself and
    the distributed runs' calls). Skipped without observations."""
    if observed is None:
        return
    assert_readable(observed)
    others, bare = _code(observed).baseline_fits(baseline, name)
    asked = (
        f"question 4 asks for the one-device baseline trained on the same `{name}` as the "
        "distributed runs"
    )
    hidden = _code(observed).unfollowed_calls(baseline)
    if hidden:
        cell, call = hidden[0]
        raise CheckError(
            f"{asked}, but the notebook's code trains `{baseline}` through a function the "
            f"grader does not follow ({_cell(cell)}: `{cap_message(call, 120)}`: a function "
            "with a decorator other than tf.function, or whose name is bound again after its "
            f"def), so it cannot read what `{baseline}` trains on: write "
            f"`{baseline}.fit({name}, ...)`, or call a plain def"
        )
    if others:
        cell, call = others[0]
        raise CheckError(
            f"{asked}, but the notebook's code trains `{baseline}` on something else "
            f"({_cell(cell)}: `{cap_message(call, 120)}`): write `{baseline}.fit({name}, ...)` "
            f"with the name `{name}` itself"
        )
    if not bare:
        raise CheckError(
            f"{asked}: the grader finds no `{baseline}.fit({name}, ...)` in the notebook's "
            "code; write that call"
        )


def _assert_one_pipeline(code: reading.Code, name: str, split: str, at: tuple | None) -> None:
    """`assert_pipeline_code` on the assignment of `name` in force at the place `at`."""
    read = code.pipeline(name, at=at)
    methods = [method.removesuffix("?") for method in read]
    if "batch" not in methods:
        raise CheckError(
            f"the notebook's code does not batch `{name}` (it calls {methods or 'nothing'}): "
            "batch it with GLOBAL_BATCH"
        )
    last_batch = len(methods) - 1 - methods[::-1].index("batch")
    unfollowed = [method for method in UNFOLLOWED if method in methods]
    if split == "train" and unfollowed:
        raise CheckError(
            f"the notebook's code makes `{name}` through {', '.join(unfollowed)}, which the "
            "grader does not follow (where the examples go, whether the shuffle moves them): "
            "no point from the grader; the instructor reads this pipeline"
        )
    if split == "train" and "shuffle" not in methods[:last_batch]:
        if "shuffle(1)" in methods:
            raise CheckError(
                f"the notebook's code shuffles `{name}` with a buffer of 1 (or less), which keeps "
                "the examples in their order: give shuffle a buffer of thousands of examples"
            )
        if "shuffle(few)" in methods[:last_batch]:
            raise CheckError(
                f"the notebook's code shuffles `{name}` with a buffer below "
                f"{reading.SMALL_BUFFER:,}, which moves each example a few places only (much "
                "of each batch stays together every epoch): give shuffle a buffer of thousands "
                "of examples"
            )
    if split == "train" and "shuffle" not in methods[:last_batch]:
        raise CheckError(
            f"the notebook's code does not shuffle `{name}` before batching it: shuffle the "
            "examples, then batch"
        )
    if split == "train" and not _carries_examples(methods):
        raise CheckError(
            f"the notebook's code shuffles a dataset that does not carry {EXAMPLES[split]} "
            f"(`{name}` starts from {methods[: methods.index('shuffle')] or 'nothing'}): "
            f"shuffle {EXAMPLES[split]} (cached), then batch"
        )
    if split == "test" and ("shuffle" in read or "shuffle(few)" in read):
        raise CheckError(f"the notebook's code shuffles `{name}`: the test set needs no shuffle")


def _carries_examples(methods: list[str]) -> bool:
    """The chain up to the first shuffle makes no dataset of its own (`tf.data.Dataset.range`,
    `from_tensors`, `tf.data.experimental.Counter`): what it shuffles is what it loaded."""
    return not {"data", "Dataset"} & set(methods[: methods.index("shuffle")])


def assert_loss_code(observed: dict | None, function: str = "compute_loss") -> None:
    """The notebook's code (read by the grader) divides the loss by the examples of the whole
    step: `function`, or a function of the notebook's own that it calls, calls `all_reduce` (the
    step's examples counted over the replicas).
    `compute_average_loss` without `global_batch_size` divides each replica's sum by its own
    examples times the replicas, which is wrong on an uneven last batch (notebook 2 says why;
    appendix C, part 6, measures it).
    Skipped without observations."""
    if observed is None:
        return
    assert_readable(observed)
    calls = _code(observed).function_calls(function, follow=True)
    if calls is None:
        raise CheckError(f"the notebook's code does not define `{function}`")
    if "all_reduce" not in calls:
        raise CheckError(
            f"the notebook's code does not count the examples of the whole step in `{function}` "
            "or in a function of the notebook's own that it calls: "
            f"{function} must divide the summed per-example losses by the step's examples, "
            "counted over all replicas with an all-reduce (a mean per replica, "
            "compute_average_loss without global_batch_size, or a fixed GLOBAL_BATCH, is wrong "
            "for some batches)"
        )


def evaluate(model: keras.Model, split: str = "test") -> dict[str, float]:
    """{"loss", "accuracy", "examples"} of a model on the whole test set (split="test"), or on the
    first TRAIN_EXAMPLES of the training set ("train"), measured by the grader."""
    import numpy as np

    key = ("scores", split, fingerprint(model))
    if key not in _cache:
        from course_utils import data

        examples = data.load(DATASET, split)
        if split == "train":
            examples = examples.take(TRAIN_EXAMPLES)
        test = examples.batch(256)
        outputs = np.asarray(
            model.predict(test.map(lambda image, label: image), verbose=0), dtype=np.float64
        )
        labels = np.concatenate([label.numpy() for _, label in test])
        rows_sum_to_one = np.all(outputs >= 0) and np.allclose(outputs.sum(axis=1), 1.0, atol=1e-3)
        if rows_sum_to_one:  # the model ends with a softmax: outputs are probabilities
            log_probs = np.log(np.clip(outputs, 1e-12, 1.0))
        else:
            shifted = outputs - outputs.max(axis=1, keepdims=True)
            log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        loss = float(-log_probs[np.arange(len(labels)), labels].mean())
        accuracy = float((outputs.argmax(axis=1) == labels).mean())
        _cache[key] = {"loss": loss, "accuracy": accuracy, "examples": len(labels)}
    return _cache[key]


def fit_checkpoints(folder: Path) -> dict[int, Path]:
    """{epoch: path} of the ModelCheckpoint files ckpt_{epoch}.weights.h5 in `folder`."""
    found = {}
    for path in Path(folder).glob("ckpt_*.weights.h5"):
        match = re.fullmatch(r"ckpt_(\d+)\.weights\.h5", path.name)
        if match:
            found[int(match[1])] = path
    return found


def tf_checkpoints(folder: Path) -> dict[int, Path]:
    """{number: prefix} of the tf.train.CheckpointManager checkpoints ckpt-N in `folder`."""
    found = {}
    for path in Path(folder).glob("ckpt-*.index"):
        match = re.fullmatch(r"ckpt-(\d+)\.index", path.name)
        if match:
            found[int(match[1])] = path.with_suffix("")
    return found


def latest_tf_checkpoint(folder: Path) -> Path:
    """The prefix of the newest ckpt-N in `folder` (CheckError when there is none)."""
    found = tf_checkpoints(folder)
    if not found:
        raise CheckError(
            f"no checkpoint ckpt-N in {ARTIFACTS_NAME}/{Path(folder).name}: "
            "call manager.save() after each epoch"
        )
    return found[max(found)]


def _safe_checkpoint(prefix: Path) -> None:
    """Every file of the tf.train checkpoint `prefix` (prefix.index, prefix.data-*) is safe."""
    files = [prefix.with_name(prefix.name + ".index"), *prefix.parent.glob(prefix.name + ".data-*")]
    for path in files:
        safe_file(path)


def restore(model: keras.Model, checkpoint: Path) -> keras.Model:
    """A copy of `model`'s architecture with the weights of a .weights.h5 file or a tf.train
    checkpoint."""
    import keras

    clone = keras.models.clone_model(model)
    checkpoint = Path(checkpoint)
    if checkpoint.name.endswith(".weights.h5"):
        safe_file(checkpoint)
    else:
        _safe_checkpoint(checkpoint)
    try:
        if checkpoint.name.endswith(".weights.h5"):
            clone.load_weights(checkpoint)
        else:
            status = _tf().train.Checkpoint(model=clone).restore(str(checkpoint))
            status.expect_partial()
            status.assert_existing_objects_matched()
    except Exception as exc:
        raise CheckError(
            f"{checkpoint.name} does not hold this model's weights "
            f"({type(exc).__name__}: {str(exc)[:200]}); custom-loop checkpoints must be "
            "tf.train.Checkpoint(model=custom_model, optimizer=optimizer)"
        ) from None
    return clone


def assert_checkpoint_holds(checkpoint: Path, model: keras.Model) -> None:
    """The checkpoint holds exactly the model's final weights."""
    if fingerprint(restore(model, checkpoint)) != fingerprint(model):
        raise CheckError(
            f"{Path(checkpoint).name} does not hold the final weights of the saved model"
        )
