"""Every attack's options, defined once (miaflow/attacks/options.py): the schema's option
sections generated from the classes agree with their defaults and with what validation reports,
values are filled from params.yaml's overrides as the attacks read them, and the table of
docs/parameters.md is the one the classes give."""

from __future__ import annotations

import copy
import dataclasses
import typing

import jsonschema
import pytest
import yaml
from conftest import problems_of

from miaflow import config
from miaflow.attacks import schema
from miaflow.attacks.options import (
    MinKOptions,
    ModelRobustOptions,
    QueryAdvOptions,
    QueryNeighborOptions,
    QueryQrmOptions,
    value_type,
)
from miaflow.attacks.registry import ATTACKS, LLM

OWN = {name: a.options for name, a in ATTACKS.items() if a.options and not a.options_of}


@pytest.fixture
def params(repo, monkeypatch) -> dict:
    """The repository's params.yaml, read where the workflow reads it (its local dataset paths
    are relative to the repository)."""
    monkeypatch.chdir(repo)
    return yaml.safe_load((repo / "params.yaml").read_text())


def _section(full: dict, attack: str) -> dict:
    """The generated schema's section that holds `attack`'s entry."""
    if ATTACKS[attack].family == LLM:
        return full["properties"]["llm"]["properties"]["attack_options"]
    return full["properties"]["attack_options"]


# --- the classes and the schema agree ----------------------------------------------------------


def test_every_default_validates_against_its_generated_entry():
    """The defaults, written out in full, are a valid entry: schema and defaults agree."""
    full = config.schema()
    for name, options in OWN.items():
        defaults = {
            field.name: field.default
            for field in dataclasses.fields(options)
            if field.default is not None or field.metadata["nullable"]  # None: unset
        }
        entry = {**_section(full, name), "$defs": full["$defs"]}
        jsonschema.validate({name: defaults}, entry)


def test_params_yaml_holds_no_default_and_validates(params):
    assert params["attack_options"] == {} and params["llm"]["attack_options"] == {}
    assert config.validate(params)["attack_options"] == {}


def test_the_defaults_written_into_params_yaml_change_nothing(params):
    """Every attack's defaults written into params.yaml: valid, and the same effective options."""
    from miaflow.attacks.registry import attack_options

    written = copy.deepcopy(params)
    for name, options in OWN.items():
        values = {f.name: f.default for f in dataclasses.fields(options) if f.default is not None}
        key = ("llm", "attack_options") if ATTACKS[name].family == LLM else ("attack_options",)
        target = written
        for part in key:
            target = target[part]
        target[name] = values
    effective = config.validate(written)
    for name in ATTACKS:
        section = effective["llm"] if ATTACKS[name].family == LLM else effective
        assert attack_options(name, section["attack_options"]) == attack_options(name, {}), name


def test_field_schemas_follow_the_annotations():
    hints = typing.get_type_hints(QueryNeighborOptions)
    fields = {f.name: f for f in dataclasses.fields(QueryNeighborOptions)}
    assert schema.field_schema(fields["masked_lm"], hints["masked_lm"])["type"] == [
        "string",
        "null",
    ]  # `str | None` with nullable=True
    assert schema.field_schema(fields["queries_used"], hints["queries_used"]) == {
        "$ref": "#/$defs/queries_used"
    }  # shared: one definition, referred to
    assert schema.field_schema(fields["magnitude"], hints["magnitude"]) == {
        "type": "number",
        "exclusiveMinimum": 0,
        "description": "Noise magnitude λ (raw text: share of tokens refilled).",
    }
    full = config.schema()
    assert full["properties"]["attack_options"]["properties"]["learn-merge"] == {
        "type": "object",
        "additionalProperties": False,
        "properties": {"uld": {"enum": ["compat", "corrected"]}},  # a Literal
    }
    # two attacks with one class refer to one definition, named after the class
    llm_section = full["properties"]["llm"]["properties"]["attack_options"]["properties"]
    assert llm_section["llm-mink"] == llm_section["llm-minkpp"] == {"$ref": "#/$defs/min_k_options"}
    assert set(full["$defs"]["min_k_options"]["properties"]) == {"k", "compat"}
    assert full["$defs"]["queries_used"]["type"] == "integer"


