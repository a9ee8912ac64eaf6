"""What parsing the workflow costs: the caches it keeps under .snakemake/ give the answer they
replace, and are read again whenever anything they were derived from changes; the parse imports
no heavy library."""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from miaflow import config, io, validation
from miaflow.plan import code, stages
from miaflow.runtime import provenance
from miaflow.runtime.provenance import RememberedHashes

# Libraries that take seconds to import and that no parse of the workflow needs (Snakemake itself
# imports pandas, pyarrow and numpy).
HEAVY = ("scipy", "sklearn", "torch", "transformers", "catboost", "matplotlib", "opacus", "optuna")


def small_package(root: Path) -> Path:
    """A package `miaflow` with a jobs module whose job imports one module lazily, and a second
    job that imports another."""
    package = root / "miaflow"
    (package / "jobs").mkdir(parents=True)
    (package / "runtime").mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs" / "__init__.py").write_text("")
    (package / "runtime" / "__init__.py").write_text("")
    (package / "runtime" / "adapter.py").write_text("import json\n")
    (package / "jobs" / "train.py").write_text(
        "def job():\n    from miaflow import a\n\n\ndef other():\n    from miaflow import c\n"
    )
    (package / "a.py").write_text("x = 1\n")
    (package / "b.py").write_text("y = 2\n")
    (package / "c.py").write_text("z = 3\n")
    return root


def test_the_cached_job_files_are_the_closures(tmp_path):
    root, cache = small_package(tmp_path / "project"), tmp_path / "cache.json"
    found = code.job_files(cache, root)
    assert found == {
        "miaflow.runtime.adapter": code.files("miaflow.runtime.adapter", root),
        "miaflow.jobs.train.job": code.source_files(
            code.function_closure("miaflow.jobs.train", "job", root), root
        ),
        "miaflow.jobs.train.other": code.source_files(
            code.function_closure("miaflow.jobs.train", "other", root), root
        ),
    }
    # each job's own imports, not its neighbour's
    assert "miaflow/a.py" in found["miaflow.jobs.train.job"]
    assert "miaflow/c.py" not in found["miaflow.jobs.train.job"]
    assert "miaflow/c.py" in found["miaflow.jobs.train.other"]
    assert json.loads(cache.read_text())["value"] == found
    assert code.job_files(cache, root) == found  # read back


def test_the_job_files_cache_is_read_again_after_any_edit(tmp_path):
    """An edited, added or removed module changes the key, whatever the edit keeps (here the
    size); an answer stored under another key is never used."""
    root, cache = small_package(tmp_path / "project"), tmp_path / "cache.json"
    code.job_files(cache, root)
    train = root / "miaflow" / "jobs" / "train.py"
    train.write_text(train.read_text().replace("import a", "import b"))  # same size
    assert "miaflow/b.py" in code.job_files(cache, root)["miaflow.jobs.train.job"]
    (root / "miaflow" / "jobs" / "audit.py").write_text(
        "import miaflow.a\n\n\ndef job():\n    pass\n"
    )
    assert code.job_files(cache, root)["miaflow.jobs.audit.job"] == [
        "miaflow/__init__.py",
        "miaflow/a.py",
        "miaflow/jobs/__init__.py",
        "miaflow/jobs/audit.py",
    ]
    (root / "miaflow" / "b.py").unlink()
    assert "miaflow/b.py" not in code.job_files(cache, root)["miaflow.jobs.train.job"]
    stored = json.loads(cache.read_text())
    cache.write_text(json.dumps({**stored, "value": {"miaflow.jobs.train.job": ["stale"]}}))
    assert code.job_files(cache, root)["miaflow.jobs.train.job"] == ["stale"]  # same key: read
    cache.write_text(json.dumps({"key": "another", "value": {}}))
    assert "miaflow.jobs.train.job" in code.job_files(cache, root)  # other key: computed
    cache.write_text("{not json")
    assert "miaflow.jobs.train.job" in code.job_files(cache, root)


def test_the_workflow_digest_follows_package_rules_and_config(tmp_path):
    """The key of parse-time answers derived from the whole workflow (the cost table's jobs)."""
    root = small_package(tmp_path / "project")
    (root / "Snakefile").write_text("include: 'rules/a.smk'\n")
    (root / "rules").mkdir()
    (root / "rules" / "a.smk").write_text("rule a:\n    output: 'x'\n")
    first = code.workflow_digest({"seed": 1}, root)
    assert code.workflow_digest({"seed": 1}, root) == first
    assert code.workflow_digest({"seed": 2}, root) != first
    (root / "rules" / "a.smk").write_text("rule a:\n    output: 'y'\n")
    second = code.workflow_digest({"seed": 1}, root)
    (root / "miaflow" / "a.py").write_text("x = 2\n")
    assert len({first, second, code.workflow_digest({"seed": 1}, root)}) == 3


