import pytest

from kvblock.bitmap import NoFreeSlot, SlotBitmap


def test_lowest_free_first():
    bm = SlotBitmap(20)
    assert [bm.allocate() for _ in range(5)] == [0, 1, 2, 3, 4]
    bm.release(1)
    bm.release(3)
    assert bm.allocate() == 1
    assert bm.allocate() == 3
    assert bm.allocate() == 5


def test_full_and_counts():
    bm = SlotBitmap(9)
    for _ in range(9):
        bm.allocate()
    assert (bm.used, bm.free) == (9, 0)
    with pytest.raises(NoFreeSlot):
        bm.allocate()


def test_misuse_rejected():
    bm = SlotBitmap(4)
    bm.mark(2)
    with pytest.raises(ValueError):
        bm.mark(2)
    with pytest.raises(ValueError):
        bm.release(0)
    with pytest.raises(IndexError):
        bm.is_used(4)


def test_bytes_roundtrip():
    bm = SlotBitmap(13)
    for i in (0, 7, 8, 12):
        bm.mark(i)
    again = SlotBitmap.from_bytes(bm.to_bytes(), 13)
    assert again.used_indices() == [0, 7, 8, 12]
    assert again.allocate() == 1
