"""Snakemake adapter for rule scaling_sweep."""

from miaflow.jobs import evaluate
from miaflow.jobs.adapter import run

run(evaluate.scaling_sweep, snakemake)
