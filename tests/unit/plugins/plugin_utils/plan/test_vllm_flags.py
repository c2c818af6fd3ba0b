"""Argv checks against the vLLM flag snapshots."""
import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

SNAP = recipe_data.load_snapshots()


@pytest.mark.parametrize("argv", [
    ["m", "-tp", "8"],
    ["m", "--tensor_parallel_size", "8"],
    ["m", "--tensor-parallel-size=8"],
    ["m", "--eplb-config.num_redundant_experts", "32"],
    ["m", "--no-enable-prefix-caching"],
    ["m", "--served-model-name", "a", "b"],
    ["m", "--max-model-len", "-1"],
    ["m", "--moe-backend", "DEEP-GEMM-MEGA-MOE"],
])
def test_accepted_spellings(argv):
    assert vllm_flags.check_argv(argv, SNAP["0.28.0"]) == []


@pytest.mark.parametrize("argv,fragment", [
    (["m", "--tensor-parallel-sise", "8"], "unrecognized"),
    (["m", "--headless", "yes"], "takes no value"),
    (["m", "--tensor-parallel-size"], "takes 1 value"),
    (["m", "--kv-cache-dtype", "fp9"], "invalid choice"),
    (["m", "--scheduling-policy", "PRIORITY"], "choose from fcfs, priority"),
    (["m", "--kv-cache-dtype", "FP8"], "invalid choice"),
    (["m", "--kv-cache-dtype", "fp8-e4m3"], "invalid choice"),
    (["m", "--dcp-comm-backend", "AG-RS"], "invalid choice"),
    (["m", "--tool-call-parser", "kimi_k9"], "not registered"),
    (["--trust-remote-code"], "exactly one positional"),
])
def test_refused(argv, fragment):
    problems = vllm_flags.check_argv(argv, SNAP["0.28.0"])
    assert problems and fragment in problems[0]


def test_hidden_legacy_spelling_in_033():
    assert vllm_flags.check_argv(["m", "--no-enable-flashinfer-autotune"], SNAP["0.33.0"]) == []
    assert vllm_flags.check_argv(["m", "--disable-flashinfer-autotune"], SNAP["0.33.0"]) == []
    assert vllm_flags.check_argv(["m", "--disable-flashinfer-autotune"], SNAP["0.28.0"])


def test_dedupe_keeps_last_occurrence_across_spellings():
    argv = ["m", "--gpu-memory-utilization", "0.95", "-tp", "4", "--enable-prefix-caching",
            "--tensor-parallel-size", "8", "--gpu-memory-utilization", "0.90", "--no-enable-prefix-caching"]
    out = vllm_flags.dedupe_args(argv, SNAP["0.28.0"])
    assert out == ["m", "--tensor-parallel-size", "8", "--gpu-memory-utilization", "0.90",
                   "--no-enable-prefix-caching"]


@pytest.mark.parametrize("flag, value", [("--scheduling-policy", "Priority"), ("--scheduling-policy", "FCFS"),
                                         ("--kv-cache-dtype", "Fp8"), ("--kv-cache-dtype", "fp8-e5m2")])
def test_choices_are_compared_exactly_like_argparse(flag, value):
    assert vllm_flags.check_argv(["m", flag, value], SNAP["0.28.0"])
    assert vllm_flags.check_argv(["m", flag, value.lower().replace("-", "_")], SNAP["0.28.0"]) == []


def test_only_flags_whose_type_normalises_fold_case():
    assert vllm_flags.normalised_choice("--moe-backend", "Deep-Gemm") == "deep_gemm"
    assert vllm_flags.normalised_choice("--scheduling-policy", "PRIORITY") == "PRIORITY"
