"""Every ``MESHCAST_*`` environment knob, declared once: name, type, default, meaning.

Other modules read knobs only through :func:`get`, so the README's table and
``meshcast run --help-env`` can be generated from :data:`KNOBS` and never
drift from the code.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Knob:
    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str


def _bool(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


def _size(text: str) -> int:
    """Parse ``4096``, ``64K``, ``8M``, ``1G`` (binary multiples)."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in scale:
        return int(float(text[:-1]) * scale[text[-1]])
    return int(text)


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob("MESHCAST_SECRET", str, None,
             "Job secret (hex) that store and peer connections must prove; set by `meshcast run`."),
        Knob("MESHCAST_TIMEOUT", float, 300.0,
             "Default timeout in seconds for collectives, point-to-point and rendezvous."),
        Knob("MESHCAST_ALGO", str, "",
             "Algorithm overrides, e.g. `all_reduce:ring;broadcast:tree`."),
        Knob("MESHCAST_SHM_DIR", str, "",
             "Put shared-memory segments as named files in this directory instead of memfd."),
        Knob("MESHCAST_SLOT_BYTES", _size, 4 << 20,
             "Bytes of each rank's slot in a group's shared arena."),
        Knob("MESHCAST_RING_BYTES", _size, 1 << 20,
             "Bytes of each directed point-to-point ring in shared memory: the largest "
             "message that is copied through it whole (larger ones go single-copy, or "
             "stream through it in pieces)."),
        Knob("MESHCAST_CMA_BYTES", _size, 2 << 20,
             "Point-to-point messages of at least this size, or too large for the ring "
             "whole (where ranks outnumber cores: as large as the ring), are copied once, "
             "straight from the sender's memory (process_vm_readv); contiguous ones "
             "between two ranks of the compiled helper already from 128 KiB (256 KiB "
             "where ranks outnumber cores) or this size if smaller; 0 turns it off."),
        Knob("MESHCAST_COMPILED", _bool, True,
             "Run the tiny calls' arena round and combine, and the single-copy reads, in the "
             "compiled helper (transport/_tiny.c) when it was built, and across hosts over "
             "MPI the agreement's exchange of rows and the tiny calls whole "
             "(transport/_mpi_rows.c); 0 keeps them in Python."),
        Knob("MESHCAST_SPIN_US", float, 50.0,
             "Microseconds a waiter spins before it starts yielding, then blocking (when "
             "unset and a host runs more ranks than cores, waiters do not spin)."),
        Knob("MESHCAST_LIVENESS_S", float, 0.25,
             "Seconds between checks that the peers being waited on are still alive."),
        Knob("MESHCAST_RUN_ID", str, "",
             "Identifier of the job; set by `meshcast run`, used to name segments."),
        Knob("MESHCAST_STORE_HOSTED", _bool, False,
             "Set to 1 by `meshcast run`: the launcher hosts the store, every rank is a client."),
        Knob("MESHCAST_ERROR_FILE", str, "",
             "Where a worker started by `meshcast run` writes its traceback on failure."),
        Knob("MESHCAST_INTERNODE", str, "",
             "Engine between hosts when the ranks run on several: `mpi` (mpi4py) or `gloo` "
             "(torch); default: MPI under an MPI launcher if mpi4py is installed, else Gloo."),
        Knob("MESHCAST_IFNAME", str, "",
             "Network interface the inter-host engine and the store use (Gloo's device; "
             "the address rank 0's store announces under mpiexec)."),
        Knob("MESHCAST_HOST_ID", str, "",
             "Overrides this process's host identity (hostname/boot id): ranks with "
             "different ids never share memory."),
        Knob("MESHCAST_TRACE", str, "",
             "Directory where every rank writes a record of every call it runs "
             "(rank-NNNNN.jsonl; see meshcast.trace.records); off when empty."),
    )
}


def get(name: str) -> Any:
    """Return the parsed value of knob ``name`` from the environment, or its default."""
    knob = KNOBS[name]
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return knob.default
    try:
        return knob.parse(raw)
    except ValueError as exc:
        from .errors import InvalidUsage

        raise InvalidUsage(f"environment variable {name}={raw!r} is not valid: {exc}") from None


def parse_size(text: str) -> int:
    """Parse a byte size with an optional K/M/G suffix (used by the CLI too)."""
    return _size(text)
