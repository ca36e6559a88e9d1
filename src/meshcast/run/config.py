"""LaunchConfig: everything ``meshcast run`` was asked to do, validated once, frozen.

The CLI builds one from its flags; :func:`meshcast.run.launch` takes one, so a
program can start a job without going through argparse.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import usage

# torchrun's defaults for a multi-node static rendezvous; a single node picks
# a free port instead (see LaunchConfig.store_endpoint).
DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 29500

# Seconds between SIGTERM and SIGKILL when the launcher stops workers. Shorter
# than torchrun's 30 s: a meshcast worker blocked in a collective dies at once
# on SIGTERM, and a Ctrl-C should feel immediate on a laptop.
DEFAULT_GRACE_PERIOD = 5.0


@dataclass(frozen=True)
class LaunchConfig:
    """What to launch and how; validated on construction.

    Args:
        entrypoint: the script path, the module name (``module=True``) or the
            program (``no_python=True``) every worker runs.
        args: arguments passed to the entrypoint untouched.
        nproc_per_node: workers started by this launcher.
        nnodes: launchers (nodes) in the job. Each starts its own
            ``nproc_per_node`` (nodes may differ: the launchers agree on the world
            size and each node's first rank through the store before any worker
            starts, see :mod:`meshcast.run.nodes`).
        node_rank: index of this launcher's node, ``0 <= node_rank < nnodes``.
        master_addr: address of the job's store (node 0). ``None``: 127.0.0.1.
        master_port: port of the job's store. ``None``: a free port on a single
            node, 29500 with ``nnodes > 1``.
        standalone: single node on a free loopback port, whatever
            ``master_addr``/``master_port`` say.
        module: run ``entrypoint`` as a module (``python -m``).
        no_python: exec ``entrypoint`` as a program instead of a Python script.
        prefix_output: prefix each line workers print with ``[rank N]: ``.
        grace_period: seconds between SIGTERM and SIGKILL at teardown.

    Raises:
        InvalidUsage: a value is out of range or two options contradict.
    """

    entrypoint: str
    args: tuple[str, ...] = ()
    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    standalone: bool = False
    module: bool = False
    no_python: bool = False
    prefix_output: bool = True
    grace_period: float = DEFAULT_GRACE_PERIOD

    def __post_init__(self) -> None:
        caller = "meshcast run"
        object.__setattr__(self, "args", tuple(self.args))
        if not self.entrypoint:
            raise usage(caller, "missing the script (or module / program) to run")
        if self.nproc_per_node < 1:
            raise usage(caller, f"--nproc-per-node must be >= 1 (got {self.nproc_per_node})")
        if self.nnodes < 1:
            raise usage(caller, f"--nnodes must be >= 1 (got {self.nnodes})")
        if not 0 <= self.node_rank < self.nnodes:
            raise usage(
                caller,
                f"--node-rank must be in [0, {self.nnodes}) for --nnodes {self.nnodes} "
                f"(got {self.node_rank})",
            )
        if self.master_port is not None and not 0 <= self.master_port <= 65535:
            raise usage(caller, f"--master-port must be in [0, 65535] (got {self.master_port})")
        if self.nnodes > 1 and self.master_port == 0:
            raise usage(
                caller,
                "--master-port 0 (a free port) needs a single node: the other nodes "
                "must know the port in advance",
            )
        if self.standalone and self.nnodes > 1:
            raise usage(caller, f"--standalone means one node; got --nnodes {self.nnodes}")
        if self.module and self.no_python:
            raise usage(caller, "-m/--module and --no-python exclude each other")
        if not self.grace_period >= 0:
            raise usage(caller, f"--grace-period must be >= 0 seconds (got {self.grace_period})")

    @property
    def world_size(self) -> int:
        """Workers in the whole job if every node starts as many as this one (the
        launchers of several nodes agree on the real count through the store)."""
        return self.nnodes * self.nproc_per_node

    @property
    def multinode(self) -> bool:
        return self.nnodes > 1

    def store_endpoint(self) -> tuple[str, int]:
        """``(host, port)`` where node 0 hosts the store; port 0 means "pick a free one"."""
        if self.standalone:
            return DEFAULT_MASTER_ADDR, 0
        host = self.master_addr or DEFAULT_MASTER_ADDR
        if self.master_port is not None:
            return host, self.master_port
        return host, DEFAULT_MASTER_PORT if self.multinode else 0

    def global_rank(self, local_rank: int) -> int:
        """Global rank of this node's worker ``local_rank`` if every node starts as many
        as this one (see :attr:`world_size`)."""
        return self.node_rank * self.nproc_per_node + local_rank
