"""Shared fixtures: paths to the repository and the real datasets beside it, a check that a
figure is a reproducible PNG, a tiny masked-LM checkpoint trained on toy texts, one finished run
of the tiny end-to-end config that several test modules read (each works on its own copy, so none
sees another's changes), and `problems_of`, the validation message of an invalid config.

`make test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadfile
--no-loadscope-reorder`): the tests of a module stay on one worker (its module fixtures are built
once), the modules with whole runs start first (WHOLE_RUNS_FIRST), and the finished tiny run is
built once, by whichever worker asks first (a file lock)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
# Unit tests (tests/unit) and whole-workflow tests (tests/workflow, those that run the real
# `snakemake` and `dvc`) share fixtures and a few helpers by module name, wherever they sit.
KINDS = ("unit", "workflow")
sys.path[:0] = [str(Path(__file__).parent / kind) for kind in KINDS]


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real datasets not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread, as in a workflow job (training.threads: 1): on the shared 2-core
    machine a second thread only spins against whatever else runs. Modules that train models use
    it with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`; module-scoped, so their
    module fixtures compute on the same thread count as their tests."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def job_torch_session(tmp_path, monkeypatch) -> Iterator[None]:
    """Torch set up as a workflow job sets it up (`miaflow.jobs.common.torch_session`: one thread,
    a GPU slot when there is a GPU, deterministic kernels, no cuDNN autotuning), restored after
    the test. On a GPU, same-seed training repeats bit for bit only in this mode."""
    import torch

    from miaflow.jobs.common import torch_session

    monkeypatch.chdir(tmp_path)  # the GPU slots' lock files
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
        torch.get_num_threads(),
    )
    with torch_session(1):
        yield
    torch._C._set_deterministic_algorithms(before[0], warn_only=before[1])
    torch.backends.cudnn.benchmark = before[2]
    torch.set_num_threads(before[3])


@pytest.fixture
def reproducible_png(tmp_path) -> Callable[[Callable[[Path], None]], bytes]:
    """Draw a figure twice (`draw(path)`): a real PNG, and the same bytes both times."""

    def check(draw: Callable[[Path], None]) -> bytes:
        first, second = tmp_path / "first.png", tmp_path / "second.png"
        draw(first)
        draw(second)
        data = first.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
        assert data == second.read_bytes()
        return data

    return check


TOY_WORDS = (
    "the a film plot actor story was is good bad dull great long short fine and but very not"
).split()


def toy_texts(n: int, seed: int, words: tuple[int, int] = (6, 20)) -> list[str]:
    """`n` texts of random words from a small vocabulary (each word one token of a tokenizer
    trained on them)."""
    import numpy as np

    draw = np.random.default_rng(seed)
    return [" ".join(draw.choice(TOY_WORDS, draw.integers(*words))) for _ in range(n)]


@pytest.fixture(scope="session")
def tiny_masked_lm(tmp_path_factory) -> Path:
    """A checkpoint directory: a tiny BertForMaskedLM built from a config, with a WordPiece
    tokenizer trained on toy texts (`miaflow.llm.neighbors.train_masked_lm`; no download). It
    also serves as the pretrained backbone of tiny transformer classifiers and regressors."""
    import torch

    from miaflow.llm.neighbors import train_masked_lm

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a job; a second thread only spins on the shared machine
    model, tokenizer = train_masked_lm(toy_texts(200, seed=0), seed=0)
    torch.set_num_threads(threads)
    directory = tmp_path_factory.mktemp("tiny-masked-lm")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """A project after `make run`'s commands on the tiny config with README's audit example
    (tests/workflow/test_workflow_e2e.py). Read only:
    a test that changes anything works on `copy_of_finished_run`.

    Built once per `make test`: under pytest-xdist the first worker to ask builds it in the
    folder all workers share, holding a lock that a second worker waits on, then reads."""
    from test_workflow_e2e import make_run, tiny_project

    if "PYTEST_XDIST_WORKER" not in os.environ:
        root = tiny_project(tmp_path_factory.mktemp("finished") / "project")
        make_run(root)
        return root
    shared = tmp_path_factory.getbasetemp().parent / "finished"  # this session's, every worker's
    with FileLock(f"{shared}.lock"):
        root, done = shared / "project", shared / "built"
        if not done.exists():
            shutil.rmtree(shared, ignore_errors=True)  # a worker that failed building it
            make_run(tiny_project(root))
            done.touch()
    return root


def copy_project(source: Path, destination: Path) -> Path:
    """A copy with modification times kept, so that Snakemake and DVC see the same finished run."""
    shutil.copytree(source, destination, symlinks=True)
    return destination


def problems_of(params: dict) -> str:
    """The message of the ConfigError that validating `params` raises (the test fails if none)."""
    from miaflow import config

    with pytest.raises(config.ConfigError) as caught:
        config.validate(params)
    return str(caught.value)


@pytest.fixture
def copy_of_finished_run(finished_run, tmp_path) -> Path:
    return copy_project(finished_run, tmp_path / "project")


# Modules with whole runs, longest first. Under xdist (`--dist loadfile --no-loadscope-reorder`
# hands out whole modules in this order) one worker starts the first, the other the second, and
# the last tests to finish are short ones; the rest keep pytest's order.
WHOLE_RUNS_FIRST = (
    "test_workflow_e2e.py",  # builds the finished tiny run that the modules below read
    "test_resume_e2e.py",  # a second tiny run, killed and resumed, meanwhile
    "test_slurm.py",
    "test_defenses_e2e.py",
    "test_report_browser.py",
    "test_s3_remote.py",
    "test_audit_e2e.py",
    "test_queries_workflow.py",
)


def pytest_collection_modifyitems(items: list) -> None:
    """The modules of WHOLE_RUNS_FIRST first, in that order."""
    rank = {name: k for k, name in enumerate(WHOLE_RUNS_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


OPT_IN_MARKERS = ("slurm", "s3", "browser", "audit")


def pytest_terminal_summary(terminalreporter) -> None:
    """One line per end-to-end test of the opt-in checks (SLURM, S3, browser, audit): outcome and
    seconds, set-up included (e.g. installing a cluster), so a run shows that they ran and did not
    skip; their unit tests are counted."""
    phases: dict[str, list] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) and set(report.keywords) & set(OPT_IN_MARKERS):
                phases.setdefault(report.nodeid, []).append(report)
    if not phases:
        return
    terminalreporter.section("opt-in checks: " + ", ".join(OPT_IN_MARKERS))
    units: dict[str, int] = {}
    for nodeid, reports in sorted(phases.items()):
        outcome = next((r.outcome for r in reports if r.outcome != "passed"), "passed")
        if "e2e" in reports[0].keywords or outcome != "passed":
            seconds = sum(r.duration for r in reports)
            terminalreporter.write_line(f"{outcome.upper():8} {seconds:7.1f} s  {nodeid}")
        else:
            units[nodeid.split("::")[0]] = units.get(nodeid.split("::")[0], 0) + 1
    for module, count in units.items():
        terminalreporter.write_line(f"PASSED   {count:4d} unit tests in {module}")
