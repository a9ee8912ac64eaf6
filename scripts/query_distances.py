"""Snakemake adapter for rule query_distances."""

from miaflow.jobs import queries
from miaflow.jobs.adapter import run

run(queries.query_distances, snakemake)
