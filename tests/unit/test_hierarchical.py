"""The cross-host compositions (algorithms/hierarchical.py) against the NumPy oracle, for
many hosts x ranks shapes, every family that supports the shape, every root, in the
in-process simulator (no processes: each rank is a thread)."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import numpy as np
import pytest

from meshcast.algorithms import hierarchical as hier
from meshcast.ops import ReduceOp, working_dtype
from meshcast.testing import reference as ref
from meshcast.testing.hosts_sim import simulate
from meshcast.trace.steps import StepNotes

SHAPES = [
    [[0], [1]],                      # 2 hosts x 1
    [[0, 1], [2, 3]],                # 2 x 2
    [[0], [1], [2]],                 # 3 x 1
    [[0, 2], [1, 3]],                # 2 x 2, ranks interleaved (mpiexec round robin)
    [[0, 1, 2], [3]],                # 3 + 1
    [[0], [1, 2, 3]],                # 1 + 3
    [[0, 1], [2, 3], [4, 5]],        # 3 x 2
    [[0, 3, 5], [1], [2, 4]],        # uneven, interleaved
]
IDS = ["+".join(str(len(h)) for h in s) + ("i" if s == [[0, 2], [1, 3]] else "") for s in SHAPES]
COUNTS = [0, 1, 7, 300, 20000]  # 20000 x 4 B passes RAILS_MIN_BYTES


def families(kind, shape):
    lay = hier.Layout(tuple(tuple(h) for h in shape), 0)
    return [f for f in hier.families(kind) if hier.supports(kind, f, lay) is None]


def _size(shape):
    return sum(len(h) for h in shape)


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MAX, ReduceOp.PRODUCT])
def test_all_reduce_and_reduce(shape, op):
    n = _size(shape)
    for dtype in ("float32", "int32", "float64"):
        for count in COUNTS:
            inputs = [ref.rank_input(r, count, dtype) for r in range(n)]
            want = ref.reduced(inputs, op)
            for family in families("all_reduce", shape):
                def body(ctx, g, family=family, inputs=inputs, dtype=dtype):
                    w = inputs[g].astype(working_dtype(dtype, op))
                    hier.all_reduce(ctx, family, w, op)
                    return w

                for g, got in enumerate(simulate(shape, body)):
                    np.testing.assert_array_equal(got, want, err_msg=f"{family} rank {g}")
            for root, family in ((r, f) for r in range(n) for f in families("reduce", shape)):
                def body(ctx, g, root=root, inputs=inputs, family=family):
                    w = inputs[g].copy()
                    hier.reduce(ctx, family, w, op, root)
                    return w

                got = simulate(shape, body)[root]
                np.testing.assert_array_equal(got, want, err_msg=f"reduce {family} root {root}")


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_broadcast_every_root(shape):
    n = _size(shape)
    for count in COUNTS:
        inputs = [ref.rank_input(r, count, "float32", seed=3) for r in range(n)]
        for family in families("broadcast", shape):
            for root in range(n):
                def body(ctx, g, root=root, family=family, inputs=inputs):
                    w = inputs[g].copy()
                    hier.broadcast(ctx, family, w, root)
                    return w

                for g, got in enumerate(simulate(shape, body)):
                    np.testing.assert_array_equal(got, inputs[root],
                                                  err_msg=f"{family} root {root} rank {g}")


def _uneven(n, base):
    return [base + (g % 3) for g in range(n)]


@pytest.mark.parametrize("shape", [[[0, 1], [2, 3]], [[0, 1, 2], [3]], [[0], [1], [2]]],
                         ids=["2x2", "3+1", "3x1"])
def test_leader_all_reduce_in_chunks(shape, monkeypatch):
    """Large leader all_reduces run in chunks, each on the link while the host works on
    the next; the chunk edges (an uneven last chunk) must not change the result."""
    monkeypatch.setattr(hier, "PIPELINE_BYTES", 24 << 10)  # 5 chunks of 20003 float32
    n = _size(shape)
    count = 20003
    for op in (ReduceOp.SUM, ReduceOp.MAX):
        inputs = [ref.rank_input(r, count, "float32") for r in range(n)]
        want = ref.reduced(inputs, op)

        def body(ctx, g, inputs=inputs, op=op):
            w = inputs[g].copy()
            hier.all_reduce(ctx, "leader", w, op)
            return w

        for g, got in enumerate(simulate(shape, body)):
            np.testing.assert_array_equal(got, want, err_msg=f"{op} rank {g}")


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
@pytest.mark.parametrize("base", [0, 1, 5000])
def test_all_gather_and_reduce_scatter_even_and_uneven(shape, base):
    n = _size(shape)
    for counts in ([base] * n, _uneven(n, base)):
        inputs = [ref.rank_input(r, counts[r], "int64") for r in range(n)]
        want = ref.all_gather(inputs)[0]
        for family in families("all_gather", shape):
            def body(ctx, g, family=family, counts=counts, inputs=inputs):
                out = np.empty(sum(counts), np.int64)
                hier.all_gather(ctx, family, out, inputs[g], counts)
                return out

            for g, got in enumerate(simulate(shape, body)):
                np.testing.assert_array_equal(got, want, err_msg=f"{family} rank {g}")
        full = [ref.rank_input(r, sum(counts), "float32", seed=1) for r in range(n)]
        want_rs = ref.reduce_scatter(full, ReduceOp.SUM, counts)
        for family in families("reduce_scatter", shape):
            def body(ctx, g, family=family, counts=counts, full=full):
                out = np.empty(counts[g], np.float32)
                w = full[g].copy()
                hier.reduce_scatter(ctx, family, out, w, counts, ReduceOp.SUM)
                np.testing.assert_array_equal(w, full[g], err_msg=f"{family}: input changed")
                return out

            for g, got in enumerate(simulate(shape, body)):
                np.testing.assert_array_equal(got, want_rs[g], err_msg=f"{family} rank {g}")

            def in_place(ctx, g, family=family, counts=counts, full=full):
                # out is my piece of w (torch's reduce_scatter_tensor in place)
                w = full[g].copy()
                start = sum(counts[:g])
                hier.reduce_scatter(ctx, family, w[start:start + counts[g]], w, counts,
                                    ReduceOp.SUM)
                rest = np.concatenate([w[:start], w[start + counts[g]:]])
                np.testing.assert_array_equal(
                    rest, np.concatenate([full[g][:start], full[g][start + counts[g]:]]),
                    err_msg=f"{family}: input changed outside the output")
                return w[start:start + counts[g]].copy()

            for g, got in enumerate(simulate(shape, in_place)):
                np.testing.assert_array_equal(got, want_rs[g],
                                              err_msg=f"{family} in place, rank {g}")


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_gather_scatter_all_to_all(shape):
    n = _size(shape)
    counts = _uneven(n, 2)
    inputs = [ref.rank_input(r, counts[r], "float64") for r in range(n)]
    for root, family in ((r, f) for r in range(n) for f in families("gather", shape)):
        def body(ctx, g, root=root, family=family):
            outs = [np.empty(c) for c in counts] if g == root else None
            hier.gather(ctx, family, outs, inputs[g], counts, root)
            return outs

        got = simulate(shape, body)[root]
        np.testing.assert_array_equal(np.concatenate(got), np.concatenate(inputs), family)

        def body(ctx, g, root=root, family=family):
            out = np.empty(counts[g])
            hier.scatter(ctx, family, out, inputs if g == root else None, counts, root)
            return out

        for g, got in enumerate(simulate(shape, body)):
            np.testing.assert_array_equal(got, inputs[g], f"scatter {family} root {root}")
    sends = [[(g + q) % 3 for q in range(n)] for g in range(n)]
    a2a_in = [ref.rank_input(g, sum(sends[g]), "int32") for g in range(n)]
    want = ref.all_to_all(a2a_in, sends)

    def body(ctx, g):
        recv = [sends[q][g] for q in range(n)]
        out = np.empty(sum(recv), np.int32)
        hier.all_to_all(ctx, "flat", out, recv, a2a_in[g], sends[g])
        return out

    for g, got in enumerate(simulate(shape, body)):
        np.testing.assert_array_equal(got, want[g])


def test_choose_follows_the_measured_table_on_both_sides_of_every_step():
    even = hier.Layout(((0, 1), (2, 3)), 0)
    uneven = hier.Layout(((0, 1, 2), (3,)), 0)
    single = hier.Layout(((0,), (1,)), 0)
    # every host the same number of ranks, then one rank a host (its own table)
    for tables, layout in ((hier.DEFAULTS, even), (hier.ONE_RANK_A_HOST, single)):
        for engine, table in tables.items():
            for kind, steps in table.items():
                for i, (start, family) in enumerate(steps):
                    assert hier.choose(kind, layout, start, None, engine) == family, (
                        kind, start, layout)
                    if start:
                        assert hier.choose(kind, layout, start - 1, None, engine) == (
                            steps[i - 1][1])
    assert hier.choose("broadcast", even, 32 << 20, None, "gloo") == "leader"
    assert hier.choose("all_gather", even, 1 << 20, None) == "rails"
    assert hier.choose("all_gather", uneven, 1 << 20, None) == "leader"  # rails cannot
    # one rank a host over Gloo too (no table): leader's exchange is flat's plus copies
    three = hier.Layout(((0,), (1,), (2,)), 0)
    for layout, engine in ((single, "gloo"), (three, "gloo"), (three, "mpi")):
        assert hier.choose("reduce_scatter", layout, 8 << 20, None, engine) == "flat"
        assert hier.choose("all_gather", layout, 8 << 20, None, engine) == "flat"
    assert hier.choose("broadcast", single, 8 << 20, None, "gloo") == "leader"
    assert hier.choose("reduce_scatter", single, 8 << 20, "leader") == "leader"
    assert hier.choose("all_gather", hier.Layout(((0,), (1, 2)), 0), 8 << 20, None) == "leader"
    assert hier.choose("all_reduce", single, 64 << 10, None) == "flat"
    assert hier.choose("all_reduce", even, 64 << 10, None) == "fused"
    assert hier.choose("all_reduce", uneven, 1 << 10, None) == "flat"
    # where fused cannot run, what ran before it: both sides of its fallback's step
    big = hier.Layout(tuple((2 * h, 2 * h + 1) for h in range(5)), 0)  # 10 ranks
    for layout in (uneven, big):
        assert hier.choose("reduce_scatter", layout, 64 << 10, None) == "flat"
        assert hier.choose("reduce_scatter", layout, 256 << 10, None) == (
            "rails" if layout is big else "leader")
        assert hier.choose("reduce_scatter", layout, 4 << 20, None) == (
            "rails" if layout is big else "leader")
    assert hier.choose("reduce_scatter", even, 64 << 10, None, "gloo") == "leader"
    assert hier.choose("reduce", even, 1 << 20, None) == "leader"  # not in the table
    assert hier.choose("all_reduce", even, 64, "rails") == "rails"
    assert "same number of ranks" in hier.supports("all_reduce", "rails", uneven)
    assert "unknown" in hier.supports("all_reduce", "ring", even)


def test_every_family_is_one_function_that_says_its_steps_and_bytes():
    assert set(hier.ALGORITHMS) == {"broadcast", "reduce", "all_reduce", "gather",
                                    "all_gather", "scatter", "reduce_scatter", "all_to_all"}
    for kind, table in hier.ALGORITHMS.items():
        assert table and set(table) <= set(hier.FAMILIES), kind
        # no name runs another family's code (reduce/flat once ran leader's)
        assert len({id(fn) for fn in table.values()}) == len(table), kind
        for family, fn in table.items():
            doc = inspect.getdoc(fn)
            assert "\nSteps" in doc and "\nBytes across hosts:" in doc, (kind, family)
    assert hier.families("reduce") == hier.families("gather") == hier.families("scatter") == (
        "leader", "flat")
    assert hier.families("all_to_all") == ("flat", "fused")


def test_a_family_a_collective_lacks_is_refused_naming_what_it_runs():
    lay = hier.Layout(((0, 1), (2, 3)), 0)
    assert hier.supports("reduce", "rails", lay) == (
        "'rails' runs broadcast, all_reduce, all_gather and reduce_scatter, not reduce")
    assert hier.supports("all_to_all", "leader", lay).endswith("not all_to_all")
    assert hier.supports("gather", "fused", lay).endswith("not gather")
    with pytest.raises(ValueError, match="'rails' runs .*, not scatter"):
        hier.scatter(SimpleNamespace(layout=lay), "rails", np.zeros(1), None, [1] * 4, 0)


def test_requires_words_what_supports_checks():
    even, uneven = hier.Layout(((0, 1), (2, 3)), 0), hier.Layout(((0, 1, 2), (3,)), 0)
    big = hier.Layout(tuple((2 * h, 2 * h + 1) for h in range(5)), 0)  # 10 ranks
    for kind in hier.ALGORITHMS:
        for family in hier.families(kind):
            words = hier.requires(kind, family)
            assert hier.supports(kind, family, even) is None, (kind, family)
            assert ("same number of ranks" in words) == (
                hier.supports(kind, family, uneven) is not None), (kind, family)
            assert ("MPI" in words) == (hier.supports(kind, family, even, "gloo") is not None
                                        ) == (hier.supports(kind, family, big) is not None), (
                kind, family)


@pytest.mark.parametrize("engine", ["mpi", "gloo"])
def test_the_tables_pick_only_families_the_call_can_run(engine):
    layouts = [hier.Layout(tuple(tuple(h) for h in shape), 0) for shape in SHAPES]
    layouts.append(hier.Layout(tuple((2 * h, 2 * h + 1) for h in range(5)), 0))
    for kind in hier.ALGORITHMS:
        for layout in layouts:
            for nbytes in (0, 1, 64 << 10, 512 << 10, 1 << 20, 2 << 20, 16 << 20, 1 << 30):
                family = hier.choose(kind, layout, nbytes, None, engine)
                assert hier.supports(kind, family, layout, engine) is None, (
                    kind, layout.hosts, nbytes, family)


def test_a_host_shares_the_eager_cap_where_fused_runs_past_it():
    flat, whole = "flat", hier.EAGER_BYTES["flat"]
    a2a = hier.EAGER_ALL_TO_ALL_BYTES["flat"]
    for layout, per_host in ((hier.Layout(((0, 1), (2, 3)), 0), 2),
                             (hier.Layout(((0, 1), (2, 3), (4, 5)), 0), 2),
                             (hier.Layout(((0, 1, 2, 3), (4, 5, 6, 7)), 0), 4)):
        for kind in ("all_reduce", "reduce_scatter"):
            assert hier.eager_cap(kind, flat, layout) == whole // per_host, (layout, kind)
            assert hier.eager_cap(kind, flat, layout, "gloo") == whole  # no fused there
        assert hier.eager_cap("all_to_all", flat, layout) == a2a // per_host, layout
        assert hier.eager_cap("all_to_all", flat, layout, "gloo") == a2a
        # the other collectives' rows are not shared: their caps stay whole
        assert hier.eager_cap("reduce", flat, layout) == whole
        assert hier.eager_cap("gather", flat, layout) == whole
        assert hier.eager_cap("broadcast", flat, layout) == hier.EAGER_BROADCAST_BYTES[flat]
    # one rank a host, hosts of unequal size (fused cannot run): the whole cap
    for layout in (hier.Layout(((0,), (1,), (2,)), 0), hier.Layout(((0, 1, 2), (3,)), 0)):
        assert hier.eager_cap("all_reduce", flat, layout) == whole, layout
    # fused all_to_all runs on hosts of unequal size: the largest host shares the cap
    assert hier.eager_cap("all_to_all", flat, hier.Layout(((0,), (1,), (2,)), 0)) == a2a
    assert hier.eager_cap("all_to_all", flat, hier.Layout(((0, 1, 2), (3,)), 3)) == a2a // 3
    assert hier.eager_cap("all_to_all", flat,
                          hier.Layout(tuple((q,) for q in range(9)), 0)) == a2a  # leaders
    assert hier.eager_cap("all_reduce", "leaders", hier.Layout(((0, 1), (2, 3)), 0)) == (
        hier.EAGER_BYTES["leaders"])
    assert hier.eager_cap("all_reduce", flat) == whole


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_agreement_steps_bring_every_row_to_every_rank(shape):
    """Run every rank's program phase by phase: a rank sends only rows it holds, every
    pair's sends and receives list the same messages of the same rows in the same order
    (MPI matches them in order), a rank sends each peer at most one message a phase,
    and at the end every rank holds every row, each in its own place."""
    n = _size(shape)
    hosts = tuple(tuple(h) for h in shape)
    programs = [hier.agreement_steps(hier.Layout(hosts, me)) for me in range(n)]
    even = len({len(h) for h in shape}) == 1 and len(shape[0]) > 1
    assert {len(p) for p in programs} == {2 if even else 1}
    held = [{me: me} for me in range(n)]  # place -> whose row is there
    for phase in range(max(len(p) for p in programs)):
        sent: dict[tuple[int, int], list[tuple[int, ...]]] = {}
        expected: dict[tuple[int, int], list[tuple[int, ...]]] = {}
        for me, program in enumerate(programs):
            for kind, peer, rows in program[phase] if phase < len(program) else ():
                if kind == 1:
                    assert all(held[me].get(row) == row for row in rows), (me, rows)
                    sent.setdefault((me, peer), []).append(rows)
                else:
                    expected.setdefault((peer, me), []).append(rows)
        assert sorted(sent) == sorted(expected)
        assert all(len(messages) == 1 for messages in sent.values())
        for (src, dst), messages in sent.items():
            assert [len(m) for m in messages] == [len(m) for m in expected[(src, dst)]]
            for rows, places in zip(messages, expected[(src, dst)]):
                for row, place in zip(rows, places):
                    held[dst][place] = row  # what arrives lands where the receiver put it
    assert all(h == {g: g for g in range(n)} for h in held)


def _fused(kind, ctx, w, cell, n):
    """One fused call of ``kind`` on ``w`` (reduce_scatter: into a fresh output of w.size
    // n elements; all_to_all: of w.size): (finished, the array the call writes)."""
    if kind == "all_reduce":
        return hier.all_reduce_fused(ctx, w, ReduceOp.SUM, cell), w
    if kind == "all_to_all":
        out = np.full(w.size, -1, w.dtype)
        return hier.all_to_all_fused(ctx, out, w, cell), out
    out = np.full(w.size // n, -1, w.dtype)
    return hier.reduce_scatter_fused(ctx, out, w, [w.size // n] * n, ReduceOp.SUM, cell), out


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_fused_all_to_all_matches_the_oracle_in_place_too(shape):
    """The fused all_to_all (flat: any hosts' shape) on pieces of several chunks and of
    none, into another array and in place, twice on a kept plan."""
    n = _size(shape)
    for count in (0, 3 * n, (hier.FUSED_CHUNK // 4 + 3) * n):
        inputs = [ref.rank_input(g, count, "float32") for g in range(n)]
        want = ref.all_to_all(inputs)
        kept = [hier.fused_plans() for _ in range(n)]  # a rank's own, as its group's

        def body(ctx, g, inputs=inputs, kept=kept):
            plans = kept[g]
            out = np.full(inputs[g].size, -1, np.float32)
            first = hier.all_to_all_fused(ctx, out, inputs[g], b"cell", plans)
            again = inputs[g].copy()
            second = hier.all_to_all_fused(ctx, again, again, b"cell", plans)
            return first and second, out, again

        for g, (done, out, again) in enumerate(simulate(shape, body)):
            assert done, g
            np.testing.assert_array_equal(out, want[g])
            np.testing.assert_array_equal(again, want[g])


@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter", "all_to_all"])
@pytest.mark.parametrize("shape", [s for s in SHAPES if len({len(h) for h in s}) == 1],
                         ids=[i for s, i in zip(SHAPES, IDS) if len({len(h) for h in s}) == 1])
def test_fused_call_refuses_together_when_one_cell_differs(shape, kind):
    """A rank whose call differs (its cell) makes every rank refuse the fused call, with
    nothing written: inside its host through the cells, on the other hosts through the
    marked cell its host's rails send, or the differing cell itself."""
    n = _size(shape)
    inputs = [ref.rank_input(r, 300 * n, "float32") for r in range(n)]
    for odd in range(n):
        def body(ctx, g, odd=odd):
            cell = (b"this call" if g != odd else b"another call").ljust(24, b".")
            done, wrote = _fused(kind, ctx, inputs[g].copy(), cell, n)
            return done, wrote

        for g, (done, wrote) in enumerate(simulate(shape, body)):
            assert done is False, f"rank {g} finished though rank {odd}'s call differs"
            if kind == "all_reduce":
                np.testing.assert_array_equal(wrote, inputs[g], err_msg=f"rank {g} wrote")
            else:  # (all_to_all: its output, which it writes only once all cells agree)
                assert (wrote == -1).all(), f"rank {g} wrote its output"
    # and the same cells everywhere finish the call
    done = simulate(shape, lambda ctx, g: _fused(kind, ctx, inputs[g].copy(), b"this call",
                                                  n)[0])
    assert all(done), done


@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter", "all_to_all"])
def test_a_traced_fused_call_notes_its_steps(kind):
    """Under MESHCAST_TRACE a fused call's context carries step notes: each step (here the
    Python waits, as without the compiled helper) becomes a round named by what it does,
    with the global ranks it exchanges with, in order, timed, ending where the next begins."""
    shape, n = [[0, 1], [2, 3]], 4
    ranks = [10, 11, 12, 13]  # global ranks apart from group ranks: the notes map them
    inputs = [ref.rank_input(g, 300 * n, "float32") for g in range(n)]

    def body(ctx, g):
        ctx.notes = StepNotes([], ranks, g)
        done, _ = _fused(kind, ctx, inputs[g].copy(), b"cell", n)
        return done, ctx.notes.rounds

    for g, (done, rounds) in enumerate(simulate(shape, body)):
        mate, rail = ranks[g ^ 1], ranks[g ^ 2]
        want = {"all_reduce": [("fused.local_reduce_scatter", [mate]),
                               ("fused.rail_all_reduce", [rail]),
                               ("fused.local_all_gather", [mate])],
                "reduce_scatter": [("fused.local_reduce_scatter", [mate]),
                                   ("fused.rail_reduce_scatter", [rail])],
                "all_to_all": [("fused.all_to_all", [r for r in ranks if r != ranks[g]])]}
        assert done, g
        assert [(r["step"], r["peers"]) for r in rounds] == want[kind], (g, rounds)
        assert [r["round"] for r in rounds] == list(range(len(rounds)))
        for r, after in zip(rounds, rounds[1:] + [None]):
            assert r["bytes"] > 0 and r["wait_ns"] == r["end"] - r["begin"] >= 0, r
            assert after is None or r["end"] <= after["begin"], (r, after)


def test_fused_all_reduce_over_more_windows_than_plans_keeps_its_plans(monkeypatch):
    """A benchmark's windows over one buffer (more arrays in turn than plans kept): every
    call's result is right, and each rank makes a few plans, not one every other call
    (each made plan costs persistent requests; the cache once freed them all whenever
    it grew past FUSED_PLANS)."""
    shape = [[0, 1], [2, 3]]
    n, count, windows = 4, 40, 2 * hier.FUSED_PLANS
    made = []
    real_init = hier._FusedPlan.__init__

    def counting_init(self, *args, **kwargs):
        made.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(hier._FusedPlan, "__init__", counting_init)
    inputs = [ref.rank_input(g, count, "float32") for g in range(n)]
    want = ref.reduced(inputs, ReduceOp.SUM)

    def body(ctx, g):
        plans = hier.fused_plans()
        buffer = np.empty((windows, count), np.float32)
        wrong = []
        for call in range(3 * windows):
            w = buffer[call % windows]
            w[:] = inputs[g]
            if not hier.all_reduce_fused(ctx, w, ReduceOp.SUM, b"cell", plans):
                wrong.append((call, "refused"))
            elif not np.array_equal(w, want):
                wrong.append((call, "wrong"))
        return wrong, len(plans)

    for g, (wrong, kept) in enumerate(simulate(shape, body)):
        assert not wrong, f"rank {g}: {wrong}"
        assert kept <= hier.FUSED_PLANS, f"rank {g} keeps {kept} plans"
    # one plan of the size, and one per window seen again while there was room
    assert len(made) <= n * hier.FUSED_PLANS, f"{len(made)} plans made for {3 * windows} calls"


class _Plan:
    def __init__(self) -> None:
        self.freed = False

    def free(self) -> None:
        self.freed = True


def test_fused_plans_free_the_least_recent_one_and_back_off_from_temporaries():
    """Past the cap only the least recently used plan is freed; an address plan pushed
    out unused since it was made stops address plans for a while."""
    plans = hier.fused_plans()
    kept = [_Plan() for _ in range(hier.FUSED_PLANS)]
    for i, plan in enumerate(kept):
        plans.address(1000 + i)
        plans.keep(("size", i), plan)
    assert plans.get(("size", 0)) is kept[0]  # now the most recent
    plans.keep(("size", "new"), _Plan())
    assert [p.freed for p in kept] == [False, True] + [False] * (hier.FUSED_PLANS - 2)
    assert len(plans) == hier.FUSED_PLANS

    # an address seen once gets no plan of its own; seen again, with room, it does
    plans = hier.fused_plans()
    assert plans.address(1) is False
    assert plans.address(1) is True
    # temporaries: each address plan holds its array, so the next one lives elsewhere and
    # none is used again; once one is pushed out unused, address plans stop for a while
    for i in range(hier.FUSED_PLANS):
        plans.keep(("at", 100 + i), _Plan())
    for _ in range(2 * hier.FUSED_PLANS + 1):
        plans.address(5)
    assert plans.address(7) is False and plans.address(7) is True  # the oldest is idle
    plans.keep(("at", 7), _Plan())  # pushes out an address plan never used again
    for _ in range(2 * hier.FUSED_PLANS + 1):
        plans.address(5)
    assert plans.address(8) is False and plans.address(8) is False, "no backing off"
