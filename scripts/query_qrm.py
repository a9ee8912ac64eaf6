"""Snakemake adapter for rule query_qrm."""
from miaflow.jobs import queries
from miaflow.jobs.adapter import run

run(queries.query_qrm, snakemake)
