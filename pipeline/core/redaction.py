"""Keeping secrets out of everything a run writes or prints: the one implementation of redaction.

- `scrub_url(url)` / `scrub_urls(text)`: every URL without its credentials. Decision: user info is
  masked (`user:pass@` -> `user:***@`; a lone `token@` -> `***@`), and in the query string and fragment
  only the VALUES of credential-looking parameters are masked (`?api_key=...`, `key`, `token`,
  `access_token`, `sig`, `X-Amz-Signature`, `password`, ...), so ordinary URLs in data (and a store URI
  such as `sqlite:////tmp/x.db`) are left as they are. A URL with nothing to hide is returned unchanged.
- `url_credentials(text)`: the credential values found in the URLs of a text (user-info passwords and
  credential query values; raw and percent-decoded). They become secrets, so they are masked wherever
  they turn up later without their URL (a transport error naming `user:KEY@host`, a provider echoing it).
- `config_secrets(config, environ)`: the secret values of a composed config — the values of every
  environment variable named by an `api_key_env`, plus `url_credentials` of every string in it.
- `redact(text, secrets)`: every secret value (>= 4 characters; also its JSON-escaped and percent-
  encoded forms) replaced by `***`, then `scrub_urls`. `redact_tree` does it for every string of a
  nested config; `restore_tree` puts the real values back where a saved (redacted) config matches the
  current one (resuming a run whose saved config was redacted).
- `is_secret_name(key)` / `secret_override(argv)`: the override check the entry points run before Hydra
  writes anything (`*api_key*`, `*apikey*`, `*authorization*`, `*token*`, `*secret*`, `*password*` as the
  LAST key segment, singular `token` only, so `max_tokens`, `window_tokens`, `tokenizer` stay allowed,
  and `api_key_env`, a variable NAME, too).
- `SecretFilter` (a `logging.Filter` masking secrets and URL credentials in a record's message, args,
  exception and stack text) and `install_secret_filter(secrets)` (on every handler of every logger,
  adding to what a handler's filter already masks; entry points call it once the secrets are known),
  `RedactingStream` (a text stream wrapper for the console, so a traceback or a third party's print
  cannot show a key either).

It does not read config files or decide where anything is written; it never logs a secret itself.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any
from urllib.parse import quote, unquote

REDACTED = "***"
MIN_SECRET_CHARS = 4  # a shorter "secret" would mangle ordinary text when masked everywhere

__all__ = [
    "REDACTED",
    "RedactingStream",
    "SecretFilter",
    "config_secrets",
    "install_secret_filter",
    "is_secret_name",
    "redact",
    "redact_tree",
    "restore_tree",
    "scrub_url",
    "scrub_urls",
    "secret_override",
    "url_credentials",
]

# scheme://rest, up to whitespace, quotes, angle brackets or a backslash (a JSON escape)
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`\\]+")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SECRET_WORDS = frozenset({"secret", "secrets", "password", "passwd", "authorization", "apikey", "credential",
                           "credentials", "bearer"})
# query parameter names that carry credentials besides the secret names (`key=` of Google APIs, SAS `sig`)
_QUERY_SECRET_WORDS = frozenset({"key", "sig", "signature", "auth", "pwd", "pass", "session", "credential"})


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(name)]


def _secret_words(words: Sequence[str]) -> bool:
    if not words or words[-1] == "env":  # `api_key_env` NAMES a variable; its value is not a secret
        return False
    if any(w in _SECRET_WORDS or w.endswith("token") for w in words):  # `tokens` / `tokenizer` do not
        return True
    joined = "".join(words)
    return "apikey" in joined or "authorization" in joined or "password" in joined or "secret" in joined


def is_secret_name(key: str) -> bool:
    """Whether the last segment of a config key (`lm.task.api_key`, `headers.Authorization`) names a
    secret: api key, authorization, token (singular), secret, password — never `*_env` or `*_tokens`."""
    last = key.strip().strip("'\"").split("@", 1)[0].rstrip("]").split(".")[-1].split("[")[-1]
    return _secret_words(_words(last))


def _query_name_is_secret(name: str) -> bool:
    words = _words(unquote(name))
    return _secret_words(words) or any(w in _QUERY_SECRET_WORDS for w in words)


def _split_url(url: str) -> tuple[str, str, str, str] | None:
    """(scheme://, user info, rest of authority + path, query+fragment with their `?`/`#`), or None."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    end = len(rest)
    for mark in "/?#":
        found = rest.find(mark)
        if found != -1:
            end = min(end, found)
    authority, tail = rest[:end], rest[end:]
    userinfo, at, host = authority.rpartition("@")
    cut = len(tail)
    for mark in "?#":
        found = tail.find(mark)
        if found != -1:
            cut = min(cut, found)
    return scheme + sep, userinfo if at else "", host + tail[:cut], tail[cut:]


def _params(part: str) -> list[tuple[str, str]]:
    return [(name, value) for name, _, value in (p.partition("=") for p in re.split(r"[&;]", part)) if value]


def url_credentials(text: str) -> tuple[str, ...]:
    """The credential values in the URLs of `text`: user-info passwords (or a lone user-info token)
    and the values of credential-looking query/fragment parameters, each raw and percent-decoded."""
    found: list[str] = []
    for match in _URL.finditer(text):
        parts = _split_url(match.group(0))
        if parts is None:
            continue
        _, userinfo, _, query = parts
        if userinfo:
            user, colon, password = userinfo.partition(":")
            found.append(password if colon else user)
        for chunk in re.split(r"[?#]", query):
            found.extend(value for name, value in _params(chunk) if _query_name_is_secret(name))
    values = [v for raw in found for v in (raw, unquote(raw))]
    return tuple(dict.fromkeys(v for v in values if len(v) >= MIN_SECRET_CHARS))


def _mask_params(part: str) -> str:
    def mask(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        return f"{name}={REDACTED}" if value and _query_name_is_secret(name) else match.group(0)

    return re.sub(r"([^&;=?#]+)=([^&;#]*)", mask, part)


def scrub_url(url: str) -> str:
    """`url` with its user info and the values of credential-looking query/fragment parameters masked
    (unchanged when it holds none; not a URL: unchanged)."""
    parts = _split_url(url)
    if parts is None:
        return url
    scheme, userinfo, rest, query = parts
    if userinfo:
        user, colon, _ = userinfo.partition(":")
        userinfo = f"{user}:{REDACTED}@" if colon else f"{REDACTED}@"
    return scheme + userinfo + rest + _mask_params(query)


def scrub_urls(text: str) -> str:
    """Every URL in `text` through `scrub_url`; the rest of the text as it is."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: scrub_url(m.group(0)), text)


def _forms(secret: str) -> set[str]:
    return {secret, json.dumps(secret)[1:-1], quote(secret, safe=""), quote(secret)}


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every secret value (raw, JSON-escaped, percent-encoded) replaced by `***` and every
    URL scrubbed of credentials (`scrub_urls`). Secrets shorter than 4 characters are ignored."""
    forms = {f for s in secrets if s and len(s) >= MIN_SECRET_CHARS for f in _forms(s)}
    for form in sorted(forms, key=len, reverse=True):  # a secret containing another goes first
        if form in text:
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


def config_secrets(config: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[str, ...]:
    """The secrets of a composed config: the value of every variable named by an `api_key_env`
    anywhere in it (looked up in `environ`), and the credentials of every URL in its strings."""
    names: set[str] = set()
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key == "api_key_env" and isinstance(value, str):
                    names.add(value)
                else:
                    walk(value)
        elif isinstance(node, list | tuple):
            for item in node:
                walk(item)
        elif isinstance(node, str):
            found.extend(url_credentials(node))

    walk(config)
    found.extend(v for v in (environ.get(n) for n in sorted(names)) if v)
    return tuple(dict.fromkeys(found))


_OVERRIDE_KEY = re.compile(r"^[~+]{0,2}([^=~+][^=]*)=(.*)$", re.DOTALL)
_DICT_KEY = re.compile(r"[{,]\s*['\"]?([A-Za-z_][\w\-]*)['\"]?\s*:")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def secret_override(argv: Iterable[str]) -> str | None:
    """The first command-line override that would put a secret into the config (and so into Hydra's
    output folder), as a one-line reason naming the key (never the value); None when there is none.
    Refused: a secret-named key (`is_secret_name`, with or without `+`/`++`/`~`), a dict value with a
    secret-named key, and an `*_env` key whose value is not a variable name (a key pasted there)."""
    for arg in argv:
        if arg.startswith("-"):
            continue
        match = _OVERRIDE_KEY.match(arg)
        if match is None:
            continue
        key, value = match.group(1).strip(), match.group(2)
        if is_secret_name(key):
            return f"override {key!r} would put a secret into the config"
        inner = next((k for k in _DICT_KEY.findall(value) if is_secret_name(k)), None)
        if inner is not None and "{" in value:
            return f"override {key!r} holds a secret key {inner!r}"
        last = key.split("@", 1)[0].split(".")[-1]
        if last.endswith("_env") and value.strip() not in ("", "null") and not _VARIABLE_NAME.match(value.strip()):
            return f"override {key!r} must be the NAME of an environment variable, not a value"
    return None


class SecretFilter(logging.Filter):
    """Masks the given secret values and URL credentials in every record it sees (message with its args,
    exception text, stack text); it never drops a record. Put it on handlers (`install_secret_filter`):
    a handler filter sees the records of every logger that propagates to it."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        self.secrets = tuple(dict.fromkeys((*self.secrets, *secrets)))

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: keep what there is, masked
            message = f"{record.msg} {record.args}"
        record.msg, record.args = redact(message, self.secrets), ()
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None  # rendered above; a handler must not render the raw exception again
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.secrets)
        return True


def install_secret_filter(secrets: Iterable[str], loggers: Iterable[logging.Logger] | None = None) -> None:
    """Mask `secrets` on every handler of the root logger and of every other existing logger: added to
    the `SecretFilter` a handler already has (secrets are never forgotten), else a new one. Entry points
    call it once their handlers are set up and the secrets are known (again when they learn more)."""
    secrets = tuple(secrets)
    if loggers is None:
        named = [lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
        loggers = [logging.getLogger(), *named]
    for logger in loggers:
        for handler in logger.handlers:
            found = next((f for f in handler.filters if isinstance(f, SecretFilter)), None)
            if found is None:
                handler.addFilter(SecretFilter(secrets))
            else:
                found.add(secrets)


class RedactingStream:
    """A text stream that `redact`s everything written through it before passing it on (the console:
    `sys.stdout = RedactingStream(sys.stdout, secrets)`). `add` extends the secrets once they are known.
    Each `write` is redacted on its own: a secret split across two writes would pass (tracebacks, log
    handlers and rich write whole lines)."""

    def __init__(self, stream: IO[str], secrets: Iterable[str] = ()) -> None:
        self.stream = stream
        self.secrets: tuple[str, ...] = tuple(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        self.secrets = tuple(dict.fromkeys((*self.secrets, *secrets)))

    def write(self, text: str) -> int:
        self.stream.write(redact(text, self.secrets))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, ...
        return getattr(self.stream, name)
