"""The `memtrace` console script: `memtrace <command> [hydra overrides...]`.

Each command is its own Hydra app; this dispatcher removes the command word from argv and hands the
rest (overrides, `--help`, `--cfg job`, `-m`) to it, importing that app's module only. `memtrace graph`
(`experiments/graph_command.py`) is plain argparse. Before an app is imported, its overrides are
checked: a secret is refused (`secret_guard`), a misspelt key or group option is one line with a
did-you-mean, exit 2 (`override_errors`); the app then runs without its `guarded` wrapper, which makes
the same checks for an app started without this dispatcher. What Hydra answers from the config alone
(`--help`, `--hydra-help`, `--cfg`, `--info`, `--version`) is answered by the same Hydra app without
importing the command's module (none of MLflow and the apps' work imports).

Bash completion: Hydra's own `-sc install=bash` registers a script for an app named by `sys.argv[0]`
(`memtrace run`) that never completes. `memtrace completion bash` (and a command's `-sc install=bash`)
prints `bash_script`: it completes the command word, and for the words after it asks that command's
Hydra app (`memtrace <command> -sc query=bash`, the command word taken out of `COMP_LINE`) for groups,
options and keys; a `PlainCommand` (`memtrace graph`) is completed by the script alone (subcommands,
options, an option's choices, else file names). It installs nothing: the user evaluates the script.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

USAGE = """usage: memtrace <command> [hydra overrides...]

commands:
  run       run a memory system over a dataset split: trace, evaluate, log to MLflow
  optimize  the closed loop: attribute failures, rewrite the most-blamed prompts, gate on dev, export
  attribute attribute the failures of a logged or saved run without rerunning it (run_id=... | run_dir=...)
  report    write report.html (why each question failed, drawn) for a logged or saved run (run_id=... | run_dir=...)
  export    write the best prompt set of an MLflow run as JSON/YAML (run_id=... out=...)
  upload    log a run saved on disk to MLflow, e.g. after MLflow was unreachable (run_dir=...)
  stages    list every stage of a memory system with its current instruction (memory_system=...)
  graph     graph files: convert ours <-> ExecNetwork JSON (smartcomment, MemTraceBench), show what one holds
  completion  print the bash completion script: eval "$(memtrace completion bash)" (commands, groups, keys)

examples:
  memtrace run                                  # Mem0-style system on the simulated world
  memtrace run dataset=locomo split=test        # the LoCoMo file in ../shared/data (or MEMTRACE_LOCOMO)
  memtrace run lm=openai lm.task.model=gpt-4o-mini embedder=openai
  memtrace run --cfg job                        # print the composed config
  memtrace optimize                             # the closed loop on the simulated world
  memtrace optimize optimizer=uniform           # the no-attribution baseline
  memtrace optimize -m experiment=compare_optimizers   # every optimizer x system x seed, then the comparison
  memtrace optimize resume=outputs/optimize/<run>      # continue an interrupted run
  memtrace optimize attributor=lineage attributor.verify=true  # check every blame by replay
  memtrace optimize attributor=llm              # an LM walks the graph (lm.attributor)
  memtrace attribute run_id=<mlflow run id>     # blame table of a `memtrace run`, without rerunning it
  memtrace attribute run_dir=outputs/run/<run> attributor.verify=true
  memtrace report run_id=<mlflow run id>        # report.html of a `memtrace run`, logged to that run
  memtrace export run_id=<mlflow run id> out=prompts.yaml
  memtrace upload run_dir=outputs/run/<run>    # log a saved run later (twice: still one MLflow run)
  memtrace run prompts=prompts.yaml              # load an exported prompt set
  memtrace stages memory_system=evermemos        # every stage and its current instruction
  memtrace graph show outputs/run/<run>/artifacts/graphs/<conv>.json   # sizes, kinds, failed questions
  memtrace graph convert outputs/run/<run>/artifacts/graphs exec-network/ --to exec-network
