"""The counterfactual-rescue oracle: natural failures in a degraded world, labelled by what rescues them.

A `DegradedWorld` overrides some prompts or knobs: default prompts, each construction stage with all
its rules, and the spec's `knob_worlds` (none stated: `NoKnobWorldsError`). Its repairs
(`world_repairs`) are each LLM stage's perfect instruction and each degraded or generous knob raised,
named by its owning stage. `rescue_oracle` runs the world, then each repair alone on the failures
(`RescueLabel.rescuers`), all together (else `unrescuable`), and sets of growing size up to
`max_joint` (`joint_sets`), sharing one `MemoryCache`. It may read the test world's rules (attributors
never see its output); it scores nothing (`experiments.lab.benchmark.rescue_scoring`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import dspy
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.memory_systems.registry import spec_of
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.test_world import TestWorld
from memtrace_loop.pipeline.core.records import CaseResult, Dataset, PromptSet
from memtrace_loop.pipeline.loop.runner import MemoryCache, RunResult, run_dataset

EXCLUDED = (5,)  # the categories left out of the failures, as the runner's summary leaves them
Build = Callable[[Mapping[str, Any]], MemorySystem]  # a `memory_system` config node -> the system


@dataclass(frozen=True)
class DegradedWorld:
    """A system (`system`: registry name) with `prompts` (stage -> instruction, overriding the defaults)
    and `knobs` (knob -> degraded value); `owners` names the stage owning a knob the spec's stage table
    does not declare. `name` is how tables show it."""

    system: str
    name: str
    prompts: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    knobs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    owners: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        for name in ("prompts", "knobs", "owners"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))


@dataclass(frozen=True)
class Repair:
    """One repair, named by its stage: an LLM stage's perfect `instruction`, or `knobs` raised."""

    stage: str
    instruction: str | None = None
    knobs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class RescueLabel:
    """What rescues one failed question: the single repairs that each do (`rescuers`), else the smallest
    rescuing set (`joint`, in stage order; `joint_sets`: every rescuing set of that size), else nothing
    (`unrescuable`: not even every repair together)."""

    question_id: str
    rescuers: frozenset[str]
    joint: tuple[str, ...] | None
    unrescuable: bool
    joint_sets: tuple[tuple[str, ...], ...] = ()

    def rescuing_sets(self) -> tuple[frozenset[str], ...]:
        """The minimal rescuing sets: each single rescuer, else each joint set."""
        if self.rescuers:
            return tuple(frozenset({r}) for r in sorted(self.rescuers))
        return tuple(frozenset(s) for s in self.joint_sets or ((self.joint,) if self.joint else ()))


@dataclass(frozen=True)
class WorldOracle:
    """A world's run and labels: `run` (the degraded run: graphs and results), `system` (the degraded
    system, for replay), `failures` (the failed cases labelled), `labels` by question id, `runs` (repair
    sets run) and `repairs` (the world's repairs, in stage order)."""

    world: DegradedWorld
    system: MemorySystem
    run: RunResult
    failures: tuple[CaseResult, ...]
    labels: Mapping[str, RescueLabel]
    repairs: tuple[Repair, ...]
    runs: int


class NoKnobWorldsError(ValueError):
    """A system whose spec does not state its knob worlds (`MemorySystemSpec.knob_worlds` is None)."""


def degraded_worlds(name: str, build: Build, world: TestWorld) -> tuple[DegradedWorld, ...]:
    """The worlds of system `name`: default prompts; each construction LLM stage with all its rules
    (the others default); its spec's knob worlds (`NoKnobWorldsError` when the spec states none)."""
    spec = spec_of(name)
    if spec.knob_worlds is None:
        raise NoKnobWorldsError(
            f"memory system {name!r}: its spec states no knob worlds for the rescue oracle "
            "(MemorySystemSpec.knob_worlds; () for none)"
        )
    system = build({"name": name})
    predictors = dict(system.named_predictors())
    worlds = [DegradedWorld(name, "default")]
    for stage in spec.construction_stages:
        predictor = predictors.get(stage)
        if predictor is None or not world.rules(predictor.signature.output_fields):
            continue
        perfect = world.perfect_instruction(predictor.signature.instructions, predictor.signature.output_fields)
        worlds.append(DegradedWorld(name, f"{stage} all rules", {stage: perfect}))
    worlds.extend(DegradedWorld(name, k.name, knobs=k.knobs, owners=k.owners) for k in spec.knob_worlds)
    return tuple(worlds)


def world_system(world: DegradedWorld, build: Build, repairs: Sequence[Repair] = ()) -> MemorySystem:
    """The world's system with `repairs` applied (their knobs over the world's, their instructions over
    the world's prompts)."""
    knobs = dict(world.knobs)
    prompts = dict(world.prompts)
    for repair in repairs:
        knobs.update(repair.knobs)
        if repair.instruction is not None:
            prompts[repair.stage] = repair.instruction
    system = build({"name": world.system, **knobs})
    return system.with_prompts(PromptSet(prompts)) if prompts else system


