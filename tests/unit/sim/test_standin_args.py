"""Stand-in `vllm serve`: argv validation against the flag snapshots, engine-level rules, KV budget."""
import shlex
import subprocess
import sys

import pytest

from vllm_standin import config, flags, testing

VERSIONS = ("0.27.1", "0.28.0", "0.33.0")
ATTN = '{"use_prefill_query_quantization":true,"mla_prefill_backend":"flashinfer"}'
BW_BASE = ("--trust-remote-code --gpu-memory-utilization 0.95 --load-format fastsafetensors "
           "--no-enable-flashinfer-autotune --max-model-len 1048576 --kv-cache-dtype fp8 --attention-config '%s' "
           "--enable-prefix-caching --enable-auto-tool-choice --tool-call-parser kimi_k3 --reasoning-parser kimi_k3"
           % ATTN)
DEP = ("--enable-expert-parallel --data-parallel-hybrid-lb --data-parallel-size 16 --data-parallel-size-local 4 "
       "--data-parallel-address 10.0.0.1 --moe-backend deep_gemm_mega_moe")
KVT = '{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_load_failure_policy":"fail"}'
# Every per-node command of reference §5 (head and follower forms), plus the extra flags §5 lists as accepted.
RECIPE_COMMANDS = {
    "single_node_tp_b300": BW_BASE + " --tensor-parallel-size 8",
    "single_node_tp_mi355x": (
        "--trust-remote-code --tensor-parallel-size 8 --load-format auto --gpu-memory-utilization 0.95 "
        "--mm-encoder-tp-mode data --max-num-seqs 128 --max-num-batched-tokens 4096 --compilation-config "
        "'{\"cudagraph_mode\":\"FULL_DECODE_ONLY\",\"custom_ops\":[\"+fused_rms_norm_gated\"]}' "
        "--enable-auto-tool-choice --tool-call-parser kimi_k3 --reasoning-parser kimi_k3"),
    "single_node_tp_h200": (
        "--trust-remote-code --tensor-parallel-size 8 --gpu-memory-utilization 0.97 --max-num-seqs 5 "
        "--max-model-len 32768 --moe-backend marlin --disable-custom-all-reduce --no-enable-flashinfer-autotune "
        "--max-num-batched-tokens 4096 --attention-backend FLASHMLA --enable-auto-tool-choice "
        "--tool-call-parser kimi_k3 --reasoning-parser kimi_k3"),
    "dep_head": BW_BASE + " " + DEP,
    "dep_follower": BW_BASE + " " + DEP + " --data-parallel-start-rank 4",
    "tp_head": BW_BASE + " --tensor-parallel-size 8 --nnodes 2 --node-rank 0 --master-addr 10.0.0.1",
    "tep_follower": BW_BASE + " --enable-expert-parallel --tensor-parallel-size 8 --nnodes 2 --node-rank 1 "
                              "--master-addr 10.0.0.1 --headless",
    "tp_pp_follower": BW_BASE + " --tensor-parallel-size 8 --pipeline-parallel-size 2 --nnodes 2 --node-rank 1 "
                                "--master-addr 10.0.0.1 --headless --gpu-memory-utilization 0.90 "
                                "--max-num-batched-tokens 8192",
    "tp_dp_follower": BW_BASE + " --tensor-parallel-size 4 --data-parallel-size 4 --data-parallel-size-local 1 "
                                "--data-parallel-address 10.0.0.1 --data-parallel-start-rank 3",
    "pd_prefill": BW_BASE + " --enable-expert-parallel --tensor-parallel-size 8 --max-num-batched-tokens 16384 "
                            "--no-disable-hybrid-kv-cache-manager --port 8001 --kv-transfer-config '%s'" % KVT,
    "pd_decode": BW_BASE + " " + DEP + " --no-enable-prefix-caching --max-num-seqs 8 --max-num-batched-tokens 32 "
                                       "--no-disable-hybrid-kv-cache-manager --compilation-config "
                                       "'{\"cudagraph_mode\":\"FULL_DECODE_ONLY\"}' --port 8002",
    "extras": BW_BASE + " --tensor-parallel-size 8 --all2all-backend deepep_v2 --served-model-name kimi-k3 "
                        "--api-key sk-test --limit-mm-per-prompt '{\"image\":16,\"video\":2}' --enable-eplb "
                        "--eplb-config.num_redundant_experts 32",
    "extras_nvlink": BW_BASE + " --all2all-backend flashinfer_nvlink_one_sided --max-model-len auto",
}


