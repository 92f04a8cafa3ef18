"""Attributions scored against the rescue oracle's labels (`experiments.lab.benchmark.rescue`).

Per labelled failure (`compare_rescue`; no attribution counts as wrong): the blamed stage rescues alone,
it is necessary (in every minimal rescuing set), a joint set is named and is sufficient, a verified
blame is right, the check is unverifiable, and the calls it cost. `summarize_rescue` folds a world's
scores and sets the blame table's top stage beside the oracle's, read three ways (`READINGS`): split
as the table splits a failure (the bar's reading), joint members in full, single rescues only;
`bar_summary` pools them per setting. Pure functions over records: it runs no attributor.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memtrace_loop.experiments.lab.benchmark.rescue import RescueLabel
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, Check
from memtrace_loop.pipeline.analysis.blame import BlameTable, aggregate_blame


def stage_necessary(label: RescueLabel, stage: str) -> bool:
    """`stage` is in every minimal rescuing set of the label (False when nothing rescues it)."""
    sets = label.rescuing_sets()
    return bool(sets) and all(stage in s for s in sets)


def joint_sufficient(label: RescueLabel, attribution: Attribution) -> bool:
    """The attribution's named joint set contains a rescuing set of the label (False when none named)."""
    named = frozenset(f.stage for f in attribution.joint)
    return bool(named) and any(s <= named for s in label.rescuing_sets())


@dataclass(frozen=True)
class RescueCaseScore:
    """One attribution (or None) on one labelled failure."""

    label: RescueLabel
    attribution: Attribution | None
    rescues_alone: bool
    necessary: bool
    joint_named: bool
    joint_sufficient: bool
    verified_right: bool
    lm_calls: int = 0
    replay_calls: int = 0

    @property
    def check(self) -> Check | None:
        return None if self.attribution is None else self.attribution.check


def compare_rescue(label: RescueLabel, attribution: Attribution | None) -> RescueCaseScore:
    """Score one attribution against its label (the module docstring)."""
    if attribution is None:
        return RescueCaseScore(label, None, False, False, False, False, False)
    alone = bool({attribution.stage, *(f.stage for f in attribution.joint)} & label.rescuers)  # any blamed stage
    sufficient = joint_sufficient(label, attribution)
    return RescueCaseScore(
        label, attribution, alone, stage_necessary(label, attribution.stage), bool(attribution.joint), sufficient,
        attribution.check == Check.VERIFIED and (attribution.stage in label.rescuers or sufficient),
        attribution.cost.lm_calls, attribution.cost.replay_calls,
    )


def oracle_top_stage(labels: Sequence[RescueLabel]) -> str | None:
    """The most common rescuing stage (each single rescuer, each stage of a joint set); ties by name."""
    counts = Counter(stage for label in labels for stage in (label.rescuers or frozenset(label.joint or ())))
    return min(counts, key=lambda stage: (-counts[stage], stage)) if counts else None


def oracle_split_weights(labels: Sequence[RescueLabel]) -> dict[str, float]:
    """Each failure weighs one, split evenly over its single rescuers, else over its joint sets and each
    set's members (the blame table's rule).

    >>> joint = RescueLabel("q1", frozenset(), ("extract", "respond"), False, (("extract", "respond"),))
    >>> both = RescueLabel("q2", frozenset({"decide", "extract"}), None, False)
    >>> sorted(oracle_split_weights([joint, both]).items())
    [('decide', 0.5), ('extract', 1.0), ('respond', 0.5)]
    """
    weights: dict[str, float] = {}
    for label in labels:
        sets = label.rescuing_sets()
        for members in sets:
            for stage in members:
                weights[stage] = weights.get(stage, 0.0) + 1 / len(sets) / len(members)
    return weights


