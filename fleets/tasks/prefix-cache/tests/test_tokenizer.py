import pytest

from prefixcache.tokenizer import BOS_ID, EOS_ID, N_SPECIAL, Tokenizer


def test_pieces_and_determinism():
    a, b = Tokenizer(), Tokenizer()
    ids = a.encode("def f(x): return x+1")
    assert len(ids) == 10  # def f ( x ) : return x + 1
    assert ids == b.encode("def  f( x ):\n return x + 1")
    assert ids[3] == ids[7]  # both "x"
    assert all(N_SPECIAL <= i < a.vocab_size for i in ids)


def test_small_vocab_never_produces_special_ids():
    t = Tokenizer(vocab_size=16)
    ids = t.encode(" ".join(f"word{i}" for i in range(300)))
    assert min(ids) >= N_SPECIAL and max(ids) < 16


def test_special_tokens_and_decode():
    t = Tokenizer()
    ids = t.encode("hello , world", add_bos=True, add_eos=True)
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID
    assert t.decode(ids) == "hello , world"
    assert t.decode(ids, skip_special=False) == "<bos> hello , world <eos>"
    assert Tokenizer().decode(ids) == "<unk> <unk> <unk>"


def test_bad_input():
    with pytest.raises(ValueError):
        Tokenizer(vocab_size=8)
    with pytest.raises(TypeError):
        Tokenizer().encode(b"bytes")
    with pytest.raises(ValueError):
        Tokenizer(vocab_size=100).decode([100])


def test_count_matches_encode():
    t = Tokenizer()
    text = "a, b; c.d == e"
    assert t.count(text) == len(t.encode(text)) == 10  # "==" is two pieces
