"""Format checks hold for the whole value: Python's ``$`` matches before a final newline, ``\\Z`` does not.

Every named format of the variable table, the plan's own regular expressions (image digest, environment names,
host names, loopback) and the node-side parsers that validate input (hf_stage, image_ref) refuse a value that is
valid except for a trailing newline or another control character in any position.
"""
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import hf_stage
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.image import reference as image_ref
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import addresses
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import checks as plan_checks
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import extras
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
# One accepted value per named format (the test below fails when a format is added without one).
SAMPLES = {
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "abs_path": "/data/hf-cache",
    "ifname": "^docker,lo",
    "container_name": "vllm-kimi-k3",
    "address": "10.0.0.1",
    "hf_model": "moonshotai/Kimi-K3",
    "shm_size": "64g",
    "docker_host": "unix:///var/run/docker.sock",
    "env_name": "NCCL_DEBUG",
    "text": "kimi-k3",
    "deployment": "replica-1",
    "path": "artifacts/x",
    "secret": "sk-test-0123",
    "cpu_list": "0-3",
}
# Variants of one mistake: a control character where an editor, a heredoc or a template leaves one.
VARIANTS = ("{}\n", "{}\r\n", "{}\n\n", "\n{}", "{}\r", "{}\t", "{}\x00", "{}\n ", "{}\x7f", "{}\x0b", "{}\x0c")


def test_every_format_has_a_sample_it_accepts():
    assert set(SAMPLES) == set(plan_variables.FORMATS)
    for fmt, sample in SAMPLES.items():
        assert plan_variables._format_ok(fmt, sample), fmt


@pytest.mark.parametrize("variant", VARIANTS, ids=[repr(v) for v in VARIANTS])
@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_a_control_character_fails_every_format(fmt, variant):
    assert not plan_variables._format_ok(fmt, variant.format(SAMPLES[fmt]))


@pytest.mark.parametrize("decl", [d for d in plan_variables.VARIABLES if d["format"]], ids=lambda d: d["name"])
def test_every_formatted_variable_refuses_a_trailing_newline_naming_itself(decl):
    value = SAMPLES[decl["format"]] + "\n"
    checked, refusal = plan_variables.check_value(decl, value, RECIPE, SNAPSHOTS)
    assert checked is None and refusal is not None
    message, fix = refusal
    assert decl["name"] in fix
    if decl["secret"]:
        assert SAMPLES[decl["format"]] not in message + fix


@pytest.mark.parametrize("text", ["5\n", "5\r\n"])
def test_integers_ignore_surrounding_whitespace_only(text):
    assert plan_variables._int_value(text) == (5, None)
    assert plan_variables._int_value("5\x00")[0] is None


@pytest.mark.parametrize("variant", VARIANTS[:4], ids=repr)
def test_plan_regexes_hold_for_the_whole_value(variant):
    digest = "vllm/vllm-openai@sha256:" + "a" * 64
    assert plan_checks.DIGEST_RE.match(digest)
    assert not plan_checks.DIGEST_RE.match(variant.format(digest))
    assert extras.env_entry_problem(variant.format("NCCL_DEBUG"), "1") is not None
    assert not addresses.is_loopback(variant.format("127.0.0.1"))


def test_a_host_name_with_a_trailing_newline_is_refused():
    node = {"host": "node1\n", "vars": {}, "settings": {}}
    (problem,) = plan_checks.check_host_names(types.SimpleNamespace(nodes=[node], given_nodes=[node]))
    assert problem["variable"] == "inventory_hostname" and "rename the host" in problem["fix"]


@pytest.mark.parametrize("variant", VARIANTS[:4], ids=repr)
def test_node_side_validators_hold_for_the_whole_value(variant):
    commit = SAMPLES["commit"]
    assert hf_stage.validate_request("org/name", commit, "https://huggingface.co") is None
    assert "not a Hugging Face repo id" in hf_stage.validate_request(variant.format("org/name"), commit,
                                                                     "https://huggingface.co")
    assert "40-hex" in hf_stage.validate_request("org/name", variant.format(commit), "https://huggingface.co")
    assert not image_ref.DIGEST_RE.match(variant.format("sha256:" + "b" * 64))
    assert not image_ref.TAG_RE.match(variant.format("v1"))
    assert not image_ref.DOMAIN_RE.match(variant.format("registry.local:5000"))


@settings(max_examples=300, deadline=None)
@given(fmt=st.sampled_from(sorted(SAMPLES)), text=st.text(min_size=1, max_size=40),
       control=st.sampled_from([chr(c) for c in list(range(0x20)) + [0x7f]]), where=st.integers(0, 40))
def test_no_format_accepts_any_control_character(fmt, text, control, where):
    where = min(where, len(text))
    value = text[:where] + control + text[where:]
    assert not plan_variables._format_ok(fmt, value)


@settings(max_examples=200, deadline=None)
@given(decl=st.sampled_from(plan_variables.VARIABLES),
       value=st.one_of(st.text(max_size=30), st.integers(), st.booleans(), st.none(),
                       st.lists(st.text(max_size=5), max_size=3), st.dictionaries(st.text(max_size=5), st.text(max_size=5),
                                                                                  max_size=2)))
def test_check_value_never_raises_and_refusals_name_the_variable(decl, value):
    checked, refusal = plan_variables.check_value(decl, value, RECIPE, SNAPSHOTS)
    if refusal is not None:
        assert checked is None and decl["name"] in refusal[1]
