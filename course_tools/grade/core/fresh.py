"""Where each model's training started: the grader's record, taken in the student's kernel at the
moment its optimizer makes its first step, and the rule that says whether it started fresh.

Why run-time evidence. The reading (`reading.Code.hand_steps`) finds a load of weights into a
graded model by enumerating what holds the model and what loads into it; a library call it does
not know (`ndarray.fill`, `keras.callbacks.BackupAndRestore`, raw ops, `operator.methodcaller`)
escapes it, and for `custom_model` it reads nothing at all. Enumerating more forms cannot close
that. What a load changes can be measured instead: a freshly made model scores about chance on
the training examples (loss ln 10 = 2.30, accuracy about a tenth); a model given trained weights
is far better from its first step. So the grader keeps, for every Keras optimizer, the weights it
trains as they were just before its first step, and just after it, and the probe measures them.

Why at the optimizer, not in `fit`'s callbacks: one mechanism for the three graded models. `fit`
(fit_model, single_model) and the custom loop (custom_model, whose steps are the notebook's own
`tf.function`) both step a Keras optimizer; the first step is where training starts, whichever
code drives it. `fit`'s first-batch loss in its callbacks' logs (keras/src/backend/tensorflow/
trainer.py computes it in `train_step` with the weights the step starts from) would serve `fit`
only, and the custom loop records no per-step loss the probe could read (the exercise asks for
the epochs' seconds and steps; its printed losses are the notebook's text, not evidence). Why not
the History or the per-epoch checkpoints: the first epoch's mean loss is over a whole epoch of
steps (in the full profile a fresh model ends its first epoch near a donor's numbers), and
nothing saved before the first step exists.

How (`install`, run by the grader's first expression before the notebook's first cell,
`submission.run`): the builtin `__import__` is wrapped so that, once Keras and TensorFlow are
imported (by any route: every module's own `import` statements go through it), three methods are
wrapped in place: Keras's `BaseOptimizer.build` (which optimizers exist, and which variables
each trains), `BaseOptimizer.apply` called eagerly, and TensorFlow's `Function.__call__` (the
`tf.function` that makes `fit`'s steps and the custom loop's). Around each eager call while some
built optimizer has not stepped yet, the weights it trains are copied; when the call moves the
optimizer's step count, the copies before and after are kept as its start (`STATE["started"]`).
An optimizer built inside a trace (an unbuilt Adam given its variables by its first
`apply_gradients`) is copied at its `build`, read outside the trace (`tf.init_scope`): nothing
of that call has run yet. Weights loaded at `on_train_begin` (`BackupAndRestore`), before `fit`,
or before the custom loop are the weights of the first step's copy; weights given inside the
first step are those after it.

Where the starts are measured: not in the kernel. The probe (`probe.start_records`) finds the record
through the interpreter's `__import__` (the builtins are compared with the grader's anchor,
`submission.ANCHOR`: replaced, they refuse the probe), takes its copies first, before it reads any
object of the notebook's, and writes them with the ids of each model's weights
(`probe.start_weights`) into `probe.START_FILE` in the kernel's artifacts folder, its SHA-256 in the
facts; the grader copies that file beside the artifacts (`one_submission.take_starts`), and the
check process (`checker.measured`) reads it (the same SHA-256, else refused: a thread the notebook
left running could have rewritten it), loads the model's saved file (the one whose fingerprint
`checks.own_model` ties to the kernel's model) and measures each start on `probe.START_EXAMPLES`
(512) training examples it draws at random (`checker._start_examples`: no notebook can know them),
under the grader's settings (`checks.measure_starts`): nothing the notebook sets (`os.environ`'s
COURSE_DATA or TFDS_DATA_DIR, its pipeline) reaches those examples, and no score the kernel sends is
read. A model's start is the union of the records covering its trainable variables (each variable
from the earliest first step that trained it: two optimizers over two parts of a model are each a
record); a trainable variable no record covers (a layer frozen during `fit` and unfrozen after, an
optimizer the hook does not read) fails the model's points, named, and so does a record whose first
step came in a later call (`RECORD`'s `call`) than another's over the same variables
(`checks.later_optimizers`): a second optimizer's steps, given gradients of any values, set weights
to anything (red team 32a: a new SGD(1.0), a step of zeros, then a step of the weights less a
donor's). A hook no longer in place is tampering (`checker._facts`); putting the methods back takes
an assignment to a Keras or TensorFlow class (`reading.Code.module_patches`, tampering).

Out of the notebook's reach: the hook calls nothing of the notebook's while it holds the record.
Every object it reads an attribute of is first checked to be of a library class (`_library`:
every class of its MRO and its metaclass from Keras, TensorFlow or Python, by the `__module__` of
the class's own dict, and every function, property and method in those dicts loaded from those
libraries' folders, read with `type`'s own descriptors), and every instance dict it looks up in
to have only exact `str` keys (`_attrs`: a key of the notebook's could run its `__eq__`): a
notebook's optimizer subclass (its own `iterations`, `use_ema`, `__getattribute__`,
`__getattr__`, a descriptor over a name read) is never read, and counts as unmeasured
(`STATE["unmeasured"]`, named in the model's message when no other record covers its
variables). The step count is read from the counter variable itself (`_iterations`, the inner
optimizer's under a `LossScaleOptimizer`), the variables a step is given are taken only as an
exact list or tuple of Keras variables. The record is made of tuples of frozen copies (bytes, a
dtype, a shape), and while the original method runs (where the notebook's code runs: a traced
step's body, a subclass's method) the wrapper's frame holds only such tuples, counts and the
notebook's own objects: a frame walk from there (`tb_frame`, `f_back`,
`inspect.getargvalues(frame).locals`, `sys._current_frames()` from a thread) finds nothing it can
change in place, and no hook function binds one of `STATE`'s dicts to a local. The garbage
collector is paused while the hook keeps its record (`_Paused`: no `__del__` or weak reference's
callback of the notebook's runs inside it). Still reachable, by names the reading flags as
tampering: `STATE` through a function's `__globals__` or a frame's `f_globals`, and through
`gc.get_objects`/`gc.get_referrers`, `__closure__`, `cell_contents`, `inspect.getclosurevars`
(`reading.GRADER_STATE_NAMES`, `MEMORY_NAMES`, `FRAME_NAMESPACES`); and the probe itself, which
runs after the notebook and reads its models' attributes (a class of the notebook's there runs
after the record's copies are taken, but could still rewrite the facts or the file before they
are sent).

Continuity: the start alone misses weights given after the first step (the custom loop's own first
step, then `set_weights`; a callback loading at `on_train_batch_end(0)`; a load after the last
step). So after each eager call (or eager `apply`) that moves a started optimizer's step count, the
hook keeps a numpy copy of each variable it trains (`STATE["last"]`, keyed by variable, so two
optimizers over the same weights, a new one after `compile` again, share one copy), and before every
later eager call of a `tf.function` and every eager `apply`, and once more when the probe runs
(`check_continuity`: a load after the last step), compares them (`np.array_equal`, exact). A
difference is a change from outside the optimizer's steps: `STATE["changed"]` keeps which optimizers
train it, their step counts, the grader's count of eager calls and the largest absolute change, and
the copy is refreshed so it counts once; the probe reports those touching a model's variables as its
`changed`, and the check fails the points of its start. Evaluate, predict, saves (`ModelCheckpoint`,
`BackupAndRestore`'s, a CheckpointManager's) change nothing; a second optimizer never stepped is
never compared; a restore into a new model (question 6) touches other variables;
`steps_per_execution` moves the count once a call, compared between calls. `use_ema`: its overwrites
inside a step are the step's; the averages put in place after `fit` (`finalize_variable_values`) and
`SwapEMAWeights`'s swaps happen between steps, so the averages are copied too and a weight that now
holds what it or its average held after the latest step (`EMA_TOLERANCE`: the swap adds and
subtracts) is not a change; such an accepted value leaves the copy as the step left it, so that
nudges each within the tolerance cannot add up (red team 34a walked a model onto a donor's weights
in 3,723 of them). Nor is a weight that holds exactly what it held after one of its own
earlier steps (`_returned`: a digest of each value a step left is kept, `STATE["seen"]`): the
model's own earlier weights put back, as `EarlyStopping(restore_best_weights=True)` does at the end
of `fit`, or its own checkpoint loaded. A variable that cannot be read counts as changed
(default-deny). Values are read from the TensorFlow variable (a mirrored one's primary copy, as the
start's copies) with one read op (`_read`). Cost, measured on the solution's model (315,722 weights,
8 variables) at 2 devices on a loaded machine (load average 10 to 16 on 2 cores): a compare about 3
ms, a refresh 4 to 9 ms, a reading of the started optimizers' step counts under 0.5 ms, against a
custom-loop step of 90 to 110 ms; interleaving 40 steps with the continuity on and off gave 112.4 vs
110.1 ms and 106.0 vs 90.8 ms a step in two runs (the noise of that machine). Every started
optimizer's weights are compared before every call, so the later runs pay more: `single_model`'s
steps, after `fit_model`'s and `custom_model`'s, compare three models (three times the compare
above), which slows the one-device baseline's timed epochs a little more than the distributed ones.
On a GPU each read also waits for the step to finish. Reading only library classes (`_library`,
`_attrs`) adds about 0.7 ms a call with three started optimizers over that model (200 trivial
`tf.function` calls: 0.28 to 0.34 s before, 0.43 to 0.45 s after; no hook 0.04 s); the compare is
bit for bit in place (`_equal`: a copy to bytes first tripled it).

What it does not catch (said in course_tools/README.md): trained features with a last layer reset to
chance (the start scores chance, then trains fast), a first call of several steps judged by its
start only, weights changed inside a later step call (a `tf.function` that steps and also assigns:
continuity compares between calls, and only the first call's result is scored), variables no
optimizer trains, a mirrored variable's other replicas, a later step of the model's own optimizer
given gradients the notebook chose (the custom loop's step, a model's own `train_step`), a step of
the model's own optimizer steered by state set between its steps (its moments, its learning rate:
neither is compared), the record reached by a route the reading does not name (it is reachable from
the wrappers' globals), and anything in a kernel the notebook takes over.

Example (check side):

    from course_tools.grade.core import fresh
    fresh.fresh_start({"loss": 2.31, "accuracy": 0.09})   # True
    fresh.fresh_start({"loss": 0.18, "accuracy": 0.95})   # False
"""

