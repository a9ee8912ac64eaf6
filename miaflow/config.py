"""Load and validate params.yaml: one source of truth for Snakemake (config) and DVC (params).

Validation runs when the Snakefile is parsed, so a bad value stops the run before any job starts,
with a message that names the offending key (or, for YAML that does not parse, the line). Beyond
the schema it rejects what would run but mislead: experiments that duplicate another in effect,
counts the data cannot support (pools, classes, texts, queries) or that would be silently capped,
and local dataset files that are missing or differ from the published ones. A config that passed
is remembered (`validate`'s cache under .snakemake/): a parse with the same params and package
runs only the checks that read files.

This module is the face: reading the YAML, the schema, profiles and `validate`. The cross-key
rules live in `miaflow.validation`, one module per config section (splits, datasets,
experiments, defenses, queries, hparam_study, llm, audits, statistics), each computing its numbers
with the library function that draws them (e.g. `miaflow.splits.pool_sizes`). They sit in one
package rather than beside that library code because some of it is a single module (splits.py,
audit.py), and because one package keeps the import rule simple: validation imports the library,
library code never imports `miaflow.validation`, so no job's code closure (its rule's code
inputs, miaflow.plan.code) grows with validation. Everything imported here runs when the
Snakefile is parsed: heavy libraries are imported inside the checks, never at module top level.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import warnings
from collections.abc import Hashable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

DEFAULT_PROFILE = "default"
ENUM_SHOWN = 12  # a longer list of allowed values (attack ids, datasets) is named by its size


class ConfigError(ValueError):
    """params.yaml is invalid; the message names every offending key."""


class ConfigWarning(UserWarning):
    """params.yaml is valid but some result cannot show what it is for (the message says which
    key to change)."""


def schema() -> dict[str, Any]:
    """The params schema: miaflow/schemas/params.schema.json with its attack ids and options
    generated from the attack catalogue (`miaflow.attacks.schema`, which says why)."""
    from miaflow.attacks.schema import completed

    text = resources.files("miaflow").joinpath("schemas/params.schema.json").read_text()
    return completed(json.loads(text))


def _key_path(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _schema_problems(config: Any) -> list[str]:
    """Every schema violation as `<key path>: <reason>`; an upper bound also gives the bounded
    key's description, which says why the bound is there, and an unknown key or value the
    closest known one (a misspelt attack id, option or dataset)."""
    import jsonschema  # a tenth of a second: only for a config not validated before

    validator = jsonschema.Draft202012Validator(schema())
    problems = []
    for error in sorted(
        validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))
    ):
        if error.validator in ("if", "allOf"):
            continue  # the failing `then` branch reports the precise key itself
        key = _key_path(error.absolute_path)
        if error.validator == "additionalProperties":
            known = error.schema.get("properties", {})
            for name in sorted(set(error.instance) - set(known), key=str):
                where = _key_path([*error.absolute_path, name])
                problems.append(f"{where}: unknown key{_closest(name, known)}")
        elif error.validator == "maximum" and "description" in error.schema:
            problems.append(f"{key}: {error.message}; {error.schema['description']}")
        elif error.validator == "enum":
            allowed = error.validator_value
            message = (
                error.message
                if len(allowed) <= ENUM_SHOWN
                else f"{error.instance!r} is not one of the {len(allowed)} allowed values"
            )
            problems.append(f"{key}: {message}{_closest(error.instance, allowed)}")
        else:
            problems.append(f"{key}: {error.message}")
    return problems


def _closest(given: Any, known: Iterable[Any]) -> str:
    """ "; did you mean '<the closest of `known`>'?" for a misspelt name, else nothing."""
    import difflib

    names = [name for name in known if isinstance(name, str)]
    found = difflib.get_close_matches(given, names, n=1) if isinstance(given, str) else []
    return f"; did you mean {found[0]!r}?" if found else ""


# --- profiles and the effective config ---------------------------------------------------------


def _merged(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` applied: mappings merge key by key, anything else is replaced,
    and None removes the key (e.g. a local `path`, so that a profile downloads instead)."""
    merged = dict(base)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def resolve(params: Mapping[str, Any]) -> dict[str, Any]:
    """The effective config: the top-level settings with the selected profile's overrides.

    `profile` names an entry of `profiles` (or `default`: the top-level settings as they are);
    the effective config keeps `profile` and drops the `profiles` catalogue.
    """
    name = params.get("profile", DEFAULT_PROFILE)
    catalogue = params.get("profiles") or {}
    if name != DEFAULT_PROFILE and name not in catalogue:
        known = ", ".join([DEFAULT_PROFILE, *sorted(catalogue)])
        raise ConfigError(
            f"invalid params.yaml:\n  - profile: {name!r} is not a profile (known: {known})"
        )
    base = {key: value for key, value in params.items() if key != "profiles"}
    return _merged(base, catalogue.get(name, {}))


