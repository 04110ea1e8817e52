"""JSON Schemas of the declarations, as the OpenAPI document and the MCP tool schemas give them.

pydantic generates them; this module only says how they read on the wire: no titles or defaults
(a null default is the wire's "absent"), every reference inlined (each schema stands alone in the
document), a literal as an `enum` or `const` of its values.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from .base import Params


class WireSchema(GenerateJsonSchema):
    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def literal_schema(self, schema: core_schema.LiteralSchema) -> JsonSchemaValue:
        values = list(schema["expected"])
        return {"const": values[0]} if len(values) == 1 else {"enum": values}

    def generate(self, schema: Any, mode: Any = "validation") -> JsonSchemaValue:
        out = super().generate(schema, mode)
        definitions = out.pop("$defs", {})
        wire: JsonSchemaValue = _strip(_inline(out, definitions))
        return wire


def _inline(value: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(definitions[ref.removeprefix("#/$defs/")], definitions)
        return {k: _inline(v, definitions) for k, v in value.items()}
    if isinstance(value, list):
        return [_inline(v, definitions) for v in value]
    return value


def _strip(value: Any) -> Any:
    """Without the titles pydantic gives models and TypedDicts."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "title" or not isinstance(v, str)}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


@cache
def request_schema(model: type[Params]) -> dict[str, Any]:
    """The JSON Schema of a request body: its fields, the ones required, nothing else (no unknown field)."""
    schema = model.model_json_schema(by_alias=True, schema_generator=WireSchema)
    schema.pop("description", None)
    schema["additionalProperties"] = False
    schema["required"] = [field.alias or name for name, field in model.model_fields.items() if field.validate_default]
    return {**schema, **model.SCHEMA_EXTRA}


@cache
def answer_schema(answer: Any) -> dict[str, Any]:
    """The JSON Schema of an answer (a TypedDict of wire names)."""
    schema: dict[str, Any] = TypeAdapter(answer).json_schema(schema_generator=WireSchema)
    return schema
