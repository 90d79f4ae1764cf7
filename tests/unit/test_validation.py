"""The compiled validators (fastjsonschema) that judge request bodies first: they never accept what jsonschema
refuses, and fill in the same defaults."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import fastjsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import validation
from shared.api.reference import auth_v1, object_v1, queue_v1
from tests.conftest import task_definition
from tests.schema_strategies import schema_strategy

INPUTS = sorted(
    {route.input for api in (queue_v1.api, object_v1.api, auth_v1.api) for route in api.routes if route.input}
)


def strict_errors(name: str, instance: object) -> list[str]:
    """jsonschema's verdict alone."""
    return validation.reference_errors(name, copy.deepcopy(instance))


def fast_accepts(name: str, instance: object) -> bool:
    try:
        validation.compiled_validator(name, False)(copy.deepcopy(instance))
        return True
    except fastjsonschema.JsonSchemaException:
        return False


def test_every_request_schema_compiles_and_the_formats_used_are_all_checked():
    assert INPUTS
    for name in INPUTS:
        validation.compiled_validator(name, True)
    used = set()
    for path in Path(validation.SCHEMA_DIR.parent).rglob("*.yml"):
        used.update(re.findall(r"format:\s*['\"]?([a-z0-9-]+)", path.read_text()))
    assert used <= set(validation.FORMATS_USED)


TRICKY = {
    "create-task-request": [
        task_definition(scopes=["queue:x\n"]),  # `$` before a final newline: refused by JavaScript's meaning
        task_definition(scopes=["queue:\u0663"]),
        task_definition(taskQueueId="prov/wt\n"),
        task_definition(deadline="2026-11-23T10:00:00.000Z\n"),
        task_definition(created="0000-01-01T00:00:00.000Z"),
        task_definition(retries=True),
        task_definition(retries=1.5),
        task_definition(priority="urgent"),
        task_definition(metadata={"name": "n", "description": "d", "owner": "o@example.com", "source": "not a uri"}),
        task_definition(routes=["a", "a"]),
        task_definition(extra_field=1),
        task_definition(dependencies=["x" * 23]),
        task_definition(tags={"k": 1}),
    ],
}


@pytest.mark.parametrize(("name", "index"), [(n, i) for n, cases in TRICKY.items() for i in range(len(cases))])
def test_what_jsonschema_refuses_the_fast_path_refuses(name, index):
    instance = TRICKY[name][index]
    if strict_errors(name, instance):
        assert not fast_accepts(name, instance)
    assert validation.errors_of(name, copy.deepcopy(instance), fill_defaults=True) == (
        []
        if not strict_errors(name, instance)
        else validation.errors_of(name, copy.deepcopy(instance), fill_defaults=True)
    )


def test_defaults_are_filled_as_jsonschema_fills_them():
    body = task_definition()
    fast = copy.deepcopy(body)
    validation.compiled_validator("create-task-request", True)(fast)
    slow = copy.deepcopy(body)
    assert validation.reference_errors("create-task-request", slow, fill_defaults=True) == []
    assert fast == slow and fast != body
    again = copy.deepcopy(body)
    validation.compiled_validator("create-task-request", True)(again)
    fast["routes"].append("x")
    assert again["routes"] == []  # a default is a fresh value each time, never shared between bodies


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_bodies_get_the_same_verdict(data):
    name = data.draw(st.sampled_from(INPUTS))
    schema = validation.schema(name)
    instance = data.draw(
        st.one_of(
            schema_strategy(name),
            st.dictionaries(
                st.sampled_from(sorted(schema.get("properties", {"x": {}}))),
                st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5), st.lists(st.text(max_size=3))),
            ),
        )
    )
    if strict_errors(name, instance):
        assert not fast_accepts(name, instance)
