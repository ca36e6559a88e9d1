"""Programs (algorithms/_program.py): a schedule flattened once per call shape is that schedule.

The runtime runs the one-shot calls decided before the call (barrier, broadcast,
reduce, all_reduce, all_gather, reduce_scatter) as programs flattened from their
registered ``oneshot`` generators on probe arrays, then bound to each call's own
arrays. Here, in one process:

* a program expanded onto a call's buffers yields the generator's steps on those
  buffers, step by step: same kinds, ranks, offsets, phases and spaces, the same
  memory (address and size) and, where a step reduces, the same dtype;
* the expanded program, run in the simulator with the race checker on every rank,
  gives every rank the generator's result, bit for bit;
* a schedule that names memory of its own (scratch, buffers it reads delivered data
  into) is refused with NotFlat instead of becoming a wrong program.
"""

from __future__ import annotations

import dataclasses
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from meshcast.algorithms import _program as prog
from meshcast.algorithms import _registry as registry
from meshcast.algorithms._execute import BoundProgram
from meshcast.algorithms._plan import Expose, Plan, Round
from meshcast.algorithms._simulate import ScheduleError, host_options, make_plans, run
from meshcast.ops import ReduceOp
from meshcast.testing import reference

FLATTENED = ("barrier", "broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter")
PIECES = {"all_gather", "reduce_scatter"}
REDUCING = {"reduce", "all_reduce", "reduce_scatter"}


def _probe(plan: Plan) -> Plan:
    """The plan the runtime flattens with (paths/oneshot.Programs): fresh arrays of the
    call's lengths in place of its own."""
    def fresh(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.empty(len(a), plan.dtype)
    return dataclasses.replace(plan, input=fresh(plan.input), output=fresh(plan.output))


def _bytes(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else a.reshape(-1).view(np.uint8)


def _expanded(plan: Plan) -> list:
    entry = registry.get(plan.coll, "oneshot")
    program = prog.flatten(entry.fn, _probe(plan), entry.qualname)
    return prog.expand(program, (_bytes(plan.input), _bytes(plan.output)))


def _plans(coll: str, n: int, count: int, root: int, dtype: np.dtype, uneven: bool,
           in_place: bool) -> list[Plan]:
    counts = None
    if coll in PIECES:
        counts = [(count + 3 * r) % 7 if uneven else count for r in range(n)]
    lens = [0 if coll == "barrier" else sum(counts) if coll == "reduce_scatter"
            else counts[r] if counts else count for r in range(n)]
    data = [reference.rank_input(r, lens[r], dtype) if coll != "barrier" else None
            for r in range(n)]
    return make_plans(coll, n, data, dtype=dtype,
                      op=ReduceOp.SUM if coll in REDUCING else None,
                      root=root if coll in ("broadcast", "reduce") else -1, counts=counts,
                      in_place=in_place, **host_options("oneshot"))


def _same(a: object, b: object, label: str) -> None:
    assert type(a) is type(b), f"{label}: {type(a).__name__} where the generator has " \
                               f"{type(b).__name__}"
    for f in dataclasses.fields(a):  # type: ignore[arg-type]
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(y, np.ndarray):
            assert x.nbytes == y.nbytes, f"{label}: {f.name} size"
            if y.nbytes:
                assert (x.__array_interface__["data"][0]
                        == y.__array_interface__["data"][0]), f"{label}: {f.name} memory"
            if type(a).__name__ in ("Reduce", "ReduceSlots"):
                assert x.dtype == y.dtype, f"{label}: {f.name} dtype"
        else:
            assert tuple(x) == tuple(y) if isinstance(y, (tuple, list)) else x == y, \
                f"{label}: {f.name} {x!r} != {y!r}"


SHAPES = [(n, root, count, uneven, in_place)
          for n in (1, 2, 3, 5, 8)
          for root in sorted({0, n - 1})
          for count, uneven in ((0, False), (1, False), (37, False), (9, True))
          for in_place in (False, True)]


@pytest.mark.parametrize("coll", FLATTENED)
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float64])
def test_a_program_expands_to_its_generators_steps(coll, dtype):
    dt = np.dtype(dtype)
    checked = 0
    for n, root, count, uneven, in_place in SHAPES:
        if uneven and coll not in PIECES:
            continue
        for plan in _plans(coll, n, count, root, dt, uneven, in_place):
            label = f"{coll} n={n} rank={plan.rank} root={root} count={count} " \
                    f"uneven={uneven} in_place={in_place}"
            want = list(registry.get(coll, "oneshot").fn(plan))
            got = _expanded(plan)
            assert len(got) == len(want), label
            for k, (g, w) in enumerate(zip(got, want)):
                steps_g, steps_w = (*g.comms, *g.then), (*w.comms, *w.then)
                assert len(steps_g) == len(steps_w), f"{label} round {k}"
                for i, (a, b) in enumerate(zip(steps_g, steps_w)):
                    _same(a, b, f"{label} round {k} step {i}")
                    checked += 1
    assert checked > 50, "vacuous: hardly any steps compared"


