"""Bash completion for `memtrace <command> <overrides>`.

Hydra's own `--shell-completion install=bash` writes a script for one app named by `sys.argv[0]`; run
through our dispatcher that name is `memtrace run`, so its script registers a completion for a command
called "memtrace run" and asks `memtrace -sc query=bash` (no command) for choices: it never completes.
`bash_script` is the replacement: it completes the command word itself, and for the words after it
asks that command's Hydra app (`memtrace <command> -sc query=bash`, Hydra's query mode, with the
command word taken out of `COMP_LINE`) for config groups, options and keys. `completion_request`
tells what a `-sc`/`--shell-completion` argument asks for; the dispatcher answers install/uninstall
with this script (so the command Hydra's `--hydra-help` shows works too) and refuses other shells.
It does not install anything itself: the user evaluates the script (`eval "$(memtrace completion bash)"`).
"""

from __future__ import annotations

from collections.abc import Sequence

SHELLS = ("bash",)
COMPLETION_FLAGS = ("-sc", "--shell-completion", "--shell_completion")

_SCRIPT = r"""# memtrace: bash completion (commands, then each command's Hydra overrides)
_memtrace_complete()
{
    local word="${COMP_WORDS[COMP_CWORD]}"
    if (( COMP_CWORD == 1 )); then
        COMPREPLY=($(compgen -W "__COMMANDS__ --help" -- "$word"))
        return
    fi
    local command="${COMP_WORDS[1]}"
    case " __COMMANDS__ " in
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


def bash_script(commands: Sequence[str]) -> str:
    """The bash completion script for `memtrace` and `commands` (evaluate it in bash)."""
    return _SCRIPT.replace("__COMMANDS__", " ".join(commands))


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
