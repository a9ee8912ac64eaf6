"""Models: the table of architecture kinds, torch architectures, the vectorised ensemble, torch's
optimizers without their start-up cost, fine-tuned transformers, and training shards."""
