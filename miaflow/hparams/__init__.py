"""The hyperparameter study (docs/algorithms.md#hyperparameter-study): MIA-Grid, HPO, KL-LiRA."""