from __future__ import annotations

import types

#: The name of the wrapper of the builtin `__import__`: the probe finds the record through it.
HOOK_NAME = "grader_import"
#: The lowest mean loss (cross-entropy, natural log) a model that starts fresh may score on
#: `probe.START_EXAMPLES` (512) training examples, before and after its first step (measured on
#: the first 512; the check process now draws them at random from the same distribution). A fresh
#: make_model() scores about ln 10 = 2.303. Measured with this hook and the probe (quick profile,
#: synthetic data, the solution's make_model and Adam): 76 fresh starts (20 seeds through fit and 5
#: through a custom loop, each at 1, 2 and 8 devices, so first batches of 64, 128 and 512; one
#: unbuilt Adam) scored 2.306 to 2.397 before the first step and 2.264 to 2.462 after it; 45 starts
#: given a donor's weights (5 seeds x set_weights before fit, before a custom loop and
#: BackupAndRestore, at 1, 2 and 8 devices; the donor 3 quick epochs) scored 0.159 to 1.246 before
#: (1.246: the 8-device donor, 12 steps). 1.8 sits 0.46 below the lowest fresh score and 0.55 above
#: the highest given one; an untrained model of another architecture scores near or above chance,
#: not below.
START_LOSS_AT_LEAST = 1.8
#: The highest accuracy a fresh start may have on those examples: a fresh model answers near one
#: class for all (measured 0.064 to 0.172 before its first step, 0.084 to 0.240 after; on SVHN the
#: most frequent digit is 0.19 of the examples); given starts scored 0.848 to 0.932. 0.4 sits 0.16
#: above the highest fresh score and 0.45 below the lowest given one. With the loss floor it also
#: catches trained logits scaled down to a chance-like loss (their accuracy kept), and a weakly
#: trained donor, whose accuracy climbs before its loss falls (the 8-device donor: loss 1.25,
#: accuracy 0.85).
START_ACCURACY_AT_MOST = 0.4

