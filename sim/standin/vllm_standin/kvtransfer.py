"""Prefill/decode disaggregation of the stand-in: the NIXL kv-transfer handshake, minus the GPUs.

The role comes from `--kv-transfer-config` (`kv_role`: kv_producer = prefill, kv_consumer = decode, kv_both).

- A producer answers a request carrying `kv_transfer_params.do_remote_decode: true` (the router's prefill request,
  `max_tokens` 1) with `kv_transfer_params` it ISSUES: `do_remote_prefill: true`, `remote_engine_id` (this
  instance's engine id), `remote_block_ids` (one id per 1536-token block of the prompt), `remote_request_id`,
  `remote_host`/`remote_port` = its NIXL side channel (`VLLM_NIXL_SIDE_CHANNEL_HOST`/`_PORT`, as vLLM's
  NixlConnector advertises them) and `tp_size`. It keeps the issued blocks and listens on that side channel
  (plain TCP, one JSON line per read).
- A consumer given a request with `do_remote_prefill: true` reads the blocks the way NIXL pulls them: it connects
  to `remote_host:remote_port` from the parameters and asks the producer for exactly those blocks of that request
  and engine. The producer hands them over once (then frees them, as NIXL frees blocks after the consumer's
  notification); anything it never issued, already handed over, or with a wrong engine id is refused, and the
  consumer then fails the request (`kv_load_failure_policy: fail`). An unreachable side channel fails it too.
  A request without transfer parameters is served locally, as vLLM does.
"""
import json
import os
import socket
import threading
import time
import uuid

from .chat import RequestError
from .config import StartupError
from .tcp import serve_tcp

ROLES = {"kv_producer": "producer", "kv_consumer": "consumer", "kv_both": "both"}
CONNECTORS = ("NixlConnector", "MoRIIOConnector")
BLOCK_TOKENS = 1536
DEFAULT_SIDE_PORT = 5600          # vLLM's VLLM_NIXL_SIDE_CHANNEL_PORT default
ISSUED_TTL_S = 480.0              # vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT default


def parse_config(raw):
    """`--kv-transfer-config` JSON -> (connector, role); None when absent. StartupError on a bad value."""
    if raw in (None, ""):
        return None
    try:
        cfg = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except (ValueError, TypeError) as exc:
        raise StartupError("--kv-transfer-config is not valid JSON: %s" % exc)
    if not isinstance(cfg, dict):
        raise StartupError("--kv-transfer-config must be a JSON object")
    connector, role = cfg.get("kv_connector"), cfg.get("kv_role")
    if connector not in CONNECTORS:
        raise StartupError("Unsupported kv_connector %r (the stand-in knows %s)" % (connector, ", ".join(CONNECTORS)))
    if role not in ROLES:
        raise StartupError("kv_role must be one of %s, got %r" % (", ".join(sorted(ROLES)), role))
    return connector, ROLES[role]


