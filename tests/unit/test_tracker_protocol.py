"""The tracker seam: `RedactingTracker` and `MlflowTracker` offer exactly the `Tracker` protocol's
methods, typed, and nothing reaches the wrapped tracker by an unknown name."""

from __future__ import annotations

import inspect

from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.redacting_tracker import RedactingTracker
from memtrace_loop.pipeline.tracking.tracker import Tracker


def protocol_methods() -> set[str]:
    return {name for name, member in vars(Tracker).items() if inspect.isfunction(member) and not name.startswith("_")}


def public_methods(cls: type) -> set[str]:
    return {name for name, member in vars(cls).items() if inspect.isfunction(member) and not name.startswith("_")}


def test_the_redacting_wrapper_forwards_nothing_by_name() -> None:
    assert "__getattr__" not in vars(RedactingTracker)
    assert public_methods(RedactingTracker) == protocol_methods()


def test_every_call_of_the_protocol_has_the_same_parameters_on_both_trackers() -> None:
    # return types (a @contextmanager's Iterator vs the protocol's context manager) are mypy's to check
    for name in protocol_methods():
        wanted = inspect.signature(getattr(Tracker, name)).parameters
        for cls in (RedactingTracker, MlflowTracker):
            assert inspect.signature(getattr(cls, name)).parameters == wanted, (cls.__name__, name)


def test_the_mlflow_tracker_implements_the_whole_protocol() -> None:
    assert protocol_methods() <= public_methods(MlflowTracker)