#: The grader's record in the kernel: which optimizers were built ({id: optimizer}), the copies
#: taken at a build inside a trace ({id: (steps, variables, copies)}), and each optimizer's start
#: ({id: (optimizer, variables, copies before, copies after, steps, how, call, inner)}, `RECORD`;
#: call: the grader's count of eager calls when it was made, so the check can order them; inner:
#: the id of the optimizer a `LossScaleOptimizer` wraps, else 0); `patched`:
#: the methods wrapped, `errors`: why a wrap or a copy failed (shown by the probe), `unmeasured`:
#: the optimizers the hook does not read ({id: (optimizer, why)}: a class not Keras's own,
#: `_library`). Continuity: `last` ({id(variable): (variable, copy, ids of the optimizers
#: training it)}, each variable a started optimizer trains, as its latest step left it), `ema`
#: ({id(variable): its moving average's variable} and back, for `use_ema`), `accepted`
#: ({id(variable): the value a look accepted since its latest step, frozen}: the next look takes
#: that same value as it is, without judging it again), `changed` (the
#: differences found, `_check`), `calls` (the eager calls and eager steps seen). Every copy is
#: frozen (`_frozen`: the bytes, the dtype, the shape), every record and entry a tuple: nothing a
#: frame of the hook holds can be changed in place (see "Out of the notebook's reach" above).
STATE: dict = {
    "built": {},
    "provisional": {},
    "started": {},
    "patched": {},
    "errors": [],
    "unmeasured": {},
    "classes": {},
    "last": {},
    "ema": {},
    "accepted": {},
    "seen": {},
    "changed": [],
    "calls": 0,
}
#: The fields of a start in `STATE["started"]`, in order.
RECORD = ("optimizer", "variables", "before", "after", "steps", "how", "call", "inner")
#: At most this many differences are kept (`STATE["changed"]`), the first ones; `STATE["calls"]`
#: and the count in `STATE["changes"]` go on.
CHANGES_KEPT = 20
#: A model variable that differs from its latest step's copy is not a change from outside when it
#: now holds (within this tolerance, relative and absolute) what it or its moving average held
#: after that step: Keras's `use_ema` overwrites the weights with their averages after `fit`
#: (`finalize_variable_values`), and `SwapEMAWeights` swaps the two by additions and subtractions
#: (so not bit for bit: three float32 roundings, each at most an ulp of |weight| + |average|,
#: about 1.2e-7 of it). A value accepted leaves the step's copy as it was (`_check`), so between
#: two steps a model can move at most this far unseen: 1e-5 once let 3,723 nudges walk a model
#: onto a donor's weights (red team 34a), and one nudge per step still adds up over a long run
#: (red team 35b), hence the smallest tolerance the swap's rounding allows for weights up to 4.
EMA_TOLERANCE = 1e-6
#: At most this many digests (16 bytes) of a variable's values after its steps are kept
#: (`STATE["seen"]`, `_returned`): a few times the full profile's steps of a graded model.
SEEN_KEPT = 50_000


