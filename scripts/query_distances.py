"""Snakemake adapter for rule query_distances."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.queries.query_distances", snakemake)
