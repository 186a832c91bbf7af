"""An object's undeclared keys, where its schema has `anyOf`/`allOf`/`oneOf` branches: the keys the branches
declare are let in, and no other. Skipping the check for any such object let `{"filter": {"email": …, "$where":
…}}` through again where `anyOf` only says which of the declared keys is required (the common "by id or by
email" lookup)."""

from __future__ import annotations

from gateway.pipeline.tool_arguments import argument_problem

BY_ID_OR_EMAIL = {"type": "object", "properties": {"id": {"type": "string"}, "email": {"type": "string"}},
                  "anyOf": [{"required": ["id"]}, {"required": ["email"]}]}


def test_a_key_no_branch_declares_is_refused_where_anyof_only_requires_declared_keys():
    schema = {"type": "object", "properties": {"filter": BY_ID_OR_EMAIL}}
    assert argument_problem({"filter": {"email": "a@example.com"}}, schema) is None
    assert argument_problem({"filter": {"email": "a@example.com", "$where": "1"}}, schema) == \
        "'filter.$where' is not a property 'filter' declares"


def test_keys_the_branches_declare_are_let_in_and_no_other():
    lookup = {"type": "object", "properties": {"kind": {"type": "string"}},
              "oneOf": [{"properties": {"id": {"type": "string"}}}, {"properties": {"email": {"type": "string"}}}]}
    schema = {"type": "object", "properties": {"lookup": lookup}}
    assert argument_problem({"lookup": {"kind": "order", "email": "a@example.com"}}, schema) is None
    assert argument_problem({"lookup": {"kind": "order", "$where": "1"}}, schema) == \
        "'lookup.$where' is not a property 'lookup' declares"


def test_an_object_whose_keys_come_from_where_this_does_not_follow_takes_any():
    for elsewhere in ({"$ref": "#/$defs/x"}, {"anyOf": [{"$ref": "#/$defs/x"}]},
                      {"allOf": [{"additionalProperties": True}]}, {"if": {"required": ["id"]}},
                      {"anyOf": [{"patternProperties": {"^x-": {}}}]}):
        schema = {"type": "object", "properties": {"filter": {"type": "object", "properties": {"id": {}}, **elsewhere}}}
        assert argument_problem({"filter": {"id": "1", "other": 2}}, schema) is None, elsewhere
