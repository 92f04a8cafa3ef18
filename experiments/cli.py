"""The `memtrace` console script: `memtrace <command> [hydra overrides...]`.

Each command is its own Hydra app; this dispatcher removes the command word from argv and hands the
rest (overrides such as `lm=openai dataset=locomo workers=4`, or `--help`, `--cfg job`, `-m`) to it.
`memtrace graph ...` (convert/show graph files, `experiments/graph_command.py`) is plain argparse.
`memtrace completion bash` prints the bash completion script (`experiments/completion.py`); Hydra's
own `-sc install=bash` of a command prints the same script (Hydra's would complete nothing here).
Before a command's app is imported, its overrides are checked: a secret is refused (`secret_guard`), a
misspelt key or group option is one line with a did-you-mean, exit 2 (`override_errors`); the app then
runs without its `guarded` wrapper, which makes the same checks for an app started without this dispatcher.
What Hydra answers from the config alone (`--help`, `--hydra-help`, `--cfg`, `--info`, `--version`) is
answered by the same Hydra app without importing the command's module (so none of MLflow and the apps'
work imports); Hydra names the job after the command's module either way.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from memtrace_loop.experiments.completion import SHELLS, bash_script, completion_request, uninstall_script

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
    from memtrace_loop.experiments.graph_command import completion_command

    sys.stdout.write(bash_script(COMMAND_NAMES, (completion_command(),)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
