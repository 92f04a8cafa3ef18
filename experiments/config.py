"""The schemas of the apps' configs and the one place a composed config is validated.

`RunConfig`, `OptimizeConfig`, `AttributeConfig`, `ReportConfig`, `StagesConfig`, `ExportConfig`,
`UploadConfig` and `CompareConfig` are the frozen records of `conf/<app>.yaml`; their fields hold THE
defaults (`conf/__init__.py` composes the tree from them). A group field holds the record its
registry's schema parses: `lm` (`LMSetConfig`), `embedder` (`EmbedderConfig`) and, as `Chosen(name,
settings)`, `memory_system`, `dataset`, `optimizer` and `attributor`. `validated_run(plain)` etc.
return that record or raise one `ConfigError` naming every failing key (unknown, wrong type, out of
range). Nothing below validation reads the composed mapping; nothing here builds or runs anything.

`stand_in_notice(config)` is the one sentence saying a run's numbers come from the test world (the
stand-in LM, backend `sim`, on LoCoMo or LongMemEval: scores of the world's rules, not of a model; None
otherwise); `stand_in_tags(config)` are every run's MLflow tags of it. The apps print the notice at
start and end, tag the run and put it on report.html.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Literal, TypeVar

import pydantic
from memtrace_loop.memory_systems.registry import knobs_from_config, knobs_schema
from memtrace_loop.optimizers.registry import optimizer_settings
from memtrace_loop.pipeline.analysis.attribution.registry import attributor_settings
from memtrace_loop.pipeline.backends.embeddings import EmbedderConfig
from memtrace_loop.pipeline.backends.failure_guard import MAX_FAILED_SHARE
from memtrace_loop.pipeline.backends.lm import LMSetConfig
from memtrace_loop.pipeline.backends.registry import lm_set_configs
from memtrace_loop.pipeline.core.config import (
    ConfigError,
    field_names,
    parse_config,
    plain_of,
    require,
    require_categories,
    require_text,
)
from memtrace_loop.pipeline.data.registry import dataset_config
from memtrace_loop.pipeline.data.splits import SPLIT_NAMES
from memtrace_loop.pipeline.loop.settings import LoopSettings, ScreenSettings

_STRICT = pydantic.ConfigDict(extra="forbid")
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Chosen(Generic[R]):
    """A group whose option is picked by name: the option's name (a dataset's `kind`) and its settings record."""

    name: str
    settings: R

    def node(self, key: str = "name") -> dict[str, Any]:
        """The group as a plain config node (`key`: the option's key, `kind` for a dataset)."""
        return {key: self.name, **plain_of(self.settings)}


# A group field of an app record: its registry parses the node (`_GROUP_PARSERS`), so the top-level parse
# passes the node through untouched and validation puts the typed record in its place.
LMGroup = Annotated[LMSetConfig, pydantic.SkipValidation]
EmbedderGroup = Annotated[EmbedderConfig, pydantic.SkipValidation]
ChosenGroup = Annotated[Chosen[Any], pydantic.SkipValidation]
LINEAGE = Chosen("lineage", attributor_settings({"name": "lineage"}))


@dataclass(frozen=True)
class TrackingConfig:
    """MLflow tracking: store, experiment, per-request timeout and retries (`configure_tracking_client`),
    and the questions logged as MLflow traces (`pipeline.tracking.traces`)."""

    __pydantic_config__ = _STRICT
    uri: str
    experiment: str = "memtrace"
    timeout_s: float = 10.0  # how long a tracking server may keep one request waiting
    max_retries: int = 2  # retries of a failed request before the command gives up
    traces: bool = True  # `run`: each answered question as an MLflow trace with its blame (pipeline.tracking.traces)
    max_traces: int = 100  # ... at most this many per run (dataset order; conf: MEMTRACE_MAX_TRACES)
    max_traces_per_iteration: int = 20  # `optimize`: train failures per iteration's run (at most max_traces)

    def __post_init__(self) -> None:
        require(self, max_retries=(0, 10), max_traces=(0, None), max_traces_per_iteration=(0, None))
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        require_text(self, "uri", "experiment")


@dataclass(frozen=True)
class SplitsConfig:
    """Train / dev / test by conversation."""

    __pydantic_config__ = _STRICT
    seed: int
    fractions: tuple[float, float, float] = (0.5, 0.25, 0.25)

    def __post_init__(self) -> None:
        require(self, seed=(0, None))
        if any(not math.isfinite(f) or f < 0 for f in self.fractions) or not math.isclose(
            sum(self.fractions), 1.0, abs_tol=1e-9
        ):
            raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {list(self.fractions)}")
        if self.fractions[0] <= 0:
            raise ValueError(f"fractions must give the train split a positive share, got {list(self.fractions)}")


@dataclass(frozen=True)
class EvaluationConfig:
    __pydantic_config__ = _STRICT
    exclude_categories: tuple[int, ...]  # reported per category, left out of the overall score

    def __post_init__(self) -> None:
        require_categories(self)


@dataclass(frozen=True)
class LoopConfig:
    """The closed loop's budget and gate (defaults and meaning: `LoopSettings`, the loop's own record)."""

    __pydantic_config__ = _STRICT
    max_iterations: int = LoopSettings.max_iterations
    max_candidates: int = LoopSettings.max_candidates
    patience: int = LoopSettings.patience  # iterations without an accepted candidate before stopping
    min_gain: float = LoopSettings.min_gain
    # the loop starts no step once it is spent; the step that crosses it is finished; test is outside it
    budget_calls: int = LoopSettings.budget_calls
    budget_counts_cached: bool = LoopSettings.budget_counts_cached
    verify_cases: int | None = LoopSettings.verify_cases  # with attributor.verify; replays count in the budget
    # the next ones of a seeded order after each accepted candidate (pipeline/data/splits.py, train_part)
    train_conversations: int = LoopSettings.train_conversations
    screen: ScreenSettings = field(default_factory=ScreenSettings)

    def __post_init__(self) -> None:
        require(self, max_iterations=(1, None), max_candidates=(1, None), patience=(1, None), min_gain=(0, None),
                budget_calls=(0, None), train_conversations=(0, None))
        if self.verify_cases is not None:
            require(self, verify_cases=(1, None))
        if self.min_gain >= 1:  # a paired accuracy gain: 1 or more can never be reached
            raise ValueError(f"min_gain must be < 1 (a gain in accuracy), got {self.min_gain!r}")


@dataclass(frozen=True, kw_only=True)
class _AppConfig:
    """What `run` and `optimize` share."""

    lm: LMGroup
    embedder: EmbedderGroup
    memory_system: ChosenGroup
    dataset: ChosenGroup
    tracking: TrackingConfig
    splits: SplitsConfig
    evaluation: EvaluationConfig
    cache_dir: str  # DSPy's response cache (wired to MEMTRACE_CACHE_DIR by the YAML)
    seed: int = LoopSettings.seed
    workers: int = LoopSettings.workers  # threads for ingestion and answering (results do not depend on it)
    prompts: str | None = None  # an exported prompt set (JSON/YAML) to start from
    run_name: str | None = None
    max_failed_share: float = MAX_FAILED_SHARE  # the run stops (TooManyFailures) when more LM calls finally fail
    allow_failed_calls: bool = False  # a finished run with failed LM calls exits 0 (FINISHED), not 3 (FAILED)

    def __post_init__(self) -> None:
        require(self, workers=(1, None), seed=(0, None), max_failed_share=(0.0, 1.0))


@dataclass(frozen=True, kw_only=True)
class RunConfig(_AppConfig):
    """`memtrace run`."""

    split: Literal["all", "train", "dev", "test"] = "all"
    attributor: ChosenGroup = LINEAGE  # attributes the failures

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.split != "all" and self.splits.fractions[SPLIT_NAMES.index(self.split)] <= 0:
            raise ValueError(
                f"split={self.split} selects an empty split: splits.fractions={list(self.splits.fractions)} "
                f"(train, dev, test) gives {self.split} no share"
            )


@dataclass(frozen=True, kw_only=True)
class OptimizeConfig(_AppConfig):
    """`memtrace optimize`."""

    optimizer: ChosenGroup
    attributor: ChosenGroup = LINEAGE
    loop: LoopConfig = field(default_factory=LoopConfig)
    resume: str | None = None  # a previous run directory (with checkpoint.json) to continue
    register_prompts: bool = True  # register accepted prompt sets in MLflow's prompt registry

    def __post_init__(self) -> None:
        super().__post_init__()
        if min(self.splits.fractions) <= 0:
            raise ValueError(
                f"splits.fractions must give train, dev and test each a positive share (optimize needs all three), "
                f"got {list(self.splits.fractions)}"
            )

    def loop_settings(self) -> LoopSettings:
        return LoopSettings(
            max_iterations=self.loop.max_iterations, patience=self.loop.patience, min_gain=self.loop.min_gain,
            max_candidates=self.loop.max_candidates, exclude_categories=self.evaluation.exclude_categories,
            workers=self.workers, seed=self.seed, budget_calls=self.loop.budget_calls,
            budget_counts_cached=self.loop.budget_counts_cached, verify_cases=self.loop.verify_cases,
            train_conversations=self.loop.train_conversations, screen=self.loop.screen,
        )


@dataclass(frozen=True, kw_only=True)
class AttributeConfig:
    """`memtrace attribute`; its dataset, system, embedder and evaluation are the fallback of the source
    run's own (`use_run_config`)."""

    lm: LMGroup
    embedder: EmbedderGroup
    memory_system: ChosenGroup
    dataset: ChosenGroup
    attributor: ChosenGroup
    tracking: TrackingConfig
    evaluation: EvaluationConfig
    cache_dir: str
    seed: int = LoopSettings.seed  # the fallback dataset's seed (a generated dataset)
    run_id: str | None = None  # an MLflow run of `memtrace run`
    run_dir: str | None = None  # ... or a directory `memtrace run` saved (cases.json, graphs/)
    # ... or graph files another tool traced (smartcomment / ExecNetwork, or ours): a file or a folder
    graphs: str | None = None
    stage_map: dict[str, str] | str | None = None  # with graphs: operation name -> stage (or a YAML/JSON file)
    use_run_config: bool = True
    log: bool = True  # log the attributions to MLflow (a run tagged memtrace.command=attribute)
    run_name: str | None = None

    def __post_init__(self) -> None:
        require(self, seed=(0, None))
        if sum(source is not None for source in (self.run_id, self.run_dir, self.graphs)) != 1:
            raise ValueError("give exactly one of run_id=<mlflow run id>, run_dir=<saved run directory> or "
                             "graphs=<graph file or folder>")
        if self.stage_map is not None and self.graphs is None:
            raise ValueError("stage_map= names the stages of graphs=<files>; a run of ours has its stages")


@dataclass(frozen=True, kw_only=True)
class ReportConfig(AttributeConfig):
    """`memtrace report` of a saved (`run_dir`) or logged (`run_id`) run."""

    log: bool = True  # log report.html as an artifact of the source run (run_id only)
    title: str | None = None
    max_nodes: int = 60  # nodes drawn per failure

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self, max_nodes=(1, None))
        if self.graphs is not None:
            raise ValueError("graphs= is for `memtrace attribute`; a report needs a run (run_id= or run_dir=)")


