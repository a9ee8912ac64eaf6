"""Snakemake adapter for rule make_queries."""
from miaflow.jobs import queries
from miaflow.jobs.adapter import run

run(queries.make_queries, snakemake)