@pytest.mark.parametrize("coll", FLATTENED)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_programs_give_the_generators_results_in_the_simulator(coll, n):
    for count, uneven in ((1, False), (37, False), (9, True)):
        if uneven and coll not in PIECES:
            continue
        for root in sorted({0, n - 1}):
            args = (coll, n, count, root, np.dtype(np.float32), uneven, False)
            by_generator, by_program = _plans(*args), _plans(*args)
            run(registry.get(coll, "oneshot").fn, by_generator)
            run(lambda plan: iter(_expanded(plan)), by_program, label=f"{coll}/oneshot program")
            for r, (a, b) in enumerate(zip(by_generator, by_program)):
                if a.output is not None:
                    assert np.array_equal(a.output, b.output), f"{coll} n={n} rank {r}"


def test_records_are_nine_integers_and_name_the_buffers():
    plan = _plans("all_gather", 3, 4, -1, np.dtype(np.float32), True, False)[0]
    program = prog.flatten(registry.get("all_gather", "oneshot").fn, _probe(plan),
                           "all_gather/oneshot")
    assert program.rounds == 1
    for rec in program.records:
        assert len(rec) == 9 and all(type(x) is int for x in rec), rec
    ops = [rec[0] for rec in program.records]
    assert ops[:3] == [prog.ROUND, prog.PUT, prog.ENTER], ops
    gets = [rec for rec in program.records if rec[0] == prog.GET]
    assert [rec[1] for rec in gets] == [q for q in range(3) if plan.counts[q]]
    assert {rec[5] for rec in gets} == {prog.OUTPUT}
    assert program.records[1][5] == prog.INPUT


def test_schedules_with_memory_of_their_own_are_not_flat():
    # all_to_all's one-shot schedule reads every rank's split header into arrays
    # of its own (flat only on a presumption, below), and the ring all_reduce works in
    # scratch: neither is a program of the call's buffers
    plan = make_plans("all_to_all", 2, [np.arange(4, dtype=np.float32)] * 2,
                      **host_options("oneshot"))[0]
    with pytest.raises(prog.NotFlat):
        prog.flatten(registry.get("all_to_all", "oneshot").fn, _probe(plan), "a2a")
    plan = make_plans("all_reduce", 3, [np.arange(30, dtype=np.float32)] * 3,
                      op=ReduceOp.SUM)[0]
    with pytest.raises(prog.NotFlat):
        prog.flatten(registry.get("all_reduce", "ring").fn, _probe(plan), "ring")


# the side each collective's list form gives as one array per rank (torch's all_gather
# into a list, reduce_scatter of a list, a gather root's list, a scatter root's list)
LISTED = {"all_gather": prog.OUTPUT, "reduce_scatter": prog.INPUT, "gather": prog.OUTPUT,
          "scatter": prog.INPUT}


