"""The attack registry is complete: every TDDBench algorithm and every registered attack is
implemented, named in a test and documented in the attack pages of docs/ (attacks.md for the
classifier attacks, language-models.md for the language-model ones)."""

from __future__ import annotations

from miaflow.attacks.registry import ATTACKS, TDDBENCH_ALGORITHMS


def test_tddbench_lists_its_21_algorithms_once():
    assert len(TDDBENCH_ALGORITHMS) == len(set(TDDBENCH_ALGORITHMS)) == 21


def test_every_attack_is_implemented_tested_and_documented(repo):
    docs = "".join(
        (repo / "docs" / page).read_text() for page in ("attacks.md", "language-models.md")
    )
    tests = "".join(
        path.read_text()
        for path in sorted((repo / "tests").rglob("test_*.py"))
        if path.name != "test_registry.py"
    )
    missing = {
        "implementation": [n for n in TDDBENCH_ALGORITHMS if n not in ATTACKS],
        "docstring": [n for n, attack in ATTACKS.items() if not attack.doc],
        "docs entry": [n for n in {*ATTACKS, *TDDBENCH_ALGORITHMS} if f"`{n}`" not in docs],
        "test naming it": [n for n in {*ATTACKS, *TDDBENCH_ALGORITHMS} if f'"{n}"' not in tests],
    }
    assert not any(missing.values()), {
        what: sorted(names) for what, names in missing.items() if names
    }
