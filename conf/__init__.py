"""The Hydra config tree. Importing this package (Hydra does, to read it) stores the schema nodes.

Every default lives in a schema record (next to what it configures); `store_schemas()` puts each
record's defaults into Hydra's ConfigStore under `schema/<group>/<option>` (and `schema/<app>` for the
top-level keys), and every YAML file starts from its schema node, then only selects groups, wires
interpolations and sets what differs for that option: `--cfg job` shows every key, each value written
once. Validation is `experiments.config`. Importing it also registers the resolvers `memtrace.run_id`
(`experiments.output_dirs`) and `memtrace.compared`: `${memtrace.compared:optimizer}` is the
comma-separated sweep list of a group's registry entries whose spec says `compare = True`, so a new
registry line is swept without touching the sweep configs.
"""

from __future__ import annotations

from typing import Any

from hydra.core.config_store import ConfigStore
from memtrace_loop.experiments.config import (
    AttributeConfig,
    CompareConfig,
    ExportConfig,
    OptimizeConfig,
    ReportConfig,
    RunConfig,
    StagesConfig,
    TrackingConfig,
    UploadConfig,
)
from memtrace_loop.experiments.output_dirs import register_resolvers
from memtrace_loop.memory_systems.registry import SYSTEMS, knobs_schema
from memtrace_loop.optimizers.registry import OPTIMIZERS
from memtrace_loop.pipeline.analysis.attribution.registry import ATTRIBUTORS
from memtrace_loop.pipeline.backends.embeddings import HASHING_DIM, EmbedderConfig
from memtrace_loop.pipeline.backends.registry import LM_BACKENDS
from memtrace_loop.pipeline.core.config import ConfigError, defaults_of
from memtrace_loop.pipeline.core.registry import Registry
from memtrace_loop.pipeline.data.registry import DATASETS
from omegaconf import OmegaConf

COMPARED_RESOLVER = "memtrace.compared"
_GROUPS = ("lm", "embedder", "memory_system", "dataset", "tracking", "optimizer", "attributor")


def _top_level(schema: type) -> dict:
    return {k: v for k, v in defaults_of(schema).items() if k not in _GROUPS}


def store_schemas() -> None:
    cs = ConfigStore.instance()
    for backend, spec in LM_BACKENDS.items():
        defaults = {k: v for k, v in defaults_of(spec.schema).items() if k != "backend"}  # the YAML names it
        cs.store(group="schema/lm", name=backend, node={"task": defaults})
    cs.store(group="schema/embedder", name="hashing", node={"dim": HASHING_DIM})
    cs.store(group="schema/embedder", name="openai", node=defaults_of(EmbedderConfig))
    for name in SYSTEMS:
        cs.store(group="schema/memory_system", name=name, node=defaults_of(knobs_schema(name)))
    for kind, dataset in DATASETS.items():
        cs.store(group="schema/dataset", name=kind, node=defaults_of(dataset.schema))
    for name, optimizer in OPTIMIZERS.items():
        cs.store(group="schema/optimizer", name=name, node=defaults_of(optimizer.schema))
    for name, attributor in ATTRIBUTORS.items():
        cs.store(group="schema/attributor", name=name, node=defaults_of(attributor.schema))
    cs.store(group="schema/tracking", name="base", node=defaults_of(TrackingConfig))
    for app, schema in (("run", RunConfig), ("optimize", OptimizeConfig), ("stages", StagesConfig),
                        ("export", ExportConfig), ("attribute", AttributeConfig), ("compare", CompareConfig),
                        ("upload", UploadConfig), ("report", ReportConfig)):
        cs.store(group="schema", name=app, node=_top_level(schema))


def compared(group: str) -> str:
    """The compared names of the registry behind config group `group`, comma-separated."""
    registries: dict[str, Registry[Any]] = {"memory_system": SYSTEMS, "optimizer": OPTIMIZERS}
    if group not in registries:
        raise ConfigError(f"${{{COMPARED_RESOLVER}:{group}}}: no registry for group {group!r} "
                          f"(available: {', '.join(registries)})")
    return ",".join(registries[group].compared())


store_schemas()
register_resolvers()
if not OmegaConf.has_resolver(COMPARED_RESOLVER):
    OmegaConf.register_new_resolver(COMPARED_RESOLVER, compared)
