"""The bootstrap every worker of ``meshcast run`` runs before the user's code.

``python -m meshcast.run.worker [--parent-pid PID] (script | -m module | --no-python program) args...``

Theory of operation
-------------------
1. Ask the kernel to SIGKILL this process when its parent (the launcher) dies
   (``prctl(PR_SET_PDEATHSIG)``), then check that the parent did not die
   before the request took effect, so no worker outlives the launcher even if
   the launcher itself is SIGKILLed.
2. Run the target the way ``python script.py`` / ``python -m module`` would:
   ``sys.argv`` is ``[script, *args]``, ``sys.path[0]`` is the script's
   directory (the current directory for ``-m``) and the code runs as
   ``__main__`` (through :mod:`runpy`). ``--no-python`` execs the program
   instead, keeping the death signal (it survives ``execve``).
3. An uncaught exception is printed as usual (through ``sys.excepthook``,
   without this module's and runpy's frames), written as JSON to
   ``$MESHCAST_ERROR_FILE`` for the launcher's failure summary, and the
   process exits 1. ``SystemExit`` passes through with its code.

The error file has the shape torch.distributed.elastic's ``@record`` writes,
so the summary code can read either::

    {"message": {"message": "ValueError: boom",
                 "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1700000000"}},
     "time": 1700000000.123, "pid": 4242}
"""

from __future__ import annotations

import ctypes
import json
import os
import runpy
import signal
import sys
import time
import traceback
import zipfile
from dataclasses import dataclass
from types import TracebackType

from .. import config

_PR_SET_PDEATHSIG = 1

# Frames of these files are the bootstrap's, not the user's: a traceback
# starts at the first frame of the user's code. (runpy is frozen in 3.11+.)
_BOOTSTRAP_FILES = frozenset({os.path.abspath(__file__), os.path.abspath(runpy.__file__), "<frozen runpy>"})


def set_parent_death_signal(parent_pid: int | None, sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent exits (Linux only).

    Args:
        parent_pid: the pid the parent had when it started us. If the parent is
            already gone (we were reparented before the request took effect),
            exit at once instead of running orphaned. ``None`` skips the check.
        sig: the signal to receive; SIGKILL because an orphaned worker must not
            run cleanup that could block on peers.

    The death signal fires when the *thread* that forked us exits, so the
    parent must start workers from a thread that lives as long as they do.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


@dataclass(frozen=True)
class ErrorRecord:
    """What a failed worker left in its error file."""

    message: str
    traceback: str
    time: float | None


def write_error_file(path: str, exc: BaseException, tb: TracebackType | None) -> None:
    """Write ``exc`` (with traceback ``tb``) to ``path`` as JSON, atomically.

    The file is written under a temporary name and renamed, so a reader never
    sees half a file even if this process is killed while writing.
    """
    now = time.time()
    record = {
        "message": {
            "message": "".join(traceback.format_exception_only(type(exc), exc)).strip(),
            "extraInfo": {
                "py_callstack": "".join(traceback.format_exception(type(exc), exc, tb)),
                "timestamp": str(int(now)),
            },
        },
        "time": now,
        "pid": os.getpid(),
    }
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def read_error_file(path: str) -> ErrorRecord | None:
    """Read an error file written by :func:`write_error_file` or torch's ``@record``.

    Returns ``None`` when the file is missing or unreadable (the worker was
    killed, or exited without an uncaught exception).
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict):
        info = message.get("extraInfo") or {}
        text = str(message.get("message", ""))
        tb = str(info.get("py_callstack") or text)
        when = data.get("time")
        if when is None:
            when = info.get("timestamp")
    elif isinstance(message, str):
        text, tb, when = message, message, None
    else:
        return None
    try:
        when = float(when) if when is not None else None
    except (TypeError, ValueError):
        when = None
    return ErrorRecord(message=text, traceback=tb, time=when)


def _user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """Drop the leading frames that belong to this bootstrap and runpy."""
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename not in _BOOTSTRAP_FILES and os.path.abspath(filename) not in _BOOTSTRAP_FILES:
            break
        tb = tb.tb_next
    return tb


def _run_target(target: str, args: list[str], module: bool) -> None:
    if module:
        # As `python -m`: the current directory first on sys.path; run_module
        # replaces argv[0] with the module's file once it is found.
        sys.path[0] = os.getcwd()
        sys.argv = ["-m", *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        # As `python script.py`: the script's directory first on sys.path and
        # an absolute __file__ (Python >= 3.9). run_path also sets argv[0] to
        # the path it is given, so argv[0] is absolute too.
        path = os.path.abspath(target)
        if os.path.isdir(path) or zipfile.is_zipfile(path):
            del sys.path[0]  # run_path puts the directory / zip itself first
        else:
            sys.path[0] = os.path.dirname(path)
        sys.argv = [path, *args]
        runpy.run_path(path, run_name="__main__")


def _exec_program(program: str, args: list[str]) -> None:
    try:
        os.execvp(program, [program, *args])
    except OSError as exc:
        print(f"meshcast run: cannot execute {program!r}: {exc.strerror}", file=sys.stderr)
        sys.exit(127)


def _parse(argv: list[str]) -> tuple[int | None, str, str, list[str]]:
    """Split ``[--parent-pid PID] [-m | --no-python] target args...``."""
    parent_pid = None
    mode = "script"
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--parent-pid" and i + 1 < len(argv):
            parent_pid = int(argv[i + 1])
            i += 2
        elif tok in ("-m", "--module"):
            mode = "module"
            i += 1
        elif tok == "--no-python":
            mode = "program"
            i += 1
        elif tok == "--":
            i += 1
            break
        else:
            break
    if i >= len(argv):
        print(
            "usage: python -m meshcast.run.worker [--parent-pid PID] "
            "(script | -m module | --no-python program) [args ...]",
            file=sys.stderr,
        )
        sys.exit(2)
    return parent_pid, mode, argv[i], argv[i + 1 :]


def main(argv: list[str] | None = None) -> None:
    """Run one worker's target; see the module docstring."""
    parent_pid, mode, target, args = _parse(sys.argv[1:] if argv is None else argv)
    set_parent_death_signal(parent_pid)
    if mode == "program":
        _exec_program(target, args)
        return
    if mode == "script" and not os.path.exists(target):
        print(f"meshcast run: can't open file {target!r}: no such file", file=sys.stderr)
        sys.exit(2)
    try:
        _run_target(target, args, module=(mode == "module"))
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the error file
        # The default excepthook prints exc.__traceback__, not its tb argument.
        tb = _user_traceback(exc.__traceback__)
        exc.__traceback__ = tb
        error_file = config.get("MESHCAST_ERROR_FILE")
        if error_file:
            try:
                write_error_file(error_file, exc, tb)
            except OSError as write_exc:
                print(f"meshcast run: could not write {error_file}: {write_exc}", file=sys.stderr)
        sys.excepthook(type(exc), exc, tb)
        sys.exit(1)


if __name__ == "__main__":
    main()
