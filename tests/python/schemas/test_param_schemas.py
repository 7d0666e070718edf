"""The JSON schemas (json_schemas/) and the C++ param parser agree on every case row.

Each row of tests/cases/*.json is {"op", "param", "status", "why"} plus, for bad rows, "field"
(a fragment the C++ message must contain) and, where a schema cannot express the rule (it relates
two fields: rank < rankSize, destRank != rank, vector length = rankSize, displacement sums),
"schema": "accepts": the schema must then accept the row while C++ rejects it, so the
disagreement is stated on the row instead of hiding.

The C++ verdicts come from the `collops_param_check` tool, found under $COLLOPS_BUILD_DIR
(default <repo>/build); without it the agreement tests are skipped with a message saying so.

Integers: C++ accepts only JSON integer literals, so 2.0 is rejected. JSON Schema's "integer"
matches 2.0 and no keyword can tell 2 from 2.0, so the schemas are validated here with a strict
integer type (a Python int that is not a bool); test_plain_validator_differs_only_on_floats
shows that this is the only difference from a stock draft 2020-12 validator.
"""

import copy
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator, validators
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from repo_paths import REPO as _REPO

REPO = Path(_REPO)
SCHEMA_DIR = REPO / "json_schemas"
CASE_DIR = REPO / "tests" / "cases"
COMMON = "common.schema.json"
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _strict_integer(checker, instance):
    return isinstance(instance, int) and not isinstance(instance, bool)


StrictValidator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer),
)


def _load_schema_files():
    return {p.name: json.loads(p.read_text()) for p in sorted(SCHEMA_DIR.glob("*.schema.json"))}


SCHEMA_FILES = _load_schema_files()
OP_SCHEMAS = {s["title"]: s for name, s in SCHEMA_FILES.items() if name != COMMON}


def _validators(cls):
    """Validator per op name. `$schema` is dropped from the in-memory copies because jsonschema
    picks the validator class from it when it follows a $ref into another file, which would
    silently swap StrictValidator for the stock draft 2020-12 class."""
    stripped = {}
    for name, schema in SCHEMA_FILES.items():
        schema = copy.deepcopy(schema)
        schema.pop("$schema", None)
        stripped[name] = schema
    registry = Registry().with_resources(
        (name, DRAFT202012.create_resource(s)) for name, s in stripped.items()
    )
    # Each op's schema is entered by its name, as a file is, so that it is a resource of the
    # dynamic scope: common.schema.json's "$dynamicRef": "#backend" then finds the op's own
    # "backend" anchor where it has one (linear_parallel.schema.json adds ATB's "lcoc", "mc2").
    return {
        s["title"]: cls({"$ref": name}, registry=registry)
        for name, s in stripped.items()
        if name != COMMON
    }


STRICT = _validators(StrictValidator)
PLAIN = _validators(Draft202012Validator)


def _load_rows():
    rows = []
    for path in sorted(CASE_DIR.glob("*.json")):
        for index, row in enumerate(json.loads(path.read_text())):
            row = dict(row)
            row["_id"] = f"{path.stem}[{index}] {row['op']}: {row['why']}"
            rows.append(row)
    return rows


ROWS = _load_rows()


def _build_dir():
    return Path(os.environ.get("COLLOPS_BUILD_DIR", REPO / "build"))


def _run_param_check(requests):
    tool = _build_dir() / "tests" / "collops_param_check"
    if not tool.exists():
        pytest.skip(
            f"{tool} not found: build it (ninja collops_param_check) or set "
            "COLLOPS_BUILD_DIR to the build directory that holds tests/"
        )
    out = subprocess.run(
        [str(tool)],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    results = json.loads(out.stdout)
    assert len(results) == len(requests)
    return results


@pytest.fixture(scope="module")
def cpp_verdicts():
    results = _run_param_check([{"op": r["op"], "param": r["param"]} for r in ROWS])
    return {row["_id"]: result for row, result in zip(ROWS, results)}


def _has_integral_float(value):
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, list):
        return any(_has_integral_float(v) for v in value)
    if isinstance(value, dict):
        return any(_has_integral_float(v) for v in value.values())
    return False


def _floats_to_ints(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_floats_to_ints(v) for v in value]
    if isinstance(value, dict):
        return {k: _floats_to_ints(v) for k, v in value.items()}
    return value


def _properties(op):
    """Keys the op's schema declares: its own plus the common ones it $refs."""
    schema = OP_SCHEMAS[op]
    assert schema["$ref"] == COMMON, f"{op}'s schema must $ref {COMMON}"
    return set(SCHEMA_FILES[COMMON]["properties"]) | set(schema.get("properties", {}))


