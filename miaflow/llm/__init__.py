"""Attacks on language models: corpora, models, token statistics, scores."""
