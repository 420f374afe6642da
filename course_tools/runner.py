"""Execute notebooks headless with nbclient: the notebook runner of `course run` and `course grade`.

Each notebook runs in its own kernel process, in its own folder, with the environment you give,
talking to this process over Unix sockets placed next to its connection file (no TCP port).
`run_notebook` is the engine: it runs the cells one by one and can

- stop at the first error (`course run`), or run every cell whatever fails (`course grade`);
- interrupt a cell past its time limit, and kill the kernel when the interrupt is ignored (a cell
  that catches KeyboardInterrupt or blocks SIGINT) instead of letting it hold up the next cells;
- kill the kernel and everything it started past a memory or notebook time limit
  (`course_tools.processes.Watchdog`);
- cap what it keeps of the outputs (each cell, the whole notebook), with a note where it cut;
- start the kernel through a wrapper, such as the grader's bubblewrap sandbox (`wrap`).

`execute` runs a notebook file into an executed copy, as `course run` does.

Example:

    from course_tools.runner import Limits, RunOptions, execute, run_notebook
    result = execute("notebooks/01_keras_fit_mnist.ipynb", "build/01_keras_fit_mnist.ipynb",
                     env={"COURSE_PROFILE": "quick"})
    print(result.ok, result.seconds)
    outcome = run_notebook(notebook, Path("work"), env, RunOptions(limits=Limits(cell_timeout=60)))
    print(outcome.status, outcome.timed_out_cells)
"""

from __future__ import annotations

import codecs
import contextlib
import itertools
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import psutil
import zmq
import zmq.asyncio
import zmq.utils.monitor
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from tqdm.auto import tqdm

from course_tools.grade.core import files
from course_tools.processes import (
    Deadline,
    Watchdog,
    first_to_go,
    kill_tree,
)

ANSI_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")
#: The error recorded in a cell interrupted at its time limit.
CELL_TIMEOUT_ERROR = "CellTimeoutError"
#: Name of the kernelspec written for a wrapped kernel (it lives in a private folder).
WRAPPED_KERNEL = "course-wrapped-python3"
#: What `run_notebook` keeps of the kernel process's own stdout/stderr (`log_path`), in KB: a cell
#: writing to file descriptors 1 and 2 bypasses the output caps and would fill the disk.
KERNEL_LOG_KB = 1024
#: Messages from the kernel buffered per channel by this process (zmq's receive high-water mark,
#: 1000 by default): with `Limits.message_kb`, it bounds what a flooding kernel makes this process
#: hold before it reads and caps the outputs.
RECEIVE_QUEUE = 100


@dataclass(frozen=True)
class Limits:
    """What a notebook may use. Memory counts the kernel and every process it started.

    cell_timeout: seconds per cell; the cell is interrupted and later cells still run.
    timeout: seconds for the whole notebook; the kernel is killed.
    memory_mb: resident memory of the kernel and its children; the kernel is killed.
    interrupt_grace: seconds an interrupted cell has to stop before the kernel is killed.
    cell_output_kb: outputs kept per cell (the rest is dropped, with a note); an update_display
    counts once for every output it rewrites.
    notebook_output_mb: outputs kept for the whole notebook.
    disk_mb: what the files in the notebook's folder (`RunOptions.watch_folder`) may take; the
    kernel is killed past it.
    message_kb: the largest message part this process accepts from the kernel (zmq's MAXMSGSIZE,
    checked before the message is read: a parsed message takes up to ~30 times its bytes); a larger
    one closes its channel's connection: on iopub the cell's later outputs are lost (noted; the
    next cell reconnects), on shell the kernel is killed. Honest outputs (a plot's PNG) are a few
    hundred KB at most, and past `cell_output_kb` they would be dropped anyway.
    """

    cell_timeout: int = 300
    timeout: int = 1800
    memory_mb: int = 4096
    interrupt_grace: float = 5.0
    cell_output_kb: int = 512
    notebook_output_mb: int = 8
    disk_mb: int = 1024
    message_kb: int = 2048


@dataclass(frozen=True)
class RunOptions:
    """How `run_notebook` runs a notebook.

    limits: what the notebook may use (`Limits`).
    stop_on_error: stop at the first failing cell (like "Run All"); else every cell runs.
    kernel_name: the kernelspec (unless `wrap` is given).
    connection_dir: for the kernel's connection file and sockets (default: a private temporary
    folder; a sandboxed kernel needs one it can see).
    wrap: turns the kernel's command line into the one to start (e.g. `sandbox.wrap`).
    extra_cell: code run after the last cell, its stdout into `RunOutcome.extra_output`.
    first_expression: an expression evaluated as soon as the kernel starts, before the first
    cell (as the user expression of an empty execute request); its value, as text, is given to
    `extra_expressions` when that is a function (the grader's probe checks against it what the
    notebook changed).
    extra_expressions: expressions evaluated after the last cell, in order, each as the user
    expression of an empty execute request (IPython's input and AST transformers do not touch
    it), or a function of the first expression's text that gives them; the last one's value, as
    text, into `RunOutcome.extra_output`.
    progress: a progress bar's label.
    log_path: the first `KERNEL_LOG_KB` of the kernel process's own output (default: discarded).
    watch_folder: the folder whose disk use `Limits.disk_mb` caps.
    clock_folder: a folder whose files this process times itself (`FileClock`): when each one
    last changed, by its own clock, never the file's times (which the kernel can set).
    """

    limits: Limits = Limits()
    stop_on_error: bool = False
    kernel_name: str = "python3"
    connection_dir: Path | None = None
    wrap: Callable[[list[str]], list[str]] | None = None
    extra_cell: str = ""
    first_expression: str = ""
    extra_expressions: tuple[str, ...] | Callable[[str], tuple[str, ...]] = ()
    progress: str | None = None
    log_path: Path | None = None
    watch_folder: Path | None = None
    clock_folder: Path | None = None