def _listed_buffers(plan: Plan, side: int, in_place: bool) -> tuple[list, list[np.ndarray]]:
    """(the buffers to expand a program of as_pieces onto, the pieces): the plan's
    ``side`` cut into fresh arrays apart in memory, holding what it holds; in place,
    the other side is the rank's own piece itself, as torch's list forms allow."""
    arrays = [plan.input, plan.output]
    whole = arrays[side]
    if whole is None:  # (a rooted call's other ranks: a list of empty pieces)
        whole, in_place = np.empty(0, plan.dtype), False
    count = 0 if whole is None else len(whole) // plan.size
    pieces = [np.array(whole[q * count:(q + 1) * count]) for q in range(plan.size)]
    if in_place and arrays[1 - side] is not None:
        if side == prog.OUTPUT:  # my input, in its place among my output's pieces
            pieces[plan.rank][:] = arrays[prog.INPUT]
        arrays[1 - side] = pieces[plan.rank]
    arrays[side] = None
    return [_bytes(a) for a in arrays] + [_bytes(p) for p in pieces], pieces


@pytest.mark.parametrize("coll", sorted(LISTED))
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_a_program_given_pieces_gives_the_generators_results_in_the_simulator(coll, n):
    side = LISTED[coll]
    checked = 0
    for count in (0, 1, 37):
        for root in sorted({0, n - 1}) if coll in ("gather", "scatter") else [-1]:
            for in_place in (False, True):
                label = f"{coll} n={n} count={count} root={root} in_place={in_place}"
                by_generator = make_plans(
                    coll, n, [reference.rank_input(r, count * (n if side == prog.INPUT and
                                                                (coll != "scatter" or r == root)
                                                                else 1), np.float32)
                              for r in range(n)],
                    op=ReduceOp.SUM if coll in REDUCING else None, root=root,
                    **host_options("oneshot"))
                by_pieces = [dataclasses.replace(p, input=None if p.input is None
                                                 else p.input.copy(),
                                                 output=None if p.output is None
                                                 else p.output.copy())
                             for p in by_generator]
                run(registry.get(coll, "oneshot").fn, by_generator)
                rounds, pieces = [], []
                for plan in by_pieces:
                    entry = registry.get(coll, "oneshot")
                    program = prog.as_pieces(
                        prog.flatten(entry.fn, _probe(plan), entry.qualname), side, n)
                    buffers, mine = _listed_buffers(plan, side, in_place)
                    rounds.append(prog.expand(program, tuple(buffers)))
                    pieces.append(mine)
                    if (in_place and side == prog.INPUT and plan.input is not None
                            and plan.output is not None):
                        plan.output = mine[plan.rank]  # (what the rank reads its result from)
                run(lambda plan, rounds=rounds: iter(rounds[plan.rank]), by_pieces, label=label)
                for r, (a, b) in enumerate(zip(by_generator, by_pieces)):
                    if a.output is None or (side == prog.OUTPUT and not len(a.output)):
                        continue
                    got = np.concatenate(pieces[r]) if side == prog.OUTPUT else b.output
                    assert np.array_equal(a.output, got), f"{label} rank {r}"
                    checked += 1
    assert checked, "vacuous: no output compared"


def test_as_pieces_cuts_records_at_the_pieces_edges():
    # reduce_scatter's rank 0 of 3 stages pieces 1 and 2 in one Put: cut in two, each
    # into its place in the region; its fold takes its own operand from piece 0
    plan = _plans("reduce_scatter", 3, 3, -1, np.dtype(np.float32), False, False)[0]
    flat = prog.flatten(registry.get("reduce_scatter", "oneshot").fn, _probe(plan), "rs")
    program = prog.as_pieces(flat, prog.INPUT, 3)
    puts = [rec for rec in program.records if rec[0] == prog.PUT]
    assert [(rec[3], rec[4], rec[5], rec[6]) for rec in puts] == [
        (12, 12, prog.PIECES + 1, 0), (24, 12, prog.PIECES + 2, 0)], puts
    fold = next(rec for rec in program.records if rec[0] == prog.REDUCE_SLOTS)
    assert (fold[5], fold[7], fold[8]) == (prog.OUTPUT, prog.PIECES, 0), fold
    assert program.listed == (prog.INPUT, 3)
    assert [program.buffer_bytes(b) for b in (prog.INPUT, prog.OUTPUT, prog.PIECES + 2)] == [
        36, 12, 12]
    with pytest.raises(prog.NotFlat):  # 36 bytes are not 5 pieces of whole float32s
        prog.as_pieces(flat, prog.INPUT, 5)
    ring = make_plans("all_reduce", 2, [np.arange(8, dtype=np.float32)] * 2,
                      op=ReduceOp.SUM)[0]
    sends = prog.Program("x", np.dtype(np.float32),
                         ((prog.SEND, 1, -1, 0, 16, prog.INPUT, 0, prog.NO_BUFFER, 0),),
                         (), (ring.input.nbytes, ring.output.nbytes))
    with pytest.raises(prog.NotFlat):  # a message is not cut
        prog.as_pieces(sends, prog.INPUT, 2)