def fresh_start(start: dict) -> bool:
    """Whether a start (`{"loss", "accuracy"}`, measured by the probe) looks like a fresh model's:
    loss at least `START_LOSS_AT_LEAST` and accuracy at most `START_ACCURACY_AT_MOST`.

    >>> fresh_start({"loss": 2.30, "accuracy": 0.1})
    True
    >>> fresh_start({"loss": 0.2, "accuracy": 0.95}), fresh_start({"loss": 2.29, "accuracy": 0.9})
    (False, False)
    """
    loss, accuracy = start.get("loss"), start.get("accuracy")
    numbers = all(
        isinstance(v, float | int) and not isinstance(v, bool) and v == v for v in (loss, accuracy)
    )
    return numbers and loss >= START_LOSS_AT_LEAST and accuracy <= START_ACCURACY_AT_MOST


# --- run in the student's kernel, before its first cell (`install`) ---------------------------


def install() -> None:
    """Wrap the builtin `__import__` (`grader_import`), which wraps Keras's and TensorFlow's
    methods once they are imported (`_patch`). Run once, before the notebook's code."""
    import builtins
    import gc
    import hashlib
    import sys

    STATE["sys"], STATE["gc"] = sys, gc
    STATE["blake2b"] = hashlib.blake2b  # kept before the notebook's code could replace it
    STATE["import"] = builtins.__import__
    builtins.__import__ = grader_import
    _patch()


def grader_import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
    """The builtin `__import__`, then `_patch` until Keras's and TensorFlow's methods are
    wrapped."""
    module = STATE["import"](name, globals, locals, fromlist, level)
    if len(STATE["patched"]) < len(_TARGETS):
        _patch()
    return module


#: What is wrapped: (module, class, method, wrapper maker).
_TARGETS = (
    ("keras.src.optimizers.base_optimizer", "BaseOptimizer", "build", "_wrap_build"),
    ("keras.src.optimizers.base_optimizer", "BaseOptimizer", "apply", "_wrap_apply"),
    (
        "tensorflow.python.eager.polymorphic_function.polymorphic_function",
        "Function",
        "__call__",
        "_wrap_call",
    ),
)


def _patch() -> None:
    """Wrap each of `_TARGETS` whose class exists by now (once)."""
    modules = STATE["sys"].modules
    for module_name, class_name, method, maker in _TARGETS:
        key = f"{class_name}.{method}"
        if key in STATE["patched"]:
            continue
        try:
            cls = getattr(modules.get(module_name), class_name, None)
            if not isinstance(cls, type) or method not in cls.__dict__:
                continue
            original = cls.__dict__[method]
            wrapper = globals()[maker](original)
            setattr(cls, method, wrapper)
            STATE["patched"][key] = (cls, wrapper)
        except Exception as exc:  # noqa: BLE001 - never break the notebook's imports
            STATE["errors"].append(f"{key}: {type(exc).__name__}: {exc}"[:200])
            STATE["patched"][key] = None


def _tf():
    return STATE["sys"].modules.get("tensorflow")


def _eager() -> bool:
    tf = _tf()
    return tf is not None and tf.executing_eagerly()


# --- reading without running the notebook's code ------------------------------------------------

#: The modules whose classes the hook reads attributes of (`_library`), and the metaclasses'.
LIBRARY_MODULES = ("keras.", "tensorflow.", "builtins", "abc", "_abc", "typing", "collections.abc")
#: The interpreter's own callables and descriptors (written in C), as `probe.C_LEVEL`.
_C_LEVEL = (
    types.WrapperDescriptorType,  # object.__init__: a slot wrapper
    types.MethodDescriptorType,  # str.join
    types.ClassMethodDescriptorType,  # dict.__dict__["fromkeys"]
    types.GetSetDescriptorType,  # type.__dict__["__dict__"]
    types.MemberDescriptorType,  # complex.real
    types.BuiltinFunctionType,  # len
)
_FUNCTION = types.FunctionType
_CLASS_DICT = type.__dict__["__dict__"]
_CLASS_MRO = type.__dict__["__mro__"]
_CLASS_NAME = type.__dict__["__name__"]
_CLASS_FLAGS = type.__dict__["__flags__"]
#: `Py_TPFLAGS_HEAPTYPE`: a class made at run time (by a `class` statement), not written in C.
_HEAP_TYPE = 1 << 9


def _folders() -> tuple:
    """The folders the code of a library class may come from: Keras's, TensorFlow's and Python's
    own (`abc`'s folder, and the modules frozen into the interpreter), and this file (the
    wrappers it puts in Keras's and TensorFlow's classes)."""
    if "folders" not in STATE:
        modules = STATE["sys"].modules
        found = [modules[name].__file__ for name in ("keras", "tensorflow", "abc")]
        folders = (f.rpartition("/")[0] + "/" for f in found if f)
        STATE["folders"] = (*folders, "<frozen ", _patch.__code__.co_filename)
    return STATE["folders"]


