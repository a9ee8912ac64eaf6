"""Snakemake adapter for rule score_attacks."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.evaluate.score_attacks", snakemake)
