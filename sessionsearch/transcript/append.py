"""Where appended events go in a window's tree, and whether the write is a linear extension.

The planner is pure: it takes the window's state and a resolver for event ids already stored,
and says which rows to store, with which parents, where the leaf ends, and whether the batch only
extends the active branch (then its user/assistant text is indexed in the same transaction).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .events import Event


@dataclass(slots=True)
class Row:
    seq: int
    event: Event
    parent_seq: int | None
    node_seq: int | None  # what a child naming this event hangs from
    on_branch: bool


@dataclass
class Plan:
    rows: list[Row] = field(default_factory=list)
    leaf_seq: int | None = None
    leaf_event_id: str | None = None
    last_seq: int = 0
    linear: bool = True
    duplicates: int = 0
    unknown_parents: list[int] = field(default_factory=list)  # batch positions

    @property
    def messages(self) -> int:
        """Indexable messages added on the active branch (meaningful when linear)."""
        return sum(1 for r in self.rows if r.on_branch and r.event.text)


def ids_to_resolve(events: list[Event], leaf_event_id: str | None) -> set[str]:
    """The event ids a batch names (its own, parents, leaf targets) that the store must look up."""
    wanted = {e.parent for e in events if e.parent} | {e.target_id for e in events if e.target_id}
    wanted |= {e.event_id for e in events if e.event_id}
    wanted.discard(leaf_event_id)
    return wanted


def plan_append(events: list[Event], *, last_seq: int, leaf_seq: int | None, leaf_event_id: str | None,
                has_header: bool, known: dict[str, tuple[int, int | None]]) -> Plan:
    """Place `events` after `last_seq` in a window whose active leaf is `leaf_seq`.

    `known` maps the ids of `ids_to_resolve` already stored in the window to (seq, node_seq).
    """
    known = dict(known)
    if leaf_event_id is not None and leaf_seq is not None:
        known[leaf_event_id] = (leaf_seq, leaf_seq)
    seen_ids = set(known)
    plan = Plan(leaf_seq=leaf_seq, leaf_event_id=leaf_event_id, last_seq=last_seq)
    seq = last_seq
    for pos, ev in enumerate(events):
        if ev.event_id and ev.event_id in seen_ids:
            plan.duplicates += 1
            continue
        if ev.type == "session":
            if has_header:
                plan.duplicates += 1
                continue
            has_header = True
            seq += 1
            plan.rows.append(Row(seq, ev, None, None, False))
            if ev.event_id:
                seen_ids.add(ev.event_id)
                known[ev.event_id] = (seq, None)
            continue
        seq += 1
        if ev.type == "leaf":
            target = known.get(ev.target_id) if ev.target_id else None
            node = target[1] if target else plan.leaf_seq
            if target is not None and target[1] != plan.leaf_seq:
                plan.linear = False
                plan.leaf_seq = target[1]
                plan.leaf_event_id = ev.target_id if target[0] == target[1] else None
            plan.rows.append(Row(seq, ev, None, node, False))
        else:
            parent = plan.leaf_seq
            if ev.has_parent:
                if ev.parent is None:
                    parent = None
                elif ev.parent in known:
                    parent = known[ev.parent][1]
                else:
                    plan.unknown_parents.append(pos)
            extends = parent == plan.leaf_seq and not ev.side
            if not extends:
                plan.linear = False
            plan.rows.append(Row(seq, ev, parent, seq, extends and plan.linear))
            if not ev.side:
                plan.leaf_seq = seq
                plan.leaf_event_id = ev.event_id
        if ev.event_id:
            seen_ids.add(ev.event_id)
            known[ev.event_id] = (seq, plan.rows[-1].node_seq)
    plan.last_seq = seq
    if not plan.linear:
        for row in plan.rows:
            row.on_branch = False  # the store recomputes the projection from the final leaf
    return plan