@dataclass
class RunOutcome:
    """How the execution of one notebook went.

    status: "ran" (every cell was sent; some may have failed), "failed" (stopped at the first
    error, with `stop_on_error`), "killed" (memory, notebook time, or an interrupt-deaf cell),
    "kernel died", "could not start", "run failed" (talking to the kernel failed).
    """

    status: str
    reason: str = ""
    seconds: float = 0.0
    cell_errors: list[str] = field(default_factory=list)  # "cell 12: NameError: ..."
    timed_out_cells: list[int] = field(default_factory=list)
    deaf_cell: int | None = None  # the cell that ignored its interrupt, if one did
    output_notes: list[str] = field(default_factory=list)  # where outputs were cut
    peak_mb: float = 0.0  # the kernel's highest resident memory seen
    error: str = ""  # with stop_on_error: the failing cell's source and error
    failed_cell: int | None = None
    extra_output: str = ""  # what the `extra_cell` printed, or the `extra_expression`'s text
    extra_error: str = ""  # how the extra cell or expression failed, if it did
    log_dropped: int = 0  # bytes of the kernel's own output left out of `log_path`
    log_error: str = ""  # why `log_path` could not be written (a full disk), if it could not
    notebook: object = None  # the executed copy
    # Seen by this process, not the kernel, in seconds since the run started (this process's
    # clock): [cell index, start, end] of each cell sent, and for each file of `clock_folder`
    # {"seen": first seen, "changed": last changed, "cell": the cell running when it last changed}
    cell_times: list[list[float]] = field(default_factory=list)
    file_times: dict[str, dict] = field(default_factory=dict)
    clock_note: str = ""  # what the file clock left out (`FileClock.untracked`)

    def record_timeout(self, cell, cell_index: int, execute_reply: dict) -> None:
        """nbclient's `on_cell_error` hook: note the cells interrupted at their time limit."""
        if execute_reply.get("content", {}).get("ename") == CELL_TIMEOUT_ERROR:
            self.timed_out_cells.append(cell_index)


#: Characters a terminal acts on rather than shows (ESC starts title, clear-screen and colour
#: sequences; the C1 controls U+0080-U+009F, CSI U+009B and OSC U+009D among them, act alone in
#: xterm): written to a log as \xNN, so `cat kernel.log` shows what a kernel wrote and cannot
#: retitle the window, clear it or print a fake line. Bytes that are not UTF-8 (a lone 0x9b is
#: CSI to a terminal in 8-bit mode) are written as \xNN too.
_CONTROL = [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)]
_VISIBLE = {
    **{code: f"\\x{code:02x}" for code in _CONTROL},
    # surrogateescape's stand-ins for the bytes 0x80-0xFF that are not UTF-8
    **{0xDC00 + byte: f"\\x{byte:02x}" for byte in range(0x80, 0x100)},
}
#: Bytes that, alone, show as themselves whatever the terminal: the fast path of `visible`.
_PLAIN = re.compile(rb"[\t\n\x20-\x7e]*")


def visible(chunk: bytes, decoder: codecs.IncrementalDecoder | None = None) -> bytes:
    """`chunk` with its control characters but newline and tab (C0, DEL and C1) and its bytes
    that are not UTF-8 written as \\xNN. decoder: a UTF-8 decoder with errors "surrogateescape"
    that keeps a character cut between two chunks for the next (`CappedLog`); without one, the
    chunk is whole.

    >>> visible(b"ok\\x1b]0;title\\x07 done\\n")
    b'ok\\\\x1b]0;title\\\\x07 done\\n'
    >>> visible("\\u009b2J \\u00e9".encode() + b"\\x9d")
    b'\\\\x9b2J \\xc3\\xa9\\\\x9d'
    """
    if decoder is None:
        decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        text = decoder.decode(chunk, final=True)
    else:
        if not decoder.getstate()[0] and _PLAIN.fullmatch(chunk):
            return chunk
        text = decoder.decode(chunk)
    return text.translate(_VISIBLE).encode("utf-8", "surrogateescape")


def visible_end(decoder: codecs.IncrementalDecoder) -> bytes:
    """What `decoder` (of `visible`) still holds at the end: a character cut short, as \\xNN."""
    return decoder.decode(b"", final=True).translate(_VISIBLE).encode("utf-8", "surrogateescape")


class CappedLog(threading.Thread):
    """Copies a pipe (a kernel's stdout and stderr) into `path`, at most `limit` bytes, then a line
    saying how much was left out; the rest is read and dropped, so the writer never blocks.

    Example:

        log = CappedLog(process.stdout, Path("kernel.log"), limit=2**20)
        log.start(); process.wait(); log.join()
        print(log.dropped)  # 0 when everything fitted
    """

    def __init__(self, pipe, path: Path, limit: int, *, append: bool = False) -> None:
        super().__init__(daemon=True)
        self.pipe, self.path, self.limit = pipe, Path(path), limit
        self.mode = "ab" if append else "wb"
        self.dropped = 0
        #: the error that stopped the log being written (a full disk), or None: the pipe is
        #: drained all the same (the kernel never blocks on it)
        self.error: OSError | None = None

    def run(self) -> None:
        with self.pipe:
            try:
                out = open(self.path, self.mode)  # noqa: SIM115 - closed below, whatever happens
            except OSError as exc:
                self.error, out = exc, None
            try:
                self._copy(out)
            finally:
                if out is not None:
                    with contextlib.suppress(OSError):
                        out.close()

    def _copy(self, out) -> None:
        kept = 0
        decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")

        def chunks():
            while chunk := os.read(self.pipe.fileno(), 2**16):
                yield visible(chunk, decoder)
            yield visible_end(decoder)  # a character cut at the pipe's end, as \xNN

        for chunk in chunks():
            room = max(0, self.limit - kept) if out is not None else 0
            if room:
                try:
                    out.write(chunk[:room])
                    out.flush()
                except OSError as exc:
                    self.error, room = exc, 0
                    self.limit = kept  # nothing more is kept
            kept += min(room, len(chunk))
            self.dropped += len(chunk) - min(room, len(chunk))
        if self.dropped and out is not None and self.error is None:
            with contextlib.suppress(OSError):
                out.write(f"\n[{self.dropped:,} more bytes left out of this log]\n".encode())


#: The longest display id the grader lets nbclient keep (it keeps every id it is given, for the
#: notebook's run: 3,000 outputs with 1 MB ids each once grew the grader to 3.1 GB, red team 37a);
#: an output with a longer id is kept without it, as a plain output.
DISPLAY_ID_CHARS = 256