def snap(version="0.28.0"):
    return flags.Snapshot(flags.load_snapshot(version))


def parse(cmd, version="0.28.0"):
    return flags.parse_args(shlex.split(cmd), snap(version))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(RECIPE_COMMANDS))
def test_recipe_commands_accepted(version, name):
    model, values, explicit = parse("moonshotai/Kimi-K3 " + RECIPE_COMMANDS[name], version)
    assert model == "moonshotai/Kimi-K3"
    assert values["tool_call_parser"] == "kimi_k3"
    assert "enable_flashinfer_autotune" in explicit or name == "single_node_tp_mi355x"


def test_values_and_spellings():
    model, v, _explicit = parse("m --tensor_parallel_size=8 -pp 2 --served-model-name a b --no-enable-prefix-caching "
                                "--eplb-config.num_redundant_experts 32 --headless --port=9000")
    assert (v["tensor_parallel_size"], v["pipeline_parallel_size"], v["port"]) == (8, 2, 9000)
    assert v["served_model_name"] == ["a", "b"]
    assert v["enable_prefix_caching"] is False and v["headless"] is True
    assert v["eplb_config"] == {"num_redundant_experts": 32}


def test_legacy_hidden_aliases_only_in_033():
    _model, v, _explicit = parse("m --disable-prefix-caching --no-enable-flashinfer-autotune", "0.33.0")
    assert v["enable_prefix_caching"] is False and v["enable_flashinfer_autotune"] is False
    with pytest.raises(flags.ArgError) as exc:
        parse("m --disable-prefix-caching", "0.28.0")
    assert exc.value.message == "unrecognized arguments: --disable-prefix-caching"


def test_unknown_and_bad_choice_messages():
    with pytest.raises(flags.ArgError) as exc:
        parse("m --disable-log-requests --tp 8 x")
    assert exc.value.code == 2
    assert exc.value.message == "unrecognized arguments: --disable-log-requests --tp 8 x"
    with pytest.raises(flags.ArgError) as exc:
        parse("m --kv-cache-dtype fp9")
    assert exc.value.message.startswith("argument --kv-cache-dtype: invalid choice: 'fp9' (choose from 'auto', ")
    with pytest.raises(flags.ArgError) as exc:
        parse("m -tp eight")
    assert exc.value.message == "argument --tensor-parallel-size/-tp: invalid int value: 'eight'"
    with pytest.raises(flags.ArgError) as exc:
        parse("m --served-model-name")
    assert "expected at least one argument" in exc.value.message


@pytest.mark.parametrize("raw,want", [("1k", 1000), ("1K", 1024), ("25.6k", 25600), ("1M", 1048576),
                                      ("32768", 32768), ("auto", -1), ("-1", -1)])
def test_human_readable_int(raw, want):
    assert flags.parse_human_int(raw) == want


def run_cli(args, **env):
    p = subprocess.run([sys.executable, testing.VLLM_BIN] + args, capture_output=True, text=True, timeout=30,
                       env=testing.fast_env(**env), check=False)
    return p.returncode, p.stdout, p.stderr


