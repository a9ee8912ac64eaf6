"""Snakemake adapter for rule query_outputs."""

from miaflow.jobs import queries
from miaflow.jobs.adapter import run

run(queries.query_outputs, snakemake)
