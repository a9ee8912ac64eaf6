"""Membership-inference attacks, one module per family (docs/algorithms.md#attack-index).

`registry` is the catalogue of every attack (ids, families, needs, reads, options) and imports no
family; `options` holds each attack's options class; `inputs` what an attack on a model's signals
reads (`AttackInputs`). The runners import the families they run: `scoring.run_attack` the
attacks on a model's signals, `llm.run_llm_attack` the language-model ones. This package imports
nothing, so that importing any of its modules loads only what that module needs.
"""
