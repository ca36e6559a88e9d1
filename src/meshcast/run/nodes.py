"""How the launchers of a job on several nodes meet before any worker starts.

Theory of operation
-------------------
With ``--nnodes N`` every node runs its own ``meshcast run``, and node 0's
launcher hosts the job's store. :func:`join_nodes` is the launchers' own
rendezvous, run by every launcher (node 0's too) before it starts a worker:

1. *Connect* to the store as a client. This is where a node holding another
   ``MESHCAST_SECRET`` (or none) is refused: the store's handshake fails on
   that node, which stops there with the reason, having started nothing.
2. *Claim* the node's key with ``compare_set`` (so two launchers given the
   same ``--node-rank`` are caught), holding what this launcher was asked to
   start: ``{"nproc", "nnodes", "host"}``.
3. *Wait* for every node's key, then compute the same :class:`NodeLayout` on
   every node: the world size is the sum of the nodes' worker counts and node
   k's first rank the sum of the counts of the nodes before it. So
   ``--nproc-per-node`` may differ per node (3 + 1), as with torchrun.

A launcher that finds the nodes disagree (another ``--nnodes``) writes the
reason under :data:`ERROR_KEY`, so every node fails with it instead of waiting
out the rendezvous timeout. Node 0, which hosts the store, also sees the
connections its store refused for a wrong secret: while a node is missing,
one of those means that node will never join, so node 0 fails at once too
(and tells the nodes that did join).
"""

from __future__ import annotations

import json
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any

from ..errors import AuthenticationError, CommTimeout, RendezvousError
from .config import LaunchConfig

PREFIX = "meshcast/run"
#: Where a launcher that finds the nodes' rendezvous impossible writes why.
ERROR_KEY = f"{PREFIX}/error"
#: Seconds between looks at the error key (and node 0's refused connections).
_POLL_S = 0.2


@dataclass(frozen=True)
class NodeLayout:
    """Where a job's ranks live, as every launcher of the job computes it.

    Attributes:
        counts: workers of each node, by node rank.
        hosts: host name of each node's launcher.
        node_rank: this node.
    """

    counts: tuple[int, ...]
    hosts: tuple[str, ...]
    node_rank: int

    @property
    def world_size(self) -> int:
        """Workers in the whole job."""
        return sum(self.counts)

    @property
    def first_rank(self) -> int:
        """Global rank of this node's local rank 0."""
        return sum(self.counts[:self.node_rank])

    @classmethod
    def single(cls, config: LaunchConfig) -> NodeLayout:
        """The layout of a one-node job (nothing to agree on)."""
        return cls((config.nproc_per_node,), (socket.gethostname(),), 0)


def join_nodes(config: LaunchConfig, master: tuple[str, int], secret: str, timeout: float,
               server: Any = None) -> tuple[Any, NodeLayout]:
    """Meet the other nodes' launchers through the job's store (see the module docstring).

    Args:
        config: this launcher's configuration (``nnodes > 1``).
        master: the store's ``(host, port)``.
        secret: the job secret (hex).
        timeout: seconds to reach the store and for every node to join.
        server: the store's server when this launcher hosts it (node 0), to see the
            connections it refused for a wrong secret.

    Returns:
        ``(client, layout)``: this launcher's connection to the store (the caller
        closes it) and the job's layout.

    Raises:
        AuthenticationError: the store refused this node's secret, or (node 0) refused
            a node's while that node is missing.
        RendezvousError: the store could not be reached, nodes disagree on ``--nnodes``
            or claim the same ``--node-rank``, or not every node joined in ``timeout``.
    """
    from ..rendezvous.tcp_store import TCPStore

    host, port = master
    where = f"{host}:{port}"
    me = config.node_rank
    try:
        client = TCPStore(host, port, timeout=timeout, secret=bytes.fromhex(secret))
    except AuthenticationError as exc:
        raise AuthenticationError(
            f"meshcast run: node {me} cannot join the job: the store at {where} (hosted by "
            f"node 0's launcher) refused this node's MESHCAST_SECRET ({exc}). Start every "
            "node with the same MESHCAST_SECRET; no worker was started") from None
    except RendezvousError as exc:
        raise RendezvousError(f"meshcast run: node {me} cannot join the job: {exc}") from None
    try:
        return client, _meet(client, config, where, timeout, server)
    except BaseException:
        client.close()
        raise


