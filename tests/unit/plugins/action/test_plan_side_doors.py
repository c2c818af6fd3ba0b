"""Side doors of kimi_k3_extra_args / kimi_k3_extra_env: secrets, --config files and derived environment are
refused at plan time, each refusal naming the host, the variable and the fix, never the secret's value."""
import os
import stat
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.action import cluster_plan as cluster_plan_action
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import checks
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import extras
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from tests.unit.plan_mistakes import test_corpus as corpus

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
REV = "0123456789abcdef0123456789abcdef01234567"
SECRET = "hf_SeCrEtVaLuE42"


def one_node(**cluster):
    v = {"kimi_k3_image": "vllm/vllm-openai@sha256:" + "a" * 64, "kimi_k3_vllm_version": "0.28.0",
         "kimi_k3_accelerator": "b200", "kimi_k3_strategy": "single_node_tp", "kimi_k3_model_revision": REV,
         "kimi_k3_api_key": "k", "ansible_host": "10.9.0.1"}
    v.update(cluster)
    return [{"host": "node0", "head": True, "vars": v}]


def refusals(variable, **cluster):
    errors = checks.validate(one_node(**cluster), RECIPE, SNAPSHOTS)[1]
    return [e for e in errors if e["variable"] == variable]


# ----------------------------------------------------------------------------- extra args


@pytest.mark.parametrize("items, flag", [
    (["--hf-token", SECRET], "--hf-token"), (["--hf-token=" + SECRET], "--hf-token"),
    (["--hf_token", SECRET], "--hf_token"), (["--hf_token=" + SECRET], "--hf_token"), (["--hf-token"], "--hf-token"),
    (["--max-num-seqs", "8", "--hf-token", SECRET], "--hf-token"),
])
def test_a_hugging_face_token_in_extra_args_is_refused_without_its_value(items, flag):
    (p,) = refusals("kimi_k3_extra_args", kimi_k3_extra_args=items)
    assert p["host"] == "node0"
    assert p["message"] == "%s is a secret: the value would be in the launch script, the plan file and the " \
                           "container's argv." % flag
    assert p["fix"] == RECIPE["refused_args"]["--hf-token"]["fix"] + "."
    assert "kimi_k3_hf_token" in p["fix"] and SECRET not in p["message"] + p["fix"]


@pytest.mark.parametrize("items", [["--api-key", SECRET], ["--api_key=" + SECRET]])
def test_an_api_key_in_extra_args_is_refused_naming_kimi_k3_api_key(items):
    (p,) = refusals("kimi_k3_extra_args", kimi_k3_extra_args=items)
    assert p["host"] == "node0" and "is a secret" in p["message"] and "set kimi_k3_api_key (vault)" in p["fix"]
    assert SECRET not in p["message"] + p["fix"]


@pytest.mark.parametrize("items", [["--config", "/etc/vllm.yaml"], ["--config=/etc/vllm.yaml"],
                                   ["--config", "cfg.yaml", "--max-num-seqs", "8"]])
def test_a_config_file_is_refused(items):
    (p,) = refusals("kimi_k3_extra_args", kimi_k3_extra_args=items)
    assert p["host"] == "node0"
    assert p["message"] == "--config reads flags from a file the plan cannot check (derived flags and secrets " \
                           "included)."
    assert p["fix"].startswith("write each flag and its value as items of kimi_k3_extra_args")


def test_the_config_format_flag_is_not_mistaken_for_config():
    assert refusals("kimi_k3_extra_args", kimi_k3_extra_args=["--config-format", "hf"]) == []


def test_a_control_character_names_the_item_not_its_value():
    (p,) = refusals("kimi_k3_extra_args", kimi_k3_extra_args=["--hf-token", SECRET + "\n"])[:1]
    assert p["message"] == "item 2 contains a control character." and SECRET not in p["message"]


# ----------------------------------------------------------------------------- extra env: secrets


@pytest.mark.parametrize("name, variable", [
    ("HF_TOKEN", "kimi_k3_hf_token"), ("HUGGING_FACE_HUB_TOKEN", "kimi_k3_hf_token"), ("hf_token", "kimi_k3_hf_token"),
    ("OPENAI_API_KEY", "kimi_k3_api_key"), ("VLLM_API_KEY", "kimi_k3_api_key")])
def test_known_secret_names_point_at_their_variable(name, variable):
    (p,) = refusals("kimi_k3_extra_env", kimi_k3_extra_env={name: SECRET})
    assert p["host"] == "node0"
    assert p["message"] == "%s is a secret and would land in the plan file and the container's configuration." % name
    assert p["fix"] == "remove it and set %s from a vault; the launch passes it through a mode-0400 file." % variable


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD",
                                  "REGISTRY_PASSWD", "GOOGLE_APPLICATION_CREDENTIALS", "MYTOKEN", "apikey",
                                  "MY_TOKENIZER_SECRET", "S3_KEY"])
def test_secret_looking_names_are_refused(name):
    (p,) = refusals("kimi_k3_extra_env", kimi_k3_extra_env={name: SECRET})
    assert p["message"].startswith("%s looks like a secret" % name)
    assert p["fix"].startswith("remove it: kimi_k3_extra_env is not secret.")
    assert p["fix"].endswith("If %s holds no secret, list it in kimi_k3_extra_env_not_secret (docs/secrets.md)."
                             % name)
    assert SECRET not in p["message"] + p["fix"]


