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
- `is_secret_name(key)` / `secret_override(argv, keys)`: the override check the entry points run before
  Hydra writes anything: a secret-named key (`*api_key*`, `*apikey*`, `*authorization*`, `*token*`,
  `*secret*`, `*password*` as the LAST key segment, singular `token` only, so `max_tokens`,
  `window_tokens`, `tokenizer` stay allowed, and `api_key_env`, a variable NAME, too), and, whatever
  the key's name (`lm.task.key`, `+openai_key`, `hydra.job.env_set.X`), a value holding one of `keys`
  (the values of the key variables) or a key-like token (`key_like`). The reason names the key only.
- `key_like(text)`: the kind of the first key-like token in a text (None when there is none): THE one
  pattern list (`KEY_PATTERNS`) of what real keys look like — OpenAI `sk-`/`sk-proj-`, Anthropic
  `sk-ant-`, `Bearer`/`Basic` credentials, GitHub `ghp_`/`github_pat_`, AWS `AKIA`/`ASIA` ids,
  Google `AIza`, Hugging Face `hf_`, Slack `xox?-`, Stripe `sk_live_`, JWTs, private-key blocks, a run
  of more than 40 hex digits, and a random-looking base64 run (>= 24 letters and digits mixing upper
  case, lower case and digits, changing class often). Decision: ordinary values pass — paths (long ones
  too), a 40-hex git commit, a 32-hex MLflow run id, UUIDs, `sha256:<hex>` digests, model names,
  URLs without credentials, numbers; a path segment such as `sk-<20+ characters with a digit>` is
  taken for a key (`tests/unit/test_key_patterns.py` holds both lists).
- `key_variable_names(environ, named)` / `key_values(environ, named)`: the environment variables
  holding keys (the `named` ones, e.g. every `api_key_env`; the well-known `KNOWN_KEY_VARIABLES`;
  every variable whose name looks secret by `is_secret_name`) and their values (>= 8 characters).
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
from itertools import pairwise
from typing import IO, Any
from urllib.parse import quote, unquote

REDACTED = "***"
MIN_SECRET_CHARS = 4  # a shorter "secret" would mangle ordinary text when masked everywhere

