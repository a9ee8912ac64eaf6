"""Snakemake adapter for rule query_regressors."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.queries.query_regressors", snakemake)
