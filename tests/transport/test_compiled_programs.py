"""The compiled program interpreter (``Round.program`` in transport/_tiny.c) against the
simulator, in one process: every rank's view of one anonymous mapping, the ranks run
one after the other.

Each registered one-shot schedule is flattened per rank (as paths/oneshot.Programs
does), packed (``_execute.pack_program``) and run by the interpreter on the rank's own
arrays. The ranks enter in turn: all but the last find someone missing (status 2,
the record to resume from), the last finds everyone and finishes; the others then
resume after the round. Every rank's output must be bitwise what the simulator gives
for the schedule's generator, for every rank count, root, dtype, op and placement.
"""

from __future__ import annotations

import ctypes
import dataclasses
import mmap
import os
import struct

import numpy as np
import pytest

from meshcast import ops
from meshcast.algorithms import _execute, _simulate
from meshcast.algorithms import _program as prog
from meshcast.algorithms import _registry as registry
from meshcast.algorithms._plan import Plan
from meshcast.algorithms._simulate import host_options, make_plans
from meshcast.ops import ReduceOp
from meshcast.testing import reference
from meshcast.transport.arena import Arena

try:
    from meshcast.transport import _tiny
except ImportError:  # tests/transport/test_compiled_round.py says the helper must be built
    _tiny = None
pytestmark = pytest.mark.skipif(_tiny is None, reason="the compiled helper was not built")

FP = 32
REGION = _simulate.REGION_BYTES
PIECES = {"all_gather", "reduce_scatter"}
ROOTED = {"broadcast", "reduce"}


class _Mapping:
    """n ranks' arena in one anonymous mapping (the layout Arena computes)."""

    def __init__(self, n: int) -> None:
        self.ranks_off, self.fp_off, self.small_off, _, _ = Arena.layout(n, 1)
        self.mm = mmap.mmap(-1, self.small_off + n * 2 * REGION)
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        self.rounds = [_tiny.Round(self.address, n, r, self.ranks_off, self.fp_off,
                                   self.small_off, REGION, FP, 0, self) for r in range(n)]

    def word(self, rank: int) -> int:
        return struct.unpack_from("<Q", self.mm, self.ranks_off + rank * 64)[0]


def _fp(seq: int, tag: int = 0) -> bytes:
    return struct.pack("<Q", seq) + bytes([tag]) * (FP - 8)