def _knob_owner(world: DegradedWorld, knob: str) -> str | None:
    if knob in world.owners:
        return world.owners[knob]
    return next((s.name for s in spec_of(world.system).stages if knob in s.knobs), None)


def world_repairs(world: DegradedWorld, build: Build, test_world: TestWorld) -> tuple[Repair, ...]:
    """The repairs of `world`, in the system's stage order: each LLM stage's perfect instruction (when the
    test world has rules for it and it is not perfect yet), each degraded or generous knob raised to its
    generous value (else its default), by owning stage; a degraded knob without owner stays held."""
    system = world_system(world, build)
    spec = spec_of(world.system)
    defaults = dataclasses.asdict(spec.knobs())
    current = dataclasses.asdict(system.knobs)
    knob_repairs: dict[str, dict[str, Any]] = {}
    for knob in dict.fromkeys([*world.knobs, *spec.generous_knobs]):
        owner = _knob_owner(world, knob)
        value = spec.generous_knobs.get(knob, defaults[knob])
        if owner is not None and value != current[knob]:
            knob_repairs.setdefault(owner, {})[knob] = value
    predictors = dict(system.named_predictors())
    repairs = []
    for stage in (s.name for s in system.stages):
        if stage in knob_repairs:
            repairs.append(Repair(stage, knobs=MappingProxyType(knob_repairs[stage])))
        predictor = predictors.get(stage)
        if predictor is None:
            continue
        signature = predictor.signature
        perfect = test_world.perfect_instruction(signature.instructions, signature.output_fields)
        if test_world.rules(signature.output_fields) and perfect.strip() != signature.instructions.strip():
            repairs.append(Repair(stage, instruction=perfect))
    return tuple(repairs)


@dataclass
class _Runner:
    """Runs repair sets of one world on chosen questions (one memory cache across them)."""

    world: DegradedWorld
    build: Build
    lm: dspy.LM
    dataset: Dataset
    workers: int
    cache: MemoryCache
    runs: int = 0

    def run(self, repairs: Sequence[Repair],
            question_ids: Iterable[str] | None = None) -> tuple[MemorySystem, RunResult]:
        system = world_system(self.world, self.build, repairs)
        system.set_lm(self.lm)
        dataset = self.dataset if question_ids is None else self.dataset.for_questions(question_ids)
        self.runs += 1
        return system, run_dataset(system, make_judge(self.lm), dataset, workers=self.workers, memory_cache=self.cache)

    def rescued(self, repairs: Sequence[Repair], question_ids: Sequence[str]) -> frozenset[str]:
        if not question_ids:
            return frozenset()
        return frozenset(r.question.id for r in self.run(repairs, question_ids)[1].results if r.correct)


def _joint_sets(
    runner: _Runner, repairs: tuple[Repair, ...], pending: Sequence[str], max_joint: int
) -> dict[str, list[tuple[str, ...]]]:
    """question id -> every rescuing set of the smallest size (2..max_joint) that rescues it."""
    found: dict[str, list[tuple[str, ...]]] = {}
    for size in range(2, min(max_joint, len(repairs) - 1) + 1):
        left = [q for q in pending if q not in found]
        if not left:
            break
        this_size: dict[str, list[tuple[str, ...]]] = {}
        for combo in itertools.combinations(repairs, size):
            for qid in runner.rescued(combo, left):
                this_size.setdefault(qid, []).append(tuple(r.stage for r in combo))
        found.update(this_size)
    return found


def rescue_oracle(
    world: DegradedWorld, build: Build, lm: dspy.LM, dataset: Dataset, test_world: TestWorld, *, workers: int = 4,
    max_joint: int = 3, on_run: Callable[[str], None] | None = None,
) -> WorldOracle:
    """Run `world` on `dataset` and label each failed question by rescue (the module docstring)."""
    runner = _Runner(world, build, lm, dataset, workers, MemoryCache())
    system, run = runner.run(())
    failures = tuple(r for r in run.results if not r.correct and r.question.category not in EXCLUDED)
    failed = [r.question.id for r in failures]
    repairs = world_repairs(world, build, test_world)
    rescuers: dict[str, set[str]] = {q: set() for q in failed}
    for repair in repairs:
        for qid in runner.rescued((repair,), failed):
            rescuers[qid].add(repair.stage)
        if on_run is not None:
            on_run(repair.stage)
    pending = [q for q in failed if not rescuers[q]]
    by_all = runner.rescued(repairs, pending) if len(repairs) > 1 else frozenset()
    joint = _joint_sets(runner, repairs, [q for q in pending if q in by_all], max_joint)
    all_stages = tuple(r.stage for r in repairs)
    labels = {}
    for qid in failed:
        sets = tuple(joint.get(qid, ())) or ((all_stages,) if qid in by_all and not rescuers[qid] else ())
        labels[qid] = RescueLabel(
            qid, frozenset(rescuers[qid]), sets[0] if sets else None,
            unrescuable=not rescuers[qid] and not sets, joint_sets=sets,
        )
    return WorldOracle(world, system, run, failures, MappingProxyType(labels), repairs, runner.runs)