def test_remembered_computes_once_per_key(tmp_path):
    cache, calls = tmp_path / "cache.json", []

    def compute() -> list[str]:
        calls.append(1)
        return ["records/a.tsv"]

    assert code.remembered(cache, "k1", compute) == ["records/a.tsv"]
    assert code.remembered(cache, "k1", compute) == ["records/a.tsv"] and len(calls) == 1
    assert code.remembered(cache, "k2", compute) == ["records/a.tsv"] and len(calls) == 2


def test_remembered_hashes_read_again_only_a_file_that_was_written(tmp_path, monkeypatch):
    """A second scan reads no unchanged file; a write that keeps the size and the modification
    time (it changes the status-change time) is read again, and a file not seen is forgotten."""
    monkeypatch.setattr(RememberedHashes, "SETTLED_NS", 0)
    kept, other, memory = tmp_path / "kept.bin", tmp_path / "other.bin", tmp_path / "hashes.json"
    kept.write_bytes(b"first content")
    other.write_bytes(b"other")
    first = RememberedHashes(memory)
    assert [first(kept), first(other)] == [io.file_hash(kept), io.file_hash(other)]
    first.save()
    read = []
    real_hash = io.file_hash
    monkeypatch.setattr(io, "file_hash", lambda path: read.append(path) or real_hash(path))
    second = RememberedHashes(memory)
    before = second(kept)
    assert before == real_hash(kept) and read == []
    second.save()
    assert str(other) not in json.loads(memory.read_text())  # not seen this time
    flip_byte_keeping_size_and_time(kept)
    third = RememberedHashes(memory)
    assert third(kept) == real_hash(kept) != before and read == [kept]


def test_a_file_written_just_now_is_not_remembered(tmp_path):
    """Two writes within the clock's resolution could leave the same status: such a file's hash
    is found afresh each time."""
    fresh, memory = tmp_path / "fresh.bin", tmp_path / "hashes.json"
    fresh.write_bytes(b"just written")
    hashes = RememberedHashes(memory)
    assert hashes(fresh) == io.file_hash(fresh)
    hashes.save()
    assert not memory.exists() or str(fresh) not in json.loads(memory.read_text())


def test_unreadable_remembered_hashes_are_found_again(tmp_path, monkeypatch):
    monkeypatch.setattr(RememberedHashes, "SETTLED_NS", 0)
    file, memory = tmp_path / "a.bin", tmp_path / "hashes.json"
    file.write_bytes(b"a")
    for text in ("{not json", "[1, 2]"):
        memory.write_text(text)
        assert RememberedHashes(memory)(file) == io.file_hash(file)


def test_damage_is_named_with_remembered_hashes(tmp_path, monkeypatch):
    """`damaged` through RememberedHashes finds what full hashing finds, also on the scan after
    the one that remembered the intact file."""
    monkeypatch.setattr(RememberedHashes, "SETTLED_NS", 0)
    monkeypatch.chdir(tmp_path)
    artifact = Path("results/a.bin")
    artifact.parent.mkdir()
    artifact.write_bytes(b"the artifact")
    provenance.write_records([artifact], {}, "stage", "rule")
    memory = Path(".snakemake/hashes.json")
    hashes = RememberedHashes(memory)
    assert provenance.damaged(Path("."), hashes) == []
    hashes.save()
    flip_byte_keeping_size_and_time(artifact)
    found = provenance.damaged(Path("."), RememberedHashes(memory))
    assert [bad.artifact for bad in found] == [bad.artifact for bad in provenance.damaged()]
    assert [bad.artifact for bad in found] == ["results/a.bin"]


def flip_byte_keeping_size_and_time(path: Path) -> None:
    status, data = path.stat(), bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))


