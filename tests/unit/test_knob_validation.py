"""Misconfiguration never looks like success (issue 10): every bad knob is a `ConfigError` naming its
full key, for `run` and `optimize` as the apps compose them; types are
strict (no string read as a list of characters, no float or boolean silently made an integer); an
empty dataset file, a dataset without questions and an empty split are refused naming the file, the
record or the split and `splits.fractions`.

The strictness cases run on the parser (`validated_run`/`validated_optimize`: `parse_config` over the
knob records) fed the composition of their group choices, composed once and copied with the knob set
(tests/support/compose.py, milliseconds a case); `test_one_case_per_group_through_a_full_hydra_composition`
composes the key paths (one case per config group) through Hydra and proves the copy is what Hydra gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memtrace_loop.experiments.config import validated_optimize, validated_run
from memtrace_loop.experiments.factory import select_split, splits_of
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.records import Dataset
from memtrace_loop.pipeline.data.locomo import DataError
from memtrace_loop.pipeline.data.registry import load_dataset
from memtrace_loop.pipeline.data.splits import EmptySplitError, split_by_conversation
from memtrace_loop.pipeline.sim.longmemeval import generate_longmemeval

from tests.support.compose import GROUPS, hydra_plain, plain
from tests.support.paths import FIXTURES


def validate(config: str, *overrides: str) -> object:
    return (validated_run if config == "run" else validated_optimize)(plain(config, *overrides))


def validate_plain(config: str, composed: dict) -> object:
    return (validated_run if config == "run" else validated_optimize)(composed)


# (overrides, the key the error must name): checked for `run` and for `optimize`
BOTH = [
    (["memory_system.top_k=0"], "memory_system.top_k"),
    (["memory_system.top_k=-1"], "memory_system.top_k"),
    (["memory_system.top_k=ten"], "memory_system.top_k"),
    (["memory_system.top_k=2.5"], "memory_system.top_k"),  # never truncated to 2
    (["memory_system.top_k=2.0"], "memory_system.top_k"),  # an integer knob takes integers only
    (["memory_system.top_k=true"], "memory_system.top_k"),  # a boolean is not the integer 1
    (["memory_system.top_k=nan"], "memory_system.top_k"),
    (["memory_system=rag", "memory_system.top_k=0"], "memory_system.top_k"),
    (["memory_system=evermemos", "memory_system.top_k=-2"], "memory_system.top_k"),
    (["memory_system.similar_k=-1"], "memory_system.similar_k"),
    (["memory_system.name=[mem0,rag]"], "memory_system.name"),
    (["memory_system=rag", "memory_system.max_chunk_tokens=8"], "memory_system.max_chunk_tokens"),
    (["memory_system=rag", "memory_system.overlap_tokens=-1"], "memory_system.overlap_tokens"),
    (["memory_system=rag", "memory_system.tokenizer=[a,b]"], "memory_system.tokenizer"),
    (["memory_system=long_context", "memory_system.window_tokens=0"], "memory_system.window_tokens"),
    (["memory_system=evermemos", "memory_system.bm25_top=0"], "memory_system.bm25_top"),
    (["memory_system=evermemos", "memory_system.emb_top=-5"], "memory_system.emb_top"),
    (["memory_system=evermemos", "memory_system.rrf_k=-1"], "memory_system.rrf_k"),
    (["memory_system=evermemos", "memory_system.max_expanded_queries=0"], "memory_system.max_expanded_queries"),
    (["memory_system=evermemos", "memory_system.max_episode_turns=0"], "memory_system.max_episode_turns"),
    (["memory_system=evermemos", "memory_system.max_episode_tokens=1.5"], "memory_system.max_episode_tokens"),
    (["memory_system=evermemos", "memory_system.multi_query=yes"], "memory_system.multi_query"),
    (["workers=0"], "workers"),
    (["workers=-3"], "workers"),
    (["workers=1.5"], "workers"),
    (["seed=abc"], "seed"),
    (["seed=-1"], "splits.seed"),
    (["splits.seed=1.5"], "splits.seed"),
    (["splits.fractions=[0.5,0.5,0.5]"], "splits.fractions"),
    (["splits.fractions=[0,0.5,0.5]"], "splits.fractions"),
    (["splits.fractions=abc"], "splits.fractions"),
    (["splits.fractions=[1]"], "splits.fractions"),
    (["embedder.dim=0"], "embedder.dim"),
    (["embedder.dim=4"], "embedder.dim"),  # the hashing embedder needs at least 8 buckets
    (["embedder.dim=true"], "embedder.dim"),
    (["embedder=openai", "embedder.timeout_s=inf"], "embedder.timeout_s"),
    (["embedder=openai", "embedder.batch_size=0"], "embedder.batch_size"),
    (["embedder=openai", "embedder.max_retries=-1"], "embedder.max_retries"),
    (["dataset.exclude_categories=five"], "dataset.exclude_categories"),
    (["dataset.exclude_categories=5"], "dataset.exclude_categories"),
    (["dataset.exclude_categories=[0]"], "dataset.exclude_categories"),
    (["dataset.exclude_categories=[6]"], "dataset.exclude_categories"),  # LoCoMo has categories 1-5 only
    (["dataset=longmemeval", "dataset.exclude_categories=[7]"], "dataset.exclude_categories"),
    (["dataset.n_conversations=0"], "dataset.n_conversations"),
    (["dataset.sessions_per_conversation=0"], "dataset.sessions_per_conversation"),
    (["dataset.turns_per_session=1"], "dataset.turns_per_session"),
    (["dataset=locomo", "dataset.path=''"], "dataset.path"),
    (["dataset=longmemeval", "dataset.path=null"], "dataset.path"),
    (["dataset=longmemeval", "dataset.hub_split=''"], "dataset.hub_split"),
    (["dataset=longmemeval", "dataset.question_date_in_text=1"], "dataset.question_date_in_text"),
    (["dataset.kind=[sim]"], "dataset.kind"),
    (["lm.task.temperature=-1"], "lm.task.temperature"),
    (["lm.task.temperature=3"], "lm.task.temperature"),
    (["lm.task.temperature=nan"], "lm.task.temperature"),
    (["lm=openai", "lm.task.max_tokens=0"], "lm.task.max_tokens"),
    (["lm.task.num_retries=-1"], "lm.task.num_retries"),
    (["lm.task.cache=1"], "lm.task.cache"),
    (["lm=openai", "lm.task.api_base=''"], "lm.task.api_base"),
    (["embedder=openai", "embedder.api_base=''"], "embedder.api_base"),
    (["lm=openai", "lm.task.timeout_s=inf"], "lm.task.timeout_s"),
    (["tracking.experiment=''"], "tracking.experiment"),
    (["prompts=[a.json]"], "prompts"),
]

OPTIMIZE_ONLY = [
    (["loop.max_iterations=0"], "loop.max_iterations"),
    (["loop.max_candidates=true"], "loop.max_candidates"),
    (["loop.patience=x"], "loop.patience"),
    (["loop.min_gain=-0.1"], "loop.min_gain"),
    (["loop.min_gain=1"], "loop.min_gain"),  # a paired accuracy gain of 1 can never be reached
    (["loop.min_gain=nan"], "loop.min_gain"),
    (["loop.budget_calls=-1"], "loop.budget_calls"),
    (["loop.budget_calls=1.5"], "loop.budget_calls"),
    (["loop.budget_counts_cached=1"], "loop.budget_counts_cached"),
    (["splits.fractions=[0.5,0.5,0]"], "splits.fractions"),  # optimize needs a test split
    (["optimizer.top_stages=0"], "optimizer.top_stages"),
    (["optimizer.max_instruction_chars=-1"], "optimizer.max_instruction_chars"),
    (["optimizer.max_feedback_chars=true"], "optimizer.max_feedback_chars"),
    (["optimizer=gepa", "optimizer.num_threads=0"], "optimizer.num_threads"),
    (["optimizer=gepa", "optimizer.max_metric_calls=2.5"], "optimizer.max_metric_calls"),
    (["optimizer=gepa", "optimizer.reflection_minibatch_size=0"], "optimizer.reflection_minibatch_size"),
    (["optimizer=gepa", "optimizer.seed=-1"], "optimizer.seed"),
    (["optimizer=gepa", "optimizer.use_merge=1"], "optimizer.use_merge"),
    (["optimizer=gepa", "optimizer.candidate_selection_strategy=best"], "optimizer.candidate_selection_strategy"),
    (["optimizer.name=[attribution]"], "optimizer.name"),
    (["attributor.verify=1"], "attributor.verify"),
    (["attributor.semantic_threshold=nan"], "attributor.semantic_threshold"),
    (["attributor.semantic_threshold=1.5"], "attributor.semantic_threshold"),
    (["attributor.replay.max_joint=0"], "attributor.replay.max_joint"),
    (["attributor=llm", "attributor.max_steps=0"], "attributor.max_steps"),
    (["attributor=llm", "attributor.max_chars_per_step=100"], "attributor.max_chars_per_step"),
    (["register_prompts=1"], "register_prompts"),
]

RUN_ONLY = [
    (["splits.fractions=[1,0,0]", "split=test"], "splits.fractions"),
    (["splits.fractions=[0.5,0.5,0]", "split=test"], "split=test"),
    (["split=validation"], "split"),
]


@pytest.mark.parametrize(
    ("config", "overrides", "key"),
    [("run", o, k) for o, k in BOTH + RUN_ONLY] + [("optimize", o, k) for o, k in BOTH + OPTIMIZE_ONLY],
    ids=lambda value: " ".join(value) if isinstance(value, list) else str(value),
)
def test_a_bad_knob_is_a_config_error_naming_its_key(config, overrides, key, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    with pytest.raises(ConfigError) as caught:
        validate(config, *overrides)
    message = str(caught.value)
    assert key in message
    assert "\n" not in message  # one readable line


# one bad knob per config group (and top-level, loop, splits) through a whole Hydra composition
THROUGH_HYDRA = [
    ("run", ["memory_system=evermemos", "memory_system.top_k=-2"], "memory_system.top_k"),
    ("optimize", ["embedder=openai", "embedder.batch_size=0"], "embedder.batch_size"),
    ("run", ["dataset=longmemeval", "dataset.path=null"], "dataset.path"),
    ("optimize", ["lm=openai", "lm.task.max_tokens=0"], "lm.task.max_tokens"),
    ("optimize", ["optimizer=gepa", "optimizer.max_metric_calls=2.5"], "optimizer.max_metric_calls"),
    ("optimize", ["attributor=llm", "attributor.max_steps=0"], "attributor.max_steps"),
    ("run", ["tracking.experiment=''"], "tracking.experiment"),
    ("run", ["seed=-1"], "splits.seed"),  # an interpolated value
    ("optimize", ["loop.min_gain=nan"], "loop.min_gain"),
    ("run", ["splits.fractions=[0.5,0.5,0]", "split=test"], "split=test"),
]


def test_the_key_paths_cover_every_config_group():
    chosen = {o.split("=")[0] for _, overrides, _ in THROUGH_HYDRA for o in overrides}
    # `experiment` is a sweep overlay (conf/experiment/compare_optimizers.yaml): no schema keys of its own
    assert GROUPS - {"tracking", "experiment"} <= chosen and "tracking.experiment" in chosen


@pytest.mark.parametrize(("config", "overrides", "key"), THROUGH_HYDRA,
                         ids=lambda value: " ".join(value) if isinstance(value, list) else str(value))
def test_one_case_per_group_through_a_full_hydra_composition(config, overrides, key, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    composed = hydra_plain(config, *overrides)
    assert repr(composed) == repr(plain(config, *overrides))  # the compose-once copy is what Hydra gives
    with pytest.raises(ConfigError) as caught:
        validate_plain(config, composed)
    assert key in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["memory_system=evermemos", "memory_system.max_expanded_queries=0", "memory_system.multi_query=false"],
        ["lm.task.temperature=2"],  # an integer is a fine number
        ["dataset.exclude_categories=[]", "seed=0", "workers=1"],
        ["dataset=longmemeval", "dataset.exclude_categories=[11,12,13,14,15,16]"],
        ["memory_system=rag", "memory_system.overlap_tokens=0", "memory_system.top_k=1"],
    ],
)
def test_good_values_still_validate(overrides):
    if not overrides:  # the defaults, through Hydra as the apps compose them
        validated_optimize(hydra_plain("optimize"))
        validated_run(hydra_plain("run"))
    validated_optimize(plain("optimize", *overrides))
    validated_run(plain("run", *overrides))
    validated_optimize(plain("optimize", "loop.min_gain=0", "loop.budget_calls=0", "splits.fractions=[0.6,0.2,0.2]"))
    validated_run(plain("run", "split=test", "splits.fractions=[0.5,0.5,0]", "split=dev"))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("memory_system.top_k=ten", "memory_system.top_k: expected an integer, got 'ten'"),
        ("memory_system.top_k=2.5", "memory_system.top_k: expected an integer, got 2.5"),
        ("memory_system.top_k=0", "memory_system.top_k: must be >= 1, got 0"),
        ("workers=0", "workers: must be >= 1, got 0"),
        ("dataset.exclude_categories=five", "dataset.exclude_categories: expected a list, got 'five'"),
        ("loop.min_gain=nan", "loop.min_gain: expected a finite number, got nan"),
        ("loop.budget_counts_cached=1", "loop.budget_counts_cached: expected true or false, got 1"),
    ],
)
def test_the_message_reads_key_expected_got(override, message):
    with pytest.raises(ConfigError) as caught:
        validated_optimize(plain("optimize", override))
    assert message in str(caught.value)


def test_a_value_interpolated_into_several_keys_names_each_once():
    with pytest.raises(ConfigError) as caught:
        validated_run(plain("run", "seed=abc"))
    parts = str(caught.value).split("; ")
    assert parts[0] == "seed: expected an integer, got 'abc'"
    assert len(parts) == len(set(parts)) and {"splits.seed", "dataset.seed"} <= {p.split(":")[0] for p in parts}


def test_library_mappings_are_strict_too():
    with pytest.raises(ConfigError, match=r"memory_system\.top_k: expected an integer, got '3'"):
        build_memory_system({"name": "rag", "top_k": "3"}, HashingEmbedder())
    with pytest.raises(ConfigError, match=r"dataset\.exclude_categories: expected a list, got '5'"):
        load_dataset({"kind": "sim", "exclude_categories": "5"})
    assert build_memory_system({"name": "rag", "top_k": 3}, HashingEmbedder()).knobs.top_k == 3


# ------------------------------------------------------------------------------- empty data


def write(path: Path, records: object) -> Path:
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def locomo_samples() -> list[dict]:
    return json.loads((FIXTURES / "locomo_mini.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("kind", ["locomo", "longmemeval"])
def test_an_empty_dataset_file_is_refused_naming_it(kind, tmp_path):
    path = write(tmp_path / f"empty_{kind}.json", [])
    with pytest.raises(DataError, match=rf"{path}: the dataset has no conversations"):
        load_dataset({"kind": kind, "path": str(path)})


def test_a_locomo_file_without_questions_is_refused_naming_it(tmp_path):
    samples = [{**sample, "qa": []} for sample in locomo_samples()]
    path = write(tmp_path / "no_questions.json", samples)
    with pytest.raises(DataError, match=rf"{path}: the dataset has no questions \({len(samples)} conversation"):
        load_dataset({"kind": "locomo", "path": str(path)})


def test_a_locomo_conversation_without_turns_is_refused_naming_the_record(tmp_path):
    samples = locomo_samples()
    conversation = samples[0]["conversation"]
    for key in [k for k in conversation if k.startswith("session_") and not k.endswith("date_time")]:
        conversation[key] = []
    path = write(tmp_path / "no_turns.json", samples)
    with pytest.raises(DataError, match=rf"{path}: sample '{samples[0]['sample_id']}' \(#0\): field 'conversation': "
                                        r"no turns"):
        load_dataset({"kind": "locomo", "path": str(path)})


def test_a_longmemeval_record_without_turns_is_refused_naming_the_record(tmp_path):
    records = generate_longmemeval(seed=2, n_questions=3, sessions_per_question=2, turns_per_session=4)
    records[1].update(haystack_sessions=[[], []])
    path = write(tmp_path / "no_turns.json", records)
    with pytest.raises(DataError, match=rf"{records[1]['question_id']}.*field 'haystack_sessions': no turns"):
        load_dataset({"kind": "longmemeval", "path": str(path)})


def test_a_locomo_record_without_questions_is_kept_with_a_warning(tmp_path, caplog):
    samples = locomo_samples()
    samples[0]["qa"] = []
    path = write(tmp_path / "one_without.json", samples)
    dataset = load_dataset({"kind": "locomo", "path": str(path)})
    assert len(dataset.conversations) == len(samples) and dataset.questions
    assert f"sample '{samples[0]['sample_id']}'" in caplog.text and "no questions" in caplog.text


# ------------------------------------------------------------------------------- empty splits


def sim(n: int) -> Dataset:
    return load_dataset({"kind": "sim", "seed": 0, "n_conversations": n})


def test_selecting_an_empty_split_names_the_split_and_the_fractions():
    with pytest.raises(EmptySplitError) as caught:
        select_split(sim(2), "test", [0.5, 0.25, 0.25], 0)
    assert isinstance(caught.value, ConfigError)
    assert "split=test" in str(caught.value) and "splits.fractions=[0.5, 0.25, 0.25]" in str(caught.value)
    with pytest.raises(EmptySplitError, match=r"split=test: .*splits\.fractions=\[0\.8, 0\.2, 0\.0\]"):
        select_split(sim(5), "test", [0.8, 0.2, 0.0], 0)
    assert select_split(sim(5), "dev", [0.8, 0.2, 0.0], 0).conversations  # the others still work


def test_a_split_with_conversations_but_no_questions_is_refused():
    dataset = sim(4)
    without = Dataset(name="quiet", conversations=dataset.conversations, questions=())
    with pytest.raises(EmptySplitError, match=r"split=train: the train split has \d+ conversation\(s\) but no ques"):
        split_by_conversation(without, seed=0).select("train")


def test_optimize_splits_must_all_be_non_empty(tmp_path):
    with pytest.raises(EmptySplitError, match=r"split=test: .*splits\.fractions=\[0\.5, 0\.25, 0\.25\]"):
        splits_of(validated_optimize(plain("optimize", "dataset.n_conversations=2")), tmp_path)
    parts = splits_of(validated_optimize(plain("optimize", "dataset.n_conversations=3")), tmp_path)
    assert all(part.questions for part in (parts.train, parts.dev, parts.test))