def test_shared_definitions_match_their_fields_types_and_every_field_is_documented():
    for options in OWN.values():
        hints = typing.get_type_hints(options)
        for field in dataclasses.fields(options):
            assert field.metadata["doc"], f"{options.__name__}.{field.name}"
            if field.metadata["shared"] is not None:
                assert value_type(hints[field.name]) is field.metadata["shared"].kind


def test_generated_parts_replace_placeholders_only():
    blank = {
        "properties": {"attack_options": {"$comment": "x"}, "llm": {"properties": {}}},
        "$defs": {"attack_name": {"$comment": "x"}, "llm_attack_name": {"$comment": "x"}},
    }
    with pytest.raises(ValueError, match="llm.properties.attack_options must be a placeholder"):
        schema.completed(copy.deepcopy(blank))
    written = copy.deepcopy(blank)
    written["$defs"]["attack_name"] = {"enum": ["metric-loss"]}  # defined in the file too
    with pytest.raises(ValueError, match=r"\$defs.attack_name must be a placeholder"):
        schema.completed(written)


def test_the_docs_table_is_the_generated_one(repo):
    page = (repo / "docs" / "parameters.md").read_text()
    assert page == schema.documented(page), "run: python -m miaflow.attacks.schema"
    for name, options in OWN.items():
        for field in dataclasses.fields(options):
            assert f"| `{name}` | `{field.name}` |" in page


def test_the_table_gives_default_bounds_and_paper_value():
    rows = schema.options_table().splitlines()
    assert "| `query-qrm` | `epochs` | `10` | integer, 1 ≤ x ≤ 10,000 | `30` |" in "\n".join(rows)
    assert "| `llm-mink` | `k` | `0.2` | number, 0 < x ≤ 1 |  |" in "\n".join(rows)
    assert "| `query-adv` | `queries_used` | unset |" in "\n".join(rows)  # None: all queries


# --- filling from the overrides ----------------------------------------------------------------


def test_overrides_are_filled_in_and_cast_to_the_fields_type():
    filled = QueryAdvOptions.filled({"max_iter": 5, "boundary_eva_num": 7.0})
    assert (filled.max_iter, filled.max_eval, filled.boundary_eva_num) == (5, 200, 7)
    assert type(filled.boundary_eva_num) is int
    assert type(ModelRobustOptions.filled({"gamma": 3}).gamma) is float  # YAML's 3 is an int
    assert MinKOptions.filled({"compat": True}) == MinKOptions(k=0.2, compat=True)
    assert QueryNeighborOptions.filled({"masked_lm": None}).masked_lm is None
    with pytest.raises(ValueError, match=r"unknown options \['epoch'\]; accepted: \['cat"):
        QueryQrmOptions.filled({"epoch": 3})


def test_hopskipjumps_record_is_its_budget_alone():
    """The distances artifact records the six HopSkipJump settings, not queries_used (which only
    the score reads)."""
    assert QueryAdvOptions(queries_used=3).hopskipjump() == {
        "max_iter": 2,
        "max_eval": 200,
        "init_eval": 20,
        "init_size": 100,
        "boundary_eva_num": 50,
        "batch_size": 100,
    }


# --- what validation says ----------------------------------------------------------------------


def test_validation_names_the_key_and_the_closest_valid_id(params):
    params["attacks"][0] = "metric-los"
    params["attack_options"] = {"model-robus": {"gamma": 1.0}, "sm-risk": {"bins": 0}}
    params["llm"]["attack_options"] = {"llm-mink": {"kk": 0.1}}
    message = problems_of(params)
    assert "attacks[0]: 'metric-los' is not one of the 36 allowed values" in message
    assert "; did you mean 'metric-loss'?" in message
    assert "attack_options.model-robus: unknown key; did you mean 'model-robust'?" in message
    assert "attack_options.sm-risk.bins: 0 is less than the minimum of 1" in message
    assert "llm.attack_options.llm-mink.kk: unknown key; did you mean 'k'?" in message


def test_a_name_far_from_every_known_one_gets_no_suggestion(params):
    params["attack_options"] = {"zzzz": {}}
    assert "attack_options.zzzz: unknown key\n" in problems_of(params) + "\n"
