"""Agent ids and session keys: parsing and validation (SPEC §2)."""

from __future__ import annotations

import re

from .errors import InvalidRequest
from .values import check_stored_name

DEFAULT_AGENT = "main"
# \Z, not $: `$` also matches before a trailing newline, and "main\n" would name a database file
AGENT_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")
MAX_SESSION_KEY_CHARS = 512


def check_agent_id(agent_id: object, *, field: str = "agentId") -> str:
    """Return `agent_id` if it is a valid agent id, else raise InvalidRequest naming `field`."""
    if not isinstance(agent_id, str) or not AGENT_ID_RE.fullmatch(agent_id):
        raise InvalidRequest(
            f"{field} must be 1..64 letters, digits, '_' or '-'", field=field)
    return agent_id


def check_session_key(key: object, *, field: str = "sessionKey") -> str:
    """Return the key if it is a non-empty string naming a valid agent, else raise InvalidRequest."""
    if not isinstance(key, str) or not key.strip():
        raise InvalidRequest(f"{field} must be a non-empty string", field=field)
    if len(key) > MAX_SESSION_KEY_CHARS:
        raise InvalidRequest(f"{field} must not exceed {MAX_SESSION_KEY_CHARS} characters", field=field)
    check_stored_name(key, field)
    agent_of(key, field=field)
    return key


def agent_of(key: str, *, field: str = "sessionKey") -> str:
    """The agent a session key belongs to: `agent:<id>:…` names it; anything else is `main`."""
    if key.startswith("agent:"):
        parts = key.split(":", 2)
        if len(parts) < 3 or not parts[2]:
            raise InvalidRequest(f"{field} must look like agent:<agentId>:<rest>", field=field)
        return check_agent_id(parts[1], field=field)
    return DEFAULT_AGENT


def main_key(agent_id: str) -> str:
    """The main session key of an agent (`agent:<id>:main`)."""
    return f"agent:{agent_id}:main"
