"""Models: the table of architecture kinds, torch architectures and their training recipe, the
vectorised ensemble, torch's optimizers without their start-up cost, fine-tuned transformers,
the LR and CatBoost learners, and training shards.

Training with a defense calls into `miaflow.defenses`, which imports nothing from here: what a
defense shares with plain training (optimizers, mini-batches, learning rates) it receives as
arguments."""
