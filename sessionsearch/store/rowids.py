"""Row ids that carry their window, packed so that FTS5's doclists stay dense.

Index rows share the id of the transcript row they index; the role is the lowest bit. A window's
first LOW_SEQS seqs live in a low region, 2 ** LOW_BITS ids per window:

    id = wid << 17 | seq << 1 | assistant                    (seq < 65,536)

and its seqs past those, in the rare windows that long, in a high region:

    id = HIGH | wid << 31 | seq << 1 | assistant             (65,536 <= seq <= MAX_SEQ)

FTS5 stores a doclist as varint deltas of row ids, so the gap between windows is what a word pays
per window it occurs in: three bytes here for windows up to 15 apart, five with the layout of
schema version 5 (`wid << 31` for every seq), whose index was 78.5 MB where this one is 66 and
dense ids' 56, at 1,000,000 messages (bench/bench_layout.py). A smaller low region packs
tighter, but a search scoped to a window that spills past it ranks each of the two ranges with
its own FTS5 cursor, and each counts the word's documents for BM25 again: 65,536 seqs keeps
nearly every window in one range.

Within a window ids rise with seq, so `ORDER BY id` over a window is seq order; a window is two
contiguous id ranges (`window_ranges`), each a rowid range FTS5 can push down.
"""

LOW_SEQS = 65536
LOW_BITS = 17  # 16 bits of seq, 1 of role
HIGH = 1 << 62
SEQ_BITS = 30
MAX_SEQ = (1 << SEQ_BITS) - 1
MAX_WID = (1 << 31) - 1  # the high region has 31 bits for it


def row_id(wid: int, seq: int, role: str | None) -> int:
    bit = 1 if role == "assistant" else 0
    if seq < LOW_SEQS:
        return (wid << LOW_BITS) | (seq << 1) | bit
    return HIGH | (wid << (SEQ_BITS + 1)) | (seq << 1) | bit


def seq_ranges(wid: int, first_seq: int, last_seq: int) -> list[tuple[int, int]]:
    """Id ranges (lo, hi), in id order, of the rows with first_seq <= seq <= last_seq in a window."""
    out = []
    if first_seq < LOW_SEQS:
        out.append((row_id(wid, first_seq, None), row_id(wid, min(last_seq, LOW_SEQS - 1), "assistant")))
    if last_seq >= LOW_SEQS:
        out.append((row_id(wid, max(first_seq, LOW_SEQS), None), row_id(wid, last_seq, "assistant")))
    return out


def window_ranges(wid: int) -> list[tuple[int, int]]:
    """The two id ranges a window's rows can have: low, then high."""
    return seq_ranges(wid, 0, MAX_SEQ)


def wid_of(rid: int) -> int:
    return (rid >> (SEQ_BITS + 1)) & MAX_WID if rid >= HIGH else rid >> LOW_BITS


def seq_of(rid: int) -> int:
    return (rid >> 1) & (MAX_SEQ if rid >= HIGH else LOW_SEQS - 1)


def wid_sql(col: str) -> str:
    """SQL for the window of the row id in column `col`."""
    return f"(CASE WHEN {col} >= {HIGH} THEN ({col} >> {SEQ_BITS + 1}) & {MAX_WID} ELSE {col} >> {LOW_BITS} END)"


def seq_sql(col: str) -> str:
    """SQL for the seq of the row id in column `col`."""
    return f"(({col} >> 1) & CASE WHEN {col} >= {HIGH} THEN {MAX_SEQ} ELSE {LOW_SEQS - 1} END)"


def id_sql(wid: str, seq: str) -> str:
    """SQL for the id (role bit 0) of seq `seq` in window `wid` (SQL expressions)."""
    return (f"(CASE WHEN {seq} < {LOW_SEQS} THEN ({wid} << {LOW_BITS}) | ({seq} << 1) "
            f"ELSE {HIGH} | ({wid} << {SEQ_BITS + 1}) | ({seq} << 1) END)")


def from_v1(rid: int) -> int:
    """The id of a row stored under the layout of schema versions 1-5 (`wid << 31 | seq << 1 |
    assistant`), for cold files written before the migration."""
    return row_id(rid >> (SEQ_BITS + 1), (rid >> 1) & MAX_SEQ, "assistant" if rid & 1 else None)


def is_v1(rid: int, wid: int) -> bool:
    """Whether `rid`, a row of window `wid`, has the old layout: an old id shifted right 31 is
    its wid; a new low id shifted 31 is wid >> 14, which is never the wid (no window has id 0),
    and a new high id is at least HIGH."""
    return rid < HIGH and rid >> (SEQ_BITS + 1) == wid


def is_low_v1_sql(col: str) -> str:
    """SQL: whether an old id's row goes to the low region."""
    return f"(({col} >> 1) & {MAX_SEQ}) < {LOW_SEQS}"


def from_v1_sql(col: str) -> str:
    """SQL for from_v1 of the id in column `col` (the migration's rewrite)."""
    return (f"(CASE WHEN {is_low_v1_sql(col)} "
            f"THEN (({col} >> {SEQ_BITS + 1}) << {LOW_BITS}) | ({col} & {(1 << LOW_BITS) - 1}) "
            f"ELSE {HIGH} | {col} END)")
