"""Property: every mutation of params.yaml is either accepted and plans within seconds, or
rejected with a ConfigError that names the mutated key (or a key it relates to), never a
traceback. Hypothesis draws the mutations from a fixed seed, so the examples are the same on
every run."""

from __future__ import annotations

import contextlib
import copy
import math
import re
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from miaflow import config, plan
from miaflow.data import DATASETS

REPO = Path(__file__).resolve().parents[2]
# Hypothesis caches what it learns from the code in a `.hypothesis` folder: not in the checkout.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "miaflow-hypothesis")

PARAMS = yaml.safe_load((REPO / "params.yaml").read_text())
PROFILES = sorted(PARAMS["profiles"])
TOP_LEVEL = set(config.schema()["properties"])
# What `validate` plus planning may take on the shared 2-core machine before we call it a hang.
TIME_LIMIT_S = 20
# Values of the wildcards that artifact paths are matched with (Snakefile `wildcard_constraints`).
WILDCARDS = {"dataset": r"[a-z0-9_]+", "setting": r"[a-z0-9_]+", "epsilon": r"inf|\d+(\.\d+)?"}
# A key path as messages write it: `splits.repeats`, `experiments[2].arch`,
# `attack_options.sm-risk`.
KEY = re.compile(r"[A-Za-z_][\w\-]*(?:\.[\w\-/]+|\[\d+\])+|[A-Za-z_][\w\-]*")

KeyPath = tuple[Any, ...]


def node_paths(node: Any, prefix: KeyPath = ()) -> Iterator[KeyPath]:
    """Every key path of a params tree, containers and leaves alike (the root excluded)."""
    children = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, child in children:
        yield (*prefix, key)
        yield from node_paths(child, (*prefix, key))


def parent_and_key(params: dict, path: KeyPath) -> tuple[Any, Any]:
    node = params
    for part in path[:-1]:
        node = node[part]
    return node, path[-1]


