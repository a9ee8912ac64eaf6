"""What query attacks need beyond a model's outputs on the dataset, one module per artifact of the
queries stage: query `sets` (neighbours and augmentations), HopSkipJump boundary distances
(`hopskipjump`), and what some query attacks fit themselves: `surrogates`, quantile
`regressors` and `canaries`."""
