"""No secret leaks (issue 10, "Secrets"): distinctive keys placed in the variable named by `api_key_env`,
in `api_base` user info and query strings, in a provider's error body and in overrides never appear in
the MLflow store (database and artifacts), the output folder (`.hydra/` included), the caches, stdout or
stderr of `memtrace run` started as a real process against the local OpenAI-protocol server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.openai_server import OpenAIStubServer
from tests.support.store import fresh_store

CANARY = "LEAKCANARY"
KEY_ENV = f"sk-memtrace-{CANARY}-env-7c41d2e9"  # the value of the variable api_key_env names
KEY_USER = f"sk-memtrace-{CANARY}-userinfo-93ab40"  # a password in an api_base's user info
KEY_QUERY = f"sk-memtrace-{CANARY}-query-5e0f17"  # an api_key in an api_base's query string
KEY_OVERRIDE = f"sk-memtrace-{CANARY}-override-11d8c3"  # a key given as an override
OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}
SMALL = ["dataset.n_conversations=1", "dataset.sessions_per_conversation=2", "workers=2"]


@pytest.fixture
def server():
    with OpenAIStubServer() as stub:
        yield stub


def memtrace(tmp_path: Path, *args: str, launcher: tuple[str, ...] = ("-m", "memtrace_loop.experiments.cli")
             ) -> subprocess.CompletedProcess[bytes]:
    """`memtrace <args>` as a process, everything it writes kept under `tmp_path` (its cwd)."""
    if not (tmp_path / "store" / "mlflow.db").exists():
        fresh_store(tmp_path / "store" / "mlflow.db")  # migrated already (a copy of the tests' template)
    env = {**os.environ, **OFFLINE, "MEMTRACE_TEST_KEY": KEY_ENV,
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/store/mlflow.db",
           "MEMTRACE_CACHE_DIR": str(tmp_path / "cache"), "DSPY_CACHEDIR": str(tmp_path / "dspy")}
    done = subprocess.run([sys.executable, *launcher, *args], cwd=tmp_path, env=env, capture_output=True, timeout=600)
    (tmp_path / "console").mkdir(exist_ok=True)
    number = len(list((tmp_path / "console").iterdir()))
    (tmp_path / "console" / f"{number}.out").write_bytes(done.stdout)
    (tmp_path / "console" / f"{number}.err").write_bytes(done.stderr)
    return done


def leaks(root: Path) -> list[str]:
    """Every file under `root` holding the canary (byte-wise, whatever the file is)."""
    canary = CANARY.encode()
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and canary in p.read_bytes())


@pytest.mark.slow  # seconds each (measured): out of `make test-fast`
def test_a_key_override_is_refused_before_hydra_writes_anything(tmp_path):
    for override in (f"+lm.task.api_key={KEY_OVERRIDE}", f"++lm.task.headers.Authorization=Bearer {KEY_OVERRIDE}",
                     f"lm.task.api_key_env={KEY_OVERRIDE}"):
        done = memtrace(tmp_path, "run", "lm=openai", override, f"hydra.run.dir={tmp_path}/out")
        err = done.stderr.decode()
        assert done.returncode == 2, err
        key = override.lstrip("+").split("=", 1)[0]
        assert len(err.strip().splitlines()) == 1 and repr(key) in err and "api_key_env" in err
    # an app started without the dispatcher is guarded too
    started_directly = ("-c", "from memtrace_loop.experiments.run import main; main()")
    done = memtrace(tmp_path, f"+lm.task.api_key={KEY_OVERRIDE}", f"hydra.run.dir={tmp_path}/out",
                    launcher=started_directly)
    assert done.returncode == 2 and "'lm.task.api_key'" in done.stderr.decode()
    assert not (tmp_path / "out").exists(), "Hydra wrote its output folder before the refusal"
    assert leaks(tmp_path) == []


@pytest.mark.slow  # seconds each (measured): out of `make test-fast`
def test_a_credential_in_a_url_is_masked_when_hydra_prints_the_config(tmp_path):
    done = memtrace(tmp_path, "run", "lm=openai", f"lm.task.api_base='http://user:{KEY_USER}@proxy/v1?api_key={KEY_QUERY}'",
                    "--cfg", "job")
    assert done.returncode == 0, done.stderr.decode()
    assert "api_base: http://user:***@proxy/v1?api_key=***" in done.stdout.decode()
    assert leaks(tmp_path) == []


@pytest.mark.slow
def test_a_working_run_stores_and_prints_no_key(server, tmp_path):
    done = memtrace(
        tmp_path, "run", "lm=openai", f"lm.task.api_base={server.base_url}", "lm.task.api_key_env=MEMTRACE_TEST_KEY",
        "lm.task.model=stub-model", *SMALL, f"hydra.run.dir={tmp_path}/out",
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert server.requests and all(r.header("Authorization") == f"Bearer {KEY_ENV}" for r in server.requests)
    assert b"MEMTRACE_TEST_KEY" in (tmp_path / "store" / "mlflow.db").read_bytes(), "the run reached the store"
    assert (tmp_path / "out" / "artifacts" / "graphs").is_dir() and (tmp_path / "out" / ".hydra").is_dir()
    assert leaks(tmp_path) == []


@pytest.mark.slow
def test_keys_in_urls_and_in_a_provider_error_are_never_stored_or_printed(server, tmp_path):
    host = server.base_url.removeprefix("http://")
    # the judge's URL carries a key in its query string (user info would be refused by LMConfig)
    judge = (f"lm.judge={{backend:openai,model:stub-model,api_key_env:MEMTRACE_TEST_KEY,num_retries:0,"
             f"api_base:'http://{host}?api_key={KEY_QUERY}'}}")
    # the provider answers 401 echoing the key (once the transport aborts on 401 the run ends early: fine)
    server.inject(status=401, times=3, retry_after=None, endpoint="/chat/completions",
                  message=f"Incorrect API key provided: {KEY_ENV}. Find your key at https://example.com/keys.")
    done = memtrace(
        tmp_path, "run", "lm=openai", f"lm.task.api_base={server.base_url}", "lm.task.api_key_env=MEMTRACE_TEST_KEY",
        "lm.task.model=stub-model", "lm.task.num_retries=0", judge,
        "embedder=openai", f"embedder.api_base=http://user:{KEY_USER}@{host}", "embedder.api_key_env=MEMTRACE_TEST_KEY",
        *SMALL, f"hydra.run.dir={tmp_path}/out",
    )
    assert any(r.status == 401 for r in server.requests), "the provider error was sent"
    assert leaks(tmp_path) == [], f"exit {done.returncode}"
    overrides = (tmp_path / "out" / ".hydra" / "overrides.yaml").read_text()
    assert f"embedder.api_base=http://user:***@{host}" in overrides, "the override is kept, scrubbed"


@pytest.mark.slow
def test_a_sweep_in_parallel_worker_processes_stores_and_prints_no_key(server, tmp_path):
    """The jobs of a `-m` sweep on the joblib launcher run in worker processes that never passed the
    entry point's guard: each job protects its own console, logs and Hydra files."""
    host = server.base_url.removeprefix("http://")
    server.inject(status=401, times=2, retry_after=None, endpoint="/chat/completions",  # each job's first call
                  message=f"Incorrect API key provided: {KEY_ENV}.")
    done = memtrace(
        tmp_path, "run", "-m", "hydra/launcher=parallel", "seed=0,1", "lm=openai",
        f"lm.task.api_base={server.base_url}", "lm.task.api_key_env=MEMTRACE_TEST_KEY", "lm.task.model=stub-model",
        "lm.task.num_retries=0", "embedder=openai", f"embedder.api_base=http://user:{KEY_USER}@{host}",
        "embedder.api_key_env=MEMTRACE_TEST_KEY", *SMALL, f"hydra.sweep.dir={tmp_path}/sweep",
    )
    err = done.stderr.decode()
    assert done.returncode == 1 and err.count("authentication failed") == 2, err[-3000:]  # both jobs ran
    assert len(list((tmp_path / "sweep").glob("*/.hydra/overrides.yaml"))) == 2
    assert leaks(tmp_path) == []