def _flat(plan: Plan, family: str = "oneshot") -> prog.Program:
    """The rank's program for this call shape (its registered ``family`` schedule),
    flattened on probe arrays."""
    def fresh(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.empty(a.size, plan.dtype)
    probe = dataclasses.replace(plan, input=fresh(plan.input), output=fresh(plan.output))
    entry = registry.get(plan.coll, family)
    return prog.flatten(entry.fn, probe, entry.qualname)


def _packed(plan: Plan, family: str = "oneshot") -> bytes:
    """The rank's program for this call shape, packed for the interpreter."""
    packed = _execute.pack_program(_flat(plan, family), REGION)
    assert packed is not None, f"{plan.coll}: the {family} program was not packed"
    return packed


def _awaits(plan: Plan) -> tuple[int, ...]:
    """The ranks the program's entry awaits (every rank unless one-sided)."""
    program = _flat(plan)
    peer = next(rec[1] for rec in program.records if rec[0] == prog.ENTER)
    return tuple(range(plan.size)) if peer < 0 else program.rank_sets[peer]


def _plans(coll: str, n: int, count: int, root: int, dtype: np.dtype, op: ReduceOp | None,
           uneven: bool, in_place: bool) -> list[Plan]:
    counts = None
    if coll in PIECES:
        counts = [(count + 3 * r) % 7 if uneven else count for r in range(n)]
    lens = [0 if coll == "barrier" else sum(counts) if coll == "reduce_scatter"
            else counts[r] if counts else count for r in range(n)]
    data = [reference.rank_input(r, lens[r], dtype) if coll != "barrier" else None
            for r in range(n)]
    return make_plans(coll, n, data, dtype=dtype, op=op, root=root, counts=counts,
                      in_place=in_place, **host_options("oneshot"))


def _run_compiled(plans: list[Plan], seq: int, kernel: int) -> list[int]:
    """Every rank's program through the interpreter, ranks entering in turn; returns
    the statuses the first calls gave."""
    n = len(plans)
    m = _Mapping(n)
    programs = [_packed(p) for p in plans]
    statuses, resume = [], []
    for r, p in enumerate(plans):
        got = m.rounds[r].program(seq, _fp(seq), 0, programs[r], p.input, p.output, kernel, 0,
                                  f"call {seq}")
        statuses.append(got & 7)
        resume.append(got >> 3)
        assert m.word(r) == (seq << 24) | 1, f"rank {r} did not signal phase 1"
    for r, p in enumerate(plans):
        if statuses[r]:
            again = m.rounds[r].program(seq, _fp(seq), 0, programs[r], p.input, p.output,
                                        kernel, resume[r])
            assert again == 0, f"rank {r}: resuming after the round gave {again}"
    return statuses


CASES = [(coll, n) for coll in ("barrier", "broadcast", "reduce", "all_reduce", "all_gather",
                                "reduce_scatter") for n in (2, 3, 5, 8)]


@pytest.mark.parametrize("coll,n", CASES)
def test_the_interpreter_gives_the_simulators_results(coll, n):
    checked = 0
    for dtype, op in ((np.float32, ReduceOp.SUM), (np.float64, ReduceOp.PRODUCT),
                      (np.int8, ReduceOp.SUM), (np.int64, ReduceOp.MIN),
                      (np.uint16, ReduceOp.BXOR)):
        dt = np.dtype(dtype)
        reducing = coll in ("reduce", "all_reduce", "reduce_scatter")
        if not reducing and dtype is not np.float32:
            continue
        kernel = ops.compiled_kernel(op, dt) if reducing else -1
        assert kernel is not None
        for root in sorted({0, n - 1} if coll in ROOTED else {-1}):
            # 9000 float32: staged in chunks with progress, a broadcast reader's copy
            # pipelined (_tiny.c, PIPE_MIN)
            for count, uneven in ((0, False), (1, False), (37, False), (9, True), (9000, False)):
                if (uneven and coll not in PIECES) or (
                        count * dt.itemsize * (n if coll in PIECES else 1) > REGION):
                    continue
                for in_place in (False, True):
                    args = (coll, n, count, root, dt, op if reducing else None, uneven,
                            in_place)
                    want, got = _plans(*args), _plans(*args)
                    _simulate.run(registry.get(coll, "oneshot").fn, want)
                    statuses = _run_compiled(got, seq=7 + count, kernel=kernel)
                    # ranks enter in turn: a rank finds its awaited ranks if they came first
                    assert statuses == [0 if all(a <= r for a in _awaits(p)) else 2
                                        for r, p in enumerate(got)], statuses
                    for r, (a, b) in enumerate(zip(want, got)):
                        if a.output is not None:
                            assert a.output.tobytes() == b.output.tobytes(), \
                                f"{args} rank {r}: {b.output} != {a.output}"
                            checked += 1
    assert checked or coll == "barrier", "vacuous: no output compared"


def _edge_values(dtype: np.dtype) -> np.ndarray:
    """NaNs of three payloads (one negative), both zeros, both infinities, numbers."""
    bits = np.dtype(f"u{dtype.itemsize}")
    nan = np.array([np.nan], dtype).view(bits)
    sign = bits.type(1) << bits.type(dtype.itemsize * 8 - 1)
    nans = np.concatenate([nan | 1, nan | 2, nan | 3 | sign]).view(dtype)
    return np.concatenate([nans, np.array([-0.0, 0.0, np.inf, -np.inf, 1.5, -2.0], dtype)])


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_min_and_max_pick_nans_and_zeros_as_numpy_does(n, dtype):
    """The compiled float MIN/MAX folds against NumPy's: every rank's all_reduce result
    bitwise ops.reduce_many's, over every ordered choice of edge values across ranks
    (which NaN wins, which zero) and lengths that leave a vector loop's tail."""
    dt = np.dtype(dtype)
    values = _edge_values(dt)
    grid = np.stack([g.ravel() for g in np.meshgrid(*[values] * min(n, 3), indexing="ij")])
    for op in (ReduceOp.MIN, ReduceOp.MAX):
        kernel = ops.compiled_kernel(op, dt)
        assert kernel is not None, f"{op} on {dt}: no compiled kernel on this NumPy"
        for count in (1, 7, 37, grid.shape[1]):
            data = [grid[r % grid.shape[0], :count].copy() for r in range(n)]
            want = np.empty(count, dt)
            ops.reduce_many(op, want, data)
            plans = make_plans("all_reduce", n, data, dtype=dt, op=op, root=-1,
                               in_place=False, **host_options("oneshot"))
            _run_compiled(plans, seq=5 + count, kernel=kernel)
            for r, p in enumerate(plans):
                assert p.output.view(f"u{dt.itemsize}").tobytes() == \
                    want.view(f"u{dt.itemsize}").tobytes(), \
                    f"{op} {dt} n={n} count={count} rank {r}: {p.output} != {want}"


@pytest.mark.parametrize("n", [2, 3, 5])
def test_bool_ops_fold_as_numpys_logical_ufuncs(n):
    """The compiled bool folds against NumPy's logical ufuncs (ops._BOOL_KERNELS): every
    op, every ordered choice of bytes 0, 1, 2 and 255 across ranks (any nonzero byte is
    true; the result is 0 or 1), bitwise ops.reduce_many's result on every rank."""
    dt = np.dtype(bool)
    values = np.array([0, 1, 2, 255], np.uint8)
    grid = np.stack([g.ravel() for g in np.meshgrid(*[values] * min(n, 3), indexing="ij")])
    grid = np.tile(grid, 3)  # past a vector's width
    for op in (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.BAND,
               ReduceOp.BOR, ReduceOp.BXOR):
        kernel = ops.compiled_kernel(op, dt)
        assert kernel is not None, f"{op} on bool: no compiled kernel"
        for count in (1, 7, grid.shape[1]):
            data = [grid[r % grid.shape[0], :count].view(bool) for r in range(n)]
            want = np.empty(count, dt)
            ops.reduce_many(op, want, data)
            plans = make_plans("all_reduce", n, [d.copy() for d in data], dtype=dt, op=op,
                               root=-1, in_place=False, **host_options("oneshot"))
            _run_compiled(plans, seq=5 + count, kernel=kernel)
            for r, p in enumerate(plans):
                assert p.output.view(np.uint8).tobytes() == want.view(np.uint8).tobytes(), \
                    f"{op} n={n} count={count} rank {r}: {p.output.view(np.uint8)} != " \
                    f"{want.view(np.uint8)}"


def test_a_differing_fingerprint_and_an_abort_stop_before_the_fold():
    n = 2
    plans = _plans("all_reduce", n, 5, -1, np.dtype(np.int32), ReduceOp.SUM, False, False)
    before = [p.output.copy() for p in plans]
    m = _Mapping(n)
    program = [_packed(p) for p in plans]
    kernel = ops.compiled_kernel(ReduceOp.SUM, np.dtype(np.int32))
    assert m.rounds[0].program(9, _fp(9), 0, program[0], plans[0].input, plans[0].output,
                               kernel, 0) & 7 == 2
    got = m.rounds[1].program(9, _fp(9, tag=3), 0, program[1], plans[1].input,
                              plans[1].output, kernel, 0)
    assert got & 7 == 1  # everyone there, a fingerprint differs: Python compares
    assert got >> 3 == 3  # resume after ROUND, PUT, ENTER
    assert plans[1].output.tobytes() == before[1].tobytes()  # nothing folded
    m.mm[0:4] = struct.pack("<I", 1)  # the group's abort word
    assert m.rounds[0].program(11, _fp(11), 0, program[0], plans[0].input, plans[0].output,
                               kernel, 0) == 0 * 8 + 3
    assert m.word(0) == (9 << 24) | 1  # nothing signalled for call 11


def test_bad_calls_raise_before_anything_is_signalled():
    plans = _plans("all_reduce", 2, 4, -1, np.dtype(np.float32), ReduceOp.SUM, False, False)
    m = _Mapping(2)
    program = _packed(plans[0])
    run = m.rounds[0].program
    inp, out = plans[0].input, plans[0].output
    with pytest.raises(ValueError, match="another size"):
        run(3, _fp(3), 0, program, inp[:3].copy(), out, 8 * 8, 0)
    with pytest.raises(ValueError, match="needs is None"):
        run(3, _fp(3), 0, program, None, out, 8 * 8, 0)
    with pytest.raises(ValueError, match="bad fingerprint, program or start"):
        run(3, b"short", 0, program, inp, out, 8 * 8, 0)
    with pytest.raises(ValueError, match="bad fingerprint, program or start"):
        run(3, _fp(3), 0, program[:16], inp, out, 8 * 8, 0)
    with pytest.raises(ValueError, match="no such kernel"):
        run(3, _fp(3), 0, program, inp, out, 99 * 8, 0)
    read_only = out.copy()
    read_only.flags.writeable = False
    with pytest.raises((ValueError, BufferError), match="writable|read-only"):
        run(3, _fp(3), 0, program, inp, read_only, 8 * 8, 0)
    assert m.word(0) == 0
    # a fold without a kernel is refused once the round is done (Python never asks)
    m.rounds[1].program(3, _fp(3), 0, _packed(plans[1]), plans[1].input, plans[1].output,
                        8 * 8, 0)
    with pytest.raises(ValueError, match="no kernel"):
        run(3, _fp(3), 0, program, inp, out, -1, 0)


def test_the_opcodes_and_header_are_the_same_in_c_and_python():
    assert _tiny.PROGRAM_OPCODES == 14 == prog.EXPECT + 1
    assert (_tiny.PROGRAM_PUT, _tiny.PROGRAM_ENTER, _tiny.PROGRAM_REDUCE_SLOTS,
            _tiny.PROGRAM_COPY, _tiny.PROGRAM_EXPECT) == (
                prog.PUT, prog.ENTER, prog.REDUCE_SLOTS, prog.COPY, prog.EXPECT)
    assert _tiny.PROGRAM_CONSTANT == prog.CONSTANT
    assert _tiny.PROGRAM_HEADER == _execute.PROGRAM_HEADER


def test_programs_the_interpreter_does_not_run_are_not_packed():
    def program(*records: tuple) -> prog.Program:
        return prog.Program("x/test", np.dtype(np.float32),
                            ((prog.ROUND, -1, -1, 0, 0, -1, 0, -1, 0), *records), ((0, 1),),
                            (16, 16))
    region = prog.SPACE_CODES["region"]
    ok = (prog.PUT, -1, region, 0, 16, prog.INPUT, 0, -1, 0)
    assert _execute.pack_program(program(ok), REGION) is not None
    refused = {
        "a message": (prog.SEND, 1, -1, 0, 16, prog.INPUT, 0, -1, 0),
        "a peer's slot": (prog.GET, 1, prog.SPACE_CODES["slot"], 0, 16, prog.OUTPUT, 0, -1, 0),
        "past the region": (prog.PUT, -1, region, REGION - 8, 16, prog.INPUT, 0, -1, 0),
        "past the buffer": (prog.GET, 1, region, 0, 16, prog.OUTPUT, 8, -1, 0),
        "a local reduction": (prog.REDUCE, -1, -1, 0, 16, prog.OUTPUT, 0, prog.INPUT, 0),
        "a copy from nowhere": (prog.COPY, -1, -1, 0, 16, prog.OUTPUT, 0, -1, 0),
    }
    for what, rec in refused.items():
        assert _execute.pack_program(program(ok, rec), REGION) is None, what
    enter = (prog.ENTER, -1, -1, 0, 0, -1, 0, -1, 0)
    assert _execute.pack_program(program(enter, enter), REGION) is None, "two entries"
    # single copy: the exposure before the entry, the copies, signals and waits after it
    exposed = prog.SPACE_CODES["exposed"]
    expose = (prog.EXPOSE, -1, exposed, 0, 16, prog.OUTPUT, 0, -1, 0)
    read = (prog.GET, 1, exposed, 0, 16, prog.OUTPUT, 0, -1, 0)
    write = (prog.WRITE, 1, exposed, 0, 16, -1, 0, prog.INPUT, 0)
    signal = (prog.SIGNAL, -1, -1, 1, 0, -1, 0, -1, 0)
    wait = (prog.WAIT, 0, -1, 1, 0, -1, 0, -1, 0)
    fold = (prog.REDUCE_SLOTS, 0, exposed, 0, 16, prog.OUTPUT, 0, -1, 0)
    assert _execute.pack_program(program(expose, enter, read, write, fold, signal, wait),
                                 REGION) is not None
    for what, records in {
        "an exposure after the entry": (enter, expose),
        "two exposures": (expose, expose, enter),
        "a write before the entry": (write, enter),
        "a signal before the entry": (signal, enter),
        "a wait before the entry": (wait, enter),
        "a write into a region": (enter, (prog.WRITE, 1, region, 0, 16, -1, 0, prog.INPUT, 0)),
        "a write from past its buffer": (enter, (*write[:7], prog.INPUT, 8)),
        "a read before a peer's buffer": (enter, (prog.GET, 1, exposed, -16, 16, prog.OUTPUT,
                                                  0, -1, 0)),
        "a fold of exposed buffers before the entry": (fold, enter),
        "a fold of exposed buffers and an operand of my own": (
            enter, (*fold[:7], prog.INPUT, 0)),
        "a fold of exposed buffers before a peer's": (enter, (*fold[:3], -16, *fold[4:])),
    }.items():
        assert _execute.pack_program(program(*records), REGION) is None, what
    # a side given as pieces is addressed through its pieces, never as a whole
    listed = prog.Program("x/test", np.dtype(np.float32),
                          ((prog.ROUND, -1, -1, 0, 0, -1, 0, -1, 0), ok), (), (16, 16),
                          (prog.INPUT, 2))
    assert _execute.pack_program(listed, REGION) is None, "a listed side as a whole"
    piece = (prog.PUT, -1, region, 0, 8, prog.PIECES + 1, 0, -1, 0)
    assert _execute.pack_program(dataclasses.replace(listed, records=(piece,)),
                                 REGION) is not None
    past = (prog.PUT, -1, region, 0, 8, prog.PIECES + 2, 0, -1, 0)
    assert _execute.pack_program(dataclasses.replace(listed, records=(past,)),
                                 REGION) is None, "a piece past the list"


def test_a_one_sided_entry_is_settled_at_the_next_call():
    # broadcast from rank 0 at 3 ranks: the root awaits nobody, the readers the root
    n = 3
    plans = _plans("broadcast", n, 5, 0, np.dtype(np.float32), None, False, False)
    m = _Mapping(n)
    program = [_packed(p) for p in plans]
    settled = []
    m.rounds[0].settle_slow = lambda *args: settled.append(args)
    root = m.rounds[0].program
    assert root(9, _fp(9), 0, program[0], None, plans[0].output, -1, 0, "call 9") == 0
    assert m.rounds[0].pending  # signalled, returned: the round is still its own
    assert m.word(0) == (9 << 24) | 1
    assert m.rounds[0].pending and not settled
    # a reader whose fingerprint differs from the root's goes to Python (status 2)
    got = m.rounds[1].program(9, _fp(9, tag=3), 0, program[1], None, plans[1].output, -1, 0,
                              "call 9")
    assert got & 7 == 2
    # the root's next call settles call 9 first: rank 2 never entered, so Python's
    # end of it (settle_slow) gets the call's seq, fingerprint and name; without a
    # name (what None: an async call's) the entry awaits every rank
    assert root(11, _fp(11), 0, program[0], None, plans[0].output, -1, 0, None) == 3 * 8 + 2
    assert settled == [(9, _fp(9), "call 9", None, -1)]
    assert not m.rounds[0].pending


@pytest.mark.parametrize("coll,side", [("all_gather", prog.OUTPUT),
                                       ("reduce_scatter", prog.INPUT)])
@pytest.mark.parametrize("n", [2, 3, 8, 20])
def test_a_side_given_as_pieces_gives_the_simulators_results(coll, side, n):
    # torch's list forms (lanes: all_gather into a list, reduce_scatter of a list): the
    # listed side is n arrays apart in memory (20 ranks: more buffers than the
    # interpreter binds from its stack); in place, the other side is my own piece
    dt = np.dtype(np.float32)
    kernel = ops.compiled_kernel(ReduceOp.SUM, dt) if coll == "reduce_scatter" else -1
    checked = 0
    for count in (0, 1, 37, 600):
        if count * dt.itemsize * n > REGION:
            continue
        for in_place in (False, True):
            args = (coll, n, count, -1, dt, ReduceOp.SUM if kernel >= 0 else None, False,
                    False)
            want, got = _plans(*args), _plans(*args)
            _simulate.run(registry.get(coll, "oneshot").fn, want)
            m = _Mapping(n)
            calls = []
            for p in got:
                packed = _execute.pack_program(prog.as_pieces(_flat(p), side, n), REGION)
                assert packed is not None
                whole = p.output if side == prog.OUTPUT else p.input
                pieces = [np.array(whole[q * count:(q + 1) * count]) for q in range(n)]
                other = p.input if side == prog.OUTPUT else p.output
                if in_place:
                    if side == prog.OUTPUT:
                        pieces[p.rank][:] = p.input
                    other = pieces[p.rank]
                bufs = (other, pieces) if side == prog.OUTPUT else (pieces, other)
                calls.append((packed, bufs, pieces, other))
            resume = []
            for r, (packed, bufs, _, _) in enumerate(calls):
                resume.append(m.rounds[r].program(5, _fp(5), 0, packed, *bufs, kernel, 0))
            for r, (packed, bufs, _, _) in enumerate(calls):
                if resume[r]:
                    assert m.rounds[r].program(5, _fp(5), 0, packed, *bufs, kernel,
                                               resume[r] >> 3) == 0
            for r, (_, _, pieces, other) in enumerate(calls):
                result = np.concatenate(pieces) if side == prog.OUTPUT else other
                assert result.tobytes() == want[r].output.tobytes(), \
                    f"{coll} n={n} count={count} in_place={in_place} rank {r}"
                checked += 1
    assert checked


def test_pieces_of_the_wrong_number_or_size_raise_before_anything_is_signalled():
    plans = _plans("all_gather", 3, 4, -1, np.dtype(np.float32), None, False, False)
    m = _Mapping(3)
    packed = _execute.pack_program(prog.as_pieces(_flat(plans[0]), prog.OUTPUT, 3), REGION)
    run = m.rounds[0].program
    inp = plans[0].input
    with pytest.raises(ValueError, match="list or tuple of 3"):
        run(3, _fp(3), 0, packed, inp, [np.empty(4, np.float32)] * 2, -1, 0)
    with pytest.raises(ValueError, match="list or tuple of 3"):
        run(3, _fp(3), 0, packed, inp, np.empty(12, np.float32), -1, 0)
    with pytest.raises(ValueError, match="piece of another size"):
        run(3, _fp(3), 0, packed, inp, [np.empty(4, np.float32)] * 2 + [np.empty(5, np.float32)],
            -1, 0)
    read_only = np.empty(4, np.float32)
    read_only.flags.writeable = False
    with pytest.raises((ValueError, BufferError), match="writable|read-only"):
        run(3, _fp(3), 0, packed, inp, [np.empty(4, np.float32)] * 2 + [read_only], -1, 0)
    assert m.word(0) == 0


def _scatter(n: int, root: int, count: int, dt: np.dtype) -> tuple[list[Plan], list[bytes]]:
    """scatter's plans and every rank's packed program, the root's input as its list of
    pieces (lanes: torch's scatter_list)."""
    data = [reference.rank_input(r, count * n if r == root else count, dt) for r in range(n)]
    plans = make_plans("scatter", n, data, dtype=dt, root=root, **host_options("oneshot"))
    packed = [_execute.pack_program(prog.as_pieces(_flat(p), prog.INPUT, n) if p.rank == root
                                    else _flat(p), REGION) for p in plans]
    assert all(p is not None for p in packed)
    return plans, packed  # type: ignore[return-value]


def _exposed(m: _Mapping, rank: int, seq: int) -> tuple[int, int, int]:
    """What ``rank`` exposed for call ``seq`` (Arena.expose's three words)."""
    return struct.unpack_from("<QQQ", m.mm, m.fp_off + (seq & 1) * 64 + rank * 2 * 64 + FP)


@pytest.mark.parametrize("count", [5, 5000])
def test_a_rooted_entry_is_the_general_paths_entry(count):
    # scatter from rank 1 at 3 ranks: every rank's own fingerprint (the root's names its
    # pieces), phase 0, an exposure for a general path taking over, one-sided as the
    # schedule says; 5000 float32 a piece: the root publishes its progress as it stages
    n, root, seq, dt = 3, 1, 6, np.dtype(np.float32)
    plans, packed = _scatter(n, root, count, dt)
    pieces = [np.array(plans[root].input[q * count:(q + 1) * count]) for q in range(n)]
    tails = tuple(bytes([q + 1]) * (FP - 8) for q in range(n))
    m = _Mapping(n)
    settled = []
    m.rounds[root].settle_slow = lambda *args: settled.append(args)
    outs = [np.zeros(count, dt) for _ in range(n)]
    assert m.rounds[root].program(seq, (tails, root, (0, 0)), 0, packed[root], pieces,
                                  outs[root], -1, 0, "call 6") == 0  # awaits nobody
    assert m.word(root) == seq << 24  # phase 0: the general path's entry
    assert _exposed(m, root, seq) == (0, 0, 0)
    assert outs[root].tobytes() == pieces[root].tobytes()
    progress = struct.unpack_from("<Q", m.mm, m.ranks_off + root * 64 + 16)[0]
    if count * dt.itemsize * n >= 32 << 10:  # _tiny.c's PIPE_MIN: every piece but its own
        assert progress == (seq << 32) | count * dt.itemsize * n
    # rank 0 exposes its out (an array: its memory); rank 2 expects another root's tail
    assert m.rounds[0].program(seq, (tails, root, outs[0]), 0, packed[0], None, outs[0], -1,
                               0, "call 6") == 0
    assert _exposed(m, 0, seq) == (outs[0].ctypes.data, outs[0].nbytes, 0)
    assert outs[0].tobytes() == pieces[0].tobytes()
    wrong = (tails[0], tails[0], tails[2])
    got = m.rounds[2].program(seq, (wrong, root, None), 0, packed[2], None, outs[2], -1, 0,
                              "call 6")
    assert got & 7 == 2 and not outs[2].any()  # Python's entry compares, then resumes
    assert m.rounds[2].program(seq, (tails, root, None), 0, packed[2], None, outs[2], -1,
                               got >> 3) == 0
    assert outs[2].tobytes() == pieces[2].tobytes()
    # the root's next call settles call 6: Python's end of it gets every rank's tail and
    # the root, for the comparison of the root's layout
    m.rounds[1].settle_slow = lambda *args: settled.append(args)
    m.mm[m.fp_off + 1 * 2 * 64 + 8:m.fp_off + 1 * 2 * 64 + FP] = bytes(FP - 8)  # (differs)
    m.rounds[root].program(seq + 2, (tails, root, None), 0, packed[root], pieces, outs[root],
                           -1, 0, "call 8")
    assert settled[0][0] == seq and settled[0][3:] == (tails, root)


def test_what_a_rooted_entry_cannot_take_is_refused_with_nothing_done():
    # status 5, nothing staged, published or signalled: the general path explains
    n, root, seq, dt = 3, 0, 4, np.dtype(np.float32)
    plans, packed = _scatter(n, root, 4, dt)
    tails = tuple(bytes([q + 1]) * (FP - 8) for q in range(n))
    m = _Mapping(n)
    out = np.zeros(4, dt)
    read_only = np.zeros(4, dt)
    read_only.flags.writeable = False
    other_dtype = [np.zeros(4, dt), np.zeros(4, np.int32), np.zeros(4, dt)]
    other_shape = [np.zeros(4, dt), np.zeros((2, 2), dt), np.zeros(4, dt)]
    for name, rank, ins, o in (("a piece of another dtype", root, other_dtype, out),
                               ("a piece of another shape", root, other_shape, out),
                               ("too few pieces", root, [out, out], out),
                               ("an out not writable", 1, None, read_only),
                               ("an out not contiguous", 1, None, np.zeros(8, dt)[::2])):
        got = m.rounds[rank].program(seq, (tails, root, None), 0, packed[rank], ins, o, -1, 0,
                                     "call 4")
        assert got == 5, name
        assert m.word(rank) == 0 and not m.mm[m.small_off:m.small_off + 64].strip(b"\0"), name
    with pytest.raises(ValueError, match="rooted entry"):
        m.rounds[1].program(seq, (tails[:2], root, None), 0, packed[1], None, out, -1, 0)
    with pytest.raises(ValueError, match="neither -1 nor a rank"):
        m.rounds[1].program(seq, (tails, n, None), 0, packed[1], None, out, -1, 0)


@pytest.mark.parametrize("count", [5, 9000])
def test_a_gather_root_copies_every_piece_through_its_rooted_entry(count):
    # gather to rank 1 at 3 ranks, the root's output its list of pieces: the others
    # stage and expose their piece and find someone missing (status 2); the root enters
    # last and copies its own piece and every region (9000 float32 a piece: past
    # PIPE_MIN, each copied as its owner staged it); the others then resume, nothing left
    n, root, seq, dt = 3, 1, 3, np.dtype(np.float32)
    data = [reference.rank_input(r, count, dt) for r in range(n)]
    plans = make_plans("gather", n, data, dtype=dt, root=root, **host_options("oneshot"))
    packed = [_execute.pack_program(prog.as_pieces(_flat(p), prog.OUTPUT, n) if p.rank == root
                                    else _flat(p), REGION) for p in plans]
    tails = tuple(bytes([q + 1]) * (FP - 8) for q in range(n))
    m = _Mapping(n)
    resume = {}
    for r in (0, 2):
        got = m.rounds[r].program(seq, (tails, root, data[r]), 0, packed[r], data[r], None, -1, 0)
        assert got & 7 == 2, r
        assert _exposed(m, r, seq) == (data[r].ctypes.data, data[r].nbytes, 0)
        assert m.word(r) == seq << 24
        resume[r] = got >> 3
    outs = [np.zeros(count, dt) for _ in range(n)]
    assert m.rounds[root].program(seq, (tails, root, (0, 0)), 0, packed[root], data[root], outs,
                                  -1, 0) == 0
    assert [o.tobytes() for o in outs] == [d.tobytes() for d in data]
    for r in (0, 2):
        assert m.rounds[r].program(seq, (tails, root, None), 0, packed[r], data[r], None, -1,
                                   resume[r]) == 0
    # a root's list of pieces it cannot write: refused, nothing done
    read_only = np.zeros(count, dt)
    read_only.flags.writeable = False
    assert m.rounds[root].program(seq + 2, (tails, root, None), 0, packed[root], data[root],
                                  [outs[0], read_only, outs[2]], -1, 0) == 5
    assert m.word(root) == seq << 24


@pytest.mark.parametrize("count", [5, 3000])
def test_an_all_to_all_program_checks_every_header_it_presumes(count):
    # all_to_all at 3 ranks, flattened presuming every split header is mine (equal
    # splits), entered as the general path's entry without a root: the ranks enter in
    # turn and the last one runs its checks and copies; the others resume. Then a call
    # where rank 1's header differs: a rank that checks it stops there (status 4, its
    # output untouched), and so does one resuming after the entry
    n, dt = 3, np.dtype(np.float32)
    data = [reference.rank_input(r, count * n, dt) for r in range(n)]
    plans = make_plans("all_to_all", n, data, dtype=dt, **host_options("oneshot"))
    packed = []
    for p in plans:
        probe = dataclasses.replace(p, input=np.empty(p.input.size, dt),
                                    output=np.empty(p.output.size, dt))
        flat = prog.flatten(registry.get("all_to_all", "oneshot").fn, probe, "a2a", True)
        assert sum(rec[0] == prog.EXPECT for rec in flat.records) == n
        packed.append(_execute.pack_program(flat, REGION))
    want = [np.concatenate([data[q][r * count:(r + 1) * count] for q in range(n)])
            for r in range(n)]
    tails = (bytes([7]) * (FP - 8),) * n
    for seq, differs in ((5, False), (7, True)):
        m = _Mapping(n)
        outs = [np.zeros(count * n, dt) for _ in range(n)]
        resume = {}
        for r in (0, 1):
            got = m.rounds[r].program(seq, (tails, -1, data[r]), 0, packed[r], data[r], outs[r],
                                      -1, 0)
            assert got & 7 == 2 and not outs[r].any(), r
            assert m.word(r) == seq << 24  # phase 0: the general path's entry
            assert _exposed(m, r, seq) == (data[r].ctypes.data, data[r].nbytes, 0)
            resume[r] = got >> 3
        if differs:  # rank 1's header says it sends another count to rank 0
            at = m.small_off + (1 * 2 + (seq & 1)) * REGION + 8 * n
            m.mm[at:at + 8] = struct.pack("<q", count + 1)
        got = m.rounds[2].program(seq, (tails, -1, None), 0, packed[2], data[2], outs[2], -1, 0)
        for r in (0, 1):
            resumed = m.rounds[r].program(seq, (tails, -1, None), 0, packed[r], data[r],
                                          outs[r], -1, resume[r])
            assert resumed & 7 == (4 if differs else 0), r
        assert got & 7 == (4 if differs else 0)
        if differs:
            assert not any(o.any() for o in outs)
        else:
            assert got == 0 and [o.tobytes() for o in outs] == [w.tobytes() for w in want]


# ------------------------------------------------------------------ single copy


def _run_single_copy(m: _Mapping, plans: list[Plan], seq: int, kernel: int = -1,
                     args: list[tuple] | None = None) -> tuple[list[int], int]:
    """Every rank's single-copy program through the interpreter, the ranks entering in
    turn (the general path's entry: phase 0, every rank's tail mine), then resuming in
    turn until every one finished: where a rank stops at its closing WAIT (status 2),
    it resumes at that WAIT once another rank moved on (as Python waits there);
    ``kernel``: the folds' code; ``args``: each rank's input and output, where they are
    not its plan's. The statuses the first calls gave, and where the last rank's first
    call stopped."""
    n = len(plans)
    tails = (bytes([7]) * (FP - 8),) * n
    programs = [_packed(p, "cma") for p in plans]
    args = args or [(p.input, p.output) for p in plans]
    first, resume = [], {}
    for r in range(n):
        got = m.rounds[r].program(seq, (tails, -1, None), 0, programs[r], *args[r], kernel, 0)
        first.append(got & 7)
        if got:
            resume[r] = got >> 3
        last_stop = got >> 3
    for _ in range(4 * n):
        for r in sorted(resume):
            wait = programs[r][8 * (_execute.PROGRAM_HEADER
                                    + (resume[r] - 1) * _execute.RECORD_WORDS):][:8]
            start = resume[r] - (int.from_bytes(wait, "little") == prog.WAIT)
            got = m.rounds[r].program(seq, (tails, -1, None), 0, programs[r], *args[r],
                                      kernel, start)
            if got:
                resume[r] = got >> 3
            else:
                del resume[r]
    assert not resume, f"ranks {sorted(resume)} never got past their closing wait"
    return first, last_stop


@pytest.mark.parametrize("coll,n", [(c, n) for c in ("broadcast", "all_gather")
                                    for n in (2, 3, 5, 8)])
def test_a_single_copy_program_gives_the_simulators_results(coll, n):
    # every rank exposes its buffer at the entry; the copies go through process_vm_readv
    # and process_vm_writev (the ranks here are one process, reading and writing its own
    # memory as a peer's); then the closing signal and wait
    checked = 0
    dt = np.dtype(np.float32)
    for root in sorted({0, n - 1} if coll == "broadcast" else {-1}):
        for count in (0, 1, 37, 70000):
            for in_place in (False, True) if coll == "all_gather" else (False,):
                counts = [count] * n if coll == "all_gather" else None
                data = [reference.rank_input(r, count, dt) for r in range(n)]
                args = dict(dtype=dt, root=root, counts=counts, in_place=in_place,
                            **host_options("cma"))
                want = make_plans(coll, n, data, **args)
                got = make_plans(coll, n, data, **args)
                _simulate.run(registry.get(coll, "cma").fn, want)
                m = _Mapping(n)
                for rnd in m.rounds:
                    rnd.pids = (os.getpid(),) * n
                first, stop = _run_single_copy(m, got, seq=5 + count)
                # ranks enter in turn: every rank but the last finds someone missing; the
                # last copies, then finds the others not through their closing round
                assert first == [2] * n, first
                records = _flat(got[-1], "cma").records
                assert records[stop - 1][0] == prog.WAIT, (stop, records)
                for r in range(n):
                    assert m.word(r) == ((5 + count) << 24) | 1, f"rank {r}: no closing signal"
                for r, (a, b) in enumerate(zip(want, got)):
                    assert a.output.tobytes() == b.output.tobytes(), f"{coll} {count} rank {r}"
                    checked += 1
    assert checked


@pytest.mark.parametrize("coll,n", [(c, n) for c in ("all_reduce", "reduce", "reduce_scatter")
                                    for n in (2, 3, 5, 8)])
def test_a_single_copy_fold_gives_the_simulators_results(coll, n):
    # every rank's exposed buffer folded in rank order, read through process_vm_readv in
    # chunks (_tiny.c's FOLD_BYTES: 140 000 float64 a rank span several), bitwise what the
    # simulator gives; in place too: all_reduce's input is its output, a reduce root's
    # output its input, as the runtime calls them (my own operand overlaps what is
    # written: the interpreter reads it first)
    checked = 0
    for dt, op in ((np.dtype(np.float64), ReduceOp.SUM), (np.dtype(np.int32), ReduceOp.MAX),
                   (np.dtype(np.uint8), ReduceOp.BXOR)):
        kernel = ops.compiled_kernel(op, dt)
        assert kernel is not None
        for root in sorted({0, n - 1} if coll == "reduce" else {-1}):
            for count in (0, 1, 37, 140_000):
                for in_place in (False, True) if coll != "reduce_scatter" else (False,):
                    size = count * n if coll == "reduce_scatter" else count
                    data = [reference.rank_input(r, size, dt) for r in range(n)]
                    args = dict(dtype=dt, op=op, root=root, **host_options("cma"))
                    want = make_plans(coll, n, data, **args)
                    got = make_plans(coll, n, data, **args)
                    _simulate.run(registry.get(coll, "cma").fn, want)
                    calls = [(p.input, p.output) for p in got]
                    if in_place:  # the flattened program's buffers, one array for both
                        for r, p in enumerate(got):
                            if p.output is not None:
                                calls[r] = (p.output, p.output)
                                p.output[...] = p.input
                    m = _Mapping(n)
                    for rnd in m.rounds:
                        rnd.pids = (os.getpid(),) * n
                    _run_single_copy(m, got, 3 + count, kernel, calls)
                    for r, (a, (_, out)) in enumerate(zip(want, calls)):
                        if a.output is not None:
                            assert a.output.tobytes() == out.tobytes(), (
                                f"{coll} {dt} {count} root {root} rank {r} {in_place}")
                            checked += 1
    assert checked


def test_a_single_copy_fold_stops_where_a_peer_exposed_less():
    # reduce_scatter at 3 ranks where rank 2 exposed fewer elements than the others
    # fold (ranks that disagree about the sizes): a rank folding stops at its fold with
    # status 4, its output untouched; a fold without a kernel raises
    n, seq, dt, count = 3, 4, np.dtype(np.float32), 20000
    data = [reference.rank_input(r, count * n, dt) for r in range(n)]
    args = dict(dtype=dt, op=ReduceOp.SUM, **host_options("cma"))
    plans = make_plans("reduce_scatter", n, data, **args)
    short = make_plans("reduce_scatter", n, [d[:count] for d in data], **args)
    kernel = ops.compiled_kernel(ReduceOp.SUM, dt)
    tails = (bytes([7]) * (FP - 8),) * n
    m = _Mapping(n)
    for rnd in m.rounds:
        rnd.pids = (os.getpid(),) * n
    assert m.rounds[2].program(seq, (tails, -1, None), 0, _packed(short[2], "cma"),
                               short[2].input, short[2].output, kernel, 0) & 7 == 2
    assert m.rounds[0].program(seq, (tails, -1, None), 0, _packed(plans[0], "cma"),
                               plans[0].input, plans[0].output, kernel, 0) & 7 == 2
    out = np.zeros(count, dt)
    got = m.rounds[1].program(seq, (tails, -1, None), 0, _packed(plans[1], "cma"),
                              plans[1].input, out, kernel, 0)
    assert got & 7 == 4 and not out.any(), got
    assert _flat(plans[1], "cma").records[got >> 3][0] == prog.REDUCE_SLOTS
    with pytest.raises(ValueError, match="no kernel"):  # (rank 0 resumes after its entry)
        m.rounds[0].program(seq, None, 0, _packed(plans[0], "cma"), plans[0].input,
                            plans[0].output, -1, got >> 3)


def test_a_copy_outside_what_a_peer_exposed_stops_the_program():
    # broadcast from rank 0 at 2 ranks, where rank 0 exposes fewer bytes than its reader
    # reads (ranks that disagree about the sizes): the reader stops at that copy with
    # status 4 and its output untouched; without pids, a copy across processes raises
    n, seq, dt = 2, 9, np.dtype(np.float32)
    data = [reference.rank_input(r, 64, dt) for r in range(n)]
    plans = make_plans("broadcast", n, data, dtype=dt, root=0, **host_options("cma"))
    packed = [_packed(p, "cma") for p in plans]
    short = make_plans("broadcast", n, [d[:16] for d in data], dtype=dt, root=0,
                       **host_options("cma"))
    tails = (bytes([7]) * (FP - 8),) * n
    m = _Mapping(n)
    assert m.rounds[0].program(seq, (tails, -1, None), 0, _packed(short[0], "cma"),
                               None, short[0].output, -1, 0) & 7 == 2
    out = plans[1].output
    before = out.tobytes()
    got = m.rounds[1].program(seq, (tails, -1, None), 0, packed[1], None, out, -1, 0)
    assert got & 7 == 4 and out.tobytes() == before, got
    m = _Mapping(n)  # the sizes agree, but nobody told the reader the processes' ids
    assert m.rounds[0].program(seq, (tails, -1, None), 0, packed[0], None, plans[0].output,
                               -1, 0) & 7 == 2
    with pytest.raises(ValueError, match="no pids"):
        m.rounds[1].program(seq, (tails, -1, None), 0, packed[1], None, out, -1, 0)
    # a program with rounds of its own needs the rooted entry (phase 0)
    with pytest.raises(ValueError, match="rooted entry"):
        m.rounds[1].program(seq + 2, _fp(seq + 2), 0, packed[1], None, out, -1, 0)