def _all_to_all_program(plan: Plan) -> prog.Program:
    return prog.flatten(registry.get("all_to_all", "oneshot").fn, _probe(plan),
                        "all_to_all/oneshot", presume=True)


def _header_step(step: object, plan: Plan) -> bool:
    """Whether a generator's step is a Put or Get of a split header (memory of its own)."""
    arrays = [a for a in (plan.input, plan.output) if a is not None and a.nbytes]
    buf = getattr(step, "src", None) if type(step).__name__ == "Put" else getattr(step, "dst",
                                                                                   None)
    return buf is not None and not any(np.may_share_memory(buf, a) for a in arrays)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("schedule", ["oneshot", "cma"])
def test_all_to_all_with_both_sides_lists_gives_the_generators_results(n, schedule):
    # torch's all_to_all of lists: the program with both sides as pieces apart in memory
    # (the input's PIECES + i, the output's after them; every record cut at their edges)
    # run in the simulator writes into each output piece what the generator writes into
    # that part of the output
    checked = 0
    for count in (0, 1, 37):
        data = [reference.rank_input(r, count * n, np.dtype(np.float32)) for r in range(n)]
        by_generator = make_plans("all_to_all", n, data, **host_options(schedule))
        by_pieces = make_plans("all_to_all", n, data, **host_options(schedule))
        entry = registry.get("all_to_all", schedule)
        run(entry.fn, by_generator)
        rounds, outs = [], []
        for plan in by_pieces:
            program = prog.as_pieces(prog.flatten(entry.fn, _probe(plan), entry.qualname,
                                                  presume=True), prog.BOTH, n)
            assert program.listed == (prog.BOTH, n) and program.buffers == 2 + 2 * n
            assert not any(rec[5] in (prog.INPUT, prog.OUTPUT) or rec[7] in (
                prog.INPUT, prog.OUTPUT) for rec in program.records if rec[4]), \
                "a record still names a whole side"
            ins = [np.array(plan.input[q * count:(q + 1) * count]) for q in range(n)]
            mine = [np.full(count, -1.0, np.float32) for _ in range(n)]
            expanded = prog.expand(program, (None, None, *map(_bytes, ins),
                                              *map(_bytes, mine)))
            if schedule == "cma" and count:  # (the entry exposes the list as if its pieces lay back
                # to back: the simulator's exposure of their concatenation, before the Enter)
                then = list(expanded[0].then)
                at = next(i for i, step in enumerate(then) if type(step).__name__ == "Enter")
                then.insert(at, Expose(np.concatenate(ins)))
                expanded[0] = Round(*expanded[0].comms, then=then)
            rounds.append(expanded)
            outs.append(mine)
        run(lambda plan, rounds=rounds: iter(rounds[plan.rank]), by_pieces,
            label=f"{schedule} n={n}")
        for r, plan in enumerate(by_generator):
            assert np.array_equal(np.concatenate(outs[r]), plan.output), f"n={n} rank {r}"
            checked += 1
    assert checked == 3 * n


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_all_to_all_on_its_presumption_is_its_schedule_for_equal_splits(n):
    # Flattened presuming every split header is mine: the generator's steps, but its
    # header published as a constant and every header it reads an Expect of mine;
    # run in the simulator it gives the generator's results, bit for bit
    checked = 0
    for dtype in (np.float32, np.int8, np.float64):
        for count in (0, 1, 37):
            data = [reference.rank_input(r, count * n, np.dtype(dtype)) for r in range(n)]
            by_generator = make_plans("all_to_all", n, data, **host_options("oneshot"))
            by_program = make_plans("all_to_all", n, data, **host_options("oneshot"))
            for plan in by_generator:
                label = f"n={n} rank={plan.rank} {np.dtype(dtype)} count={count}"
                want = list(registry.get("all_to_all", "oneshot").fn(plan))
                program = _all_to_all_program(plan)
                got = prog.expand(program, (_bytes(plan.input), _bytes(plan.output)))
                assert len(got) == len(want) == 2, label
                for k, (g, w) in enumerate(zip(got, want)):
                    assert len(g.then) == len(w.then), f"{label} round {k}"
                    for i, (a, b) in enumerate(zip(g.then, w.then)):
                        where = f"{label} round {k} step {i}"
                        if not _header_step(b, plan):
                            _same(a, b, where)
                        elif type(b).__name__ == "Put":  # my header: the same bytes
                            assert type(a).__name__ == "Put" and a.offset == b.offset, where
                            assert a.src.tobytes() == b.src.tobytes(), where
                        else:  # a rank's header read: expected to be mine
                            assert type(a).__name__ == "Expect", where
                            assert (a.peer, a.offset, a.space) == (b.peer, b.offset, b.space)
                            assert a.value.tobytes() == want[0].then[0].src.tobytes(), where
                        checked += 1
            run(registry.get("all_to_all", "oneshot").fn, by_generator)
            run(lambda plan: iter(prog.expand(_all_to_all_program(plan), (
                _bytes(plan.input), _bytes(plan.output)))), by_program,
                label="all_to_all/oneshot program")
            for r, (a, b) in enumerate(zip(by_generator, by_program)):
                assert np.array_equal(a.output, b.output), f"n={n} rank {r} count={count}"
    assert checked > 20 * n, "vacuous: hardly any steps compared"


