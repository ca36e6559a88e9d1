"""The front door's checks that share one rule with the layer below (_api vs _select, lanes).

In-process: these checks run before anything is sent, so they need no world.
"""

from __future__ import annotations

import pytest

from meshcast import _api, lanes
from meshcast.algorithms import _registry
from meshcast.algorithms import _select as sel
from meshcast.errors import InvalidUsage


@pytest.mark.parametrize("spelling", ["ring", "all_reduce/ring", " all_reduce/ring "])
def test_algorithm_accepts_what_select_accepts_and_returns_the_bare_name(spelling):
    # the bare name reaches the group, so both spellings give one fingerprint path byte
    assert _api._check_algorithm(spelling, "all_reduce", "all_reduce", object()) == "ring"
    assert sel.algorithm_name("all_reduce", spelling) == "ring"


def test_every_registered_algorithm_passes_in_both_spellings():
    for entry in _registry.entries():
        for spelling in (entry.name, entry.qualname):
            assert _api._check_algorithm(spelling, entry.coll, "caller", object()) == entry.name


def test_no_algorithm_means_the_group_decides():
    assert _api._check_algorithm(None, "all_reduce", "all_reduce", object()) is None


@pytest.mark.parametrize("bad", ["teleport", "all_gather/teleport"])
def test_an_unknown_name_names_the_argument_the_collective_and_the_algorithms(bad):
    with pytest.raises(InvalidUsage) as info:
        _api._check_algorithm(bad, "all_gather", "all_gather_into_tensor", object())
    msg = str(info.value)
    assert msg.startswith("all_gather_into_tensor: 'algorithm'=")
    assert "unknown algorithm 'teleport' of all_gather" in msg
    assert "valid: " + ", ".join(_registry.names("all_gather")) in msg


def test_another_collectives_algorithm_is_refused_with_this_ones_list():
    with pytest.raises(InvalidUsage) as info:
        _api._check_algorithm("broadcast/tree", "all_reduce", "all_reduce", object())
    msg = str(info.value)
    assert "'algorithm'='broadcast/tree' belongs to 'broadcast', not 'all_reduce'" in msg
    assert ", ".join(_registry.names("all_reduce")) in msg


def test_a_non_string_algorithm_is_refused():
    with pytest.raises(InvalidUsage, match="'algorithm' must be a str, got int"):
        _api._check_algorithm(3, "all_reduce", "all_reduce", object())


def test_front_door_and_p2p_lane_share_one_tag_range():
    assert _api.TAGS is lanes.TAGS
    lo, hi = lanes.TAGS
    assert _api._tag(lo, "send") == lo and _api._tag(hi - 1, "send") == hi - 1
    for bad in (lo - 1, hi):
        with pytest.raises(InvalidUsage, match=r"'tag' must be an int in \["):
            _api._tag(bad, "send")


def test_a_group_across_hosts_takes_its_families_in_both_spellings():
    from meshcast.algorithms.hierarchical import FAMILIES
    from meshcast.spanning import HostSpanningGroup

    pg = HostSpanningGroup.__new__(HostSpanningGroup)  # algorithm_names reads no state
    for family in FAMILIES:
        assert _api._check_algorithm(f"all_reduce/{family}", "all_reduce", "all_reduce",
                                     pg) == family
    with pytest.raises(InvalidUsage, match="unknown algorithm 'ring' of all_reduce; valid: "
                                           + ", ".join(FAMILIES)):
        _api._check_algorithm("ring", "all_reduce", "all_reduce", pg)
    # a family whose code a collective does not have: refused before anything is sent
    with pytest.raises(InvalidUsage, match="unknown algorithm 'rails' of reduce; valid: leader, "
                                           "flat$"):
        _api._check_algorithm("rails", "reduce", "reduce", pg)
    with pytest.raises(InvalidUsage, match="'leader' of all_to_all; valid: flat, fused"):
        _api._check_algorithm("leader", "all_to_all", "all_to_all", pg)


def test_a_star_forces_a_cross_host_family_only_where_the_collective_has_it():
    from meshcast.spanning import _forced_families

    assert _forced_families("*:rails;reduce_scatter:flat;broadcast:tree") == {
        "broadcast": "rails", "all_reduce": "rails", "all_gather": "rails",
        "reduce_scatter": "flat"}
    assert _forced_families("*:leader") == {k: "leader" for k in (
        "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter", "reduce_scatter")}
    assert _forced_families("reduce:rails") == {"reduce": "rails"}  # named: refused at the call
