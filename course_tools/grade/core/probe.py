"""The hidden probe: facts about the objects a notebook left in memory, collected in the student's
kernel (the solution's HIDDEN PROBE cell calls `collect`; `grade.core.submission` runs it).

It runs in the submission's own Python, after its code: what it finds is what an honest run left
in memory, and a notebook that takes over its kernel can make it say anything (see
`grade.core.submission`). The assertions on these facts run elsewhere, in the check process
(`course_tools.grade.core.checks`), which never runs student code.

Example (the probe cell):

    from course_tools.grade.core import probe
    FACTS = probe.collect(globals(), models=["fit_model"], datasets=("train_ds",))
"""

from __future__ import annotations

import abc
import hashlib
import os
import re
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import keras


#: The most values `answer` writes (the course's facts hold a few thousand).
MAX_VALUES = 100_000


def answer(facts: dict) -> str:
    """`facts` as the text the grader reads (`submission.read_facts`): the repr of builtin
    values, written by the dict type's own C code, after a check that every key and value is
    of an exact builtin type (a subclass, or an object of the notebook's, could write its own
    repr). The types are reached through literals and their methods are C code: a notebook can
    replace neither (it could replace `json.dumps`, which the probe used before).

    >>> answer({"models": {"m": None}, "ratios": [1.0, 0.5]})
    "{'models': {'m': None}, 'ratios': [1.0, 0.5]}"
    """
    plain = ("".__class__, (0).__class__, (0.0).__class__, True.__class__, None.__class__)
    holders = ({}.__class__, [].__class__)
    todo, seen = [facts], 0
    while todo:
        value = todo.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ValueError(f"more than {MAX_VALUES:,} values in the facts")
        kind = type(value)
        if kind is holders[0]:
            todo += [*value.keys(), *value.values()]
        elif kind is holders[1]:
            todo += value
        elif not any(kind is allowed for allowed in plain):
            raise TypeError(f"a fact of type {kind.__name__!r}, not a builtin value")
    return holders[0].__repr__(facts) if type(facts) is holders[0] else ""


def keras_weights(model: Any) -> bool:
    """`model.weights` is Keras's own property (a subclass of `keras.Model` keeps it), not one
    of the notebook's, which could list other weights than those the model trains."""
    import inspect

    import keras

    return inspect.getattr_static(type(model), "weights", None) is inspect.getattr_static(
        keras.layers.Layer, "weights"
    )


def fingerprint(model: keras.Model) -> str:
    """A hash of a Keras model's weights (same weights, same hash; mirrored variables included)."""
    import numpy as np

    digest = hashlib.sha256()
    for variable in model.weights:
        array = np.asarray(variable.numpy())
        digest.update(str(array.shape).encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def counted_optimizer(model: Any) -> Any:
    """The optimizer whose steps count for the model: Keras's `model.optimizer` (set by
    `compile`), or for Keras's `LossScaleOptimizer` (also through a subclass that keeps Keras's
    `iterations`) its inner optimizer, whose count the wrapper reports; None for a model never
    compiled. ValueError saying why for one whose count cannot be trusted: an optimizer not
    Keras's, or a class that defines `iterations` itself (Keras's wrapper aside), whose answer
    would be its own.

        counted_optimizer(model)   # the Adam that `compile(optimizer=keras.optimizers.Adam())` set
    """
    import inspect

    import keras

    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        return None
    wrapper = inspect.getattr_static(keras.optimizers.LossScaleOptimizer, "iterations")
    while inspect.getattr_static(type(optimizer), "iterations", None) is wrapper:
        # Keras's wrapper (or a subclass keeping its `iterations`, as notebook 3b's does):
        # its count is its inner optimizer's, read from the instance without running its code
        optimizer = inspect.getattr_static(optimizer, "inner_optimizer", None)
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"its optimizer, a {type(optimizer).__name__}, is not one of Keras's")
    if inspect.getattr_static(type(optimizer), "iterations", None) is not inspect.getattr_static(
        keras.optimizers.Optimizer, "iterations"
    ):
        raise ValueError(
            f"its optimizer's class, {type(optimizer).__name__}, defines `iterations` itself"
        )
    return optimizer


