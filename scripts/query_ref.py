"""Snakemake adapter for rule query_ref."""
from miaflow.jobs import queries
from miaflow.jobs.adapter import run

run(queries.query_ref, snakemake)
