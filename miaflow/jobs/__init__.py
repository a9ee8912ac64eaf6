"""Jobs: one module per workflow stage (prepare, train, queries, evaluate, report), one function
per rule, each reading artifacts, calling the library and writing artifacts.

A job takes keyword-only arguments named after its rule's `input`, `output` and `params` keys;
`miaflow.runtime.adapter.run` hands a Snakemake job's named fields over as they are, so every job
can also be run (and tested) from plain Python. In a local run, `miaflow.runtime.forkserver` forks
each job from one process that has imported the libraries once.
"""