def optimizer_steps(model: Any) -> int | None:
    """The steps the model's own optimizer (`counted_optimizer`) has made in this kernel; None
    for a model never compiled. A model whose weights were copied in from another
    (`set_weights`, `load_weights`) has made none, whatever its file says.
    ValueError saying why for a count that cannot be read (`counted_optimizer`).

        optimizer_steps(model)   # 48 after 3 epochs of 16 batches with fit
    """
    optimizer = counted_optimizer(model)
    if optimizer is None:
        return None
    try:
        return int(optimizer.iterations.numpy())
    except Exception as exc:  # noqa: BLE001 - anything the student's optimizer raises
        error = type(exc).__name__
        raise ValueError(f"its optimizer's `iterations` cannot be read ({error})") from None


def fit_epochs(model: Any) -> tuple[int, int | None]:
    """(how many epochs the model's last `fit` ran, counted from epoch 0; the epochs it was
    asked for): Keras's `History` callback, which every `fit` sets on its model as
    `model.history` when it starts and which lists each epoch it ends (`epoch`, from
    `initial_epoch`), with fit's own `params["epochs"]`. `compile` and a weights load leave it
    as it was; a fit begun past epoch 0 (`initial_epoch=EPOCHS`) or asked for none ran no epoch
    from the start (0), as does a model that never ran fit (no `history`). Read without running
    the model's code: anything but Keras's own `History` holding a list of ints counts as no
    epoch run.

        fit_epochs(model)   # (3, 3) after fit(epochs=3); (0, 3) with initial_epoch=3 too
    """
    import inspect

    missing = object()
    history = inspect.getattr_static(model, "history", missing)
    if history is missing or history is None:
        return (0, None)
    kind = type(history)
    if kind.__name__ != "History" or not kind.__module__.startswith("keras."):
        return (0, None)
    epochs = inspect.getattr_static(history, "epoch", None)
    params = inspect.getattr_static(history, "params", None)
    asked = params.get("epochs") if type(params) is dict else None
    asked = asked if type(asked) is int else None
    if type(epochs) is not list or not all(type(e) is int for e in epochs):
        return (0, asked)
    ran = len(epochs) if epochs == list(range(len(epochs))) else 0
    return (ran, asked)


def fit_steps(model: Any) -> int | None:
    """The steps an epoch the model's last `fit` was set to run: its `History`'s own
    `params["steps"]` (the training data's batches, `steps_per_epoch` when given; None when
    the data's length is unknown, or no Keras History), read without running the model's code.

        fit_steps(model)   # 7 after fit on 7 batches; 1 with steps_per_epoch=1
    """
    import inspect

    history = inspect.getattr_static(model, "history", None)
    kind = type(history)
    if kind.__name__ != "History" or not kind.__module__.startswith("keras."):
        return None
    params = inspect.getattr_static(history, "params", None)
    steps = params.get("steps") if type(params) is dict else None
    return steps if type(steps) is int else None


def optimizer_replicas(model: Any) -> int | None:
    """Over how many replicas the step counter of the model's own optimizer
    (`counted_optimizer`) is distributed: the replicas of the strategy the optimizer was made
    under (`tf.distribute.DistributedValues`, mirrored over one to 8 devices), 0 for one made
    outside any (a plain variable: another model's optimizer given to this one, `model.optimizer
    = other.optimizer`, makes its steps elsewhere); None for a model never compiled.
    A counter that is not Keras's own variable holding TensorFlow's own classes counts as 0: its
    answer would be its own. ValueError as `counted_optimizer`.

        optimizer_replicas(model)   # 2 for a model compiled under a 2-device MirroredStrategy
    """
    import keras

    optimizer = counted_optimizer(model)
    if optimizer is None:
        return None
    counter = optimizer.iterations
    tf = sys.modules.get("tensorflow")
    if tf is None or type(counter) is not keras.Variable:
        return 0
    value = counter.value
    own = all(c.__module__.startswith(("tensorflow.", "builtins")) for c in type(value).__mro__)
    if not own or _methods_not_from(type(value), _library_folders()):
        return 0
    if not isinstance(value, tf.distribute.DistributedValues):
        return 0
    return len(value.values)


#: The endings of the names Keras gives an optimizer's moments, one of each per trained
#: variable (`adam/dense_kernel_momentum`, `..._velocity`, AMSGrad's `..._velocity_hat`; SGD
#: with momentum, RMSprop, Nadam, AdamW keep the same): running averages of the gradients.
MOMENTS = ("_momentum", "_velocity", "_velocity_hat")


