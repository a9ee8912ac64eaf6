"""Snakemake adapter for rule query_signals."""
from miaflow.jobs import queries
from miaflow.jobs.adapter import run

run(queries.query_signals, snakemake)
