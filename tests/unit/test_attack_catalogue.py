"""The attack catalogue (miaflow/attacks/registry.py) and its runners: importing the catalogue
loads no attack family, each job that runs attacks imports (statically, so its code closure
names them) exactly the families it can run, entries are checked as they are made, and every
attack runs with options of its own class (issue #42, items 3 and 6)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from miaflow.attacks import llm, scoring
from miaflow.attacks.inputs import AttackInputs
from miaflow.attacks.options import EmMiaOptions, MinKOptions, ModelRobustOptions
from miaflow.attacks.registry import (
    ATTACKS,
    EM_INITS,
    EM_SCORINGS,
    LLM,
    MINK_SWEEP,
    Attack,
    attack_options,
    catalogue,
    em_initial_attack,
    llm_reads,
)
from miaflow.jobs import audit, evaluate
from miaflow.jobs import llm as llm_jobs
from miaflow.llm.scores import SCORING_FUNCTIONS, em_mia
from miaflow.llm.tokens import TokenStats
from miaflow.plan.code import ROOT, closure, function_closure

FAMILY_MODULES = {attack.module for attack in ATTACKS.values()}
SIGNAL_ATTACKS = {name for name, attack in ATTACKS.items() if attack.family != LLM}
LLM_ATTACKS = set(ATTACKS) - SIGNAL_ATTACKS


# --- what importing the catalogue loads ----------------------------------------------------------


def test_a_fresh_interpreter_loads_no_family_with_the_catalogue_or_the_schema():
    """What validation and the plan import at parse time: ids, metadata and the schema."""
    code = (
        "import json, sys\n"
        "import miaflow.attacks.registry, miaflow.config, miaflow.plan, miaflow.validation\n"
        "miaflow.config.schema()\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('miaflow.attacks'))))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(done.stdout))
    assert loaded == {
        "miaflow.attacks",
        "miaflow.attacks.options",
        "miaflow.attacks.registry",
        "miaflow.attacks.schema",
    }
    assert not loaded & FAMILY_MODULES


def test_the_catalogue_and_the_parse_time_modules_import_no_family():
    """Their code closures (what every DVC stage and the validation cache depend on) hold no
    attack's code: editing an attack does not touch them."""
    for module in (
        "miaflow.attacks.registry",
        "miaflow.config",
        "miaflow.validation",
        "miaflow.plan",
    ):
        assert not set(closure(module)) & FAMILY_MODULES, module


@pytest.mark.parametrize(
    ("job", "runs"),
    [
        (evaluate.score_attacks, SIGNAL_ATTACKS),
        (evaluate.scaling_sweep, SIGNAL_ATTACKS),
        (audit.score_audit, SIGNAL_ATTACKS),
        (llm_jobs.llm_scores, LLM_ATTACKS),  # also the job of rule llm_setting_scores
    ],
)
def test_each_job_that_runs_attacks_imports_the_families_it_can_run_and_no_other(job, runs):
    reached = set(function_closure(job.__module__, job.__name__))
    needed = {ATTACKS[name].module for name in runs}
    assert needed <= reached
    assert not (FAMILY_MODULES - needed) & reached  # a language-model edit reruns no scoring


# --- the entries -------------------------------------------------------------------------------


def test_every_score_function_is_found_by_the_runner_of_its_family():
    for name, attack in ATTACKS.items():
        runner = llm if attack.family == LLM else scoring
        function = runner.score_function(name)
        assert callable(function) and f"{function.__module__}.{function.__name__}" == attack.score
    with pytest.raises(ValueError, match="language-model attacks run from miaflow.attacks.llm"):
        scoring.score_function("llm-loss")
    with pytest.raises(ValueError, match="run from miaflow.attacks.scoring"):
        llm.score_function("metric-loss")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"family": "toy"}, "unknown family 'toy'"),
        ({"needs": frozenset({"shadow"})}, "unknown needs {'shadow'}"),
        ({"modalities": frozenset()}, "modalities must be a non-empty subset"),
        ({"modalities": frozenset({"audio"})}, "modalities must be a non-empty subset"),
        ({"reads": ("pairs",)}, "unknown reads {'pairs'}"),  # a language-model read
        ({"family": LLM, "reads": ("outputs",)}, "unknown reads {'outputs'}"),
        ({"knowledge": "labels"}, "unknown knowledge 'labels'"),
        ({"settings": {"k": 0.1}}, "settings without options"),
        ({"options": MinKOptions, "settings": {"j": 0.1}}, r"settings of no option: \['j'\]"),
    ],
)
def test_an_entry_is_checked_when_it_is_made(fields, message):
    base = {"name": "toy", "family": "metric", "score": "miaflow.attacks.metric.f", "doc": "Toy."}
    with pytest.raises(ValueError, match=message):
        Attack(**{**base, **fields})


def test_the_catalogue_rejects_a_twice_given_id_and_options_shared_with_the_wrong_attack():
    toy = Attack("toy", "metric", "miaflow.attacks.metric.f", "Toy.")
    with pytest.raises(ValueError, match="'toy' is in the catalogue twice"):
        catalogue([toy, toy])
    variant = dataclasses.replace(toy, name="toy-k1", options=MinKOptions, options_of="toy")
    with pytest.raises(ValueError, match="'toy-k1' shares the options of 'toy'"):
        catalogue([toy, variant])  # toy has no MinKOptions
    with pytest.raises(ValueError, match="shares the options of 'gone'"):
        catalogue([dataclasses.replace(variant, options_of="gone")])


