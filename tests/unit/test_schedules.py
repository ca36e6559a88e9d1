"""Every registered algorithm through the in-memory simulator, against the NumPy reference.

No processes: all ranks of a call run in one process (algorithms/_simulate.py),
so thousands of shapes take seconds. Every run also proves that every round
is matched (the simulator raises otherwise), that arena accesses are
race-free under the vector-clock checker, and that inputs are left alone.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshcast import ops, topology
from meshcast.algorithms import _registry as registry
from meshcast.algorithms import _select
from meshcast.algorithms._plan import (
    EXPOSED,
    REGION,
    Copy,
    Enter,
    Expose,
    Get,
    Put,
    Recv,
    Reduce,
    ReduceSlots,
    Round,
    Send,
    Signal,
    Wait,
    Write,
)
from meshcast.algorithms._simulate import (
    DeadlockError,
    Event,
    MatchError,
    RaceError,
    ScheduleError,
    host_options,
    make_plans,
    run,
    simulate,
)
from meshcast.errors import InvalidUsage
from meshcast.ops import ReduceOp
from meshcast.testing import reference

# the described one-host fast paths too (one-shot, cma, symmetric): simulated like the rest
ALL = registry.entries(described=True)
ARENA = [e for e in ALL if e.family == "arena"]
ROOTED = {"broadcast", "reduce", "gather", "scatter"}
REDUCING = {"reduce", "all_reduce", "reduce_scatter"}
PIECES = {"gather", "all_gather", "scatter", "reduce_scatter"}
IN_PLACE = {"all_reduce", "all_gather", "reduce", "gather", "scatter"}
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int8, np.uint8, np.bool_, np.complex64]
SCHEDULE_OPS = [op for op in ReduceOp if op is not ReduceOp.AVG]  # the group rewrites AVG


def ids(entries: list[registry.AlgorithmEntry]) -> list[str]:
    return [e.qualname for e in entries]


def _counts(rng: np.random.Generator, size: int, hi: int) -> list[int]:
    return [int(c) for c in rng.integers(0, hi + 1, size)]


def check(
    entry: registry.AlgorithmEntry,
    size: int,
    count: int,
    *,
    root: int = 0,
    op: ReduceOp = ReduceOp.SUM,
    dtype: type = np.float32,
    counts: list[int] | None = None,
    send: list[list[int]] | None = None,
    in_place: bool = False,
    root_splits: bool = False,
    slot_bytes: int | None = None,
    segment_bytes: int = 1 << 20,
    order: str = "lockstep",
    seed: int = 0,
    require: bool = True,
):
    """Simulate one call and compare every rank with the reference; None if unsupported.

    ``count`` is the buffer length (broadcast, reduce, all_reduce) or the
    per-rank piece length (gather, all_gather, scatter, reduce_scatter,
    all_to_all) when ``counts``/``send`` do not say otherwise.
    """
    coll = entry.coll
    options = host_options(entry.family)  # an arena, one-shot regions, ... as the family needs
    if slot_bytes is not None:
        options["slot_bytes"] = slot_bytes
    if coll in PIECES and counts is None:
        counts = [count] * size
    if coll == "all_to_all" and send is None:
        send = [[count] * size for _ in range(size)]
    dt = np.dtype(dtype)
    data = [
        reference.rank_input(r, _input_len(coll, r, count, counts, send), dt, seed=seed)
        for r in range(size)
    ]
    plans = make_plans(
        coll,
        size,
        data,
        dtype=dt,
        op=op if coll in REDUCING else None,
        root=root,
        counts=counts,
        send_counts=send,
        in_place=in_place,
        root_splits=root_splits,
        segment_bytes=segment_bytes,
        **options,
    )
    why = entry.why_not(plans[0])
    if why is not None:
        assert not require, f"{entry.qualname} refused size={size} count={count}: {why}"
        return None
    before = [None if p.input is None else p.input.copy() for p in plans]
    result = simulate(coll, entry.name, plans, order=order, seed=seed)
    want = _expected(coll, data, op, root, counts, send)
    label = (
        f"{entry.qualname} size={size} count={count} root={root} op={op!r} dtype={dt} order={order}"
    )
    for r, plan in enumerate(plans):
        if want[r] is None:
            continue
        got = plan.output
        assert got.dtype == dt, label
        assert np.array_equal(got, want[r]), f"{label}: rank {r}\n got  {got}\n want {want[r]}"
        if not in_place and before[r] is not None:
            assert np.array_equal(plan.input, before[r]), f"{label}: rank {r} input modified"
    return result


def _input_len(coll, r, count, counts, send) -> int:
    if coll in ("gather", "all_gather"):
        return counts[r]
    if coll in ("scatter", "reduce_scatter"):
        return sum(counts)
    if coll == "all_to_all":
        return sum(send[r])
    if coll == "barrier":
        return 0
    return count


def _expected(coll, data, op, root, counts, send):
    size = len(data)
    return {
        "broadcast": lambda: reference.broadcast(data, root),
        "reduce": lambda: reference.reduce(data, op, root),
        "all_reduce": lambda: reference.all_reduce(data, op),
        "gather": lambda: reference.gather(data, root),
        "all_gather": lambda: reference.all_gather(data),
        "scatter": lambda: reference.scatter(data, root, counts),
        "reduce_scatter": lambda: reference.reduce_scatter(data, op, counts),
        "all_to_all": lambda: reference.all_to_all(data, send),
        "barrier": lambda: [None] * size,
    }[coll]()


# ------------------------------------------------------------------ registry


def test_every_collective_has_p2p_and_arena_algorithms():
    for coll in registry.COLLECTIVES:
        assert registry.names(coll, family="p2p"), coll
        assert registry.names(coll, family="arena") == ["arena"], coll


@pytest.mark.parametrize("entry", ALL, ids=ids(ALL))
def test_docstring_has_the_required_fields(entry):
    doc = entry.fn.__doc__ or ""
    summary = doc.strip().splitlines()[0]
    assert summary.endswith("."), entry.qualname
    for field in ("Steps", "Bytes sent per rank", "Requires"):
        assert field in doc, f"{entry.qualname} docstring lacks {field!r}"


# ------------------------------------------------------------ the big grids


@pytest.mark.parametrize("entry", ALL, ids=ids(ALL))
def test_sizes_1_to_17_and_small_counts(entry):
    for size in range(1, 18):
        for count in sorted({0, 1, max(size - 1, 0), size, size + 1, 2 * size + 3}):
            root = (size // 2 + count) % size
            check(entry, size, count, root=root, require=entry.name != "bruck")


@pytest.mark.parametrize(
    "entry", [e for e in ALL if e.coll in ROOTED], ids=ids([e for e in ALL if e.coll in ROOTED])
)
def test_every_root(entry):
    for size in range(1, 18):
        count = size + 1
        for root in range(size):
            counts = [(q * 3 + root) % 4 for q in range(size)] if entry.coll in PIECES else None
            check(entry, size, count, root=root, counts=counts)


REDUCERS = [e for e in ALL if e.coll in REDUCING]


@pytest.mark.parametrize("entry", REDUCERS, ids=ids(REDUCERS))
def test_every_valid_op_and_dtype(entry):
    ran = 0
    for dtype in DTYPES:
        for op in SCHEDULE_OPS:
            try:
                ops.validate(op, np.dtype(dtype), caller="test")
            except InvalidUsage:
                continue
            for size in (2, 3, 5):
                check(entry, size, 19, root=size - 1, op=op, dtype=dtype, slot_bytes=None)
                ran += 1
    assert ran > 100


NON_REDUCERS = [e for e in ALL if e.coll not in REDUCING and e.coll != "barrier"]


@pytest.mark.parametrize("entry", NON_REDUCERS, ids=ids(NON_REDUCERS))
def test_dtypes_of_data_movement(entry):
    for dtype in DTYPES + [np.int64, np.uint16, np.complex128]:
        check(entry, 5, 7, root=3, dtype=dtype)


EQUAL_PIECES_ONLY = {"all_to_all/bruck", "all_gather/symmetric"}
UNEVEN = [e for e in ALL if (e.coll in PIECES or e.coll == "all_to_all")
          and e.qualname not in EQUAL_PIECES_ONLY]


@pytest.mark.parametrize("entry", UNEVEN, ids=ids(UNEVEN))
def test_uneven_and_zero_counts(entry):
    rng = np.random.default_rng(7)
    for size in range(1, 18):
        for trial in range(3):
            hi = (1, 4, 9)[trial]
            counts = _counts(rng, size, hi)
            send = [_counts(rng, size, hi) for _ in range(size)]
            root = int(rng.integers(size))
            check(entry, size, 0, root=root, counts=counts, send=send, seed=trial)


INPLACE = [e for e in ALL if e.coll in IN_PLACE]


@pytest.mark.parametrize("entry", INPLACE, ids=ids(INPLACE))
def test_in_place(entry):
    for size in range(1, 10):
        for count in (0, 1, size + 2, 29):
            root = (count + 1) % size
            counts = [(q + count) % 5 for q in range(size)] if entry.coll in PIECES else None
            check(entry, size, count, root=root, counts=counts, in_place=True,
                  require=entry.qualname not in EQUAL_PIECES_ONLY)


SPLITTING = [registry.get("gather", "cma"), registry.get("scatter", "cma")]


@pytest.mark.parametrize("entry", SPLITTING, ids=ids(SPLITTING))
@pytest.mark.parametrize("order", ["lockstep", "random"])
def test_a_root_in_place_that_splits_moves_part_of_every_piece(entry, order):
    # plan.root_splits: the root, its own piece in place, moves part q of each rank q's
    # piece itself while q moves the others (the race checker sees no byte moved twice
    # or read before it is there); uneven and empty pieces too
    for size in range(1, 10):
        for count in (0, 1, size + 2, 29):
            root = (count + 1) % size
            counts = [(q + count) % 5 * (q + 1) for q in range(size)]
            for trial, piece in enumerate((counts, [count] * size)):
                check(entry, size, count, root=root, counts=piece, in_place=True,
                      root_splits=True, order=order, seed=trial)


SEGMENTED = [
    registry.get("broadcast", "ring"),
    registry.get("reduce", "direct"),
    registry.get("all_reduce", "direct"),
]


@pytest.mark.parametrize("entry", SEGMENTED, ids=ids(SEGMENTED))
def test_small_segments_pipeline(entry):
    for size in range(1, 10):
        for count in (1, 5, 33):
            for segment_bytes in (4, 12, 40):
                check(entry, size, count, root=size // 3, segment_bytes=segment_bytes)


@pytest.mark.parametrize("entry", ARENA, ids=ids(ARENA))
def test_arena_small_slots_chunk_and_double_buffer(entry):
    ran = chunked = 0
    for size in range(1, 10):
        for slot_bytes in (64, 96, 256):
            for count in (0, 1, 5, 50, 120):
                for segment_bytes in (8, 1 << 20):
                    seed = size * 1000 + slot_bytes + count
                    counts = (
                        [(q * 7 + count) % 13 for q in range(size)]
                        if entry.coll in PIECES
                        else None
                    )
                    res = check(
                        entry,
                        size,
                        count,
                        root=size - 1,
                        counts=counts,
                        slot_bytes=slot_bytes,
                        segment_bytes=segment_bytes,
                        order="random",
                        seed=seed,
                        require=False,
                    )
                    if res is not None:
                        ran += 1
                        puts = [e.offset for e in res.events if e.kind == "put"]
                        chunked += len(set(puts)) > 1
    assert ran >= 100, f"{entry.qualname}: only {ran} small-slot configurations supported"
    if entry.coll != "barrier":
        assert chunked > 10, f"{entry.qualname}: small slots never used more than one region"


ORDERS = [("greedy", 0), ("reverse", 0), ("random", 1), ("random", 2), ("random", 3)]


@pytest.mark.parametrize("entry", ALL, ids=ids(ALL))
def test_any_interleaving(entry):
    for size in (2, 3, 5, 8):
        for order, seed in ORDERS:
            slot = 160 if entry.family == "arena" else None
            res = check(
                entry, size, 23, root=1, order=order, seed=seed, slot_bytes=slot, require=False
            )
            if res is None:  # the slot is too small for this size: use a bigger one
                check(entry, size, 23, root=1, order=order, seed=seed, slot_bytes=1 << 12)


@pytest.mark.parametrize(
    "entry",
    [e for e in ALL if e.coll == "all_reduce"],
    ids=ids([e for e in ALL if e.coll == "all_reduce"]),
)
def test_all_reduce_is_bitwise_identical_on_every_rank(entry):
    # data on which float sums round differently in different orders
    for size in (2, 3, 5, 6, 9):
        rng = np.random.default_rng(size)
        data = [
            rng.standard_normal(41).astype(np.float32) * 10.0 ** rng.integers(-3, 4)
            for _ in range(size)
        ]
        options = {**host_options(entry.family),
                   **({"slot_bytes": 200} if entry.family == "arena" else {})}
        plans = make_plans("all_reduce", size, data, op="sum", **options)
        simulate("all_reduce", entry.name, plans, order="random", seed=size)
        for plan in plans[1:]:
            assert plans[0].output.tobytes() == plan.output.tobytes(), entry.qualname
        np.testing.assert_allclose(plans[0].output, np.sum(data, axis=0), rtol=1e-4, atol=1e-3)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entry=st.sampled_from(ALL),
    size=st.integers(1, 17),
    count=st.integers(0, 67),
    data=st.data(),
)
def test_random_calls(entry, size, count, data):
    root = data.draw(st.integers(0, size - 1))
    dtype = data.draw(st.sampled_from(DTYPES))
    op = ReduceOp.SUM
    if entry.coll in REDUCING:
        valid = [o for o in SCHEDULE_OPS if _valid(o, dtype)]
        op = data.draw(st.sampled_from(valid))
    counts = send = None
    if data.draw(st.booleans()) and entry.name != "bruck":
        counts = data.draw(st.lists(st.integers(0, 9), min_size=size, max_size=size))
        send = [
            data.draw(st.lists(st.integers(0, 5), min_size=size, max_size=size))
            for _ in range(size)
        ]
    slot = data.draw(st.sampled_from([64, 128, 512, 1 << 16])) if entry.family == "arena" else 0
    order = data.draw(st.sampled_from(["lockstep", "greedy", "reverse", "random"]))
    check(
        entry,
        size,
        count,
        root=root,
        op=op,
        dtype=dtype,
        counts=counts,
        send=send,
        slot_bytes=slot,
        segment_bytes=data.draw(st.sampled_from([8, 1 << 20])),
        order=order,
        seed=count,
        require=entry.family == "p2p" and entry.name != "bruck",
    )


def _valid(op, dtype) -> bool:
    try:
        ops.validate(op, np.dtype(dtype), caller="test")
    except InvalidUsage:
        return False
    return True


# ------------------------------------------------------------ costs & shape


def _sent(res, rank):
    return sum(e.nbytes for e in res.events if e.rank == rank and e.kind == "send")


def test_documented_costs_of_the_classics():
    s = 4 * 48  # 48 float32 on every rank
    for size in (2, 4, 8):
        res = check(registry.get("all_reduce", "ring"), size, 48)
        assert all(_sent(res, r) == 2 * s * (size - 1) // size for r in range(size))
        assert res.rounds == [2 * (size - 1)] * size
        res = check(registry.get("all_reduce", "recursive_doubling"), size, 48)
        assert all(_sent(res, r) == s * int(math.log2(size)) for r in range(size))
        res = check(registry.get("reduce_scatter", "recursive_halving"), size, 48 // size)
        assert all(_sent(res, r) == s * (size - 1) // size for r in range(size))
        res = check(registry.get("broadcast", "tree"), size, 48)
        assert res.rounds == [topology.ceil_log2(size)] * size
        assert _sent(res, 0) == s * topology.ceil_log2(size)
        res = check(registry.get("broadcast", "direct"), size, 48)
        assert _sent(res, 0) == s * (size - 1)
        res = check(registry.get("all_to_all", "bruck"), size, 3)
        assert res.rounds == [1 + topology.ceil_log2(size)] * size
    res = check(registry.get("broadcast", "ring"), 5, 48, segment_bytes=16)
    assert [_sent(res, r) for r in range(5)] == [s, s, s, s, 0]
    assert res.rounds == [12 + 3] * 5  # 12 segments through a chain of 5


def test_arena_all_reduce_moves_each_byte_once():
    size, count = 4, 40
    res = check(registry.get("all_reduce", "arena"), size, count, slot_bytes=1 << 12)
    for r in range(size):
        puts = sum(e.nbytes for e in res.events if e.rank == r and e.kind == "put")
        assert puts == 4 * count + 4 * count // size  # my chunk, then my reduced share
        assert res.count("reduce_slots", r) == 1
        assert res.count("send", r) == 0


def test_barrier_messages_are_empty():
    for name in ("dissemination", "tree"):
        res = check(registry.get("barrier", name), 6, 0)
        assert res.count("send") > 0
        assert all(e.nbytes == 0 for e in res.events if e.kind == "send")


def test_events_are_frozen_and_ordered():
    res = check(registry.get("all_reduce", "arena"), 3, 10, slot_bytes=256)
    assert [e.tick for e in res.events] == list(range(len(res.events)))
    assert {e.kind for e in res.events} <= {"put", "get", "reduce_slots", "signal", "wait"}
    with pytest.raises(AttributeError):
        res.events[0].rank = 5  # type: ignore[misc]
    assert isinstance(res.events[0], Event)


# --------------------------------------------------- the simulator's checks


def _plans(size=2, count=4, slot_bytes=0, coll="all_reduce"):
    data = [np.arange(count, dtype=np.float32) + r for r in range(size)]
    return make_plans(coll, size, data, op="sum", slot_bytes=slot_bytes)


def test_sim_reports_unequal_message_sizes():
    def bad(plan):
        n = 2 if plan.rank == 0 else 3
        yield Round(Send(1 - plan.rank, plan.input[:n]), Recv(1 - plan.rank, plan.output[:n]))

    with pytest.raises(
        MatchError, match="rank 1 sends \\[12\\] bytes to rank 0, which receives \\[8\\]"
    ):
        run(bad, _plans())


def test_sim_reports_round_misalignment():
    def bad(plan):
        if plan.rank == 0:
            yield Round()
        yield Round(Send(1 - plan.rank, plan.input), Recv(1 - plan.rank, plan.output))

    with pytest.raises(MatchError, match="round 0"):
        run(bad, _plans())


def test_sim_reports_a_send_nobody_receives():
    def bad(plan):
        if plan.rank == 0:
            yield Round(Send(1, plan.input))

    with pytest.raises(MatchError, match="rank 1 has finished"):
        run(bad, _plans(), order="greedy")
    with pytest.raises(MatchError, match="no partner"):
        run(bad, _plans(), order="reverse")


def test_sim_reports_deadlock_with_each_ranks_pending_step():
    def bad(plan):
        yield Round(then=[Wait((1 - plan.rank,), 1), Signal(1)])

    with pytest.raises(DeadlockError) as info:
        run(bad, _plans(slot_bytes=64))
    assert "rank 0 round 0 step 0: Wait(ranks=(1,), phase=1)" in str(info.value)
    assert "rank 1 round 0 step 0" in str(info.value)


def test_sim_reports_overlapping_comm_buffers_and_self_sends():
    def overlap(plan):
        yield Round(Send(1 - plan.rank, plan.input[:3]), Recv(1 - plan.rank, plan.input[1:4]))

    with pytest.raises(ScheduleError, match="overlaps"):
        run(overlap, _plans())

    def to_self(plan):
        yield Round(Send(plan.rank, plan.input))

    with pytest.raises(ScheduleError, match="invalid peer"):
        run(to_self, _plans())


def test_sim_reports_bad_local_steps():
    def partial(plan):
        yield Round(then=[Copy(plan.input[1:3], plan.input[:2])])

    with pytest.raises(ScheduleError, match="overlap partially"):
        run(partial, _plans())

    def mixed(plan):
        yield Round(then=[Reduce(plan.output[:2], plan.input[:3])])

    with pytest.raises(ScheduleError, match="differ"):
        run(mixed, _plans())


def _single_buffer_all_gather(plan):
    """Chunks through ONE slot buffer with no wait before reuse: a Rule 2 race."""
    p, r = plan.size, plan.rank
    n = len(plan.input)
    rest = tuple(q for q in range(p) if q != r)
    for k in range(0, n, 2):
        steps = [Put(0, plan.input[k : k + 2]), Signal(k // 2 + 1), Wait(rest, k // 2 + 1)]
        steps += [Get(q, 0, plan.output[q * n + k : q * n + k + 2]) for q in rest]
        steps.append(Copy(plan.output[r * n + k : r * n + k + 2], plan.input[k : k + 2]))
        yield Round(then=steps)


@pytest.mark.parametrize("order", ["lockstep", "greedy", "reverse", "random"])
def test_sim_race_detector_catches_slot_reuse_in_any_order(order):
    plans = _plans(size=3, count=8, slot_bytes=64, coll="all_gather")
    with pytest.raises(RaceError, match="Rule"):
        run(_single_buffer_all_gather, plans, order=order, seed=5)


def test_sim_adversarial_order_corrupts_a_racy_schedule():
    plans = _plans(size=3, count=8, slot_bytes=64, coll="all_gather")
    run(_single_buffer_all_gather, plans, order="greedy", check_races=False)
    want = np.concatenate([np.arange(8, dtype=np.float32) + r for r in range(3)])
    assert not all(np.array_equal(p.output, want) for p in plans)


def test_sim_reports_stale_slot_reads_and_slot_bounds():
    def stale(plan):
        yield Round(then=[Get(1 - plan.rank, 0, plan.output[:2])])

    with pytest.raises(RaceError, match="nothing wrote"):
        run(stale, _plans(slot_bytes=64))

    def outside(plan):
        yield Round(then=[Put(60, plan.input)])

    with pytest.raises(ScheduleError, match="outside the 64-byte slot"):
        run(outside, _plans(slot_bytes=64))
    with pytest.raises(ScheduleError, match="slot_bytes is 0"):
        run(outside, _plans(slot_bytes=0))


def test_sim_reports_phases_going_down():
    def down(plan):
        yield Round(then=[Signal(2), Signal(1)])

    with pytest.raises(ScheduleError, match="never go down"):
        run(down, _plans(slot_bytes=64))


def test_sim_names_the_schedule_when_a_generator_fails():
    def boom(plan):
        yield Round()
        raise ZeroDivisionError("x")

    with pytest.raises(ScheduleError, match="rank 0 failed building round 1"):
        run(boom, _plans())


# ------------------------------------------- the one-host fast paths' steps


def _host_plans(family, coll="all_reduce", size=2, count=4):
    data = [np.arange(count, dtype=np.float32) + r for r in range(size)]
    return make_plans(coll, size, data, op="sum", in_place=True, **host_options(family))


def test_sim_reports_a_region_read_before_the_entry():
    def early(plan):
        # rank 1 reads rank 0's region without entering: nothing orders the Put before it
        yield Round(then=[Put(0, plan.input, REGION), Get(0, 0, plan.output, REGION), Enter()])

    with pytest.raises(RaceError, match="region of rank 0|rank 0's region"):
        run(early, _host_plans("oneshot"), order="reverse")


def test_sim_reports_single_copy_without_its_middle_barrier():
    """cma all_reduce with the phase-1 barrier left out: a rank would read a peer's
    share before the peer has reduced it (and overwrite what the peer still reads)."""

    def hasty(plan):
        out, n, me = plan.output, plan.size, plan.rank
        lo, hi = topology.share(len(out), plan.itemsize, me, n)
        q = 1 - me
        qlo, qhi = topology.share(len(out), plan.itemsize, q, n)
        yield Round(then=[Expose(out), Enter(),
                          ReduceSlots(out[lo:hi], (0, 1), lo * plan.itemsize, EXPOSED),
                          Get(q, qlo * plan.itemsize, out[qlo:qhi], EXPOSED),
                          Signal(1), Wait((0, 1), 1)])

    with pytest.raises(RaceError, match="exposed"):
        run(hasty, _host_plans("cma", count=64), order="greedy")


def test_sim_reports_a_write_into_a_buffer_nobody_exposed():
    def blind(plan):
        yield Round(then=[Enter(), Write(1 - plan.rank, 0, plan.input)])

    with pytest.raises(ScheduleError, match="has exposed no buffer"):
        run(blind, _host_plans("cma"))


def test_sim_reports_a_rank_that_never_enters():
    def lonely(plan):
        if plan.rank == 0:
            yield Round(then=[Enter()])

    with pytest.raises(DeadlockError, match=r"ranks \[1\] never entered"):
        run(lonely, _host_plans("oneshot"))


def test_sim_reports_a_read_a_one_sided_entry_did_not_await():
    # every rank stages; rank 1 awaits rank 0 only, then reads rank 2's region too
    def hasty(plan):
        awaits = None if plan.rank != 1 else (0,)
        reads = [Get(0, 0, plan.output, REGION)] + (
            [Get(2, 0, plan.output, REGION)] if plan.rank == 1 else [])
        yield Round(then=[Put(0, plan.input, REGION), Enter(awaits), *reads])

    with pytest.raises(RaceError, match="region of rank 2|rank 2's region"):
        run(hasty, _host_plans("oneshot", size=3), order="reverse")

    def patient(plan):  # the same reads, awaiting what they read
        awaits = None if plan.rank != 1 else (0, 2)
        yield Round(then=[Put(0, plan.input, REGION), Enter(awaits),
                          Get(0, 0, plan.output, REGION)])

    run(patient, _host_plans("oneshot", size=3), order="reverse")


def test_sim_refuses_a_one_sided_entry_after_an_exposure_or_of_strangers():
    def exposing(plan):
        yield Round(then=[Expose(plan.input), Enter(())])

    with pytest.raises(ScheduleError, match="one-sided Enter after Expose"):
        run(exposing, _host_plans("cma"))

    def strangers(plan):
        yield Round(then=[Enter((5,))])

    with pytest.raises(ScheduleError, match=r"awaits \(5,\): not ranks"):
        run(strangers, _host_plans("oneshot"))


def test_described_paths_never_reach_the_selector():
    """Registering the fast paths changes no decision: the selector, ``algorithm=`` and
    ``MESHCAST_ALGO`` see only the families the executor runs."""
    described = [e for e in registry.entries(described=True) if not e.executed]
    assert {e.family for e in described} == set(registry.DESCRIBED)
    assert not set(registry.entries()) & set(described)
    for e in described:
        assert e.name not in registry.names(e.coll)
        plans = _host_plans(e.family, e.coll if e.coll != "barrier" else "barrier")
        assert _select.select(plans[0]).family not in registry.DESCRIBED
        with pytest.raises(InvalidUsage, match="unknown algorithm"):
            _select.select(plans[0], explicit=e.name)
        with pytest.raises(InvalidUsage, match="unknown algorithm"):
            _select.parse_tune(f"{e.coll}:{e.name}")


def test_sim_keeps_fast_path_steps_out_of_executed_plans():
    """What the executor runs (p2p and arena plans) cannot use the entry or exposures."""

    def entering(plan):
        yield Round(then=[Enter()])

    with pytest.raises(ScheduleError, match="fast-path step"):
        run(entering, _plans(slot_bytes=64))

    def exposing(plan):
        yield Round(then=[Expose(plan.input)])

    with pytest.raises(ScheduleError, match="Expose needs"):
        run(exposing, _host_plans("oneshot"))

    def twice(plan):
        yield Round(then=[Enter(), Enter()])

    with pytest.raises(ScheduleError, match="Enter twice"):
        run(twice, _host_plans("oneshot"))