def test_all_to_all_on_its_presumption_stops_where_a_header_differs():
    # rank 1 sends rank 0 one element more and itself one less: rank 2's splits are
    # still equal, so its program presumes every header is its own and would read rank
    # 1's pieces at the wrong offsets; its Expect of rank 1's header refuses instead
    n = 3
    send = [[2, 2, 2], [3, 1, 2], [2, 2, 2]]
    data = [reference.rank_input(r, sum(send[r]), np.dtype(np.float32)) for r in range(n)]
    plans = make_plans("all_to_all", n, data, send_counts=send, **host_options("oneshot"))
    assert plans[2].counts == plans[2].recv_counts == (2, 2, 2)
    program = _all_to_all_program(plans[2])
    expects = [rec for rec in program.records if rec[0] == prog.EXPECT]
    assert [rec[1] for rec in expects] == [0, 1, 2]
    with pytest.raises(ScheduleError, match="presumes"):
        run(lambda plan: iter(prog.expand(_all_to_all_program(plan), (
            _bytes(plan.input), _bytes(plan.output)))), plans, label="all_to_all program")



def _bound_all_to_all(data: list[np.ndarray], differs: bool
                      ) -> tuple[list[np.ndarray], list[BaseException | None]]:
    """Every rank's all_to_all program bound (_execute.BoundProgram) and run in a thread
    of its own over shared regions, the entry a barrier; with ``differs``, rank 1's
    header says it sends rank 0 another count. Every rank's output and error."""
    n, count = len(data), len(data[0]) // len(data)
    plans = make_plans("all_to_all", n, data, dtype=data[0].dtype, **host_options("oneshot"))
    # (two pages: all_to_all's split header takes one, _onehost.split_head)
    regions = [[np.zeros(2 << 12, np.uint8) for _ in range(2)] for _ in range(n)]
    barrier = threading.Barrier(n)
    outs = [np.zeros(count * n, data[0].dtype) for _ in range(n)]
    errors: list[BaseException | None] = [None] * n

    def enter(r: int) -> None:
        barrier.wait(timeout=30)
        if differs and r == 0:
            regions[1][1][8 * n:8 * n + 8] = np.array([count + 1], np.int64).view(np.uint8)
        barrier.wait(timeout=30)

    def rank(r: int) -> None:
        arena = SimpleNamespace(rank=r, small=regions, slots=None, _compiled=None)
        bound = BoundProgram(_all_to_all_program(plans[r]), arena)
        try:
            bound(SimpleNamespace(op=None, parity=1, enter=lambda: enter(r)), (data[r], outs[r]))
        except BaseException as exc:  # (the test checks every rank's)
            errors[r] = exc

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return outs, errors