def _library_class(cls) -> bool:
    """Whether every class in `cls`'s MRO, and its metaclass, is Keras's, TensorFlow's or
    Python's own (`_library_type`), and every function, property or method in the own dicts of
    those written in Python was loaded from those libraries' folders (`_folders`), every other
    value in them of a library class too: then reading an attribute of an instance runs only
    library code. Read with `type`'s own descriptors: nothing of a notebook's class or metaclass
    runs."""
    folders = _folders()
    for klass in _CLASS_MRO.__get__(cls):
        if not _library_type(klass) or not _library_type(type(klass)):
            return False
        if not _CLASS_FLAGS.__get__(klass) & _HEAP_TYPE:
            continue  # written in C: the interpreter's or an extension's
        for value in _CLASS_DICT.__get__(klass).values():
            kind = type(value)
            if kind is staticmethod or kind is classmethod:
                value, kind = value.__func__, type(value.__func__)
            if kind is property:
                functions = (value.fget, value.fset, value.fdel)
            elif kind is _FUNCTION:
                functions = (value,)
            elif kind is type or any(kind is c for c in _C_LEVEL):
                continue  # a class (checked when an instance is read), the interpreter's own
            elif _library(value):
                continue  # data, or a descriptor of a library class
            else:
                return False
            for function in functions:
                if function is None or any(type(function) is c for c in _C_LEVEL):
                    continue
                if type(function) is not _FUNCTION:
                    return False
                if not function.__code__.co_filename.startswith(folders):
                    return False
    return True


def _library_type(klass) -> bool:
    """Whether `klass` is written in C (not a heap type), or its own `__module__` is one of
    `LIBRARY_MODULES`; False for a class dict with a key not exactly a `str` (its `__eq__`
    would run in a lookup)."""
    if not _CLASS_FLAGS.__get__(klass) & _HEAP_TYPE:
        return True
    name = None
    for key, value in _CLASS_DICT.__get__(klass).items():
        if type(key) is not str:
            return False
        if key == "__module__":
            name = value
    return type(name) is str and (name in LIBRARY_MODULES or name.startswith(LIBRARY_MODULES))


def _library(value) -> bool:
    """Whether `value`'s class is a library class (`_library_class`), decided once a class
    (`STATE["classes"]`, keyed by the class's id, the class kept beside its answer). While a
    class is decided it counts as one (a class whose attributes hold an instance of itself)."""
    cls = type(value)
    entry = STATE["classes"].get(id(cls))
    if entry is None or entry[0] is not cls:
        STATE["classes"][id(cls)] = (cls, True)
        try:
            entry = (cls, _library_class(cls))
        finally:
            STATE["classes"][id(cls)] = entry = (
                entry if entry is not None and entry[0] is cls else (cls, False)
            )
    return entry[1]


class Unreadable(Exception):  # noqa: N818 - the hook's own reason, shown by the probe
    """An object the hook does not read: not of a library class (`_library`)."""


def _class_name(value) -> str:
    return _CLASS_NAME.__get__(type(value))


def _attrs(value) -> dict:
    """The instance dict of `value`, an object of a library class (`_library`), once every key
    of it is exactly a `str`: a key of the notebook's own class could run its `__eq__` in a
    lookup. Else `Unreadable`."""
    attributes = value.__dict__
    if type(attributes) is not dict:
        raise Unreadable(f"a {_class_name(value)} whose attributes are not a dict")
    for key in attributes:
        if type(key) is not str:
            raise Unreadable(f"a {_class_name(value)} with an attribute named by an object")
    return attributes


def _optimizer(optimizer):
    """`optimizer` when its class is Keras's own (`_library`), after the inner optimizer of
    Keras's `LossScaleOptimizer` is checked the same way; else `Unreadable` saying why."""
    if not _library(optimizer):
        raise Unreadable(
            f"an optimizer of class {_class_name(optimizer)}, not one of Keras's own (a class "
            "of the notebook's, which could redefine `iterations`, `use_ema` or how its "
            "attributes are read)"
        )
    inner = _attrs(optimizer).get("inner_optimizer")
    if inner is not None:
        _optimizer(inner)
    return optimizer


def _variables(value, what: str) -> tuple:
    """`value` as a tuple of variables when it is a list or tuple (exactly), or a list of a
    library class (TensorFlow's `ListWrapper`, which Keras's tracking makes of a list), of
    Keras's own variables; else `Unreadable`."""
    if type(value) is not list and type(value) is not tuple and not _library(value):
        raise Unreadable(f"{what} is a {_class_name(value)}, not a list of Keras variables")
    for variable in value:
        if not _library(variable):
            raise Unreadable(f"{what} holds a {_class_name(variable)}, not a Keras variable")
    return tuple(value)


def _steps(optimizer) -> int:
    """The optimizer's step count, read from its counter variable (`_iterations`, through the
    inner optimizer of a `LossScaleOptimizer`), divided by `gradient_accumulation_steps` as
    Keras's `iterations` does."""
    attributes = _attrs(_optimizer(optimizer))
    inner = attributes.get("inner_optimizer")
    if inner is not None:
        return _steps(inner)
    counter = attributes.get("_iterations")
    if not _library(counter):
        raise Unreadable(f"the step count is a {_class_name(counter)}, not a Keras variable")
    steps = int(_read(counter))
    every = attributes.get("gradient_accumulation_steps")
    return steps // every if type(every) is int and every > 0 else steps