@dataclass(frozen=True)
class StagesConfig:
    """`memtrace stages`."""

    memory_system: ChosenGroup
    embedder: EmbedderGroup
    prompts: str | None = None
    format: Literal["table", "json"] = "table"


@dataclass(frozen=True)
class CompareConfig:
    """The lab's comparison (`experiments.lab.compare`, `conf/compare.yaml`) of a sweep's runs."""

    __pydantic_config__ = _STRICT
    tracking: TrackingConfig
    sweep_dir: str | None = None  # a `memtrace optimize -m` output directory; None: every run of the experiment
    out: str | None = None  # where the report goes; default <sweep_dir>/comparison or outputs/compare/<experiment>
    reference: str = "attribution"  # the optimizer every other one is paired against
    confidence: float = 0.95
    n_resamples: int = 1000
    log: bool = True  # log the report as a `comparison` run in the experiment

    def __post_init__(self) -> None:
        require(self, n_resamples=(1, None))
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")


@dataclass(frozen=True)
class UploadConfig:
    """`memtrace upload run_dir=<output dir of memtrace run>`: log a saved run to the tracking store."""

    __pydantic_config__ = _STRICT
    tracking: TrackingConfig
    run_dir: str
    experiment: str | None = None  # None: the experiment the run was made for (saved in its record)


