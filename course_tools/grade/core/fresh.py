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

The probe (`probe.start_facts`) finds the record through the interpreter's `__import__` (the
builtins are compared with the grader's anchor, `submission.ANCHOR`: replaced, they refuse the
probe), measures each model's start before and after its first step on the first
`probe.START_EXAMPLES` (512) training examples of the course's own loader (not the notebook's
pipeline), and reports a hook no longer in place as tampering (`checker._facts`). The record lives
in the kernel, so a notebook could rewrite it: reaching it takes a function's `__globals__` (the
reading's "dynamic"), its `__closure__`/`cell_contents`, `inspect.getclosurevars` or
`gc.get_objects` (`reading.GRADER_STATE_NAMES`, tampering), and putting the methods back takes an
assignment to a Keras or TensorFlow class (`reading.Code.module_patches`, tampering).

Continuity: the start alone misses weights given after the first step (the custom loop's own
first step, then `set_weights`; a callback loading at `on_train_batch_end(0)`; a load after the
last step). So after each eager call (or eager `apply`) that moves a started optimizer's step
count, the hook keeps a numpy copy of each variable it trains (`STATE["last"]`, keyed by
variable, so two optimizers over the same weights, a new one after `compile` again, share one
copy), and before every later eager call of a `tf.function` and every eager `apply`, and once
more when the probe runs (`check_continuity`: a load after the last step), compares them
(`np.array_equal`, exact). A difference is a change from outside the optimizer's steps:
`STATE["changed"]` keeps which optimizers train it, their step counts, the grader's count of
eager calls and the largest absolute change, and the copy is refreshed so it counts once; the
probe reports those touching a model's variables as its `changed`, and the check fails the
points of its start. Evaluate, predict, saves (`ModelCheckpoint`, `BackupAndRestore`'s, a
CheckpointManager's) change nothing; a second optimizer never stepped is never compared; a
restore into a new model (question 6) touches other variables; `steps_per_execution` moves the
count once a call, compared between calls. `use_ema`: its overwrites inside a step are the
step's; the averages put in place after `fit` (`finalize_variable_values`) and `SwapEMAWeights`'s
swaps happen between steps, so the averages are copied too and a weight that now holds what it
or its average held after the latest step (`EMA_TOLERANCE`: the swap adds and subtracts) is not
a change. A variable that cannot be read counts as changed (default-deny). Values are read from
the TensorFlow variable (a mirrored one's primary copy, as the start's copies) with one read op
(`_read`). Cost, measured on the solution's model (315,722 weights, 8 variables) at 2 devices on
a loaded machine (load average 10 to 16 on 2 cores): a compare about 3 ms, a refresh 4 to 9 ms,
a reading of the started optimizers' step counts under 0.5 ms, against a custom-loop step of 90
to 110 ms; interleaving 40 steps with the continuity on and off gave 112.4 vs 110.1 ms and 106.0
vs 90.8 ms a step in two runs (the noise of that machine). Every started optimizer's weights
are compared before every call, so the later runs pay more: `single_model`'s steps, after
`fit_model`'s and `custom_model`'s, compare three models (three times the compare above), which
slows the one-device baseline's timed epochs a little more than the distributed ones. On a GPU
each read also waits for the step to finish.

What it does not catch (said in course_tools/README.md): trained features with a last layer
reset to chance (the start scores chance, then trains fast), a first call of several steps
judged by its start only, weights changed inside a later step call (a `tf.function` that steps
and also assigns: continuity compares between calls, and only the first call's result is
scored), variables no optimizer trains, a mirrored variable's other replicas, and anything in a
kernel the notebook takes over.

Example (check side):

    from course_tools.grade.core import fresh
    fresh.fresh_start({"loss": 2.31, "accuracy": 0.09})   # True
    fresh.fresh_start({"loss": 0.18, "accuracy": 0.95})   # False
"""

from __future__ import annotations

#: The name of the wrapper of the builtin `__import__`: the probe finds the record through it.
HOOK_NAME = "grader_import"
#: The lowest mean loss (cross-entropy, natural log) a model that starts fresh may score on the
#: first `probe.START_EXAMPLES` (512) training examples, before and after its first step. A fresh
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
#: taken at a build inside a trace, and each optimizer's start ({id: record}); `patched`: the
#: methods wrapped, `errors`: why a wrap or a copy failed (shown by the probe). Continuity:
#: `last` ({id(variable): [variable, copy, {ids of the optimizers training it}]}, each variable a
#: started optimizer trains, as its latest step left it), `ema` ({id(variable): its moving
#: average's variable} and back, for `use_ema`), `changed` (the differences found, `_check`),
#: `calls` (the eager calls and eager steps seen).
STATE: dict = {
    "built": {},
    "provisional": {},
    "started": {},
    "patched": {},
    "errors": [],
    "last": {},
    "ema": {},
    "changed": [],
    "calls": 0,
}
#: At most this many differences are kept (`STATE["changed"]`), the first ones; `STATE["calls"]`
#: and the count in `STATE["changes"]` go on.
CHANGES_KEPT = 20
#: A model variable that differs from its latest step's copy is not a change from outside when it
#: now holds (within this tolerance, relative and absolute) what it or its moving average held
#: after that step: Keras's `use_ema` overwrites the weights with their averages after `fit`
#: (`finalize_variable_values`), and `SwapEMAWeights` swaps the two by additions and subtractions
#: (so not bit for bit).
EMA_TOLERANCE = 1e-5


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
    import sys

    STATE["sys"] = sys
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


def _steps(optimizer) -> int:
    value = optimizer.iterations
    return int(_read(value) if hasattr(value, "numpy") else value)


def _values(variables: list) -> list:
    np = STATE["sys"].modules["numpy"]
    return [np.array(v.numpy(), copy=True) for v in variables]


def _read(variable):
    """The value of a Keras variable as a numpy array, read from its TensorFlow variable, the
    primary copy of a mirrored one (one read op: Keras's `numpy()` of a mirrored variable takes
    several and was measured 4 to 6 times slower)."""
    inner = getattr(variable, "value", variable)
    inner = getattr(inner, "_primary", inner)
    read = getattr(inner, "_read_variable_op", None)
    return (read() if callable(read) else inner).numpy()


def _trained(optimizer) -> list:
    return list(getattr(optimizer, "_trainable_variables", None) or [])


def _pending() -> list:
    started = STATE["started"]
    return [o for key, o in STATE["built"].items() if key not in started]


def _note_error(where: str, exc: Exception) -> None:
    if len(STATE["errors"]) < 20:
        STATE["errors"].append(f"{where}: {type(exc).__name__}: {exc}"[:200])


def _before(optimizers: list) -> dict:
    """{id: (optimizer, steps, variables, copies)} for each optimizer whose state can be read."""
    found = {}
    for optimizer in optimizers:
        try:
            variables = _trained(optimizer)
            found[id(optimizer)] = (optimizer, _steps(optimizer), variables, _values(variables))
        except Exception as exc:  # noqa: BLE001 - the start is then missing, which the check says
            _note_error("before a step", exc)
    return found


def _after(before: dict, how: str) -> None:
    """Keep as its start the copies of each optimizer whose step count the call moved; an
    optimizer built during the call (not in `before`) starts from its copy at `build`."""
    started = STATE["started"]
    for key, optimizer in list(STATE["built"].items()):
        if key in started:
            continue
        try:
            if key in before:
                (_, steps, variables, copies), kind = before[key], how
            elif key in STATE["provisional"]:
                (steps, variables, copies), kind = STATE["provisional"][key], "build"
            else:
                continue
            moved = _steps(optimizer) - steps
            if moved:
                after = _values(variables)
                started[key] = {
                    "optimizer": optimizer,
                    "variables": variables,
                    "before": copies,
                    "after": after,
                    "steps": moved,
                    "how": kind,
                }
                _keep(key, optimizer)
        except Exception as exc:  # noqa: BLE001
            _note_error("after a step", exc)


# --- continuity: between two steps of an optimizer, nothing else changes what it trains --------


def _tracked(optimizer) -> list:
    """[(variable, its moving average or None)] for what `optimizer` trains."""
    variables = _trained(optimizer)
    if getattr(optimizer, "use_ema", False) is not True:
        return [(v, None) for v in variables]
    averages = getattr(optimizer, "_model_variables_moving_average", None)
    if not averages:
        return [(v, None) for v in variables]
    return list(zip(variables, list(averages) + [None] * (len(variables) - len(averages))))


def _keep(key: int, optimizer) -> None:
    """Keep copies of what `optimizer` (id `key`) trains, and of its moving averages, as they are
    now: as its latest step left them."""
    np, last, ema = STATE["sys"].modules["numpy"], STATE["last"], STATE["ema"]
    for variable, average in _tracked(optimizer):
        pairs = (
            [(variable, None)] if average is None else [(variable, average), (average, variable)]
        )
        for one, other in pairs:
            entry = last.get(id(one))
            if entry is None or entry[0] is not one:
                last[id(one)] = entry = [one, None, set()]
            entry[1] = np.array(_read(one), copy=True)
            entry[2].add(key)
            if other is not None:
                ema[id(one)] = id(other)


def _moved(counts: dict) -> None:
    """Refresh the copies of each started optimizer whose step count moved since `counts`
    ({id: (optimizer, steps)})."""
    for key, (optimizer, steps) in counts.items():
        try:
            if _steps(optimizer) != steps:
                _keep(key, optimizer)
        except Exception as exc:  # noqa: BLE001
            _note_error("after a step, continuity", exc)


def _counts() -> dict:
    """{id: (optimizer, steps)} of the optimizers already started."""
    counts = {}
    for key, record in STATE["started"].items():
        try:
            counts[key] = (record["optimizer"], _steps(record["optimizer"]))
        except Exception as exc:  # noqa: BLE001
            _note_error("before a step, continuity", exc)
    return counts


def _check(where: str) -> None:
    """Compare each variable a started optimizer trains with its copy from that optimizer's latest
    step; a difference (but a moving average put in place, `EMA_TOLERANCE`) is a change from
    outside the steps: kept in `STATE["changed"]` ({optimizers, their steps, the eager call, the
    largest absolute change, the variables, where}), and the copy refreshed so it counts once."""
    last = STATE["last"]
    if not last:
        return
    np = STATE["sys"].modules["numpy"]
    try:
        now = {}
        for key, (variable, copy, _) in list(last.items()):
            try:
                value = _read(variable)
            except Exception:  # noqa: BLE001 - unreadable: counted as changed (default-deny)
                now[key] = None
                continue
            if not np.array_equal(value, copy):
                now[key] = value
        if not now:
            return
        outside, largest = [], 0.0
        for key, value in now.items():
            copy = last[key][1]
            partner = last.get(STATE["ema"].get(key))
            held = [copy] + ([partner[1]] if partner is not None else [])
            if value is None or partner is None or not any(_close(np, value, h) for h in held):
                outside.append(key)
                largest = max(largest, _largest(np, value, copy))
        for key, value in now.items():
            if value is not None:
                last[key][1] = np.array(value, copy=True)
        if not outside:
            return
        owners = sorted({o for key in outside for o in last[key][2]})
        started = STATE["started"]
        STATE["changes"] = STATE.get("changes", 0) + 1
        if len(STATE["changed"]) < CHANGES_KEPT:
            averages = _averages()
            model_ids = {STATE["ema"].get(k, k) if k in averages else k for k in outside}
            STATE["changed"].append(
                {
                    "optimizers": owners,
                    "names": [
                        type(started[o]["optimizer"]).__name__ for o in owners if o in started
                    ],
                    "steps": [_steps(started[o]["optimizer"]) for o in owners if o in started],
                    "call": STATE["calls"],
                    "largest": largest,
                    "variables": sorted(model_ids),
                    "where": where,
                }
            )
    except Exception as exc:  # noqa: BLE001 - never break the notebook's step
        _note_error("continuity", exc)


def _averages() -> set:
    """The ids of the moving averages' variables (`use_ema`) among the kept ones."""
    return {
        id(average)
        for record in STATE["started"].values()
        for _, average in _tracked(record["optimizer"])
        if average is not None
    }


def _close(np, value, held) -> bool:
    return value.shape == held.shape and np.allclose(
        value, held, rtol=EMA_TOLERANCE, atol=EMA_TOLERANCE
    )


def _largest(np, value, copy) -> float:
    if value is None or value.shape != copy.shape:
        return -1.0  # unreadable, or of another shape: no number to give
    difference = np.abs(value.astype(np.float64) - copy.astype(np.float64))
    return float(difference.max()) if difference.size else 0.0


def check_continuity(where: str = "the probe") -> None:
    """`_check` run by the probe after the notebook's last cell: a change after the last step."""
    _check(where)


def _wrap_build(original):
    def build(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        try:
            key = id(self)
            STATE["built"].setdefault(key, self)
            if key not in STATE["started"] and not _eager():
                with _tf().init_scope():  # in a trace: read outside it, before the call runs
                    variables = _trained(self)
                    STATE["provisional"][key] = (_steps(self), variables, _values(variables))
        except Exception as exc:  # noqa: BLE001
            _note_error("build", exc)
        return result

    build.__name__, build.__qualname__, build.__doc__ = "build", "build", original.__doc__
    return build


def _wrap_apply(original):
    def apply(self, grads, trainable_variables=None):
        if not _eager():
            return original(self, grads, trainable_variables)
        STATE["calls"] += 1
        if STATE["last"]:
            _check("an eager step")
        counts = _counts()
        if id(self) in STATE["started"]:
            try:
                return original(self, grads, trainable_variables)
            finally:
                _moved(counts)
        if trainable_variables is not None:
            trainable_variables = list(trainable_variables)
        before = {}
        try:
            variables = trainable_variables if trainable_variables is not None else _trained(self)
            before = {id(self): (self, _steps(self), list(variables), _values(variables))}
        except Exception as exc:  # noqa: BLE001
            _note_error("before an eager step", exc)
        try:
            result = original(self, grads, trainable_variables)
        finally:
            _moved(counts)
        STATE["built"].setdefault(id(self), self)
        _after(before, "eager")
        return result

    apply.__name__, apply.__qualname__, apply.__doc__ = "apply", "apply", original.__doc__
    return apply


def _wrap_call(original):
    def __call__(self, *args, **kwds):
        if not _eager():  # a call inside a trace: it runs when the outer call does
            return original(self, *args, **kwds)
        STATE["calls"] += 1
        if STATE["last"]:
            _check("a call")
        counts = _counts() if STATE["started"] else {}
        pending = _pending() if STATE["built"] else []
        built = len(STATE["provisional"])
        before = _before(pending) if pending else {}
        try:
            result = original(self, *args, **kwds)
        finally:
            if counts:
                _moved(counts)
        if before or len(STATE["provisional"]) != built:  # pending, or built during the call
            _after(before, "call")
        return result

    __call__.__doc__ = original.__doc__
    return __call__