def test_a_bound_all_to_all_program_checks_its_presumption_in_python():
    # The Python executor of programs runs the same records: equal splits give the
    # reference; a header that differs raises NotPresumed on every rank that checks
    # it, before that rank copies anything
    n, count = 3, 4
    data = [reference.rank_input(r, count * n, np.dtype(np.float32)) for r in range(n)]
    outs, errors = _bound_all_to_all(data, False)
    assert errors == [None] * n, errors
    for r in range(n):
        want = np.concatenate([data[q][r * count:(r + 1) * count] for q in range(n)])
        assert outs[r].tobytes() == want.tobytes(), r
    outs, errors = _bound_all_to_all(data, True)
    assert all(isinstance(e, prog.NotPresumed) for e in errors), errors
    assert not any(o.any() for o in outs)


# The symmetric schedules run as programs over every rank's part of a symmetric
# allocation (paths/symmetric.py): the side that lies in it, and the other side's length
SYMMETRIC = {"broadcast": prog.OUTPUT, "all_reduce": prog.OUTPUT, "all_gather": prog.OUTPUT,
             "reduce_scatter": prog.INPUT}


class _NoArena:
    """What binding a mapped program asks of an arena: its rank, and no compiler (the
    entry and the closing round are the group's; here every rank runs in turn)."""

    _compiled = None
    small_bytes = 0

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def signal(self, phase: int) -> None:
        pass

    def wait(self, ranks: object, phase: int) -> None:
        pass


@pytest.mark.parametrize("coll", sorted(SYMMETRIC))
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_a_symmetric_program_over_every_ranks_part_gives_numpys_result(coll, n):
    # Each rank's program, made by as_mapped, runs after the entry on Python's executor
    # with every rank's part as its buffers, rank after rank: within a symmetric call's
    # one phase no rank reads what another writes (the simulator's race checker holds
    # the generators to that), so the turns give what running together gives.
    # (a broadcast moves bytes, cut anywhere among readers, as the runtime runs it)
    side, dtype = SYMMETRIC[coll], np.dtype(np.uint8 if coll == "broadcast" else np.float32)
    checked = 0
    # (400_003 elements: all_reduce's share spans several chunks of SYMMETRIC_CHUNK_BYTES)
    for count in (0, 1, 37, 400_003 if n <= 3 else 5):
        for root in range(n) if coll == "broadcast" else [-1]:
            per = count * n if coll in ("all_gather", "reduce_scatter") else count
            data = [reference.rank_input(r, per if coll != "all_gather" else count, dtype)
                    for r in range(n)]
            parts = [np.array(d) if side == prog.INPUT or coll != "all_gather"
                     else np.zeros(per, dtype) for d in data]
            others = [np.zeros(count, dtype) if coll == "reduce_scatter" else
                      data[r] if coll == "all_gather" else None for r in range(n)]
            label = f"{coll} n={n} count={count} root={root}"
            for r in range(n):
                plan = Plan(coll=coll, rank=r, size=n, dtype=dtype, root=root,
                            op=ReduceOp.SUM if coll in REDUCING else None,
                            input=None if coll in ("broadcast", "all_reduce")
                            else np.empty(per if side == prog.INPUT else count, dtype),
                            output=np.empty(per if side == prog.OUTPUT else count, dtype),
                            counts=(count,) * n if coll in PIECES else None, symmetric=True)
                entry = registry.get(coll, "symmetric")
                program = prog.as_mapped(prog.flatten(entry.fn, plan, entry.qualname), side,
                                         n, r)
                assert program.mapped and program.listed == (side, n), label
                assert not any(rec[0] in (prog.EXPOSE, prog.GET, prog.WRITE)
                               for rec in program.records), label
                entered = [rec[0] for rec in program.records].index(prog.ENTER) + 1
                assert all(rec[0] == prog.ROUND for rec in program.records[:entered - 1]), label
                bufs = [None, None] + parts
                bufs[1 - side] = others[r]
                bufs[side] = None  # (its parts stand for it)
                BoundProgram(program, _NoArena(r)).run_from(
                    entered, SimpleNamespace(op=ReduceOp.SUM, parity=0), tuple(bufs))
            if coll == "broadcast":
                want = [data[root]] * n
            elif coll == "all_reduce":
                want = reference.all_reduce(data, ReduceOp.SUM)
            elif coll == "all_gather":
                want = [np.concatenate(data)] * n
            else:
                want = [reference.all_reduce(data, ReduceOp.SUM)[r][r * count:(r + 1) * count]
                        for r in range(n)]
            got = others if coll == "reduce_scatter" else parts
            for r in range(n):
                assert got[r].tobytes() == want[r].tobytes(), f"{label} rank {r}"
                checked += 1
    assert checked, "vacuous: no result compared"