# Values that break types, ranges and counts: odd scalars, the config's own values in the wrong
# place, and huge or tiny numbers.
SHIPPED_VALUES = sorted(
    {
        repr(v)
        for p in node_paths(PARAMS)
        for v in [parent_and_key(PARAMS, p)[0][p[-1]]]
        if isinstance(v, (str, int, float, bool))
    }
)
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(SHIPPED_VALUES).map(yaml.safe_load),
    st.lists(st.integers(min_value=-2, max_value=50), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
COUNTS = st.sampled_from([0, 1, 2, 3, 4, 7, 16, 17, 33, 100, 513, 10**4, 10**6, 10**9, 2**63])
RATIOS = st.one_of(
    st.floats(min_value=0, max_value=1),
    st.sampled_from([1e-9, 1e-4, 0.0100000001, 0.999, 2.0, 8.0000001, 1e6, math.inf]),
)
STRINGS = st.sampled_from(
    sorted(value for value in map(yaml.safe_load, SHIPPED_VALUES) if isinstance(value, str))
)


def similar(value: Any) -> st.SearchStrategy:
    """Values of the same type as `value` (so that the schema more often accepts them and the
    semantic checks and planning get to see them); a list loses, repeats or keeps its items."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return COUNTS
    if isinstance(value, float):
        return RATIOS
    if isinstance(value, str):
        return STRINGS
    if isinstance(value, list):
        return st.sampled_from([[], value[:1], value[:-1], value + value[:1], value[::-1]])
    return st.just({})


def counted(params: dict, path: KeyPath) -> bool:
    """Whether a key holds a number (half of the mutations touch one: counts and ratios are what
    the semantic checks and planning depend on)."""
    value = parent_and_key(params, path)[0][path[-1]]
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[dict, list[KeyPath]]:
    """params.yaml with one to three mutations, and the key path each one touched."""
    params, touched = copy.deepcopy(PARAMS), []
    pick = draw(st.randoms(use_true_random=False))  # uniform over the paths (seeded by Hypothesis)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        kind = draw(
            st.sampled_from(
                [
                    "similar",
                    "similar",
                    "similar",
                    "replace",
                    "delete",
                    "add",
                    "experiment",
                    "profile",
                ]
            )
        )
        paths = sorted(node_paths(params), key=repr)
        numbers = [path for path in paths if counted(params, path)]
        if kind == "profile":
            params["profile"] = draw(st.sampled_from([*PROFILES, "default", "nope"]))
            touched.append(("profile",))
        elif kind == "experiment":
            archs = sorted(params.get("architectures") or {"mlp": None}) + ["nowhere"]
            arch = draw(st.sampled_from(archs))
            entry = {"dataset": draw(st.sampled_from(sorted(DATASETS))), "arch": arch}
            if draw(st.booleans()):
                entry["ref_arch"] = draw(st.sampled_from([arch, *archs]))
            if not isinstance(params.get("experiments"), list):
                params["experiments"] = []
            params["experiments"].append(entry)
            touched.append(("experiments", len(params["experiments"]) - 1))
        elif kind == "add":
            containers = [p for p in paths if isinstance(parent_and_key(params, p)[0][p[-1]], dict)]
            path = pick.choice(containers or [()])
            node = parent_and_key(params, path)[0][path[-1]] if path else params
            key = draw(
                st.sampled_from(
                    [
                        "n_samples",
                        "path",
                        "ref_arch",
                        "queries_used",
                        "k",
                        "n_texts",
                        "n_eval",
                        "backbone",
                        "extra",
                    ]
                )
            )
            node[key] = draw(st.one_of(COUNTS, ANY_VALUE))
            touched.append((*path, key))
        else:
            path = pick.choice(numbers if numbers and pick.random() < 0.5 else paths)
            parent, key = parent_and_key(params, path)
            if kind == "delete":
                del parent[key]
            else:
                parent[key] = draw(similar(parent[key]) if kind == "similar" else ANY_VALUE)
            touched.append(path)
    return params, touched


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Fail instead of hanging: SIGALRM interrupts the Python code running past `seconds`."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"validation and planning took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def plan_everything(effective: dict) -> int:
    """What the rule files derive from the config when Snakemake parses them (rules/common.smk
    and the stage files), checked against the wildcards the paths must match; returns a count of
    the main jobs, which must stay finite and moderate."""
    experiments = plan.experiments(effective)
    assert len({e.name for e in experiments}) == len(experiments)
    shards, trained = plan.shards(effective), plan.trained(effective)
    for dataset in plan.datasets(effective):
        assert re.fullmatch(WILDCARDS["dataset"], dataset)
        plan.local_inputs(effective, dataset)
    for experiment in experiments:
        plan.artifacts_for(effective, experiment)
        plan.swept_query_attacks(effective, experiment)
    plan.reference_counts(effective)
    plan.swept_attacks(effective)
    settings_ = plan.hparam_settings(effective)
    tags = [plan.epsilon_tag(e) for e in effective["hparam_study"]["epsilons"]]
    assert len(set(tags)) == len(tags) and all(re.fullmatch(WILDCARDS["epsilon"], t) for t in tags)
    assert all(re.fullmatch(WILDCARDS["setting"], s["name"]) for s in settings_)
    assert len({s["name"] for s in settings_}) == len(settings_)
    llm = plan.llm_experiments(effective)
    plan.llm_fpr_levels(effective)
    return (
        len(shards) * len(trained)
        + len(settings_) * len(tags) * effective["hparam_study"]["runs"]
        + sum(e["repeats"] for e in llm) * effective["llm"]["pair_shards"]
    )


def related(a: str, b: str) -> bool:
    """Whether key paths a and b are the same key, or one contains the other."""
    shorter, longer = sorted((a, b), key=len)
    return longer == shorter or longer.startswith((f"{shorter}.", f"{shorter}["))


def effective_path(path: KeyPath, profile: Any) -> str:
    """A touched key as the effective config names it (a profile's override of a key is that
    key)."""
    if len(path) > 2 and path[0] == "profiles" and path[1] == profile:
        path = path[2:]
    return config._key_path(path)


def assert_well_formed(message: str) -> None:
    """`invalid params.yaml...:` and one `  - <key path>: <reason>` line per problem."""
    assert re.fullmatch(
        r"invalid params\.yaml( \(profile .+\))?:(\n  - \S[^\n]*?: \S[^\n]*)+", message
    ), message


def assert_names_a_touched_key(message: str, touched: list[KeyPath], profile: Any) -> None:
    assert_well_formed(message)
    named = [k for k in KEY.findall(message) if "." in k or "[" in k or k in TOP_LEVEL]
    keys = [effective_path(path, profile) for path in touched]
    assert any(related(name, key) for name in named for key in keys), (keys, message)


@settings(max_examples=500, derandomize=True, deadline=None, database=None)
@given(mutated())
def test_every_mutation_is_accepted_and_plans_or_names_its_key(
    example: tuple[dict, list[KeyPath]],
) -> None:
    params, touched = example
    with contextlib.chdir(REPO), time_limit(TIME_LIMIT_S):  # local `path`s are relative to it
        try:
            effective = config.validate(params)
        except config.ConfigError as error:
            event("rejected")
            assert_names_a_touched_key(str(error), touched, params.get("profile"))
            return
        event("accepted")
        assert 0 < plan_everything(effective) < 10**6


@settings(max_examples=60, derandomize=True, deadline=None, database=None)
@given(st.data())
def test_yaml_damage_names_the_line_or_the_key(tmp_path_factory, data: st.DataObject) -> None:
    """Damaged YAML text fails with `<file> line N: ...`, or still parses and then is valid and
    plans, or is rejected like any params."""
    lines = (REPO / "params.yaml").read_text().splitlines()
    at = data.draw(st.integers(min_value=0, max_value=len(lines) - 1))
    damage = data.draw(
        st.sampled_from(["[", "]", ":", "  ", "\t", "- ", "{", "'", "&a ", "*b", "seed: 1", "\x00"])
    )
    column = data.draw(st.integers(min_value=0, max_value=len(lines[at])))
    lines[at] = lines[at][:column] + damage + lines[at][column:]
    path = tmp_path_factory.mktemp("yaml") / "params.yaml"
    path.write_text("\n".join(lines) + "\n")
    with contextlib.chdir(REPO), time_limit(TIME_LIMIT_S):
        try:
            effective = config.load(path)
        except config.ConfigError as error:
            if not re.fullmatch(rf"{re.escape(str(path))} line \d+: \S.*", str(error)):
                assert_well_formed(str(error))
            return
        assert 0 < plan_everything(effective) < 10**6


# Every number in params.yaml (a profile's override with that profile selected).
NUMBER_PATHS = [path for path in node_paths(PARAMS) if counted(PARAMS, path)]


@pytest.mark.parametrize("value", [0, -1, 0.5, 10**9, 2**63, 1e300])
def test_every_number_set_to_an_extreme_is_rejected_by_name_or_plans(value: float) -> None:
    """Exhaustive complement to the sampled mutations: absurd counts (which made planning hang)
    and fractions in every numeric key, one at a time."""
    for path in NUMBER_PATHS:
        params = copy.deepcopy(PARAMS)
        parent, key = parent_and_key(params, path)
        parent[key] = value
        if path[0] == "profiles":
            params["profile"] = path[1]
        with contextlib.chdir(REPO), time_limit(TIME_LIMIT_S):
            try:
                effective = config.validate(params)
            except config.ConfigError as error:
                assert_names_a_touched_key(str(error), [path], params["profile"])
                continue
            assert 0 < plan_everything(effective) < 10**6, path