class _CappedClient(NotebookClient):
    """An nbclient client that keeps at most `cell_limit` bytes of outputs per cell and
    `notebook_limit` for the notebook, and remembers how much it dropped per cell; with a
    `log_path`, the kernel process's own output goes there through a `CappedLog`."""

    def __init__(
        self, *args, cell_limit: int, notebook_limit: int, log_path: Path | None, **kwargs
    ) -> None:
        super().__init__(*args, **kwargs)
        self.cell_limit, self.notebook_limit = cell_limit, notebook_limit
        self.kept = 0
        self.kept_in_cell: dict[int, int] = {}
        self.dropped: dict[int, int] = {}
        self.log_path, self.kernel_log = log_path, None
        self.display_cut = self.comm_cut = False
        self.message_cuts: list[
            int
        ] = []  # cells whose oversized output closed iopub (MessageWatch)
        self.watch: MessageWatch | None = None
        # this process's clock of the cells and files (`_run_watched`)
        self.started, self.clock = time.monotonic(), None

    def start_new_kernel(self, **kwargs) -> None:
        """Start the kernel, its output into the capped log (or nowhere)."""
        # the out-of-memory killer's first choice, before the grader (`processes.first_to_go`)
        kwargs["preexec_fn"] = first_to_go
        if self.log_path is None:
            super().start_new_kernel(**kwargs, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return
        super().start_new_kernel(**kwargs, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.kernel_log = CappedLog(
            self.km.provisioner.process.stdout, self.log_path, KERNEL_LOG_KB * 1024
        )
        self.kernel_log.start()

    def process_message(self, msg, cell, cell_index):
        self.current_cell = cell_index
        return super().process_message(msg, cell, cell_index)

    def handle_comm_msg(self, outs, msg, cell_index) -> None:
        """Widget state (comm messages, which nbclient keeps whole for the notebook's metadata)
        counts against the same caps as outputs; past them the message is dropped, with a note."""
        content = msg.get("content", {})
        size = len(json.dumps(content.get("data", {}), default=str))
        size += len(str(content.get("comm_id", "")))  # nbclient keys the widget's state by it
        size += sum(len(memoryview(b)) for b in msg.get("buffers") or [])
        room = min(
            self.cell_limit - self.kept_in_cell.get(cell_index, 0), self.notebook_limit - self.kept
        )
        if size > room:
            self.dropped[cell_index] = self.dropped.get(cell_index, 0) + size
            self.comm_cut = True
            return
        self.kept += size
        self.kept_in_cell[cell_index] = self.kept_in_cell.get(cell_index, 0) + size
        try:
            super().handle_comm_msg(outs, msg, cell_index)
        except Exception:  # noqa: BLE001 - a malformed widget message: only the widget is lost
            self.comm_cut = True

    def _forget_display(self, display_id: str, cell_index: int) -> None:
        """Drop the place nbclient recorded for the output of `display_id` just removed."""
        cells = self._display_id_map.get(display_id, {})
        places = cells.get(cell_index)
        if places:
            places.pop()
        if not places:
            cells.pop(cell_index, None)
        if not cells:
            self._display_id_map.pop(display_id, None)

    def _update_display_id(self, display_id, msg) -> None:
        """nbclient rewrites every output shown with `display_id`: the new content counts once per
        output it replaces, and is dropped (a note in its place) past the caps."""
        targets = sum(len(i) for i in self._display_id_map.get(display_id, {}).values())
        content = msg.get("content", {})
        size = len(json.dumps(content.get("data", {}))) * max(1, targets)
        cell_index = getattr(self, "current_cell", 0)
        room = min(
            self.cell_limit - self.kept_in_cell.get(cell_index, 0), self.notebook_limit - self.kept
        )
        if size > room:
            self.dropped[cell_index] = self.dropped.get(cell_index, 0) + size
            self.display_cut = True
            note = f"[display update of {size:,} bytes dropped: past the output caps]"
            msg = {**msg, "content": {**content, "data": {"text/plain": note}, "metadata": {}}}
            size = len(note) * max(1, targets)
        self.kept += size
        self.kept_in_cell[cell_index] = self.kept_in_cell.get(cell_index, 0) + size
        super()._update_display_id(display_id, msg)

    def output(self, outs, msg, display_id, cell_index):
        if display_id is not None and len(display_id) > DISPLAY_ID_CHARS:
            display_id = None  # nbclient keeps every id it is given: a long one is not kept
        out = super().output(outs, msg, display_id, cell_index)
        if out is None:
            return None
        size = len(json.dumps(out)) + len(display_id or "")  # the id is kept too
        room = min(
            self.cell_limit - self.kept_in_cell.get(cell_index, 0), self.notebook_limit - self.kept
        )
        if size > room:
            outs.remove(out)
            if display_id is not None:  # the output is gone: its id is not kept either
                self._forget_display(display_id, cell_index)
            cut = 0
            if out.get("output_type") == "stream" and room > 200:  # keep the start of a flood
                cut = room - 100
                out["text"] = out["text"][:cut]
                outs.append(out)
            self.dropped[cell_index] = self.dropped.get(cell_index, 0) + size - cut
            size = cut
        self.kept += size
        self.kept_in_cell[cell_index] = self.kept_in_cell.get(cell_index, 0) + size
        return out


def _kernel_spec_dir(wrap: Callable[[list[str]], list[str]], folder: Path) -> Path:
    """Write a kernelspec whose command is `wrap` around ipykernel; interrupts go as messages
    (a signal to the wrapper would not reach the kernel inside it)."""
    spec = folder / "kernels" / WRAPPED_KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    argv = wrap([sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": argv,
                "display_name": "Python 3 (wrapped)",
                "language": "python",
                "interrupt_mode": "message",
            }
        )
    )
    return folder / "kernels"


async def _answers(kc, seconds: float) -> bool:
    """Whether the kernel answers a trivial request within `seconds` (it is idle again)."""
    msg_id = kc.execute("", silent=True, store_history=False)
    deadline = Deadline(seconds)
    while not deadline.passed():
        try:
            reply = await kc.get_shell_msg(timeout=deadline.left())
        except queue.Empty:
            return False
        if reply["parent_header"].get("msg_id") == msg_id:
            return True
    return False


def _errors(cell) -> list[dict]:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


class _CappedKernelManager(AsyncKernelManager):
    """A kernel manager whose clients share its zmq context (jupyter_client gives each client a
    context of its own), so the context's socket options (`_capped_context`) reach every channel."""

    def client(self, **kwargs):
        return super().client(context=self.context, **kwargs)


class _PinnedSocket(zmq.asyncio.Socket):
    """A socket that reaches an `ipc://` address only through the Unix socket bound at that path
    when it connects, held open by a descriptor (O_PATH, O_NOFOLLOW: a link there is refused),
    and connected to through /proc/self/fd. The sockets' folder is one the kernel can write: a
    path it replaces later, with a link to another socket of the host, is never followed, not by
    zmq's reconnections and not by the new socket the heartbeat opens after a missed beat.

    The first connection to a path waits (at most `PIN_WAIT` s) for the kernel to bind it: the
    client connects as the kernel starts, before any of the notebook's code can run; the context
    keeps that descriptor, and every later socket to the same path (the heartbeat's new one after a
    missed beat) uses a copy of it, never the path again (whose folders the kernel could have
    replaced by then: `.kernel` renamed and a link put in its place). A later one to a path never
    pinned connects nowhere, at once."""

    PIN_WAIT = 60.0
    _pins: list[int] | None = None

    def connect(self, addr):
        if isinstance(addr, str) and addr.startswith("ipc://"):
            path = addr.removeprefix("ipc://")
            pinned = self.context.pinned.get(path)
            if pinned is None:
                pinned = self._pin(path, wait=path not in self.context.tried)
                self.context.tried.add(path)
                if pinned is None:
                    # missing: refused, and never tried again
                    self.setsockopt(zmq.RECONNECT_IVL, -1)
                    return super().connect("ipc:///")
                self.context.pinned[path] = pinned
            fd = os.dup(pinned)
            self._pins = [*(self._pins or []), fd]
            addr = f"ipc:///proc/self/fd/{fd}"
        return super().connect(addr)

    @staticmethod
    def _pin(path: str, *, wait: bool) -> int | None:
        """A descriptor of the socket file at `path` (None if it is missing past the wait)."""
        import stat

        deadline = Deadline(_PinnedSocket.PIN_WAIT if wait else 0)
        while True:
            try:
                fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                if deadline.passed():
                    return None
                time.sleep(0.02)
                continue
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.close(fd)
                raise zmq.ZMQError(zmq.ECONNREFUSED, f"{path} is not a socket: not connected")
            return fd

    def close(self, linger=None) -> None:
        super().close(linger)
        for fd in self._pins or []:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._pins = []


class _PinnedContext(zmq.asyncio.Context):
    """A context whose sockets are `_PinnedSocket`s; `pinned`: {path: the descriptor of the
    socket bound there when it was first connected to}, closed with the context; `tried`: the
    paths a connection was made to."""

    _socket_class = _PinnedSocket
    pinned: dict[str, int]
    tried: set[str]

    def __init__(self) -> None:
        super().__init__()
        self.pinned, self.tried = {}, set()

    def destroy(self, linger=None) -> None:
        super().destroy(linger)
        for fd in self.pinned.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pinned = {}


def _capped_context(message_kb: int) -> zmq.asyncio.Context:
    """A zmq context whose sockets refuse message parts over `message_kb`, queue at most
    `RECEIVE_QUEUE` incoming messages (options set on a context apply to the sockets it makes)
    and connect to the kernel's socket files only as they were when it bound them
    (`_PinnedSocket`)."""
    context = _PinnedContext()
    context.setsockopt(zmq.MAXMSGSIZE, message_kb * 1024)
    context.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
    return context


def _kernel_manager(  # noqa: PLR0913 - every argument is one the kernel needs
    kernel_name: str,
    sockets: Path,
    wrap: Callable[[list[str]], list[str]] | None,
    private: Path,
    message_kb: int,
) -> AsyncKernelManager:
    """A kernel manager for `kernel_name`, or for a kernelspec that starts the kernel through
    `wrap`; its connection file and Unix sockets go in `sockets`; its channels accept message parts
    up to `message_kb`."""
    spec_manager = KernelSpecManager()
    if wrap is not None:
        spec_manager = KernelSpecManager(kernel_dirs=[str(_kernel_spec_dir(wrap, private))])
        kernel_name = WRAPPED_KERNEL
    # Async: nbclient's timeouts only work with an async client.
    return _CappedKernelManager(
        context=_capped_context(message_kb),
        kernel_name=kernel_name,
        kernel_spec_manager=spec_manager,
        transport="ipc",
        connection_file=str(sockets / "kernel.json"),
        ip=str(sockets / "kernel"),
    )


def _client(notebook, km: AsyncKernelManager, *, cwd: Path, options: RunOptions):
    """The nbclient client: interrupts a cell past its time limit and goes on, unless
    `stop_on_error`; caps the outputs it keeps, and the kernel's log."""
    limits = options.limits
    return _CappedClient(
        notebook,
        km=km,
        timeout=limits.cell_timeout,
        allow_errors=not options.stop_on_error,
        interrupt_on_timeout=not options.stop_on_error,
        error_on_timeout=None if options.stop_on_error else _timeout_error(limits),
        kernel_name=km.kernel_name,
        resources={"metadata": {"path": str(cwd)}},
        startup_timeout=120,
        cell_limit=limits.cell_output_kb * 1024,
        notebook_limit=limits.notebook_output_mb * 2**20,
        log_path=options.log_path,
    )


def _timeout_error(limits: Limits) -> dict:
    """The error output of a cell interrupted at its time limit."""
    return {
        "ename": CELL_TIMEOUT_ERROR,
        "evalue": f"the cell ran longer than {limits.cell_timeout} s and was interrupted",
        "traceback": [],
    }


def _progress_bar(client: _CappedClient, notebook, label: str | None):
    """A progress bar over the code cells, or None without a label."""
    if not label:
        return None
    code_cells = sum(c.cell_type == "code" for c in notebook.cells)
    bar = tqdm(total=code_cells, desc=label, unit="cell", leave=False)
    client.on_cell_executed = lambda **_: bar.update()
    return bar


def run_notebook(
    notebook,
    cwd: Path,
    env: dict[str, str],
    options: RunOptions = RunOptions(),
    *,
    cancel: threading.Event | None = None,
) -> RunOutcome:
    """Execute `notebook` (a NotebookNode, changed in place) in a fresh kernel in `cwd`, with
    `env` as the kernel's whole environment, as `options` say. cancel: once set, the kernel is
    killed."""
    outcome = RunOutcome(status="ran", notebook=notebook)
    # named with this pid: a grader killed before its clean-up leaves it (`supervised`)
    private = tempfile.TemporaryDirectory(prefix=f"course-kernel-{os.getpid()}-")
    km = _kernel_manager(
        options.kernel_name,
        Path(options.connection_dir or private.name),
        options.wrap,
        Path(private.name),
        options.limits.message_kb,
    )
    client = _client(notebook, km, cwd=cwd, options=options)
    client.on_cell_error = outcome.record_timeout
    bar = _progress_bar(client, notebook, options.progress)
    started = time.monotonic()
    pid = None
    try:
        with client.setup_kernel(env=env, cwd=str(cwd)):
            pid = km.provisioner.pid
            _run_watched(client, pid, options, outcome, cancel=cancel, cwd=cwd)
    # The kernel did not start, or talking to it failed.
    except Exception as exc:
        if outcome.status == "ran":
            outcome.status = "could not start" if pid is None else "run failed"
            outcome.reason = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, RecursionError):  # the notebook's doing, not the grader's
                outcome.reason = (
                    "the kernel sent a message nested deeper than Python's JSON reader goes (an "
                    "output the notebook made): the cells after it did not run"
                )
    finally:
        if bar is not None:
            bar.close()
        outcome.log_dropped = _stop_kernel(client, km, pid)
        if client.kernel_log is not None and client.kernel_log.error is not None:
            outcome.log_error = f"{client.log_path}: {client.kernel_log.error}"
        private.cleanup()
    outcome.seconds = time.monotonic() - started
    _finish(notebook, options.limits, outcome, client.dropped)
    if client.display_cut:
        outcome.output_notes.append("display updates: past the output caps, replaced by a note")
    if client.comm_cut:
        outcome.output_notes.append("widget messages: past the output caps, dropped")
    for index in client.message_cuts:
        note = (
            f"a kernel message larger than the {options.limits.message_kb:,} KB accepted was "
            "refused; the cell's later outputs were lost"
        )
        outcome.output_notes.append(f"cell {index}: {note}")
        if index < len(notebook.cells):
            output = nbformat.v4.new_output("stream", name="stderr", text=f"[{note}]\n")
            notebook.cells[index].outputs.append(output)
    return outcome