def moments_zero(model: Any) -> bool | None:
    """Whether every moment the model's own optimizer (`counted_optimizer`) keeps is exactly
    0 (`MOMENTS`, read from its public `variables`): a step of real gradients makes them
    non-zero, while steps of zero gradients leave them 0 (and the weights unchanged) as the
    count grows; None for an optimizer that keeps none (SGD without momentum) or a model
    never compiled. ValueError as `counted_optimizer`.

        moments_zero(model)   # False after fit; True after apply_gradients of zeros only
    """
    import numpy as np

    optimizer = counted_optimizer(model)
    if optimizer is None:
        return None
    moments = [v for v in optimizer.variables if str(getattr(v, "name", "")).endswith(MOMENTS)]
    if not moments:
        return None
    return all(not np.any(np.asarray(v.numpy())) for v in moments)


def checksum(labels: list, *, in_order: bool = True) -> str:
    values = labels if in_order else sorted(labels)
    return hashlib.sha256(",".join(map(str, values)).encode()).hexdigest()[:16]


#: The modules a tf.data pipeline's classes come from: a class of the notebook's own among them
#: (`train_ds.__class__ = Mine`, with its own `__iter__`) would choose what the probe reads.
DATASET_MODULES = ("tensorflow.", "builtins", "abc", "collections.abc", "typing")


def _library_folders() -> tuple[str, ...]:
    """The folders a pipeline class's methods may come from: TensorFlow's and Python's own
    (`abc`, `typing`, `functools` wrappers, and the modules frozen into the interpreter,
    `collections.abc`'s)."""
    folders = [abc.__file__]
    if "tensorflow" in sys.modules:
        folders.append(sys.modules["tensorflow"].__file__)
    return (*(f.rpartition("/")[0] + "/" for f in folders if f), "<frozen ")  # frozen stdlib


#: The type of a Python function.
FUNCTION = types.FunctionType
#: `type`'s own `__name__` descriptor: a class's name read without its metaclass's code.
CLASS_NAME = type.__dict__["__name__"]
#: A property and the one kind of it TensorFlow's classes use (`abc.abstractproperty`).
PROPERTIES = (property, abc.abstractproperty)
#: The interpreter's own methods and descriptors (slot wrappers, method and class-method
#: descriptors, getset and member descriptors, builtin functions), written in C.
C_LEVEL = (
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    types.BuiltinFunctionType,
)


def _methods_not_from(cls: type, folders: tuple[str, ...]) -> list[str]:
    """The methods in the own dicts of `cls` and its bases whose code was not loaded from
    `folders`, or that are callables of another kind than a function, a property, a class or the
    interpreter's own ("Class.name"): one assigned by a notebook (`type(ds).__iter__ = f`, a
    `functools.partial` or `partialmethod`, an object with `__call__`) would choose what the probe
    reads, as its own class would.

    >>> _methods_not_from(type("Mine", (), {"f": lambda self: 0}), ("/nowhere/",))
    ['Mine.f']
    """
    found = []
    for klass in cls.__mro__:
        for name, value in type.__dict__["__dict__"].__get__(klass).items():
            if type(value) in (staticmethod, classmethod):
                value = value.__func__
            kind = type(value)
            if kind in PROPERTIES:
                functions = [value.fget, value.fset, value.fdel]
            elif kind is FUNCTION or kind in C_LEVEL or isinstance(value, type):
                functions = [value]  # a function, the interpreter's own, or a class
            elif not callable(value) and not hasattr(kind, "__get__"):
                continue  # data
            else:  # another callable or descriptor (functools.partial, partialmethod, an
                # object with __call__): Python would call it as a method, and it is not read
                found.append(f"{klass.__qualname__}.{name}")
                continue
            for function in functions:
                code = function.__code__ if type(function) is FUNCTION else None
                if code is not None and not code.co_filename.startswith(folders):
                    found.append(f"{klass.__qualname__}.{name}")
    return found


