"""Validation against the official Taskcluster Queue schemas (vendored verbatim in `shared/schemas/`).

The YAML files are loaded as Taskcluster loads them: `{$const: key}` replaced from `constants.yml`, each file
published as `<base>/schemas/queue/v1/<name>.json#`, checked as JSON-Schema draft-06. Request validation fills
in `default` values first, as Taskcluster's Ajv (`useDefaults`) does: createTask's idempotency depends on it.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import fastjsonschema
import yaml
from jsonschema import Draft6Validator, validators
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT6

from shared import timeutil

SCHEMA_DIR = Path(__file__).parent / "schemas" / "queue"
EXT_DIR = Path(__file__).parent / "schemas" / "ext"
OBJECT_DIR = Path(__file__).parent / "schemas" / "object" / "v1"
AUTH_DIR = Path(__file__).parent / "schemas" / "auth" / "v1"
INDEX_DIR = Path(__file__).parent / "schemas" / "index" / "v1"
PURGE_CACHE_DIR = Path(__file__).parent / "schemas" / "purge-cache" / "v1"
ROOT = "https://tc-azure-queue.invalid/schemas/"  # served at <rootUrl>/schemas/ (shared/api/discovery.py)
BASE = ROOT + "queue/v1/"
MAX_REPORTED_ERRORS = 10
# The formats the schemas use (a test checks there are no others).
FORMATS_USED = ("date-time", "uri", "regex", "hostname", "ipv4", "ipv6")

# One media type as HTTP headers carry it (RFC 9110 8.3.1: `type/subtype`, then `; name=value` parameters whose
# value is a token or a quoted string): what a `contentType` of an artifact or an object must be, since downloads
# serve it as a header. A list (`text/plain;x=y, text/html`) is refused: browsers may take its last type.
TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"  # an HTTP token (RFC 9110 5.6.2)
_QUOTED = r'"(?:[\t\x20\x21\x23-\x5b\x5d-\x7e]|\\[\t\x20-\x7e])*"'
MEDIA_TYPE = re.compile(rf"{TOKEN}/{TOKEN}(?:[ \t]*;[ \t]*(?:{TOKEN}=(?:{TOKEN}|{_QUOTED}))?)*")
# An attachment's Content-Disposition (RFC 6266 4.1): `attachment`, then `; name=value` parameters, nothing else
# (a browser reads `attachment=x`, `attachment x` or `attachment"` as no disposition it knows, and renders inline).
ATTACHMENT = re.compile(
    rf"[ \t]*attachment(?:[ \t]*;[ \t]*{TOKEN}[ \t]*=[ \t]*(?:{TOKEN}|{_QUOTED}))*[ \t]*;?[ \t]*", re.I
)


def _expand_consts(node: Any, constants: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if set(node) == {"$const"}:
            key = node["$const"]
            if key not in constants:
                raise KeyError(f"unknown $const {key!r}")
            return _expand_consts(copy.deepcopy(constants[key]), constants)
        return {k: _expand_consts(v, constants) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand_consts(v, constants) for v in node]
    return node


@functools.cache
def _registry() -> tuple[Registry, dict[str, dict[str, Any]]]:
    constants = yaml.safe_load((SCHEMA_DIR / "constants.yml").read_text())
    schemas: dict[str, dict[str, Any]] = {}
    registry: Registry = Registry()
    # queue: the official schemas (v1) and this service's own additions (ext), by their names; the Object
    # service's, written for this project, as `object/<name>`; the Auth service's (some written for this
    # project, the rest official), the Index's and Purge-cache's (official) as `<service>/<name>`, each with its
    # service's constants over the queue's.
    files = [
        *((p, p.stem, BASE) for p in sorted((SCHEMA_DIR / "v1").glob("*.yml"))),
        *((p, p.stem, BASE) for p in sorted(EXT_DIR.glob("*.yml"))),
        *((p, f"object/{p.stem}", ROOT + "object/v1/") for p in sorted(OBJECT_DIR.glob("*.yml"))),
        *((p, f"auth/{p.stem}", ROOT + "auth/v1/") for p in sorted(AUTH_DIR.glob("*.yml"))),
        *((p, f"index/{p.stem}", ROOT + "index/v1/") for p in sorted(INDEX_DIR.glob("*.yml"))),
        *((p, f"purge-cache/{p.stem}", ROOT + "purge-cache/v1/") for p in sorted(PURGE_CACHE_DIR.glob("*.yml"))),
    ]
    for path, name, base in files:
        own = path.parent.parent / "constants.yml"
        service = {**constants, **yaml.safe_load(own.read_text())} if own.exists() and base != BASE else constants
        schema = _expand_consts(yaml.safe_load(path.read_text()), service)
        schema.pop("$schema", None)  # a pointer to draft-06, which is what we validate with
        uri = f"{base}{path.stem}.json"
        schema["$id"] = uri + "#"
        schemas[name] = schema
        registry = registry.with_resource(uri, Resource.from_contents(schema, default_specification=DRAFT6))
    return registry, schemas


@functools.lru_cache(maxsize=512)
def ecma_pattern(pattern: str) -> re.Pattern[str]:
    """A schema's `pattern` compiled with JavaScript's meaning, as Taskcluster's Ajv applies it: `$` matches only
    at the very end (Python's `$` also matches before a final newline, so `^[\\x20-\\x7e]*$` would accept a
    scope ending in `\\n`), and `\\d`, `\\w` are ASCII."""
    return re.compile(ecma_source(pattern), re.ASCII)


def ecma_source(pattern: str) -> str:
    """`pattern` with `$` outside character classes as `\\Z` (see ecma_pattern; compile it with re.ASCII)."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            char = r"\Z"
        out.append(char)
        i += 1
    return "".join(out)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not ecma_pattern(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def schema(name: str) -> dict[str, Any]:
    """The schema `name` as it is validated with (constants expanded, `$id` set); a copy."""
    schemas = _registry()[1]
    if name not in schemas:
        raise KeyError(f"no schema named {name!r}")
    return copy.deepcopy(schemas[name])


def schema_names() -> list[str]:
    return sorted(_registry()[1])


METASCHEMA = "common/metaschema.json"


@functools.cache
def published() -> dict[str, dict[str, Any]]:
    """Every schema by the path it is served at under `<rootUrl>/schemas/` (`queue/v1/task.json`, ...), as
    Taskcluster serves them: `$id` (here under ROOT, which the server replaces with its own rootUrl) and
    `$schema` the metaschema, served beside them."""
    out: dict[str, dict[str, Any]] = {}
    for found in _registry()[1].values():
        path = found["$id"].removeprefix(ROOT).removesuffix("#")
        out[path] = {"$schema": ROOT + METASCHEMA + "#", **found}
    meta = yaml.safe_load((SCHEMA_DIR.parent / "common" / "metaschema.yml").read_text())
    out[METASCHEMA] = {**meta, "$id": ROOT + METASCHEMA + "#"}
    return out


def _with_defaults(validator_class: Any) -> Any:
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator: Any, properties: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
        if validator.is_type(instance, "object"):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(validator_class, {"properties": set_defaults})


_StrictValidator = validators.extend(Draft6Validator, {"pattern": _pattern})
_FORMATS = copy.deepcopy(Draft6Validator.FORMAT_CHECKER)
_rfc3339 = _FORMATS.checkers["date-time"][0]


def _date_time(instance: object) -> bool:
    """RFC 3339, and a date the queue can work with: in UTC it falls within years 1 to 9999 (an offset can take
    `0001-01-01T00:00:00+01:00` out of them)."""
    if not isinstance(instance, str):
        return True
    if not _rfc3339(instance):
        return False
    timeutil.parse(instance)
    return True


_FORMATS.checks("date-time", raises=(ValueError, OverflowError))(_date_time)
# ajv-formats' hostname (Taskcluster validates with Ajv): 253 characters at most, labels of letters, digits and
# inner hyphens; an IPv4 address is one too.
_HOSTNAME = re.compile(
    r"^(?=.{1,253}\.?$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-0-9a-z]{0,61}[0-9a-z])?)*\.?$",
    re.IGNORECASE,
)


def _hostname(instance: object) -> bool:
    return not isinstance(instance, str) or _HOSTNAME.match(instance) is not None


_FORMATS.checks("hostname")(_hostname)


_DefaultingValidator = _with_defaults(_StrictValidator)


@functools.cache
def _validator(name: str, fill_defaults: bool) -> Any:
    registry, schemas = _registry()
    if name not in schemas:
        raise KeyError(f"no schema named {name!r}")
    cls = _DefaultingValidator if fill_defaults else _StrictValidator
    return cls(schemas[name], registry=registry, format_checker=_FORMATS)


def _describe(error: ValidationError) -> str:
    where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"data{where}: {error.message}"


def _tag_errors(branch: list[ValidationError], depth: int) -> dict[Any, ValidationError]:
    """The branch's `enum`/`const` errors on properties of the instance, by property name."""
    return {
        e.absolute_path[depth]: e
        for e in branch
        if e.validator in ("enum", "const") and len(e.absolute_path) == depth + 1
    }


def _explain(error: ValidationError) -> list[ValidationError]:
    """The errors worth reporting for `error`. A oneOf/anyOf error ("not valid under any of the given schemas")
    is replaced by the errors of the branch the instance was meant for: the one whose tag property (the one most
    branches rule the instance out by, e.g. storageType) matched, else the one with the fewest errors. When
    every branch's tag mismatched, one error lists every allowed tag."""
    if error.validator not in ("oneOf", "anyOf") or not error.context:
        return [error]
    branches: dict[Any, list[ValidationError]] = {}
    for sub in error.context:
        branches.setdefault(sub.schema_path[0] if sub.schema_path else None, []).append(sub)
    depth = len(error.absolute_path)
    tagged = [_tag_errors(b, depth) for b in branches.values()]
    counts: dict[Any, int] = {}
    for found in tagged:
        for prop in found:
            counts[prop] = counts.get(prop, 0) + 1
    tag = max(counts, key=lambda p: counts[p]) if counts else None
    fitting = [b for b, found in zip(branches.values(), tagged, strict=True) if tag not in found]
    if fitting:
        return [e for sub in min(fitting, key=len) for e in _explain(sub)]
    allowed: list[Any] = []
    for found in tagged:
        mismatch = found[tag]
        values = mismatch.validator_value if mismatch.validator == "enum" else [mismatch.validator_value]
        allowed.extend(v for v in values if v not in allowed)
    first = tagged[0][tag]
    return [ValidationError(f"{first.instance!r} is not one of {allowed!r}", path=first.absolute_path)]


def _ecma_patterns(node: Any) -> Any:
    """A copy of a schema whose `pattern`s have JavaScript's meaning for a validator that compiles them with
    plain `re` (an inline ASCII flag, `$` as `\\Z`)."""
    if isinstance(node, dict):
        return {
            k: ("(?a)" + ecma_source(v) if k == "pattern" and isinstance(v, str) else _ecma_patterns(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_ecma_patterns(v) for v in node]
    return node


def _format_check(name: str) -> Callable[[object], bool]:
    """The format checker jsonschema uses for `name`, as a fastjsonschema custom format."""

    def check(instance: object) -> bool:
        try:
            return bool(_FORMATS.conforms(instance, name))
        except Exception:
            return False

    return check


@functools.cache
def compiled_validator(name: str, fill_defaults: bool) -> Callable[[Any], Any]:
    """`name` compiled to Python by fastjsonschema (about forty times faster than jsonschema on a task
    definition): the first judge of every request body. It only ever says "valid" for what jsonschema accepts too
    (patterns given JavaScript's meaning, every format the schemas use checked by jsonschema's own checker), so
    an accepted body costs microseconds and a refused one is explained by jsonschema, as before."""
    schemas = {found["$id"].removesuffix("#"): _ecma_patterns(found) for found in _registry()[1].values()}

    def resolve(uri: str) -> dict[str, Any]:
        return cast(dict[str, Any], schemas[uri.split("#", 1)[0]])

    return cast(
        Callable[[Any], Any],
        fastjsonschema.compile(
            resolve(_registry()[1][name]["$id"]),
            handlers={"https": resolve},
            formats={f: _format_check(f) for f in FORMATS_USED},
            use_default=fill_defaults,
        ),
    )


def errors_of(name: str, instance: Any, *, fill_defaults: bool = False) -> list[str]:
    """What is wrong with `instance` against schema `name` (empty when valid). May fill in defaults."""
    if name not in _registry()[1]:
        raise KeyError(f"no schema named {name!r}")
    try:
        compiled_validator(name, fill_defaults)(instance)
        return []
    except fastjsonschema.JsonSchemaException:
        return reference_errors(name, instance, fill_defaults=fill_defaults)  # jsonschema decides, and says why


def reference_errors(name: str, instance: Any, *, fill_defaults: bool = False) -> list[str]:
    """errors_of by jsonschema alone (the reference the compiled validators are held to)."""
    found = [e for error in _validator(name, fill_defaults).iter_errors(instance) for e in _explain(error)]
    found.sort(key=lambda e: list(e.absolute_path))
    return [_describe(e) for e in found[:MAX_REPORTED_ERRORS]]
