"""What query attacks need beyond a model's outputs on the dataset: query sets (neighbours and
augmentations), HopSkipJump boundary distances, and the models some query attacks train or
optimise themselves (surrogates, quantile regressors, canaries)."""