def pipeline_facts(dataset: Any) -> dict:
    """What two passes over a pipeline of (images, labels) batches yield: the batch sizes, a
    checksum of the labels in the order they came and sorted (the same examples in any order),
    how many of the examples batched together in the first pass are again in the second
    (`kept_together`: how much a shuffle mixes, not only whether the order changed), how many
    neighbours in the first pass are neighbours again (`neighbours_kept`: whether the order
    itself is new, not only the batches), and the length TensorFlow knows for it
    (`cardinality`, -2 when unknown: Keras 3's `fit` then counts one optimizer step more an
    epoch).
    TypeError for an object whose classes are not all TensorFlow's (`DATASET_MODULES`), or whose
    classes' methods are not all TensorFlow's or Python's code (`_methods_not_from`)."""
    foreign = [
        c.__qualname__
        for c in type(dataset).__mro__
        if not c.__module__.startswith(DATASET_MODULES)
    ]
    if foreign:
        raise TypeError(f"not a pipeline of TensorFlow's own classes ({', '.join(foreign)})")
    replaced = _methods_not_from(type(dataset), _library_folders())
    if replaced:
        raise TypeError(f"a method of a TensorFlow pipeline class replaced ({', '.join(replaced)})")
    passes, groups = [], []
    for _ in range(2):
        sizes, labels, batches, examples = [], [], [], []
        for batch_images, batch_labels in dataset:
            values = [int(label) for label in batch_labels.numpy().reshape(-1)]
            sizes.append(len(values))
            labels += values
            batches.append(checksum(values, in_order=False))
            rows = batch_images.numpy()
            examples.append([hash(row.tobytes()) for row in rows.reshape(rows.shape[0], -1)])
        groups.append(examples)
        passes.append(
            {
                "batch_sizes": sizes,
                "in_order": checksum(labels),
                "sorted": checksum(labels, in_order=False),
                "batches": checksum(batches, in_order=False),  # which examples go together
            }
        )
    orders = [[example for batch in examples for example in batch] for examples in groups]
    return {
        "cardinality": int(dataset.cardinality()),  # -2: unknown (after filter, flat_map...)
        "passes": passes,
        "kept_together": kept_together(*groups),
        "neighbours_kept": neighbours_kept(*orders),
    }


def kept_together(first: list[list], second: list[list]) -> float:
    """The share of the pairs of examples batched together in the `first` pass that are batched
    together again in the `second` (each batch a list of the examples' identities, here a hash
    of the image's bytes): about 1 / (number of batches) for a full shuffle, near 1 for a
    shuffle whose buffer is a few examples (they move a few places), 1 without any.

    >>> kept_together([[1, 2], [3, 4]], [[2, 1], [4, 3]])
    1.0
    >>> kept_together([[1, 2], [3, 4]], [[1, 3], [2, 4]])
    0.0
    """
    batch_of = {example: number for number, batch in enumerate(first) for example in batch}
    pairs = sum(len(batch) * (len(batch) - 1) for batch in first)
    together = 0
    for batch in second:
        counts: dict = {}
        for example in batch:
            if example in batch_of:
                counts[batch_of[example]] = counts.get(batch_of[example], 0) + 1
        together += sum(count * (count - 1) for count in counts.values())
    return together / pairs if pairs else 1.0


def neighbours_kept(first: list, second: list) -> float:
    """The share of the pairs of examples next to each other in the `first` pass (in that order)
    that are next to each other again in the `second`, in either order: about 2 / (number of
    examples) for a shuffle, near 1 for an order only rotated, reversed or cut into runs of
    consecutive examples that are shuffled as blocks, whatever batches those make.

    >>> neighbours_kept([1, 2, 3, 4], [3, 4, 1, 2])
    0.6666666666666666
    >>> neighbours_kept([1, 2, 3, 4], [2, 4, 1, 3])
    0.0
    """
    after = {}
    for this, following in zip(second, second[1:]):
        after.setdefault(this, set()).add(following)
        after.setdefault(following, set()).add(this)
    pairs = list(zip(first, first[1:]))
    kept = sum(1 for this, following in pairs if following in after.get(this, ()))
    return kept / len(pairs) if pairs else 1.0


