"""The Hydra config tree. Importing this package (Hydra does, to read it) stores the schema nodes.

Every default lives in a schema record (next to what it configures); `store_schemas()` puts each
record's defaults into Hydra's ConfigStore under `schema/<group>/<option>` (and `schema/<app>` for the
top-level keys), and every YAML file starts from its schema node through its defaults list, then only
selects groups, wires interpolations and sets what differs for that option. So `--cfg job` shows every
key with its value while each value is written once. Validation is `experiments.config` (at start).
Importing it also registers the `memtrace.run_id` resolver the output folder names use
(`experiments.output_dirs`) and `memtrace.compared`, which generates a sweep's list of a group's
entries from its registry (`experiments.sweep_lists`; `${memtrace.compared:optimizer}` in
`experiment/compare_optimizers.yaml`).
"""

from __future__ import annotations

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
from memtrace_loop.experiments.sweep_lists import register_sweep_resolvers
from memtrace_loop.memory_systems.registry import SYSTEMS, knobs_schema
from memtrace_loop.optimizers.registry import OPTIMIZERS
from memtrace_loop.pipeline.analysis.attribution.registry import ATTRIBUTORS
from memtrace_loop.pipeline.backends.embeddings import HASHING_DIM, EmbedderConfig
from memtrace_loop.pipeline.backends.registry import LM_BACKENDS
from memtrace_loop.pipeline.core.config import defaults_of
from memtrace_loop.pipeline.data.registry import DATASETS

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


store_schemas()
register_resolvers()
register_sweep_resolvers()