def oracle_top_split(labels: Sequence[RescueLabel]) -> str | None:
    """The stage weighing most under `oracle_split_weights`; ties as the blame table breaks them (failures
    rescued alone, then failures taken part in, then name).

    >>> joint = RescueLabel("q1", frozenset(), ("extract", "respond"), False, (("extract", "respond"),))
    >>> decide, extract = (RescueLabel("q2", frozenset({s}), None, False) for s in ("decide", "extract"))
    >>> labels = [joint] * 3 + [extract] + [decide] * 3  # extract: 3 + 1 in full, 1.5 + 1 split; decide: 3
    >>> oracle_top_stage(labels), oracle_top_split(labels)
    ('extract', 'decide')
    >>> oracle_top_split([joint] * 2 + [decide])  # extract 1 = decide 1: decide rescues a failure alone
    'decide'
    """
    weights = oracle_split_weights(labels)
    alone = Counter(stage for label in labels for stage in label.rescuers)
    failures = Counter(stage for label in labels for stage in frozenset().union(*label.rescuing_sets()))
    if not weights:
        return None
    return min(weights, key=lambda stage: (-round(weights[stage], 9), -alone[stage], -failures[stage], stage))


def oracle_top_alone(labels: Sequence[RescueLabel]) -> str | None:
    """The stage whose repair alone rescues the most failures (joint cases count for none); ties by name.

    >>> joint = RescueLabel("q1", frozenset(), ("extract", "respond"), False, (("extract", "respond"),))
    >>> oracle_top_alone([joint] * 3 + [RescueLabel("q2", frozenset({"decide"}), None, False)])
    'decide'
    """
    alone = Counter(stage for label in labels for stage in label.rescuers)
    return min(alone, key=lambda stage: (-alone[stage], stage)) if alone else None


def top_stages(weights: Mapping[str, float]) -> frozenset[str]:
    """The stages at the highest weight: more than one is a tie (weights equal to 9 decimals).

    >>> sorted(top_stages({"extract": 4.5, "decide": 4.5, "retrieve": 3.0}))
    ['decide', 'extract']
    """
    if not weights:
        return frozenset()
    best = max(round(w, 9) for w in weights.values())
    return frozenset(stage for stage, w in weights.items() if round(w, 9) == best)


def top_vs_split(table: BlameTable, labels: Sequence[RescueLabel]) -> str | None:
    """The table's top vs the oracle's split top: `agrees`, `tie` (the two sides' tied top stages
    share one: only a tie-break differs), `differs`; None when either side is empty."""
    oracle = oracle_split_weights(labels)
    if not table.rows or not oracle:
        return None
    if table.rows[0].stage == oracle_top_split(labels):
        return "agrees"
    tied = top_stages({row.stage: row.weight for row in table.rows}) & top_stages(oracle)
    return "tie" if tied else "differs"


