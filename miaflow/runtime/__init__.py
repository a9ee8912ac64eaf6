"""The runtime around Snakemake and DVC: what runs the workflow's jobs and keeps a run whole.

- `adapter`: from a rule's `snakemake` object to a job call (every script is one line of it),
  with each input checked and each output recorded (`provenance`) and the job's log (`joblog`).
- `forkserver`, `forkclient`, `wire`: a local run's warm process that forks the jobs, the
  script's side that hands a job over, and the messages between them.
- `start`, `resume`: what a Snakemake command does before it builds its DAG (the run lock,
  what dead runs left, damaged artifacts); `profiles`: a profile's own working directory.
- `quiet`, `commit`, `verify`: the commands around a run (`make run`'s terminal and its
  `dvc.lock`, `make verify`).

Snakemake parses the Snakefile, which imports `start`, `profiles` and `forkserver`; everything
else here runs in jobs or as `python -m miaflow.runtime.<command>`.
"""
