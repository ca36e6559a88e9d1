"""The compiled arena round (transport/_tiny.c) against the arena's rules, in one process:
two ranks' views of one anonymous mapping, run one after the other."""

from __future__ import annotations

import ctypes
import mmap
import os
import struct

import numpy as np
import pytest

from meshcast.transport.arena import Arena

try:
    from meshcast.transport import _tiny
except ImportError:  # test_the_helper_is_built_by_the_install fails then
    _tiny = None
built = pytest.mark.skipif(_tiny is None, reason="the compiled helper was not built")

FP = 32
SMALL = 4096


class _Mapping:
    def __init__(self, n: int) -> None:
        self.ranks_off, self.fp_off, self.small_off, _, total = Arena.layout(n, 0)
        total = self.small_off + n * 2 * SMALL
        self.mm = mmap.mmap(-1, total)
        self.base = ctypes.c_char.from_buffer(self.mm)
        self.address = ctypes.addressof(self.base)
        self.n = n

    def round(self, rank: int):
        return _tiny.Round(self.address, self.n, rank, self.ranks_off, self.fp_off,
                           self.small_off, SMALL, FP, 0, self).run

    def word(self, rank: int) -> int:
        return struct.unpack_from("<Q", self.mm, self.ranks_off + rank * 64)[0]

    def region(self, rank: int, parity: int, nbytes: int) -> bytes:
        at = self.small_off + (rank * 2 + parity) * SMALL
        return self.mm[at:at + nbytes]


def _fp(seq: int, tag: int = 0) -> bytes:
    return struct.pack("<Q", seq) + bytes([tag]) * (FP - 8)


@built
def test_the_last_rank_to_arrive_sees_everyone_and_the_first_is_told_to_wait():
    m = _Mapping(2)
    r0, r1 = m.round(0), m.round(1)
    data = np.arange(4, dtype=np.float32)
    assert r0(3, 1, _fp(3), data, 0) == 2  # rank 1 is not there: Python waits
    assert m.word(0) == (3 << 24) | 1
    assert m.region(0, 1, 16) == data.tobytes()  # copied before the signal
    assert r1(3, 1, _fp(3), None, 10_000) == 0  # everyone there, same fingerprint
    assert r0(4, 0, _fp(4), None, 0) == 2
    assert r1(4, 0, _fp(4, tag=7), None, 0) == 1  # arrived, but the fingerprints differ
    # gather/scatter: each rank's own expected fingerprint (the root's differs)
    expected = (_fp(6, tag=1), _fp(6))
    assert r0(6, 0, expected[0], None, 0, expected) == 2
    assert r1(6, 0, expected[1], None, 0, expected) == 0
    assert r1(6, 0, expected[1], None, 0, (expected[1], expected[1])) == 1
    with pytest.raises(ValueError, match="one fingerprint per rank"):
        r1(6, 0, expected[1], None, 0, expected[:1])


@built
def test_an_aborted_group_is_reported_before_anything_is_written():
    m = _Mapping(3)
    r2 = m.round(2)
    m.mm[0:4] = struct.pack("<I", 1)
    assert r2(5, 1, _fp(5), np.ones(2), 1_000_000) == 3
    assert m.word(2) == 0


@built
def test_bad_arguments_raise():
    m = _Mapping(2)
    r0 = m.round(0)
    with pytest.raises(ValueError, match="wrong size"):
        r0(1, 1, b"short", None, 0)
    with pytest.raises(ValueError, match="larger than a one-shot region"):
        r0(1, 1, _fp(1), np.zeros(SMALL + 1, np.uint8), 0)
    with pytest.raises(ValueError, match="not C-contiguous"):
        r0(1, 1, _fp(1), np.zeros(8)[::2], 0)
    with pytest.raises(ValueError, match="bad arena layout"):
        _tiny.Round(m.address, 2, 2, m.ranks_off, m.fp_off, m.small_off, SMALL, FP, 0, m)


