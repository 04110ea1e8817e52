"""Row ids that carry their window: id = wid << 31 | seq << 1 | assistant.

Index rows share the id of the transcript row they index, so a window is a contiguous id range
(a scope filter FTS5 can push down), the window of a hit is a shift away, and the role is one bit.
"""

SEQ_BITS = 30
MAX_SEQ = (1 << SEQ_BITS) - 1


def row_id(wid: int, seq: int, role: str | None) -> int:
    return (wid << (SEQ_BITS + 1)) | (seq << 1) | (1 if role == "assistant" else 0)


def window_range(wid: int) -> tuple[int, int]:
    """First and last id a window's rows can have."""
    base = wid << (SEQ_BITS + 1)
    return base, base | ((1 << (SEQ_BITS + 1)) - 1)


def seq_range(wid: int, first_seq: int, last_seq: int) -> tuple[int, int]:
    """Ids of the rows with first_seq <= seq <= last_seq in a window."""
    base = wid << (SEQ_BITS + 1)
    return base | (first_seq << 1), base | (last_seq << 1) | 1


def wid_of(rid: int) -> int:
    return rid >> (SEQ_BITS + 1)


def seq_of(rid: int) -> int:
    return (rid >> 1) & MAX_SEQ
