"""Single-copy calls as programs (paths/single_copy.py: CopyPrograms, run_program), in one
process against a scripted interpreter.

``CopyPrograms`` flattens a collective's registered ``cma`` schedule per call shape and
packs it; ``run_program`` is what Python does wherever the compiled interpreter stops
one: finish a late entry (or hand the call over), wait out a closing round the spin
time did not see end, and turn a copy outside a peer's exposure or one the kernel
refused into an abort every rank sees. The interpreter itself is tested in
tests/transport/test_compiled_programs.py, the whole path in tests/collectives.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest

from meshcast import topology
from meshcast.algorithms import _program as prog
from meshcast.errors import MismatchError
from meshcast.ops import ReduceOp
from meshcast.paths import single_copy

REGION = 1 << 16


class _Arena:
    """What run_program uses of an arena: the interpreter replays ``script`` (one
    result per call, recording where each started), waits and aborts are noted."""

    def __init__(self, script: list) -> None:
        self.script, self.starts, self.waits, self.aborts = list(script), [], [], []
        self.small_bytes, self.spin_ns, self.rank = REGION, 0, 1
        self.seq = self.what = self.deadline = None

    def compiled_program(self, seq, entry, spin_ns, packed, inp, out, kernel, start):
        self.starts.append((start, entry))
        got = self.script.pop(0)
        if isinstance(got, BaseException):
            raise got
        return got

    def wait(self, ranks, phase):
        self.waits.append((tuple(ranks), phase, self.seq))

    def abort(self, message, mismatch=False):
        self.aborts.append((message, mismatch))


def _group(arena: _Arena, n: int = 3, rank: int = 1) -> SimpleNamespace:
    return SimpleNamespace(arena=arena, _rank=rank, _size=n, global_ranks=list(range(n)),
                           timeout=5.0, group_name="world")


def _program(kind: str = "broadcast", n: int = 3, rank: int = 1) -> single_copy.CopyProgram:
    group = _group(_Arena([]), n, rank)
    made = single_copy.CopyPrograms(group).get(
        kind, np.dtype(np.float32), 0 if kind == "broadcast" else -1,
        None if kind == "broadcast" else 37, 37 if kind == "broadcast" else 37 * n,
        None if kind == "broadcast" else (37,) * n)
    assert made is not None, f"{kind}: no program"
    return made


def test_a_program_knows_where_its_entry_ends_and_what_its_waits_await():
    for kind in ("broadcast", "all_gather"):
        made = _program(kind)
        words = np.frombuffer(made.packed, np.int64)
        records = words[6:6 + 9 * words[3]].reshape(-1, 9)
        assert records[made.entered - 1][0] == prog.ENTER, kind
        assert [i for i, rec in enumerate(records, 1) if rec[0] == prog.WAIT] == list(
            made.waits), kind
        assert list(made.waits.values()) == [((0, 1, 2), 1)], kind  # the closing round
    # no interpreter: the program bound for Python's executor
    group = _group(_Arena([]))
    group.arena.compiled_program = None
    made = single_copy.CopyPrograms(group).get("broadcast", np.dtype(np.float32), 0, None, 37)
    assert made is not None and made.packed is None and made.steps is not None


class _Exposures:
    """An arena without an interpreter whose ranks all live in this process: rank q
    exposed ``buffers[q]`` (process_vm_readv reads this process's own memory); signals,
    waits and aborts are noted."""

    compiled_program = None
    small_bytes, spin_ns = REGION, 0

    def __init__(self, rank: int, buffers: list[np.ndarray]) -> None:
        self.rank, self.buffers = rank, buffers
        self.signals, self.waits, self.aborts = [], [], []
        self.seq = self.what = self.deadline = None

    def exposed(self, q: int, seq: int) -> tuple[int, int, int]:
        return self.buffers[q].ctypes.data, self.buffers[q].nbytes, 0

    def signal(self, phase: int) -> None:
        self.signals.append(phase)

    def wait(self, ranks, phase) -> None:
        self.waits.append((tuple(ranks), phase))

    def abort(self, message, mismatch=False) -> None:
        self.aborts.append((message, mismatch))


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_pythons_executor_runs_a_single_copy_program_after_the_entry(rank):
    # all_reduce/cma at 3 ranks without the interpreter, in place (as the runtime calls
    # it): my share of every rank's exposed buffer folded in rank order (in 256 KiB
    # chunks: 100 000 float64 a rank), the middle round, the other shares read from
    # their owners, the closing round; every result what NumPy gives
    n, count = 3, 100_000
    data = [np.arange(count, dtype=np.float64) * (q + 1) + q for q in range(n)]
    want = data[0] + data[1] + data[2]
    arena = _Exposures(rank, [d.copy() for d in data])
    group = _group(arena, n, rank)
    group._pids = (os.getpid(),) * n
    made = single_copy.CopyPrograms(group).get("all_reduce", np.dtype(np.float64), -1, None,
                                               count, op=ReduceOp.SUM)
    assert made is not None and made.packed is None
    # the peers' shares, reduced by their owners, are there before I read them
    for q in range(n):
        if q != rank:
            lo, hi = topology.share(count, 8, q, n)
            arena.buffers[q][lo:hi] = want[lo:hi]
    mine = arena.buffers[rank]
    assert single_copy.run_program(group, 7, "all_reduce #7", made, None, None, mine, None)
    np.testing.assert_array_equal(mine, want)
    assert arena.signals == [1, 2] and [w[1] for w in arena.waits] == [1, 2]
    assert not arena.aborts
    # a peer that exposed less (the ranks disagree about the sizes): every rank raises
    arena.buffers[(rank + 1) % n] = arena.buffers[(rank + 1) % n][:10]
    with pytest.raises(MismatchError, match="which holds 80"):
        single_copy.run_program(group, 9, "all_reduce #9", made, None, None, mine, None)
    assert arena.aborts and arena.aborts[0][1] is True


def test_python_waits_out_a_closing_round_then_the_program_goes_on():
    made = _program()
    (after_wait, (ranks, phase)), = made.waits.items()
    arena = _Arena([after_wait * 8 + 2, 0])
    assert single_copy.run_program(_group(arena), 9, "broadcast #9", made, ("e",), None,
                                   None, None)
    assert arena.starts == [(made.entered, None), (after_wait, ("e",))]
    assert arena.waits == [(ranks, phase, 9)] and not arena.aborts


def test_a_late_entry_is_finished_by_agree_or_handed_over():
    made = _program()
    for agreed in (True, False):
        arena = _Arena([0])
        statuses: list[int] = []

        def agree(status: int, agreed: bool = agreed, statuses: list = statuses) -> bool:
            statuses.append(status)
            return agreed

        done = single_copy.run_program(_group(arena), 4, "broadcast #4", made, ("e",), None,
                                       None, made.entered * 8 + 2, agree)
        assert done is agreed and statuses == [2]
        # the program goes on after its entry only where every rank agreed
        assert arena.starts == ([(made.entered, ("e",))] if agreed else [])


def test_a_copy_outside_an_exposure_or_refused_by_the_kernel_aborts_the_group():
    made = _program()
    arena = _Arena([(made.entered + 1) * 8 + 4])
    with pytest.raises(MismatchError, match="rank 1 would copy bytes outside"):
        single_copy.run_program(_group(arena), 6, "broadcast #6", made, ("e",), None, None,
                                None)
    assert arena.aborts and arena.aborts[0][1] is True  # the others raise it too
    arena = _Arena([PermissionError(1, "Operation not permitted")])
    with pytest.raises(PermissionError):
        single_copy.run_program(_group(arena), 8, "broadcast #8", made, ("e",), None, None,
                                None)
    assert arena.aborts == [("rank 1 failed in broadcast #8: [Errno 1] Operation not "
                             "permitted", False)]


def test_an_all_to_all_whose_peer_splits_otherwise_goes_on_another_way():
    # all_to_all's program presumes every rank's split header is mine (its EXPECTs):
    # where the interpreter stops at one (status 4), nothing was copied and the call goes
    # on another way (the lane's: the general path from the entry, with the call's
    # state the arena's); without that way, or at a copy outside an exposure, it aborts
    made = single_copy.CopyPrograms(_group(_Arena([]))).get(
        "all_to_all", np.dtype(np.float32), -1, 37 * 3, 37 * 3)
    assert made is not None and made.expects and min(made.expects) >= made.entered
    at = min(made.expects)
    arena = _Arena([at * 8 + 4])
    went_on: list = []
    done = single_copy.run_program(_group(arena), 11, "all_to_all #11", made, ("e",), None,
                                   None, None, unpresumed=lambda: went_on.append(arena.seq))
    assert done is False and went_on == [11] and not arena.aborts
    for stop, unpresumed in ((at, None), (max(made.expects) + 1, lambda: None)):
        arena = _Arena([stop * 8 + 4])
        with pytest.raises(MismatchError, match="rank 1 "):
            single_copy.run_program(_group(arena), 12, "all_to_all #12", made, ("e",), None,
                                    None, None, unpresumed=unpresumed)
        assert arena.aborts and arena.aborts[0][1] is True


@pytest.mark.parametrize("differs", [False, True])
def test_pythons_executor_checks_the_split_headers_an_all_to_all_presumes(differs):
    # Python's executor runs the same EXPECTs: every rank's header mine, it reads my
    # piece from every rank's exposed input; one header other, nothing is read and the
    # call goes on another way
    from meshcast.paths.oneshot import pack_split_header

    n, piece, rank = 3, 1000, 2
    data = [np.arange(n * piece, dtype=np.float32) + 10_000 * q for q in range(n)]
    arena = _Exposures(rank, data)
    header = pack_split_header([piece] * n, [piece] * n)
    arena.small = [[np.zeros(REGION, np.uint8) for _ in (0, 1)] for _ in range(n)]
    for q in range(n):
        arena.small[q][1][:len(header)] = np.frombuffer(header, np.uint8)
    if differs:
        arena.small[1][1][8] ^= 1
    group = _group(arena, n, rank)
    group._pids = (os.getpid(),) * n
    made = single_copy.CopyPrograms(group).get("all_to_all", np.dtype(np.float32), -1,
                                               n * piece, n * piece)
    assert made is not None and made.packed is None
    out = np.zeros(n * piece, np.float32)
    went_on: list = []
    done = single_copy.run_program(group, 5, "all_to_all #5", made, None, data[rank], out,
                                   None, unpresumed=lambda: went_on.append(arena.seq))
    assert done is not differs and went_on == ([5] if differs else [])
    want = np.zeros_like(out) if differs else np.concatenate(
        [d[rank * piece:(rank + 1) * piece] for d in data])
    np.testing.assert_array_equal(out, want)
    assert not arena.aborts
