"""Benchmark: every attack that reads only signals, on synthetic ones, through
`miaflow.attacks.scoring.run_attack` (query attacks read artifacts, language-model attacks token
statistics: neither is timed here).

Builds one target model's `AttackInputs` for n evaluated samples with M reference models (and
as many population models on an auxiliary pool of the same size): each sample has a difficulty,
IN models see a higher logit-scaled confidence phi than OUT models, and the other signals are
derived from phi. Prints seconds per attack, the total, and each attack's AUROC (a sanity
check that scores point the right way: higher = member).

    .venv/bin/python bench/attack_scoring.py [--samples 50000] [--references 16]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package

from miaflow.attacks.inputs import AttackInputs  # noqa: E402
from miaflow.attacks.registry import ATTACKS, LLM  # noqa: E402
from miaflow.attacks.scoring import run_attack  # noqa: E402


class Signals(dict):
    """Signal name -> array; a signal this benchmark does not model is drawn as noise on demand."""

    def __init__(self, phi: np.ndarray, generator: np.random.Generator) -> None:
        confidence = 1 / (1 + np.exp(-phi))
        probs = np.stack([confidence, 1 - confidence], axis=-1).clip(1e-12)
        super().__init__(
            phi=phi,
            confidence=confidence,
            loss=-np.log(confidence.clip(1e-12)),
            correct=(confidence > 0.5).astype(np.float64),
            entropy=-(probs * np.log(probs)).sum(-1),
            mentr=-2 * (1 - confidence) * np.log(confidence.clip(1e-12)),  # binary modified entropy
            margin=2 * phi,
        )
        self.generator, self.shape = generator, phi.shape

    def __missing__(self, name: str) -> np.ndarray:
        self[name] = self.generator.normal(size=self.shape)
        return self[name]


def synthetic_inputs(
    n: int, n_models: int, generator: np.random.Generator
) -> tuple[AttackInputs, np.ndarray]:
    def pool() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        difficulty = generator.normal(size=n)
        draws = generator.random((n_models // 2, n)) < 0.5
        keep = np.empty((n_models, n), dtype=bool)
        keep[0::2], keep[1::2] = draws, ~draws  # paired design, as miaflow.splits draws it
        phi = difficulty + 1.5 * keep + generator.normal(scale=0.7, size=keep.shape)
        return difficulty, keep, phi

    difficulty, keep, phi = pool()
    is_member = generator.random(n) < 0.5
    target = difficulty + 1.5 * is_member + generator.normal(scale=0.7, size=n)
    aux_difficulty, aux_keep, aux_phi = pool()
    target_aux = aux_difficulty + generator.normal(scale=0.7, size=n)
    inputs = AttackInputs(
        target=Signals(target, generator),
        reference=Signals(phi, generator),
        reference_keep=keep,
        target_on_population=Signals(target_aux, generator),
        population=Signals(aux_phi, generator),
        population_keep=aux_keep,
    )
    return inputs, is_member


def main() -> None:
    from sklearn.metrics import roc_auc_score

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument(
        "--references", type=int, default=16, help="reference (and population) models; even"
    )
    args = parser.parse_args()
    inputs, is_member = synthetic_inputs(args.samples, args.references, np.random.default_rng(0))

    timed = sorted(name for name, a in ATTACKS.items() if a.family != LLM and not a.reads)
    print(f"{len(timed)} attacks, {args.samples} samples, {args.references} reference models")
    total = 0.0
    for name in timed:
        started = time.perf_counter()
        scores = run_attack(name, inputs)
        elapsed = time.perf_counter() - started
        total += elapsed
        print(f"  {name:<24} {elapsed:7.3f} s   AUROC {roc_auc_score(is_member, scores):.3f}")
    print(f"total {total:.2f} s (goal <= 60 s)")


if __name__ == "__main__":
    main()
