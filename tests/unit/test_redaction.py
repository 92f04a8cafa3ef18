"""The pure redaction functions (pipeline/core/redaction.py): URL scrubbing, secret masking, the
override check, the logging filter and the console stream."""

from __future__ import annotations

import io
import json
import logging

import pytest
from memtrace_loop.pipeline.core.redaction import (
    REDACTED,
    RedactingStream,
    SecretFilter,
    config_secrets,
    install_secret_filter,
    is_secret_name,
    redact,
    redact_tree,
    restore_tree,
    scrub_url,
    scrub_urls,
    secret_override,
    url_credentials,
)

KEY = "sk-memtrace-LEAKCANARY-unit-0123456789"


@pytest.mark.parametrize(
    ("url", "scrubbed"),
    [
        (f"http://user:{KEY}@host:8080/v1", "http://user:***@host:8080/v1"),
        (f"https://{KEY}@github.com/o/r.git", "https://***@github.com/o/r.git"),
        (f"http://host/v1?api_key={KEY}&model=x", "http://host/v1?api_key=***&model=x"),
        (f"http://host/v1?key={KEY}#access_token={KEY}", "http://host/v1?key=***#access_token=***"),
        (f"https://b.blob.core.windows.net/c?sv=2020&sig={KEY}", "https://b.blob.core.windows.net/c?sv=2020&sig=***"),
        (f"postgresql://mlflow:{KEY}@db:5432/mlflow", "postgresql://mlflow:***@db:5432/mlflow"),
        ("sqlite:////tmp/x/mlflow.db", "sqlite:////tmp/x/mlflow.db"),
        ("https://example.com/a/b?page=2&q=hello#top", "https://example.com/a/b?page=2&q=hello#top"),
        ("http://host/path@not-userinfo", "http://host/path@not-userinfo"),
        ("not a url", "not a url"),
    ],
)
def test_scrub_url_masks_user_info_and_credential_query_values_only(url, scrubbed):
    assert scrub_url(url) == scrubbed


def test_scrub_urls_rewrites_every_url_in_a_text_and_nothing_else():
    text = (f'failed: POST http://u:{KEY}@h/v1/chat/completions ("http://h/v1?token={KEY}"), '
            f"see https://docs.example.com/x?page=1.")
    out = scrub_urls(text)
    assert KEY not in out
    assert out.startswith("failed: POST http://u:***@h/v1/chat/completions (")
    assert '"http://h/v1?token=***"' in out and out.endswith("see https://docs.example.com/x?page=1.")


def test_url_credentials_finds_passwords_and_query_values_raw_and_decoded():
    found = url_credentials(f"a http://u:p%40ss-word@h/v1 b http://h/?api_key={KEY}&page=22222 c")
    assert set(found) == {"p%40ss-word", "p@ss-word", KEY}


def test_config_secrets_reads_named_variables_and_url_credentials():
    config = {
        "lm": {"task": {"api_key_env": "MY_KEY", "api_base": "http://u:hunter22@h/v1"},
               "judge": {"api_key_env": "UNSET", "api_base": f"http://h/v1?apikey={KEY}"}},
        "tracking": {"uri": "sqlite:///mlflow.db"},
        "list": ["https://x:tok-12345@h"],
    }
    assert set(config_secrets(config, {"MY_KEY": "env-value-1", "OTHER": "x"})) == {
        "env-value-1", "hunter22", KEY, "tok-12345"}


def test_redact_masks_secrets_in_all_forms_and_scrubs_urls_but_keeps_short_ones():
    secret = 'key"with/odd chars'
    text = f"raw {secret} json {json.dumps(secret)} url http://h/?q=key%22with%2Fodd%20chars end"
    out = redact(text, [secret])
    assert "odd" not in out and out.count(REDACTED) == 3
    assert redact("abc and http://u:pw@h", ["abc"]) == "abc and http://u:***@h"  # 3 chars: too short
    assert redact(f"{KEY} and {KEY[:-3]}", [KEY[:-3], KEY]) == "*** and ***"  # the longer one first


def test_redact_tree_and_restore_tree_round_trip():
    current = {"lm": {"api_base": f"http://u:{KEY}@h/v1", "model": "m", "n": 3}, "xs": [f"k {KEY}", "b"]}
    secrets = config_secrets(current, {})
    saved = redact_tree(current, secrets)
    assert KEY not in json.dumps(saved) and saved["lm"]["n"] == 3
    assert restore_tree(saved, current, secrets) == current
    rotated = {**current, "lm": {**current["lm"], "api_base": "http://u:other-pass@h/v1"}}
    assert restore_tree(saved, rotated, secrets)["lm"]["api_base"] == "http://u:other-pass@h/v1"  # a new password
    moved = {**current, "lm": {**current["lm"], "api_base": "http://u:other-pass@elsewhere/v1"}}
    assert restore_tree(saved, moved, secrets)["lm"]["api_base"] == "http://u:***@h/v1"  # another endpoint: kept


