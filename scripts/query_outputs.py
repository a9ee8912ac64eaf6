"""Snakemake adapter for rule query_outputs."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.queries.query_outputs", snakemake)
