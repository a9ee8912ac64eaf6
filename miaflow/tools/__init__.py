"""Command-line tools on plans and results, each `python -m miaflow.tools.<name>`:

- `summary`: the headline of a finished run (`make run` ends with it);
- `compare`: two runs' headlines side by side;
- `needs`: what a plan needs before it runs (GPU jobs, models, downloads, time);
- `cost`: what a plan costs, from the benchmark records of a run;
- `cluster`: per-rule cluster resources from a run's benchmark records.
"""
