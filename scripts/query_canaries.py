"""Snakemake adapter for rule query_canaries."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.queries.query_canaries", snakemake)