def folder_mb(folder: Path) -> float:
    """The MB the files and folders under `folder` take on disk (links not followed; any depth:
    no recursion)."""
    return files.disk_bytes(folder) / 2**20


class FileClock(threading.Thread):
    """Times the files under `folder` by this process's clock: when each was first seen and when
    it last changed (a new inode, size, modification or status-change time: `os.utime` changes
    the last), and which cell was running then. At most `max_files` files and folders, looked at
    every `interval` seconds, without following links or recursion. What it keeps is bounded
    whatever the kernel does (renaming a tree over and over): a file gone from the latest look is
    forgotten, and a path longer than `max_name` characters is not tracked; `untracked()` says
    what was left out. within: a folder above `folder` (the work folder) from which it is reached
    without following a link (`files.walk`): a kernel that swaps a folder for a link never makes
    the clock list a host folder.

    Example:

        clock = FileClock(Path("work/artifacts"), started=time.monotonic()); clock.start()
        ...; clock.stop(); print(clock.times)  # {"fit_ckpt/ckpt_1.weights.h5": {...}}
    """

    #: The seconds `stop` waits for a look under way (a folder of a hung network file system
    #: blocks it): past them the times are those of the looks before, and `untracked` says so.
    STOP_WAIT_S = 10.0

    # PLR0913: the folder, its clock, its pace, its caps and where it is reached from
    def __init__(  # noqa: PLR0913
        self,
        folder: Path,
        started: float,
        interval: float = 0.1,
        max_files: int = 2000,
        max_name: int = 1024,
        within: Path | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.folder, self.started, self.interval = folder, started, interval
        self.max_files, self.max_name, self.within = max_files, max_name, within
        self.hung = False  # whether `stop` gave up waiting for a look
        self.cell = -1
        self.times: dict[str, dict] = {}
        self._state: dict[str, tuple] = {}
        self.long_names = 0  # the most paths over `max_name` seen in one look
        self.full = False  # whether a look stopped at `max_files`
        self.stopped = threading.Event()

    def look(self) -> None:
        now = round(time.monotonic() - self.started, 3)
        present, entries, long_names = set(), 0, 0
        times = dict(self.times)  # a new dict each look: `stop` may leave one under way
        walk = files.walk(self.folder, max_entries=self.max_files, within=self.within)
        for entry in walk:
            entries += 1
            if entry.kind != "a regular file":
                continue
            name = entry.relative.as_posix()
            if len(name) > self.max_name:
                long_names += 1
                continue
            present.add(name)
            state = (entry.inode, entry.size, entry.mtime_ns, entry.ctime_ns)
            if self._state.get(name) != state:
                self._state[name] = state
                seen = times.get(name, {}).get("seen", now)
                times[name] = {"seen": seen, "changed": now, "cell": self.cell}
        for name in times.keys() - present:  # gone (removed, renamed): forgotten
            del times[name]
            self._state.pop(name, None)
        self.times = times
        self.long_names = max(self.long_names, long_names)
        self.full = self.full or entries >= self.max_files

    def untracked(self) -> str:
        """What the clock left out, in words ("" when nothing)."""
        parts = []
        if self.full:
            parts.append(
                f"more than {self.max_files:,} files and folders: only the first are timed"
            )
        if self.long_names:
            parts.append(
                f"{self.long_names:,} files with paths over {self.max_name:,} characters not timed"
            )
        if self.hung:
            parts.append(
                f"a look at the files did not end within {self.STOP_WAIT_S:g} s of the end: "
                "the times are those seen before"
            )
        return "; ".join(parts)

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            with contextlib.suppress(Exception):  # a folder removed meanwhile, ...
                self.look()

    def stop(self) -> None:
        """End the looks, then look once more; a look still under way after `STOP_WAIT_S` is
        left behind (a daemon thread: it ends with the look, or with the process), with no last
        look, and `untracked` says so."""
        self.stopped.set()
        self.join(self.STOP_WAIT_S)
        if self.is_alive():
            self.hung = True  # `times` stays what it is: a look replaces it, never changes it
            return
        with contextlib.suppress(Exception):
            self.look()


class MessageWatch(threading.Thread):
    """Notices the kernel channels that zmq closed because the kernel sent a message part over
    `Limits.message_kb` (zmq reports a disconnection and never reconnects that socket).

    iopub: `take_iopub_cut()` says so once; the runner notes the cell and reconnects (the new
    client is not watched: `_reconnect`). shell (a
    cell's reply or a user expression's value): the reply is lost, so the kernel is killed through
    `dog`, unless it had died already (which closes the channels too).

    Example:

        watch = MessageWatch(km.context, dog, pid, message_kb=2048); watch.attach(kc)
        watch.start(); ...; watch.take_iopub_cut(); watch.stop()
    """

    def __init__(self, context: zmq.Context, dog: Watchdog, pid: int, message_kb: int) -> None:
        super().__init__(daemon=True)
        self.sync = zmq.Context.shadow(context.underlying)  # inproc needs the same context
        self.dog, self.pid, self.message_kb = dog, pid, message_kb
        self.new: queue.Queue = queue.Queue()
        self.watched: list = []  # the sockets with a monitor (`unwatch` ends them)
        self.numbers = itertools.count()  # inproc addresses are never reused
        self.iopub_cut = threading.Event()
        self.stopped = threading.Event()

    def attach(self, kc) -> None:
        """Watch `kc`'s iopub and shell sockets (call it from the thread that uses them)."""
        for name in ("iopub", "shell"):
            sock = getattr(kc, f"{name}_channel").socket
            address = f"inproc://course-watch-{id(self)}-{next(self.numbers)}"
            sock.monitor(address, zmq.EVENT_DISCONNECTED)
            self.watched.append(sock)
            pair = self.sync.socket(zmq.PAIR)
            pair.connect(address)
            self.new.put((name, pair))

    def unwatch(self) -> None:
        """End the monitors (before their sockets close: else the context never terminates)."""
        for sock in self.watched:
            with contextlib.suppress(zmq.ZMQError):
                sock.disable_monitor()
        self.watched = []

    def take_iopub_cut(self) -> bool:
        """Whether iopub was cut since the last call."""
        cut = self.iopub_cut.is_set()
        self.iopub_cut.clear()
        return cut

    def _kernel_alive(self) -> bool:
        time.sleep(1)  # a dying kernel closes its channels a moment before it is gone
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def _event(self, name: str, pair) -> None:
        event = zmq.utils.monitor.recv_monitor_message(pair)
        if event["event"] != zmq.EVENT_DISCONNECTED:
            return
        if name == "iopub":
            self.iopub_cut.set()
        elif self._kernel_alive():
            self.dog.kill(
                f"the kernel sent a reply larger than the {self.message_kb:,} KB accepted; the "
                "reply was refused and the notebook was stopped"
            )

    def run(self) -> None:
        poller, names = zmq.Poller(), {}
        while not self.stopped.is_set():
            while not self.new.empty():
                name, pair = self.new.get()
                names[pair] = name
                poller.register(pair, zmq.POLLIN)
            for pair, _ in poller.poll(200):
                self._event(names[pair], pair)
        for pair in names:
            pair.close(linger=0)

    def stop(self) -> None:
        self.unwatch()
        self.stopped.set()
        self.join()


def _reconnect(client: _CappedClient, seconds: float) -> None:
    """A new kernel client for the same kernel, after zmq closed a channel for good."""
    client.watch.unwatch()
    client.kc.stop_channels()
    client.kc = client.km.client()
    client.kc.start_channels()
    with contextlib.suppress(RuntimeError):  # not ready: the next cell reports what happens
        run_sync(client.kc.wait_for_ready)(timeout=seconds)
    # Not watched again: monitors on a second client's sockets left the zmq context unable to
    # terminate (measured with pyzmq 27.3, libzmq 4.3.5). A second refused message then goes
    # unnoticed: that cell's outputs are lost and a refused reply waits for the time limit.


def _take_message_cut(client: _CappedClient, index: int, limits: Limits) -> None:
    """Note and reconnect a channel zmq closed for an oversized message during cell `index`."""
    if client.watch is not None and client.watch.take_iopub_cut():
        client.message_cuts.append(index)
        if client.watch.dog.reason:  # the kernel is being stopped: nothing to reconnect to
            return
        _reconnect(client, limits.interrupt_grace + 25)


class DiskWatch(threading.Thread):
    """Kills the kernel (through `dog`) once the files under `folder`, with those the kernel's
    processes hold open after deleting them (the scan of `dog`'s last look, `Watchdog.held`),
    take more than `limit_mb`, or number more than `max_entries` files, folders and links
    (default: the capped work folder's inodes, `workdir.INODES`: empty files take no bytes), or
    hold a folder it cannot list; it looks every `interval` seconds, at any depth and path
    length (`files.usage`).

    Example:

        DiskWatch(Path("work/alice"), limit_mb=1024, dog=dog).start()
    """

    def __init__(  # noqa: PLR0913 - the folder, its two caps, who kills and how often
        self,
        folder: Path,
        limit_mb: float,
        dog: Watchdog,
        interval: float = 0.5,
        max_entries: int | None = None,
    ):
        super().__init__(daemon=True)
        from course_tools.grade.jail import workdir  # the jail's cap, for the same promise

        self.folder, self.limit_mb, self.dog, self.interval = folder, limit_mb, dog, interval
        self.max_entries = workdir.INODES if max_entries is None else max_entries
        self.stopped = threading.Event()

    def over(self) -> str:
        """Why the folder is over its caps now ("" when it is not)."""
        used = files.usage(self.folder, max_entries=self.max_entries)
        # files deleted while the kernel's processes hold them open: on a disk, no folder lists
        # them, yet they take its blocks until closed; read from the watchdog's last look (one
        # scan of the tree's descriptors serves both, `Watchdog.held`)
        held = getattr(self.dog, "held", None)
        deleted = held.deleted_bytes if held is not None else 0
        if used.bytes + deleted > self.limit_mb * 2**20:
            held = f" ({deleted / 2**20:,.0f} MB of it in files deleted while open)" * bool(deleted)
            return (
                f"disk limit: the notebook's folder took {(used.bytes + deleted) / 2**20:,.0f} MB"
                f"{held}, more than the {self.limit_mb:g} MB allowed, and the notebook was stopped"
            )
        if used.entries > self.max_entries:
            return (
                f"disk limit: the notebook's folder held more than {self.max_entries:,} files "
                f"and folders, and the notebook was stopped"
            )
        if used.unlisted:
            return (
                "disk limit: the notebook's folder held a folder the grader could not list "
                "(its size unknown), and the notebook was stopped"
            )
        return ""

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            if reason := self.over():
                self.dog.kill(reason)
                return


def _run_watched(  # noqa: PLR0913 - and the kernel's folder, the clock's start
    client: _CappedClient,
    pid: int,
    options: RunOptions,
    outcome: RunOutcome,
    *,
    cancel: threading.Event | None,
    cwd: Path,
) -> None:
    """Run the cells (then the extra code) while a Watchdog holds the kernel to its limits; the
    clock's folder, when inside `cwd` (the kernel's), is reached from it (`FileClock`)."""
    limits = options.limits
    dog = Watchdog(
        pid, limits.memory_mb, limits.timeout, what="the notebook", cancel=cancel, first_to_go=True
    )
    disk = None
    if options.watch_folder is not None:
        disk = DiskWatch(options.watch_folder, limits.disk_mb, dog)
        disk.start()
    client.started = time.monotonic()
    if options.clock_folder is not None:
        folder = Path(options.clock_folder)
        within = Path(cwd) if folder.is_relative_to(cwd) else None
        client.clock = FileClock(folder, client.started, within=within)
        client.clock.start()
    client.watch = MessageWatch(client.km.context, dog, pid, limits.message_kb)
    client.watch.attach(client.kc)
    client.watch.start()
    with dog:
        try:
            first = ""
            if options.first_expression:
                first = _first_answer(client, options.first_expression, limits, outcome)
            _run_cells(client, limits, outcome, dog, stop_on_error=options.stop_on_error)
            if options.extra_cell and outcome.status == "ran":
                _run_extra(client, client.nb, options.extra_cell, outcome)
            expressions = options.extra_expressions
            if callable(expressions):
                expressions = expressions(first) if first else ()
            for expression in expressions:
                if outcome.status != "ran" or outcome.extra_error:
                    break
                _run_expression(client, expression, limits, outcome)
                if dog.reason:  # its value was refused (MessageWatch)
                    raise DeadKernelError(dog.reason)
        except DeadKernelError:
            outcome.status = "killed" if dog.reason else "kernel died"
            outcome.reason = dog.reason or (
                "the kernel died (it crashed or was killed) before the notebook finished"
            )
        finally:
            client.watch.stop()
            if disk is not None:
                disk.stopped.set()
            if client.clock is not None:
                client.clock.stop()
                outcome.file_times = client.clock.times
                outcome.clock_note = client.clock.untracked()
        if dog.reason and outcome.status in ("ran", "failed"):
            outcome.status, outcome.reason = "killed", dog.reason
    outcome.peak_mb = dog.peak_mb


async def _evaluate(client, expression: str, seconds: float) -> dict:
    """The execute reply's user expression `expression` (an empty, silent cell carries it); waits
    at most `seconds`, and no longer than the kernel lives."""
    kc = client.kc
    msg_id = kc.execute("", silent=True, store_history=False, user_expressions={"x": expression})
    deadline = Deadline(seconds)
    while not deadline.passed():
        try:
            reply = await kc.get_shell_msg(timeout=min(1.0, deadline.left()))
        except queue.Empty:
            if client.watch.dog.reason or not await client.km.is_alive():
                break
            continue
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply["content"].get("user_expressions", {}).get("x", {})
    raise queue.Empty


def _first_answer(client, expression: str, limits: Limits, outcome: RunOutcome) -> str:
    """The text of `expression`'s value, evaluated before the first cell ("" when it fails: then
    `outcome.extra_error` says why)."""
    try:
        value = run_sync(_evaluate)(client, expression, limits.cell_timeout)
    except queue.Empty:
        value = {"ename": "no answer", "evalue": f"within {limits.cell_timeout} s"}
    data = value.get("data") if isinstance(value, dict) else None
    text = data.get("text/plain") if isinstance(data, dict) else None
    if not isinstance(value, dict) or value.get("status") != "ok" or not isinstance(text, str):
        error = value if isinstance(value, dict) else {}
        outcome.extra_error = (
            f"before the first cell: {error.get('ename')}: {str(error.get('evalue'))[:300]}"
        )
        return ""
    return text


def _run_expression(client, expression: str, limits: Limits, outcome: RunOutcome) -> None:
    _take_message_cut(client, len(client.nb.cells) - 1, limits)
    try:
        value = run_sync(_evaluate)(client, expression, limits.cell_timeout)
    except queue.Empty:
        outcome.extra_error = f"no answer within {limits.cell_timeout} s"
        return
    if not isinstance(value, dict) or value.get("status") != "ok":
        error = value if isinstance(value, dict) else {}
        outcome.extra_error = f"{error.get('ename')}: {str(error.get('evalue'))[:300]}"
        return
    data = value.get("data")
    text = data.get("text/plain") if isinstance(data, dict) else None
    outcome.extra_output = text if isinstance(text, str) else ""


def _stop_kernel(client: _CappedClient, km: AsyncKernelManager, pid: int | None) -> int:
    """Close the channels, kill the kernel and everything it left behind, remove its files;
    return the bytes of the kernel's own output left out of its log."""
    if client.kc is not None:
        client.kc.stop_channels()
    if pid is not None:
        kill_tree(pid)
    try:
        # Reaps the process, removes the connection file and sockets.
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)
    # It is dead already (killed above), which is all that matters.
    except Exception:
        run_sync(km.cleanup_resources)()
    km.context.destroy(linger=0)  # given to the manager, so not destroyed by it
    if client.kernel_log is None:
        return 0
    # The pipe ends with the kernel and everything it started (killed above).
    client.kernel_log.join(timeout=10)
    return client.kernel_log.dropped