# --- the schema files themselves ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCHEMA_FILES))
def test_schema_is_valid_draft_2020_12(name):
    schema = SCHEMA_FILES[name]
    assert schema.get("$schema") == DRAFT
    Draft202012Validator.check_schema(schema)
    if name != COMMON:
        # additionalProperties does not see the properties a $ref evaluates; unevaluated does.
        assert schema.get("unevaluatedProperties") is False
        assert "additionalProperties" not in schema


def test_every_op_has_a_schema_and_good_and_bad_rows():
    ops_in_rows = {r["op"] for r in ROWS}
    assert set(OP_SCHEMAS) == ops_in_rows, "schema titles and the ops of the case rows differ"
    for op in sorted(OP_SCHEMAS):
        statuses = {r["status"] for r in ROWS if r["op"] == op}
        assert statuses == {0, 1}, f"{op} needs at least one good and one bad row"
    for r in ROWS:
        assert r["status"] in (0, 1), r["_id"]
        assert r["why"], r["_id"]
        if r["status"] != 0:
            assert r.get("field"), f"bad row without a field: {r['_id']}"
        assert r.get("schema") in (None, "accepts"), r["_id"]
        if r.get("schema") == "accepts":
            assert r["status"] != 0, f"'schema: accepts' marks a row C++ rejects: {r['_id']}"


def test_every_registered_op_has_a_schema():
    # The tool's message for an unknown op lists every registered op.
    [result] = _run_param_check([{"op": "NoSuchOperation", "param": {"rankSize": 1}}])
    assert result["status"] != 0
    match = re.search(r"\(registered: ([^)]*)\)", result["message"])
    assert match, result["message"]
    registered = {name.strip() for name in match.group(1).split(",")}
    assert registered == set(OP_SCHEMAS)


def test_schema_keys_are_the_cpp_keys():
    """Every key the C++ struct visits is in the schema and vice versa (the unknown-key message
    lists the keys the parser knows)."""
    results = _run_param_check(
        [{"op": op, "param": {"rankSize": 1, "noSuchKey": 0}} for op in sorted(OP_SCHEMAS)]
    )
    for op, result in zip(sorted(OP_SCHEMAS), results):
        match = re.search(r"unknown param \"noSuchKey\" \(known: ([^)]*)\)", result["message"])
        assert match, f"{op}: {result['message']}"
        known = {k.strip() for k in match.group(1).split(",")}
        assert known == _properties(op), op


# --- every row ------------------------------------------------------------------------------


@pytest.mark.parametrize("row", ROWS, ids=[r["_id"] for r in ROWS])
def test_schema_and_cpp_agree(row, cpp_verdicts):
    cpp = cpp_verdicts[row["_id"]]
    schema_accepts = STRICT[row["op"]].is_valid(row["param"])
    assert cpp["status"] == row["status"], f"C++ says {cpp['name']}: {cpp['message']}"
    if row.get("schema") == "accepts":
        assert schema_accepts, (
            "row says the schema cannot express this rule, yet it rejects: "
            + "; ".join(e.message for e in STRICT[row["op"]].iter_errors(row["param"]))
        )
    else:
        errors = [e.message for e in STRICT[row["op"]].iter_errors(row["param"])]
        assert schema_accepts == (row["status"] == 0), (
            f"schema {'accepts' if schema_accepts else 'rejects: ' + '; '.join(errors)}, "
            f"C++ says {cpp['name']}: {cpp['message']}"
        )
    if row["status"] != 0:
        assert cpp["message"], "a rejection must say why"
        assert row["field"] in cpp["message"], (
            f"the message does not name {row['field']!r}: {cpp['message']}"
        )
    else:
        assert cpp["message"] == ""


def test_plain_validator_differs_only_on_floats():
    """A stock draft 2020-12 validator takes 2.0 for an integer; writing those floats as ints gives
    exactly the strict verdict. So the strict type is needed, and it changes nothing else."""
    float_rows = [r for r in ROWS if _has_integral_float(r["param"])]
    assert float_rows, "the rows must cover integer fields written as 2.0"
    lenient = 0
    for r in ROWS:
        plain = PLAIN[r["op"]].is_valid(r["param"])
        if r in float_rows:
            assert plain == STRICT[r["op"]].is_valid(_floats_to_ints(r["param"])), r["_id"]
            lenient += plain and not STRICT[r["op"]].is_valid(r["param"])
        else:
            assert plain == STRICT[r["op"]].is_valid(r["param"]), r["_id"]
    assert lenient > 0, "no row shows the stock validator accepting 2.0"
