"""From scores to results: metrics, paired statistical tests, paper tables and figures."""