"""


COMMAND_NAMES = ("run", "optimize", "attribute", "report", "export", "upload", "stages")
CONFIG_PATH = "pkg://memtrace_loop.conf"  # every app's Hydra config tree (config name = command name)
# Hydra's flags answered from the composed config without calling the app
CONFIG_ONLY_FLAGS = frozenset(("-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "-i", "--info"))


def main(argv: list[str] | None = None) -> int:
    # Before DSPy/litellm are imported: use the bundled model cost map instead of fetching it.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return 0
    command = args.pop(0)
    if command == "completion":
        return _completion(("install", args[0] if args else "bash"), "memtrace completion")
    if command == "graph":  # file utilities (argparse), not a Hydra app
        from memtrace_loop.experiments.graph_command import main as graph_main

        return graph_main(args)
    if command not in COMMAND_NAMES:
        sys.stderr.write(f"memtrace: unknown command {command!r}\n\n{USAGE}")
        return 2
    request = completion_request(args)
    if request is not None and request[0] != "query":  # Hydra's query mode (used by the script) goes on
        return _completion(request, f"memtrace {command}")
    from memtrace_loop.experiments.override_errors import refuse_misspelt_overrides
    from memtrace_loop.experiments.secret_guard import protect_console, refuse_secret_overrides, unguarded

    refuse_secret_overrides(args, f"memtrace {command}")  # before Hydra echoes or saves an override
    protect_console(args)  # every line printed from here on is redacted
    refuse_misspelt_overrides(args, command, f"memtrace {command}")  # a did-you-mean, before the apps' imports
    sys.argv = [f"memtrace {command}", *args]
    if any(arg.partition("=")[0] in CONFIG_ONLY_FLAGS for arg in args):
        config_only_app(command)()
        return 0
    unguarded(app_main(command))()  # the app's `guarded` checks are the ones just made
    return 0


def app_main(command: str) -> Callable[[], object]:
    """The `main` of a command's Hydra app, importing that app's module only (once its overrides are
    accepted): `memtrace report` of a saved run loads none of the LM stack the other apps import."""
    match command:
        case "run":
            from memtrace_loop.experiments.run import main as run_main

            return run_main
        case "optimize":
            from memtrace_loop.experiments.optimize import main as optimize_main

            return optimize_main
        case "attribute":
            from memtrace_loop.experiments.attribute import main as attribute_main

            return attribute_main
        case "report":
            from memtrace_loop.experiments.report import main as report_main

            return report_main
        case "export":
            from memtrace_loop.experiments.export import main as export_main

            return export_main
        case "upload":
            from memtrace_loop.experiments.upload import main as upload_main

            return upload_main
        case _:
            from memtrace_loop.experiments.stages import main as stages_main

            return stages_main


def config_only_app(command: str) -> Callable[[], object]:
    """The Hydra app of `command` for what Hydra answers without calling it (help, config, info): same
    config tree and name, and the job named after the command's module, as the app's own `main`."""
    import hydra

    def never_called(_cfg: object) -> None:
        raise RuntimeError(f"memtrace {command}: the config-only app was asked to run")

    never_called.__module__ = f"memtrace_loop.experiments.{command}"  # Hydra's job name: the command
    return hydra.main(config_path=CONFIG_PATH, config_name=command, version_base="1.3")(never_called)


def _completion(request: tuple[str, str], name: str) -> int:
    """Print the completion script (install) or its removal (uninstall) for bash; refuse the rest."""
    action, shell = request
    if not action:
        sys.stderr.write(f"{name}: shell completion takes install=bash, uninstall=bash or query=bash, got {shell!r}\n")
        return 2
    if shell not in SHELLS:
        sys.stderr.write(f"{name}: shell completion is supported for bash only, not {shell!r}\n")
        return 2
    if action != "install":
        sys.stdout.write(uninstall_script())
        return 0
    sys.stdout.write(bash_script(COMMAND_NAMES, (completion_command(),)))
    return 0


def completion_command() -> PlainCommand:
    """The words bash completes for `memtrace graph`, read from its parser."""
    from memtrace_loop.experiments.graph_command import parser

    options_by_subcommand: dict[str, tuple[str, ...]] = {}
    choices_by_option: dict[str, tuple[str, ...]] = {}
    (subcommands,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in subcommands.choices.items():
        options_by_subcommand[name] = tuple(o for a in sub._actions for o in a.option_strings if o.startswith("--"))
        for action in sub._actions:
            if action.option_strings and action.choices:
                for option in action.option_strings:
                    choices_by_option[option] = tuple(str(c) for c in action.choices)
    return PlainCommand("graph", options_by_subcommand, choices_by_option)


SHELLS = ("bash",)
COMPLETION_FLAGS = ("-sc", "--shell-completion", "--shell_completion")

_SCRIPT = r"""# memtrace: bash completion (commands, then each command's Hydra overrides)
_memtrace_complete()
{
    local word="${COMP_WORDS[COMP_CWORD]}"
    if (( COMP_CWORD == 1 )); then
        COMPREPLY=($(compgen -W "__COMMANDS__ __PLAIN_COMMANDS__ --help" -- "$word"))
        return
    fi
    local command="${COMP_WORDS[1]}"
__PLAIN__    case " __COMMANDS__ " in
        *" $command "*) ;;
        *) return ;;
    esac
    # Hydra's query mode reads COMP_LINE as "<app> <overrides>": take the command word out
    local line="${COMP_LINE:0:COMP_POINT}"
    local rest="${line#*[[:space:]]}"
    rest="${rest#"$command"}"
    local choices
    choices=$(COMP_LINE="memtrace${rest}" COMP_POINT=$(( ${#rest} + 8 )) \
        "${COMP_WORDS[0]}" "$command" -sc query=bash 2>/dev/null)
    COMPREPLY=($(compgen -o nospace -o default -W "$choices" -- "$word"))
}
COMP_WORDBREAKS=${COMP_WORDBREAKS//=}
complete -o nospace -o default -F _memtrace_complete memtrace
"""


_PLAIN = r"""    if [[ "$command" == __NAME__ ]]; then  # a plain (argparse) command: subcommand, options, choices
        local previous="${COMP_WORDS[COMP_CWORD-1]}"
        if (( COMP_CWORD == 2 )); then
            COMPREPLY=($(compgen -W "__SUBCOMMANDS__ --help" -- "$word"))
__CHOICES__        elif [[ "$word" == -* ]]; then
            case "${COMP_WORDS[2]}" in
__OPTIONS__            esac
        fi
        return  # nothing offered: bash completes file names (-o default)
    fi
"""


@dataclass(frozen=True)
class PlainCommand:
    """A command that is not a Hydra app (`memtrace graph`): its subcommands with their options, and the
    choices of the options that take one."""

    name: str
    options_by_subcommand: Mapping[str, tuple[str, ...]]
    choices_by_option: Mapping[str, tuple[str, ...]]


def _plain_branch(command: PlainCommand) -> str:
    choices = "".join(f'        elif [[ "$previous" == {option} ]]; then\n'
                      f'            COMPREPLY=($(compgen -W "{" ".join(words)}" -- "$word"))\n'
                      for option, words in command.choices_by_option.items())
    options = "".join(f'                {sub}) COMPREPLY=($(compgen -W "{" ".join(words)}" -- "$word")) ;;\n'
                      for sub, words in command.options_by_subcommand.items())
    return (_PLAIN.replace("__NAME__", command.name).replace("__SUBCOMMANDS__", " ".join(command.options_by_subcommand))
            .replace("__CHOICES__", choices).replace("__OPTIONS__", options))


def bash_script(commands: Sequence[str], plain: Sequence[PlainCommand] = ()) -> str:
    """The bash completion script for `memtrace`, the Hydra apps `commands` and the `plain` commands
    (evaluate it in bash)."""
    return (_SCRIPT.replace("__PLAIN__", "".join(_plain_branch(c) for c in plain))
            .replace("__PLAIN_COMMANDS__", " ".join(c.name for c in plain)).replace("__COMMANDS__", " ".join(commands)))


def uninstall_script() -> str:
    return "complete -r memtrace 2>/dev/null; unset -f _memtrace_complete\n"


def completion_request(args: Sequence[str]) -> tuple[str, str] | None:
    """(`install` | `uninstall` | `query`, shell) when `args` ask for shell completion, else None.
    A malformed request gives ("", the text given)."""
    for i, arg in enumerate(args):
        flag, _, inline = arg.partition("=")
        if flag not in COMPLETION_FLAGS:
            continue
        value = inline if inline else (args[i + 1] if i + 1 < len(args) else "")
        action, _, shell = value.partition("=")
        if action in ("install", "uninstall", "query"):
            return action, shell or "bash"
        return "", value
    return None


if __name__ == "__main__":
    raise SystemExit(main())
