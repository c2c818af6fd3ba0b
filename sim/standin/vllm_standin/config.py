"""Deployment topology, engine-level argument rules and the KV-cache budget of the stand-in."""
import os

from . import flags as flagmod

GIB = float(1 << 30)
MODEL_MAX_LEN_DEFAULT = 1048576
WEIGHT_BYTES_DEFAULT = 1.56e12
KV_LAYERS = 24           # MLA layers (reference §14.1)
KV_ELEMS = 576           # kv_lora_rank 512 + qk_rope 64
# Kimi-K3's 69 KDA layers keep a state per sequence outside the paged KV: recurrent 96 heads x 128 x 128 FP32 plus
# three short-conv states (kernel 4 - 1) x 96 x 128 BF16 per layer, split over the TP ranks (the recipe's
# capacity.architectures.kimi_k3; plugins/plugin_utils/plan/capacity.py kda_state_bytes).
KDA_LAYERS = 69
KDA_STATE_BYTES = 96 * 128 * 128 * 4 + 3 * 3 * 96 * 128 * 2
GPU_MEMORY_GIB_DEFAULT = 284208 / 1024.0  # one GB300 GPU as nvidia-smi reports it (284,208 MiB)
# Memory a GPU worker's profile run keeps outside the KV pool (activation peak, CUDA graphs, the FlashInfer MXFP4
# workspace): the recipe's estimate for GB300 (capacity.budget_by_hardware), so the stand-in's KV figures are the
# plan's prediction for the hardware it stands in for, and the smoke's kv_check shows no calibration warning that
# a real cluster would not show.
RESERVE_GIB_DEFAULT = 8.0
BLOCK_SIZE = 1536        # hybrid KV block size reported for K3 (vllm#50235)


class StartupError(Exception):
    """Engine-level failure: printed as `ERROR ... <message>` plus a traceback-ish line, exit 1."""

    def __init__(self, message, exc_type="ValueError"):
        Exception.__init__(self, message)
        self.message = message
        self.exc_type = exc_type


def env_float(name, default):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    return float(v)


def env_bool(name, default):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    return v.strip().lower() in ("1", "true", "yes", "on")


def dtype_bytes(cache_dtype):
    d = (cache_dtype or "auto").lower()
    if d.startswith("fp8") or d.startswith("int8"):
        return 1
    if "4bit" in d or d.startswith("nvfp4") or d.startswith("int4") or d.startswith("turboquant_3"):
        return 0.5
    return 2  # auto / bfloat16 / float16