@pytest.mark.parametrize(
    "name",
    ["api_key", "lm.task.api_key", "OPENAI_API_KEY", "apikey", "x-api-key", "headers.Authorization",
     "token", "hf_token", "accessToken", "client_secret", "password", "db.passwd", "credentials"],
)
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["api_key_env", "lm.task.api_key_env", "max_tokens", "lm.task.max_tokens", "window_tokens", "max_chunk_tokens",
     "overlap_tokens", "prompt_tokens", "tokenizer", "memory_system.top_k", "api_base", "key_env", "monkey"],
)
def test_harmless_names(name):
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ([f"+lm.task.api_key={KEY}"], "lm.task.api_key"),
        ([f"++lm.task.headers.Authorization=Bearer {KEY}"], "lm.task.headers.Authorization"),
        ([f"~lm.task.api_key={KEY}"], "lm.task.api_key"),
        (["workers=2", f"lm.task.token={KEY}"], "lm.task.token"),
        ([f"+lm.task.headers={{Authorization:'Bearer {KEY}'}}"], "lm.task.headers"),
        ([f"lm.task.api_key_env={KEY}"], "lm.task.api_key_env"),
    ],
)
def test_secret_overrides_are_named_without_their_value(argv, named):
    reason = secret_override(argv)
    assert reason is not None and repr(named) in reason and KEY not in reason and "LEAKCANARY" not in reason


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["lm=openai", "lm.task.api_key_env=MY_KEY", "lm.task.max_tokens=100", "memory_system.window_tokens=500"],
        ["--cfg", "job", "-m", "seed=0,1", "hydra.run.dir=/tmp/x", "~lm.task.api_key", "lm.task.api_key_env=null"],
        [f"lm.task.api_base=http://u:{KEY}@h/v1"],  # legitimate for some proxies: scrubbed, not refused
        ["lm.judge={backend:openai,model:m,api_key_env:K,api_base:'http://h/v1'}"],
    ],
)
def test_harmless_overrides_pass(argv):
    assert secret_override(argv) is None


def _record(msg: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("x", logging.WARNING, __file__, 1, msg, args, exc_info, sinfo=f"stack {KEY}")


def test_secret_filter_masks_message_args_exception_and_stack():
    try:
        raise RuntimeError(f"Incorrect API key provided: {KEY}")
    except RuntimeError as error:
        record = _record("calling %s with %s", f"http://u:{KEY}@h/v1", KEY, exc=error)
    assert SecretFilter([KEY]).filter(record) is True
    formatted = logging.Formatter("%(message)s").format(record)
    assert KEY not in formatted and "calling http://u:***@h/v1 with ***" in formatted
    assert "RuntimeError: Incorrect API key provided: ***" in formatted


def test_installed_filter_covers_every_handler_and_accumulates_secrets():
    stream = io.StringIO()
    logger = logging.getLogger("memtrace.test_redaction")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        install_secret_filter(["old-secret"], [logger])
        install_secret_filter([KEY], [logger])
        logger.warning("key %s, old-secret, http://u:pw12@h", KEY)
    finally:
        logger.removeHandler(handler)
    assert len(handler.filters) == 1
    assert stream.getvalue() == "key ***, ***, http://u:***@h\n"


def test_redacting_stream_masks_what_is_written_and_learns_new_secrets():
    target = io.StringIO()
    stream = RedactingStream(target, ["first-secret"])
    stream.write("a first-secret b\n")
    stream.add([KEY])
    stream.writelines([f"Incorrect API key provided: {KEY}\n", "http://u:pw12@h\n"])
    assert target.getvalue() == "a *** b\nIncorrect API key provided: ***\nhttp://u:***@h\n"
    assert stream.getvalue() == target.getvalue()  # other attributes pass through


def test_the_filter_covers_richs_handler_with_an_exception():
    from rich.console import Console
    from rich.logging import RichHandler

    output = io.StringIO()
    handler = RichHandler(console=Console(file=output, width=200), show_path=False, rich_tracebacks=True)
    logger = logging.getLogger("memtrace.test_redaction.rich")
    logger.addHandler(handler)
    logger.propagate = False
    install_secret_filter([KEY], [logger])
    try:
        try:
            raise PermissionError(f"Incorrect API key provided: {KEY}")
        except PermissionError:
            logger.exception("call to %s failed", f"http://u:{KEY}@h/v1")
    finally:
        logger.removeHandler(handler)
    shown = output.getvalue()
    assert KEY not in shown and "LEAKCANARY" not in shown
    assert "call to http://u:***@h/v1 failed" in shown and "Incorrect API key provided: ***" in shown