__all__ = [
    "KEY_PATTERNS",
    "KNOWN_KEY_VARIABLES",
    "REDACTED",
    "RedactingStream",
    "SecretFilter",
    "config_secrets",
    "install_secret_filter",
    "is_secret_name",
    "key_like",
    "key_values",
    "key_variable_names",
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


# THE list of what real keys look like: (kind, pattern). A token must stand alone (no letter or digit
# glued before it), so `desk-...` or `task-...` are not `sk-...`.
_B = r"(?<![A-Za-z0-9])"
KEY_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("an OpenAI/Anthropic key (sk-...)", re.compile(_B + r"sk-(?=[A-Za-z0-9_\-]*[0-9])[A-Za-z0-9_\-]{20,}")),
    ("a Bearer/Basic credential", re.compile(r"(?i)\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}")),
    ("a GitHub token", re.compile(_B + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})")),
    ("an AWS access key id", re.compile(_B + r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])")),
    ("a Google API key", re.compile(_B + r"AIza[0-9A-Za-z_\-]{35}")),
    ("a Hugging Face token", re.compile(_B + r"hf_[A-Za-z0-9]{30,}")),
    ("a Slack token", re.compile(_B + r"xox[abprse]-[A-Za-z0-9\-]{10,}")),
    ("a Stripe key", re.compile(_B + r"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("a JSON Web Token", re.compile(_B + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a long hex string", re.compile(r"(?<![0-9A-Fa-f])(?<!sha256:)(?<!sha512:)[0-9A-Fa-f]{41,}(?![0-9A-Fa-f])")),
)
_RANDOM_RUNS = (re.compile(r"[A-Za-z0-9]{24,}"), re.compile(r"[A-Za-z0-9+/]{32,}"))  # base62; base64
_RANDOM_MIN_CHANGES = 0.4  # share of neighbouring characters of another class (upper/lower/digit)


def _char_class(char: str) -> int:
    return 0 if char.isupper() else 1 if char.islower() else 2


def _random_looking(run: str) -> bool:
    """A letters-and-digits run (base64's `+`/`/` skipped) that mixes upper case, lower case and digits
    and changes class as often as random text does (random base62: ~60% of neighbours differ; words
    and CamelCase: far fewer)."""
    classes = [_char_class(c) for c in run if c.isalnum()]
    if len(set(classes)) < 3:
        return False
    changes = sum(a != b for a, b in pairwise(classes))
    return changes / (len(classes) - 1) >= _RANDOM_MIN_CHANGES


def key_like(text: str) -> str | None:
    """The kind of the first key-like token in `text` ("a long hex string", ...), None when none."""
    for kind, pattern in KEY_PATTERNS:
        if pattern.search(text):
            return kind
    if any(_random_looking(m.group(0)) for run in _RANDOM_RUNS for m in run.finditer(text)):
        return "a long random-looking (base64) string"
    return None


# variables holding keys whatever config is composed (an `api_key_env` may name any other)
KNOWN_KEY_VARIABLES = (
    "OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
    "MISTRAL_API_KEY", "GROQ_API_KEY", "TOGETHER_API_KEY", "TOGETHERAI_API_KEY", "COHERE_API_KEY",
    "DEEPSEEK_API_KEY", "OPENROUTER_API_KEY", "FIREWORKS_API_KEY", "XAI_API_KEY", "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD",
)
MIN_KEY_VALUE_CHARS = 8  # a variable's value shorter than this is not compared (flags, `1`, `true`)
_NOT_A_VALUE = ("_FILE", "_PATH", "_DIR", "_URL", "_URI", "_HOST")  # `*_PASSWORD_FILE` names a file


def key_variable_names(environ: Mapping[str, str], named: Iterable[str] = ()) -> tuple[str, ...]:
    """The set variables that hold keys: `named` (every `api_key_env`), `KNOWN_KEY_VARIABLES`, and
    every variable whose name looks secret (`*_API_KEY`, `*_TOKEN`, `*_SECRET*`, `*_PASSWORD`)."""
    looks_secret = (n for n in environ if is_secret_name(n) and not n.upper().endswith(_NOT_A_VALUE))
    names = dict.fromkeys((*named, *KNOWN_KEY_VARIABLES, *sorted(looks_secret)))
    return tuple(n for n in names if environ.get(n))


def key_values(environ: Mapping[str, str], named: Iterable[str] = ()) -> tuple[str, ...]:
    """The values (>= 8 characters) of `key_variable_names(environ, named)`."""
    values = (environ[n].strip() for n in key_variable_names(environ, named))
    return tuple(dict.fromkeys(v for v in values if len(v) >= MIN_KEY_VALUE_CHARS))


_OVERRIDE_KEY = re.compile(r"^[~+]{0,2}([^=~+][^=]*)=(.*)$", re.DOTALL)
_DICT_KEY = re.compile(r"[{,]\s*['\"]?([A-Za-z_][\w\-]*)['\"]?\s*:")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _named_reason(key: str, value: str) -> str | None:
    if is_secret_name(key):
        return f"override {key!r} would put a secret into the config"
    inner = next((k for k in _DICT_KEY.findall(value) if is_secret_name(k)), None)
    if inner is not None and "{" in value:
        return f"override {key!r} holds a secret key {inner!r}"
    last = key.split("@", 1)[0].split(".")[-1]
    if last.endswith("_env") and value.strip() not in ("", "null") and not _VARIABLE_NAME.match(value.strip()):
        return f"override {key!r} must be the NAME of an environment variable, not a value"
    return None


def _value_reason(key: str, value: str, keys: Sequence[str]) -> str | None:
    value = scrub_urls(value)  # URL credentials are allowed (masked wherever they are stored or shown)
    if any(k in value for k in keys):
        return f"override {key!r} holds the value of a key variable"
    kind = key_like(value)
    return f"override {key!r} holds what looks like a key ({kind})" if kind else None


def secret_override(argv: Iterable[str], keys: Iterable[str] = ()) -> str | None:
    """The first command-line override that would put a secret into the config (and so into Hydra's
    output folder), as a one-line reason naming the key (never the value); None when there is none.
    Refused: a secret-named key (`is_secret_name`, with or without `+`/`++`/`~`), a dict value with a
    secret-named key, an `*_env` key whose value is not a variable name (a key pasted there), and any
    key whose value holds one of `keys` (the key variables' values) or a key-like token (`key_like`)."""
    keys = tuple(k for k in keys if len(k) >= MIN_SECRET_CHARS)
    for arg in argv:
        if arg.startswith("-"):
            continue
        match = _OVERRIDE_KEY.match(arg)
        if match is None:
            reason = _value_reason("(a positional argument)", arg, keys) if "=" not in arg else None
        else:
            key, value = match.group(1).strip(), match.group(2)
            reason = _named_reason(key, value) or _value_reason(key, value, keys)
        if reason is not None:
            return reason
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