class Deployment(object):
    """What this process is: its role in the deployment and which DP engines it serves."""

    def __init__(self, model, v, snap):
        self.v = v
        self.snap = snap
        self.model = v.get("model") if model is None else model
        names = v.get("served_model_name") or []
        self.served_names = list(names) if names else [self.model]
        self.tp = int(v.get("tensor_parallel_size") or 1)
        self.pp = int(v.get("pipeline_parallel_size") or 1)
        self.dp = int(v.get("data_parallel_size") or 1)
        self.nnodes = int(v.get("nnodes") or 1)
        self.node_rank = int(v.get("node_rank") or 0)
        self.headless = bool(v.get("headless"))
        self.host = v.get("host") or "0.0.0.0"
        self.port = int(v.get("port") or 8000)
        self.master_addr = v.get("master_addr") or "127.0.0.1"
        self.master_port = int(v.get("master_port") or 29501)
        self.dp_address = v.get("data_parallel_address") or self.master_addr
        self.dp_rpc_port = int(v.get("data_parallel_rpc_port") or 29550)
        self.dp_local = v.get("data_parallel_size_local")
        self.dp_start = v.get("data_parallel_start_rank")
        self.dp_rank = v.get("data_parallel_rank")
        self.hybrid = bool(v.get("data_parallel_hybrid_lb"))
        self.external = bool(v.get("data_parallel_external_lb")) or self.dp_rank is not None
        keys = v.get("api_key") or []
        if isinstance(keys, str):
            keys = [keys]
        if not keys and os.environ.get("VLLM_API_KEY"):
            keys = [os.environ["VLLM_API_KEY"]]
        self.api_keys = list(keys)
        self.hf_token, self.hf_token_source = hf_token()
        self.validate()
        self.resolve_mode()

    # --- §8.2 / cli_args rules -------------------------------------------------------------
    def validate(self):
        v = self.v
        if v.get("enable_auto_tool_choice") and not v.get("tool_call_parser"):
            raise StartupError("Error: --enable-auto-tool-choice requires --tool-call-parser", "TypeError")
        tp_name = v.get("tool_call_parser")
        if tp_name and self.snap.tool_parsers and tp_name not in self.snap.tool_parsers:
            raise StartupError("invalid tool call parser: %s (chose from { %s })"
                               % (tp_name, ",".join(self.snap.tool_parsers)), "KeyError")
        rp = v.get("reasoning_parser")
        if rp and self.snap.reasoning_parsers and rp not in self.snap.reasoning_parsers:
            raise StartupError("invalid reasoning parser: %s (chose from { %s })"
                               % (rp, ",".join(self.snap.reasoning_parsers)), "KeyError")
        modes = sum(1 for m in (self.hybrid, bool(v.get("data_parallel_external_lb")) or self.dp_rank is not None,
                                bool(v.get("data_parallel_multi_port_external_lb"))) if m)
        if modes > 1:
            raise StartupError("Cannot use more than one data parallel load balancing mode.")
        if self.hybrid and self.headless:
            raise StartupError("data_parallel_hybrid_lb is not applicable in headless mode")
        if self.hybrid and self.dp_local is None:
            raise StartupError("`--data-parallel-hybrid-lb` requires `--data-parallel-size-local`")
        if self.dp_start is not None and not self.headless and self.dp_local is None and not self.external:
            raise StartupError("`--data-parallel-hybrid-lb` requires `--data-parallel-size-local`")
        if self.nnodes < 1 or not 0 <= self.node_rank < self.nnodes:
            raise StartupError("node_rank (%d) must be in [0, nnodes=%d)" % (self.node_rank, self.nnodes))
        world = self.tp * self.pp
        if self.nnodes > 1 and self.dp == 1 and world % self.nnodes != 0:
            raise StartupError("world_size (%d) must be divisible by nnodes (%d)" % (world, self.nnodes))
        if self.dp_local is not None and int(self.dp_local) > self.dp:
            raise StartupError("data_parallel_size_local (%s) must be <= data_parallel_size (%d)"
                               % (self.dp_local, self.dp))
        if self.dp_start is not None and not 0 <= int(self.dp_start) < self.dp:
            raise StartupError("data_parallel_start_rank (%s) must be in [0, data_parallel_size=%d)"
                               % (self.dp_start, self.dp))
        if self.nnodes > 1 and self.dp == 1 and self.node_rank > 0 and not self.headless:
            # vLLM fails later during engine start-up; the stand-in reports it early (own wording).
            raise StartupError("node_rank %d > 0 needs --headless with the mp executor across nodes"
                               % self.node_rank)
        gmu = float(v.get("gpu_memory_utilization") or 0.92)
        if not 0 < gmu <= 1:
            raise StartupError("GPU memory utilization must be within (0, 1]. Got %s." % gmu)

    def resolve_mode(self):
        """kind: single | tp_head | tp_follower | dp_head | dp_follower | dp_external; serves_http; engines."""
        if self.dp > 1 and self.external:
            self.kind = "dp_external"
            self.engines = [int(self.dp_rank or 0)]
            self.serves_http = True
            self.lb = "external"
            return
        if self.dp > 1:
            local = self.dp_local
            start = int(self.dp_start or 0)
            if local is None:
                local = self.dp if start == 0 else 1
            local = int(local)
            hybrid = self.hybrid or (self.dp_start is not None and not self.headless)
            if hybrid and local == self.dp:
                hybrid = False  # switched off automatically when local size == global size
            if hybrid and local == 1:
                self.lb = "external"  # hybrid with local size 1 turns into external LB (§8.2)
            else:
                self.lb = "hybrid" if hybrid else "internal"
            self.dp_local_n = local
            self.dp_start_n = start
            if start == 0:
                self.kind = "dp_head"
            else:
                self.kind = "dp_follower"
            if self.headless:
                self.serves_http = False
                self.engines = list(range(start, start + local))
            elif self.lb == "internal":
                # internal LB: the head serves every engine of the deployment
                self.serves_http = True
                self.engines = list(range(self.dp)) if start == 0 else list(range(start, start + local))
            else:
                self.serves_http = True
                self.engines = list(range(start, start + local))
            self.needs_peers = local < self.dp
            return
        self.lb = None
        if self.nnodes > 1:
            self.kind = "tp_head" if self.node_rank == 0 else "tp_follower"
            self.serves_http = self.node_rank == 0 and not self.headless
        else:
            self.kind = "single"
            self.serves_http = not self.headless
        self.engines = [0]

    @property
    def world_size(self):
        return self.tp * self.pp * self.dp


