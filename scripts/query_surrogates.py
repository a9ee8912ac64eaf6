"""Snakemake adapter for rule query_surrogates."""

from miaflow.jobs import queries
from miaflow.jobs.adapter import run

run(queries.query_surrogates, snakemake)
