"""The size classes object collectives pad their pickles to (meshcast._objects)."""

from __future__ import annotations

import pytest

from meshcast import _objects


@pytest.mark.parametrize("length", [0, 1, 63, 64, 65, 511, 512, 513, 600, 1000, 4097,
                                    65_536, 100_000, _objects.CLASSES_UP_TO,
                                    _objects.CLASSES_UP_TO + 1, 5_000_001])
def test_a_size_class_holds_the_length_and_adds_little(length):
    c = _objects._size_class(length)
    assert c >= length and c % 64 == 0
    if length > _objects.CLASSES_UP_TO:
        assert c - length < 64
    else:
        assert c - length < max(64, length / 8), (length, c)


def test_size_classes_are_few_and_ordered():
    classes = [_objects._size_class(z) for z in range(1, 70_000)]
    assert classes == sorted(classes)
    assert len(set(classes)) < 80  # (8 a doubling past 512 bytes; 70 000 sizes)
    assert _objects._size_class(600) == _objects._size_class(640) == 640
