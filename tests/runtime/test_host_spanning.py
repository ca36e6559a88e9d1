"""Worlds whose ranks pose as several hosts (``MESHCAST_HOST_ID``): shared memory inside
each, Gloo over loopback between them. Every primitive against the NumPy oracle at
2 hosts x 2 ranks, 3 hosts x 1 and 3 + 1; the real emulated hosts are tests/multihost."""

from __future__ import annotations

import pytest

from meshcast.algorithms import hierarchical as hier
from meshcast.testing.world import spawn_world

from . import spanning_bodies as bodies

pytestmark = pytest.mark.timeout(300)

SHAPES = {"2x2": [0, 0, 1, 1], "3x1": [0, 1, 2], "3+1": [0, 0, 1, 0]}


@pytest.mark.parametrize("shape", SHAPES)
def test_every_primitive_across_hosts(shape):
    out = spawn_world(bodies.every_primitive, len(SHAPES[shape]), hosts=SHAPES[shape],
                      timeout=240)
    assert all(o == out[0] for o in out), out
    ran = out[0]
    assert set(ran) == {"all_reduce", "reduce", "reduce_scatter", "broadcast", "all_gather",
                        "gather", "scatter", "all_to_all"}, ran
    # small calls ride in the agreement; the larger ones run what the measured table says
    # for Gloo (these worlds run Gloo between their simulated hosts)
    assert "all_reduce/eager" in ran["all_reduce"], ran
    hosts = SHAPES[shape]
    layout = hier.Layout(tuple(tuple(r for r, h in enumerate(hosts) if h == i)
                               for i in sorted(set(hosts))), 0)
    largest = bodies.COUNTS[-1] * 4  # float32
    assert f"all_reduce/{hier.choose('all_reduce', layout, largest, None, 'gloo')}" in ran[
        "all_reduce"], ran
    if shape == "2x2":  # large all_gathers on even hosts take the rails
        assert "all_gather/rails" in ran["all_gather"], ran


def test_every_family_when_forced():
    out = spawn_world(bodies.every_primitive, 4, hosts=SHAPES["2x2"], timeout=240,
                      families=("leader", "rails", "flat"))
    assert {"all_reduce/leader", "all_reduce/rails", "all_reduce/flat"} <= set(
        out[0]["all_reduce"]), out[0]


@pytest.mark.parametrize("shape", ["2x2", "3x1"])
def test_dtypes_gloo_cannot_reduce_are_combined_by_meshcast(shape):
    spawn_world(bodies.reductions_the_engine_lacks, len(SHAPES[shape]), hosts=SHAPES[shape],
                timeout=200)


@pytest.mark.parametrize("shape, algo", [("2x2", ""), ("3+1", ""), ("2x2", "*:flat")],
                         ids=["2x2", "3+1", "2x2-flat"])
def test_uneven_pieces_and_array_shapes(shape, algo):
    # '*:flat': every call on Gloo's own collectives, whose gather and scatter want even
    # pieces (padded), none riding in the agreement
    spawn_world(bodies.uneven_and_shapes, len(SHAPES[shape]), hosts=SHAPES[shape], timeout=120,
                env={"MESHCAST_ALGO": algo})


@pytest.mark.parametrize("case,shape", [
    ("rounds", "2x2"), ("rounds", "3+1"), ("other size", "2x2"), ("one rank's splits", "2x2")])
def test_all_to_all_splits_are_checked_in_a_round_only_when_uneven(case, shape):
    out = spawn_world(bodies.all_to_all_split_checks, len(SHAPES[shape]), hosts=SHAPES[shape],
                      timeout=120, case=case)
    assert all(o == out[0] for o in out), out
    if case == "rounds":
        assert out[0] == {"even": 0, "uneven": 1}, out[0]
    else:
        assert "which expects" in out[0], out[0]


@pytest.mark.parametrize("shape", ["2x2", "3x1"])
def test_point_to_point_objects_subgroups_async(shape):
    spawn_world(bodies.p2p_objects_groups_async, len(SHAPES[shape]), hosts=SHAPES[shape],
                timeout=120)


@pytest.mark.parametrize("different_kinds,odd_count,shape", [
    (False, 5, "2x2"), (True, 5, "2x2"), (False, 5000, "2x2"), (False, 5000, "3+1")])
def test_mismatch_across_hosts_is_the_same_error_on_every_rank(different_kinds, odd_count,
                                                               shape):
    out = spawn_world(bodies.mismatch_is_the_same_error_everywhere, 4, hosts=SHAPES[shape],
                      timeout=120, different_kinds=different_kinds, odd_count=odd_count)
    assert len(set(out)) == 1, out
    if different_kinds:
        assert "broadcast" in out[0] and "all_reduce" in out[0], out[0]
    else:
        assert "count=4" in out[0] and f"count={odd_count}" in out[0], out[0]


@pytest.mark.parametrize("shape", ["2x2", "3+1"])
def test_tiny_calls_take_the_lane_beside_the_general_path(shape):
    out = spawn_world(bodies.lane_beside_general_path, len(SHAPES[shape]), hosts=SHAPES[shape],
                      timeout=120)
    assert out == ["barrier/agreement"] * len(SHAPES[shape]), out
