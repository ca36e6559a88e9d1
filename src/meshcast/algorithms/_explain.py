"""``meshcast algorithms COLLECTIVE --size S -n N [--hosts H]``: what runs such a call, and where.

The answer comes from the same functions the library decides with: on one
host :func:`._select.fast_path` and then :func:`._select.decide`; across hosts
the eager rule of meshcast.spanning and :func:`.hierarchical.choose`. Every
collective's test (tests/collectives/test_<collective>.py) checks on real
processes that the table's answer is what runs.
"""

from __future__ import annotations

import numpy as np

from .. import _wait, config, ops
from . import _select, hierarchical
from . import eager as eager_calls
from ._onehost import split_head
from ._simulate import make_plans

# Where each path's code, engine and tests are (file names a reader can open).
_FAST_WHERE = {
    "oneshot": ("algorithms/{coll}.py::oneshot, run as a program (flattened by "
                "algorithms/_program.py, run by transport/_tiny.c's interpreter, Round.program, "
                "or by algorithms/_execute.py's BoundProgram without it; paths/oneshot.py's "
                "job, picked by calls.py) and lanes.py (the tiny-call lane for synchronous "
                "NumPy calls, which runs the same program in the same interpreter, "
                "broadcast's and reduce's entries one-sided)",
                "transport/arena.py: one-shot regions, one signal",
                "tests/collectives/test_{coll}.py, test_fast_paths.py"),
    "cma": ("algorithms/{coll}.py::cma, run as a program (flattened and packed by "
            "paths/single_copy.py's CopyPrograms, run by transport/_tiny.c's interpreter, "
            "Round.program: exposure, entry, copies, folds of the peers' exposed buffers "
            "and closing round in one call; paths/single_copy.run_program where it stops; "
            "without the compiled helper, or for an op no kernel folds, "
            "algorithms/_execute.py's BoundProgram after the entry; paths/single_copy.py's "
            "bodies only for an all_to_all of uneven splits and a gather root's uneven "
            "pieces apart), picked by calls.py and lanes.py",
            "transport/_tiny.c (process_vm_readv/writev in the interpreter) + "
            "transport/arena.py (the entry, the closing round)",
            "tests/collectives/test_{coll}.py, test_fast_paths.py, "
            "tests/transport/test_compiled_programs.py (the interpreter), "
            "tests/unit/test_copy_programs.py (where it stops)"),
    "symmetric": ("algorithms/{coll}.py::symmetric, run as a program whose side in the "
                  "allocation is every rank's part of it (algorithms/_program.py's as_mapped; "
                  "transport/_tiny.c's interpreter after the group's entry, or "
                  "algorithms/_execute.py's BoundProgram without it; paths/symmetric.py, "
                  "picked by calls.py)",
                  "symmetric.py: the peers' parts mapped in this process (plain copies and "
                  "folds where they lie) + transport/arena.py (the entry, the closing round)",
                  "tests/collectives/test_{coll}.py, test_symmetric.py"),
}

# one-shot calls whose layout only the entry reveals: programs on the lane, whose rooted
# entry presumes it (and hands the call over where it differs), Staged on the general path
_STAGED = ("gather", "scatter", "all_to_all")
_STAGED_CODE = ("algorithms/{coll}.py::oneshot, run as a program by lanes.py (the tiny-call "
                "lane: the general path's entry and the program in one call of "
                "transport/_tiny.c's interpreter, Round.program); on the general path "
                "paths/oneshot.py's Staged (picked by calls.py, run by group.py's _submit), "
                "since only the entry tells every rank's layout; uneven pieces on the lane: "
                "uneven_all_to_all.py, and uneven_rooted.py for a gather or scatter root")


def explain(coll: str, nbytes: int, n: int, hosts: int = 1, cma: bool = True) -> str:
    """Say which algorithm runs ``coll`` with ``nbytes`` per rank on ``n`` ranks
    spread evenly over ``hosts`` hosts, with the defaults, and where it lives.

    Raises:
        ValueError: an unknown collective, n < 1, hosts < 1 or more hosts than ranks.
    """
    if coll not in _select.TABLE:
        raise ValueError(f"no collective {coll!r}")
    if n < 1 or hosts < 1 or hosts > n:
        raise ValueError(f"need 1 <= hosts <= ranks (got {hosts} hosts, {n} ranks)")
    what = f"{coll} of {_size(nbytes)} per rank on {n} rank{'s' * (n > 1)}"
    if hosts > 1:
        return _across(coll, nbytes, n, hosts, what)
    # (crowded: n ranks on this machine's cores, as a job of n ranks here would be)
    caps = _select.HostCaps(n, _oneshot_bytes(), cma, n > _wait.usable_cores())
    fast = _select.fast_path(coll, caps, nbytes,
                             header=split_head(n) if coll == "all_to_all" else 0)
    lines = [f"{what}, one host:"]
    if fast is not None:
        code, engine, tests = _FAST_WHERE[fast]
        if fast == "oneshot" and coll in _STAGED:
            code = _STAGED_CODE
        elif fast == "oneshot":
            tests += (", tests/unit/test_programs.py (the program is its generator), "
                      "tests/transport/test_compiled_programs.py (the interpreter)")
        lines += [f"  runs      {coll}/{fast} (a fast path: "
                  "algorithms/_select.py fast_path() says so)",
                  f"  code      {code.format(coll=coll)}", f"  engine    {engine}",
                  f"  schedule  algorithms/{coll}.py::{fast} (described: simulated in "
                  "tests/unit/test_schedules.py, pinned to the runtime in "
                  "tests/collectives/test_fast_path_schedules.py)",
                  f"  tested in {tests.format(coll=coll)}"]
    else:
        entry = _schedule(coll, nbytes, n)
        engine = ("transport/arena.py (shared slots)" if entry.family == "arena"
                  else "transport/shm.py (point-to-point rings)")
        lines += [f"  runs      {entry.qualname} (a schedule: algorithms/_select.py decide())",
                  f"  code      algorithms/{coll}.py::{entry.name}, run by "
                  "algorithms/_execute.py",
                  f"  engine    {engine}",
                  f"  tested in tests/collectives/test_{coll}.py (every registered "
                  "algorithm) and tests/unit/test_schedules.py (the simulator)"]
    if cma:
        lines.append("  (if the kernel forbids process_vm_readv: --no-cma)")
    return "\n".join(lines)


