"""Who is calling: the operator token, scoped tokens bound to a requester, and binding a body to its caller.

A scoped token (`[[auth.tokens]]` in the TOML config) is stored as the sha256 of the token, never
the token itself; a presented token is hashed and compared with every stored hash in constant
time. A call made with one acts as that token's requester: on the agent tools and MCP only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from .errors import Forbidden, InvalidRequest
from .identity import Requester, parse_requester
from .keys import check_session_key

_SHA256_HEX = re.compile(r"[0-9a-f]{64}\Z")
TOKEN_FIELDS = {"token_sha256", "requester", "sandboxed"}


@dataclass(frozen=True)
class ScopedToken:
    """One `[[auth.tokens]]` entry: the token's sha256 (hex) and the requester it acts as."""

    token_sha256: str
    requester: Requester


@dataclass(frozen=True)
class Caller:
    """Who a request comes from: the operator (the gateway; `requester` None) or one requester."""

    requester: Requester | None = None

    @property
    def operator(self) -> bool:
        return self.requester is None


OPERATOR = Caller()


def sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_scoped_tokens(entries: Any, where: str) -> tuple[ScopedToken, ...]:
    """The `auth.tokens` array of tables; raises InvalidRequest naming the entry at fault.

    `where` prefixes messages (the config file's path)."""
    if not isinstance(entries, list):
        raise InvalidRequest(f"{where}: auth.tokens must be an array of tables ([[auth.tokens]])", field="auth.tokens")
    out: list[ScopedToken] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        name = f"{where}: auth.tokens[{i}]"
        if not isinstance(entry, dict):
            raise InvalidRequest(f"{name} must be a table with token_sha256, requester and sandboxed",
                                 field="auth.tokens")
        if isinstance(entry.get("requester"), str):
            name += f" (requester {entry['requester'][:100]!r})"
        unknown = sorted(set(entry) - TOKEN_FIELDS)
        if unknown:
            raise InvalidRequest(f"{name} has unknown key {unknown[0]!r}; an entry has token_sha256, requester "
                                 "and sandboxed", field="auth.tokens")
        digest = entry.get("token_sha256")
        if not isinstance(digest, str) or not _SHA256_HEX.match(digest.lower()):
            raise InvalidRequest(f"{name}: token_sha256 must be the token's sha256 as 64 hex digits "
                                 "(`sessionsearch token new` prints an entry)", field="auth.tokens")
        try:
            key = check_session_key(entry.get("requester"), field="requester")
        except InvalidRequest as exc:
            raise InvalidRequest(f"{name}: {exc.message}", field="auth.tokens") from None
        sandboxed = entry.get("sandboxed", False)
        if not isinstance(sandboxed, bool):
            raise InvalidRequest(f"{name}: sandboxed must be true or false", field="auth.tokens")
        digest = digest.lower()
        if digest in seen:
            raise InvalidRequest(f"{name} has the same token_sha256 as auth.tokens[{seen[digest]}]",
                                 field="auth.tokens")
        seen[digest] = i
        out.append(ScopedToken(digest, Requester(key, sandboxed)))
    return tuple(out)


class Credentials:
    """The tokens a server accepts; with none configured every caller is the operator (loopback only)."""

    def __init__(self, api_token: str | None, scoped: tuple[ScopedToken, ...] = ()) -> None:
        self.api_token = api_token or None
        self.scoped = scoped
        if self.api_token is not None and any(s.token_sha256 == sha256_hex(self.api_token) for s in scoped):
            raise InvalidRequest("an auth.tokens entry holds the hash of SESSIONSEARCH_API_TOKEN: the operator "
                                 "token cannot also be a scoped token", field="auth.tokens")

    @property
    def required(self) -> bool:
        """Whether every request (but the health probes) must carry a token."""
        return self.api_token is not None or bool(self.scoped)

    def identify(self, authorization: str | None) -> Caller | None:
        """The caller an Authorization header names; None when a token is required and this is not one."""
        if not self.required:
            return OPERATOR
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        given = given.strip()
        operator = self.api_token is not None and hmac.compare_digest(given.encode(), self.api_token.encode())
        digest = sha256_hex(given).encode()
        found: Requester | None = None
        for scoped in self.scoped:  # every entry is compared: the time taken does not tell which matched
            if hmac.compare_digest(digest, scoped.token_sha256.encode()):
                found = scoped.requester
        if operator:
            return OPERATOR
        return Caller(found) if found is not None else None


def bind_requester(body: dict[str, Any], caller: Caller) -> dict[str, Any]:
    """The body as `caller` may send it: a requester-bound caller acts as its own requester.

    The operator's body is left as it is (it may name any requester). A bound caller's body may
    leave `requester` out or name the caller's own session key; naming another raises Forbidden.
    """
    if caller.requester is None:
        return body
    own = caller.requester
    named = parse_requester(body.get("requester"))
    if named is not None and (named.session_key != own.session_key or
                              (body["requester"].get("sandboxed") is not None and named.sandboxed != own.sandboxed)):
        raise Forbidden(f"this credential acts as requester {_shown(own)}; the request names {_shown(named)}, "
                        "which it may not act as (leave requester out)")
    return {**body, "requester": {"sessionKey": own.session_key, "sandboxed": own.sandboxed}}


def _shown(requester: Requester) -> str:
    key = requester.session_key if len(requester.session_key) <= 200 else requester.session_key[:200] + "…"
    return repr(key) + (" (sandboxed)" if requester.sandboxed else "")


def new_token(requester: str, *, sandboxed: bool = False) -> dict[str, str]:
    """A fresh token for `requester`, its sha256, and the TOML entry that grants it."""
    key = check_session_key(requester, field="requester")
    token = secrets.token_urlsafe(32)
    digest = sha256_hex(token)
    quoted = json.dumps(key, ensure_ascii=False).replace("\x7f", "\\u007f")  # a TOML basic string too
    toml = (f'[[auth.tokens]]\ntoken_sha256 = "{digest}"\nrequester = {quoted}\n'
            f"sandboxed = {'true' if sandboxed else 'false'}\n")
    return {"token": token, "tokenSha256": digest, "requester": key, "toml": toml}
