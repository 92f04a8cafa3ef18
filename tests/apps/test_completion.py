"""Shell completion for `memtrace <command> <overrides>` works in a real bash: the script the CLI prints
is sourced and asked to complete, as bash does on Tab; other shells are refused with a message."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from memtrace_loop.experiments import cli
from memtrace_loop.experiments.cli import completion_request

BIN = Path(sys.executable).parent
COMPLETE = r"""
source "$1"
t() {
    COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}
    read -ra COMP_WORDS <<< "$COMP_LINE"
    [[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
    COMPREPLY=()
    _memtrace_complete
    echo "${COMPREPLY[*]}"
}
shift
for line in "$@"; do t "$line"; done
complete -p memtrace
"""


def completions(script: Path, *lines: str) -> list[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-c", COMPLETE, "bash", str(script), *lines], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
@pytest.mark.slow  # each completion asks the command's Hydra app (a few seconds each)
def test_the_printed_script_completes_commands_groups_and_keys_in_bash(tmp_path):
    for args in (["completion", "bash"], ["run", "-sc", "install=bash"]):  # Hydra's advertised form too
        done = subprocess.run([str(BIN / "memtrace"), *args], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        (tmp_path / "completion.sh").write_text(done.stdout)
    got = completions(tmp_path / "completion.sh", "memtrace op", "memtrace run lm=",
                      f"{BIN}/memtrace optimize optimizer=uni", "memtrace run workers=2 memory_system.to")
    assert got[0] == "optimize"
    assert got[1].split() == ["lm=local", "lm=openai", "lm=sim"]
    assert got[2].split() == ["optimizer=uniform", "optimizer=uniform_reasons"]
    assert got[3].split() == ["memory_system.top_k="]
    assert got[4].endswith(" memtrace")  # registered for the command name (also found through a path)


def test_other_shells_and_bad_requests_are_refused_with_a_message(capsys):
    assert cli.main(["run", "-sc", "install=fish"]) == 2
    assert "bash only" in capsys.readouterr().err
    assert cli.main(["completion", "zsh"]) == 2
    assert "bash only" in capsys.readouterr().err
    assert cli.main(["optimize", "-sc", "bogus"]) == 2
    assert "install=bash, uninstall=bash or query=bash" in capsys.readouterr().err
    assert cli.main(["run", "-sc", "uninstall=bash"]) == 0
    assert "complete -r memtrace" in capsys.readouterr().out


def test_completion_requests_are_recognised():
    assert completion_request(["-sc", "install=bash"]) == ("install", "bash")
    assert completion_request(["lm=sim", "--shell-completion", "query=bash"]) == ("query", "bash")
    assert completion_request(["-sc", "install"]) == ("install", "bash")
    assert completion_request(["lm=sim"]) is None


def test_the_help_names_every_command_and_how_to_complete():
    for name in cli.COMMAND_NAMES:
        assert cli.app_main(name).__module__ == f"memtrace_loop.experiments.{name}"
        assert f"\n  {name} " in cli.USAGE
    assert 'eval "$(memtrace completion bash)"' in cli.USAGE


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
def test_graph_completes_its_subcommands_options_and_formats_without_asking_hydra(tmp_path):
    from memtrace_loop.experiments.cli import bash_script, completion_command

    done = subprocess.run([str(BIN / "memtrace"), "completion", "bash"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == bash_script(cli.COMMAND_NAMES, (completion_command(),))
    (tmp_path / "completion.sh").write_text(done.stdout)
    got = completions(tmp_path / "completion.sh", "memtrace gr", "memtrace graph ", "memtrace graph convert a b --to ",
                      "memtrace graph convert a b --to exec", "memtrace graph show --", "memtrace graph show f")
    assert got[:6] == ["graph", "convert show --help", "memtrace exec-network", "exec-network",
                       "--help --json --limit", ""]  # nothing offered for a file name: bash completes files
