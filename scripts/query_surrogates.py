"""Snakemake adapter for rule query_surrogates."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.queries.query_surrogates", snakemake)