#: The dataset of whose training examples `START_EXAMPLES` are drawn at random by the check
#: process (`checker._start_examples`: new synthetic examples, or among the first `START_POOL` real
#: ones) to measure each start of a model's training on (`checks.measure_starts`), under the
#: grader's own settings (the batch's `--data`).
START_DATASET = "svhn_cropped"
START_EXAMPLES = 512
START_POOL = 16_384
#: The file the probe writes the grader's copies of each start into (`start_export`), in the
#: kernel's `COURSE_ARTIFACTS` folder: the grader copies it beside the artifacts
#: (`one_submission.take_starts`) and the check process reads it after comparing its SHA-256 with
#: the one in the facts (`checker.measured`). A NumPy `.npz` of numbers (read without pickle).
START_FILE = ".grader-starts.npz"


def start_state() -> tuple[dict | None, str]:
    """(the grader's record of each optimizer's first step, `fresh.STATE`; "") when the grader's
    hook (`fresh.install`) is in place, else (None, why not): "not installed" when the kernel
    never had it (the solution's own kernel, a test of the probe), or what was removed or put
    back (the builtin `__import__` the hook wraps, a method of Keras or TensorFlow it wrapped).
    Found through the builtin `__import__` of the probe's own namespace (the interpreter's,
    checked against the grader's anchor before the probe runs), read without calling anything
    of the notebook's."""
    hook = __import__
    where = __file__.rpartition("/")[0] + "/fresh.py"
    code = getattr(hook, "__code__", None) if type(hook) is FUNCTION else None
    if code is None:
        return None, "not installed"
    if code.co_name != "grader_import" or code.co_filename != where:
        return None, "the builtin `__import__` is not the grader's"
    state = hook.__globals__.get("STATE")
    if type(state) is not dict or type(state.get("patched")) is not dict:
        return None, "the grader's record is not there"
    modules = state["sys"].modules
    for module, cls_name, method, _ in hook.__globals__["_TARGETS"]:
        entry = state["patched"].get(f"{cls_name}.{method}")
        if entry is None and module not in modules:
            continue  # never imported: nothing of it stepped
        cls = getattr(modules.get(module), cls_name, None)
        own = type.__dict__["__dict__"].__get__(cls) if isinstance(cls, type) else {}
        if entry is None or own.get(method) is not entry[1]:
            return None, f"`{cls_name}.{method}` is not the grader's wrapper"
    return state, ""


def check_continuity() -> None:
    """Compare, now, what each started optimizer trains with its latest step's copy (the hook's
    `fresh.check_continuity`, found as `start_state` finds the record; call it only when that
    says the hook is in place): a change after the last step is recorded as one between steps."""
    __import__.__globals__["check_continuity"]("the probe")


def start_records(state: dict) -> tuple[dict, dict]:
    """The grader's record (`fresh.STATE`) as facts and arrays, taken first, before any object
    of the notebook's is read: ({"start_records": [{"variables": ids, "steps", "how", "call", "id",
    "inner", "optimizer": its class's name}, ...] in the order of the first steps,
    "start_unmeasured": why an optimizer was not read, "start_errors"}, {"r<k>b<i>": the copy of
    record k's i-th variable before its first step, "r<k>a<i>": after it}). The records are tuples
    of frozen copies (bytes): nothing here runs the notebook's code."""
    import numpy as np

    records, arrays = [], {}
    for number, (key, record) in enumerate(tuple(state["started"].items())):
        optimizer, variables, before, after, steps, how, call, inner = record
        for index, pair in enumerate(zip(before, after)):
            for when, (data, dtype, shape) in zip("ba", pair):
                array = np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape)
                arrays[f"r{number}{when}{index}"] = array
        records.append(
            {
                "variables": [id(v) for v in variables],
                "steps": int(steps),
                "how": str(how),
                "call": int(call),
                "id": int(key),
                "inner": int(inner),
                "optimizer": CLASS_NAME.__get__(type(optimizer)),  # no code of the notebook's
            }
        )
    unmeasured = [str(why) for _, why in tuple(state.get("unmeasured", {}).values())]
    errors = [str(e) for e in tuple(state.get("errors") or ())]
    return {
        "start_records": records,
        "start_unmeasured": unmeasured[:20],
        "start_errors": errors[:20],
    }, arrays


