"""Hypothesis strategies for the bodies the official schemas describe (hypothesis-jsonschema over the inlined
schemas): the unit tier's validation tests and the acceptance tier's fuzz test share them."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from shared import validation
from shared.api.openapi import inline


def schema_strategy(name: str) -> st.SearchStrategy[Any]:
    return from_schema(inline(validation.schema(name), name))
