"""What every request declaration shares: the wire rules, the field types and their JSON Schemas.

A request is a pydantic model whose fields are camelCase on the wire (aliases) and snake_case in
Python. Each field type runs the check the service has always run (values.py, keys.py, search/*)
as its validator, so a refusal raises InvalidRequest with the same text and field as before: an
exception that is not a ValueError passes through pydantic as it is. Each type also carries the
JSON Schema the OpenAPI document and the MCP tool schemas are made of (`WithJsonSchema`).

The wire rules (`Params`): a body must be an object; an unknown field is refused, even a null one;
`null` stands for an absent optional field (except where a model says a null means something).
A field declared with `required()` is validated when absent too (its check names what is missing)
and is listed as required in the schema.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationInfo, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

from ..errors import InvalidRequest
from ..identity import Requester, parse_requester
from ..keys import check_agent_id, check_session_key
from ..search.scope import COMBINED, SessionScope, parse_scope
from ..search.timerange import ISO_PATTERN, parse_instant
from ..session_meta import KINDS
from ..transcript.events import MAX_TS_MS, MIN_TS_MS
from ..values import check_name, optional_text

# The end of the text: `$` in a pattern also matches before a final newline in Python's re, which
# schema tools use, and would let "main\n" pass for an agent id.
END = "(?![\\s\\S])"


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


STRING: dict[str, Any] = {"type": "string"}
NULLABLE_STRING: dict[str, Any] = {"type": ["string", "null"]}
# keys, ids, labels and roles are stored as columns: a NUL (U+0000) in one is refused (values.py)
NO_NUL = f"^[^\\x00]*{END}"
ID_SCHEMA: dict[str, Any] = {"type": "string", "minLength": 1, "pattern": NO_NUL}
NAME_SCHEMA: dict[str, Any] = {"type": ["string", "null"], "pattern": NO_NUL}
AGENT_ID_SCHEMA: dict[str, Any] = {"type": "string", "pattern": f"^[A-Za-z0-9_-]{{1,64}}{END}"}
SESSION_KEY_SCHEMA: dict[str, Any] = {
    "type": "string", "maxLength": 512,
    "pattern": "^(?![\\s\\S]*\\x00)(?:agent:[A-Za-z0-9_-]{1,64}:[\\s\\S]|(?!agent:)[\\s\\S]*\\S)",
    "description": "agent:<agentId>:<rest>; a key without the prefix belongs to agent main"}
REQUESTER_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["sessionKey"],
    "properties": {"sessionKey": SESSION_KEY_SCHEMA, "sandboxed": {"type": ["boolean", "null"]}}}
BOOLEAN_SCHEMA: dict[str, Any] = {"type": ["boolean", "null"]}  # every boolean of a request is optional
INSTANT_FORMS = ("epoch milliseconds, or an ISO 8601 date (midnight UTC) or date and time (Z, an offset, "
                 "or none for UTC)")


@cache
def wire_name(attribute: str) -> str:
    """A field's name on the wire: its attribute's, in camelCase."""
    return to_camel(attribute)


def _field(info: ValidationInfo) -> str:
    assert info.field_name is not None  # field validators always have one
    return wire_name(info.field_name)


def required(**options: Any) -> Any:
    """A field the method cannot do without: its check runs on an absent value too, and says so."""
    return Field(None, validate_default=True, **options)


def checked(check: Callable[[Any, str], Any]) -> PlainValidator:
    """A field's validator: `check(value, its wire name)`, which answers the value to keep."""
    return PlainValidator(lambda value, info: check(value, _field(info)))


def _session_key(value: object, field: str) -> str:
    return check_session_key(value, field=field)


def _agent_id(value: object, field: str) -> str | None:
    return None if value is None else check_agent_id(value, field=field)


def _optional_key(value: object, field: str) -> str | None:
    return None if value is None else check_session_key(value, field=field)


