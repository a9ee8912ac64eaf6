"""Snakemake adapter for rule query_transfer."""
from miaflow.jobs import queries
from miaflow.jobs.adapter import run

run(queries.query_transfer, snakemake)