def _run_cells(
    client: _CappedClient,
    limits: Limits,
    outcome: RunOutcome,
    dog: Watchdog,
    *,
    stop_on_error: bool,
) -> None:
    """Execute the cells in order; stop at an error (with `stop_on_error`), or when a cell
    interrupted at its time limit does not become idle again (it ignored the interrupt)."""
    for index, cell in enumerate(client.nb.cells):
        if client.clock is not None:
            client.clock.cell = index
        start = time.monotonic() - client.started
        try:
            client.execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
        except (CellExecutionError, CellTimeoutError) as exc:  # only with stop_on_error
            outcome.status = "failed"
            outcome.error = ANSI_ESCAPES.sub("", str(exc))  # tracebacks come coloured
            outcome.failed_cell = index
            return
        finally:
            if cell.cell_type == "code":
                end = time.monotonic() - client.started
                outcome.cell_times.append([index, round(start, 3), round(end, 3)])
        _take_message_cut(client, index, limits)
        if index in outcome.timed_out_cells and not run_sync(_answers)(
            client.kc, limits.interrupt_grace
        ):
            outcome.deaf_cell = index
            dog.kill(
                f"cell {index} ignored the interrupt sent at its time limit "
                f"({limits.cell_timeout} s): the kernel was stopped, the later cells did not run"
            )
            outcome.status, outcome.reason = "killed", dog.reason
            return