@dataclass(frozen=True)
class RescueScore:
    """One attributor setting on the failures of one world. Shares in [0, 1]; None over an empty denominator."""

    system: str
    world: str
    setting: str
    n: int
    rescues_alone: float
    necessary: float | None
    joint_cases: int
    joint_named: float | None
    named_sets: int
    joint_sufficient: float | None
    verified: int
    verified_precision: float | None
    unverifiable: float
    lm_calls_per_case: float
    replay_calls_per_case: float
    top_blamed: str | None
    oracle_top: str | None
    oracle_top_split: str | None = None
    oracle_top_alone: str | None = None
    top_vs_split: str | None = None  # `top_vs_split`: agrees, tie (differs only by a tie-break), differs

    def as_row(self) -> dict[str, object]:
        """Plain row for tables (shares as percentages, one decimal)."""

        def pct(share: float | None) -> float | None:
            return None if share is None else round(100 * share, 1)

        return {
            "system": self.system, "world": self.world, "setting": self.setting, "n": self.n,
            "rescues_alone_%": pct(self.rescues_alone), "necessary_%": pct(self.necessary),
            "joint_named_%": pct(self.joint_named), "joint_cases": self.joint_cases,
            "joint_sufficient_%": pct(self.joint_sufficient), "verified": self.verified,
            "verified_precision_%": pct(self.verified_precision), "unverifiable_%": pct(self.unverifiable),
            "calls_per_case": round(self.lm_calls_per_case + self.replay_calls_per_case, 2),
            "replays_per_case": round(self.replay_calls_per_case, 2),
            "top_blamed": self.top_blamed, "oracle_top": self.oracle_top, "oracle_top_split": self.oracle_top_split,
            "oracle_top_alone": self.oracle_top_alone, "top_vs_split": self.top_vs_split,
        }


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def summarize_rescue(
    system: str, world: str, setting: str, labels: Mapping[str, RescueLabel],
    attributions: Mapping[str, Attribution | None],
) -> RescueScore:
    """Every labelled failure's attribution (by question id; a missing one is None) scored and folded."""
    scores = [compare_rescue(label, attributions.get(qid)) for qid, label in labels.items()]
    n = len(scores)
    rescuable = [s for s in scores if not s.label.unrescuable]
    joint = [s for s in scores if s.label.joint is not None and not s.label.rescuers]
    named = [s for s in scores if s.joint_named]
    verified = [s for s in scores if s.check == Check.VERIFIED]
    table = aggregate_blame([a for a in attributions.values() if a is not None])
    oracle = list(labels.values())
    return RescueScore(
        system, world, setting, n, rescues_alone=_share([s.rescues_alone for s in scores]) or 0.0,
        necessary=_share([s.necessary for s in rescuable]), joint_cases=len(joint),
        joint_named=_share([s.joint_named for s in joint]), named_sets=len(named),
        joint_sufficient=_share([s.joint_sufficient for s in named]), verified=len(verified),
        verified_precision=_share([s.verified_right for s in verified]),
        unverifiable=_share([s.check == Check.UNVERIFIABLE for s in scores]) or 0.0,
        lm_calls_per_case=sum(s.lm_calls for s in scores) / n if n else 0.0,
        replay_calls_per_case=sum(s.replay_calls for s in scores) / n if n else 0.0,
        top_blamed=table.rows[0].stage if table.rows else None, oracle_top=oracle_top_stage(oracle),
        oracle_top_split=oracle_top_split(oracle), oracle_top_alone=oracle_top_alone(oracle),
        top_vs_split=top_vs_split(table, oracle),
    )


# The three readings of "the oracle's most common rescuing stage" (`RescueScore` fields): each member of a
# joint set counted in full; each failure weighing one, split as the blame table splits it; single rescues only.
READINGS = {"full": "oracle_top", "split": "oracle_top_split", "alone": "oracle_top_alone"}


def top_agreement(scores: Sequence[RescueScore]) -> list[dict[str, object]]:
    """Per setting, in how many worlds the blame table's top stage is each reading's top (`READINGS`);
    worlds with no blame are left out."""
    rows = []
    for setting in dict.fromkeys(s.setting for s in scores):
        mine = [s for s in scores if s.setting == setting and s.top_blamed is not None]
        rows.append({"setting": setting, "worlds": len(mine)} | {
            reading: sum(s.top_blamed == getattr(s, field) for s in mine) for reading, field in READINGS.items()
        })
    return rows


def _pooled(scores: Sequence[RescueScore], share: str, weight: str) -> float | None:
    rows = [(getattr(s, share), getattr(s, weight)) for s in scores if getattr(s, share) is not None]
    total = sum(w for _, w in rows)
    return round(100 * sum(v * w for v, w in rows) / total, 1) if total else None


def bar_summary(scores: Sequence[RescueScore]) -> list[dict[str, object]]:
    """Per setting, over every world's failures: the bars' shares pooled by their denominators (in %)
    and `top_agreement`'s counts."""
    agreement = {row["setting"]: row for row in top_agreement(scores)}
    rows = []
    for setting, counts in agreement.items():
        mine = [s for s in scores if s.setting == setting]
        rows.append({
            "setting": setting, "failures": sum(s.n for s in mine),
            "rescues_alone_%": _pooled(mine, "rescues_alone", "n"),
            "verified_precision_%": _pooled(mine, "verified_precision", "verified"),
            "joint_named_%": _pooled(mine, "joint_named", "joint_cases"),
            "joint_sufficient_%": _pooled(mine, "joint_sufficient", "named_sets"),
            **{f"top={reading}": f"{counts[reading]}/{counts['worlds']}" for reading in READINGS},
        })
    return rows