def _flag(value: object, field: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise InvalidRequest(f"{field} must be a boolean", field=field)
    return value


def _requester(value: object, field: str) -> Requester | None:
    return parse_requester(value)


def _instant(value: object, field: str) -> int | None:
    return parse_instant(value, field)


def integer(lo: int, hi: int | None) -> Callable[[Any, str], int | None]:
    """The check of an integer field within lo..hi. A float with no fraction (541.0) is that integer,
    as JSON Schema counts it; fractions, NaN, infinities, booleans and strings are refused."""
    span = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"

    def check(value: Any, field: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidRequest(f"{field} must be an integer", field=field)
        if value < lo or (hi is not None and value > hi):
            raise InvalidRequest(f"{field} must be {span}", field=field)
        return value
    return check


def choice(*values: str, said: str) -> Callable[[Any, str], str | None]:
    """The check of a field that takes one of `values`; `said` is how the error lists them."""
    def check(value: Any, field: str) -> str | None:
        if value is not None and value not in values:
            raise InvalidRequest(f"{field} must be {said}", field=field)
        return value  # type: ignore[no-any-return]
    return check


def enum_schema(*values: str, description: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"enum": [*values, None]}
    return schema if description is None else {**schema, "description": description}


def limit_schema(maximum: int) -> dict[str, Any]:
    return nullable({"type": "integer", "minimum": 1, "maximum": maximum})


SessionKey = Annotated[str, checked(_session_key), WithJsonSchema(SESSION_KEY_SCHEMA)]
OptionalKey = Annotated[str | None, checked(_optional_key), WithJsonSchema(nullable(SESSION_KEY_SCHEMA))]
AgentId = Annotated[str | None, checked(_agent_id), WithJsonSchema(nullable(AGENT_ID_SCHEMA))]
Id = Annotated[str | None, checked(check_name), WithJsonSchema(nullable(ID_SCHEMA))]
Text = Annotated[str | None, checked(optional_text), WithJsonSchema(NULLABLE_STRING)]
Flag = Annotated[bool | None, checked(_flag), WithJsonSchema(BOOLEAN_SCHEMA)]
RequesterField = Annotated[Requester | None, checked(_requester), WithJsonSchema(nullable(REQUESTER_SCHEMA))]
INSTANT_SCHEMA: dict[str, Any] = {"anyOf": [{"type": "integer", "minimum": MIN_TS_MS, "maximum": MAX_TS_MS},
                                            {"type": "string", "pattern": ISO_PATTERN}]}
# a time bound: epoch ms or ISO 8601 on the wire, epoch ms in Python
Instant = Annotated[int | None, checked(_instant), WithJsonSchema(nullable(INSTANT_SCHEMA))]


def _scope(value: Any, info: ValidationInfo) -> SessionScope | None:
    scope = parse_scope(value)
    if scope is not None and (info.data.get("agent_id") is not None or info.data.get("session_keys") is not None):
        raise InvalidRequest(COMBINED, field="scope")
    return scope


SCOPE_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "description": "sessions selected by what the session list knows; every filter given must hold",
    "properties": {
        "agentIds": {"type": ["array", "null"], "items": AGENT_ID_SCHEMA, "description": "only these agents' sessions"},
        "label": {**NULLABLE_STRING, "description": "the label, equal ignoring case"},
        "search": {**NULLABLE_STRING, "description": "title search: words of the label or display name, the "
                                                     "last a prefix"},
        "kinds": {"type": ["array", "null"], "items": {"enum": list(KINDS)}, "description": "only these kinds"},
        "excludeSubagents": BOOLEAN_SCHEMA,
        "excludeCron": BOOLEAN_SCHEMA,
        "excludeSystem": BOOLEAN_SCHEMA,
        "group": {**NULLABLE_STRING, "description": "the custom sidebar group"},
        "spawnedBy": {**nullable(SESSION_KEY_SCHEMA), "description": "a session key: the sessions it spawned, "
                                                                     "transitively"},
        "activeMinutes": {"type": ["integer", "null"], "minimum": 1,
                          "description": "last append or metadata change within this many minutes"},
        "palette": {**BOOLEAN_SCHEMA, "description": "the Control UI palette's scope"},
    },
}


def scope_excludes(*fields: str) -> dict[str, Any]:
    """The schema's rule that `scope` is never given beside one of `fields` (each as its wire type)."""
    kinds = {"agentId": "string", "sessionKeys": "array"}
    return {"not": {"anyOf": [{"required": ["scope", f], "properties": {
        "scope": {"type": "object"}, f: {"type": kinds[f]}}} for f in fields]}}


# the session list's filters (search/scope.py); declared after agentId and sessionKeys, which it excludes
Scope = Annotated[SessionScope | None, PlainValidator(_scope), WithJsonSchema(nullable(SCOPE_SCHEMA))]


class Params(BaseModel):
    """A method's request: built from the wire body (`of`) or in Python with the wire's names."""

    model_config = ConfigDict(alias_generator=to_camel, frozen=True, arbitrary_types_allowed=True)

    # null is absent for every field (the default); a model where a null means something says which do
    NULL_IS_ABSENT: ClassVar[bool] = True
    # what the JSON Schema adds at the top, for rules joining fields
    SCHEMA_EXTRA: ClassVar[dict[str, Any]] = {}

    @classmethod
    def wire_fields(cls) -> frozenset[str]:
        return _wire_fields(cls)

    @model_validator(mode="before")
    @classmethod
    def _wire_rules(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise InvalidRequest("request body must be a JSON object")
        allowed = cls.wire_fields()
        for name in data:
            if name not in allowed:
                unknown = sorted(set(data) - allowed)[0]
                raise InvalidRequest(f"unknown field {unknown!r}", field=unknown)
        data = cls.check_body(data)
        if cls.NULL_IS_ABSENT:
            data = {k: v for k, v in data.items() if v is not None}
        return data

    @classmethod
    def check_body(cls, body: dict[str, Any]) -> dict[str, Any]:
        """Rules on the body as sent, before its fields are checked (a model's own)."""
        return body

    @classmethod
    def of(cls, body: object) -> Self:
        """The request a wire body makes; raises InvalidRequest naming the field at fault."""
        return cls.model_validate(body)


@cache
def _wire_fields(cls: type[Params]) -> frozenset[str]:
    return frozenset(field.alias or name for name, field in cls.model_fields.items())
