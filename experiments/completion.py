"""Bash completion for `memtrace <command> <overrides>`.

Hydra's own `-sc install=bash` registers a script for an app named by `sys.argv[0]` (`memtrace run`), which
never completes. `bash_script` completes the command word, and for the words after it asks that
command's Hydra app (`memtrace <command> -sc query=bash`, with the command word taken out of
`COMP_LINE`) for groups, options and keys; a `PlainCommand` (`memtrace graph`) is completed by the
script alone (subcommands, options, an option's choices, else file names). `completion_request` reads
a `-sc` argument. It installs nothing: the user evaluates the script.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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
