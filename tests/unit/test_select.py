"""algorithms._select: explicit > MESHCAST_ALGO > decision table, and the registry it reads."""

from __future__ import annotations

import numpy as np
import pytest

from meshcast.algorithms import _registry as registry
from meshcast.algorithms import _select as sel
from meshcast.algorithms._simulate import make_plans
from meshcast.errors import InvalidUsage


def plan(
    coll="all_reduce",
    size=4,
    count=10,
    *,
    rank=0,
    slot_bytes=0,
    counts=None,
    send=None,
    dtype=np.float32,
):
    if coll not in ("gather", "all_gather", "scatter", "reduce_scatter"):
        counts = None
    data = [np.zeros(count if counts is None else counts[r], dtype) for r in range(size)]
    if coll in ("scatter", "reduce_scatter"):
        data = [np.zeros(sum(counts) if counts else count * size, dtype) for _ in range(size)]
    if coll == "all_to_all":
        data = [np.zeros(sum(send[r]) if send else count * size, dtype) for r in range(size)]
    op = "sum" if coll in ("reduce", "all_reduce", "reduce_scatter") else None
    return make_plans(
        coll,
        size,
        data,
        dtype=dtype,
        op=op,
        root=0,
        counts=counts,
        send_counts=send,
        slot_bytes=slot_bytes,
    )[rank]


# ------------------------------------------------------------------ explicit


def test_explicit_wins_over_tune_and_table():
    p = plan()
    assert sel.select(p, "direct", "all_reduce:ring").qualname == "all_reduce/direct"
    assert sel.select(p, "all_reduce/tree", "").qualname == "all_reduce/tree"


def test_explicit_unknown_name_lists_the_valid_ones():
    with pytest.raises(InvalidUsage) as info:
        sel.select(plan(), "bruck", "")
    msg = str(info.value)
    assert msg.startswith("all_reduce: 'algorithm'='bruck': unknown algorithm 'bruck' of "
                          "all_reduce; valid: ring, recursive_doubling")
    assert "arena" in msg and msg.endswith("(rank 0)")
    with pytest.raises(InvalidUsage, match="belongs to 'broadcast'"):
        sel.select(plan(), "broadcast/tree", "")


def test_explicit_unsupported_says_why():
    with pytest.raises(
        InvalidUsage,
        match=r"'all_reduce/arena' cannot run this call: it needs a shared-memory arena",
    ):
        sel.select(plan(), "arena", "")
    with pytest.raises(
        InvalidUsage,
        match=r"'all_reduce/arena' cannot run this call: it requires a slot of at least 4",
    ):
        sel.select(plan(slot_bytes=8), "arena", "")
    uneven = plan("all_to_all", 3, send=[[1, 2, 1], [1, 1, 1], [0, 1, 1]], rank=0)
    with pytest.raises(InvalidUsage, match="requires equal split counts"):
        sel.select(uneven, "bruck", "")


# ---------------------------------------------------------------------- tune


def test_tune_grammar():
    table = sel.parse_tune(
        " ring ; all_reduce:recursive_doubling@0-64K, ring@64K-inf ;broadcast:tree;"
    )
    assert table["*"] == (sel.Choice("ring"),)
    assert table["all_reduce"] == (
        sel.Choice("recursive_doubling", 0, 65536),
        sel.Choice("ring", 65536, float("inf")),
    )
    assert table["broadcast"] == (sel.Choice("tree"),)
    assert sel.parse_tune("") == {}
    assert sel.parse_tune("gather:tree@1M-2G")["gather"][0] == sel.Choice("tree", 1 << 20, 2 << 30)


def test_tune_leaves_the_cross_host_families_to_groups_spanning_hosts():
    """README's ``MESHCAST_ALGO=all_reduce:flat`` forces a family across hosts; the
    host-local groups inside such a group (and groups on one host) parse the same string
    and must neither refuse it nor skip their fast paths for it."""
    assert sel.parse_tune("all_reduce:flat;*:leader;broadcast:tree") == {
        "broadcast": (sel.Choice("tree"),)}
    assert sel.tuned_collectives("all_reduce:fused;reduce_scatter:rails") == frozenset()


@pytest.mark.parametrize(
    "tune, message",
    [
        ("all_reduce:nope", "unknown algorithm all_reduce/nope.*valid: ring"),
        ("allreduce:ring", "unknown collective 'allreduce'"),
        ("all_reduce:ring@9-2", "empty range"),
        ("all_reduce:ring@9", "must look like lo-hi"),
        ("all_reduce:ring@x-2", "'x' is not a byte size"),
        ("all_reduce:ring,", "empty algorithm name"),
        ("nothing", "no collective has an algorithm 'nothing'"),
        ("all_to_all:direct@0-1K", "all_to_all split sizes differ"),
        ("all_reduce:flat@1M-2M", "cross-host family 'flat' takes no byte range"),
    ],
)
def test_tune_errors(tune, message):
    with pytest.raises(InvalidUsage, match=message):
        sel.parse_tune(tune)
    assert str(pytest.raises(InvalidUsage, sel.parse_tune, tune).value).startswith(
        "MESHCAST_ALGO: "
    )


def test_tune_ranges_pick_by_message_bytes():
    tune = "all_reduce:direct@0-64,ring@64-inf"
    assert sel.select(plan(count=15), None, tune).name == "direct"  # 60 bytes
    assert sel.select(plan(count=16), None, tune).name == "ring"  # 64 bytes