def start_weights(model: Any, number: int, arrays: dict) -> dict:
    """What the check process needs to measure `model`'s starts (`checks.measure_starts`): the ids
    of its weights in `model.weights`' order (its saved file's, whose fingerprint the check
    compares), the ids of its trainable variables, their names, and `number`, under which the
    values of its other weights (not trained: taken as they are now) go into `arrays`
    ("m<number>w<j>")."""
    import inspect

    import keras
    import numpy as np

    own = inspect.getattr_static(keras.layers.Layer, "trainable_variables")
    if inspect.getattr_static(type(model), "trainable_variables", None) is not own:
        return {"start_error": "its class replaces Keras's `trainable_variables`"}
    weights = list(model.weights)
    trainable = {id(v) for v in model.trainable_variables}
    for j, variable in enumerate(weights):
        if id(variable) not in trainable:
            arrays[f"m{number}w{j}"] = np.asarray(variable.numpy())
    return {
        "start_weights": {
            "number": number,
            "ids": [id(v) for v in weights],
            "trainable": [id(v) for v in weights if id(v) in trainable],
            "names": [str(getattr(v, "path", "?"))[:100] for v in weights],
        }
    }


def graded_only(arrays: dict, records: list[dict], graded: set) -> dict:
    """`arrays` without the copies of the records that train none of the `graded` variables (a
    scratch model's optimizer): only the graded models' starts are written and measured.

    >>> records = [{"variables": [7]}, {"variables": [8]}]
    >>> graded_only({"r0b0": 1, "r1b0": 2, "m1w0": 3}, records, {8})
    {'r1b0': 2, 'm1w0': 3}
    """
    kept = {k for k, record in enumerate(records) if graded & set(record["variables"])}

    def wanted(key: str) -> bool:  # "r<k>b<i>", "r<k>a<i>": record k's; other arrays are kept
        found = re.fullmatch(r"r(\d+)[ab]\d+", key)
        return found is None or int(found.group(1)) in kept

    return {key: value for key, value in arrays.items() if wanted(key)}


