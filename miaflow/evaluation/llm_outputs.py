"""The language-model report: which table and figure each of the llm stage's results becomes
(the attacks in EM-MIA's shape, the Min-K% sweep, the benchmark settings with the selection's
separability beside them, the copyright traps, dataset inference), for the report stage's
`llm_report`. Each table's and figure's content is its own module's: `llm_report`,
`llm_settings_report`, `llm_traps_report`, `llm_inference_report`.
"""

from __future__ import annotations

from pathlib import Path

from miaflow.attacks.llm_inputs import ITERATE_COLUMNS
from miaflow.attacks.registry import ATTACKS, LLM
from miaflow.evaluation import llm_inference_report as on_inference
from miaflow.evaluation import llm_report as build
from miaflow.evaluation import llm_settings_report as on_settings
from miaflow.evaluation import llm_traps_report as on_traps
from miaflow.evaluation.metrics import METRICS_COLUMNS
from miaflow.evaluation.tables import write_outputs, write_table
from miaflow.llm.separability import SELECTION
from miaflow.rule_io import Paths, concat_parquet, table_stem


def write_report(
    *,
    metrics: Paths,
    iterates: Paths,
    prefix_fit: Paths,
    setting_metrics: Paths,
    trap_metrics: Paths,
    inference: Paths,
    selection: Paths,
    llm_table: Paths,
    mink_sweep_table: Paths,
    settings_table: Paths,
    traps_table: Paths,
    inference_table: Paths,
    em_figure: str | Path,
    mink_figure: str | Path,
    settings_figure: str | Path,
    traps_figure: str | Path,
    inference_figure: str | Path,
    alpha: float,
) -> None:
    """The language-model attacks' table in EM-MIA's shape (label-using attacks marked, the
    share of ReCaLL targets with a cut prefix beside them), the Min-K% / Min-K%++ k sweep, and
    EM-MIA's per-iteration AUROC (a diagnostic using labels); the attacks on EM-MIA's benchmark
    settings (`setting_metrics`) and on copyright traps (`trap_metrics`) in a table and figure
    each, beside the attacks the AUROC of the selection alone (`selection`,
    miaflow.llm.separability); dataset inference's tests and their rejection rates at `alpha`."""
    knowledge = {name: attack.knowledge for name, attack in ATTACKS.items() if attack.family == LLM}
    knowledge[SELECTION] = "selection"
    long, on_sets = on_settings.beside_attacks(
        concat_parquet(metrics, METRICS_COLUMNS),
        concat_parquet(setting_metrics, METRICS_COLUMNS),
        on_settings.selection_metrics(concat_parquet(selection)) if selection else None,
    )
    table = on_settings.settings_table(on_sets, knowledge)
    markdown = on_settings.settings_markdown(table)
    write_table(table, table_stem(settings_table), table.attrs["caption"], markdown)
    on_settings.plot_settings(table, settings_figure)
    fits = concat_parquet(prefix_fit) if prefix_fit else None
    write_outputs(build.llm_table(long, knowledge, prefix_fit=fits), llm_table)
    write_outputs(build.mink_sweep_table(long, knowledge), mink_sweep_table)
    build.plot_em_iterations(concat_parquet(iterates, ITERATE_COLUMNS), em_figure)
    build.plot_mink_sweep(long, mink_figure)
    traps = concat_parquet(trap_metrics, METRICS_COLUMNS)
    on_traps.write_traps(traps, knowledge, table_stem(traps_table), traps_figure)
    tests = concat_parquet(inference, on_inference.COLUMNS)
    on_inference.write_inference(tests, alpha, table_stem(inference_table), inference_figure)