def test_as_mapped_makes_a_peers_exposed_buffer_its_part():
    # all_reduce at 3 ranks, rank 1: its share folded from every part into its own
    # part, then copied into each other part; no exposure, nothing through the kernel
    plan = Plan(coll="all_reduce", rank=1, size=3, dtype=np.dtype(np.float32),
                op=ReduceOp.SUM, output=np.empty(48, np.float32), symmetric=True)
    entry = registry.get("all_reduce", "symmetric")
    flat = prog.flatten(entry.fn, plan, entry.qualname)
    program = prog.as_mapped(flat, prog.OUTPUT, 3, 1)
    fold = next(rec for rec in program.records if rec[0] == prog.REDUCE_SLOTS)
    copies = [rec for rec in program.records if rec[0] == prog.COPY]
    assert fold[2] == prog.SPACE_CODES["exposed"] and fold[5] == prog.PIECES + 1, fold
    assert {(rec[5], rec[6], rec[7], rec[8]) for rec in copies} == {
        (prog.PIECES + q, fold[3], prog.PIECES + 1, fold[6]) for q in (0, 2)}, copies
    assert [program.buffer_bytes(b) for b in (prog.OUTPUT, prog.PIECES, prog.PIECES + 2)] == [
        192, 192, 192]
    with pytest.raises(prog.NotFlat):  # the side it exposes is its output, not its input
        prog.as_mapped(flat, prog.INPUT, 3, 1)


def test_the_lanes_symmetric_plans_drop_the_oldest_when_full():
    # one plan per array place (a model's buckets, a benchmark's rotated windows): when
    # KEEP are kept, the oldest goes, not all of them (emptying the cache made the bench
    # rebuild plans inside its timed loops)
    from meshcast.paths.symmetric import InlineCalls

    calls = InlineCalls(None, None, {})  # type: ignore[arg-type]
    calls.KEEP = 3
    made = []
    calls._plan = lambda kind, arr, op, root: made.append(arr.size) or arr.size  # type: ignore[method-assign]
    base = np.zeros(64, np.float32)
    views = [base[k * 8:(k + 1) * 8] for k in range(4)]
    for v in views:
        assert calls.plan("all_reduce", v) == 8
    assert len(made) == 4 and len(calls._plans) == 3
    for v in views[1:]:  # still kept: no plan made again
        calls.plan("all_reduce", v)
    assert len(made) == 4
    calls.plan("all_reduce", views[0])  # the oldest went
    assert len(made) == 5