def _meet(client: Any, config: LaunchConfig, where: str, timeout: float,
          server: Any) -> NodeLayout:
    n, me = config.nnodes, config.node_rank
    # The nonce tells two launchers apart that would otherwise claim alike (one host).
    mine = json.dumps({"nproc": config.nproc_per_node, "nnodes": n,
                       "host": socket.gethostname(), "nonce": secrets.token_hex(8)}).encode()
    claimed = client.compare_set(f"{PREFIX}/node/{me}", b"", mine)
    if claimed != mine:
        other = json.loads(claimed).get("host", "?")
        raise _fail(client, f"meshcast run: two launchers claim --node-rank {me} (on hosts "
                      f"{other} and {socket.gethostname()}); give each node its own")
    keys = [f"{PREFIX}/node/{k}" for k in range(n)]
    deadline = time.monotonic() + timeout
    linger = server is not None  # node 0's store must outlive its error a moment
    while True:
        try:
            client.wait(keys, _POLL_S)
            break
        except CommTimeout:
            pass
        except RendezvousError as exc:
            raise RendezvousError(
                f"meshcast run: node {me} lost the store at {where} while the nodes were "
                f"meeting ({exc}); node 0's launcher has stopped: see its output") from None
        if client.check([ERROR_KEY]):
            raise RendezvousError(client.get(ERROR_KEY).decode("utf-8", "replace"))
        missing = [k for k, key in enumerate(keys) if not client.check([key])]
        refused = sorted(set(server.refused_peers)) if server is not None else []
        if refused:
            raise _fail(client, (
                f"meshcast run: node(s) {missing} did not join: the store at {where} refused "
                f"connection(s) from {', '.join(refused)} that did not hold this job's "
                "MESHCAST_SECRET. Start every node with the same MESHCAST_SECRET; no worker "
                "was started"), AuthenticationError, linger)
        if time.monotonic() > deadline:
            raise _fail(client, (
                f"meshcast run: node(s) {missing} of {n} did not join the store at {where} "
                f"within {timeout:g} s; is a launcher running on every node, with the same "
                "--master-addr/--master-port and MESHCAST_SECRET?"), linger=linger)
    infos = [json.loads(client.get(key)) for key in keys]
    odd = [k for k, info in enumerate(infos) if info.get("nnodes") != n]
    if odd:
        raise _fail(client, (
            f"meshcast run: the nodes disagree on --nnodes: node(s) {odd} say "
            f"{sorted({infos[k].get('nnodes') for k in odd})}, node(s) "
            f"{[k for k in range(n) if k not in odd]} say {n}; no worker was started"),
            linger=server is not None)
    return NodeLayout(tuple(int(i["nproc"]) for i in infos),
                      tuple(str(i.get("host", "?")) for i in infos), me)


def _fail(client: Any, text: str, kind: type[RendezvousError] = RendezvousError,
          linger: bool = False) -> RendezvousError:
    """Tell every node why the rendezvous failed (the first reason wins); the error to raise.

    ``linger``: this launcher hosts the store, which closes when it raises: keep it a
    few polls longer, so that the waiting nodes read the reason rather than a lost store.
    """
    try:
        client.compare_set(ERROR_KEY, b"", text.encode())
    except (RendezvousError, CommTimeout, OSError):
        pass
    if linger:
        time.sleep(3 * _POLL_S)
    return kind(text)


__all__ = ["NodeLayout", "join_nodes"]