@dataclass(frozen=True)
class ExportConfig:
    """`memtrace export`."""

    tracking: TrackingConfig
    run_id: str
    out: str = "best_prompts.json"


def _mapping(node: object, group: str) -> Mapping[str, Any]:
    if not isinstance(node, Mapping):
        raise ConfigError(f"{group}: must be a mapping, got {type(node).__name__}")
    return node


def _memory_system(node: object) -> Chosen[Any]:
    name = _mapping(node, "memory_system").get("name")
    return Chosen(str(name), knobs_from_config(knobs_schema(name), _mapping(node, "memory_system")))


def _dataset(node: object) -> Chosen[Any]:
    return Chosen(str(_mapping(node, "dataset").get("kind")), dataset_config(_mapping(node, "dataset")))


def _optimizer(node: object) -> Chosen[Any]:
    given = _mapping(node, "optimizer")
    return Chosen(str(given.get("name")), optimizer_settings(given.get("name"), given))


def _attributor(node: object) -> Chosen[Any]:
    settings = attributor_settings(node)
    return Chosen(str(_mapping(node, "attributor").get("name", "lineage")), settings)


# each group's registry parses its node into its record (every key checked, ConfigError naming it)
_GROUP_PARSERS: Mapping[str, Callable[[Any], object]] = {
    "lm": lm_set_configs,
    "embedder": EmbedderConfig.from_mapping,
    "memory_system": _memory_system,
    "dataset": _dataset,
    "optimizer": _optimizer,
    "attributor": _attributor,
}