def test_a_name_declared_not_secret_passes_but_a_known_secret_never_does():
    assert refusals("kimi_k3_extra_env", kimi_k3_extra_env={"S3_ACCESS_KEY_ID": "AKIA"},
                    kimi_k3_extra_env_not_secret=["S3_ACCESS_KEY_ID"]) == []
    (p,) = refusals("kimi_k3_extra_env", kimi_k3_extra_env={"HF_TOKEN": SECRET}, kimi_k3_extra_env_not_secret=["HF_TOKEN"])
    assert "kimi_k3_hf_token" in p["fix"]
    (p,) = refusals("kimi_k3_extra_env", kimi_k3_extra_env={"NCCL_SOCKET_IFNAME": "eth0"},
                    kimi_k3_extra_env_not_secret=["NCCL_SOCKET_IFNAME"])
    assert p["fix"] == "set kimi_k3_socket_ifname instead."


def test_the_not_secret_list_holds_environment_names():
    (p,) = refusals("kimi_k3_extra_env_not_secret", kimi_k3_extra_env_not_secret=["S3 KEY"])
    assert p["fix"] == "set kimi_k3_extra_env_not_secret to an environment variable name ([A-Za-z_][A-Za-z0-9_]*)."


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE", "NCCL_DEBUG",
                                  "VLLM_ENGINE_READY_TIMEOUT_S", "PYTORCH_CUDA_ALLOC_CONF", "VLLM_KEEP_ALIVE"])
def test_well_known_non_secret_names_pass(name):
    assert refusals("kimi_k3_extra_env", kimi_k3_extra_env={name: "1"}) == []


@settings(max_examples=300, deadline=None)
@given(prefix=st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True),
       word=st.sampled_from(["SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "TOKEN", "KEY"]),
       suffix=st.from_regex(r"[A-Z0-9_]{0,8}", fullmatch=True))
def test_a_secret_word_anywhere_is_caught(prefix, word, suffix):
    name = prefix + "_" + word + ("_" + suffix if suffix else "")
    assert extras.is_secret_env(RECIPE, name) or any(
        w in RECIPE["secret_env"]["not_secret_words"] for w in name.split("_") if word in w)


@settings(max_examples=200, deadline=None)
@given(name=st.text(max_size=30))
def test_the_secret_rule_never_raises(name):
    assert extras.is_secret_env(RECIPE, name) in (True, False)


# ----------------------------------------------------------------------------- extra env: derived per node


@pytest.mark.parametrize("name", sorted(RECIPE["reserved_env"]))
def test_environment_the_plan_derives_cannot_be_overridden(name):
    (p,) = refusals("kimi_k3_extra_env", kimi_k3_extra_env={name: "10.0.0.9"})
    assert p["host"] == "node0"
    assert p["message"] == "%s is derived by the plan (per node or from a variable); kimi_k3_extra_env would " \
                           "override it." % name
    assert p["fix"] == RECIPE["reserved_env"][name] + " instead."


def _placeholder_env(recipe):
    """Environment names whose value the plan computes (placeholders) or that a variable switches."""
    found = set(recipe["multi_node_env"]) | set(recipe["mnnvl_env"]) & {"NCCL_NVLS_ENABLE"}
    found |= set(k for k, v in recipe["pd_cluster"]["env"].items() if "{" in str(v))
    found |= {"VLLM_NIXL_SIDE_CHANNEL_PORT", "VLLM_USE_V2_MODEL_RUNNER", "VLLM_USE_RUST_FRONTEND"}
    return found


def test_every_environment_name_the_plan_derives_is_reserved():
    assert _placeholder_env(RECIPE) <= set(RECIPE["reserved_env"])


def test_reserved_names_are_refused_in_any_case():
    (p,) = refusals("kimi_k3_extra_env", kimi_k3_extra_env={"vllm_nixl_side_channel_host": "10.0.0.9"})
    assert "set kimi_k3_internal_address on each node" in p["fix"]


# ----------------------------------------------------------------------------- plan files


def test_plan_files_are_written_for_the_owner_only(tmp_path):
    action = object.__new__(cluster_plan_action.ActionModule)
    action._task = types.SimpleNamespace(check_mode=False, diff=False)
    plan = corpus.plan(*corpus.nodes_of(*corpus.base_inventory("mi355x-cluster")))
    host = list(plan["plans"])[0]
    assert list(plan["plans"]) == [host]
    out = action._write(str(tmp_path), plan, {host: "#!/bin/sh\n"}, secrets=[])
    assert "diff" not in out and sorted(out["written"])[:3] == ["%s.json" % host, "%s.sh" % host, "plan.md"]
    for name, mode in (("%s.json" % host, 0o600), ("%s.sh" % host, 0o700), ("plan.md", 0o600)):
        assert stat.S_IMODE(os.stat(str(tmp_path / name)).st_mode) == mode, name


@settings(max_examples=150, deadline=None)
@given(flag=st.sampled_from(["--hf-token", "--api-key", "--config"]),
       seps=st.lists(st.sampled_from(["-", "_"]), min_size=2, max_size=2),
       inline=st.booleans(), value=st.from_regex(r"[A-Za-z0-9]{8,16}", fullmatch=True),
       before=st.sampled_from([[], ["--max-num-seqs", "8"], ["--enforce-eager"]]))
def test_every_spelling_of_a_refused_flag_is_refused_without_its_value(flag, seps, inline, value, before):
    words = flag[2:].split("-")
    spelled = "--" + words[0] + "".join(sep + word for sep, word in zip(seps, words[1:]))
    items = before + ([spelled + "=" + value] if inline else [spelled, value])
    found = refusals("kimi_k3_extra_args", kimi_k3_extra_args=items)
    assert len(found) == 1 and found[0]["message"].startswith(spelled + " ")
    assert value not in found[0]["message"] + found[0]["fix"]