def test_tune_qualified_entries_beat_unqualified_ones():
    assert sel.select(plan(), None, "tree;all_reduce:direct").name == "direct"
    assert sel.select(plan(), None, "tree").name == "tree"
    # unqualified names apply only where they exist
    assert sel.select(plan("all_to_all"), None, "tree") == sel.decide(plan("all_to_all"))


def test_tune_falls_back_to_the_table_when_it_does_not_fit():
    p = plan("all_to_all", 3, send=[[1, 2, 1], [1, 1, 1], [0, 1, 1]])
    assert sel.select(p, None, "all_to_all:bruck") == sel.decide(p)
    assert sel.select(plan(count=100), None, "all_reduce:direct@0-64") == sel.decide(
        plan(count=100)
    )
    assert sel.select(plan(), None, "all_reduce:arena").family == "p2p"  # no arena here


# --------------------------------------------------------------------- table


def test_table_names_registered_algorithms():
    for coll, rules in sel.TABLE.items():
        assert coll in registry.COLLECTIVES
        for rule in rules:
            registry.get(coll, rule.name)
    assert set(sel.TABLE) == set(registry.COLLECTIVES)


def test_table_prefers_the_arena_when_ranks_share_memory():
    for coll in registry.COLLECTIVES:
        assert sel.select(plan(coll, counts=[2, 2, 2, 2]), None, "").family == "p2p", coll
        assert (
            sel.select(plan(coll, slot_bytes=1 << 20, counts=[2, 2, 2, 2]), None, "").name
            == "arena"
        ), coll


def test_table_falls_back_to_p2p_when_the_slot_is_too_small():
    assert sel.select(plan(slot_bytes=8), None, "").family == "p2p"
    assert sel.select(plan("scatter", 17, counts=[1] * 17, slot_bytes=64), None, "").family == "p2p"


def test_table_picks_by_size_and_bytes():
    assert sel.select(plan(size=2, count=1 << 20), None, "").name == "recursive_doubling"
    assert sel.select(plan(size=8, count=16), None, "").name == "recursive_doubling"
    assert sel.select(plan(size=8, count=1 << 20), None, "").name == "ring"
    assert sel.select(plan("broadcast", size=8, count=1 << 20), None, "").name == "ring"
    assert sel.select(plan("broadcast", size=8, count=16), None, "").name == "tree"
    assert sel.select(plan("all_to_all", size=16, count=1), None, "").name == "pairwise"
    assert sel.select(plan("barrier"), None, "").name == "dissemination"


def test_bruck_is_never_a_default():
    for size in (2, 3, 4, 16, 64):
        for count in (1, 1000):
            assert sel.select(plan("all_to_all", size, count), None, "").name != "bruck"


def test_selection_is_the_same_on_every_rank():
    rng = np.random.default_rng(3)
    for coll in registry.COLLECTIVES:
        for size in (1, 2, 3, 5, 9):
            counts = [int(c) for c in rng.integers(0, 9000, size)]
            send = [[int(c) for c in rng.integers(0, 3000, size)] for _ in range(size)]
            for slot in (0, 64, 1 << 20):
                for tune in ("", "all_reduce:direct@0-4K,ring@4K-inf;gather:tree@0-8K"):
                    chosen = {
                        sel.select(
                            plan(
                                coll, size, 700, rank=r, slot_bytes=slot, counts=counts, send=send
                            ),
                            None,
                            tune,
                        ).qualname
                        for r in range(size)
                    }
                    assert len(chosen) == 1, (coll, size, slot, chosen)


def test_message_bytes():
    assert sel.message_bytes(plan(count=10)) == 40
    assert sel.message_bytes(plan("gather", 3, counts=[1, 2, 3], rank=1)) == 24
    assert sel.message_bytes(plan("reduce", 3, count=5, rank=2)) == 20
    assert sel.message_bytes(plan("barrier")) == 0
    assert sel.message_bytes(plan("all_to_all")) is None


# ------------------------------------------------------------------ registry


def test_registry_lookups_and_listing():
    assert registry.get("all_reduce", "ring").qualname == "all_reduce/ring"
    with pytest.raises(KeyError, match="valid: .*ring"):
        registry.get("all_reduce", "nope")
    with pytest.raises(KeyError, match="unknown collective"):
        registry.get("allreduce", "ring")
    assert registry.names("barrier", family="arena") == ["arena"]
    assert "dissemination" in registry.names("barrier", family="p2p")
    text = registry.listing()
    assert "all_reduce/ring" in text and "a commutative op" in text
    assert len(text.splitlines()) == 1 + len(registry.entries())


def test_register_rejects_duplicates_and_unknown_families():
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("barrier", "tree", description="x")(lambda plan: iter(()))
    with pytest.raises(ValueError, match="unknown family"):
        registry.register("barrier", "x", description="x", family="mpi")
    with pytest.raises(ValueError, match="unknown collective"):
        registry.register("allreduce", "x", description="x")


def test_a_rooted_root_in_place_splits_from_its_threshold():
    # (below, the root in place copies nothing; from it, part of every other piece)
    edge = sel.ROOTED_SPLIT_MIN_BYTES
    assert not sel.rooted_split(edge - 1)
    assert sel.rooted_split(edge)
    # (so that both sides can run single-copy: past one-shot, with small regions)
    assert sel.SINGLE_COPY_MIN_BYTES < edge
