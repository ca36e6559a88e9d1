"""The ``meshcast`` command: a dispatcher over subcommands (``meshcast run ...``).

A subcommand is a :class:`Subcommand` row in :data:`SUBCOMMANDS`. Adding one
(``bench``, ``viz``) takes one import and one line here; its module provides
``HELP``, ``add_arguments(parser)`` and ``handle(namespace) -> int``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .algorithms import _cli as algorithms_cli
from .bench import cli as bench_cli
from .run import cli as run_cli
from .viz import cli as viz_cli


@dataclass(frozen=True)
class Subcommand:
    """One ``meshcast <name>`` subcommand.

    Args:
        name: the word after ``meshcast``.
        help: one line shown in ``meshcast --help``.
        add_arguments: adds the subcommand's flags to its parser.
        handler: runs the subcommand from the parsed namespace; returns the exit status.
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("run", run_cli.HELP, run_cli.add_arguments, run_cli.handle),
    Subcommand("bench", bench_cli.HELP, bench_cli.add_arguments, bench_cli.handle),
    Subcommand("viz", viz_cli.HELP, viz_cli.add_arguments, viz_cli.handle),
    Subcommand("algorithms", algorithms_cli.HELP, algorithms_cli.add_arguments,
               algorithms_cli.handle),
)


def build_parser() -> argparse.ArgumentParser:
    """The ``meshcast`` parser with one subparser per entry of :data:`SUBCOMMANDS`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("meshcast")
    except PackageNotFoundError:  # running from a source tree that is not installed
        release = "unknown"
    parser = argparse.ArgumentParser(
        prog="meshcast",
        description="meshcast: collective communication for Python (NumPy and PyTorch CPU).",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"meshcast {release}")
    sub = parser.add_subparsers(title="subcommands", metavar="<subcommand>")
    for cmd in SUBCOMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help, allow_abbrev=False)
        cmd.add_arguments(p)
        p.prog = f"meshcast {cmd.name}"
        p.set_defaults(_handler=cmd.handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``meshcast`` console script and ``python -m meshcast``.

    Args:
        argv: the arguments after the program name; ``None`` reads ``sys.argv``.

    Returns:
        The exit status of the subcommand (``meshcast`` alone prints help and returns 0).
    """
    parser = build_parser()
    ns = parser.parse_args(None if argv is None else list(argv))
    handler = getattr(ns, "_handler", None)
    if handler is None:
        parser.print_help()
        return 0
    return handler(ns)