def _read(variable):
    """The value of a Keras variable as a numpy array, read from its TensorFlow variable, the
    primary copy of a mirrored one (one read op: Keras's `numpy()` of a mirrored variable takes
    several and was measured 4 to 6 times slower). Each object is checked to be of a library
    class before any attribute of it is read (`Unreadable`)."""
    if not _library(variable):
        raise Unreadable(f"a {_class_name(variable)}, not a Keras variable")
    inner = _attrs(variable).get("_value", variable)
    if not _library(inner):
        raise Unreadable(f"a variable holding a {_class_name(inner)}")
    _attrs(inner)
    primary = getattr(inner, "_primary", inner)
    if not _library(primary):
        raise Unreadable(f"a mirrored variable holding a {_class_name(primary)}")
    _attrs(primary)
    read = getattr(primary, "_read_variable_op", None)
    return (read() if read is not None else primary).numpy()


def _frozen(variable) -> tuple:
    """A copy of `variable`'s value that cannot be changed in place: (its bytes, its dtype, its
    shape)."""
    return _freeze(_read(variable))


def _freeze(array) -> tuple:
    return (array.tobytes(), array.dtype.str, tuple(array.shape))


def thawed(frozen: tuple):
    """A frozen copy (`_frozen`) as a numpy array (read-only: a view of the bytes)."""
    np = STATE["sys"].modules["numpy"] if "sys" in STATE else __import__("numpy")
    data, dtype, shape = frozen
    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape)


def _trained(optimizer) -> tuple:
    variables = _attrs(_optimizer(optimizer)).get("_trainable_variables")
    return () if variables is None else _variables(variables, "the variables it trains")


def _unmeasured(optimizer, why: str) -> None:
    """Note an optimizer the hook does not read (`STATE["unmeasured"]`), once."""
    key = id(optimizer)
    if key not in STATE["unmeasured"]:
        STATE["unmeasured"][key] = (optimizer, why[:300])


def _note_error(where: str, exc: Exception) -> None:
    if type(exc) is Unreadable:
        return  # said once for its optimizer (`_unmeasured`)
    if len(STATE["errors"]) < 20:
        STATE["errors"].append(f"{where}: {type(exc).__name__}: {exc}"[:200])


class _Paused:
    """The garbage collector off while the hook reads and keeps its record: a collection there
    would run a notebook object's `__del__` or a weak reference's callback inside the hook's
    frames. Its state put back after."""

    def __enter__(self):
        gc = STATE["gc"]
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            STATE["gc"].enable()


# --- the start: each optimizer's first step ----------------------------------------------------


def _pending() -> tuple:
    """The built optimizers not started yet, but those the hook does not read."""
    return tuple(
        o
        for key, o in tuple(STATE["built"].items())
        if key not in STATE["started"] and key not in STATE["unmeasured"]
    )


def _before(optimizers: tuple) -> tuple:
    """((id, steps, variables, copies), ...) for each optimizer whose state can be read; one
    that cannot is noted (`_unmeasured`)."""
    found = []
    for optimizer in optimizers:
        try:
            variables = _trained(optimizer)
            found.append(
                (id(optimizer), _steps(optimizer), variables, tuple(map(_frozen, variables)))
            )
        except Unreadable as exc:
            _unmeasured(optimizer, str(exc))
        except Exception as exc:  # noqa: BLE001 - the start is then missing, which the check says
            _note_error("before a step", exc)
    return tuple(found)


def _after(before: tuple, how: str) -> None:
    """Keep as its start the copies of each optimizer whose step count the call moved; an
    optimizer built during the call (not in `before`) starts from its copy at `build`."""
    taken = {key: (steps, variables, copies) for key, steps, variables, copies in before}
    for key, optimizer in tuple(STATE["built"].items()):
        if key in STATE["started"] or key in STATE["unmeasured"]:
            continue
        try:
            if key in taken:
                (steps, variables, copies), kind = taken[key], how
            elif key in STATE["provisional"]:
                (steps, variables, copies), kind = STATE["provisional"][key], "build"
            else:
                continue
            moved = _steps(optimizer) - steps
            if moved:
                after = tuple(map(_frozen, variables))
                inner = _attrs(optimizer).get("inner_optimizer")  # a LossScaleOptimizer's
                STATE["started"][key] = (
                    optimizer,
                    variables,
                    copies,
                    after,
                    moved,
                    kind,
                    STATE["calls"],
                    0 if inner is None else id(inner),
                )
                _keep(key, optimizer)
        except Unreadable as exc:
            _unmeasured(optimizer, str(exc))
        except Exception as exc:  # noqa: BLE001
            _note_error("after a step", exc)


# --- continuity: between two steps of an optimizer, nothing else changes what it trains --------


def _tracked(optimizer) -> tuple:
    """((variable, its moving average or None), ...) for what `optimizer` trains."""
    variables = _trained(optimizer)
    attributes = _attrs(_optimizer(optimizer))
    if attributes.get("use_ema") is not True:
        return tuple((v, None) for v in variables)
    averages = attributes.get("_model_variables_moving_average")
    averages = () if averages is None else _variables(averages, "its moving averages")
    if not averages:
        return tuple((v, None) for v in variables)
    return tuple(zip(variables, averages + (None,) * (len(variables) - len(averages))))