def _run_extra(client, notebook, source: str, outcome: RunOutcome) -> None:
    cell = nbformat.v4.new_code_cell(source)
    client.notebook_limit = client.kept + client.cell_limit  # a flood earlier does not hide it
    notebook.cells.append(cell)  # nbclient stores each cell back into the notebook
    try:
        client.execute_cell(cell, len(notebook.cells) - 1)
    finally:
        notebook.cells.pop()  # the executed copy shows the notebook only
    errors = _errors(cell)
    if errors:
        outcome.extra_error = f"{errors[0].get('ename')}: {errors[0].get('evalue')}"
    outcome.extra_output = "".join(
        o.get("text", "") for o in cell.outputs if o.get("name") == "stdout"
    )


def _finish(notebook, limits: Limits, outcome: RunOutcome, dropped: dict[int, int]) -> None:
    """Notes where outputs were cut and where cells timed out; the list of cell errors."""
    for index, cell in enumerate(notebook.cells):
        if index in dropped:
            note = (
                f"[{dropped[index]:,} bytes of output dropped: the run keeps "
                f"{limits.cell_output_kb} KB per cell and {limits.notebook_output_mb} MB per "
                "notebook]\n"
            )
            cell.outputs.append(nbformat.v4.new_output("stream", name="stderr", text=note))
            outcome.output_notes.append(f"cell {index}: " + note.strip().strip("[]"))
        if index in outcome.timed_out_cells:
            cell.outputs.append(nbformat.v4.new_output("error", **_timeout_error(limits)))
        if index == outcome.deaf_cell:
            cell.outputs.append(
                nbformat.v4.new_output(
                    "error",
                    ename="KernelKilled",
                    evalue="the cell ignored the interrupt; the kernel was stopped",
                    traceback=[],
                )
            )
        for output in _errors(cell):
            outcome.cell_errors.append(
                f"cell {index}: {output.get('ename')}: {str(output.get('evalue'))[:300]}"
            )