@built
def test_oneshot_is_a_phase_one_round_after_staging():
    """oneshot = run(phase 1) with seq and a tail for the fingerprint, data (an array or a
    list of them, one after the other) staged in my region first; the caller then reads
    the regions (every one-shot call that folds or copies runs its program instead)."""
    m = _Mapping(3)
    rounds = [_tiny.Round(m.address, 3, r, m.ranks_off, m.fp_off, m.small_off, SMALL, FP, 0,
                          m).oneshot for r in range(3)]
    tail = bytes(FP - 8)
    data = [np.arange(6, dtype=np.int32) * (r + 1) for r in range(3)]
    assert rounds[0](5, tail, data[0], 0) == 2  # not everyone there: Python waits
    assert rounds[1](5, tail, [data[1][:2], data[1][2:]], 0) == 2
    assert rounds[2](5, tail, data[2], 0) == 0
    for r in range(3):
        region = np.frombuffer(m.mm, np.int32, 6, m.small_off + (r * 2 + 1) * SMALL)
        assert region.tolist() == data[r].tolist(), r
        assert m.word(r) == (5 << 24) | 1
    with pytest.raises(TypeError, match="oneshot"):
        rounds[0](7, tail, None, 0, None, None, -1, 0)  # (the combines are gone)
    with pytest.raises(ValueError, match="larger than a one-shot region"):
        rounds[0](7, tail, np.zeros(SMALL // 4 + 1, np.int32), 0)
    with pytest.raises(ValueError, match="tail of the wrong size"):
        rounds[0](7, tail[1:], None, 0)
    assert m.word(0) == (5 << 24) | 1  # every refusal came before anything was signalled


@built
def test_rooted_entry_checks_each_ranks_own_tail_and_stages_what_it_is_given():
    """rooted(): phase 0, rank r must have published seq + tails[r]; data may be a tuple
    (staged one after the other); the exposure, (address, nbytes) or an array, lands
    where Arena.expose puts it. (The one-shot gather, scatter and all_to_all copy in
    their programs: rooted is only the entry now.)"""
    m = _Mapping(2)
    rounds = [_tiny.Round(m.address, 2, r, m.ranks_off, m.fp_off, m.small_off, SMALL, FP, 0,
                          m).rooted for r in range(2)]
    tails = (bytes([1]) * (FP - 8), bytes([2]) * (FP - 8))
    seq = 4
    pieces = (np.array([1, 2], np.int16), np.array([3, 4], np.int16))
    assert rounds[0](seq, tails, pieces, 0, (0xABC, 8)) == 2
    assert m.region(0, 0, 8) == np.array([1, 2, 3, 4], np.int16).tobytes()
    at = m.fp_off + 0 * 64 + FP  # rank 0's exposure for an even seq
    assert struct.unpack_from("<QQQ", m.mm, at) == (0xABC, 8, 0)
    assert m.word(0) == seq << 24  # phase 0: the entry
    mine = np.array([7, 8], np.int16)
    with pytest.raises(TypeError, match="rooted"):  # the old combine arguments: refused
        rounds[1](seq, tails, mine, 0, mine, None, None, -1, 0)
    assert m.word(1) == 0
    assert rounds[1](seq, tails, mine, 0, mine) == 0
    assert m.region(1, 0, 4) == mine.tobytes()
    at = m.fp_off + (1 * 2 + 0) * 64 + FP  # rank 1, even seq: an array exposes its memory
    assert struct.unpack_from("<QQQ", m.mm, at) == (mine.ctypes.data, 4, 0)
    with pytest.raises(ValueError, match="not C-contiguous"):  # refused before the round
        rounds[1](seq, tails, mine, 0, np.zeros(8, np.int16)[::2])
    wrong = (tails[1], tails[1])  # rank 0 expected to have published rank 1's tail
    assert rounds[1](seq, wrong, mine, 0, None) == 1
    with pytest.raises(ValueError, match="larger than a one-shot region"):
        rounds[1](seq, tails, (np.zeros(SMALL, np.uint8), mine), 0, None)


@built
def test_rooted_all_to_all_form_skips_and_compares_layouts():
    """rooted() as the single-copy and uneven all_to_all use it: an int in data skips
    bytes (the padding after the split header); `same` compares every region's first
    bytes (the header) with mine, status 4 when they differ."""
    m = _Mapping(2)
    rounds = [_tiny.Round(m.address, 2, r, m.ranks_off, m.fp_off, m.small_off, SMALL, FP, 0,
                          m).rooted for r in range(2)]
    tails = (bytes(FP - 8),) * 2
    header = b"HDR!"
    ins = [np.arange(4, dtype=np.int32) + 10 * r for r in range(2)]

    def data(r: int) -> tuple:
        return (header, 4, ins[r])  # head = 8 bytes

    seq = 6
    assert rounds[0](seq, tails, data(0), 0, None, 4) == 2
    assert rounds[1](seq, tails, data(1), 0, None, 4) == 0
    assert m.region(1, 0, 24) == header + bytes(4) + ins[1].tobytes()
    seq = 8
    assert rounds[0](seq, tails, (b"HDR?", 4), 0, None, 4) == 2
    assert rounds[1](seq, tails, data(1), 0, None, 4) == 4
    with pytest.raises(ValueError, match="negative skip"):
        rounds[1](seq, tails, (header, -1), 0, None)


@built
def test_reads_copy_from_exposed_buffers_then_signal():
    """reads(): every (q, offset, length, at) from q's exposed buffer (this process
    plays both ranks, so process_vm_readv reads itself), mine for my own pieces; a
    read outside an exposure or outside dest is refused before anything moves."""
    m = _Mapping(2)
    rounds = [_tiny.Round(m.address, 2, r, m.ranks_off, m.fp_off, m.small_off, SMALL, FP, 0,
                          m) for r in range(2)]
    theirs = np.arange(16, dtype=np.uint8)
    mine = np.arange(100, 116, dtype=np.uint8)
    seq = 9
    at = m.fp_off + (seq & 1) * 64 + 1 * 2 * 64 + FP  # rank 1's exposure (Arena.expose)
    m.mm[at:at + 24] = struct.pack("<QQQ", theirs.ctypes.data, theirs.nbytes, 0)
    pids = (os.getpid(), os.getpid())
    dest = np.zeros(12, np.uint8)
    reads = ((0, 2, 4, 0), (1, 8, 8, 4))
    assert rounds[0].reads(seq, pids, dest, mine, reads, 1, 0) == 2  # rank 1 not done yet
    assert dest.tolist() == [102, 103, 104, 105, *range(8, 16)]
    assert m.word(0) == (seq << 24) | 1
    for bad in (((1, 10, 8, 0),), ((0, 12, 8, 0),), ((1, 0, 8, 8),)):
        dest[:] = 0
        assert rounds[0].reads(seq, pids, dest, mine, bad, 1, 0) == 4
        assert not dest.any()  # nothing was read
    with pytest.raises(OSError):
        rounds[0].reads(seq, (os.getpid(), 2 ** 22 + 12345), dest, mine, ((1, 0, 4, 0),), 1, 0)
    with pytest.raises(ValueError, match="names no rank"):
        rounds[0].reads(seq, pids, dest, mine, ((2, 0, 4, 0),), 1, 0)
    m.mm[0:4] = struct.pack("<I", 1)
    assert rounds[0].reads(seq, pids, dest, mine, reads, 1, 0) == 3


@built
def test_a_table_of_pieces_is_read_as_if_they_lay_back_to_back():
    """A rank that exposed a table of pieces apart in memory (meta PIECE_TABLE, the table
    in its one-shot region: a gather or scatter root's list) is addressed as if its
    pieces lay end to end (the offsets a program's copies use): a copy inside one piece
    reads there, empty pieces included; one across a piece's edge or past the last is
    refused before anything moves."""
    from meshcast.paths.single_copy import PIECE_TABLE, SPLIT

    m = _Mapping(2)
    rounds = [_tiny.Round(m.address, 2, r, m.ranks_off, m.fp_off, m.small_off, SMALL, FP, 0,
                          m) for r in range(2)]
    pieces = [np.arange(10, 16, dtype=np.uint8), np.zeros(0, np.uint8),
              np.arange(50, 60, dtype=np.uint8)]
    seq = 5
    table = b"".join(struct.pack("<QQ", p.ctypes.data if p.nbytes else 0, p.nbytes)
                     for p in pieces)
    at_table = 16  # (anywhere in the owner's region of the call's parity)
    region = m.small_off + (1 * 2 + (seq & 1)) * SMALL
    m.mm[region + at_table:region + at_table + len(table)] = table
    at = m.fp_off + (seq & 1) * 64 + 1 * 2 * 64 + FP
    pids = (os.getpid(), os.getpid())
    mine = np.zeros(1, np.uint8)
    for bits in (0, SPLIT):  # (a splitting root's table reads alike)
        m.mm[at:at + 24] = struct.pack("<QQQ", at_table, len(table), PIECE_TABLE | bits)
        dest = np.zeros(8, np.uint8)
        # bytes 2..5 of the first piece, then the second piece's whole (6.. of the span)
        assert rounds[0].reads(seq, pids, dest, mine, ((1, 2, 4, 0), (1, 6, 0, 4),
                                                       (1, 9, 4, 4)), 1, 0) == 2
        assert dest.tolist() == [12, 13, 14, 15, 53, 54, 55, 56]
        for bad in ((1, 4, 4, 0), (1, 12, 6, 0), (1, 16, 1, 0)):  # an edge, past the end
            dest[:] = 0
            assert rounds[0].reads(seq, pids, dest, mine, (bad,), 1, 0) == 4, bad
            assert not dest.any()


@built
def test_alike_agrees_with_the_lanes_python_check():
    """alike(): a gather/scatter root's list qualifies for the lane exactly when the
    Python check (lanes._alike) says so, for every way a list can differ."""
    from meshcast.lanes import _alike

    m = _Mapping(3)
    alike = _tiny.Round(m.address, 3, 0, m.ranks_off, m.fp_off, m.small_off, SMALL, FP, 0,
                        m).alike
    like = np.zeros((2, 3), np.float32)

    def good() -> list:
        return [np.zeros((2, 3), np.float32) for _ in range(3)]

    cases = {"alike": good(), "tuple": tuple(good()), "two": good()[:2], "four": good() * 2,
             "not a list": None, "dtype": good()[:2] + [np.zeros((2, 3), np.int32)],
             "same bytes, other dtype": good()[:2] + [np.zeros((2, 3), np.uint32)],
             "shape": good()[:2] + [np.zeros((3, 2), np.float32)],
             "size": good()[:2] + [np.zeros((2, 4), np.float32)],
             "strided": good()[:2] + [np.zeros((2, 6), np.float32)[:, ::2]],
             "read-only": good()[:2] + [_read_only(6).view(np.float32).reshape(2, 3)],
             "byte order": good()[:2] + [np.zeros((2, 3), ">f4")],
             "a subclass": good()[:2] + [np.zeros((2, 3), np.float32).view(np.matrix)],
             "memoryview": good()[:2] + [memoryview(np.zeros((2, 3), np.float32))],
             "a list inside": good()[:2] + [[0.0] * 6]}
    for name, pieces in cases.items():
        for writable in (True, False):
            want = _alike(pieces, like, 3, writable)
            assert alike(pieces, like, writable) is want, (name, writable, want)
    assert alike(good(), like, True) and not alike(cases["read-only"], like, True)
    assert alike(cases["read-only"], like, False)


@built
def test_same_start_agrees_with_the_lanes_python_check():
    """same_start(): a root's input is its own piece in place exactly when the Python
    check (lanes._in_place) says so: the same array or another view of its start, not a
    view one element on, another array of equal bytes, or a copy."""
    from meshcast.lanes import _in_place

    buffer = np.arange(12, dtype=np.float32)
    arr = buffer[:6]
    other = arr.copy()
    cases = {"itself": arr, "a view of it": buffer[:6].reshape(2, 3).reshape(-1),
             "one element on": buffer[1:7], "its second half": buffer[6:],
             "a copy": other, "the same bytes, another dtype": arr.view(np.int32)}
    for name, piece in cases.items():
        want = _in_place(arr, piece)
        assert _in_place(arr, piece, _tiny.same_start) is want, (name, want)
    assert _tiny.same_start(arr, buffer[:6]) and not _tiny.same_start(arr, buffer[1:7])
    assert not _tiny.same_start(arr, [0.0] * 6)  # (no buffer: not in place, never an error)


def _read_only(n: int) -> np.ndarray:
    a = np.zeros(n, np.int32)
    a.flags.writeable = False
    return a


def test_the_helper_is_built_by_the_install():
    """pip install -e . compiles transport/_tiny.c (optional: a machine without a C
    compiler runs the Python round; this checks that ours did build it)."""
    assert _tiny is not None, "meshcast.transport._tiny is missing: was a C compiler found?"
    assert _tiny.Round.run.__doc__.startswith("run(seq, phase")