class KVTransfer(object):
    """One instance's side of the handshake (producer and/or consumer)."""

    def __init__(self, connector, role, tp_size, env=None):
        env = os.environ if env is None else env
        self.connector = connector
        self.role = role
        self.tp_size = tp_size
        self.engine_id = str(uuid.uuid4())
        self.side_host = env.get("VLLM_NIXL_SIDE_CHANNEL_HOST") or "localhost"
        self.side_port = int(env.get("VLLM_NIXL_SIDE_CHANNEL_PORT") or DEFAULT_SIDE_PORT)
        self.issued = {}
        self.lock = threading.Lock()
        self.counts = {}
        self.listener = None

    @property
    def produces(self):
        return self.role in ("producer", "both")

    @property
    def consumes(self):
        return self.role in ("consumer", "both")

    def count(self, result):
        with self.lock:
            self.counts[result] = self.counts.get(result, 0) + 1

    # --- producer ----------------------------------------------------------------------------------------------
    def listen(self):
        """Open the side channel (producers); OSError when the address/port is taken."""
        if not self.produces:
            return None
        self.listener = serve_tcp((self.side_host, self.side_port), 128, self._serve_read, name="nixl-side-channel")
        return self.listener.getsockname()

    def _serve_read(self, conn, _peer):
        with conn:
            conn.settimeout(10)
            try:
                line = conn.makefile("rb").readline()
                msg = json.loads(line.decode() or "{}")
                answer = self.hand_over(msg.get("engine_id"), msg.get("request_id"), msg.get("block_ids"))
            except (OSError, ValueError, AttributeError) as exc:
                answer = {"ok": False, "reason": "bad side-channel request: %s" % exc}
            try:
                conn.sendall((json.dumps(answer) + "\n").encode())
            except OSError:
                pass

    def issue(self, request_id, prompt_tokens, now=None):
        """kv_transfer_params of a finished remote-decode prefill; the blocks are kept for one read."""
        now = time.monotonic() if now is None else now
        nblocks = max(1, -(-int(prompt_tokens) // BLOCK_TOKENS))
        base = int(uuid.uuid4().int % 1000000) * 1000
        blocks = list(range(base, base + nblocks))
        with self.lock:
            for rid in [r for r, (_b, exp) in self.issued.items() if exp < now]:
                del self.issued[rid]
            self.issued[request_id] = (blocks, now + ISSUED_TTL_S)
        self.count("issued")
        return {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": blocks,
                "remote_engine_id": self.engine_id, "remote_request_id": request_id,
                "remote_host": self.side_host, "remote_port": self.side_port, "tp_size": self.tp_size}

    def hand_over(self, engine_id, request_id, block_ids):
        """A consumer's read: ok once for exactly what was issued, refused otherwise."""
        if engine_id != self.engine_id:
            return {"ok": False, "reason": "engine id %r is not this instance (%s)" % (engine_id, self.engine_id)}
        with self.lock:
            held = self.issued.get(request_id)
            if held is None or held[0] != list(block_ids or []):
                reason = ("request %r: no such blocks were issued (or they were read already)" % (request_id,))
                ok = False
            else:
                del self.issued[request_id]
                ok = True
        self.count("handed_over" if ok else "refused")
        return {"ok": True, "blocks": len(block_ids)} if ok else {"ok": False, "reason": reason}

    # --- consumer ----------------------------------------------------------------------------------------------
    def read_remote(self, params, timeout=5.0):
        """Pull the blocks named by kv_transfer_params from their producer; RequestError (500) when refused."""
        need = ("remote_engine_id", "remote_block_ids", "remote_host", "remote_port")
        missing = [k for k in need if params.get(k) in (None, "")]
        if missing:
            self.count("rejected")
            raise RequestError("KV transfer failed (kv_load_failure_policy=fail): kv_transfer_params lack %s"
                               % ", ".join(missing), 500, "InternalServerError", "kv_transfer_params")
        host, port = params["remote_host"], int(params["remote_port"])
        msg = {"op": "read", "engine_id": params["remote_engine_id"], "request_id": params.get("remote_request_id"),
               "block_ids": params["remote_block_ids"]}
        try:
            with socket.create_connection((host, port), timeout=timeout) as s:
                s.sendall((json.dumps(msg) + "\n").encode())
                answer = json.loads(s.makefile("rb").readline().decode() or "{}")
        except (OSError, ValueError) as exc:
            answer = {"ok": False, "reason": "side channel %s:%s unreachable: %s" % (host, port, exc)}
        if not answer.get("ok"):
            self.count("rejected")
            raise RequestError("KV transfer failed (kv_load_failure_policy=fail): %s" % answer.get("reason"),
                               500, "InternalServerError", "kv_transfer_params")
        self.count("read")
        return answer.get("blocks", 0)

    def metrics(self, model_name):
        """Prometheus lines of the stand-in's own counter (not a vLLM metric)."""
        lines = ["# HELP kimi_sim_kv_transfers_total Stand-in KV transfers by result (issued, handed_over, "
                 "refused, read, rejected).", "# TYPE kimi_sim_kv_transfers_total counter"]
        with self.lock:
            items = sorted(self.counts.items())
        for result, n in items:
            lines.append('kimi_sim_kv_transfers_total{model_name="%s",result="%s",role="%s"} %d.0'
                         % (model_name, result, self.role, n))
        if self.consumes:
            # vLLM's NixlConnector counter (nixl_connector.py, NixlPromMetrics): reads that failed on this side
            lines += ["# HELP vllm:nixl_num_failed_transfers_total Number of failed NIXL KV Cache transfers.",
                      "# TYPE vllm:nixl_num_failed_transfers_total counter",
                      'vllm:nixl_num_failed_transfers_total{engine="0",model_name="%s"} %d.0'
                      % (model_name, dict(items).get("rejected", 0))]
        return "\n".join(lines) + "\n"