def test_parsing_the_workflow_imports_no_heavy_library(repo):
    """What the Snakefile and the rule files import, validating params.yaml and planning the
    run: jobs import these libraries, the parse must not (each costs up to seconds)."""
    imports = "\n".join(f"import {module}" for module in stages.parse_modules(repo))
    script = f"""
import sys
{imports}
from miaflow.config import load
import inspect
from miaflow import plan
config = load({str(repo / "params.yaml")!r})
for function in vars(plan).values():
    if inspect.isfunction(function) and list(inspect.signature(function).parameters) == ["config"]:
        function(config)
for experiment in plan.experiments(config):
    plan.attacks_for(config, experiment)
    plan.swept_query_attacks(config, experiment)
print(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r})))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=repo
    )
    assert result.stdout.strip() == "[]"


@pytest.fixture
def params(repo, tmp_path, monkeypatch) -> dict:
    """The default params, in an empty working directory (no ../shared data)."""
    loaded = yaml.safe_load((repo / "params.yaml").read_text())
    loaded["datasets"] = {k: v for k, v in loaded["datasets"].items() if "path" not in v}
    monkeypatch.chdir(tmp_path)
    return loaded


def test_a_validated_config_is_remembered_with_its_warnings(params, monkeypatch):
    cache = Path(".snakemake/params.json")
    params["stats"] = {**params.get("stats", {}), "alpha": 1e-9}  # tests that cannot reject: warns
    with warnings.catch_warnings(record=True) as first:
        warnings.simplefilter("always")
        effective = config.validate(params, cache=cache)
    assert first and cache.exists()
    monkeypatch.setattr(validation, "problems", lambda _: pytest.fail("checked again"))
    monkeypatch.setattr(config, "_schema_problems", lambda _: pytest.fail("checked again"))
    with warnings.catch_warnings(record=True) as second:
        warnings.simplefilter("always")
        assert config.validate(params, cache=cache) == effective
    assert [str(w.message) for w in second] == [str(w.message) for w in first]


def test_other_params_or_another_package_are_validated_again(params, monkeypatch):
    """The key covers the params (a bad value is caught after a good one was remembered) and the
    package's files (here: their digest)."""
    cache = Path(".snakemake/params.json")
    config.validate(params, cache=cache)
    bad = {**params, "seed": -1}
    with pytest.raises(config.ConfigError, match="seed"):
        config.validate(bad, cache=cache)
    config.validate(params, cache=cache)
    from miaflow.plan import code

    checked = []
    monkeypatch.setattr(code, "package_digest", lambda: "an edited package")
    monkeypatch.setattr(validation, "problems", lambda c: checked.append(c) or [])
    config.validate(params, cache=cache)
    assert checked


def test_the_checks_that_read_files_run_on_every_validation(params):
    """An audit file removed after its config was remembered stops the next validation."""
    Path("audit").mkdir()
    Path("audit/outputs.parquet").write_bytes(b"")
    params["audits"] = [
        {"name": "mine", "outputs": "audit/outputs.parquet", "membership": "audit/outputs.parquet"}
    ]
    cache = Path(".snakemake/params.json")
    config.validate(params, cache=cache)
    Path("audit/outputs.parquet").unlink()
    with pytest.raises(
        config.ConfigError, match=r"audits\[0\]\.outputs: audit/outputs.parquet not"
    ):
        config.validate(params, cache=cache)


def test_the_remembered_checks_read_no_file(params, monkeypatch):
    """The checks outside READING_FILES read the config alone, so a remembered answer stays
    true: they open, stat and list nothing (imports aside), for the default and with an audit;
    the same spies see the audit check stat its file."""
    with_audit = {
        **params,
        "audits": [{"name": "mine", "outputs": "audit/o.parquet", "membership": "audit/o.parquet"}],
    }
    remembered = [check for check in validation.CHECKS if check not in validation.READING_FILES]
    for effective in (config.resolve(params), config.resolve(with_audit)):
        assert files_touched(remembered, effective, monkeypatch) == []
    assert files_touched(validation.READING_FILES, config.resolve(with_audit), monkeypatch)


def files_touched(checks, effective: dict, monkeypatch) -> list[tuple[str, object]]:
    """What `checks` open, stat or list when run on `effective` (after a first run that did the
    imports)."""
    for check in checks:
        check(effective)
    touched = []

    def spy(name, real):
        def spied(*args, **kwargs):
            touched.append((name, args[0] if args else None))
            return real(*args, **kwargs)

        return spied

    with monkeypatch.context() as patched:
        for name in ("stat", "lstat", "scandir", "listdir", "open"):
            patched.setattr(os, name, spy(name, getattr(os, name)))
        patched.setattr(builtins, "open", spy("open", builtins.open))
        for check in checks:
            check(effective)
    return touched