#: Run after the last cell of `execute`: what produced the outputs, as the set-up cell resolved
#: it (course_utils.setup writes the settings it applied back into the environment).
RUN_RECORD_CELL = """
import json as _json, os as _os, platform as _platform, sys as _sys
_tf = _sys.modules.get("tensorflow")
_gpus = _tf.config.list_logical_devices("GPU") if _tf else []
print(_json.dumps({
    "profile": _os.environ.get("COURSE_PROFILE", ""),
    "devices": int(_os.environ.get("COURSE_DEVICES") or 0),
    "device_kind": "GPU" if _gpus else "CPU",
    "data": _os.environ.get("COURSE_DATA", ""),
    "tensorflow": _tf.__version__ if _tf else "",
    "keras": getattr(_sys.modules.get("keras"), "__version__", ""),
    "python": _platform.python_version(),
}))
"""


@dataclass
class ExecutionResult:
    """How one notebook file's execution went (`execute`)."""

    path: Path
    output_path: Path
    ok: bool
    seconds: float
    error: str = ""  # the failing cell's source and error, when not ok
    failed_cell: int | None = None  # index of the failing code cell among all cells


# PLR0913: after the two paths, every option is keyword-only with a default; `course run` and
# `course grade`'s benchmark pass the few they need by name.
def execute(  # noqa: PLR0913
    path: str | os.PathLike,
    output_path: str | os.PathLike,
    *,
    env: dict[str, str] | None = None,
    cell_timeout: int = 600,
    kernel_name: str = "python3",
    cwd: str | os.PathLike | None = None,
    progress: str | None = None,
    cancel: threading.Event | None = None,
) -> ExecutionResult:
    """Run every cell of `path` in a fresh kernel and write the executed copy to `output_path`.

    env: variables added to this process's environment for the kernel (e.g. COURSE_PROFILE).
    cell_timeout: seconds one cell may run before execution stops with an error.
    cwd: the kernel's working folder (default: the notebook's own folder, as in JupyterLab).
    progress: when given, a progress bar over the code cells with this label.
    cancel: once set (from another thread), the kernel is killed and the run ends.
    The executed copy's metadata `course_run` records what produced it: the profile, devices,
    data source and versions the set-up cell applied, the date and the seconds taken.
    Stops at the first failing cell (like "Run All") and reports it. Cells marked `# NBVAL_SKIP`
    (interactive-only, such as starting TensorBoard) are not run, as under nbval.
    """
    path, output_path = Path(path), Path(output_path)
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:  # interactive-only cells (starting TensorBoard, ...)
        if cell.cell_type == "code" and "NBVAL_SKIP" in cell.source:
            cell.metadata.setdefault("tags", []).append("skip-execution")
    # No memory or notebook limit here, and outputs are kept whole (up to 1 GB).
    limits = Limits(
        cell_timeout=cell_timeout,
        timeout=10**7,
        memory_mb=10**7,
        cell_output_kb=2**20,
        notebook_output_mb=2**10,
        message_kb=2**20,
    )
    options = RunOptions(
        limits=limits,
        stop_on_error=True,
        kernel_name=kernel_name,
        progress=progress,
        extra_cell=RUN_RECORD_CELL,
    )
    outcome = run_notebook(
        notebook, Path(cwd or path.parent), {**os.environ, **(env or {})}, options, cancel=cancel
    )
    ok = outcome.status == "ran"
    if ok and outcome.extra_output.strip():
        record = json.loads(outcome.extra_output.strip().splitlines()[-1])
        record["date"] = time.strftime("%Y-%m-%d", time.gmtime())
        record["seconds"] = round(outcome.seconds, 1)
        notebook.metadata["course_run"] = record
    error = outcome.error or ("" if ok else f"{outcome.status}: {outcome.reason}")
    output_path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, output_path)
    return ExecutionResult(path, output_path, ok, outcome.seconds, error, outcome.failed_cell)
