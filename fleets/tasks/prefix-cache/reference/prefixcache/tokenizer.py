"""A deterministic stand-in tokenizer: words and punctuation hashed to stable token ids."""
from __future__ import annotations

import re
import zlib

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
N_SPECIAL = 3
PIECE_RE = re.compile(r"\w+|[^\w\s]")
SPECIAL_PIECES = {PAD_ID: "<pad>", BOS_ID: "<bos>", EOS_ID: "<eos>"}


class Tokenizer:
    """Splits text into pieces (runs of word characters, or single other non-space characters)
    and maps each piece to ``N_SPECIAL + crc32(piece) % (vocab_size - N_SPECIAL)``."""

    def __init__(self, vocab_size: int = 50000) -> None:
        if not isinstance(vocab_size, int) or vocab_size < 16:
            raise ValueError(f"vocab_size must be an integer >= 16, got {vocab_size!r}")
        self.vocab_size = vocab_size
        self._pieces: dict[int, str] = {}

    def piece_id(self, piece: str) -> int:
        """The token id of one piece (no splitting)."""
        if not piece:
            raise ValueError("empty piece")
        return N_SPECIAL + zlib.crc32(piece.encode("utf-8")) % (self.vocab_size - N_SPECIAL)

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of ``text``; remembers each piece so that :meth:`decode` can show it."""
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        ids = [BOS_ID] if add_bos else []
        for piece in PIECE_RE.findall(text):
            tid = self.piece_id(piece)
            self._pieces.setdefault(tid, piece)
            ids.append(tid)
        if add_eos:
            ids.append(EOS_ID)
        return ids

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        """Pieces joined by single spaces; unknown ids as ``<unk>``."""
        out = []
        for tid in ids:
            if not isinstance(tid, int) or not 0 <= tid < self.vocab_size:
                raise ValueError(f"token id {tid!r} outside 0..{self.vocab_size - 1}")
            if tid < N_SPECIAL:
                if not skip_special:
                    out.append(SPECIAL_PIECES[tid])
                continue
            out.append(self._pieces.get(tid, "<unk>"))
        return " ".join(out)

    def count(self, text: str) -> int:
        """Number of tokens ``encode(text)`` returns (no special tokens)."""
        return len(PIECE_RE.findall(text))
