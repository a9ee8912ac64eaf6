"""The workflow's shape, computed when the Snakefile is parsed: what runs (`plan`) and which
library files each job runs (`code`), so that Snakemake and DVC rerun exactly what an edit
affects."""
