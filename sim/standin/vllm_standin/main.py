"""`vllm` entry point of the stand-in: `vllm serve MODEL [options]`, `vllm --version`."""
import json
import os
import signal
import ssl
import sys
import threading
import time

from . import cluster, kvtransfer, vlog
from .faults import Faults
from . import flags as flagmod
from .chat import ChatBehaviour
from .config import GIB, Deployment, KVBudget, StartupError, env_bool, env_float
from .engine import EngineGroup
from .server import App, Timing, make_server, serve_in_thread, tls_context

DEFAULT_VERSION = "0.28.0"
SHARDS = 96
SUBCOMMANDS = ("bench", "chat", "collect-env", "complete", "run-batch", "serve")


def _exit(code):
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def fatal(exc_type, message, where="core.py:1055"):
    vlog.error(where, "EngineCore failed to start.")
    vlog.raw("%s: %s" % (exc_type, message), sys.stderr)
    _exit(1)


def _fmt_non_default(values, explicit, model):
    shown = {}
    for dest in explicit:
        shown[dest] = "<redacted>" if dest in ("api_key", "hf_token") else values.get(dest)
    if model:
        shown = dict([("model_tag", model)] + list(shown.items()))
    return repr(shown)


# The weight loader's progress bar per --load-format, as vLLM 0.32 names them: (bar, bar with
# --model-loader-extra-config '{"enable_multithread_load": true}' or None where the loader has no such mode).
# model_loader/default_loader.py picks the loader, model_loader/weight_utils.py names the bars (fastsafetensors'
# parallel_loader.py its own); the collection's launch status parser reads every one (LOAD_BAR in
# plugins/module_utils/engine/launch_status.py). Formats not listed here load like safetensors.
SAFETENSORS_BARS = ("Loading safetensors checkpoint shards", "Multi-thread loading shards")
LOAD_BARS = {
    "auto": SAFETENSORS_BARS, "hf": SAFETENSORS_BARS, "safetensors": SAFETENSORS_BARS, "mistral": SAFETENSORS_BARS,
    "fastsafetensors": ("Loading fastsafetensors checkpoint shards", None),
    "instanttensor": ("Loading safetensors using InstantTensor loader", None),
    "runai_streamer": ("Loading safetensors using Runai Model Streamer", None),
    "pt": ("Loading pt checkpoint shards", "Multi-thread loading pt checkpoint shards"),
    "npcache": ("Loading np_cache checkpoint shards", None),
}


def _loader_extra_config(values):
    extra = values.get("model_loader_extra_config") or {}
    if isinstance(extra, str):
        try:
            extra = json.loads(extra)
        except ValueError:
            return {}
    return extra if isinstance(extra, dict) else {}


def load_bar(values):
    """The description of the weight loader's progress bar for the parsed `vllm serve` flags."""
    single, multi = LOAD_BARS.get(values.get("load_format") or "auto", SAFETENSORS_BARS)
    if multi and _loader_extra_config(values).get("enable_multithread_load"):
        return multi
    if single == SAFETENSORS_BARS[0] and values.get("safetensors_load_strategy") == "eager":
        return single + " (eager)"
    return single


