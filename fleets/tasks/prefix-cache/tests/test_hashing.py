import pytest

from prefixcache.hashing import ROOT_HASH, block_hashes, hash_block


def test_only_full_blocks_hashed():
    assert len(block_hashes(list(range(35)), 16)) == 2
    assert block_hashes(list(range(15)), 16) == []
    assert all(0 <= h < 2**64 for h in block_hashes(list(range(64)), 16))


def test_chaining():
    base = list(range(48))
    h = block_hashes(base, 16)
    changed0 = [999] + base[1:]
    h0 = block_hashes(changed0, 16)
    assert all(x != y for x, y in zip(h, h0))
    changed1 = base[:20] + [999] + base[21:]
    h1 = block_hashes(changed1, 16)
    assert h1[0] == h[0] and h1[1] != h[1] and h1[2] != h[2]
    assert h[0] == hash_block(ROOT_HASH, base[:16])


def test_extra_separates_namespaces():
    toks = list(range(16))
    assert block_hashes(toks, 16, extra="lora-a") != block_hashes(toks, 16)
    assert block_hashes(toks, 16, extra="") != block_hashes(toks, 16)
    assert block_hashes(toks, 16, extra="a") != block_hashes(toks, 16, extra="b")


def test_parent_continues_chain():
    toks = list(range(64))
    h = block_hashes(toks, 16)
    assert block_hashes(toks[16:], 16, parent=h[0]) == h[1:]


def test_invalid_arguments():
    with pytest.raises(ValueError):
        block_hashes([1, 2], 0)
    with pytest.raises(ValueError):
        hash_block(ROOT_HASH, [-1])
    with pytest.raises(TypeError):
        hash_block(ROOT_HASH, [1.5])