class KVBudget(object):
    """KV-cache size per engine, computed like a GPU worker's profile run would report it (documented model)."""

    def __init__(self, dep, v):
        self.cache_dtype = v.get("kv_cache_dtype") or "auto"
        self.gmu = float(v.get("gpu_memory_utilization") or 0.92)
        self.gpu_gib = env_float("VLLM_STANDIN_GPU_MEMORY_GIB", GPU_MEMORY_GIB_DEFAULT)
        self.reserve_gib = env_float("VLLM_STANDIN_RESERVE_GIB", RESERVE_GIB_DEFAULT)
        self.weight_bytes = env_float("VLLM_STANDIN_WEIGHT_BYTES", WEIGHT_BYTES_DEFAULT)
        self.world = dep.world_size
        self.bytes_per_token = KV_LAYERS * KV_ELEMS * dtype_bytes(self.cache_dtype)
        self.state_bytes = env_float("VLLM_STANDIN_STATE_BYTES", -(-KDA_LAYERS // dep.pp) * KDA_STATE_BYTES / float(
            dep.tp))
        # one copy over all ranks, expert parallelism or not: the rehearsal's DEP/PD deployments start on it, while
        # the plan's EP model (84 GB replicated on every rank) predicts a PD decode instance too small for 1M tokens
        self.weights_per_gpu = self.weight_bytes / self.world
        self.block_size = BLOCK_SIZE
        override = os.environ.get("VLLM_STANDIN_KV_TOKENS")
        if override:
            self.available_bytes = int(float(override)) * self.bytes_per_token
        else:
            self.available_bytes = self.gpu_gib * GIB * self.gmu - self.weights_per_gpu - self.reserve_gib * GIB
            if self.available_bytes <= 0:
                raise StartupError("No available memory for the cache blocks. Try increasing "
                                   "`gpu_memory_utilization` when initializing the engine.")
        self.pool_tokens = int(self.available_bytes // self.bytes_per_token)
        self.model_max = int(env_float("VLLM_STANDIN_MODEL_MAX_LEN", MODEL_MAX_LEN_DEFAULT))
        raw = v.get("max_model_len")
        if raw is None:
            self.requested_len = self.model_max
            self.auto_len = False
        else:
            try:
                self.requested_len = flagmod.parse_human_int(raw)
            except ValueError:
                raise flagmod.ArgError("argument --max-model-len: invalid human_readable_int value: %r" % raw)
            self.auto_len = self.requested_len == -1
        if not self.auto_len and self.requested_len > self.model_max and not os.environ.get(
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
            raise StartupError(
                "User-specified max_model_len (%d) is greater than the derived max_model_len "
                "(max_position_embeddings=%d or model_max_length=None in model's config.json). To allow "
                "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution." % (self.requested_len, self.model_max))
        # auto: the longest length one sequence (its tokens and its state) fits, as vLLM's estimate
        fits = self.pool_tokens if override else int(
            max(0.0, self.available_bytes - self.state_bytes) // self.bytes_per_token)
        self.max_model_len = min(self.model_max, fits) if self.auto_len else self.requested_len
        self.kv_tokens = self.pool_tokens if override else self._tokens_at(self.max_model_len)
        self.num_gpu_blocks = max(1, self.kv_tokens // self.block_size)

    def _tokens_at(self, length):
        """KV tokens at ``length``: the sequences of that length the pool holds, each with its KDA state beside its
        tokens, times the length (the plan's capacity_at; the pool alone without a state)."""
        need = length * self.bytes_per_token + self.state_bytes
        if not self.state_bytes or length <= 0:
            return self.pool_tokens
        return int(self.available_bytes / need * length)

    def check(self):
        """After the profile run: one request of max_model_len must fit (vLLM's check_enough_kv_cache_memory)."""
        if self.max_model_len > self.kv_tokens:
            needed = self.max_model_len * self.bytes_per_token
            raise StartupError(
                "To serve at least one request with the models's max seq len (%d), (%.2f GiB KV cache is needed, "
                "which is larger than the available KV cache memory (%.2f GiB). Based on the available memory, the "
                "estimated maximum model length is %d. Try increasing `gpu_memory_utilization` or decreasing "
                "`max_model_len` when initializing the engine." % (
                    self.max_model_len, needed / GIB, self.available_bytes / GIB, self.kv_tokens))

    @property
    def max_concurrency(self):
        return self.kv_tokens / float(self.max_model_len)


def hf_token(environ=None):
    """``(token, source)`` the way huggingface_hub's get_token() finds it: ``HF_TOKEN``, else the file named by
    ``HF_TOKEN_PATH`` (default ``$HF_HOME/token``, ``~/.cache/huggingface/token``); an unreadable file is no token."""
    env = os.environ if environ is None else environ
    if env.get("HF_TOKEN", "").strip():
        return env["HF_TOKEN"].strip(), "HF_TOKEN"
    home = env.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    path = env.get("HF_TOKEN_PATH") or os.path.join(home, "token")
    try:
        with open(path) as handle:
            token = handle.read().strip()
    except OSError:
        return None, None
    return (token, "HF_TOKEN_PATH %s" % path) if token else (None, None)
