"""The command lines we print run as printed: each word survives the shell (`shlex`) and Hydra's
override grammar (`OverridesParser`) and comes back as the exact value, whatever the path holds."""

from __future__ import annotations

import shlex

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from memtrace_loop.pipeline.core.command_line import command_line, override
from omegaconf import OmegaConf

PATHS = [
    "/tmp/plain/best_prompts.json",
    "/tmp/multirun/memory_system=rag,optimizer=none,seed=0/best_prompts.json",
    "/tmp/a folder/it's \"quoted\"/x.json",
    "/tmp/back\\slash\\/x\\",
    "/tmp/$HOME/*/x?.json",
    "relative/dir=1,2",
]


def parsed(line: str) -> tuple[list[str], dict[str, object]]:
    words = shlex.split(line)
    overrides = OverridesParser.create().parse_overrides([w for w in words if "=" in w])
    return [w for w in words if "=" not in w], {o.key_or_group: o.value() for o in overrides}


@pytest.mark.parametrize("path", PATHS)
def test_a_printed_path_comes_back_exactly_through_the_shell_and_hydra(path):
    words, values = parsed(command_line("memtrace", "run", memory_system="rag", prompts=path))
    assert words == ["memtrace", "run"]
    assert values == {"memory_system": "rag", "prompts": path}


def test_a_plain_value_stays_bare_and_a_sweep_folder_is_quoted():
    assert override("resume", "outputs/optimize/2026-01-01_00-00-00-abc123") == (
        "resume=outputs/optimize/2026-01-01_00-00-00-abc123")
    quoted = override("resume", "multirun/x/optimizer=none,seed=0")
    assert quoted == "'resume=\"multirun/x/optimizer=none,seed=0\"'"
    with pytest.raises(OverrideParseException):  # what was printed before: `,` and `=` break Hydra's grammar
        OverridesParser.create().parse_overrides(["resume=multirun/x/optimizer=none,seed=0"])


def test_an_interpolation_like_path_is_not_resolved_by_omegaconf():
    _, values = parsed(command_line("memtrace", "run", prompts="/tmp/${oc.env:HOME}/x.json"))
    assert OmegaConf.create({"prompts": values["prompts"]}).prompts == "/tmp/${oc.env:HOME}/x.json"
