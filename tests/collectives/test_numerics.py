"""Numerics of reductions on real processes: what fp16/bf16 accumulate in, and what
integer AVG means, against expectations computed independently of meshcast."""

from __future__ import annotations

import pytest

from meshcast.testing.world import spawn_world

from . import numeric_bodies as bodies

pytestmark = pytest.mark.timeout(120)


def test_torch_bfloat16_reductions_accumulate_in_float32_and_round_once():
    pytest.importorskip("torch")
    spawn_world(bodies.torch_bfloat16_reductions, 3, timeout=90)


def test_float16_sums_over_many_ranks_accumulate_in_float32():
    # 5 ranks: 2048 plus four small values, which a float16 accumulator would drop.
    spawn_world(bodies.float16_sums, 5, timeout=90)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("compiled", ["1", "0"])
def test_half_sums_fold_the_data_itself_on_one_shot_and_single_copy(dtype, compiled):
    # 3 ranks: 192 elements (one-shot) and 1.2 M (2.4 MB: single-copy); the compiled
    # kernels and, without them, Python's executor fold the half data in float32 and
    # round once, with no working copy
    if dtype == "bfloat16":
        pytest.importorskip("torch")
    out = spawn_world(bodies.halves_without_working_copies, 3, timeout=90,
                      counts=[bodies.SMALL * 3, 1_200_000], dtype=dtype,
                      env={"MESHCAST_COMPILED": compiled})
    assert out == [[0, 0]] * 3, out


@pytest.mark.parametrize("n", [2, 3])
def test_integer_average_truncates_toward_zero(n):
    spawn_world(bodies.integer_average, n, timeout=90)