def _keep(key: int, optimizer) -> None:
    """Keep copies of what `optimizer` (id `key`) trains, and of its moving averages, as they are
    now: as its latest step left them."""
    for variable, average in _tracked(optimizer):
        pairs = (
            ((variable, None),) if average is None else ((variable, average), (average, variable))
        )
        for one, other in pairs:
            entry = STATE["last"].get(id(one))
            same = entry is not None and entry[0] is one
            owners = entry[2] if same else frozenset()
            copy = _frozen(one)
            STATE["last"][id(one)] = (one, copy, owners | {key})
            STATE["accepted"].pop(id(one), None)  # judged against this step's copy from now
            seen = STATE["seen"].get(id(one)) if same else None
            if seen is None:
                seen = STATE["seen"][id(one)] = set()
            if len(seen) < SEEN_KEPT:
                seen.add(_digest(copy))
            if other is not None:
                STATE["ema"][id(one)] = id(other)


def _moved(counts: tuple) -> None:
    """Refresh the copies of each started optimizer whose step count moved since `counts`
    (((id, steps), ...))."""
    for key, steps in counts:
        try:
            optimizer = STATE["started"][key][0]
            if _steps(optimizer) != steps:
                _keep(key, optimizer)
        except Exception as exc:  # noqa: BLE001
            _note_error("after a step, continuity", exc)


def _counts() -> tuple:
    """((id, steps), ...) of the optimizers already started."""
    counts = []
    for key, record in tuple(STATE["started"].items()):
        try:
            counts.append((key, _steps(record[0])))
        except Exception as exc:  # noqa: BLE001
            _note_error("before a step, continuity", exc)
    return tuple(counts)


def _now(key: int, entry: tuple):
    """(key, the variable's value now, frozen, or None when unreadable) when it differs from its
    copy (`entry`), else None."""
    try:
        value = _read(entry[0])
    except Exception:  # noqa: BLE001 - unreadable: counted as changed (default-deny)
        return (key, None)
    if _equal(value, entry[1]):
        return None
    accepted = STATE["accepted"].get(key)  # judged once against the step's copy: as it was
    return None if accepted is not None and _equal(value, accepted) else (key, _freeze(value))


def _equal(value, frozen: tuple) -> bool:
    """Whether `value` holds exactly the frozen copy's bytes (compared in place: copying the
    value to bytes first tripled the hook's cost a call)."""
    data, dtype, shape = frozen
    if value.dtype.str != dtype or tuple(value.shape) != shape:
        return False
    np = STATE["sys"].modules["numpy"]
    size = value.dtype.itemsize  # bit for bit, as unsigned integers of the same size
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}.get(size, np.uint8)
    now = np.ascontiguousarray(value).reshape(-1).view(bits)
    return bool((now == np.frombuffer(data, dtype=bits)).all())


def _check(where: str) -> None:
    """Compare each variable a started optimizer trains with its copy from that optimizer's latest
    step; a difference (but a moving average put in place, `EMA_TOLERANCE`, or its own earlier
    weights put back) is a change from outside the steps: kept in `STATE["changed"]`
    ({optimizers, their steps, the eager call, the largest absolute change, the variables,
    where}), and its copy refreshed so it counts once; an accepted value leaves the copy as the
    step left it."""
    if not STATE["last"]:
        return
    try:
        now = tuple(
            found
            for found in (_now(key, entry) for key, entry in tuple(STATE["last"].items()))
            if found is not None
        )
        if not now:
            return
        outside = tuple(
            (key, value)
            for key, value in now
            if not _averaged(key, value) and not _returned(key, value)
        )
        if outside:
            STATE["changes"] = STATE.get("changes", 0) + 1
            if len(STATE["changed"]) < CHANGES_KEPT:
                _note_change(outside, where)
        # a change refreshed, so that it counts once; a value accepted (an average put in
        # place, earlier weights put back) is not: each later look compares with what the latest
        # step left again, so nudges each within `EMA_TOLERANCE` cannot add up (red team 34a)
        for key, value in outside:
            if value is not None:
                entry = STATE["last"][key]
                STATE["last"][key] = (entry[0], value, entry[2])
        changed = {key for key, _ in outside}
        for key, value in now:  # each later look takes it as it is, cheaply (`_now`)
            if key not in changed and value is not None:
                STATE["accepted"][key] = value
    except Exception as exc:  # noqa: BLE001 - never break the notebook's step
        _note_error("continuity", exc)


def _digest(frozen: tuple) -> bytes:
    data, dtype, shape = frozen
    digest = STATE["blake2b"](f"{dtype}{shape}".encode(), digest_size=16)
    digest.update(data)  # not joined to the bytes first: a copy of the weights saved
    return digest.digest()


def _returned(key: int, value) -> bool:
    """Whether the variable `key`, now `value` (frozen), holds exactly what it held after one of
    its own earlier steps (`STATE["seen"]`): the model's own earlier weights put back
    (`EarlyStopping(restore_best_weights=True)`, its own checkpoint loaded), not a change from
    outside its training."""
    return value is not None and _digest(value) in STATE["seen"].get(key, ())


