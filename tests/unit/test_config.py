"""One schema per config group: every option composes and validates, bad input fails naming the key,
each default is the schema's (Hydra composes exactly it), and a system's knobs record is frozen and
part of its memory key."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException
from memtrace_loop.experiments.config import (
    LoopConfig,
    OptimizeConfig,
    RunConfig,
    SplitsConfig,
    TrackingConfig,
    validated_attribute,
    validated_optimize,
    validated_run,
    validated_stages,
)
from memtrace_loop.memory_systems.registry import SYSTEMS, build_memory_system, knobs_schema
from memtrace_loop.optimizers.registry import OPTIMIZERS, RewriteSettings
from memtrace_loop.pipeline.analysis.attribution.registry import ATTRIBUTORS, LineageSettings, LLMSettings
from memtrace_loop.pipeline.backends.embeddings import HASHING_DIM, HashingEmbedder
from memtrace_loop.pipeline.backends.lm import RECORD_BY_BACKEND
from memtrace_loop.pipeline.backends.registry import LM_BACKENDS
from memtrace_loop.pipeline.core.config import ConfigError, defaults_of
from memtrace_loop.pipeline.core.records import Conversation, Turn
from memtrace_loop.pipeline.data.registry import DATASETS, load_dataset
from memtrace_loop.pipeline.loop.optimization import LoopSettings
from omegaconf import OmegaConf

from tests.support.paths import REPO

CONF = REPO / "conf"


def plain(*overrides: str, config: str = "optimize") -> dict:
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return OmegaConf.to_container(compose(config, overrides=list(overrides)), resolve=True)


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_every_group_option_has_a_registry_entry_and_the_reverse():
    assert options("memory_system") == sorted(SYSTEMS)
    assert options("dataset") == sorted(DATASETS)
    assert options("optimizer") == sorted(OPTIMIZERS)
    assert options("lm") == sorted(LM_BACKENDS)
    assert options("attributor") == sorted(ATTRIBUTORS)


def test_each_lm_backend_spec_reads_the_record_its_config_is_parsed_into():
    """The LM-backend registry and the records `LMConfig` dispatches to list the same backends, in order."""
    assert {name: spec.schema for name, spec in LM_BACKENDS.items()} == dict(RECORD_BY_BACKEND)
    assert LM_BACKENDS.names == tuple(RECORD_BY_BACKEND)
    assert LM_BACKENDS.compared() == ()


def test_an_unknown_lm_backend_names_the_key_and_the_choices():
    expected = "lm.task.backend: unknown backend 'gpt' (available: ['sim', 'openai', 'local'])"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        LM_BACKENDS.get("gpt", "lm.task.backend")


@pytest.mark.parametrize(
    "group,option", [(g, o) for g in ("lm", "embedder", "memory_system", "dataset", "optimizer", "tracking",
                                      "attributor")
                     for o in options(g)],
)
def test_every_group_option_composes_and_validates(group, option, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    config = validated_optimize(plain(f"{group}={option}"))
    assert isinstance(config, OptimizeConfig)
    if group not in ("optimizer", "attributor"):
        validated_run(plain(f"{group}={option}", config="run"))
    if group not in ("optimizer",):
        validated_attribute(plain(f"{group}={option}", "run_id=x", config="attribute"))
    if group in ("memory_system", "embedder"):
        validated_stages(plain(f"{group}={option}", config="stages"))


@pytest.mark.parametrize(
    "override,key",
    [
        ("memory_system.top_k=-3", "memory_system.top_k"),
        ("memory_system.top_k=0", "memory_system.top_k"),
        ("memory_system.similar_k=0", "memory_system.similar_k"),
        ("memory_system.top_k=ten", "memory_system.top_k"),
        ("seed=abc", "seed"),
        ("workers=0", "workers"),
        ("embedder.dim=0", "embedder.dim"),
        ("splits.fractions=[0.5,0.5,0.5]", "splits.fractions"),
        ("loop.min_gain=-0.1", "loop.min_gain"),
        ("loop.max_iterations=0", "loop.max_iterations"),
        ("loop.patience=x", "loop.patience"),
        ("loop.budget_calls=-1", "loop.budget_calls"),
        ("loop.train_conversations=-1", "loop.train_conversations"),
        ("dataset.exclude_categories=five", "dataset.exclude_categories"),
        ("dataset.n_conversations=0", "dataset.n_conversations"),
        ("optimizer.top_stages=0", "optimizer.top_stages"),
        ("lm.task.temperature=-1", "lm.task.temperature"),
        ("lm.task.backend=nope", "lm.task.backend"),
        ("+memory_system.top_kk=5", "memory_system.top_kk"),
        ("+loop.max_iteration=5", "loop.max_iteration"),
        ("+lm.judge.timeout=3", "lm.judge.timeout"),
        ("+dataset.n_conversation=3", "dataset.n_conversation"),
        ("+embedder.dimension=3", "embedder.dimension"),
        ("+optimizer.topstages=3", "optimizer.topstages"),
        ("+tracking.urii=x", "tracking.urii"),
        ("attributor.verify=maybe", "attributor.verify"),
        ("attributor.replay.max_joint=0", "attributor.replay.max_joint"),
        ("+attributor.max_jointt=2", "attributor.max_jointt"),
        ("attributor.semantic_threshold=1.5", "attributor.semantic_threshold"),
        ("+attributor.max_steps=3", "attributor.max_steps"),  # an llm key on the lineage attributor
        ("attributor.name=nope", "attributor.name"),
        ("+sed=3", "sed"),
        ("memory_system=rag", None),
    ],
)
def test_bad_values_fail_naming_the_key(override, key):
    if key is None:  # a good override: validates
        validated_optimize(plain(override))
        return
    with pytest.raises(ConfigError) as caught:
        validated_optimize(plain(override))
    assert key in str(caught.value)


def test_llm_attributor_settings_are_checked_naming_the_key():
    with pytest.raises(ConfigError, match=r"attributor\.max_steps"):
        validated_optimize(plain("attributor=llm", "attributor.max_steps=0"))
    validated_optimize(plain("attributor=llm", "attributor.max_steps=4", "attributor.verify=true"))


def test_explicit_lineage_without_verification_is_the_default():
    assert plain("attributor=lineage", "attributor.verify=false") == plain()


def test_attribute_app_composes_and_needs_exactly_one_source():
    config = validated_attribute(plain("run_id=abc", config="attribute"))
    assert config.run_id == "abc" and config.run_dir is None and config.attributor.name == "lineage"
    assert validated_attribute(plain("run_dir=out", "attributor=llm", config="attribute")).run_dir == "out"
    for overrides in ((), ("run_id=abc", "run_dir=out")):
        with pytest.raises(ConfigError, match="run_id"):
            validated_attribute(plain(*overrides, config="attribute"))
    with pytest.raises(ConfigError, match=r"attributor\.verify"):
        validated_attribute(plain("run_id=abc", "attributor.verify=maybe", config="attribute"))


def test_a_typo_in_an_override_without_plus_fails_at_composition_naming_the_key():
    with pytest.raises(ConfigCompositionException, match=r"memory_system\.top_kk"):
        plain("memory_system.top_kk=5")


def test_exclude_categories_is_never_read_as_characters():
    with pytest.raises(ConfigError, match="exclude_categories"):
        load_dataset({"kind": "sim", "exclude_categories": "five"})
    config = validated_run(plain("dataset.exclude_categories=[1,2]", config="run"))
    assert config.evaluation.exclude_categories == (1, 2)


def test_library_mappings_are_checked_too():
    with pytest.raises(ConfigError, match=r"memory_system\.top_kk"):
        build_memory_system({"name": "mem0", "top_kk": 5}, HashingEmbedder())
    with pytest.raises(ConfigError, match=r"memory_system\.overlap_tokens"):
        build_memory_system({"name": "rag", "max_chunk_tokens": 100, "overlap_tokens": 100}, HashingEmbedder())
    with pytest.raises(ConfigError, match=r"memory_system\.name: unknown memory system 'nope'"):
        build_memory_system({"name": "nope"}, HashingEmbedder())
    with pytest.raises(ConfigError, match=r"dataset\.kind"):
        load_dataset({"kind": "nope"})
    with pytest.raises(ConfigError, match=r"dataset\.path"):
        load_dataset({"kind": "locomo"})


# ------------------------------------------------------------------------------- one home per default


def test_hydra_composes_exactly_the_schema_defaults():
    composed = plain()
    defaults = defaults_of(OptimizeConfig)
    for key in ("seed", "workers", "prompts", "resume", "register_prompts", "run_name"):
        assert composed[key] == defaults[key]
    assert composed["loop"] == defaults_of(LoopConfig) == {
        "max_iterations": 6, "max_candidates": 2, "patience": 2, "min_gain": 0.02, "budget_calls": 0,
        "budget_counts_cached": True, "verify_cases": 8, "train_conversations": 0,
        "screen": {"enabled": True, "guard_fraction": 0.25, "min_guard": 5, "audit": False},
    }
    assert composed["splits"] == {**defaults_of(SplitsConfig), "seed": composed["seed"]}
    assert composed["tracking"]["experiment"] == defaults_of(TrackingConfig)["experiment"]
    assert plain(config="run")["split"] == defaults_of(RunConfig)["split"]
    assert composed["optimizer"] == {"name": "attribution", **defaults_of(RewriteSettings)}
    assert composed["embedder"] == {"backend": "hashing", "dim": HASHING_DIM}
    assert composed["attributor"] == {"name": "lineage", **defaults_of(LineageSettings)}
    assert composed["attributor"]["verify"] is False  # the current behaviour stays the default
    assert plain("attributor=llm")["attributor"] == {"name": "llm", **defaults_of(LLMSettings)}
    lm_defaults = defaults_of(LM_BACKENDS.get("sim").schema)  # the sim backend's own record
    for role in ("task", "judge", "attributor", "rewriter"):
        assert composed["lm"][role] == {**lm_defaults, "model": "stand-in"}
    for name in SYSTEMS:
        node = plain(f"memory_system={name}")["memory_system"]
        assert node == {"name": name, **defaults_of(knobs_schema(name))}
    for kind, spec in DATASETS.items():
        node = plain(f"dataset={kind}")["dataset"]
        for key, value in defaults_of(spec.schema).items():
            if key != "path":  # wired to an environment variable by the YAML (no default in the schema)
                assert node[key] == (composed["seed"] if key == "seed" else value), key


def _leaves(node, prefix=""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), node


def test_no_yaml_file_repeats_a_schema_default():
    from hydra.core.config_store import ConfigStore

    stored = ConfigStore.instance().repo["schema"]
    for path in sorted(CONF.rglob("*.yaml")):
        if path.relative_to(CONF).parts[0] in ("experiment", "hydra"):
            continue  # overlays of other configs (a sweep, a launcher), with no schema node of their own
        raw = OmegaConf.to_container(OmegaConf.load(path))
        (schema_ref,) = [d for d in raw.pop("defaults") if isinstance(d, str) and "schema/" in d]
        group_dir, _, rest = schema_ref.strip("/").split("@")[0].removeprefix("schema/").rpartition("/")
        folder = stored[group_dir] if group_dir else stored
        node = OmegaConf.to_container(folder[f"{rest}.yaml"].node)
        schema_leaves = dict(_leaves(node))
        for key, value in _leaves(raw):
            assert schema_leaves.get(key, object()) != value, (path.name, key)
    assert LoopSettings().max_iterations == 6 == validated_optimize(plain()).loop_settings().max_iterations


def test_validated_loop_settings_follow_the_config():
    config = validated_optimize(plain("loop.max_iterations=3", "loop.min_gain=0.1", "workers=2", "seed=4",
                                      "loop.budget_calls=500", "loop.budget_counts_cached=false",
                                      "loop.train_conversations=1"))
    assert config.loop_settings() == LoopSettings(
        max_iterations=3, patience=2, min_gain=0.1, max_candidates=2, exclude_categories=(5,), workers=2, seed=4,
        budget_calls=500, budget_counts_cached=False, train_conversations=1,
    )


# ------------------------------------------------------------------------------- knobs record = memory key


CONVERSATION = Conversation(
    "c1", ("Alice", "Bob"), (Turn("D1:1", "Alice", "I moved to Paris last month.", 1, "2023-05-08T13:56"),)
)


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_every_registered_system_has_a_frozen_knobs_record(name):
    schema = knobs_schema(name)
    assert dataclasses.is_dataclass(schema) and schema.__dataclass_params__.frozen


# one construction knob per system of the seeds (a new system is covered by the test above)
@pytest.mark.parametrize("name", ["mem0", "rag", "long_context", "evermemos"])
def test_the_knobs_record_is_frozen_and_its_construction_knobs_are_in_the_memory_key(name):
    system = build_memory_system({"name": name, "tokenizer": "approx"} if name != "mem0" else {"name": name},
                                 HashingEmbedder())
    schema = knobs_schema(name)
    assert isinstance(system.knobs, schema) and dataclasses.is_dataclass(schema)
    construction = {"mem0": "similar_k", "rag": "max_chunk_tokens", "long_context": "window_tokens",
                    "evermemos": "max_episode_turns"}[name]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(system.knobs, construction, 1)
    value = getattr(system.knobs, construction)
    assert f"{construction}={value}" in system.construction_knobs()
    changed = build_memory_system(
        {**({"tokenizer": "approx"} if name != "mem0" else {}), "name": name, construction: value + 1},
        HashingEmbedder(),
    )
    assert changed.memory_key(CONVERSATION) != system.memory_key(CONVERSATION)
    if name != "long_context":  # top_k only answers: the built memory is reused
        other = build_memory_system(
            {**({"tokenizer": "approx"} if name != "mem0" else {}), "name": name, "top_k": 3}, HashingEmbedder()
        )
        assert other.memory_key(CONVERSATION) == system.memory_key(CONVERSATION)


def test_memory_key_values_are_unchanged():
    """The keys hash the same payload as before the knobs became the schema (mem0 defaults)."""
    system = build_memory_system({"name": "mem0"}, HashingEmbedder())
    assert system.construction_knobs() == "similar_k=5;embedder=HashingEmbedder(dim=256)"


def test_validation_gives_one_typed_record_with_each_groups_record():
    config = validated_run(plain("memory_system=rag", "memory_system.top_k=7", config="run"))
    assert (config.memory_system.name, config.memory_system.settings.top_k) == ("rag", 7)
    assert config.lm.task.backend == "sim" and config.embedder.backend == "hashing"
    assert (config.dataset.name, config.attributor.name) == ("sim", "lineage")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 1  # type: ignore[misc]


@pytest.mark.parametrize(("override", "key", "owner"), [
    ("+lm.task.dialect=vllm", "lm.task.dialect", "openai"),  # lm=sim
    ("+lm.task.model_path=/x.gguf", "lm.task.model_path", "local"),
])
def test_a_key_of_another_lm_backend_is_refused_naming_the_key(override, key, owner):
    with pytest.raises(ConfigError, match=rf"{re.escape(key)}: a key of backend {owner}, not of sim"):
        validated_run(plain(override, config="run"))
