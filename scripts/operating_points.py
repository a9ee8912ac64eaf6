"""Snakemake adapter for rule operating_points."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.evaluate.operating_points", snakemake)
