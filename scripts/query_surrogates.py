"""Snakemake adapter for rule query_surrogates."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.queries.query_surrogates", snakemake)
