"""Every door is made from the methods' declarations (sessionsearch/protocol/): a field declared once
is taken, described and refused alike by HTTP, the OpenAPI document, the MCP tools and Python."""

from __future__ import annotations

import pytest

from sessionsearch.api.mcp_server import UI_ONLY, input_schema
from sessionsearch.api.openapi import REQUESTS, openapi_document
from sessionsearch.errors import InvalidRequest
from sessionsearch.protocol import METHODS, SearchParams


def test_the_document_lists_exactly_the_fields_each_declaration_takes():
    paths = openapi_document()["paths"]
    for name, method in METHODS.items():
        body = paths[f"/v1/{name}"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert set(body["properties"]) == set(method.params.wire_fields()) == set(REQUESTS[name]["properties"]), name
        assert body["additionalProperties"] is False


def test_the_mcp_tools_take_the_declared_fields_with_the_declared_descriptions():
    for tool in ("sessions.search", "sessions.history", "sessions.list"):
        params = METHODS[tool].params
        schema = input_schema(tool)
        assert set(schema["properties"]) == set(params.wire_fields()) - set(UI_ONLY), tool
        for field in params.model_fields.values():
            if field.alias in schema["properties"] and field.alias != "requester":
                assert schema["properties"][field.alias]["description"] == field.description, (tool, field.alias)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_refuses_an_unknown_field_by_its_name_before_anything_else(name):
    with pytest.raises(InvalidRequest) as caught:
        METHODS[name].params.of({"colour": None, "sessionKey": 5, "query": 5})
    assert caught.value.message == "unknown field 'colour'" and caught.value.field == "colour"


def test_a_request_built_in_python_is_checked_as_the_wire_body_is():
    for build in (lambda: SearchParams(query="loan", limit=26), lambda: SearchParams.of({"query": "loan", "limit": 26})):
        with pytest.raises(InvalidRequest) as caught:
            build()
        assert (caught.value.message, caught.value.field) == ("limit must be between 1 and 25", "limit")
    params = SearchParams(query="loan", sessionKeys=["agent:main:a", "agent:main:a"], since="2026-01-01")
    assert params.session_keys == ["agent:main:a"] and params.since == 1_767_225_600_000
