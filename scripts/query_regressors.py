"""Snakemake adapter for rule query_regressors."""

from miaflow.jobs import queries
from miaflow.jobs.adapter import run

run(queries.query_regressors, snakemake)
