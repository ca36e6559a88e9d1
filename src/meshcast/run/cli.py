"""Command line of ``meshcast run`` (also ``python -m meshcast.run``): flags -> LaunchConfig -> launch.

Flag names follow torchrun's, in dash and underscore forms, so a torchrun
command line for a static (non-elastic) job works after swapping the program
name. Everything after the script (or module / program) goes to it untouched,
``--`` included.
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import config as knobs
from ..errors import InvalidUsage, MeshcastError
from .config import DEFAULT_GRACE_PERIOD, LaunchConfig

HELP = "launch a multi-process job (torchrun-compatible flags)"

DESCRIPTION = """\
Start --nproc-per-node workers of a Python script (or module, or program) on
this node, host the job's store, and stop the whole job when any worker fails,
printing which rank failed, how, and its traceback.

  meshcast run -n 4 train.py --epochs 3
  meshcast run -n 4 -m mypkg.train
  MESHCAST_SECRET=... meshcast run --nnodes 2 --node-rank 0 \\
      --master-addr 10.0.0.1 --master-port 29500 -n 8 train.py

With --nnodes, run one launcher per node, all with the same MESHCAST_SECRET. They
meet through node 0's store before starting any worker: a node with another secret
is refused there, and nodes may start different numbers of workers.
"""

EPILOG = """\
environment of each worker:
  RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE   as torchrun
  GROUP_RANK, NODE_RANK                            index of this node
  GROUP_WORLD_SIZE                                 number of nodes
  ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE            "default", RANK, WORLD_SIZE
  MASTER_ADDR, MASTER_PORT                         the job's store (hosted by node 0's launcher)
  MESHCAST_SECRET                                  job secret (hex) the store and peers check
  MESHCAST_RUN_ID, MESHCAST_STORE_HOSTED=1         job id; the launcher hosts the store
  MESHCAST_ERROR_FILE                              where an uncaught exception is recorded
  OMP_NUM_THREADS=1                                if unset and --nproc-per-node > 1
  PYTHONUNBUFFERED=1                               with --prefix (the default)

stdin goes to rank 0 only. Exit status: 0 if all workers succeed, else the
first failed worker's exit code (128+N if it died by signal N); 128+N if the
launcher got signal N (SIGINT/SIGTERM/SIGHUP/SIGQUIT are forwarded to the
workers as SIGTERM, then SIGKILL after --grace-period; a second signal kills
at once). `meshcast run --help-env` lists meshcast's environment knobs.
"""


def _nproc(text: str) -> int:
    if text in ("auto", "cpu"):
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of workers, 'auto' or 'cpu' (got {text!r})"
        ) from None


def _nnodes(text: str) -> int:
    low, _, high = text.partition(":")
    try:
        low_n, high_n = int(low), int(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or N:N (got {text!r})") from None
    if low_n != high_n:
        raise argparse.ArgumentTypeError(
            f"elastic node ranges are not supported (got {text!r}); give a fixed count"
        )
    return low_n


class _HelpEnv(argparse.Action):
    """``--help-env``: print every MESHCAST_* knob with its default and meaning, then exit."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0,
                         help="list meshcast's MESHCAST_* environment knobs and exit")  # fmt: skip

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        width = max(len(name) for name in knobs.KNOBS)
        for knob in knobs.KNOBS.values():
            default = "" if knob.default in (None, "") else f" (default: {knob.default})"
            print(f"{knob.name:<{width}}  {knob.doc}{default}")
        parser.exit()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``meshcast run``'s flags and the script-and-arguments positional to ``parser``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.allow_abbrev = False  # `--nproc 4` must not silently mean --nproc-per-node
    add = parser.add_argument
    add("--nproc-per-node", "--nproc_per_node", "-n", dest="nproc_per_node", type=_nproc,
        default=1, metavar="N", help="workers on this node: a number, 'auto' or 'cpu' (default: 1)")
    add("--nnodes", type=_nnodes, default=1, metavar="N",
        help="number of nodes (launchers) in the job (default: 1)")
    add("--node-rank", "--node_rank", dest="node_rank", type=int, default=0, metavar="K",
        help="index of this node, 0 .. nnodes-1 (default: 0)")
    add("--master-addr", "--master_addr", dest="master_addr", default=None, metavar="ADDR",
        help="address node 0's launcher hosts the store on (default: 127.0.0.1)")
    add("--master-port", "--master_port", dest="master_port", type=int, default=None,
        metavar="PORT", help="port of the store (default: a free port on one node, 29500 on several)")
    add("--standalone", action="store_true",
        help="single node, store on a free loopback port (ignores --master-addr/--master-port)")
    add("-m", "--module", action="store_true",
        help="run the entrypoint as a module, like `python -m`")
    add("--no-python", "--no_python", dest="no_python", action="store_true",
        help="exec the entrypoint as a program instead of a Python script")
    add("--prefix", action=argparse.BooleanOptionalAction, default=True,
        help="prefix every line workers print with '[rank N]: ' (default: on; --no-prefix lets "
             "workers write straight to this terminal)")
    add("--grace-period", "--grace_period", dest="grace_period", type=float,
        default=DEFAULT_GRACE_PERIOD, metavar="SECONDS",
        help=f"seconds between SIGTERM and SIGKILL when stopping workers (default: {DEFAULT_GRACE_PERIOD:g})")
    add("--help-env", action=_HelpEnv)
    # One REMAINDER positional keeps the user's arguments verbatim, `--` included
    # (a separate `script` positional would make argparse drop a later `--`).
    add("command", nargs=argparse.REMAINDER, metavar="script [args ...]",
        help="the script (module with -m, program with --no-python) and its arguments")  # fmt: skip


def config_from_args(ns: argparse.Namespace) -> LaunchConfig:
    """Turn parsed flags into a :class:`LaunchConfig`.

    Raises:
        InvalidUsage: no script was given, or the flags contradict each other.
    """
    command = list(ns.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InvalidUsage("meshcast run: missing the script to run (see meshcast run --help)")
    return LaunchConfig(
        entrypoint=command[0],
        args=tuple(command[1:]),
        nproc_per_node=ns.nproc_per_node,
        nnodes=ns.nnodes,
        node_rank=ns.node_rank,
        master_addr=ns.master_addr,
        master_port=ns.master_port,
        standalone=ns.standalone,
        module=ns.module,
        no_python=ns.no_python,
        prefix_output=ns.prefix,
        grace_period=ns.grace_period,
    )


def handle(ns: argparse.Namespace) -> int:
    """Run the job described by parsed flags; return the exit status."""
    from .launcher import launch  # the launcher is only needed once flags parse

    try:
        return launch(config_from_args(ns))
    except InvalidUsage as exc:
        print(f"{exc}", file=sys.stderr)
        return 2
    except MeshcastError as exc:
        print(f"{exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. fork failed: out of processes or memory
        print(f"meshcast run: could not start the job: {exc}", file=sys.stderr)
        return 1


def build_parser(prog: str = "meshcast run") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, allow_abbrev=False)
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m meshcast.run ...``: the same as ``meshcast run ...``."""
    return handle(build_parser().parse_args(argv))
