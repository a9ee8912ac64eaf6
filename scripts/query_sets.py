"""Snakemake adapter for rule query_sets."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.queries.query_sets", snakemake)
