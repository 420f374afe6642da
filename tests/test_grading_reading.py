"""The grader's static reading (`course_tools.grade.core.reading`) on the routes of red team 10a
and the honest lines beside them, through what the check process says (`checker._facts`): code
the reading cannot read is marked, a library's class changed through an object is marked, and
ordinary NumPy, pickle writing and Keras loading are not.

Run: pytest tests/test_grading_reading.py  (a few seconds, no kernel).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from course_tools.grade.core import checker, checks, one_submission, reading

#: Red team 10a's forging helper: it salts `hashlib.sha256`, so a second pass over a pipeline
#: that repeats its order seems to see other batches.
SALTER = (
    "import hashlib\n_real = hashlib.sha256\n"
    "def sha256(data=b'', **kw):\n    return _real(bytes(data) + b'!', **kw)\n"
    "hashlib.sha256 = sha256\n"
)


def _untrusted(*cells: str) -> str:
    """What the check process says marks the facts of a notebook of `cells` untrusted."""
    job = {"facts": {"models": {}}, "observed": {"cells": [{"source": c} for c in cells]}}
    return " ".join(checker._facts(job).get("tampered", []))


def _escaped(text: str) -> str:
    """`text` with its quotes, newlines and backslashes as `\\uXXXX` escapes."""
    return "".join(f"\\u{ord(c):04x}" if c in '"\n\\' else c for c in text)


def test_a_coding_that_changes_the_code_is_marked_and_plain_codings_are_read():
    """Red team 10a's `%%writefile` with `unicode_escape`: the reading saw one string, Python
    imported the salting helper. A coding other than UTF-8, ASCII or Latin-1 is marked, named in
    the message; a plain one is decoded as Python will and read as code (a patch in it counts)."""
    hidden = '%%writefile tidy_helpers.py\n# -*- coding: unicode_escape -*-\nNOTE = "notes'
    hidden += _escaped('"\n' + SALTER + 'END = "') + '"\n'
    said = _untrusted(hidden, "import tidy_helpers")
    assert "runs code the grader cannot read as code (cell [1], line 1: `%%writefile" in said, said
    assert "declares the coding unicode-escape" in said, said
    rot = 'exec(b"# coding: rot13\\nvzcbeg wfba")'
    assert "declares the coding rot-13" in _untrusted(rot), _untrusted(rot)
    for coding in ("utf-8", "latin-1", "ascii", "utf8", "iso-8859-1"):
        plain = f"%%writefile helpers.py\n# -*- coding: {coding} -*-\nx = 1\n"
        assert _untrusted(plain, "import helpers") == "", coding
        patched = f"%%writefile helpers.py\n# coding: {coding}\n{SALTER}"
        said = _untrusted(patched, "import helpers")
        assert "(cell [1], line 6: `hashlib.sha256 = sha256`)" in said, (coding, said)


#: Code that runs what the grader never reads (red team 10a finding 4 and its other doors).
UNREAD = (
    "import pickle\n_settings = pickle.loads(b'c__builtin__\\nexec\\n(Vx = 1\\ntR.')",
    "import pickle\nx = pickle.load(f)",
    "import _pickle\n_pickle.loads(b)",
    "import dill\ndill.loads(b)",
    "import cloudpickle as cp\ncp.loads(b)",
    "from pickle import loads\nloads(b)",
    "import pickle\nf = pickle.loads",
    "import shelve\nd = shelve.open('s')['k']",
    "import pandas as pd\npd.read_pickle('x.pkl')",
    "import numpy as np\nnp.load('x.npy', allow_pickle=True)",
    "import numpy as np\nnp.load('x.npy', allow_pickle=flag)",
    "import joblib\njoblib.load('m.joblib')",
    "import types, marshal\ntypes.FunctionType(marshal.loads(b'...'), {})()",
    "import types\ntypes.CodeType(*parts)",
    "import keras\nkeras.models.load_model('m.keras', safe_mode=False)",
    "import keras\nkeras.config.enable_unsafe_deserialization()",
    "open('m.pyc', 'wb').write(data)",
    "open('m.pth', 'w').write(line)",
    "open('m.so', 'wb').write(data)",
    "from pathlib import Path\nPath('m.pyw').write_text(text)",
    "open('m.egg', 'wb').write(data)",
    "import zipfile\nzipfile.ZipFile('tidy_lib.zip', 'w').writestr('tidy_helpers.py', src)",
    "import sys\nsys.path.insert(0, 'tidy_lib.zip')",
    "import sys\nsys.path.append('lib')",
    "import sys\nsys.path = ['lib', *sys.path]",
    "import sys\nsys.path += ['lib']",
    "import sys\nsys.path[0:0] = ['lib']",
    "from sys import path\npath.insert(0, 'lib.zip')",
    "import sys\nfound = sys.path\nfound.insert(0, 'lib.zip')",
    "import sys\nsys.meta_path.insert(0, Finder())",
    "import sys\nsys.path_hooks.append(hook)",
    "import site\nsite.addsitedir('lib')",
    "import codecs\ncodecs.register(search)",
    "import zipimport\nzipimport.zipimporter('lib.zip').load_module('m')",
    "from pathlib import Path\nPath('m.txt').rename(Path('m.txt').with_suffix('.py'))",
)
#: Their honest neighbours.
READ = (
    "import numpy as np\nx = np.load('x.npy')",
    "import numpy as np\nx = np.load('x.npz', allow_pickle=False)['a']",
    "import pickle\nopen('h.pkl', 'wb').write(pickle.dumps(history))",
    "import pickle\npickle.dump(history, open('h.pkl', 'wb'))",
    "import json\nresults = json.load(open('results.json'))",
    "model.load_weights('best.weights.h5')",
    "import tensorflow as tf\nm = tf.keras.models.load_model('m.keras')",
    "import keras\nm = keras.models.load_model('m.keras', safe_mode=True)",
    "import os, sys\nsys.path.insert(0, os.path.abspath('..'))",
    "import sys\nsys.path.append('..')",
    "import sys\nfrom pathlib import Path\nsys.path.insert(0, str(Path.cwd().parent))",
    "import sys\nprint(sys.path)",
    "import zipfile\nzipfile.ZipFile('data.zip').extractall('data')",
    "from pathlib import Path\nPath('run.txt').rename(Path('run.txt').with_suffix('.log'))",
)


def test_decoders_archives_and_import_paths_are_marked_and_honest_loading_is_not():
    """Red team 10a's `pickle.loads` (whose opcodes call exec) and its zip on `sys.path` scored
    12/12 against 11: each decoder that runs what its data names, each file an import can run
    written or renamed, each change of where modules are found is code the grader cannot read.
    Loading arrays, JSON, weights or a Keras model, writing a pickle and the clone's
    `sys.path.insert(0, os.path.abspath(".."))` (the exercise's own line) are not marked."""
    for code in UNREAD:
        said = _untrusted(code)
        assert "runs code the grader cannot read as code (cell [1], line" in said, (code, said)
    for code in READ:
        assert _untrusted(code) == "", (code, _untrusted(code))


def test_read_only_windows_and_interface_reads_are_not_marked_and_writers_are():
    """Red team 10a's honest moving average (a read-only `as_strided` window: 1/12 before) and a
    read of an array's interface are not marked; `as_strided` writable (or unsaid, or passed on),
    an interface set, mutated, handed to a call, or defined by a class still are, and so is a
    frame (`inspect.currentframe().f_lineno`: a frame reaches its callers' locals)."""
    window = (
        "import numpy as np\nfrom numpy.lib.stride_tricks import as_strided\n"
        "losses = np.array([2.3, 1.9, 1.6, 1.4, 1.3, 1.2])\n"
        "windows = as_strided(losses, shape=(4, 3), strides=(8, 8), writeable=False)\n"
        "print('moving average of the loss:', windows.mean(axis=1))"
    )
    for code in (
        window,
        "import numpy as np\nw = np.lib.stride_tricks.as_strided(a, (4,), (8,), writeable=False)",
        "from numpy.lib.stride_tricks import as_strided as strided\n"
        "w = strided(a, (4,), (8,), writeable=False)",
        "import numpy as np\nprint(np.zeros(3).__array_interface__['data'])",
        "import numpy as np\nshape = np.zeros(3).__array_interface__['shape']",
        "import numpy as np\nnp.zeros(3).__array_interface__",
    ):
        assert _untrusted(code) == "", (code, _untrusted(code))
    strided = "from numpy.lib.stride_tricks import as_strided\n"
    for code in (
        strided,
        strided + "w = as_strided(a, (4,), (8,))",
        strided + "w = as_strided(a, (4,), (8,), writeable=True)",
        strided + "w = as_strided(a, (4,), (8,), writeable=flag)",
        strided + "w = as_strided(a, (4,), (8,), writeable=False)\nwindow = as_strided",
        "import numpy as np\nx = np.asarray(Raw())\nRaw.__array_interface__ = {}",
        "x.__array_interface__['data'] = (address, False)",
        "import numpy as np\nnp.asarray(Holder(x.__array_interface__))",
        "class Raw:\n    @property\n    def __array_interface__(self):\n        return forged",
        "Raw = type('Raw', (), {'__array_interface__': forged})",
        "import types\nraw = types.SimpleNamespace(__array_interface__=forged)",
    ):
        said = _untrusted(code)
        assert "writes the interpreter's memory directly" in said, (code, said)
    said = _untrusted("import inspect\nprint(inspect.currentframe().f_lineno)")
    assert "`currentframe` sets a hook on the interpreter" in said, said


#: Red team 10a's pipeline that answers the probe's second pass with another order.
TYPE_ITER = """
_T = type(train_ds)
_own_iter = _T.__iter__
def _iter(self):
    if self is train_ds:
        return iter(train_cached.shuffle(10_000, seed=2).batch(GLOBAL_BATCH))
    return _own_iter(self)
_T.__iter__ = _iter
"""


def test_a_class_changed_through_an_object_is_marked_and_the_notebooks_own_class_is_not():
    """A method assigned on a TensorFlow or Keras class reached through its object (12/12 against
    11 before) counts as changing a library, in each spelling; a class the notebook defined,
    named directly, is its own, and reading `type(x)` changes nothing."""
    said = _untrusted(TYPE_ITER)
    assert (
        "changes a library the grader relies on (cell [1], line 7: `_T.__iter__ = _iter`)" in said
    )
    for code in (
        "type(train_ds).__iter__ = f",
        "train_ds.__class__.__iter__ = f",
        "setattr(type(train_ds), '__iter__', f)",
        "delattr(train_ds.__class__, 'cardinality')",
        "type(train_ds).__mro__[1].__iter__ = f",
        "T = type(train_ds)\nU = T\nU.__iter__ = f",
        "for k in type(train_ds).__mro__:\n    k.__iter__ = f",
        "import inspect\ninspect.getmro(type(train_ds))[0].__iter__ = f",
        "type(fit_model).count_params = f",
        "class Timer(keras.callbacks.Callback):\n    pass\nTimer.__mro__[1].on_epoch_end = f",
        "class Timer:\n    def tick(self):\n        type(self).ticks = 1\nTimer.tick(train_ds)",
    ):
        said = _untrusted(code)
        assert "changes a library the grader relies on (cell [1], line" in said, (code, said)
    for code in (
        "import keras\nclass MyCallback(keras.callbacks.Callback):\n    pass\nMyCallback.x = 1",
        "print(type(train_ds).__name__, train_ds.__class__.__mro__)",
        "kind = type(fit_model)\nprint(kind.__name__)",
        "self.kind = type(fit_model)",
    ):
        assert _untrusted(code) == "", (code, _untrusted(code))


#: A method of the notebook's class that sets a method of whatever class `self` has.
TICK = "class Timer:\n    def tick(self):\n        type(self).__iter__ = f\n"
#: Red team 11a's honest counters on the notebook's own classes (1/12 each before).
OWN_COUNTERS = (
    "class EpochCounter:\n    count = 0\n\n    def __init__(self):\n        type(self).count += 1"
    "\n\n\nEpochCounter()\nprint(EpochCounter.count)",
    "import keras\n\n\nclass EpochCount(keras.callbacks.Callback):\n    epochs_seen = 0\n\n"
    "    def on_epoch_end(self, epoch, logs=None):\n        self.__class__.epochs_seen += 1",
    "class Base:\n    def __init__(self):\n        super().__init__()\n        kind = type(self)\n"
    "        kind.made = True\nclass Counter(Base):\n    pass\nc = Counter()\n"
    "print(isinstance(c, Base))",
)
#: The same lines where the method can be given another object, or the class made another.
FOREIGN_SELF = (
    TICK + "Timer.tick(train_ds)",
    TICK + "class Sub(Timer):\n    pass\nSub.tick(train_ds)",
    TICK + "T = Timer\nT.tick(train_ds)",
    TICK + "getattr(Timer, 'tick')(train_ds)",
    TICK + "for g in vars(Timer).values():\n    g(train_ds)",
    TICK + "Timer().tick.__func__(train_ds)",
    "class Timer:\n    def __new__(cls):\n        return train_ds\n\n    def __init__(self):\n"
    "        self.__class__.__iter__ = f\nTimer()",
    "class Timer:\n    def tick(self):\n        self = train_ds\n        type(self).__iter__ = f",
    "class Timer:\n    def tick(self):\n        def g(self):\n            type(self).__iter__ = f\n"
    "        g(train_ds)",
    "class Timer:\n    @staticmethod\n    def tick(self):\n        type(self).__iter__ = f",
)


def test_a_counter_on_the_notebooks_own_class_is_not_marked_and_a_foreign_self_is():
    """`type(self).count += 1` in a method of a class the notebook defines reaches that class
    (1/12 before); the same line is marked when the method can be called with another object
    (through the class, a name bound to it, getattr, its function) or `__new__` can return one."""
    for code in OWN_COUNTERS:
        assert _untrusted(code) == "", (code, _untrusted(code))
    for code in FOREIGN_SELF:
        said = _untrusted(code)
        assert "changes a library the grader relies on (cell [1], line" in said, (code, said)


#: An archive opened for writing.
ZIP = "import zipfile\nz = zipfile.ZipFile('lib.zip', 'w')\n"


def test_the_working_folder_on_the_path_and_a_zip_of_results_are_not_marked():
    """Red team 11a's `sys.path.insert(0, '.')` and a zip of notes for hand-in (1/12 each
    before): the working folder is on the import path already, and an archive runs nothing
    until it is put there; a module written into an archive, or the archive put on the path,
    still is marked."""
    for code in (
        "import sys\nsys.path.insert(0, '.')",
        "import sys\nsys.path.insert(0, '')",
        "import os, sys\nsys.path.append(os.getcwd())",
        "import os, sys\nsys.path.append(os.path.abspath('.'))",
        "import os, sys\nsys.path.insert(0, os.curdir)",
        "import sys\nfrom pathlib import Path\nsys.path.insert(0, str(Path.cwd()))",
        "import zipfile\nwith zipfile.ZipFile('submission_files.zip', 'w') as z:\n"
        "    z.write('notes.txt')",
        "import shutil\nshutil.make_archive('submission_files', 'zip', 'results')",
        "import shutil\nshutil.copy('best.keras', 'best_model.zip')",
    ):
        assert _untrusted(code) == "", (code, _untrusted(code))
    for code in (
        "import os, sys\nsys.path.append(os.path.abspath('helpers'))",
        "import sys\nsys.path.insert(0, '/')",
        ZIP + "z.write('notes.txt', 'm.py')",
        ZIP + "z.write('m.pyc')",
        ZIP + "z.writestr(zipfile.ZipInfo('m.py'), s)",
        "import shutil, sys\nshutil.make_archive('lib', 'zip', 'out')\n"
        "sys.path.insert(0, 'lib.zip')",
    ):
        said = _untrusted(code)
        assert "runs code the grader cannot read as code (cell [1], line" in said, (code, said)


#: Red team 11a's other doors to code the reading never sees (12/12 against 11 or 3 before).
STRINGS_AND_COMMANDS = (
    "import timeit\nprint('setup time:', timeit.timeit(SRC, number=1))",
    "import timeit\ntimeit.timeit('x = 1', setup=SETUP)",
    "from timeit import Timer\nTimer(SRC).timeit()",
    "import timeit\ngetattr(timeit, 'timeit')(SRC)",
    "import cProfile\ncProfile.run(SRC)",
    "import cProfile\ncProfile.Profile().runctx(SRC, globals(), locals())",
    "import profile\nprofile.run(SRC)",
    "import pdb\npdb.run(SRC)",
    "import pdb\npdb.runeval(SRC)",
    "import code\ncode.InteractiveInterpreter().runsource(SRC)",
    "import code\ncode.InteractiveConsole().push(SRC)",
    "from code import compile_command\ncompile_command(SRC)",
    "import doctest\ndoctest.run_docstring_examples(helper, {})",
    "import doctest\ndoctest.testmod()",
    "import yaml\nyaml.unsafe_load(text)",
    "import yaml\nyaml.load(text, Loader=yaml.Loader)",
    "import yaml\nyaml.load(text)",
    "%%bash\ncp tidy_notes.txt tidy_helpers.py\n",
    '%%sh\npython3 -c \'open("m.txt", "w")\'\n',
    "%%script sh\ncp a.txt b.p''y\n",
    "%%script python3\nprint(1)\n",
    "%%python3\nprint(1)\n",
    "%%perl\nprint 1;\n",
    "!cp tidy_notes.txt tidy_helpers.py",
    "!cp a.txt {target}",
    "files = !cp a.txt m.pyc",
    "%system cp a.txt m.py",
    "import os\nos.system('cp a.txt b.py')",
    "import os\nos.system(command)",
    "import os\nos.popen('python -c 1')",
    "import subprocess\nsubprocess.run(['cp', 'tidy_notes.txt', 'tidy_helpers.py'], check=True)",
    "import subprocess as sp\nsp.check_output(['cp', source, target])",
    "import shutil\nshutil.unpack_archive('x.tar')",
    "import tarfile\nwith tarfile.open('x.tar') as t:\n    t.extractall()",
)
#: Their honest neighbours: timing a function or a literal, shell lines that write no code.
TIMED_AND_LISTED = (
    "import timeit\nprint(timeit.timeit('sum(range(100))', number=3))",
    "import timeit\nprint(timeit.timeit(lambda: sum(range(100)), number=3))",
    "import timeit\ndef step():\n    return 1\nprint(timeit.repeat(step, number=3))",
    "import cProfile\ncProfile.run('sum(range(100))')",
    "import yaml\nconfig = yaml.safe_load(open('c.yaml'))",
    "import yaml\nconfig = yaml.load(open('c.yaml'), Loader=yaml.SafeLoader)",
    "import itertools\nprint(list(itertools.repeat(name, 3)))",
    "!ls",
    "!nvidia-smi",
    "!pip install tensorflow-datasets",
    "%pip install tensorflow-datasets",
    "files = !ls",
    "%%bash\nls -l\nnvidia-smi\n",
    "import os\nos.system('nvidia-smi')",
    "import subprocess\nsubprocess.run(['nvidia-smi'], check=True)",
)


def test_strings_run_as_code_and_commands_that_write_code_are_marked_and_honest_ones_not():
    """timeit's, a profiler's or a debugger's string, the code module, doctest and an unsafe
    YAML load run code the grader cannot read unless it is a literal (then it is read: a patch
    in it counts); an interpreter's cell, and a shell line that names an importable file,
    Python, or text built at run time, can write the module the next cell imports. `!ls`,
    `!nvidia-smi`, `!pip install` and a timed function are not marked."""
    for code in STRINGS_AND_COMMANDS:
        said = _untrusted(code)
        assert "runs code the grader cannot read as code (cell [1], line" in said, (code, said)
    said = _untrusted("!cp tidy_notes.txt tidy_helpers.py")
    assert "(cell [1], line 1: `!cp tidy_notes.txt tidy_helpers.py`)" in said, said
    for code in TIMED_AND_LISTED:
        assert _untrusted(code) == "", (code, _untrusted(code))
    literal = "import timeit\ntimeit.timeit('import hashlib\\nhashlib.sha256 = f', number=1)"
    said = _untrusted(literal)
    assert "changes a library the grader relies on (cell [1], line 2: `hashlib.sha256" in said, said


def test_a_library_class_imported_by_name_or_reached_by_a_getter_is_marked():
    """Red team 11a's `_PrefetchDataset.__iter__` replaced after `from ... import
    _PrefetchDataset` or `object.__getattribute__(train_ds, "__class__")` (12/12 against 11):
    a class imported by name from a library the grader relies on is that library's, and a
    literal `"__class__"` given to a getter is `.__class__`; the notebook's subclass of one, an
    instance's attributes and a class of a library the grader does not rely on are not marked."""
    for code in (
        "from tensorflow.data import Dataset\nDataset.__iter__ = f",
        "from keras import Model\nModel.count_params = f",
        "from tensorflow.python.data.ops.prefetch_op import _PrefetchDataset\n"
        "_PrefetchDataset.__iter__ = functools.partialmethod(f)",
        "from json import JSONEncoder\nJSONEncoder.encode = f",
        "from keras import Model as M\nN = M\nN.fit = f",
        "from keras import Model\nModel.fit = Model.evaluate",
        "from keras import Model\ndel Model.fit",
        "_C = object.__getattribute__(train_ds, '__class__')\n_C.__iter__ = f",
        "getattr(train_ds, '__class__').__iter__ = f",
        "train_ds.__getattribute__('__class__').__iter__ = f",
        "_T = train_ds.__reduce_ex__(2)[1][0]\n_T.__iter__ = f",
        "_T = train_ds.__init__.__globals__['_PrefetchDataset']\n_T.__iter__ = f",
    ):
        said = _untrusted(code)
        assert "changes a library the grader relies on (cell [1], line" in said, (code, said)
    for code in (
        "from keras.callbacks import Callback\nclass Mine(Callback):\n    pass\nMine.x = 1",
        "from keras import Model\nclass Net(Model):\n    pass\nnet = Net()\nnet.extra = 1",
        "from keras.layers import Dense\nlayer = Dense(3)\nlayer.trainable = False",
        "from pandas import DataFrame\nDataFrame.x = 1",
        "from tensorflow.keras.callbacks import Callback\nCallback.verbose = 0",
        "print(getattr(train_ds, '__class__').__name__)",
    ):
        assert _untrusted(code) == "", (code, _untrusted(code))


def test_commands_that_only_read_and_class_defaults_through_the_module_are_not_marked():
    """Red team 12a's honest lines that cost 11 points: a version check, a listing, a literal
    default set on a Keras class spelled through its module; a command that writes or runs code
    beside them still is."""
    for code in (
        "!python --version",
        "!ls *.py",
        "!cat helpers.py",
        "!which python",
        "import subprocess, sys\nsubprocess.run([sys.executable, '--version'])",
        "import keras\nkeras.callbacks.Callback.verbose = False",
        "import tensorflow as tf\ntf.keras.callbacks.Callback.verbose = 0",
    ):
        assert _untrusted(code) == "", code
    for code in (
        "!cat notes.txt > helpers.py",
        "!cp notes.txt helpers.py",
        "!ls; python helpers.py",
        "import subprocess, sys\nsubprocess.run([sys.executable, 'helpers.py'])",
        "import keras\nkeras.Model.fit = fit",
    ):
        assert _untrusted(code) != "", code


def test_a_method_that_turns_self_into_a_library_object_loses_its_exemption():
    """Red team 12a: `object.__setattr__(self, "__class__", type(train_ds))` in a method of the
    notebook's own subclass, then `self.__class__.__iter__ = how`, set the pipeline's method
    unmarked; the honest counter on the notebook's own class stays unmarked."""
    tidy = (
        "class Tidy(type(train_ds)):\n"
        "    def use(self, how):\n"
        "        object.__setattr__(self, '__class__', type(train_ds))\n"
        "        self.__class__.__iter__ = how\n"
        "tidy = Tidy()\n"
        "tidy.use(f)"
    )
    assert "changes a library the grader relies on" in _untrusted(tidy), _untrusted(tidy)
    counter = (
        "class EpochCounter:\n"
        "    count = 0\n"
        "    def tick(self):\n"
        "        type(self).count += 1\n"
        "counter = EpochCounter()\n"
        "counter.tick()"
    )
    assert _untrusted(counter) == ""


def test_counts_beside_a_getter_or_on_a_new_object_are_not_marked_and_methods_still_are():
    """Red team 12a's honest counters (1/12 each before): `type(self).count += 1` beside a
    `getattr(np, kind)` elsewhere, and `self.__class__.epochs_seen += 1` in a method called on a
    new object (`EpochCount().on_epoch_end(0)`). A number literal added installs no code; a
    method assigned the same way, or a count by a name (whose `__radd__` could return one), is
    still marked, and so is the method called through its class."""
    getter = "import numpy as np\nkind = 'float32'\nprint(getattr(np, kind))"
    for code in (
        f"{OWN_COUNTERS[0]}\n{getter}",
        f"{OWN_COUNTERS[1]}\n\n\nEpochCount().on_epoch_end(0)\nprint(EpochCount.epochs_seen)",
        f"{TICK}Timer().tick()",
    ):
        assert _untrusted(code) == "", (code, _untrusted(code))
    for code in (
        f"{TICK}{getter}\nTimer().tick()",
        "class Timer:\n    def tick(self, n):\n        type(self).count += n\n"
        "Timer.tick(train_ds, forger)",
        f"{TICK}Timer.tick(Timer())",
        "type(train_ds).count *= 1",
    ):
        said = _untrusted(code)
        assert "changes a library the grader relies on (cell [1], line" in said, (code, said)


def test_a_name_bound_once_to_a_strategys_scope_is_read_as_that_scope():
    """Review s5-revB12 F1: `scope = strategy.scope()` then `with scope:` works (TensorFlow
    creates mirrored variables under it), but was read as outside any scope, and the student lost
    the points for training under MirroredStrategy. A name bound once to MirroredStrategy's
    scope is that scope, in a cell or a helper; a name bound again (to anything), a loop's target,
    or a scope of another strategy is not, and the check still fails with what to do."""
    mirrored = "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
    honest = (
        "scope = strategy.scope()\nwith scope:\n    fit_model = make_model()\n",
        "scope = strategy.scope()\nwith scope as entered:\n    fit_model = make_model()\n",
        "scope: object = strategy.scope()\n\ndef build():\n    with scope:\n"
        "        return make_model()\n\nfit_model = build()\n",
    )
    for code in honest:
        observed = {"cells": [{"source": mirrored}, {"source": code}]}
        assert reading.Code.of(observed).assigned_in_scope("fit_model") is True, code
        checks.assert_created_in_scope(observed, "fit_model")
    scoped = "with scope:\n    fit_model = make_model()\n"
    for binding in (
        "scope = strategy.scope()\nimport contextlib\nscope = contextlib.nullcontext()",
        "import contextlib\nfor scope in (contextlib.nullcontext(), strategy.scope()):\n    pass",
        "scope = strategy.scope()\ndef use(scope):\n    return scope",
        "scope = tf.distribute.OneDeviceStrategy('/cpu:0').scope()",
        "scope = Fake().scope()",
    ):
        observed = {"cells": [{"source": mirrored + binding}, {"source": scoped}]}
        assert reading.Code.of(observed).assigned_in_scope("fit_model") is False, binding
        with pytest.raises(checks.CheckError, match="outside any strategy scope"):
            checks.assert_created_in_scope(observed, "fit_model")


SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "05_svhn_solution.ipynb"
FIT = "fit_model.fit(train_ds, epochs"
LOOP = "strategy.experimental_distribute_dataset(train_ds)"
SHUFFLED = "train_cached.shuffle(10_000)"


def _solution(changes: dict[str, str] = {}, added: tuple[str, ...] = ()) -> dict:  # noqa: B006
    """What the grader observes of the solution's code cells, with each text of `changes`
    replaced in every cell, and `added` cells put after the data set's loading cell."""
    cells = [
        cell.source
        for cell in nbformat.read(SOLUTION, as_version=4).cells
        if cell.cell_type == "code" and "HIDDEN" not in cell.source
    ]
    for old, new in changes.items():
        assert any(old in cell for cell in cells), old
        cells = [cell.replace(old, new) for cell in cells]
    at = next(i for i, cell in enumerate(cells) if "NUM_TRAIN = " in cell) + 1
    cells[at:at] = added
    return {"cells": [{"source": source} for source in cells], "files": {}}


def _cell_of(observed: dict, text: str) -> int:
    """The execution count, in a run from the top, of the first observed cell that holds `text`
    (the code cells that hold code, counted from 1: the number the grader's messages give)."""
    run = [c for c in observed["cells"] if c["source"].strip()]
    return next(i for i, c in enumerate(run, 1) if text in c["source"])


def test_every_training_call_must_give_train_ds_by_name_and_both_are_required():
    """Red team 17a's starred trains on `*[train_cached.batch(GLOBAL_BATCH)]` (unshuffled) while
    a shuffled `train_ds` stands, and `**{...}`, `getattr(model, "fit")` and `f = model.fit`
    escaped the reading the same way: each fails question 1 naming its cell and what to write.
    So do a pipeline made through `distribute_datasets_from_function` and a notebook with no
    `fit(train_ds)` or no `experimental_distribute_dataset(train_ds)` (the exercise asks for
    both). The solution passes: its distributed test set and the loss check's own batch of
    labels are not training sets."""
    checks.assert_pipeline_code(_solution(), "train_ds", "train")
    plain = "train_cached.batch(GLOBAL_BATCH)"
    for change, words in [
        ({FIT: f"fit_model.fit(*[{plain}], epochs"}, r"through `\*`/`\*\*`"),
        ({FIT: f'fit_model.fit(**{{"x": {plain}}}, epochs'}, r"through `\*`/`\*\*`"),
        ({LOOP: f'strategy.experimental_distribute_dataset(**{{"dataset": {plain}}})'}, r"\*\*"),
        ({FIT: f'getattr(fit_model, "fit")({plain}, epochs'}, "looks a training method up"),
        ({FIT: f"train = fit_model.fit\n    train({plain}, epochs"}, "reaches `fit` without"),
        (
            {LOOP: f"strategy.distribute_datasets_from_function(lambda _: {plain})"},
            "through a function",
        ),
        ({FIT: f"fit_model.fit(x={plain}, epochs"}, "a dataset other than `train_ds`"),
        ({FIT: "fit_model.fit(train_ds.repeat(1), epochs"}, "a dataset other than `train_ds`"),
        ({LOOP: "strategy.experimental_distribute_dataset(train_ds.take(-1))"}, "other than"),
    ]:
        code = _solution(change)
        cell = _cell_of(code, next(iter(change.values())).split("\n")[0])
        with pytest.raises(checks.CheckError, match=rf"{words}.*\(cell \[{cell}\]: `.*write `"):
            checks.assert_pipeline_code(code, "train_ds", "train")
    for change, missing in [
        ({LOOP: "iter(train_ds)"}, "experimental_distribute_dataset"),
        ({FIT: "print(train_ds, epochs", "single_model.fit(train_ds": "print(train_ds"}, "fit"),
    ]:
        with pytest.raises(checks.CheckError, match=rf"finds no `.*{missing}\(train_ds"):
            checks.assert_pipeline_code(_solution(change), "train_ds", "train")


def test_a_shuffle_buffer_the_reading_cannot_read_earns_no_point_and_honest_counts_do():
    """Red team 17a's buf-len shuffles with `len(range(GLOBAL_BATCH))` (128 at two replicas):
    a buffer that is neither constant arithmetic nor the count of the loaded training examples
    fails question 1 with what to write, as do `np.int64(512)`, `512 if True else 0`, a name
    bound twice and a tuple assignment. A literal of thousands, the count of the loaded examples
    (`len(...)`, `cardinality()`, `info.splits[...].num_examples`, a name bound once to one),
    arithmetic of literals, and a helper's parameter given one of them pass."""
    unread = [
        ("len(range(GLOBAL_BATCH))", ()),
        ("np.int64(512)", ()),
        ("512 if True else 0", ()),
        ("BUFFER", ("BUFFER = 512\nBUFFER = 512",)),
        ("BUFFER", ("BUFFER, _ = BIG, 0",)),
        ("train_examples.take(128).cardinality()", ()),
        ("*[BUFFER]", ("BUFFER = 10_000",)),
        ("len(labels)", ()),
    ]
    for buffer, added in unread:
        code = _solution({SHUFFLED: f"train_cached.shuffle({buffer})"}, added)
        cell = _cell_of(code, f"train_cached.shuffle({buffer})")
        with pytest.raises(
            checks.CheckError,
            match=rf"shuffles `train_ds` \(cell \[{cell}\], trained on in cell \[\d+\]\) with a "
            r"buffer the "
            r"grader cannot read as a number .*write the buffer as a number of thousands",
        ):
            checks.assert_pipeline_code(code, "train_ds", "train")
    tfds_info = (
        "import tensorflow_datasets as tfds\n_, info = tfds.load('svhn_cropped', with_info=True)"
    )
    honest = [
        ("10_000", ()),
        ("2 ** 14", ()),
        ("20 * GLOBAL_BATCH", ()),
        ("NUM_TRAIN", ()),
        ("N_TRAIN", ("N_TRAIN = len(train_examples)",)),
        ("len(train_examples)", ()),
        ("train_examples.cardinality()", ()),
        ("int(train_cached.cardinality())", ()),
        ("train_cached.cardinality().numpy()", ()),
        ("buffer_size=info.splits['train'].num_examples", (tfds_info,)),
    ]
    for buffer, added in honest:
        code = _solution({SHUFFLED: f"train_cached.shuffle({buffer})"}, added)
        checks.assert_pipeline_code(code, "train_ds", "train")
    # a helper's buffer parameter is read where the helper is called (or from its default)
    helper = "def mixed(ds, buffer=10_000):\n    return ds.shuffle(buffer)\n"
    for given, passes in [
        ("", True),
        (", 2 ** 14", True),
        (", buffer=NUM_TRAIN", True),
        (", len(range(GLOBAL_BATCH))", False),
        (", 512", False),
    ]:
        code = _solution({SHUFFLED: f"mixed(train_cached{given})"}, (helper,))
        if passes:
            checks.assert_pipeline_code(code, "train_ds", "train")
        else:
            with pytest.raises(checks.CheckError, match="buffer (below 1,000|the grader cannot)"):
                checks.assert_pipeline_code(code, "train_ds", "train")


def test_an_assignment_to_a_models_optimizer_step_count_is_a_copy():
    """Red team 17a's assign-steps copies a one-device model's weights into `fit_model`, then its
    step count (`fit_model.optimizer.iterations.assign(...)`), so that the kernel's count matches
    the file's: the reading calls that a copy, as a loaded model is, naming the cell; so do
    `assign_add`, one through `optimizer.variables`, a name bound to the optimizer, and a plain
    `optimizer.iterations = ...`. Reading the count (the notebook's EpochClock) is no copy, nor
    is another model's count set."""
    anchor = 'fit_model.save(ARTIFACTS / "fit_model.keras")'
    checks.assert_created_in_scope(_solution(), "fit_model")
    for line in (
        "fit_model.optimizer.iterations.assign(one_device.optimizer.iterations)",
        "fit_model.optimizer.iterations.assign_add(48)",
        "fit_model.optimizer.variables[0].assign(48)",
        "opt = fit_model.optimizer\nopt.iterations.assign(48)",
        "fit_model.optimizer.iterations = tf.Variable(48)",
    ):
        code = _solution({anchor: f"{line}\n{anchor}"})
        assert line.split("\n")[0] in "".join(c["source"] for c in code["cells"])
        cell = _cell_of(code, anchor)
        with pytest.raises(
            checks.CheckError,
            match=rf"makes `fit_model` with an assignment to its optimizer's step count \(cell "
            rf"\[{cell}\]: .*a copy of a model is not the model trained",
        ):
            checks.assert_created_in_scope(code, "fit_model")
    for line in (
        "print(int(fit_model.optimizer.iterations.numpy()))",
        "single_model.optimizer.iterations.assign(0)",
    ):
        checks.assert_created_in_scope(_solution({anchor: f"{line}\n{anchor}"}), "fit_model")


def test_a_second_load_of_the_training_examples_is_the_training_examples():
    """A side dataset made by loading the training split again (`data.load("svhn_cropped",
    "train")` written a second time) and distributed to the custom loop beside a shuffled
    `train_ds` is a training set not given as `train_ds`: question 1 fails naming the call. A
    second load of the test split is not a training set, and a `train_ds` made from a second
    load of the training split is read as any other."""
    again = "side = data.load('svhn_cropped', '{}').batch(GLOBAL_BATCH)\n"
    distributed = "strategy.experimental_distribute_dataset(side)"
    code = _solution({LOOP: f"{LOOP}\n{again.format('train')}train_dist = {distributed}"})
    cell = _cell_of(code, distributed)
    with pytest.raises(
        checks.CheckError,
        match=rf"other than `train_ds` \(cell \[{cell}\]: `{re.escape(distributed)}",
    ):
        checks.assert_pipeline_code(code, "train_ds", "train")
    code = _solution({LOOP: f"{LOOP}\n{again.format('test')}looked = {distributed}"})
    checks.assert_pipeline_code(code, "train_ds", "train")
    code = _solution({"train_cached.shuffle(": "data.load('svhn_cropped', 'train').shuffle("})
    checks.assert_pipeline_code(code, "train_ds", "train")


def test_a_train_ds_sliced_from_the_loaded_examples_keeps_the_point():
    """An honest `train_ds` made with `tf.data.Dataset.from_tensor_slices` of arrays taken from
    the loaded training examples, shuffled with thousands and batched, lost question 1 ("does not
    carry train_examples"): it is the loaded examples in a new dataset (the probe reads its
    order and examples). Slices of constants, or `Dataset.range(1)`, are still a dataset made
    beside the examples, and a small buffer is still small."""
    arrays = "images, labels = next(iter(train_examples.batch(NUM_TRAIN)))\n"
    sliced = "tf.data.Dataset.from_tensor_slices({})"
    for made, passes, words in [
        (f"{arrays}train_ds = {sliced.format('(images, labels)')}.shuffle(10_000)", True, ""),
        (f"{arrays}train_ds = {sliced.format('(images, labels)')}.shuffle(512)", False, "below"),
        (f"train_ds = {sliced.format('[0, 1]')}.shuffle(10_000)", False, "does not carry"),
        ("train_ds = tf.data.Dataset.range(1).shuffle(10_000)", False, "does not carry"),
    ]:
        code = _solution({"train_ds = train_cached.shuffle(10_000)": made})
        if passes:
            checks.assert_pipeline_code(code, "train_ds", "train")
        else:
            with pytest.raises(checks.CheckError, match=words):
                checks.assert_pipeline_code(code, "train_ds", "train")


def _trained_fit_model(tmp_path: Path) -> dict:
    """A small model trained 8 optimizer steps and saved as fit_model.keras in `tmp_path`: the
    probe's facts of it as `fit_model`."""
    import keras
    import numpy as np

    from course_tools.grade.core import probe

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.Adam(), loss="mse")
    rng = np.random.default_rng(0)
    model.fit(rng.random((32, 4)), rng.random((32, 3)), batch_size=8, epochs=2, verbose=0)
    model.save(tmp_path / "fit_model.keras")
    checks.clear_cache()
    return probe.collect({"fit_model": model}, models=["fit_model"])