def start_export(arrays: dict, folder: str) -> dict:
    """Write `arrays` into `folder`/`START_FILE`; {"name", "sha256", "bytes"}, or {"error": why}.
    The check process compares the file it reads with this SHA-256: a file changed after the
    probe wrote it (by a thread the notebook left running) is refused."""
    import io

    import numpy as np

    try:
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        data = buffer.getvalue()
        with open(os.path.join(folder, START_FILE), "wb") as handle:
            handle.write(data)
    except Exception as exc:  # noqa: BLE001 - the check says the starts cannot be measured
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return {"name": START_FILE, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def changes(wanted: set, state: dict) -> list[dict]:
    """The changes the grader's hook found (`fresh._check`) to the variables with ids in `wanted`
    (a model's trainable variables) between two steps of the optimizer training them, outside
    those steps: [{"optimizer": its class, "steps": its step count then, "call": the grader's
    count of eager calls, "largest": the largest absolute change, "where": before what}]."""
    found = []
    for change in list(state.get("changed") or []):
        if not wanted & set(change.get("variables") or ()):
            continue
        found.append(
            {
                "optimizer": ", ".join(map(str, change.get("names") or [])) or "?",
                "steps": [int(n) for n in change.get("steps") or []],
                "call": int(change.get("call", 0)),
                "largest": float(change.get("largest", 0.0)),
                "where": str(change.get("where", "")),
            }
        )
    return found


def collect(
    namespace: dict,
    models: list[str],
    datasets: tuple[str, ...] = (),
    loss: tuple[str, str, str] | None = None,
) -> dict:
    """Facts about the models and input pipelines in a kernel's memory (run by the HIDDEN PROBE
    cell, in the student's kernel); loss: (loss function, strategy, global batch) names for
    `loss_ratios`, whose answer (or error) goes under "loss".

    TensorFlow is not imported here: a notebook that never imported it holds no mirrored
    variable, and importing it only to say so would cost every such kernel seconds of start-up.
    """
    tf = sys.modules.get("tensorflow")
    facts: dict = {"models": {}, "datasets": {}}
    state, why = start_state()
    arrays: dict = {}  # the grader's copies of each start, written for the check process
    if why:
        facts["start_hook"] = why
    else:
        try:
            check_continuity()
            found, arrays = start_records(state)  # first: before any object of the notebook's
            facts.update(found)
            # the changes found, copied: no frame of the probe holds the record from here on
            changed = [{**c, "variables": list(c["variables"])} for c in state["changed"]]
            state = {"changed": changed}
        except Exception as exc:  # noqa: BLE001 - the hook is not whole: read as tampering
            facts["start_hook"] = f"the grader's record cannot be read: {type(exc).__name__}"
            state = None
    for name in datasets:
        dataset = namespace.get(name)
        try:
            facts["datasets"][name] = pipeline_facts(dataset)
        except Exception as exc:  # noqa: BLE001 - anything the student's pipeline raises
            facts["datasets"][name] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    for name in models:
        model = namespace.get(name)
        if not hasattr(model, "weights"):
            facts["models"][name] = None
            continue
        if not keras_weights(model):
            facts["models"][name] = {"error": "its class replaces Keras's `weights`"}
            continue
        values = [getattr(v, "value", v) for v in model.weights]
        mirrored = [
            v for v in values if tf is not None and isinstance(v, tf.distribute.DistributedValues)
        ]
        facts["models"][name] = {
            "variables": len(values),
            "distributed_variables": len(mirrored),
            "replicas": min((len(v.values) for v in mirrored), default=1),
            "fingerprint": fingerprint(model),
        }
        if state is not None:
            fact = facts["models"][name]
            try:
                fact.update(start_weights(model, len(facts["models"]), arrays))
                # every weight of it: one frozen before the probe was trained all the same
                wanted = set(fact.get("start_weights", {}).get("ids", ()))
                fact["changed"] = changes(wanted, state)
            except Exception as exc:  # noqa: BLE001 - the check says the start is unmeasured
                fact["start_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        try:
            steps = optimizer_steps(model)
        except ValueError as exc:  # the check says why the count is missing
            facts["models"][name]["optimizer_unread"] = str(exc)[:200]
        else:
            if steps is not None:
                facts["models"][name]["optimizer_steps"] = steps
                facts["models"][name]["optimizer_replicas"] = optimizer_replicas(model)
                facts["models"][name]["fit_epochs"] = list(fit_epochs(model))
                facts["models"][name]["fit_steps"] = fit_steps(model)
                try:
                    zero = moments_zero(model)
                except Exception:  # noqa: BLE001 - the fact only takes a point away
                    zero = None
                if zero is not None:
                    facts["models"][name]["moments_zero"] = zero
    measured = [f for f in facts["models"].values() if isinstance(f, dict) and "start_weights" in f]
    if state is not None and measured:  # into the kernel's artifacts folder, copied from there
        folder = os.environ.get("COURSE_ARTIFACTS") or "."
        graded = {v for f in measured for v in f["start_weights"]["ids"]}  # frozen ones too
        arrays = graded_only(arrays, facts.get("start_records") or [], graded)
        facts["start_file"] = start_export(arrays, folder)
    if loss is not None:
        try:
            facts["loss"] = {"ratios": loss_ratios(namespace, *loss)}
        except Exception as exc:  # noqa: BLE001 - anything the student's function raises
            facts["loss"] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        batch = namespace.get(loss[2])
        if type(batch) is int and batch > 0:  # the global batch the notebook trained with
            facts["global_batch"] = batch
    return facts


def loss_ratios(namespace: dict, loss: str, strategy: str, global_batch: str) -> list[float]:
    """What the notebook's loss function `loss` gives, summed over the replicas of its
    `strategy`, on a full global batch and on a short one (half of it, plus one) of all-zero
    logits, divided by their true mean loss (log 10): [1.0, 1.0] when each replica's loss is
    scaled by the examples of the whole step."""
    import math

    function, distribute = namespace[loss], namespace[strategy]  # KeyError: not defined
    size = int(namespace[global_batch])

    from course_utils.quiet import import_tensorflow

    tf = import_tensorflow()

    def replica_loss(labels):
        return function(labels, tf.zeros((tf.shape(labels)[0], 10)))

    @tf.function
    def summed(batch):
        return distribute.reduce("SUM", distribute.run(replica_loss, args=(batch,)), axis=None)

    ratios = []
    for count in (size, size // 2 + 1):
        labels = tf.data.Dataset.from_tensor_slices(tf.zeros(count, tf.int64)).batch(count)
        batch = next(iter(distribute.experimental_distribute_dataset(labels)))
        ratios.append(float(summed(batch)) / math.log(10))
    return ratios