def _averaged(key: int, value) -> bool:
    """Whether the variable `key`, now `value` (frozen), holds what it or its moving average
    held after the latest step (`EMA_TOLERANCE`): an average put in place, not a change."""
    partner = STATE["last"].get(STATE["ema"].get(key))
    if value is None or partner is None:
        return False
    np = STATE["sys"].modules["numpy"]
    now = thawed(value)
    return any(_close(np, now, thawed(held)) for held in (STATE["last"][key][1], partner[1]))


def _note_change(outside: tuple, where: str) -> None:
    largest = max(_largest(value, STATE["last"][key][1]) for key, value in outside)
    owners = sorted({o for key, _ in outside for o in STATE["last"][key][2]})
    averages = _averages()
    model_ids = {STATE["ema"].get(k, k) if k in averages else k for k, _ in outside}
    STATE["changed"].append(
        {
            "optimizers": owners,
            "names": [_class_name(STATE["started"][o][0]) for o in owners if o in STATE["started"]],
            "steps": [_steps(STATE["started"][o][0]) for o in owners if o in STATE["started"]],
            "call": STATE["calls"],
            "largest": largest,
            "variables": sorted(model_ids),
            "where": where,
        }
    )


def _averages() -> set:
    """The ids of the moving averages' variables (`use_ema`) among the kept ones."""
    return {
        id(average)
        for record in tuple(STATE["started"].values())
        for _, average in _tracked(record[0])
        if average is not None
    }


def _close(np, value, held) -> bool:
    return value.shape == held.shape and np.allclose(
        value, held, rtol=EMA_TOLERANCE, atol=EMA_TOLERANCE
    )


def _largest(value, copy) -> float:
    """The largest absolute difference of two frozen copies; -1 when `value` is None
    (unreadable) or of another shape."""
    if value is None or value[2] != copy[2]:
        return -1.0
    np = STATE["sys"].modules["numpy"]
    difference = np.abs(thawed(value).astype(np.float64) - thawed(copy).astype(np.float64))
    return float(difference.max()) if difference.size else 0.0


def check_continuity(where: str = "the probe") -> None:
    """`_check` run by the probe after the notebook's last cell: a change after the last step."""
    with _Paused():
        _check(where)


# --- the wrappers ---------------------------------------------------------------------------
# While the original method runs (the notebook's code may run inside it: a step's Python body
# traced, a subclass's method), the wrapper's frame holds only tuples of ids, counts, frozen
# copies and the notebook's own objects: nothing of the record it could change in place.


def _wrap_build(original):
    def build(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        with _Paused():
            try:
                key = id(self)
                STATE["built"].setdefault(key, self)
                if key not in STATE["started"] and not _eager():
                    with _tf().init_scope():  # in a trace: read outside it, before the call runs
                        variables = _trained(self)
                        STATE["provisional"][key] = (
                            _steps(self),
                            variables,
                            tuple(map(_frozen, variables)),
                        )
            except Unreadable as exc:
                _unmeasured(self, str(exc))
            except Exception as exc:  # noqa: BLE001
                _note_error("build", exc)
        return result

    build.__name__, build.__qualname__, build.__doc__ = "build", "build", original.__doc__
    return build


def _wrap_apply(original):
    def apply(self, grads, trainable_variables=None):
        if not _eager():
            return original(self, grads, trainable_variables)
        with _Paused():
            STATE["calls"] += 1
            if STATE["last"]:
                _check("an eager step")
            counts = _counts()
            started = id(self) in STATE["started"]
            before = ()
            if not started:
                try:
                    variables = (
                        _trained(self)
                        if trainable_variables is None
                        else _variables(trainable_variables, "the variables given to `apply`")
                    )
                    copies = tuple(map(_frozen, variables))
                    before = ((id(self), _steps(self), variables, copies),)
                except Unreadable as exc:
                    _unmeasured(self, str(exc))
                except Exception as exc:  # noqa: BLE001
                    _note_error("before an eager step", exc)
        try:
            return original(self, grads, trainable_variables)
        finally:
            with _Paused():
                _moved(counts)
                if not started:
                    STATE["built"].setdefault(id(self), self)
                    _after(before, "eager")

    apply.__name__, apply.__qualname__, apply.__doc__ = "apply", "apply", original.__doc__
    return apply


def _wrap_call(original):
    def __call__(self, *args, **kwds):
        if not _eager():  # a call inside a trace: it runs when the outer call does
            return original(self, *args, **kwds)
        with _Paused():
            STATE["calls"] += 1
            if STATE["last"]:
                _check("a call")
            counts = _counts() if STATE["started"] else ()
            pending = _pending() if STATE["built"] else ()
            built = len(STATE["provisional"])
            before = _before(pending) if pending else ()
        try:
            result = original(self, *args, **kwds)
        finally:
            if counts:
                with _Paused():
                    _moved(counts)
        if before or len(STATE["provisional"]) != built:  # pending, or built during the call
            with _Paused():
                _after(before, "call")
        return result

    __call__.__doc__ = original.__doc__
    return __call__
