"""The stage is the unit in every layer: rule files, jobs modules, DVC stages and results folders
line up; code dependencies are derived from imports; the import graph has no cycle; `snakemake
--lint` is clean."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from miaflow.plan import code, stages
from miaflow.runtime import adapter

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


TOP_LEVEL_OUTS = {
    "report": {
        "results/metrics.parquet",
        "results/summary.json",
        "results/tables",
        "results/figures",
    },
    "hparams": {"results/hparam_study.parquet", "results/dp_bound.parquet"},
}


def dvc_stages(repo: Path) -> dict:
    return yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]


def _outputs(stage: dict) -> list[str]:
    return [next(iter(o)) if isinstance(o, dict) else o for o in stage["outs"]]


def snakemake_command(stage: dict) -> str:
    commands = [stage["cmd"]] if isinstance(stage["cmd"], str) else stage["cmd"]
    return next(c for c in commands if c.startswith("snakemake"))


def test_each_stage_is_one_rule_file_one_jobs_module_one_results_folder_one_records_folder(repo):
    assert sorted(p.stem for p in (repo / "rules").glob("*.smk")) == sorted(
        [*stages.STAGES, "common"]
    )
    assert sorted(p.stem for p in (repo / "miaflow/jobs").glob("*.py")) == sorted(
        [*stages.STAGES, "__init__", "common"]
    )
    assert list(dvc_stages(repo)) == list(stages.STAGES)
    for name, stage in dvc_stages(repo).items():
        outs = _outputs(stage)
        mine = [o for o in outs if o.startswith(f"results/{name}")]
        assert mine, f"DVC stage {name} has no output under results/{name}"
        assert f"records/{name}" in outs, f"DVC stage {name} does not keep its run records apart"
        # the contract files at the top of results/: the report's and the hyperparameter study's
        assert set(outs) - set(mine) - {f"records/{name}"} <= TOP_LEVEL_OUTS.get(name, set())


def test_every_rule_belongs_to_exactly_the_dvc_stage_of_its_rule_file(repo):
    listed = subprocess.run(
        [SNAKEMAKE, "--list-rules"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout
    every_rule = {line.split()[0] for line in listed.splitlines() if line[:1].strip()}
    allowed = {}
    for name, stage in dvc_stages(repo).items():
        command = snakemake_command(stage)
        assert command.split()[1] == name, f"DVC stage {name} must ask for its target rule {name}"
        allowed[name] = command.split("--allowed-rules")[1].split()
        assert sorted(allowed[name]) == sorted(stages.rules(name, repo)), name
    assert sorted(r for names in allowed.values() for r in names) == sorted(every_rule - {"all"})


def test_every_stage_depends_on_exactly_the_code_its_command_runs(repo):
    """Otherwise `dvc repro` skips a stage whose code changed and `dvc status` reports it clean.
    `python -m miaflow.plan.stages` rewrites the deps."""
    for name, stage in dvc_stages(repo).items():
        listed = sorted(
            d
            for d in stage["deps"]
            if not d.startswith(stages.OUTPUT_ROOTS) and d not in stages.USER_INPUTS
        )
        assert listed == stages.code_deps(name, repo), f"dvc.yaml stage {name}: deps out of date"
    assert stages.uses("train", "miaflow.models.ensemble") and not stages.uses(
        "report", "miaflow.models.ensemble"
    )


def test_the_parse_time_imports_are_those_of_every_rule_file(repo):
    """Every stage's command parses every rule file, so each one's imports are code of every
    stage; `from package import submodule` counts the submodule."""
    modules = stages.parse_modules(repo)
    assert {
        "miaflow.config",
        "miaflow.plan",
        "miaflow.llm.models",
        "miaflow.evaluation.published",
    } <= set(modules)
    assert "miaflow/llm/models.py" in stages.code_deps("prepare", repo)


def test_every_stage_depends_on_exactly_the_params_its_rules_read(repo):
    """Otherwise `dvc repro` skips a stage whose settings changed. `python -m
    miaflow.plan.stages` rewrites the params from what the rules, the common names they use
    and the plan functions these call read."""
    sections = yaml.safe_load((repo / "params.yaml").read_text()).keys()
    for name, stage in dvc_stages(repo).items():
        derived = stages.params(name, repo)
        assert stage["params"] == derived, f"dvc.yaml stage {name}: params out of date"
        assert derived[:2] == list(stages.SELECTORS) and set(derived) <= sections, name
    assert "profiles" in stages.params("llm", repo)  # dvc.yaml's hand-written list lacked it
    assert "splits" in stages.params("train", repo)  # how many models: the shards
    assert {"hparam_study", "llm"} <= set(stages.params("prepare", repo))  # their datasets


def test_the_whole_config_reaches_only_plan_functions(repo):
    """The params a stage depends on are read from `config[...]` in its rules and in the plan
    functions they name: code elsewhere that got the whole config would escape that reading.
    (Snakemake hands its config to a rule's script too, but the adapter passes a job only the
    rule's input, output and params.) The one exception hashes it: `code.workflow_digest` keys
    a parse-time cache (the cost table's input walk) and reads no section."""
    assert "config" not in (repo / "miaflow/runtime/adapter.py").read_text()
    plan = ast.parse((repo / "miaflow/plan/__init__.py").read_text())
    functions = {n.name for n in plan.body if isinstance(n, ast.FunctionDef)}
    trees = {
        "miaflow/plan/__init__.py": plan,
        **{f"rules/{p.name}": stages.rule_file(p) for p in (repo / "rules").glob("*.smk")},
    }
    for path, tree in trees.items():
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            arguments = [*call.args, *(keyword.value for keyword in call.keywords)]
            if not any(isinstance(a, ast.Name) and a.id == "config" for a in arguments) or (
                ast.unparse(call.func) in ("script", "library.workflow_digest")
            ):
                continue
            callee = call.func
            if isinstance(callee, ast.Attribute) and ast.unparse(callee.value) == "plan":
                callee = ast.Name(callee.attr)
            assert isinstance(callee, ast.Name) and callee.id in functions, (
                f"{path}: {ast.unparse(call)} hands the whole config outside miaflow.plan"
            )


def test_common_rule_file_holds_only_what_several_stage_files_read(repo):
    """rules/common.smk is the contract between stages: a name one stage file alone reads (or
    none) belongs at the top of that file. A stage file reads only its own names and the common
    ones, never another stage file's."""
    common_file = repo / "rules" / "common.smk"
    assert len(common_file.read_text().splitlines()) <= 150
    common = stages.definitions(stages.rule_file(common_file))
    shared = {s: stages.shared_names(s, repo) for s in stages.STAGES}
    readers = {name: [s for s in stages.STAGES if name in shared[s]] for name in common}
    lonely = {name: users for name, users in readers.items() if len(users) < 2}
    assert not lonely, f"names of rules/common.smk read by fewer than two stage files: {lonely}"
    trees = {s: stages.rule_file(repo / "rules" / f"{s}.smk") for s in stages.STAGES}
    own = {s: stages.definitions(tree) for s, tree in trees.items()}
    for stage in stages.STAGES:
        assert not own[stage].keys() & common.keys(), f"rules/{stage}.smk redefines common names"
        others = set().union(*(own[s].keys() for s in stages.STAGES if s != stage))
        read = stages.names_read(trees[stage])
        assert not read & (others - own[stage].keys()), (
            f"rules/{stage}.smk reads names of other stage files: {read & others}"
        )


def test_every_stage_depends_on_the_stages_whose_outputs_its_rules_read(repo):
    """Otherwise `dvc repro` may run a stage before the one it reads from, and a change upstream
    leaves it stale. Rule-to-rule edges come from Snakemake's rule graph of the whole workflow."""
    graph = subprocess.run(
        [SNAKEMAKE, "all", "--rulegraph"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout
    names = dict(re.findall(r'^\s*(\d+)\[label = "(\w+)"', graph, re.M))
    stage_of = {rule: name for name in stages.STAGES for rule in stages.rules(name, repo)}
    declared = dvc_stages(repo)
    edges = {
        (stage_of[names[a]], stage_of[names[b]])
        for a, b in re.findall(r"^\s*(\d+) -> (\d+)", graph, re.M)
        if names[b] != "all"
    }
    assert ("train", "report") in edges  # the graph was read
    for producer, consumer in edges - {(s, s) for s in stages.STAGES}:
        deps = [d for d in declared[consumer]["deps"] if d.startswith(stages.OUTPUT_ROOTS)]
        assert any(
            d == out or d.startswith(f"{out}/") or out.startswith(f"{d}/")
            for d in deps
            for out in _outputs(declared[producer])
        ), f"dvc.yaml stage {consumer} reads outputs of stage {producer} but has no dep on them"


def test_the_closure_follows_lazy_imports_and_includes_parent_packages(tmp_path):
    package = tmp_path / "miaflow"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("def job():\n    from miaflow.sub import b\n")
    (package / "sub" / "b.py").write_text("import json\nimport miaflow.c\n")
    (package / "c.py").write_text("x = 1\n")
    (package / "unused.py").write_text("")
    assert code.closure("miaflow.a", tmp_path) == (
        "miaflow",
        "miaflow.a",
        "miaflow.c",
        "miaflow.sub",
        "miaflow.sub.b",
    )
    assert code.files("miaflow.a", tmp_path) == [
        "miaflow/__init__.py",
        "miaflow/a.py",
        "miaflow/c.py",
        "miaflow/sub/__init__.py",
        "miaflow/sub/b.py",
    ]


def import_edges(root: Path) -> dict[str, set[str]]:
    """module -> the package modules it imports (anywhere in it; `from pkg import submodule`
    counts as an import of the submodule, as Python resolves it)."""
    edges = {}
    for path in sorted((root / "miaflow").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.startswith("miaflow"))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("miaflow"):
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    targets.add(submodule if code.module_file(submodule, root) else node.module)
        edges[module] = targets - {module}
    return edges


def test_the_package_import_graph_has_no_cycle(repo):
    edges = import_edges(repo)
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(edges.get(module, ())):
            if state.get(target) == "open":
                pytest.fail("import cycle: " + " -> ".join([*path[path.index(target) :], target]))
            if target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])


def test_no_module_uses_another_modules_private_names(repo):
    for path in sorted((repo / "miaflow").rglob("*.py")):
        tree = ast.parse(path.read_text())
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("miaflow"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path} imports private names {private} of {node.module}"
                aliases.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.Import):
                aliases.update(
                    a.asname or a.name.split(".")[0]
                    for a in node.names
                    if a.name.startswith("miaflow")
                )
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                pytest.fail(f"{path}:{node.lineno} uses {node.value.id}.{node.attr}")


# References to files of the repository (`docs/x.md#anchor`, `miaflow/x/y.py`, `rules/x.smk`,
# `scripts/x.py`, folders too) and dotted names (`miaflow.x.y`, `miaflow.x.y.name`).
FILE_REFERENCE = re.compile(
    r"(?<![\w./-])((?:docs|miaflow|rules|scripts)/[\w./-]*\w)(?:#([a-z0-9-]+))?"
)
DOTTED_REFERENCE = re.compile(r"(?<![\w./-])miaflow(?:\.\w+)+")


def section_slugs(markdown: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub derives them."""
    return {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", markdown.read_text(), re.M)
    }


def top_level_names(path: Path) -> set[str]:
    """What a module defines or imports at its top level: the names `module.name` can reach."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def broken_reference(repo: Path, reference: str, anchor: str | None = None) -> str | None:
    """Why a file path or dotted name points at nothing, None if it resolves."""
    if "/" in reference:
        target = repo / reference
        if not target.exists():
            return f"{reference} does not exist"
        if anchor and anchor not in section_slugs(target):
            return f"{reference} has no section #{anchor}"
        return None
    parts = reference.split(".")
    known = max(k for k in range(1, len(parts) + 1) if code.module_file(".".join(parts[:k]), repo))
    if known < len(parts):
        module = ".".join(parts[:known])
        if parts[known] not in top_level_names(repo / code.module_file(module, repo)):
            return f"{module} has no module or name {parts[known]}"
    return None


def test_code_and_rules_point_only_inside_the_repository(repo):
    """Code (comments and docstrings included), params.yaml, the schema and docs/ cite files,
    sections and modules that exist: a moved file or renamed section fails here, not in a
    reader's hands. (The README names placeholders such as `rules/X.smk`: not checked.)"""
    code_files = [
        repo / "Snakefile",
        *(repo / "rules").glob("*.smk"),
        *(repo / "scripts").glob("*.py"),
        *(repo / "miaflow").rglob("*.py"),
    ]
    broken = []
    for path in [
        *code_files,
        repo / "params.yaml",
        repo / "miaflow/schemas/params.schema.json",
        *(repo / "docs").glob("*.md"),
    ]:
        text = path.read_text()
        if path in code_files:  # params.yaml may name data under ../shared (a local setting)
            assert "shared/" not in text and "ALGORITHMS.md" not in text, path
        found = [broken_reference(repo, m[1], m[2]) for m in FILE_REFERENCE.finditer(text)]
        found += [broken_reference(repo, m[0]) for m in DOTTED_REFERENCE.finditer(text)]
        broken += [f"{path.relative_to(repo)}: {why}" for why in found if why]
    assert not broken, "\n".join(broken)


def test_scripts_only_hand_the_snakemake_object_to_a_job(repo):
    for script in sorted((repo / "scripts").glob("*.py")):
        rule = script.stem
        stage = next(s for s in stages.STAGES if rule in stages.rules(s, repo))
        body = [line for line in script.read_text().splitlines()[1:] if line.strip()]
        assert body == [
            "from miaflow.runtime.adapter import run",
            f'run("miaflow.jobs.{stage}.{rule}", snakemake)',
        ], script
        assert callable(adapter.job_function(f"miaflow.jobs.{stage}.{rule}")), script


# A jobs module reads a rule's inputs, calls the library and writes its outputs; longer than this,
# it holds logic that belongs in the library, where unit tests reach it.
JOBS_MODULE_LINES = 300


def test_jobs_modules_only_adapt_and_stay_short(repo):
    long = {
        path.name: lines
        for path in sorted((repo / "miaflow/jobs").glob("*.py"))
        if (lines := len(path.read_text().splitlines())) > JOBS_MODULE_LINES
    }
    assert not long, f"jobs modules over {JOBS_MODULE_LINES} lines: {long}"


def test_snakemake_lint_is_clean(repo):
    result = subprocess.run([SNAKEMAKE, "--lint"], cwd=repo, capture_output=True, text=True)
    assert result.returncode == 0 and "Congratulations" in result.stdout + result.stderr, (
        result.stdout + result.stderr
    )


# --- DVC plots -----------------------------------------------------------------------------------


def _plot_sources(plot: str | dict) -> list[str]:
    """What a top-level plot of dvc.yaml reads: its path, or the files of its `y`."""
    if isinstance(plot, str):
        return [plot]
    ((name, spec),) = plot.items()
    return list(spec["y"]) if isinstance(spec.get("y"), dict) else [name]


def test_the_plots_read_stage_outputs_and_survive_rewriting_the_deps(repo, tmp_path):
    """`dvc plots show` renders the report's figures (ROC, scaling, ... as images) and the mean
    AUROC per attack family; `python -m miaflow.plan.stages` rewrites deps, not plots."""
    text = (repo / "dvc.yaml").read_text()
    document = yaml.safe_load(text)
    plots = document["plots"]
    assert "results/figures" in plots
    outputs = [out for stage in document["stages"].values() for out in _outputs(stage)]
    for plot in plots:
        for source in _plot_sources(plot):
            assert any(source == out or source.startswith(f"{out}/") for out in outputs), (
                f"plot {plot} reads {source}, which no DVC stage outputs"
            )
    for name in ("Snakefile", "rules", "scripts", "miaflow", "profiles", "envs", "dvc.yaml"):
        source = repo / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, tmp_path / name)
    stages.write_dvc_deps(tmp_path / "dvc.yaml")
    rewritten = (tmp_path / "dvc.yaml").read_text()
    assert yaml.safe_load(rewritten)["plots"] == plots
    block = text[text.index("\nplots:") :]
    assert rewritten.endswith(block), "the plots section changed when the deps were rewritten"


@pytest.mark.e2e
def test_dvc_plots_show_renders_the_roc_and_scaling_figures(copy_of_finished_run, tmp_path):
    from test_workflow_e2e import run

    project, out = copy_of_finished_run, tmp_path / "plots"
    run(["dvc", "plots", "show", "-o", str(out)], project)
    page = (out / "index.html").read_text(encoding="utf-8")
    shown = {
        Path(src).name.rsplit("_results_figures_", 1)[-1]: out / src
        for src in re.findall(r'<img src="([^"]+)"', page)
    }
    figures = sorted((project / "results/figures").glob("*.png"))
    names = {figure.name for figure in figures}
    assert {"roc-digits-cnn.png", "scaling-digits-cnn.png", "auroc-vs-gap.png"} <= names
    for figure in figures:  # every ROC, scaling, gap, hparam and llm figure, as it is
        assert figure.name in shown, f"dvc plots show does not show {figure.name}"
        assert shown[figure.name].read_bytes() == figure.read_bytes(), figure.name
    assert "Mean AUROC per attack family" in page
    families = (project / "records/report/families.csv").read_text().splitlines()[1:]
    assert families and all(f'"family": "{row.split(",")[0]}"' in page for row in families)
