"""meshcast.topology: every function checked exhaustively for group sizes 1..64."""

from __future__ import annotations

import math

import pytest

from meshcast import topology as t

SIZES = range(1, 65)


def test_integer_helpers():
    for n in range(1, 300):
        assert t.ceil_log2(n) == math.ceil(math.log2(n))
        assert t.is_pow2(n) == (2 ** int(math.log2(n)) == n)
        assert t.pow2_floor(n) == 2 ** int(math.log2(n))
        assert t.lowbit(n) == n & -n and n % t.lowbit(n) == 0 and (n // t.lowbit(n)) % 2 == 1
        for b in range(1, 9):
            assert t.ceil_div(n, b) == math.ceil(n / b)
    assert t.ceil_log2(0) == 0 and not t.is_pow2(0)
    with pytest.raises(ValueError):
        t.pow2_floor(0)


def test_chunks_and_intersect():
    for n in range(0, 40):
        for c in range(1, 9):
            parts = t.chunks(n, c)
            assert sum(length for _, length in parts) == n
            assert all(0 < length <= c for _, length in parts)
            assert [s for s, _ in parts] == list(range(0, n, c))
    with pytest.raises(ValueError):
        t.chunks(3, 0)
    assert t.intersect(0, 5, 3, 9) == (3, 5)
    assert t.intersect(0, 5, 7, 9) == (7, 7)
    assert t.intersect(4, 4, 0, 9) == (4, 4)


@pytest.mark.parametrize("size", SIZES)
def test_ring_neighbours_form_one_cycle(size):
    seen, r = [], 0
    for _ in range(size):
        left, right = t.ring_neighbours(r, size)
        assert t.ring_neighbours(right, size)[0] == r
        assert t.ring_neighbours(left, size)[1] == r
        seen.append(r)
        r = right
    assert sorted(seen) == list(range(size)) and r == 0


@pytest.mark.parametrize("size", SIZES)
def test_relative_and_absolute_are_inverse(size):
    for root in range(size):
        assert t.relative(root, root, size) == 0
        assert sorted(t.relative(r, root, size) for r in range(size)) == list(range(size))
        for r in range(size):
            assert t.absolute(t.relative(r, root, size), root, size) == r


def test_wrap_split():
    assert t.wrap_split(3, 6, 5) == [(3, 5), (0, 1)]
    assert t.wrap_split(1, 4, 5) == [(1, 4)]
    assert t.wrap_split(2, 5, 5) == [(2, 5)]
    for size in range(1, 12):
        for lo in range(size):
            for n in range(size + 1):
                runs = t.wrap_split(lo, lo + n, size)
                covered = [x for a, b in runs for x in range(a, b)]
                assert covered == [(lo + i) % size for i in range(n)]


@pytest.mark.parametrize("size", SIZES)
def test_binomial_tree(size):
    levels = t.ceil_log2(size)
    # parent/children agree, every non-root has one parent, the root has none
    for v in range(size):
        for c in t.binomial_children(v, size):
            assert t.binomial_parent(c) == v
    assert sorted(c for v in range(size) for c in t.binomial_children(v, size)) == list(
        range(1, size)
    )
    with pytest.raises(ValueError):
        t.binomial_parent(0)
    # subtrees: contiguous, the union of v and its children's subtrees
    for v in range(size):
        lo, hi = t.binomial_subtree(v, size)
        assert lo == v and v < hi <= size
        parts = [(v, v + 1)] + [
            t.binomial_subtree(c, size) for c in reversed(t.binomial_children(v, size))
        ]
        assert [x for a, b in parts for x in range(a, b)] == list(range(lo, hi))
    assert t.binomial_subtree(0, size) == (0, size)
    # children come farthest first
    for v in range(size):
        children = t.binomial_children(v, size)
        assert children == sorted(children, reverse=True)
    # down rounds: each edge once, a sender already holds the data
    holds = {0: -1}
    for k in range(levels):
        for parent, child in t.binomial_down_edges(k, size):
            assert parent in holds and holds[parent] < k
            assert child not in holds and t.binomial_parent(child) == parent
            assert t.binomial_down_round(child, size) == k
            holds[child] = k
    assert sorted(holds) == list(range(size))


@pytest.mark.parametrize("size", SIZES)
def test_fold_and_unfold(size):
    pof2 = t.pow2_floor(size)
    folds = [t.fold(r, size) for r in range(size)]
    active = [r for r in range(size) if folds[r].active]
    assert len(active) == pof2
    assert sorted(folds[r].newrank for r in active) == list(range(pof2))
    for r, f in enumerate(folds):
        assert f.pof2 == pof2 and f.rem == size - pof2
        if f.partner >= 0:
            assert folds[f.partner].partner == r
            assert folds[f.partner].active != f.active
        if f.active:
            assert t.unfold_rank(f.newrank, size) == r
    # new-rank ranges map to contiguous absolute ranges that tile [0, size)
    ends = [t.unfold_range(i, i + 1, size) for i in range(pof2)]
    assert ends[0][0] == 0 and ends[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(ends, ends[1:]))
    for i in range(pof2):
        a, b = ends[i]
        assert t.unfold_rank(i, size) in range(a, b)
        for j in range(i, pof2 + 1):
            assert t.unfold_range(i, j, size) == (a, ends[j - 1][1] if j > i else a)


@pytest.mark.parametrize("pof2", [1, 2, 4, 8, 16, 32, 64])
def test_recursive_doubling_gathers_everything(pof2):
    have = [{i} for i in range(pof2)]
    for k in range(t.ceil_log2(pof2)):
        for i in range(pof2):
            assert set(range(*t.doubling_block(i, k))) == have[i]
        new = [have[i] | have[t.doubling_partners(i, pof2)[k]] for i in range(pof2)]
        have = new
    assert all(h == set(range(pof2)) for h in have)
    for i in range(pof2):
        for k, partner in enumerate(t.doubling_partners(i, pof2)):
            assert t.doubling_partners(partner, pof2)[k] == i


@pytest.mark.parametrize("pof2", [1, 2, 4, 8, 16, 32, 64])
def test_recursive_halving_steps(pof2):
    steps = {i: t.halving_steps(i, pof2) for i in range(pof2)}
    for i, mine in steps.items():
        assert len(mine) == t.ceil_log2(pof2)
        lo, hi = 0, pof2
        for k, step in enumerate(mine):
            theirs = steps[step.partner][k]
            assert theirs.partner == i
            assert (theirs.keep_lo, theirs.keep_hi) == (step.send_lo, step.send_hi)
            assert (theirs.send_lo, theirs.send_hi) == (step.keep_lo, step.keep_hi)
            assert {step.keep_lo, step.send_lo} == {lo, lo + (hi - lo) // 2}
            assert step.keep_lo <= i < step.keep_hi
            lo, hi = step.keep_lo, step.keep_hi
        assert (lo, hi) == (i, i + 1)


@pytest.mark.parametrize("size", SIZES)
def test_dissemination_reaches_everyone(size):
    heard = [{r} for r in range(size)]
    rounds = t.ceil_log2(size)
    peers = [t.dissemination_peers(r, size) for r in range(size)]
    for k in range(rounds):
        new = [set(h) for h in heard]
        for r in range(size):
            to, frm = peers[r][k]
            assert peers[to][k][1] == r  # whom I send to receives from me
            new[r] |= heard[frm]
        heard = new
    assert all(h == set(range(size)) for h in heard)
    assert all(len(p) == rounds for p in peers)


@pytest.mark.parametrize("size", SIZES)
def test_bruck_delivers_every_block(size):
    # position i of rank r starts as (source r, destination r + i)
    pos = [[(r, (r + i) % size) for i in range(size)] for r in range(size)]
    for k in range(t.ceil_log2(size)):
        runs = t.bruck_blocks(size, k)
        moving = [i for a, b in runs for i in range(a, b)]
        assert moving == [i for i in range(size) if i >> k & 1]
        new = [list(p) for p in pos]
        for r in range(size):
            to, frm = t.bruck_peers(r, size, k)
            assert t.bruck_peers(to, size, k)[1] == r
            for i in moving:
                new[r][i] = pos[frm][i]
        pos = new
    for r in range(size):
        for i in range(size):
            assert pos[r][i] == ((r - i) % size, r)