def validate(
    params: Any, cache: Path | None = None, command_line: Iterable[str] = ()
) -> dict[str, Any]:
    """The effective config (`resolve`) if valid; ConfigError naming every bad key otherwise.

    With a profile other than `default`, the problems are those of the effective config, and the
    message says which profile was applied; a problem of a top-level key given on the command
    line (`command_line`: the keys of Snakemake's `--config`) says that it came from there. A
    valid config can still warn (ConfigWarning).

    With `cache` (a JSON file: the Snakefile's, under .snakemake/), a config that passed before
    with the same package and libraries (`_validation_key`) is checked again only by the checks
    that read files (miaflow.validation.READING_FILES): the schema and the checks that read the
    config alone would find what they found then. Only a valid config is remembered.
    """
    key = _validation_key(params) if cache is not None else None
    remembered = _remembered_warnings(cache, key) if cache is not None else None
    if remembered is not None:
        from miaflow.validation import file_problems

        config = resolve(params)
        _stop_on(file_problems(config), config, command_line)
        messages = remembered
    else:
        from miaflow.validation import problems as semantic_problems
        from miaflow.validation import warnings as semantic_warnings

        problems = _schema_problems(params)  # the top-level settings and the catalogue's shape
        config = dict(params) if isinstance(params, Mapping) else {}
        if not problems:
            config = resolve(params)
            problems = _schema_problems(config) or semantic_problems(config)
        _stop_on(problems, config, command_line)
        messages = semantic_warnings(config)
        if cache is not None:
            from miaflow.io import write_json

            write_json(cache, {"key": key, "warnings": messages})
    for message in messages:
        warnings.warn(f"params.yaml: {message}", ConfigWarning, stacklevel=2)
    return config


def _stop_on(
    problems: list[str], config: Mapping[str, Any], command_line: Iterable[str] = ()
) -> None:
    """ConfigError naming every problem, if there is one; one of a key given with `--config`
    (`command_line`) says so."""
    if problems:
        profile = config.get("profile", DEFAULT_PROFILE)
        where = (
            "params.yaml" if profile == DEFAULT_PROFILE else f"params.yaml (profile {profile!r})"
        )
        given = set(command_line)
        said = [_from_command_line(p) if _top_key(p) in given else p for p in problems]
        if len(said) != sum(p.startswith(_CLI) for p in said):
            where = f"{where} with --config" if given & {_top_key(p) for p in problems} else where
        else:
            where = "--config on the command line"
        raise ConfigError(f"invalid {where}:\n" + "\n".join(f"  - {p}" for p in said))


_CLI = "(--config) "


def _top_key(problem: str) -> str:
    """The top-level key a problem names (`splits.repeats: ...` -> `splits`)."""
    return problem.split(":", 1)[0].split(".", 1)[0].split("[", 1)[0].split(",", 1)[0].strip()


def _from_command_line(problem: str) -> str:
    return f"{_CLI}{problem}"


def _validation_key(params: Any) -> str:
    """What a validation that reads no file depends on: the params, every file of the package
    (code, schema), the Python version and the installed libraries (the modification time of
    the folder they are installed in, which any install or removal changes)."""
    from miaflow.plan.code import package_digest

    libraries = Path(importlib.util.find_spec("jsonschema").origin).parents[1]
    parts = [repr(params), package_digest(), sys.version, str(libraries.stat().st_mtime_ns)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _remembered_warnings(cache: Path, key: str) -> list[str] | None:
    """The warnings of the valid config `cache` remembers under `key`; None if it holds none."""
    try:
        stored = json.loads(cache.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(stored, dict) and stored.get("key") == key:
        return stored["warnings"]
    return None


# --- reading params.yaml -----------------------------------------------------------------------


class _NoDuplicateKeys:
    """A loader's constructor, except that a key given twice in one mapping is an error: PyYAML
    (and so Snakemake) would silently keep the last value."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<` merges may be overridden by the mapping's own keys
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in lines:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {lines[key] + 1})",
                    key_node.start_mark,
                )
            lines[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


class _Loader(_NoDuplicateKeys, yaml.SafeLoader):
    """PyYAML's safe loader without duplicate keys: its messages name what is wrong best."""


class _FastLoader(_NoDuplicateKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The same with libyaml's parser where PyYAML has it: ten times faster, for the YAML that
    parses (every parse of the workflow reads params.yaml); what does not is read again by
    `_Loader`."""


def _yaml_problem(name: str, text: str, error: yaml.YAMLError) -> str:
    """`<file> line N: <what is wrong>` for a YAML error (PyYAML counts lines from 0)."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        reason = error.problem or error.context or "invalid YAML"
        if error.context and error.problem and error.context_mark:
            reason += f" ({error.context} at line {error.context_mark.line + 1})"
        return f"{name} line {mark.line + 1}: {reason}" if mark else f"{name}: {reason}"
    if isinstance(error, yaml.reader.ReaderError):
        line = text.count("\n", 0, error.position) + 1
        return f"{name} line {line}: unacceptable character #x{error.character:04x}"
    return f"{name}: {error}"


def read(path: str | Path = "params.yaml") -> Any:
    """The content of params.yaml, or ConfigError naming the line where it is not valid YAML
    (also: a key given twice in one mapping, and text that is not UTF-8)."""
    name, data = str(path), Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ConfigError(f"{name} line {line}: not UTF-8 text ({error.reason})") from None
    try:
        return yaml.load(text, Loader=_FastLoader)
    except yaml.YAMLError:
        pass  # named below, in the words of the pure-Python parser
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as error:
        raise ConfigError(_yaml_problem(name, text, error)) from None


def checked_yaml(path: str = "params.yaml") -> str:
    """`path`, once it reads as YAML (`read`). The Snakefile hands params.yaml to `configfile:`
    through this, as Snakemake's own loader names no line and keeps duplicate keys silently (a
    missing file is left to Snakemake to report)."""
    if Path(path).exists():
        read(path)
    return path


def load(path: str | Path = "params.yaml") -> dict[str, Any]:
    """The validated effective config of a params file (`read`, then `validate`)."""
    return validate(read(path))
