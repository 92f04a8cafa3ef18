"""The one list of what keys look like (`redaction.key_like`, `KEY_PATTERNS`) and the override check
built on it: real key shapes are found, ordinary override values (paths, commit hashes, MLflow run
ids, UUIDs, digests, model names, URLs without credentials, numbers) pass, and a value equal to a key
variable's value is refused under any key name, the reason naming the key and never the value."""

from __future__ import annotations

import hashlib
import random
import string
import uuid

import pytest
from memtrace_loop.pipeline.core.redaction import (
    KEY_PATTERNS,
    key_like,
    key_values,
    key_variable_names,
    secret_override,
)

_RANDOM = random.Random(24)
ALNUM = string.ascii_letters + string.digits


def _random(chars: str, n: int) -> str:
    return "".join(_RANDOM.choice(chars) for _ in range(n))


KEYS = {
    "openai legacy": "sk-" + _random(ALNUM, 48),
    "openai project": "sk-proj-" + _random(ALNUM + "_-", 120) + "7",
    "anthropic": "sk-ant-api03-" + _random(ALNUM + "_-", 93) + "9AA",
    "bearer": "Bearer " + _random(ALNUM, 24),
    "github classic": "ghp_" + _random(ALNUM, 36),
    "github fine-grained": "github_pat_" + _random(ALNUM + "_", 82),
    "aws access key id": "AKIA" + _random(string.ascii_uppercase + string.digits, 16),
    "aws secret": _random(ALNUM + "+/", 40),
    "google": "AIza" + _random(ALNUM + "_-", 35),
    "hugging face": "hf_" + _random(ALNUM, 34),
    "slack": "xoxb-" + _random(string.digits, 12) + "-" + _random(ALNUM, 24),
    "stripe": "sk_live_" + _random(ALNUM, 24),
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "hex 64": _random("0123456789abcdef", 64),
    "base62 32": "Q7" + _random(ALNUM, 28) + "z4",
    "base64 44": _random(ALNUM + "+/", 42) + "x=",
    "private key": "-----BEGIN RSA PRIVATE KEY-----",
}

ORDINARY = [
    "/work/wt-r4/tests/fixtures/LoCoMo10_Subset_2024/conversations/locomo10.json",
    "/home/someone/Projects/MyMemoryExperiments2024/Outputs/RunNumber42/best_prompts.yaml",
    "outputs/optimize/2026-11-26_05-55-54-abcd1234",
    "/" + "/".join(f"folder_{i}_with_a_long_name" for i in range(30)) + "/prompts.yaml",  # a very long path
    hashlib.sha1(b"a commit").hexdigest(),  # a git commit (40 hex): passes as a run id or in a path
    uuid.UUID(int=_RANDOM.getrandbits(128)).hex,  # an MLflow run id (32 hex)
    str(uuid.UUID(int=_RANDOM.getrandbits(128))),
    str(uuid.UUID(int=_RANDOM.getrandbits(128))).upper(),
    "sha256:" + hashlib.sha256(b"data").hexdigest(),
    "gpt-4o-mini-2024-07-18",
    "claude-3-5-sonnet-20241022",
    "meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo",
    "bartowski/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct-Q4_K_M.gguf",
    "hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M",
    "http://localhost:8080/v1",
    "https://api.openai.com/v1/chat/completions",
    "s3://my-bucket/MemTraceLoopExperiments/run-2026/prompts.yaml",
    "sqlite:////tmp/pytest-of-root/pytest-12/test_x0/mlflow.db",
    "MemTraceLoopOptimizeRunNumber2024Final",
    "task-1234567890abcdefghijk",  # `sk-` only as a token of its own
    "0.25", "1e-5", "12345678901234567890", "[0.5,0.25,0.25]", "null", "''",
    "Answer the question in one short sentence using only the memories.",
]


def test_every_pattern_has_a_kind_and_compiles():
    assert len({kind for kind, _ in KEY_PATTERNS}) == len(KEY_PATTERNS)


@pytest.mark.parametrize("name", sorted(KEYS))
def test_real_key_shapes_are_found(name):
    assert key_like(f"prefix {KEYS[name]} suffix") is not None


@pytest.mark.parametrize("value", ORDINARY)
def test_ordinary_values_pass(value):
    assert key_like(value) is None
    assert secret_override([f"prompts={value}", f"run_id={value}"]) is None


def test_random_ids_of_the_tools_pass():
    ids = [f(i) for i in range(300) for f in (
        lambda i: uuid.UUID(int=_RANDOM.getrandbits(128)).hex,
        lambda i: hashlib.sha1(str(i).encode()).hexdigest(),
        lambda i: str(uuid.UUID(int=_RANDOM.getrandbits(128))),
    )]
    assert [v for v in ids if key_like(v)] == []


def test_a_credential_inside_a_url_keeps_its_mask_and_is_not_refused():
    assert secret_override([f"tracking.uri=http://user:{KEYS['openai legacy']}@mlflow:5000"]) is None


@pytest.mark.parametrize(
    "override",
    ["lm.task.key={}", "+openai_key={}", "+access_key={}", "hydra.job.env_set.X={}", "+lm.task.api_key={}",
     "prompts=/tmp/{}/p.yaml", "+lm.task.headers={{X-Custom:'{}'}}"],
)
def test_a_key_variable_value_is_refused_under_any_name(override):
    value = "plainlowercasekeyvalue"  # no key shape: found only as the variable's value
    reason = secret_override(["workers=2", override.format(value)], key_values({"MY_PROVIDER_KEY": value},
                                                                              ["MY_PROVIDER_KEY"]))
    key = override.split("=", 1)[0].lstrip("+")
    assert reason is not None and repr(key) in reason and value not in reason


def test_key_variables_are_the_named_the_well_known_and_the_secret_looking():
    environ = {"OPENAI_API_KEY": "k" * 20, "MY_TOKEN": "t" * 12, "DB_PASSWORD_FILE": "/run/secrets/db",
               "SHORT_TOKEN": "1", "CUSTOM": "c" * 10, "PATH": "/usr/bin"}
    assert set(key_variable_names(environ, ["CUSTOM"])) == {"CUSTOM", "OPENAI_API_KEY", "MY_TOKEN", "SHORT_TOKEN"}
    assert set(key_values(environ, ["CUSTOM"])) == {"c" * 10, "k" * 20, "t" * 12}  # `1` is too short to compare