def test_cli_exit_codes_and_argparse_output():
    rc, _out, err = run_cli(["serve", "m", "--no-such-flag", "1"])
    assert rc == 2
    assert err.splitlines()[-1] == "vllm serve: error: unrecognized arguments: --no-such-flag 1"
    rc, _out, err = run_cli(["serve", "m", "--dcp-comm-backend", "zz"])
    assert rc == 2 and "argument --dcp-comm-backend: invalid choice: 'zz' (choose from" in err
    rc, out, _err = run_cli(["--version"], VLLM_STANDIN_REPORTED_VERSION="0.28.0+standin")
    assert rc == 0 and out.strip() == "0.28.0+standin"
    rc, _out, err = run_cli(["serve", "m", "--disable-log-requests"], VLLM_STANDIN_VERSION="0.27.1")
    assert rc == 2 and "unrecognized arguments: --disable-log-requests" in err


@pytest.mark.parametrize("args,message", [
    (["--enable-auto-tool-choice"], "--enable-auto-tool-choice requires --tool-call-parser"),
    (["-tp", "8", "--data-parallel-size", "2", "--data-parallel-hybrid-lb"],
     "`--data-parallel-hybrid-lb` requires `--data-parallel-size-local`"),
    (["-tp", "8", "--data-parallel-size", "2", "--data-parallel-size-local", "1", "--data-parallel-hybrid-lb",
      "--headless"], "data_parallel_hybrid_lb is not applicable in headless mode"),
    (["-tp", "8", "--data-parallel-size", "2", "--data-parallel-hybrid-lb", "--data-parallel-size-local", "1",
      "--data-parallel-external-lb"], "Cannot use more than one data parallel load balancing mode"),
    (["--tool-call-parser", "nope"], "invalid tool call parser: nope"),
    (["-tp", "8", "--nnodes", "2", "--node-rank", "2"], "node_rank (2) must be in [0, nnodes=2)"),
])
def test_engine_level_rules_exit_1(args, message):
    rc, out, err = run_cli(["serve", "moonshotai/Kimi-K3"] + args)
    assert rc == 1
    assert message in out + err


def test_kv_budget_formula():
    _model, v, _explicit = parse("m -tp 8 --kv-cache-dtype fp8 --gpu-memory-utilization 0.95")
    dep = config.Deployment("m", v, snap())
    kv = config.KVBudget(dep, v)
    # the GB300's 284,208 MiB x utilisation - an eighth of the weights - the 8 GiB reserve; each 1M sequence also
    # holds its KDA state (69 layers of 96 x 128 x 128 FP32 + 3 x 3 x 96 x 128 BF16, over 8 TP ranks)
    free = 284208 * 2 ** 20 * 0.95 - 1.56e12 / 8 - 8 * 2 ** 30
    state = 69 * (96 * 128 * 128 * 4 + 9 * 96 * 128 * 2) / 8.0
    assert kv.pool_tokens == int(free // (24 * 576))
    assert kv.kv_tokens == int(free / (1048576 * 24 * 576 + state) * 1048576) == 5730331
    assert kv.max_model_len == 1048576
    _model, v2, _explicit = parse("m -tp 8 --kv-cache-dtype auto --gpu-memory-utilization 0.95")
    kv2 = config.KVBudget(config.Deployment("m", v2, snap()), v2)
    assert abs(kv2.pool_tokens * 2 - kv.pool_tokens) <= 2  # twice the bytes per token: half the pool
    # DEP16 spreads the weights over 16 GPUs: more room per GPU
    _model, v3, _explicit = parse("m " + DEP + " --kv-cache-dtype fp8 --gpu-memory-utilization 0.95")
    kv3 = config.KVBudget(config.Deployment("m", v3, snap()), v3)
    assert kv3.kv_tokens > kv.kv_tokens
    _model, v4, _explicit = parse("m -tp 8 --max-model-len auto --kv-cache-dtype auto --gpu-memory-utilization 0.75")
    kv4 = config.KVBudget(config.Deployment("m", v4, snap()), v4)
    # auto: the longest length whose one sequence (tokens and state) fits, which the pool then holds once
    assert kv4.max_model_len <= kv4.kv_tokens <= kv4.max_model_len + 1 and kv4.max_model_len < 1048576
