"""cma.read and cma.write, on this process's own memory (the kernel lets a process read
and write itself): every byte arrives at every distance between the two addresses, with
the compiled copy (_copy.h's copy_across: a bounce buffer where the destination lies
1-15 bytes past the source modulo 4 KiB) and with the ctypes one; a bad address raises
OSError naming the process."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from meshcast.transport import cma


def _at(offset: int, nbytes: int, fill: int) -> np.ndarray:
    """nbytes bytes starting ``offset`` bytes past a 4 KiB boundary."""
    base = np.full(nbytes + 8192, fill, np.uint8)
    skip = (offset - base.ctypes.data) % 4096
    return base[skip:skip + nbytes]


@pytest.fixture(params=["1", "0"], ids=["compiled", "ctypes"])
def compiled(request, monkeypatch) -> str:
    monkeypatch.setenv("MESHCAST_COMPILED", request.param)
    try:
        from meshcast.transport import _rings  # noqa: F401
    except ImportError:
        if request.param == "1":
            pytest.fail("the compiled helper _rings is not built (python setup.py build_ext)")
    assert (cma._compiled_copy() is not None) == (request.param == "1")
    return request.param


@pytest.mark.parametrize("nbytes", [1, 4095, 65_536, 200_003])
@pytest.mark.parametrize("there, here", [(0, 0), (0, 4), (16, 24), (4092, 8), (40, 4),
                                         (8, 4)])
def test_every_byte_arrives(compiled, nbytes, there, here):
    data = np.random.default_rng(nbytes + here).integers(0, 256, nbytes, np.uint8)
    source = _at(there, nbytes, 0)
    source[:] = data
    dest = _at(here, nbytes, 0xEE)
    cma.read(os.getpid(), source.ctypes.data, dest)
    np.testing.assert_array_equal(dest, data)
    target = _at(there, nbytes, 0xEE)
    cma.write(os.getpid(), target.ctypes.data, dest)
    np.testing.assert_array_equal(target, data)


def test_a_bad_address_raises(compiled):
    dest = np.zeros(100_000, np.uint8)
    for fn in (cma.read, cma.write):
        with pytest.raises(OSError, match=f"pid {os.getpid()}") as info:
            fn(os.getpid(), 4096, dest[4:])  # the first page is never mapped
        assert info.value.errno == errno.EFAULT