def test_the_generated_variants_fix_what_their_id_says():
    sweep = [name for name in ATTACKS if "-k" in name and name.startswith("llm-mink")]
    assert len(sweep) == 2 * len(MINK_SWEEP) == 18
    assert ATTACKS["llm-mink-k30"].settings == {"k": 0.3}
    assert ATTACKS["llm-minkpp-k100"].options_of == "llm-minkpp"
    variants = [name for name in ATTACKS if name.startswith("em-mia-")]
    assert len(variants) == 5 * 3
    assert ATTACKS["em-mia-zlib-kendall"].settings == {"init": "zlib", "scoring": "kendall"}
    # an EM-MIA variant reads what its start reads: llm-ref's reference model
    assert ATTACKS["em-mia-ref-auroc"].reads == ("pairs", "reference")
    assert ATTACKS["em-mia-loss-auroc"].reads == ("pairs",)


def test_em_mias_starts_and_prefix_scores_are_the_libraries():
    assert all(ATTACKS[em_initial_attack(init)].family == LLM for init in EM_INITS)
    assert set(EM_SCORINGS) == set(SCORING_FUNCTIONS)


# --- options -----------------------------------------------------------------------------------


def test_options_are_the_defaults_with_the_overrides_and_a_variants_settings():
    assert attack_options("metric-loss", {}) is None
    assert attack_options("model-robust", {}) == ModelRobustOptions(gamma=2.0)
    assert attack_options("model-robust", {"model-robust": {"gamma": 3}}).gamma == 3.0
    section = {"llm-mink": {"k": 0.5, "compat": True}, "em-mia": {"iterations": 3}}
    # the sweep variant keeps llm-mink's compat and fixes its own k; llm-minkpp's are untouched
    assert attack_options("llm-mink-k10", section) == MinKOptions(k=0.1, compat=True)
    assert attack_options("llm-minkpp-k10", section) == MinKOptions(k=0.1, compat=False)
    assert attack_options("em-mia-ref-kendall", section) == EmMiaOptions("ref", "kendall", 3)
    assert attack_options("em-mia", section) == EmMiaOptions("minkpp", "auroc", 3)


def test_language_model_reads_follow_emmias_start():
    assert llm_reads(["llm-loss", "llm-recall"], {}) == {"recall"}
    assert llm_reads(["em-mia"], {}) == {"pairs"}  # from Min-K%++, which reads nothing more
    assert llm_reads(["em-mia"], {"em-mia": {"init": "ref"}}) == {"pairs", "reference"}


def _inputs(options=None) -> AttackInputs:
    return AttackInputs(
        target={"mentr": np.array([0.5, 1.0])},
        reference={},
        reference_keep=np.zeros((0, 2), bool),
        target_on_population={},
        population={},
        population_keep=np.zeros((0, 0), bool),
        options=options,
    )


def test_an_attack_runs_only_with_options_of_its_class():
    # metric-ment = −Mentr = [−0.5, −1]; it has no options
    np.testing.assert_array_equal(scoring.run_attack("metric-ment", _inputs()), [-0.5, -1.0])
    with pytest.raises(TypeError, match="'metric-ment' reads options none, not dict"):
        scoring.run_attack("metric-ment", _inputs({}))
    # query-neighbor needs no model set: the check comes before it reads its artifact
    with pytest.raises(TypeError, match="reads options QueryNeighborOptions, not dict"):
        scoring.run_attack("query-neighbor", _inputs({"queries_used": 1}))
    with pytest.raises(TypeError, match="reads options QueryNeighborOptions, not ModelRobust"):
        scoring.run_attack("query-neighbor", _inputs(ModelRobustOptions()))


def _llm_inputs(attack_options: dict) -> llm.LLMInputs:
    """Four texts of four tokens, whose order by Min-K% depends on k."""
    logprobs = [
        np.array(v) for v in ([-1, -1, -2, -5], [-4, -4, -4, -4], [-1, -2, -3, -6], [-3] * 4)
    ]
    target = TokenStats(np.arange(4), logprobs, [np.zeros(4)] * 4, [np.ones(4)] * 4)
    pairs = -np.random.default_rng(0).uniform(1, 4, size=(4, 4))  # LL(x ; p), any negative values
    return llm.LLMInputs(
        texts=["a", "b", "c", "d"],
        target=target,
        is_member=np.array([True, False, True, False]),
        pairs=pairs,
        attack_options=attack_options,
    )


# Min-K% at k = 0.5: the mean of each text's two lowest log-probabilities (either n_k convention)
HALF = [-3.5, -4.0, -4.5, -3.0]


def test_a_sweep_variant_fixes_k_and_keeps_the_compat_of_the_attack_it_varies():
    inputs = _llm_inputs({"llm-mink": {"k": 0.9, "compat": True}})
    np.testing.assert_allclose(llm.run_llm_attack("llm-mink-k50", inputs), HALF)
    # llm-mink itself at its k = 0.9: three or four of the four tokens, never two
    assert not np.allclose(llm.run_llm_attack("llm-mink", inputs), HALF)


def test_em_mia_starts_from_its_start_attack_with_that_attacks_options():
    inputs = _llm_inputs({"llm-mink": {"k": 0.5}, "em-mia": {"init": "mink", "iterations": 2}})
    final, steps = llm.em_mia_run(inputs, attack_options("em-mia", inputs.attack_options))
    expected = em_mia(inputs.ratio_matrix(), np.array(HALF), "auroc", 2)
    np.testing.assert_array_equal(final, expected[0])
    np.testing.assert_array_equal(steps, expected[1])
    np.testing.assert_array_equal(llm.run_llm_attack("em-mia", inputs), final)
    # from llm-mink's default k = 0.2 (one token: [-5, -4, -6, -3], another order) EM differs
    start_default = {"em-mia": {"init": "mink", "iterations": 2}}
    default = dataclasses.replace(inputs, attack_options=start_default)
    assert not np.array_equal(llm.run_llm_attack("em-mia", default), final)
