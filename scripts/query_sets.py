"""Snakemake adapter for rule query_sets."""

from miaflow.jobs import queries
from miaflow.jobs.adapter import run

run(queries.query_sets, snakemake)