def test_a_written_step_count_costs_what_a_copy_costs_and_the_reading_only_reports(tmp_path):
    """Red team 17a's assign-steps (weights copied into `fit_model`, then its step count) lost
    only question 2's scope point, where weights copied in with `set_weights` lose every point
    resting on `own_model`: `own_model`, given the grader's observations, fails on a written
    count too, naming the cell. The solution's code passes, and without observations (the
    solution's own kernel) the check is skipped. The reading reports facts
    (`TrainingProblem`), never raises: the words are the checks'."""
    found = _trained_fit_model(tmp_path)
    anchor = 'fit_model.save(ARTIFACTS / "fit_model.keras")'
    written = _solution({anchor: f"fit_model.optimizer.iterations.assign(48)\n{anchor}"})
    cell = _cell_of(written, anchor)
    with pytest.raises(
        checks.CheckError,
        match=rf"writes the optimizer step count of `fit_model` \(cell \[{cell}\]: "
        r"`fit_model.optimizer.iterations.assign\(48\)`\): .*not the model trained",
    ):
        checks.own_model(tmp_path, "fit_model", found, written)
    checks.own_model(tmp_path, "fit_model", found, _solution())
    checks.own_model(tmp_path, "fit_model", found)
    with pytest.raises(checks.CheckError, match="optimizer's step count"):
        checks.assert_created_in_scope(written, "fit_model")
    checks.clear_cache()
    unfit = _solution(
        {FIT: "print(train_ds, epochs", "single_model.fit(train_ds": "print(train_ds"}
    )
    places, problems = reading.Code.of(unfit).training_places("train_ds")
    assert [p.kind for p in problems] == ["no_fit"], problems
    assert "checks" not in {
        node.module.rsplit(".", 1)[-1]
        for node in ast.walk(ast.parse(Path(reading.__file__).read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
    }


def test_writes_to_the_optimizers_variables_through_a_loop_are_a_copy_and_reads_are_not():
    """`for v in fit_model.optimizer.variables: v.assign(...)` wrote the step count past the
    reading: a write to a variable reached from the model's optimizer through a loop or a
    comprehension (or given to a function that writes it) is a written count. Reading the count
    (`int(...)`, the variables' names) and writing another model's or the learning rate are not."""
    anchor = 'fit_model.save(ARTIFACTS / "fit_model.keras")'
    for line in (
        "for v in fit_model.optimizer.variables:\n    v.assign(tf.zeros_like(v) + 48)",
        "[v.assign(48) for v in fit_model.optimizer.variables if 'iteration' in v.name]",
        "for i, v in enumerate(fit_model.optimizer.variables):\n    v.assign_add(0 * i)",
        "held = fit_model.optimizer.variables\nfor v in held:\n    v.assign(48)",
        "tf.compat.v1.assign(fit_model.optimizer.iterations, 48)",
        "keras.ops.assign(fit_model.optimizer.iterations, 48)",
        "fit_model.optimizer.set_weights(one.optimizer.get_weights())",
    ):
        code = _solution({anchor: f"{line}\n{anchor}"})
        cell = _cell_of(code, anchor)
        assert reading.Code.of(code).step_assignments("fit_model"), line
        with pytest.raises(checks.CheckError, match=rf"step count \(cell \[{cell}\]: "):
            checks.assert_created_in_scope(code, "fit_model")
    for line in (
        "print(int(fit_model.optimizer.iterations))",
        "for v in fit_model.optimizer.variables:\n    print(v.name, v.shape)",
        "fit_model.optimizer.learning_rate.assign(1e-3)",
        "for v in single_model.optimizer.variables:\n    v.assign(v * 0)",
        "for w in fit_model.trainable_variables:\n    print(w.shape)",
    ):
        code = _solution({anchor: f"{line}\n{anchor}"})
        assert not reading.Code.of(code).step_assignments("fit_model"), line
        checks.assert_created_in_scope(code, "fit_model")


def test_a_method_name_that_is_not_written_out_fails_question_1_as_unreadable():
    """Red team 18a's route: `getattr(fit_model, "fi" + "t")(...)` trains on a pipeline of its
    own beside a decoy `fit_model.fit(train_ds, epochs=0)`. A `getattr` of a model or strategy by
    a name that is not a constant, `methodcaller`/`attrgetter` by such a name, and a call the
    reading cannot resolve that is given the training examples fail question 1 saying what to
    write; `getattr` of a module, or of a model by a written-out name, and calling the model on
    a batch, pass."""
    bad = "train_cached.batch(GLOBAL_BATCH)"
    decoy = "fit_model.fit(train_ds, epochs=0)\n    "
    for change, words in [
        ({FIT: f'{decoy}getattr(fit_model, "fi" + "t")({bad}, epochs'}, "not written out"),
        ({FIT: f'{decoy}k = "fit"\n    getattr(fit_model, k)({bad}, epochs'}, "not written out"),
        (
            {FIT: f'{decoy}getattr(globals()["fit_model"], "f" + "it")({bad}, epochs'},
            r"through exec/eval/globals\(\)",
        ),
        (
            {
                FIT: f"{decoy}import operator\n    "
                f'operator.methodcaller("fi" + "t", {bad})(fit_model'
            },
            "not written out",
        ),
        (
            {
                FIT: f'{decoy}go = vars(type(fit_model))["fi" + "t"]\n    '
                f"go(fit_model, {bad}, epochs"
            },
            r"through exec/eval/globals\(\)",
        ),
    ]:
        code = _solution(change)
        with pytest.raises(checks.CheckError, match=rf"{words} \(cell \[\d+\]: `.*write "):
            checks.assert_pipeline_code(code, "train_ds", "train")
    anchor = 'fit_model.save(ARTIFACTS / "fit_model.keras")'
    for line in (
        'rate = getattr(keras.optimizers, "Adam" if True else "SGD")',
        'print(getattr(fit_model, "name"))',
        "images, labels = next(iter(train_ds))\nprint(fit_model(images).shape)",
        "show = lambda ds: print(ds.element_spec)\nshow(train_ds)",
    ):
        checks.assert_pipeline_code(_solution({anchor: f"{line}\n{anchor}"}), "train_ds", "train")
    saved = 'custom_model.save(ARTIFACTS / "custom_model.keras")'
    wrapped = "tf.function(distributed_train_step)(next(iter(train_dist)))"
    checks.assert_pipeline_code(_solution({saved: f"{wrapped}\n{saved}"}), "train_ds", "train")


def test_the_baselines_own_pipeline_is_question_4s_matter_not_question_1s():
    """Review s6-revB14 F1: a one-device baseline trained on a correctly shuffled pipeline of
    its own, not `train_ds`, lost question 1 (whose `train_ds` was right) while question 4,
    which asks for "the same train_ds", kept its point. Question 4's code check now names its
    instruction, and question 1 judges `train_ds` and the distributed runs' calls. A baseline
    that is another name for the distributed model stays question 1's."""
    own = "single_ds = train_examples.shuffle(5000).batch(GLOBAL_BATCH)\n"
    single = "single_model.fit(train_ds"
    code = _solution({single: f"{own}single_model.fit(single_ds"})
    checks.assert_pipeline_code(code, "train_ds", "train")
    cell = _cell_of(code, "single_model.fit(single_ds")
    with pytest.raises(
        checks.CheckError,
        match=rf"question 4 asks for the one-device baseline trained on the same `train_ds` .*"
        rf"\(cell \[{cell}\]: `single_model.fit\(single_ds.*write `single_model.fit\(train_ds",
    ):
        checks.assert_baseline_code(code, "single_model", "train_ds")
    checks.assert_baseline_code(_solution(), "single_model", "train_ds")
    checks.assert_baseline_code(None, "single_model", "train_ds")
    with pytest.raises(checks.CheckError, match="finds no `single_model.fit"):
        checks.assert_baseline_code(
            _solution({single: "print(train_ds"}), "single_model", "train_ds"
        )
    alias = _solution(
        {"single_model = make_model()": "single_model = fit_model", single: f"{own}{single}"}
    )
    checks.assert_pipeline_code(alias, "train_ds", "train")
    aliased = _solution(
        {
            "single_model = make_model()": "single_model = fit_model",
            single: f"{own}single_model.fit(single_ds",
        }
    )
    with pytest.raises(checks.CheckError, match=r"other than `train_ds` \(cell \[\d+\]: `single"):
        checks.assert_pipeline_code(aliased, "train_ds", "train")


def test_a_cell_number_in_a_message_is_the_cells_execution_count_in_the_executed_notebook():
    """A student finds the cell a message names: "cell [N]" is the `In [N]` the executed
    notebook shows beside it (the grader's run numbers the code cells that hold code, an empty
    one left out; markdown cells are not counted), not the cell's index in the file nor its
    place among the code cells. The runner's notes (a cell's error, its outputs cut) are said
    the same way in the report."""
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# Title"),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell(""),
        nbformat.v4.new_markdown_cell("Some words."),
        nbformat.v4.new_code_cell("  \n"),
        nbformat.v4.new_code_cell(
            "class Count:\n    def assign(self, value):\n        self.value = value\n\n\n"
            "class Optimizer:\n    iterations = Count()\n\n\n"
            "class Model:\n    optimizer = Optimizer()\n\n\nfit_model = Model()"
        ),
        nbformat.v4.new_code_cell("print(fit_model.optimizer)"),
        nbformat.v4.new_code_cell("fit_model.optimizer.iterations.assign(48)"),
    ]
    NotebookClient(notebook, timeout=60, kernel_name="python3").execute()
    shown = {cell.source: cell.get("execution_count") for cell in notebook.cells}
    observed = {
        "cells": [{"source": c.source} for c in notebook.cells if c.cell_type == "code"],
        "files": {},
    }
    said = checks.CheckError
    with pytest.raises(said, match=r"step count \(cell \[(\d+)\]: ") as error:
        checks.assert_created_in_scope(observed, "fit_model")
    number = int(re.search(r"cell \[(\d+)\]", str(error.value))[1])
    assert number == shown[notebook.cells[-1].source] == 4, (number, shown)
    # the run's own notes (the runner counts cells by their index in the file) say the same
    last = len(notebook.cells) - 1
    said = one_submission._numbered(f"cell {last}: NameError: name 'x' is not defined", notebook)
    assert said == "cell [4]: NameError: name 'x' is not defined", said
    assert one_submission._numbered("cell 2 ignored the interrupt", notebook) == (
        "cell 2 ignored the interrupt"  # an empty cell never runs: it has no number
    )


def test_train_ds_bound_otherwise_than_by_an_assignment_fails_question_1_naming_the_cell():
    """Red team 18a's shadow and param-shadow give every training call the bare name `train_ds`,
    bound by a comprehension (or a function's parameter) to an unshuffled pipeline while the
    global one stays shuffled: the reading read the global one, and so did the probe. A
    `train_ds` bound by anything but an assignment outside any function (a comprehension's or
    a loop's variable, `with ... as`, a function's or lambda's parameter, `global`, a local
    assignment) fails question 1 as unreadable, naming its cell and what to write."""
    plain = "train_cached.batch(GLOBAL_BATCH)"
    inline = [
        f"[fit_model.fit(train_ds, epochs=1) for train_ds in [{plain}]]",
        f"for train_ds in [{plain}]:\n        fit_model.fit(train_ds, epochs=1)",
        f"with contextlib.nullcontext({plain}) as train_ds:\n        fit_model.fit(train_ds)",
        f"(lambda train_ds: fit_model.fit(train_ds, epochs=1))({plain})",
    ]
    helpers = [
        "def train_with_fit(model, train_ds, callbacks):\n"
        "    return model.fit(train_ds, epochs=EPOCHS, callbacks=callbacks, verbose=2)\n",
        f"def remake():\n    global train_ds\n    train_ds = {plain}\n",
        f"def remake():\n    train_ds = {plain}\n    return fit_model.fit(train_ds)\n",
    ]
    cases = [({FIT: f"{line}\n    {FIT}"}, (), line) for line in inline]
    cases += [({}, (helper,), helper) for helper in helpers]
    for changes, added, line in cases:
        code = _solution(changes, added)
        cell = _cell_of(code, line.split("\n")[0])
        with pytest.raises(
            checks.CheckError,
            match=rf"binds `train_ds` otherwise than by an assignment outside any function "
            rf"\(cell \[{cell}\]: `.*bind `train_ds` only with `train_ds = \.\.\.`",
        ):
            checks.assert_pipeline_code(code, "train_ds", "train")
    # a plain rebinding in a loop's body, or a walrus, is an assignment the reading follows
    rebound = "for _ in range(1):\n    train_ds = train_ds.prefetch(1)\n"
    checks.assert_pipeline_code(_solution({}, (rebound,)), "train_ds", "train")


def test_a_distributed_dataset_not_tied_to_the_test_examples_is_training_on_it():
    """Red team 18a's side-load distributes `data.load("svhn_cropped", split="train")` (a second
    load the reading did not know as the training examples, spelled with a keyword) beside a
    dummy `experimental_distribute_dataset(train_ds)`: the reading skipped any distributed
    dataset it could not tie to the training examples. Now one must be tied to the test split's
    loading, or be a batch of the notebook's own tensors (the loss check's labels), else it
    fails question 1 as a dataset other than `train_ds`: so do `__import__` and a TFRecord
    file (`globals()[...]`, `vars()` and `sys.modules` fail before, as code the grader cannot
    read). The solution, a second load of the test
    split and a batch of zeros pass."""
    distributed = "strategy.experimental_distribute_dataset(side_ds)"
    for side in [
        "data.load('svhn_cropped', split='train').cache().batch(GLOBAL_BATCH)",
        "globals()['train_cached'].batch(GLOBAL_BATCH)",
        "vars()['train_' + 'cached'].batch(GLOBAL_BATCH)",
        "__import__('tensorflow_datasets').load('svhn_cropped', split='train').batch(8)",
        "sys.modules['__main__'].train_cached.batch(GLOBAL_BATCH)",
        "tf.data.TFRecordDataset('svhn.tfrecord').batch(GLOBAL_BATCH)",
        "tf.data.Dataset.from_tensors(tf.io.gfile.GFile('x.bin', 'rb').read()).batch(1)",
        "data.load('svhn_cropped', split=SPLIT).batch(GLOBAL_BATCH)",
    ]:
        line = f"side_ds = {side}"
        code = _solution({LOOP: f"{LOOP}\nimport sys\n{line}\ntrain_dist = {distributed}"})
        cell = _cell_of(code, line)
        found = rf"other than `train_ds` \(cell \[{cell}\]: `{re.escape(distributed)}"
        if re.search(r"globals|vars|sys\.modules", side):  # unreadable before all else
            found = rf"through exec/eval/globals\(\) \(cell \[{cell}\]: `side_ds = "
        with pytest.raises(checks.CheckError, match=found):
            checks.assert_pipeline_code(code, "train_ds", "train")
    for side in [
        "data.load('svhn_cropped', split='test').batch(GLOBAL_BATCH)",
        "test_ds.take(2)",
        "tf.data.Dataset.from_tensor_slices(tf.zeros(8)).batch(4)",
    ]:
        code = _solution({LOOP: f"{LOOP}\nside_ds = {side}\nlooked = {distributed}"})
        checks.assert_pipeline_code(code, "train_ds", "train")


def test_honest_spellings_of_a_whole_set_buffer_are_read_and_a_helpers_dataset_followed():
    """Red team 18a's honest-card, honest-slices-len, honest-pick, honest-tuple and
    honest-helper lost question 1 as unread: TensorFlow's `tf.data.experimental.cardinality`,
    `len` of arrays taken from the loaded examples in one batch, the course's own
    `settings.pick(full=..., quick=...)` (read at its smallest argument), a tuple assignment of
    constants, and a helper whose dataset parameter has another name, called with `train_ds`
    every time. Each passes; the same forms below 1,000, a `pick` of the notebook's own, and a
    helper also called with another dataset do not."""
    arrays = "images, labels = next(iter(train_examples.batch(NUM_TRAIN)))"
    passing = [
        ("tf.data.experimental.cardinality(train_examples)", ()),
        ("len(images)", (arrays,)),
        ("SHUFFLE_BUFFER", ("SHUFFLE_BUFFER = settings.pick(full=10_000, quick=2_000)",)),
        ("SHUFFLE_BUFFER", ("SHUFFLE_BUFFER, SEED = 10_000, 42",)),
        ("BUFFER", ("BUFFER, _ = 10_000, 0",)),
    ]
    for buffer, added in passing:
        code = _solution({SHUFFLED: f"train_cached.shuffle({buffer})"}, added)
        checks.assert_pipeline_code(code, "train_ds", "train")
    for buffer, added, words in [
        ("SHUFFLE_BUFFER", ("SHUFFLE_BUFFER = settings.pick(full=10_000, quick=256)",), "below"),
        ("SHUFFLE_BUFFER", ("SHUFFLE_BUFFER, SEED = 512, 42",), "below"),
        (
            "SHUFFLE_BUFFER",
            (
                "class Mine:\n    def pick(self, **sizes):\n        return 8\n",
                "SHUFFLE_BUFFER = Mine().pick(full=10_000, quick=2_000)",
            ),
            "cannot read",
        ),
        ("len(images)", ("images, labels = next(iter(train_examples.batch(256)))",), "cannot"),
    ]:
        code = _solution({SHUFFLED: f"train_cached.shuffle({buffer})"}, added)
        with pytest.raises(checks.CheckError, match=f"buffer (the grader )?{words}"):
            checks.assert_pipeline_code(code, "train_ds", "train")
    helpers = (
        "def train_with_fit(model, dataset, callbacks):\n"
        "    return model.fit(dataset, epochs=EPOCHS, callbacks=callbacks, verbose=2)\n",
        "def distribute(dataset):\n    return strategy.experimental_distribute_dataset(dataset)\n",
    )
    fit = (
        "fit_model.fit(train_ds, epochs=EPOCHS, callbacks=[fit_clock, fit_checkpoints], verbose=2)"
    )
    through = {fit: "train_with_fit(fit_model, train_ds, [fit_clock, fit_checkpoints])"}
    through[LOOP] = "distribute(dataset=train_ds)"
    checks.assert_pipeline_code(_solution(through, helpers), "train_ds", "train")
    other = "train_with_fit(fit_model, train_cached.batch(GLOBAL_BATCH), [])"
    code = _solution({**through, LOOP: f"distribute(train_ds)\n{other}"}, helpers)
    with pytest.raises(
        checks.CheckError, match=r"other than `train_ds` \(cell \[\d+\]: `model.fit"
    ):
        checks.assert_pipeline_code(code, "train_ds", "train")


def test_the_count_of_the_training_examples_is_the_whole_loaded_split_by_the_builtin_len():
    """Red team 18a's buf-load shuffles with `len(data.load(..., limit=256))`, a count of any
    load: the count of the training examples is now the count of the training split loaded
    whole (no `limit=`, not the test split, a data set loader's and not `json.load`), through
    the builtin `len` (not one the notebook defines), with the name's assignment in force at the
    shuffle (not a later one). Each of those fails question 1 as unread; the whole split passes."""
    for buffer, added in [
        ("len(data.load('svhn_cropped', 'train', limit=256))", ()),
        ("len(data.load('svhn_cropped', 'test'))", ()),
        ("len(data.load('svhn_cropped', 'train[:256]'))", ()),
        ("len(json.load(open(ARTIFACTS / 'order.json')))", ()),
        ("len(train_examples)", ("def len(examples):\n    return 128\n",)),
        ("len(few)", ("few = train_cached.take(256)",)),
    ]:
        code = _solution({SHUFFLED: f"train_cached.shuffle({buffer})"}, added)
        if buffer == "len(few)":  # bound to the whole split only after the shuffle
            code["cells"].append({"source": "few = data.load('svhn_cropped', 'train')"})
        with pytest.raises(checks.CheckError, match="a buffer the grader cannot read"):
            checks.assert_pipeline_code(code, "train_ds", "train")
    for buffer in (
        "len(data.load('svhn_cropped', 'train'))",
        "len(data.load('svhn_cropped', split='train'))",
    ):
        code = _solution({SHUFFLED: f"train_cached.shuffle({buffer})"})
        checks.assert_pipeline_code(code, "train_ds", "train")


def test_a_helper_given_the_baseline_and_train_ds_trains_the_baseline_on_train_ds():
    """Red team 18a's honest-helper fits every model through `train_with_fit(model, dataset,
    callbacks)`, the baseline too, always with `train_ds`: question 4 found no
    `single_model.fit(train_ds)` and failed. A helper of the notebook's own given the baseline
    and the bare `train_ds` is that call; given the baseline and another dataset, it fails
    naming the call."""
    helper = (
        "def train_with_fit(model, dataset, callbacks):\n"
        "    return model.fit(dataset, epochs=EPOCHS, callbacks=callbacks, verbose=2)\n"
    )
    baseline = "single_model.fit(train_ds, epochs=EPOCHS, callbacks=[single_clock], verbose=2)"
    for dataset, passes in [("train_ds", True), ("train_cached.batch(GLOBAL_BATCH)", False)]:
        code = _solution(
            {baseline: f"train_with_fit(single_model, {dataset}, [single_clock])"}, (helper,)
        )
        if passes:
            checks.assert_baseline_code(code, "single_model", "train_ds")
        else:
            with pytest.raises(
                checks.CheckError, match=r"trains `single_model` on something else \(cell \[\d+\]"
            ):
                checks.assert_baseline_code(code, "single_model", "train_ds")


#: Red team 19a's zero-steps: fit_model's own (mirrored) optimizer stepped with zero gradients
#: until its count is the file's, its weights another model's.
IDLE = (
    "with strategy.scope():\n"
    "    fit_model.optimizer.build(fit_model.trainable_variables)\n\n\n"
    "@tf.function\ndef idle_step():\n    strategy.run(\n"
    "        lambda: fit_model.optimizer.apply_gradients(\n"
    "            zip([tf.zeros_like(v) for v in fit_model.trainable_variables], "
    "fit_model.trainable_variables)\n        )\n    )\n\n\n"
    "for _ in range(48):\n    idle_step()\n"
)
#: The solution's compile of fit_model, with its optimizer made in the call.
ADAM = "optimizer=keras.optimizers.Adam(),"


def test_steps_of_a_fit_models_optimizer_outside_fit_cost_what_a_copy_costs(tmp_path):
    """Red team 19a's zero-steps (12/12): the reading saw no write to the step count, yet
    `apply_gradients` of zeros made it. Reaching a stepping method of the optimizer of a model
    graded as trained by `fit` (on `fit_model.optimizer`, an alias, the object given to
    `compile`, inside Keras's LossScaleOptimizer, a helper's parameter, `getattr`, under
    `strategy.run` in a tf.function) costs what a written count costs: `own_model` and the
    scope point fail naming the cell. The custom loop's `optimizer.apply_gradients` on its own
    optimizer, and another model's, do not count."""
    anchor = 'fit_model.save(ARTIFACTS / "fit_model.keras")'
    found = _trained_fit_model(tmp_path)
    zeros = "zip([tf.zeros_like(v) for v in fit_model.trainable_variables], weights)"
    for changes in [
        {anchor: f"{IDLE}{anchor}"},
        {anchor: f"fit_model.optimizer.apply({zeros})\n{anchor}"},
        {anchor: f"fit_model.optimizer.update_step(g, v, 0.1)\n{anchor}"},
        {anchor: f"fit_model.optimizer.stateless_apply(state, g, v)\n{anchor}"},
        {anchor: f"opt = fit_model.optimizer\nopt.apply_gradients({zeros})\n{anchor}"},
        {anchor: f"step = fit_model.optimizer.apply_gradients\nstep({zeros})\n{anchor}"},
        {anchor: f'getattr(fit_model.optimizer, "apply_gradients")({zeros})\n{anchor}'},
        {anchor: f"fit_model.optimizer.inner_optimizer.apply({zeros})\n{anchor}"},
        {
            ADAM: "optimizer=fit_adam,",
            "with strategy.scope():\n    fit_model": "with strategy.scope():\n"
            "    fit_adam = keras.optimizers.Adam()\n    fit_model",
            anchor: f"fit_adam.apply_gradients({zeros})\n{anchor}",
        },
        {
            ADAM: "optimizer=keras.optimizers.LossScaleOptimizer(inner),",
            "with strategy.scope():\n    fit_model": "with strategy.scope():\n"
            "    inner = keras.optimizers.Adam()\n    fit_model",
            anchor: f"strategy.run(lambda: inner.apply_gradients({zeros}))\n{anchor}",
        },
        {
            anchor: f"def idle(opt):\n    opt.apply_gradients({zeros})\n\n\n"
            f"idle(fit_model.optimizer)\n{anchor}"
        },
        {anchor: f"for m in [fit_model]:\n    m.optimizer.apply_gradients({zeros})\n{anchor}"},
        {anchor: f"o = (lambda: fit_model.optimizer)()\no.apply_gradients({zeros})\n{anchor}"},
        {
            anchor: "class Idle(keras.callbacks.Callback):\n    def on_test_end(self, logs=None):\n"
            f"        self.model.optimizer.apply_gradients({zeros})\n\n\n"
            f"fit_model.evaluate(test_ds, callbacks=[Idle()])\n{anchor}"
        },
    ]:
        code = _solution(changes)
        cell = _cell_of(code, anchor)
        with pytest.raises(
            checks.CheckError,
            match=rf"steps the optimizer of `fit_model` outside fit \(cell \[{cell}\]: `.*"
            r"train fit_model with fit only",
        ):
            checks.own_model(tmp_path, "fit_model", found, code)
        with pytest.raises(
            checks.CheckError,
            match=rf"with steps of its optimizer outside fit \(cell \[{cell}\]: ",
        ):
            checks.assert_created_in_scope(code, "fit_model")
        checks.clear_cache()
    for line in (
        "single_model.optimizer.apply_gradients(pairs)",
        "print(fit_model.optimizer.iterations.numpy(), fit_model.optimizer.learning_rate)",
        "train_ds.apply(tf.data.experimental.assert_cardinality(NUM_TRAIN))",
    ):
        code = _solution({anchor: f"{line}\n{anchor}"})
        checks.own_model(tmp_path, "fit_model", found, code)
        checks.assert_created_in_scope(code, "fit_model")
        checks.clear_cache()
    solution = _solution()
    assert reading.Code.of(solution).hand_steps("custom_model") == []
    checks.assert_created_in_scope(solution, "custom_model")
    assert reading.Code.of(solution).hand_steps("fit_model") == []


def test_a_dynamic_binding_makes_every_point_the_reading_decides_unreadable():
    """Red team 19a's glob-item, glob-update and exec-str (12/12) bound `train_ds` to an
    unshuffled pipeline through `globals()` or `exec` for training, then back: the reading
    never saw the binding. exec, eval, the builtin compile, `globals()`, `vars()`, `locals()`,
    `__builtins__` and `sys.modules[...]` anywhere now fail every point the reading decides,
    naming the cell and saying what to write. The solution and the exercise use none but a
    membership test (`name not in globals()`, `"google.colab" in sys.modules`): they pass."""
    fit = "with timing.Timer() as fit_timer:"
    unshuffled = "train_cached.batch(GLOBAL_BATCH)"
    for line in (
        f'globals()["train_ds"] = {unshuffled}',
        f"globals().update(train_ds={unshuffled})",
        f'exec("train_ds = {unshuffled}")',
        f'vars()["train_ds"] = {unshuffled}',
        f'locals()["train_ds"] = {unshuffled}',
        'eval(compile("train_ds", "<x>", "eval"))',
        f'__builtins__.exec("train_ds = {unshuffled}")',
        f'import builtins\nbuiltins.exec("train_ds = {unshuffled}")',
        f'import sys\nsys.modules["__main__"].train_ds = {unshuffled}',
        "from builtins import exec as run_code\nrun_code('x = 1')",
        "namespace = globals()",
        f"import __main__\n__main__.train_ds = {unshuffled}",
        f'import sys\nsys.modules.get("__main__").train_ds = {unshuffled}',
        f'import sys\nsys._getframe(0).f_globals["train_ds"] = {unshuffled}',
    ):
        code = _solution({fit: f"{line}\n{fit}"})
        cell = _cell_of(code, fit)
        said = rf"cannot read code run through exec/eval/globals\(\) \(cell \[{cell}\]: `"
        for check in (
            lambda code=code: checks.assert_pipeline_code(code, "train_ds", "train"),
            lambda code=code: checks.assert_pipeline_code(code, "test_ds", "test"),
            lambda code=code: checks.assert_baseline_code(code, "single_model", "train_ds"),
            lambda code=code: checks.assert_created_in_scope(code, "fit_model"),
            lambda code=code: checks.assert_loss_code(code),
        ):
            with pytest.raises(checks.CheckError, match=rf"{said}.*write the assignment out"):
                check()
        checks.clear_cache()
    exercise = SOLUTION.parent.parent / "exercises" / "05_svhn_exercise.ipynb"
    for notebook in (SOLUTION, exercise):
        cells = [
            {"source": cell.source}
            for cell in nbformat.read(notebook, as_version=4).cells
            if cell.cell_type == "code" and "HIDDEN" not in cell.source
        ]
        assert "not in globals()" in "".join(c["source"] for c in cells)
        checks.assert_readable({"cells": cells, "files": {}})
    checks.assert_pipeline_code(_solution(), "train_ds", "train")
    honest = (
        "from re import compile\nDIGITS = compile(r'[0-9]+')\nprint('google.colab' in sys.modules)"
    )
    checks.assert_readable(_solution({}, (f"import sys\n{honest}",)))


#: Red team 19a's decorator, which swaps the dataset a helper is given for an unshuffled one.
PLAIN = (
    "def plain(f):\n    return lambda model, ds, callbacks: f(model, "
    "train_cached.batch(GLOBAL_BATCH), callbacks)\n\n\n"
)
TRAIN = (
    "def train(model, ds, callbacks):\n"
    "    return model.fit(ds, epochs=EPOCHS, callbacks=callbacks, verbose=2)\n\n\n"
)
BASELINE = "single_model.fit(train_ds, epochs=EPOCHS, callbacks=[single_clock], verbose=2)"


def test_a_helper_with_a_decorator_or_bound_again_is_not_followed():
    """Red team 19a's decor-all and decor-base (12/12): `@plain` replaced the followed helper
    with one that trains on an unshuffled pipeline. A helper with a decorator other than
    tf.function, or whose name is bound again after its def, is not followed: given the
    training examples it fails question 1, given the baseline question 4, naming the cell.
    Undecorated (or `@tf.function`), or the same def written twice, it is followed."""
    fit = FIT + "=EPOCHS, callbacks=[fit_clock, fit_checkpoints], verbose=2)"
    call = "train(fit_model, train_ds, [fit_clock, fit_checkpoints])"
    for helper in (f"{PLAIN}@plain\n{TRAIN}", f"{TRAIN}train = train\n"):
        code = _solution({fit: call, BASELINE: "train(single_model, train_ds, [single_clock])"})
        code["cells"].insert(1, {"source": helper})
        with pytest.raises(
            checks.CheckError,
            match=r"gives the training examples to a function the grader does not follow "
            r"\(cell \[\d+\]: `def train\(...\)`",
        ):
            checks.assert_pipeline_code(code, "train_ds", "train")
        with pytest.raises(
            checks.CheckError,
            match=r"trains `single_model` through a function the grader does not follow "
            r"\(cell \[\d+\]: `train\(single_model, train_ds",
        ):
            checks.assert_baseline_code(code, "single_model", "train_ds")
    base = _solution(
        {BASELINE: "train(single_model, train_ds, [single_clock])"}, (f"{PLAIN}@plain\n{TRAIN}",)
    )
    checks.assert_pipeline_code(base, "train_ds", "train")  # the baseline's: question 4's
    with pytest.raises(checks.CheckError, match="does not follow"):
        checks.assert_baseline_code(base, "single_model", "train_ds")
    for helper in (TRAIN, f"@tf.function\n{TRAIN}", f"{TRAIN}{TRAIN}"):
        code = _solution(
            {fit: call, BASELINE: "train(single_model, train_ds, [single_clock])"}, (helper,)
        )
        checks.assert_pipeline_code(code, "train_ds", "train")
        checks.assert_baseline_code(code, "single_model", "train_ds")


def test_the_custom_loop_must_iterate_the_distributed_train_ds():
    """Red team 19a's loop-undist (12/12) fed `distributed_train_step` from
    `train_cached.batch(GLOBAL_BATCH)`, not distributed and not shuffled, and extended-priv
    from `strategy.extended._experimental_distribute_dataset(...)`: the loop that feeds
    `strategy.run` (directly, or through the step function) must iterate a distributed
    dataset, and a private API, or `strategy.extended`, is unreadable. Each fails question 1
    naming the cell. Iterating `train_dist` by `iter`/`next`, a helper that distributes, and
    notebook 1's `strategy.extended.worker_devices` pass."""
    loop = "for batch in train_dist:"
    for changes, words in [
        ({loop: "for batch in train_cached.batch(GLOBAL_BATCH):"}, "not distributed"),
        ({loop: "for batch in train_ds:"}, "not distributed"),
        (
            {
                loop: "it = iter(train_cached.batch(GLOBAL_BATCH))\n        "
                "for _ in range(len(train_dist)):\n            batch = next(it)"
            },
            "not distributed",
        ),
        (
            {
                "distributed_train_step(batch)": "strategy.reduce('SUM', strategy.run(train_step, "
                "args=(next(iter(train_ds)),)), axis=None)"
            },
            "not distributed",
        ),
        (
            {
                LOOP: f"{LOOP}\ntrain_dist = strategy.extended._experimental_distribute_dataset("
                "train_cached.batch(GLOBAL_BATCH), None)"
            },
            r"private API \(cell \[\d+\]: `train_dist = strategy.extended._experimental",
        ),
        (
            {
                loop: "step = lambda b: strategy.run(train_step, args=(b,))\n        "
                "for batch in train_cached.batch(GLOBAL_BATCH):\n            step(batch)"
            },
            "not distributed",
        ),
        (
            {
                loop: "for batch in train_ds:\n            "
                "tf.function(distributed_train_step)(batch)"
            },
            "not distributed",
        ),
        ({LOOP: f"{LOOP}\nprint(train_ds._variant_tensor)"}, "private API"),
        ({LOOP: f"{LOOP}\nextended = strategy.extended"}, "use the public tf.distribute API"),
    ]:
        code = _solution(changes)
        cell = _cell_of(code, next(iter(changes.values())).split("\n")[-1])
        with pytest.raises(checks.CheckError, match=words) as raised:
            checks.assert_pipeline_code(code, "train_ds", "train")
        assert f"cell [{cell}]" in str(raised.value), (changes, raised.value)
    for changes in [
        {loop: "it = iter(train_dist)\n        for _ in range(3):\n            batch = next(it)"},
        {
            loop: "for images, labels in train_dist:\n            "
            "strategy.run(train_step, args=((images, labels),))\n            "
            "batch = (images, labels)"
        },
        {loop: "for step, batch in enumerate(train_dist):"},
        {
            f"train_dist = {LOOP}": "def distribute(ds):\n    return strategy."
            "experimental_distribute_dataset(ds)\n\n\ntrain_dist = distribute(train_ds)\n"
            "test_dist = distribute(test_ds)"
        },
        {LOOP: f"{LOOP}\nprint(list(strategy.extended.worker_devices))"},
    ]:
        checks.assert_pipeline_code(_solution(changes), "train_ds", "train")
    own = "class Clock:\n    def __init__(self):\n        self._start = 0\n\n    def tick(self):\n"
    own += "        return self._start\n\n\nmine = Clock()\nprint(mine._start)\n"
    checks.assert_pipeline_code(_solution({}, (own,)), "train_ds", "train")


def test_honest_helpers_named_after_train_ds_or_given_both_splits_pass():
    """Red team 19a's honest refactors lost question 1: `def distribute(ds)` called with
    `train_ds` and with `test_ds` (each call is read: one gives the training examples by name,
    the other the test set), and `def train_with_fit(model, train_ds, callbacks)` always called
    with the global `train_ds` (a parameter that is the global at every call). Called once with
    something else, each still fails. A loop over the models for the baseline fails question 4
    saying what to write."""
    fit = FIT + "=EPOCHS, callbacks=[fit_clock, fit_checkpoints], verbose=2)"
    helper = (
        "def train_with_fit(model, train_ds, callbacks):\n"
        "    return model.fit(train_ds, epochs=EPOCHS, callbacks=callbacks, verbose=2)\n"
    )
    code = _solution({fit: "train_with_fit(fit_model, train_ds, [fit_clock, fit_checkpoints])"})
    code["cells"].insert(1, {"source": helper})
    checks.assert_pipeline_code(code, "train_ds", "train")
    code = _solution(
        {
            fit: "train_with_fit(fit_model, train_ds, [fit_clock, fit_checkpoints])",
            BASELINE: "train_with_fit(single_model, train_cached.batch(64), [single_clock])",
        },
        (helper,),
    )
    with pytest.raises(checks.CheckError, match="binds `train_ds` otherwise"):
        checks.assert_pipeline_code(code, "train_ds", "train")
    distribute = "def distribute(ds):\n    return strategy.experimental_distribute_dataset(ds)\n"
    for other, passes in [("test_ds", True), ("train_cached.batch(GLOBAL_BATCH)", False)]:
        code = _solution(
            {
                f"train_dist = {LOOP}": f"{distribute}\n\ntrain_dist = distribute(train_ds)\n"
                f"side = distribute({other})"
            }
        )
        if passes:
            checks.assert_pipeline_code(code, "train_ds", "train")
        else:
            with pytest.raises(checks.CheckError, match="other than `train_ds`"):
                checks.assert_pipeline_code(code, "train_ds", "train")
    code = _solution(
        {BASELINE: "for model in [single_model]:\n    model.fit(train_ds, epochs=EPOCHS)"}
    )
    with pytest.raises(
        checks.CheckError, match=r"finds no `single_model.fit\(train_ds, ...\)`.*write that call"
    ):
        checks.assert_baseline_code(code, "single_model", "train_ds")


#: fit_model compiled with an optimizer named `optimizer`, the custom loop's own name for its
#: optimizer (red team 21a's honest-optname), and the baseline compiled the same way.
FIT_COMPILE = (
    "    fit_model = make_model()\n"
    "    fit_model.compile(\n        optimizer=keras.optimizers.Adam(),"
)
FIT_NAMED = (
    "    fit_model = make_model()\n    optimizer = keras.optimizers.Adam()\n"
    "    fit_model.compile(\n        optimizer=optimizer,"
)
BASE_COMPILE = (
    "single_model = make_model()\nsingle_model.compile(\n    optimizer=keras.optimizers.Adam(),"
)
BASE_NAMED = (
    "single_model = make_model()\noptimizer = keras.optimizers.Adam()\n"
    "single_model.compile(\n    optimizer=optimizer,"
)


def test_a_name_holds_fit_models_optimizer_only_until_it_is_bound_again(tmp_path):
    """Red team 21a's honest-optname (7/12) compiled fit_model with `optimizer = Adam()`, then
    bound `optimizer` again for the custom loop, as the exercise does: the loop's
    `optimizer.apply_gradients` was charged to fit_model (and to the baseline compiled the same
    way after the loop ran). A name holds the compiled optimizer from the compile to its next
    plain binding, read where the code runs (a function's body where its name is used): the
    honest notebook passes every check that reads steps; the same name stepped before it is
    bound again (at the top, in a function or a lambda called there, past an `if False:`
    binding) still fails naming the cell."""
    found = _trained_fit_model(tmp_path)
    for changes in ({FIT_COMPILE: FIT_NAMED}, {BASE_COMPILE: BASE_NAMED}):
        code = _solution({FIT_COMPILE: FIT_NAMED, BASE_COMPILE: BASE_NAMED} | changes)
        for model in ("fit_model", "single_model", "custom_model"):
            assert reading.Code.of(code).hand_steps(model) == [], (changes, model)
        checks.own_model(tmp_path, "fit_model", found, code)
        checks.assert_created_in_scope(code, "fit_model")
        checks.assert_created_in_scope(code, "custom_model")
        checks.assert_created_in_scope(code, "single_model", scoped=False)
        checks.assert_pipeline_code(code, "train_ds", "train")
        checks.assert_baseline_code(code, "single_model", "train_ds")
        checks.clear_cache()
    anchor = 'fit_model.save(ARTIFACTS / "fit_model.keras")'
    zeros = "zip([tf.zeros_like(v) for v in weights], weights)"
    for forged in (
        f"optimizer.apply_gradients({zeros})",
        f"def idle():\n    optimizer.apply_gradients({zeros})\n\n\nidle()",
        f"idle = lambda: optimizer.apply_gradients({zeros})\nidle()",
        f"strategy.run(lambda: optimizer.apply_gradients({zeros}))",
        f"if False:\n    optimizer = None\noptimizer.apply_gradients({zeros})",
    ):
        code = _solution({FIT_COMPILE: FIT_NAMED, anchor: f"{forged}\n{anchor}"})
        cell = _cell_of(code, anchor)
        with pytest.raises(
            checks.CheckError,
            match=rf"steps the optimizer of `fit_model` outside fit \(cell \[{cell}\]: "
            r"`optimizer.apply_gradients`",
        ):
            checks.own_model(tmp_path, "fit_model", found, code)
        checks.clear_cache()


FIT_CELL = "### BEGIN SOLUTION\nwith strategy.scope():\n    fit_model = make_model()"
BASE_CELL = "### BEGIN SOLUTION\nsingle_model = make_model()"
UNSHUFFLED = "_keep = train_ds\ntrain_ds = train_cached.batch(GLOBAL_BATCH)\n"


def test_the_code_of_a_time_capture_or_timeit_cell_is_read_and_other_python_magics_are_not(
    tmp_path,
):
    """Red team 21a's magic-rebind and magic-steps (12/12): the code of a `%%time` cell runs in
    the kernel, yet no point-giving reading saw it; an honest `%%time` on the fit or baseline
    cell lost 1 to 2 points ('never assigns fit_model'). The code of `%%time`, `%%capture`,
    `%%timeit` cells (and an explicit `run_cell_magic` of one) and of `%time`/`%timeit` lines
    is read as the cell's code: the honest timings pass, the forgeries fail as their plain
    versions do. Another cell magic that runs Python (`%%python`, `%%script python3`,
    `%%prun`) makes the reading's points unreadable, naming the cell; `%%writefile` and
    `%%bash` do not."""
    found = _trained_fit_model(tmp_path)
    for magic in ("%%time\n", "%%capture\n", "%%timeit -n1 -r1\n", "%%capture out\n%%time\n"):
        code = _solution({FIT_CELL: magic + FIT_CELL, BASE_CELL: magic + BASE_CELL})
        checks.assert_pipeline_code(code, "train_ds", "train")
        checks.assert_created_in_scope(code, "fit_model")
        checks.assert_baseline_code(code, "single_model", "train_ds")
        checks.own_model(tmp_path, "fit_model", found, code)
        checks.clear_cache()
    timed = "    %time fit_model.fit(train_ds, epochs"
    checks.assert_pipeline_code(_solution({f"    {FIT}": timed}), "train_ds", "train")
    restore = "train_ds = _keep\n"
    for rebind, back in [
        *[
            (magic + UNSHUFFLED, magic + restore)
            for magic in ("%%time\n", "%%capture\n", "%%timeit -n1 -r1\n")
        ],
        (
            f"get_ipython().run_cell_magic('capture', '', {UNSHUFFLED!r})",
            f"get_ipython().run_cell_magic('capture', '', {restore!r})",
        ),
    ]:
        code = _solution()
        cells = code["cells"]
        at = next(i for i, c in enumerate(cells) if BASE_CELL in c["source"])
        cells.insert(at, {"source": back})
        at = next(i for i, c in enumerate(cells) if FIT_CELL in c["source"])
        cells.insert(at, {"source": rebind})
        with pytest.raises(checks.CheckError, match="does not shuffle `train_ds`"):
            checks.assert_pipeline_code(code, "train_ds", "train")
        checks.clear_cache()
    anchor = 'fit_model.save(ARTIFACTS / "fit_model.keras")'
    for magic in ("%%time\n", "%%capture\n", "%%timeit -n1 -r1\n"):
        code = _solution()
        at = _cell_of(code, anchor)
        code["cells"].insert(at, {"source": magic + IDLE})
        with pytest.raises(
            checks.CheckError,
            match=rf"steps the optimizer of `fit_model` outside fit \(cell \[{at + 1}\]: ",
        ):
            checks.own_model(tmp_path, "fit_model", found, code)
        checks.clear_cache()
    for cell in ("%%python\nx = 1\n", "%%script python3\nx = 1\n", "%%prun\nx = 1\n"):
        code = _solution({}, (cell,))
        with pytest.raises(
            checks.CheckError,
            match=rf"cannot read the Python a cell magic runs \(cell \[{_cell_of(code, cell)}\]",
        ):
            checks.assert_pipeline_code(code, "train_ds", "train")
        checks.clear_cache()
    for cell in ("%%writefile helper.py\nx = 1\n", "%%bash\nls\n", "%%html\n<b>x</b>\n"):
        checks.assert_readable(_solution({}, (cell,)))


TRAINER = (
    "class Trainer:\n    def __init__(self, model):\n        self.model = model\n\n"
    "    def step(self, gradients):\n        self.model.optimizer.apply_gradients(\n"
    "            zip(gradients, self.model.trainable_variables)\n        )\n\n\n"
)
LOOP_STEP = "    optimizer.apply_gradients(zip(gradients, custom_model.trainable_variables))"


def test_a_class_of_the_custom_loops_own_holding_its_model_is_not_a_callback(tmp_path):
    """Red team 21a's honest-trainer (7/12): the custom loop stepped through a small class
    (`self.model.optimizer.apply_gradients`, made with `custom_model`), and any `X.model` was
    read as a callback's, charged to fit_model and the baseline. `self.model` is a model fit
    runs only in a Keras callback's methods (any spelling of its base, a subclass of the
    notebook's own callback); a class made with fit_model given (`Trainer(fit_model)`) still
    steps fit_model's optimizer, and so does a callback's `self.model`."""
    found = _trained_fit_model(tmp_path)
    built = "optimizer.build(custom_model.trainable_variables)"
    honest = {
        built: f"{built}\n    custom_model.compile(optimizer=optimizer)",
        "def train_step(inputs):": f"{TRAINER}trainer = Trainer(custom_model)\n\n\n"
        "def train_step(inputs):",
        LOOP_STEP: "    trainer.step(gradients)",
    }
    code = _solution(honest)
    for model in ("fit_model", "single_model"):
        assert reading.Code.of(code).hand_steps(model) == [], model
    checks.own_model(tmp_path, "fit_model", found, code)
    checks.assert_created_in_scope(code, "fit_model")
    checks.assert_created_in_scope(code, "single_model", scoped=False)
    anchor = 'fit_model.save(ARTIFACTS / "fit_model.keras")'
    zeros = "zip([tf.zeros_like(v) for v in weights], weights)"
    for forged in (
        f"{TRAINER}Trainer(fit_model).step(zeros)",
        f"{TRAINER.replace('self.model', 'self.net')}Trainer(model=fit_model).step(zeros)",
        "from keras.callbacks import Callback\n\n\nclass Idle(Callback):\n"
        f"    def on_test_end(self, logs=None):\n        self.model.optimizer.apply({zeros})\n"
        "\n\nclass Later(Idle):\n    pass\n\n\nfit_model.evaluate(test_ds, callbacks=[Later()])",
    ):
        code = _solution({anchor: f"{forged}\n{anchor}"})
        cell = _cell_of(code, anchor)
        with pytest.raises(
            checks.CheckError,
            match=rf"steps the optimizer of `fit_model` outside fit \(cell \[{cell}\]",
        ):
            checks.own_model(tmp_path, "fit_model", found, code)
        checks.clear_cache()


def test_a_progress_bar_or_a_slice_of_the_distributed_dataset_is_the_distributed_dataset():
    """Red team 21a's honest-tqdm (11/12): `for batch in tqdm(train_dist)` lost question 1 as
    'not distributed'. A known wrapper that yields its argument's elements (tqdm's, from
    tqdm, tqdm.auto or tqdm.notebook; `itertools.islice`; `enumerate`) of the distributed
    dataset iterates it; the same wrapper of the undistributed pipeline still fails."""
    loop = "for batch in train_dist:"
    for wrapped in (
        "from tqdm.auto import tqdm\n        for batch in tqdm(train_dist, desc='epoch'):",
        "import tqdm\n        for batch in tqdm.tqdm(train_dist):",
        "from tqdm import tqdm\n        for step, batch in enumerate(tqdm(train_dist)):",
        "import itertools\n        for batch in itertools.islice(train_dist, None):",
        "for step, batch in enumerate(train_dist, start=1):",
    ):
        checks.assert_pipeline_code(_solution({loop: wrapped}), "train_ds", "train")
    for wrapped in (
        "from tqdm.auto import tqdm\n        for batch in tqdm(train_cached.batch(GLOBAL_BATCH)):",
        "import itertools\n        for batch in itertools.islice(train_ds, None):",
    ):
        with pytest.raises(checks.CheckError, match="not distributed"):
            checks.assert_pipeline_code(_solution({loop: wrapped}), "train_ds", "train")


def test_a_model_given_to_a_helper_a_with_alias_train_on_batch_a_rate_or_a_restore_step_it(
    tmp_path,
):
    """Red team 21a's model-param, with-lr0, tob-lr0 and ckpt-restore (12/12 from weights
    trained on one device): a helper given fit_model that steps `model.optimizer`, an optimizer
    bound by `with ... as o` (or a loop's or a default's), `fit_model.train_on_batch`, its
    optimizer's learning rate set to 0 (its steps then move no weight but fill Adam's moments)
    and a `tf.train.Checkpoint` of its optimizer read or restored each cost what a written
    count costs, naming the cell. Reading the rate, a rate to train with, and the solution's
    restore of the custom loop's checkpoint into another model do not."""
    found = _trained_fit_model(tmp_path)
    anchor = 'fit_model.save(ARTIFACTS / "fit_model.keras")'
    zeros = "zip([tf.ones_like(v) for v in weights], weights)"
    for forged in (
        f"def idle_steps(model, count):\n    for _ in range(count):\n"
        f"        model.optimizer.apply_gradients({zeros})\n\n\nidle_steps(fit_model, 48)",
        "import contextlib\n\nwith contextlib.nullcontext(fit_model.optimizer) as o:\n"
        f"    o.apply_gradients({zeros})",
        f"for o in (fit_model.optimizer,):\n    o.apply_gradients({zeros})",
        f"def st(o=fit_model.optimizer):\n    o.apply_gradients({zeros})\n\n\nst()",
        "xb, yb = next(iter(train_ds))\nfit_model.train_on_batch(xb, yb)",
        "fit_model.optimizer.learning_rate.assign(0.0)",
        "fit_model.optimizer.learning_rate = 0.0",
        'tf.train.Checkpoint(optimizer=fit_model.optimizer).read("/tmp/opt/ckpt")',
        'saved = tf.train.Checkpoint(optimizer=fit_model.optimizer)\nsaved.restore("/tmp/o")',
    ):
        code = _solution({anchor: f"{forged}\n{anchor}"})
        cell = _cell_of(code, anchor)
        with pytest.raises(
            checks.CheckError,
            match=rf"steps the optimizer of `fit_model` outside fit \(cell \[{cell}\]",
        ):
            checks.own_model(tmp_path, "fit_model", found, code)
        checks.clear_cache()
    for line in (
        "print(float(fit_model.optimizer.learning_rate))",
        "single_model.optimizer.learning_rate.assign(0.0)",
        "fit_model.optimizer.learning_rate.assign(1e-4)",
    ):
        code = _solution({anchor: f"{line}\n{anchor}"})
        checks.own_model(tmp_path, "fit_model", found, code)
        checks.clear_cache()
    assert reading.Code.of(_solution()).hand_steps("fit_model") == []


def test_a_list_filled_from_the_training_pipeline_is_that_pipeline():
    """Red team 21a's loop-append (12/12): the custom loop iterated a list filled by `.append`
    in a loop over `train_cached.batch(GLOBAL_BATCH)` (undistributed, unshuffled); the reading
    followed only `plain_batches = []`. What is put into a container (`append`, `extend`, an
    item set, `+=`, and what the loop around that iterates) is part of what it is made from:
    the loop fails question 1 as 'not distributed', naming the cell."""
    loop = "for batch in train_dist:"
    filled = (
        "plain_batches = []\nfor b in train_cached.batch(GLOBAL_BATCH):\n"
        "    plain_batches.append(b)\n"
    )
    for fill, fed in [
        (filled, "for batch in plain_batches:"),
        (filled.replace(".append(b)", ".extend([b])"), "for batch in plain_batches:"),
        (
            "kept = {}\nfor i, b in enumerate(train_ds):\n    kept[i] = b\n",
            "for batch in kept.values():",
        ),
    ]:
        code = _solution({LOOP: f"{LOOP}\n{fill}", loop: fed})
        cell = _cell_of(code, fed)
        with pytest.raises(checks.CheckError, match=rf"not distributed.*cell \[{cell}\]"):
            checks.assert_pipeline_code(code, "train_ds", "train")