def _across(coll: str, nbytes: int, n: int, hosts: int, what: str) -> str:
    per = [n // hosts + (h < n % hosts) for h in range(hosts)]
    layout = hierarchical.Layout(tuple(tuple(range(sum(per[:h]), sum(per[:h + 1])))
                                       for h in range(hosts)), 0)
    eager = hierarchical.eager_cap(coll, hierarchical.agreement_route("mpi", n), layout)
    eager_gloo = hierarchical.eager_cap(coll, hierarchical.agreement_route("gloo", n),
                                        layout, "gloo")
    lines = [f"{what}, {hosts} hosts ({' + '.join(map(str, per))} ranks):"]
    table = "ONE_RANK_A_HOST, DEFAULTS" if max(per) == 1 else "DEFAULTS"
    # What the group decides by (spanning.py): an all_gather, a gather and a scatter by
    # the gathered array, a reduce_scatter and an all_to_all by a rank's whole input; and what a rank's row
    # carries when the call is eager (a reduce_scatter's or an all_to_all's whole input;
    # an all_to_all only in even pieces).
    whole = (nbytes * n if coll in ("all_gather", "reduce_scatter", "all_to_all", "gather",
                                    "scatter") else nbytes)
    carried = nbytes * n if coll in ("reduce_scatter", "all_to_all") else nbytes
    rides = carried <= max(eager, eager_gloo)  # (eager over one engine at least)
    if rides:
        over = "" if carried <= min(eager, eager_gloo) else (
            " over MPI" if carried <= eager else " over Gloo")
        lines.append(f"  runs      {coll}/eager{over}: the data travels with the call's "
                     f"agreement (every rank's data <= {eager} B over MPI, {eager_gloo} B "
                     "over Gloo; algorithms/hierarchical.py eager_cap, spanning.py)")
        lines.append(f"  code      algorithms/eager.py::{eager_calls.ALGORITHMS[coll][1].__name__}: "
                     "the agreement's exchange of rows (hierarchical.agreement_route), then "
                     "a fold or copy from them")
        if eager_gloo < carried:
            family = hierarchical.choose(coll, layout, whole, None, "gloo")
            lines.append(f"            {coll}/{family} over Gloo (algorithms/hierarchical.py "
                         f"{table} and choose())")
    else:
        family = hierarchical.choose(coll, layout, whole, None, "mpi")
        over_gloo = hierarchical.choose(coll, layout, whole, None, "gloo")
        engines = "" if family == over_gloo else f" over MPI, {coll}/{over_gloo} over Gloo"
        lines.append(f"  runs      {coll}/{family}{engines} (algorithms/hierarchical.py "
                     f"{table} and choose())")
        code = ", ".join(f"::{hierarchical.ALGORITHMS[coll][f].__name__}"
                         for f in dict.fromkeys((family, over_gloo)))
        engines = ("MPI or Gloo between every pair of ranks" if family == over_gloo == "flat"
                   else "shared memory inside each host (the one-host paths above), MPI or "
                   "Gloo between hosts")
        lines.append(f"  code      algorithms/hierarchical.py{code}: {engines} "
                     "(transport/interhost.py)")
    unit = ("tests/unit/test_eager.py (every collective against NumPy)" if rides
            else "tests/unit/test_hierarchical.py (the simulator, every family)")
    lines.append(f"  tested in {unit}, tests/runtime/test_host_spanning.py, tests/multihost/")
    return "\n".join(lines)


def _oneshot_bytes() -> int:
    from ..transport.arena import oneshot_bytes

    return oneshot_bytes(config.get("MESHCAST_SLOT_BYTES"))


def _schedule(coll: str, nbytes: int, n: int) -> _select.AlgorithmEntry:
    count = max(nbytes // 4, 1)
    dtype = np.float32
    reducing = coll in ("all_reduce", "reduce", "reduce_scatter")
    op = ops.ReduceOp.SUM if reducing else None
    if coll in ("all_gather", "gather", "scatter", "reduce_scatter"):
        inputs = ([np.zeros(count * n, dtype)] * n if coll in ("scatter", "reduce_scatter")
                  else [np.zeros(count, dtype)] * n)
        counts = [count] * n
    elif coll == "all_to_all":
        inputs, counts = [np.zeros(count * n, dtype)] * n, None
    elif coll == "barrier":
        inputs, counts = None, None
    else:
        inputs, counts = [np.zeros(count, dtype)] * n, None
    root = 0 if coll in ("broadcast", "reduce", "gather", "scatter") else -1
    plan = make_plans(coll, n, inputs, dtype=dtype, op=op, root=root, counts=counts,
                      slot_bytes=config.get("MESHCAST_SLOT_BYTES") if n > 1 else 0)[0]
    return _select.decide(plan)


def _size(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"
