"""Snakemake adapter for rule score_attacks."""

from miaflow.jobs import evaluate
from miaflow.jobs.adapter import run

run(evaluate.score_attacks, snakemake)