def _groups(plain: Mapping[str, Any], schema: type) -> tuple[dict[str, object], list[str]]:
    """The typed record of every group node of `schema` in `plain`, and the errors of those that failed."""
    records: dict[str, object] = {}
    errors: list[str] = []
    for key in field_names(schema):
        if key in _GROUP_PARSERS and key in plain:
            try:
                records[key] = _GROUP_PARSERS[key](plain[key])
            except ConfigError as error:
                errors.append(str(error))
    return records, errors


def _validated(schema: type[T], plain: Mapping[str, Any]) -> T:
    """`plain` as `schema`, each group node replaced by its registry's record; every failing key named
    (an interpolated value like `seed` at each place it lands, the top-level key first)."""
    errors: list[str] = []
    config: T | None = None
    try:
        config = parse_config(schema, plain, "")
    except ConfigError as error:
        errors.append(str(error))
    records, group_errors = _groups(plain, schema)
    errors += group_errors
    if errors or config is None:
        parts = (part for error in errors for part in error.split("; "))
        raise ConfigError("; ".join(dict.fromkeys(parts)))  # a bad value inside a group may be seen twice
    return dataclasses.replace(config, **records)  # type: ignore[type-var]


validated_run = functools.partial(_validated, RunConfig)
validated_optimize = functools.partial(_validated, OptimizeConfig)
validated_attribute = functools.partial(_validated, AttributeConfig)
validated_report = functools.partial(_validated, ReportConfig)
validated_stages = functools.partial(_validated, StagesConfig)
validated_compare = functools.partial(parse_config, CompareConfig, where="")
validated_export = functools.partial(parse_config, ExportConfig, where="")
validated_upload = functools.partial(parse_config, UploadConfig, where="")


SIM_BACKEND = "sim"
REAL_DATASET_KINDS = ("locomo", "longmemeval")
SCORED_ROLES = ("task", "judge")  # the roles whose LM makes the scores: the answers and their verdicts
TEST_WORLD_TAG = "memtrace.test_world"
TEST_WORLD_NOTE_TAG = "memtrace.test_world.note"


def stand_in_roles(lm: LMSetConfig) -> tuple[str, ...]:
    """The scored roles (`task`, `judge`) whose LM is the stand-in (`backend: sim`)."""
    return tuple(role for role in SCORED_ROLES if getattr(lm, role).backend == SIM_BACKEND)


def stand_in_notice(config: RunConfig | OptimizeConfig | AttributeConfig) -> str | None:
    """The warning for the stand-in LM on a real dataset (None otherwise)."""
    kind = config.dataset.name
    roles = stand_in_roles(config.lm)
    if kind not in REAL_DATASET_KINDS or not roles:
        return None
    return (
        f"TEST WORLD: the stand-in LM (lm backend 'sim', role(s) {', '.join(roles)}) runs on the benchmark "
        f"dataset '{kind}': every score here comes from the simulated test world, not from a language "
        "model. Use a real model (e.g. lm=openai with your endpoint) to measure one."
    )


def stand_in_tags(config: RunConfig | OptimizeConfig | AttributeConfig) -> dict[str, str]:
    """`memtrace.test_world` (true when the stand-in answers or judges) and, on real data, the notice."""
    tags = {TEST_WORLD_TAG: str(bool(stand_in_roles(config.lm))).lower()}
    notice = stand_in_notice(config)
    if notice is not None:
        tags[TEST_WORLD_NOTE_TAG] = notice
    return tags
