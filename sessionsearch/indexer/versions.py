"""Transcript versions 1 to 3 read as the agent runtime migrates them on load (SPEC §2).

The runtime's migration gives Version 1 entries random ids; here an entry's id is made from its
window and its position among the file's entries (the header being 0), so every import of the same
file, on every machine, gives the same ids: re-imports stay harmless and anchors stay valid. The
ids hold a ':', which the runtime's own (8 hex digits) never do.
"""

from __future__ import annotations

from typing import Any

CURRENT_VERSION = 3


def stable_id(session_id: str, position: int) -> str:
    """The id of the Version 1 entry at `position` (the header line being 0) of window `session_id`."""
    return f"{session_id}:{position}"


class Migration:
    """One file's entries, in file order, brought to Version 3 as the runtime does.

    An entry is every non-blank line that is JSON (the runtime skips the rest, and so do positions
    here). The first entry must be the header (`{"type":"session"}`) for a migration to happen:
    a file without one is taken as written, as the gateway's own writer writes it.
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.version: int | None = None  # None until the first entry; CURRENT_VERSION when none applies
        self.position = 0  # the position of the next entry
        self._previous: str | None = None

    @property
    def counts_positions(self) -> bool:
        """Whether entries already imported must still be seen (their positions name later ids)."""
        return self.version is None or self.version < 2

    def see(self, value: object) -> bool:
        """Migrate one entry in place; True when it changed. `value` is the line's JSON value."""
        position = self.position
        self.position += 1
        if self.version is None:
            self.version = _header_version(value) if position == 0 else CURRENT_VERSION
            if self.version < CURRENT_VERSION and isinstance(value, dict):
                value["version"] = CURRENT_VERSION
                return True
            return False
        if self.version >= CURRENT_VERSION or not isinstance(value, dict):
            return False
        changed = False
        if self.version < 2 and value.get("type") != "session":
            changed = True
            value["id"] = stable_id(self.session_id, position)
            value["parentId"] = self._previous
            self._previous = value["id"]
            if value.get("type") == "compaction" and "firstKeptEntryIndex" in value:
                index = value.pop("firstKeptEntryIndex")
                # the runtime looks the index up among entries given ids so far (this one included)
                if _whole(index) and 1 <= index <= position:
                    value["firstKeptEntryId"] = stable_id(self.session_id, int(index))
        message = value.get("message")
        if value.get("type") == "message" and isinstance(message, dict) and message.get("role") == "hookMessage":
            message["role"] = "custom"  # Version 3's name for it
            changed = True
        return changed


def _header_version(value: object) -> int:
    """The version a first entry declares: 1 when its `version` is absent; none applies to a file
    that does not start with a header, nor to a version that is not a number."""
    if not isinstance(value, dict) or value.get("type") != "session":
        return CURRENT_VERSION
    version: Any = value.get("version", 1)
    if version is None:
        return 1
    if isinstance(version, bool) or not isinstance(version, (int, float)):
        return CURRENT_VERSION
    return 1 if version < 2 else 2 if version < CURRENT_VERSION else CURRENT_VERSION


def _whole(value: object) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float)
                                                                      and value.is_integer())
