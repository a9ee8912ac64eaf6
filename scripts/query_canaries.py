"""Snakemake adapter for rule query_canaries."""

from miaflow.jobs import queries
from miaflow.jobs.adapter import run

run(queries.query_canaries, snakemake)