def _progress(pct_shards, elapsed, desc=SAFETENSORS_BARS[0]):
    pct = int(round(100.0 * pct_shards / SHARDS))
    rate = pct_shards / elapsed if elapsed > 0 else 0.0
    remain = (SHARDS - pct_shards) / rate if rate > 0 else 0
    return ("%s: %3d%% Completed | %d/%d [%02d:%02d<%02d:%02d, %.2fit/s]"
            % (desc, pct, pct_shards, SHARDS, elapsed // 60, elapsed % 60, remain // 60, remain % 60, rate))


def simulate_load(load_s, fault, desc=SAFETENSORS_BARS[0]):
    """Weight loading with tqdm-style progress under the loader's bar; honours crash_on_start / hang_on_load."""
    start = time.monotonic()
    steps = 8
    vlog.info("gpu_model_runner.py:3612", "Starting to load model ...")
    vlog.raw(_progress(0, 0, desc), sys.stderr)
    for i in range(1, steps + 1):
        if fault == "crash_on_start":
            time.sleep(min(0.2, load_s / steps))
            vlog.error("core.py:1063", "RuntimeError: CUDA error: an illegal memory access was encountered "
                                       "(simulated: VLLM_STANDIN_FAULT=crash_on_start)")
            fatal("RuntimeError", "Engine core initialization failed. See root cause above. Failed core proc(s): {}")
        if fault == "hang_on_load" and i > steps // 2:
            vlog.warning("shm_broadcast.py:562", "No available shared memory broadcast block found in 60 seconds. "
                                                 "This typically happens when some processes are hanging.")
            while True:
                time.sleep(3600)
        sleep_to = start + load_s * i / steps
        d = sleep_to - time.monotonic()
        if d > 0:
            time.sleep(d)
        el = time.monotonic() - start
        vlog.raw(_progress(SHARDS * i // steps, el, desc), sys.stderr)
    took = time.monotonic() - start
    vlog.info("default_loader.py:291", "Loading weights took %.2f seconds" % took)
    return took


def _sleep_forever():
    while True:
        time.sleep(3600)


# The routes the API server lists at startup, as vLLM's launcher logs them.
ROUTES = (("/health", "GET"), ("/load", "GET"), ("/ping", "POST, GET"), ("/version", "GET"),
          ("/metrics", "GET"), ("/v1/models", "GET"), ("/v1/chat/completions", "POST"))


def _parse(argv, version):
    """(snapshot, model, values, explicit) of a `serve` command line, or the exit code after printing why not."""
    try:
        snap = flagmod.Snapshot(flagmod.load_snapshot(version))
    except flagmod.ArgError as exc:
        sys.stderr.write(exc.message + "\n")
        return exc.code
    try:
        model, values, explicit = flagmod.parse_args(argv, snap)
    except flagmod.ArgError as exc:
        if exc.message is None:
            print(flagmod.USAGE)
            print("\nStart the vLLM OpenAI Compatible API server (stand-in, vLLM %s flag set)." % version)
            return 0
        sys.stderr.write("%s\n%s: error: %s\n" % (flagmod.USAGE, flagmod.PROG, exc.message))
        return 2
    return snap, model, values, explicit


class Serve(object):
    """`vllm serve` from parsed flags to a serving API server, one startup phase per method.

    A phase returns an exit code to stop with, or None to go on."""

    def __init__(self, version, reported, values):
        self.version, self.reported, self.values = version, reported, values
        self.dep = self.faults = self.kv = self.pd_config = None
        self.fault_spec = os.environ.get("VLLM_STANDIN_FAULT", "").strip()
        self.fault, self.fault_arg = self.fault_spec, None
        if ":" in self.fault_spec:
            self.fault, self.fault_arg = self.fault_spec.split(":", 1)
        self.head = self.follower = self.app = None
        self.load_s = self.grace = self.timeout = self.deadline = self.took = None
        self.dead = threading.Event()

    def configure(self, model, snap):
        """The deployment, the KV budget and the disaggregated-serving config the flags describe."""
        values = self.values
        try:
            self.dep = Deployment(model, values, snap)
            self.faults = Faults()
            self.dep.served_names = self.faults.served_names(self.dep.served_names)
            self.kv = KVBudget(self.dep, values)
            self.pd_config = kvtransfer.parse_config(values.get("kv_transfer_config"))
        except StartupError as exc:
            vlog.error("api_server.py:2001", "%s: %s" % (exc.exc_type, exc.message))
            vlog.raw("%s: %s" % (exc.exc_type, exc.message), sys.stderr)
            return 1
        except flagmod.ArgError as exc:
            sys.stderr.write("%s\n%s: error: %s\n" % (flagmod.USAGE, flagmod.PROG, exc.message))
            return 2
        self.load_s = env_float("VLLM_STANDIN_LOAD_S", 3.0)
        self.grace = env_float("VLLM_STANDIN_DEAD_GRACE_S", 5.0)
        self.timeout = cluster.engine_ready_timeout()
        self.deadline = time.monotonic() + self.timeout
        return None

    def die_later(self, reason):
        """The engine died: unhealthy at once, the process exits after the grace period, as vLLM's client does."""
        if self.dead.is_set():
            return
        self.dead.set()
        if self.app is not None:
            self.app.healthy = False
        vlog.error("core_client.py:721", reason)

        def _later():
            time.sleep(self.grace)
            vlog.error("async_llm.py:527", "AsyncLLM output_handler failed.")
            vlog.raw("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
                     "(above) for the root cause.", sys.stderr)
            _exit(1)
        threading.Thread(target=_later, daemon=True).start()

    def announce(self):
        dep, kv = self.dep, self.kv
        if dep.hf_token_source:
            vlog.info("standin", "Hugging Face token found (%s)" % dep.hf_token_source)
        if os.environ.get("VLLM_STANDIN_REQUIRE_HF_TOKEN") and not dep.hf_token:
            vlog.error("api_server.py:2001", "OSError: You are trying to access a gated repo. 401 Client Error. "
                                             "(simulated: VLLM_STANDIN_REQUIRE_HF_TOKEN and no HF_TOKEN / "
                                             "HF_TOKEN_PATH)")
            return 1
        vlog.info("model.py:554", "Resolved architecture: KimiK3ForConditionalGeneration")
        vlog.info("model.py:1711", "Using max model len %d" % kv.max_model_len)
        pdesc = "tensor_parallel_size=%d, pipeline_parallel_size=%d, data_parallel_size=%d" % (dep.tp, dep.pp, dep.dp)
        vlog.info("llm_engine.py:84", "Initializing a V1 LLM engine (v%s) with config: model=%r, %s, "
                                      "kv_cache_dtype=%s, served_model_name=%s"
                  % (self.reported, dep.model, pdesc, kv.cache_dtype, dep.served_names[0]))
        if self.fault and self.fault not in ("crash_on_start", "hang_on_load", "exit_after_ready"):
            vlog.warning("standin", "unknown VLLM_STANDIN_FAULT %r ignored" % self.fault_spec)
        return None

    def join_cluster(self):
        """Multi-node: the head listens for its peers, a follower connects to the head."""
        dep = self.dep
        if dep.kind in ("tp_head", "dp_head") and (dep.kind == "tp_head" or dep.needs_peers):
            self.head = cluster.Head(dep, lambda desc: self.die_later(
                "Engine core proc for %s died unexpectedly, shutting down client." % desc))
            try:
                self.head.start()
            except OSError as exc:
                vlog.error("parallel_state.py:1130", "Failed to bind %s:%d: %s"
                           % (self.head.addr[0], self.head.addr[1], exc))
                return 1
        elif dep.kind in ("tp_follower", "dp_follower"):
            return self._follow()
        return None

    def _follow(self):
        follower = self.follower = cluster.Follower(
            self.dep, lambda: self.die_later("Lost connection to the head node; shutting down."))
        try:
            ok = follower.connect(self.deadline)
        except RuntimeError as exc:
            vlog.error("parallel_state.py:1152", "Head refused this node: %s" % exc)
            return 1
        if not ok:
            vlog.error("core_client.py:955", "TimeoutError: Timed out waiting for the head at %s:%d after %ds "
                                             "(VLLM_ENGINE_READY_TIMEOUT_S)." % (follower.addr[0], follower.addr[1],
                                                                                 self.timeout))
            return 1
        follower.start_monitor()
        return None

    def load(self):
        """Weight loading, then (head) waiting for every peer to have loaded too."""
        self.took = simulate_load(self.load_s, self.fault, load_bar(self.values))
        vlog.info("gpu_model_runner.py:3708", "Model loading took %.2f GiB memory and %.2f seconds"
                  % (self.kv.weights_per_gpu / GIB, self.took))
        if self.follower is not None:
            try:
                self.follower.send_loaded()
            except OSError:
                pass
        head = self.head
        if head is not None and not head.peers_ready.is_set():
            vlog.info("core_client.py:1030", "Waiting for %d peer(s) to finish loading ..." % len(head.expected))
            if not head.peers_ready.wait(max(0.0, self.deadline - time.monotonic())):
                missing = sorted(head.expected - head.loaded)
                vlog.error("core_client.py:960", "TimeoutError: Timed out waiting for engines to send initial "
                                                 "message on input socket (missing %s, "
                                                 "VLLM_ENGINE_READY_TIMEOUT_S=%ds)."
                           % (cluster._ranges(missing), self.timeout))
                return 1
        if self.dead.is_set():
            _sleep_forever()
        return None

    def init_engine(self):
        """KV cache check and sizing, CUDA graph capture: the engine-core lines vLLM logs before it is ready."""
        kv = self.kv
        try:
            kv.check()
        except StartupError as exc:
            vlog.error("core.py:1063", "%s: %s" % (exc.exc_type, exc.message))
            fatal(exc.exc_type, exc.message)
        vlog.info("gpu_worker.py:436", "Available KV cache memory: %.2f GiB" % (kv.available_bytes / GIB))
        size_line = "GPU KV cache size: {:,} tokens".format(kv.kv_tokens)
        conc_line = "Maximum concurrency for {:,} tokens per request: {:.2f}x".format(
            kv.max_model_len, kv.max_concurrency)
        if self.version == "0.27.1":
            vlog.info("kv_cache_utils.py:1087", size_line)
            vlog.info("kv_cache_utils.py:1091", conc_line)
        else:
            vlog.info("kv_cache_utils.py:1306", "%s, %s" % (size_line, conc_line))
        vlog.raw("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67 [00:01<00:00, "
                 "52.11it/s]", sys.stderr)
        vlog.raw("Capturing CUDA graphs (decode, FULL): 100%|##########| 35/35 [00:00<00:00, 61.90it/s]", sys.stderr)
        vlog.info("gpu_model_runner.py:4559", "Graph capturing finished in 2 secs, took 1.12 GiB")
        vlog.info("core.py:254", "init engine (profile, create kv cache, warmup model) took %.2f seconds"
                  % (self.took + 2.0))
        for e in self.dep.engines:
            vlog.info("loggers.py:246", "Engine %03d: vllm cache_config_info with initialization after num_gpu_blocks "
                                        "is: %d" % (e, kv.num_gpu_blocks))

    def ready(self):
        """Engines ready: tell the peers; the exit_after_ready fault arms its timer."""
        if self.head is not None:
            self.head.broadcast_ready()
        if self.fault == "exit_after_ready":
            secs = float(self.fault_arg or 0)

            def _exit_later():
                time.sleep(secs)
                vlog.error("core.py:1120", "EngineCore encountered a fatal error (simulated: VLLM_STANDIN_FAULT=%s)."
                           % self.fault_spec)
                self.die_later("Engine core proc EngineCore_DP%d died unexpectedly, shutting down client."
                               % self.dep.engines[0])
            threading.Thread(target=_exit_later, daemon=True).start()

    def wait_to_serve(self):
        """Headless nodes run engines only; a DP follower serves once every rank has joined."""
        if not self.dep.serves_http:
            vlog.info("core.py:880", "Headless mode: engines running, no API server on this node.")
            _sleep_forever()
        follower = self.follower
        if follower is not None and not follower.ready.is_set():
            vlog.info("core_client.py:1040", "Waiting for all DP ranks to join before serving ...")
            while not follower.ready.wait(1.0):
                if time.monotonic() > self.deadline:
                    vlog.error("core_client.py:960", "TimeoutError: Timed out waiting for the DP head to report "
                                                     "ready.")
                    return 1
        return None

    def cache_info(self):
        """The labels of vllm:cache_config_info."""
        kv, values = self.kv, self.values
        info = {"block_size": str(kv.block_size), "cache_dtype": kv.cache_dtype,
                "enable_prefix_caching": str(bool(values.get("enable_prefix_caching"))),
                "gpu_memory_utilization": str(kv.gmu), "num_cpu_blocks": "None",
                "num_gpu_blocks": str(kv.num_gpu_blocks), "num_gpu_blocks_override": "None",
                "mamba_block_size": str(kv.block_size)}
        if self.version != "0.27.1":
            info["kv_cache_size_tokens"] = str(kv.kv_tokens)
            info["kv_cache_max_concurrency"] = str(round(kv.max_concurrency, 4))
        return info

    def build_app(self):
        dep, kv, values = self.dep, self.kv, self.values
        max_num_seqs = int(values.get("max_num_seqs") or 1024)
        group = EngineGroup(dep.engines, kv.kv_tokens, max_num_seqs)
        chat = ChatBehaviour(dep, kv.max_model_len, faults=self.faults)
        if chat.unknown_faults:
            vlog.warning("standin", "unknown VLLM_STANDIN_TOOL_FAULT entries ignored: %s"
                         % ",".join(chat.unknown_faults))
        timing = Timing(env_float("VLLM_STANDIN_TTFT_MS", 50.0) / 1000.0,
                        env_float("VLLM_STANDIN_PREFILL_TOKENS_PER_S", 0.0),
                        env_float("VLLM_STANDIN_ITL_MS", 10.0) / 1000.0)
        access_log = env_bool("VLLM_STANDIN_ACCESS_LOG", True) and not values.get("disable_uvicorn_access_log")
        app = App(dep, kv, chat, group, self.reported, timing, self.cache_info(), access_log,
                  log_stats=not values.get("disable_log_stats"))
        app.faults = self.faults
        if self.dead.is_set():
            app.healthy = False
        self.app = app
        return self._open_side_channel() if self.pd_config is not None else None

    def _open_side_channel(self):
        """Disaggregated serving: the NIXL side channel the other role reads KV from."""
        app, pd_config = self.app, self.pd_config
        app.pd = kvtransfer.KVTransfer(pd_config[0], pd_config[1], self.dep.tp)
        try:
            side = app.pd.listen()
        except OSError as exc:
            vlog.error("nixl_connector.py:880", "OSError: cannot open the NIXL side channel on %s:%d: %s"
                       % (app.pd.side_host, app.pd.side_port, exc))
            return 1
        vlog.info("nixl_connector.py:870", "%s as %s, engine id %s%s" % (
            pd_config[0], pd_config[1], app.pd.engine_id,
            ", side channel listening on %s:%d" % side[:2] if side else ""))
        return None

    def serve(self):
        """The HTTP(S) server, started as uvicorn logs it; runs until a signal ends the process."""
        dep, values = self.dep, self.values
        try:
            context = tls_context(values.get("ssl_keyfile"), values.get("ssl_certfile"))
        except (OSError, ssl.SSLError) as exc:
            vlog.error("api_server.py:2010", "%s: %s (--ssl-keyfile %s, --ssl-certfile %s)"
                       % (type(exc).__name__, exc, values.get("ssl_keyfile"), values.get("ssl_certfile")))
            return 1
        try:
            httpd = make_server(self.app, dep.host, dep.port, context)
        except OSError as exc:
            vlog.error("api_server.py:2010", "OSError: [Errno %s] error while attempting to bind on address "
                                             "(%r, %d): %s" % (exc.errno, dep.host, dep.port, exc.strerror))
            return 1
        vlog.info("api_server.py:1999", "vLLM server version %s, serving model %s" % (self.reported, dep.model))
        vlog.info("api_server.py:2040", "Starting vLLM API server 0 on %s://%s:%d"
                  % ("https" if context else "http", dep.host, dep.port))
        vlog.info("launcher.py:46", "Available routes are:")
        for route, methods in ROUTES:
            vlog.info("launcher.py:54", "Route: %s, Methods: %s" % (route, methods))
        vlog.raw("INFO:     Started server process [%d]" % os.getpid())
        vlog.raw("INFO:     Waiting for application startup.")
        vlog.raw("INFO:     Application startup complete.")
        serve_in_thread(httpd)
        _sleep_forever()


def run_serve(argv):
    version = os.environ.get("VLLM_STANDIN_VERSION", DEFAULT_VERSION)
    reported = os.environ.get("VLLM_STANDIN_REPORTED_VERSION", version)
    parsed = _parse(argv, version)
    if not isinstance(parsed, tuple):
        return parsed
    snap, model, values, explicit = parsed
    vlog.info("api_server.py:1970", "vLLM API server version %s" % reported)
    vlog.info("utils.py:326", "non-default args: %s" % _fmt_non_default(values, explicit, model))
    run = Serve(version, reported, values)
    for phase in (lambda: run.configure(model, snap), run.announce, run.join_cluster, run.load, run.init_engine,
                  run.ready, run.wait_to_serve, run.build_app, run.serve):
        rc = phase()
        if rc is not None:
            return rc
    return 0


def _on_signal(signum, _frame):
    vlog.info("launcher.py:110", "Shutting down FastAPI HTTP server.")
    vlog.raw("INFO:     Shutting down")
    _exit(0)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    sys.setswitchinterval(0.001)
    if argv[:1] in (["--version"], ["-v"]):
        print(os.environ.get("VLLM_STANDIN_REPORTED_VERSION",
                             os.environ.get("VLLM_STANDIN_VERSION", DEFAULT_VERSION)))
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: vllm [-h] [-v] {%s} ..." % ",".join(SUBCOMMANDS))
        return 0 if argv else 2
    if argv[0] != "serve":
        sys.stderr.write("usage: vllm [-h] [-v] {%s} ...\nvllm: error: argument subparser: invalid choice: %r "
                         "(choose from %s)\n" % (",".join(SUBCOMMANDS), argv[0],
                                                 ", ".join(repr(s) for s in SUBCOMMANDS)))
        return 2
    return run_serve(argv[1:])
