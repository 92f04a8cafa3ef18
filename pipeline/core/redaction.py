"""Keeping secrets out of everything a run writes or prints: THE one redaction of the project.

- What keys look like: `KEY_PATTERNS` + a random-looking base62/base64 run (`key_like`); secret config
  names (`is_secret_name`; never `*_env` nor `*_tokens`); URL credentials (`url_credentials`, masked by
  `scrub_url(s)`). Where secrets come from: `config_secrets`, `key_values` (the environment's key variables).
- One masking, `redact`, used by every outlet: `redact_tree` (saved configs; `restore_tree` undoes it on
  resume), `SecretFilter` (log handlers), `RedactingStream` (the console), `redacted_copy` (tracker
  artifacts), `scrub_files` (Hydra's saved YAML).
- Secret command-line overrides refused: `secret_override` (a reason naming the key, never the value), `refuse`.

Ordinary values pass `key_like`: paths, commits, run ids, UUIDs, `sha256:` digests, model names, URLs
without credentials (`tests/unit/test_key_patterns.py` holds both lists). It reads no config file, starts
nothing and never logs a secret itself.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, unquote

REDACTED = "***"
MIN_SECRET_CHARS = 4  # a shorter "secret" would mangle ordinary text when masked everywhere
MIN_KEY_VALUE_CHARS = 8  # a key variable's value shorter than this is not compared (flags, `1`, `true`)
TEXT_SUFFIXES = frozenset({".json", ".yaml", ".yml", ".txt", ".diff", ".csv", ".md", ".log", ".jsonl", ".py", ".html"})

_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`\\]+")  # up to a space, quote or JSON escape
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SECRET_WORDS = frozenset({"secret", "secrets", "password", "passwd", "authorization", "apikey", "credential",
                           "credentials", "bearer"})
_QUERY_SECRET_WORDS = frozenset({"key", "sig", "signature", "auth", "pwd", "pass", "session", "credential"})

# THE list of what real keys look like; a token must stand alone (`desk-...`, `task-...` are not `sk-...`)
_B = r"(?<![A-Za-z0-9])"
KEY_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((kind, re.compile(p)) for kind, p in (
    ("an OpenAI/Anthropic key (sk-...)", _B + r"sk-(?=[A-Za-z0-9_\-]*[0-9])[A-Za-z0-9_\-]{20,}"),
    ("a Bearer/Basic credential", r"(?i)\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}"),
    ("a GitHub token", _B + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"),
    ("an AWS access key id", _B + r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    ("a Google API key", _B + r"AIza[0-9A-Za-z_\-]{35}"),
    ("a Hugging Face token", _B + r"hf_[A-Za-z0-9]{30,}"),
    ("a Slack token", _B + r"xox[abprse]-[A-Za-z0-9\-]{10,}"),
    ("a Stripe key", _B + r"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("a JSON Web Token", _B + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    ("a private key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    ("a long hex string", r"(?<![0-9A-Fa-f])(?<!sha256:)(?<!sha512:)[0-9A-Fa-f]{41,}(?![0-9A-Fa-f])"),
))
_RANDOM_RUNS = (re.compile(r"[A-Za-z0-9]{24,}"), re.compile(r"[A-Za-z0-9+/]{32,}"))  # base62; base64
_RANDOM_MIN_CHANGES = 0.4  # share of neighbouring characters of another class (random base62: ~60%)

# a key variable whose name does not look secret (`*_API_KEY`, `*_TOKEN`, `*_PASSWORD`, ... all do)
KNOWN_KEY_VARIABLES = ("AWS_ACCESS_KEY_ID",)
_NOT_A_VALUE = ("_FILE", "_PATH", "_DIR", "_URL", "_URI", "_HOST")  # `*_PASSWORD_FILE` names a file
_OVERRIDE = re.compile(r"^[~+]{0,2}([^=~+][^=]*)=(.*)$", re.DOTALL)
_DICT_KEY = re.compile(r"[{,]\s*['\"]?([A-Za-z_][\w\-]*)['\"]?\s*:")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _secret_words(words: Sequence[str]) -> bool:
    if not words or words[-1] == "env":  # `api_key_env` NAMES a variable; its value is not a secret
        return False
    if any(w in _SECRET_WORDS or w.endswith("token") for w in words):  # `tokens` / `tokenizer` do not
        return True
    return any(word in "".join(words) for word in ("apikey", "authorization", "password", "secret"))


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(name)]


def is_secret_name(key: str) -> bool:
    """Whether the last segment of a config key (`lm.task.api_key`, `headers.Authorization`) names a secret."""
    return _secret_words(_words(key.strip().strip("'\"").split("@", 1)[0].rstrip("]").split(".")[-1].split("[")[-1]))


def _secret_param(name: str) -> bool:
    words = _words(unquote(name))
    return _secret_words(words) or any(w in _QUERY_SECRET_WORDS for w in words)


def _split_url(url: str) -> tuple[str, str, str, str] | None:
    """(scheme://, user info, rest of authority + path, query+fragment with their `?`/`#`), or None."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    authority, tail = re.match(r"([^/?#]*)(.*)", rest, re.DOTALL).groups()  # type: ignore[union-attr]
    userinfo, at, host = authority.rpartition("@")
    path, query = re.match(r"([^?#]*)(.*)", tail, re.DOTALL).groups()  # type: ignore[union-attr]
    return scheme + sep, userinfo if at else "", host + path, query


def url_credentials(text: str) -> tuple[str, ...]:
    """The credential values in the URLs of `text` (user-info passwords or a lone user-info token, values
    of credential-looking query/fragment parameters), each raw and percent-decoded."""
    found: list[str] = []
    for parts in filter(None, (_split_url(m.group(0)) for m in _URL.finditer(text))):
        if parts[1]:
            user, colon, password = parts[1].partition(":")
            found.append(password if colon else user)
        params = (p.partition("=") for p in re.split(r"[?#&;]", parts[3]))
        found.extend(value for name, _, value in params if value and _secret_param(name))
    return tuple(dict.fromkeys(v for raw in found for v in (raw, unquote(raw)) if len(v) >= MIN_SECRET_CHARS))


def scrub_url(url: str) -> str:
    """`url` with its user info (`user:***@`, a lone `***@`) and credential-looking query values masked."""
    parts = _split_url(url)
    if parts is None:
        return url
    scheme, userinfo, rest, query = parts
    if userinfo:
        user, colon, _ = userinfo.partition(":")
        userinfo = f"{user}:{REDACTED}@" if colon else f"{REDACTED}@"

    def mask(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        return f"{name}={REDACTED}" if value and _secret_param(name) else match.group(0)

    return scheme + userinfo + rest + re.sub(r"([^&;=?#]+)=([^&;#]*)", mask, query)


def scrub_urls(text: str) -> str:
    """Every URL in `text` through `scrub_url`; the rest of the text as it is."""
    return _URL.sub(lambda m: scrub_url(m.group(0)), text) if "://" in text else text


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every secret (>= 4 characters; raw, JSON-escaped, percent-encoded) replaced by `***`
    and every URL scrubbed of credentials; the longest form is replaced first."""
    forms = {f for s in secrets if len(s) >= MIN_SECRET_CHARS
             for f in (s, json.dumps(s)[1:-1], quote(s, safe=""), quote(s))}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    return scrub_urls(text)


def redact_tree(node: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of a nested config (mappings, lists, scalars) with every string `redact`ed (keys too)."""
    secrets = tuple(secrets)
    if isinstance(node, Mapping):
        return {redact(k, secrets) if isinstance(k, str) else k: redact_tree(v, secrets) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [redact_tree(v, secrets) for v in node]
    return redact(node, secrets) if isinstance(node, str) else node


def restore_tree(saved: Any, current: Any, secrets: Iterable[str] = ()) -> Any:
    """`saved` (a `redact_tree` copy) with each string that is the redaction of the string at the same
    place in `current` replaced by the current (real) value; everything else as saved."""
    secrets = tuple(secrets)
    if isinstance(saved, Mapping) and isinstance(current, Mapping):
        return {k: restore_tree(v, current[k], secrets) if k in current else v for k, v in saved.items()}
    if isinstance(saved, list) and isinstance(current, list | tuple) and len(saved) == len(current):
        return [restore_tree(s, c, secrets) for s, c in zip(saved, current, strict=True)]
    if isinstance(saved, str) and isinstance(current, str) and saved != current and redact(current, secrets) == saved:
        return current
    return saved


def config_secrets(config: Any, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The secrets of a composed config: the value of every variable an `api_key_env` names anywhere in
    it (looked up in `environ`), and the credentials of every URL in its strings."""
    names: set[str] = set()
    found: list[str] = []
    stack = [config]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            names.update(v for k, v in node.items() if k == "api_key_env" and isinstance(v, str))
            stack.extend(reversed([v for k, v in node.items() if k != "api_key_env"]))  # in order
        elif isinstance(node, list | tuple):
            stack.extend(reversed(node))
        elif isinstance(node, str):
            found.extend(url_credentials(node))
    found.extend(v for v in (environ.get(n) for n in sorted(names)) if v)
    return tuple(dict.fromkeys(found))


def _random_looking(run: str) -> bool:
    """A run mixing upper case, lower case and digits that changes class as often as random text does."""
    classes = [0 if c.isupper() else 1 if c.islower() else 2 for c in run if c.isalnum()]
    changes = sum(a != b for a, b in pairwise(classes))
    return len(set(classes)) == 3 and changes / (len(classes) - 1) >= _RANDOM_MIN_CHANGES


def key_like(text: str) -> str | None:
    """The kind of the first key-like token in `text` ("a long hex string", ...), None when none."""
    kind = next((kind for kind, pattern in KEY_PATTERNS if pattern.search(text)), None)
    if kind is None and any(_random_looking(m.group(0)) for run in _RANDOM_RUNS for m in run.finditer(text)):
        return "a long random-looking (base64) string"
    return kind


def key_variable_names(environ: Mapping[str, str], named: Iterable[str] = ()) -> tuple[str, ...]:
    """The set variables holding keys: `named` (every `api_key_env`), `KNOWN_KEY_VARIABLES`, and every
    variable whose name looks secret (`*_API_KEY`, `*_TOKEN`, ...; not `*_FILE`, `*_URL`, ...)."""
    looks_secret = sorted(n for n in environ if is_secret_name(n) and not n.upper().endswith(_NOT_A_VALUE))
    return tuple(n for n in dict.fromkeys((*named, *KNOWN_KEY_VARIABLES, *looks_secret)) if environ.get(n))


def key_values(environ: Mapping[str, str], named: Iterable[str] = ()) -> tuple[str, ...]:
    """The values (>= 8 characters) of `key_variable_names(environ, named)`."""
    values = (environ[n].strip() for n in key_variable_names(environ, named))
    return tuple(dict.fromkeys(v for v in values if len(v) >= MIN_KEY_VALUE_CHARS))


def _reason(key: str, value: str, keys: Sequence[str]) -> str | None:
    inner = next((k for k in _DICT_KEY.findall(value) if is_secret_name(k)), None)
    last = key.split("@", 1)[0].split(".")[-1]
    if is_secret_name(key):
        return f"override {key!r} would put a secret into the config"
    if inner is not None and "{" in value:
        return f"override {key!r} holds a secret key {inner!r}"
    if last.endswith("_env") and value.strip() not in ("", "null") and not _VARIABLE_NAME.match(value.strip()):
        return f"override {key!r} must be the NAME of an environment variable, not a value"
    value = scrub_urls(value)  # URL credentials are allowed (masked wherever they are stored or shown)
    if any(k in value for k in keys):
        return f"override {key!r} holds the value of a key variable"
    kind = key_like(value)
    return f"override {key!r} holds what looks like a key ({kind})" if kind else None


def secret_override(argv: Iterable[str], keys: Iterable[str] = ()) -> str | None:
    """The first override that would put a secret into the config, as a one-line reason naming the key
    (never the value); None when there is none. Refused: a secret-named key (with `+`/`++`/`~`), a dict
    value with a secret-named key, an `*_env` value that is not a variable name, and any value holding
    one of `keys` (the key variables' values) or a key-like token."""
    keys = tuple(k for k in keys if len(k) >= MIN_SECRET_CHARS)
    for arg in (a for a in argv if not a.startswith("-")):
        match = _OVERRIDE.match(arg)
        if match is not None:
            reason = _reason(match.group(1).strip(), match.group(2), keys)
        else:
            reason = None if "=" in arg else _reason("(a positional argument)", arg, keys)
        if reason is not None:
            return reason
    return None


def refuse(reason: str, program: str, hint: str) -> None:
    """End the program with exit code 2 and one line on stderr: `<program>: refused: <reason>; <hint>`."""
    sys.stderr.write(f"{program}: refused: {reason}; {hint}\n")
    sys.stderr.flush()
    raise SystemExit(2)


class _Secrets:
    secrets: tuple[str, ...] = ()

    def add(self, secrets: Iterable[str]) -> None:
        """Mask these too (secrets are never forgotten)."""
        self.secrets = tuple(dict.fromkeys((*self.secrets, *secrets)))


class SecretFilter(_Secrets, logging.Filter):
    """A handler filter masking secrets and URL credentials in a record's message (with its args),
    exception and stack text; it never drops a record."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.add(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: keep what there is, masked
            message = f"{record.msg} {record.args}"
        record.msg, record.args = redact(message, self.secrets), ()
        if record.exc_info and record.exc_info[0] is not None:  # rendered here, never raw by a handler
            record.exc_text, record.exc_info = logging.Formatter().formatException(record.exc_info), None
        record.exc_text = record.exc_text and redact(record.exc_text, self.secrets)
        record.stack_info = record.stack_info and redact(record.stack_info, self.secrets)
        return True


def install_secret_filter(secrets: Iterable[str], loggers: Iterable[logging.Logger] | None = None) -> None:
    """Mask `secrets` on every handler of `loggers` (default: the root and every existing logger), added
    to the `SecretFilter` a handler has already, else a new one."""
    secrets = tuple(secrets)
    if loggers is None:
        loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                           if isinstance(lg, logging.Logger))]
    for handler in (h for logger in loggers for h in logger.handlers):
        found = next((f for f in handler.filters if isinstance(f, SecretFilter)), None)
        if found is None:
            handler.addFilter(SecretFilter(secrets))
        else:
            found.add(secrets)


class RedactingStream(_Secrets):
    """A text stream `redact`ing each write before passing it on (the console). `echoes` (pairs of
    text and what to show instead: an override's `key=value` as `key=<value not shown>`) are replaced
    first. A secret split across two writes would pass (tracebacks, log handlers, rich write lines)."""

    def __init__(self, stream: IO[str], secrets: Iterable[str] = ()) -> None:
        self.stream = stream
        self.echoes: tuple[tuple[str, str], ...] = ()
        self.add(secrets)

    def write(self, text: str) -> int:
        shown = text
        for echo, hidden in self.echoes:
            shown = shown.replace(echo, hidden)
        self.stream.write(redact(shown, self.secrets))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, ...
        return getattr(self.stream, name)


def _needs_redaction(path: Path, secrets: tuple[str, ...]) -> str | None:
    """The redacted text of a text file (by suffix) that holds something to redact, else None."""
    if path.suffix.lower() not in TEXT_SUFFIXES:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    clean = redact(text, secrets)
    return clean if clean != text else None


def scrub_files(paths: Iterable[Path], secrets: Iterable[str]) -> list[Path]:
    """Rewrite in place, redacted, each of `paths` that holds something to redact; returns those."""
    secrets, changed = tuple(secrets), []
    for path in paths:
        clean = _needs_redaction(path, secrets)
        if clean is not None:
            path.write_text(clean, encoding="utf-8")
            changed.append(path)
    return changed


@contextmanager
def redacted_copy(path: Path, secrets: Iterable[str]) -> Iterator[Path]:
    """`path` (a file or folder) itself when no text file in it needs redacting, else a copy of it (same
    name, in a temporary folder) with those files redacted; the original is left as it is."""
    secrets = tuple(secrets)
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    dirty = [p for p in files if _needs_redaction(p, secrets) is not None]
    if not dirty:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="memtrace-redacted-") as tmp:
        copy = Path(tmp) / path.name
        if path.is_dir():
            shutil.copytree(path, copy)
        else:
            shutil.copy2(path, copy)
        scrub_files([copy / p.relative_to(path) for p in dirty] if path.is_dir() else [copy], secrets)
        yield copy
