"""Snakemake adapter for rule query_distances."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.queries.query_distances", snakemake)
