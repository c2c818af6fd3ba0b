"""Conformance probe: what the collection reads from a vLLM server, in a normalised form that compares between the
stand-in (sim/standin) and the real engine (vLLM's CPU build on the cpu rehearsal cluster).

``observe(base_url, ...)`` sends the same few requests the smoke and capacity modules send (through the openai SDK and
the collection's own SSE decoder) and returns ``{observable: value}``: plain JSON values, one key per observable, so
two servers compare with ``==`` and a difference names its observable. The ``norm_*`` functions are pure (bytes or
parsed bodies in, observables out) so that canned real-engine captures can be checked without a server.

It lives under tests/helpers, not in the collection: it is a test instrument (the unit tests run it against a local
stand-in, tests/integration/test_real_engine.py against both engines), and the observables it reads are defined by
the collection's own parsers (smoke_metrics, smoke_sse, smoke_logs, launch_status), imported from there.
"""
import json
import re

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import launch_status
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import api as smoke_api
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import logs as smoke_logs
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import measure as smoke_measure
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import metrics as smoke_metrics
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import sse as smoke_sse

# Every vllm:* family the collection reads: the smoke/capacity snapshot (smoke_metrics) and the Grafana dashboard
# (data/monitoring/vllm-dashboard.yml: the request_success family by finished_reason, histogram buckets by le).
READ_FAMILIES = tuple(sorted(set(smoke_metrics._COUNTERS + smoke_metrics._GAUGES + smoke_metrics._HISTOGRAMS + (
    "vllm:cache_config_info", "vllm:request_success"))))
# vllm:cache_config_info labels the smoke and capacity figures come from (smoke_metrics.summarise_snapshot).
READ_CACHE_LABELS = ("block_size", "kv_cache_max_concurrency", "kv_cache_size_tokens", "num_gpu_blocks")
_CACHE_KEEP = READ_CACHE_LABELS + ("engine", "model_name")
_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")
# "(APIServer pid=7) INFO 12-04 ..." / "(Worker_TP1 pid=9) ..." (vllm/logger.py): the role before the first "_".
PREFIX_RE = re.compile(r"^\(([A-Za-z]+)(?:_\w+)? pid=\d+\) ")
TOOL_ID_FORMATS = (
    ("functions.<name>:<n>", re.compile(r"^functions\.(?P<name>[\w.\-]+):\d+$")),
    ("chatcmpl-tool-<hex>", re.compile(r"^chatcmpl-tool-[0-9a-f]+$")),
    ("call_<id>", re.compile(r"^call_\w+$")),
)
PROBE_TOOL = {"type": "function", "function": {
    "name": "lookup_order", "description": "Look up an order by its id",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "minLength": 1, "maxLength": 16}},
                   "required": ["order_id"], "additionalProperties": False}}}
PROBE_PROMPT = "Say hello in a few words."
UNKNOWN_MODEL = "no-such-model"


def _dict(x):
    return x if isinstance(x, dict) else {}


def _list(x):
    return x if isinstance(x, list) else []


def _first(x):
    """The first item of a list when it is an object, else {}."""
    return _dict(x[0]) if isinstance(x, list) and x else {}


def _base_name(sample_name):
    for fam in READ_FAMILIES:
        if sample_name == fam or any(sample_name == fam + s for s in _SUFFIXES):
            return fam
    return None


def norm_metrics(text):
    """``/metrics`` text -> ``metrics/<family>``: ``{"type", "labels"}`` (label names of every sample, ``le`` of
    the buckets included) or ``"absent"`` for every family the collection reads, plus the ``engine`` label values,
    the cache-config labels the figures come from, and whether KV usage is a fraction (vLLM: 1 = 100 %)."""
    from prometheus_client.parser import text_string_to_metric_families

    seen, engines, cache_labels, usage = {}, set(), set(), []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            base = _base_name(s.name)
            if base is None:
                continue
            slot = seen.setdefault(base, {"type": fam.type, "labels": set()})
            # the cache config's other labels are the engine's settings, none of which the collection reads
            slot["labels"].update(k for k in s.labels if base != "vllm:cache_config_info" or k in _CACHE_KEEP)
            if "engine" in s.labels:
                engines.add(s.labels["engine"])
            if base == "vllm:cache_config_info":
                cache_labels.update(k for k in s.labels if k in READ_CACHE_LABELS)
            if base == "vllm:kv_cache_usage_perc":
                usage.append(s.value)
    out = {"metrics/" + f: ({"type": seen[f]["type"], "labels": sorted(seen[f]["labels"])} if f in seen else "absent")
           for f in READ_FAMILIES}
    out["metrics/engine label values"] = sorted(engines)
    out["metrics/cache_config_info labels read"] = sorted(cache_labels)
    out["metrics/kv_cache_usage_perc is a fraction"] = bool(usage) and all(0.0 <= v <= 1.0 for v in usage)
    return out


def norm_version(status, text):
    """``/version`` -> status, body keys and the release the smoke compares with the plan."""
    out = {"version/status": status, "version/keys": None, "version/release": None}
    try:
        body = json.loads(text)
    except ValueError:
        return out
    if isinstance(body, dict):
        out["version/keys"] = sorted(body)
        out["version/release"] = smoke_api.release_of(body.get("version")) or None
    return out


def _root_kind(root, model_id):
    if not isinstance(root, str) or not root:
        return None
    if root == model_id:
        return "served name"
    return "absolute path" if root.startswith("/") else "repository id"


def norm_models(status, text):
    """``/v1/models`` -> status, list/entry keys, served ids, what ``root`` is and ``max_model_len``."""
    out = {"models/status": status}
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    data = _list(_dict(body).get("data"))
    first = _first(data)
    out["models/object"] = _dict(body).get("object")
    out["models/entry keys"] = sorted(first)
    out["models/ids"] = [m.get("id") for m in data if isinstance(m, dict)]
    out["models/root"] = _root_kind(first.get("root"), first.get("id"))
    out["models/max_model_len"] = first.get("max_model_len")
    return out


def _present(obj, keys):
    return sorted(k for k in keys if isinstance(obj, dict) and obj.get(k) not in (None, "", []))


def norm_completion(body, prefix="chat"):
    """A non-streaming chat completion -> the fields the smoke reads: which message fields carry text, the finish
    reason, the usage keys, and whether completion_tokens counts the tokens asked for."""
    choice = _first(body.get("choices"))
    msg = _dict(choice.get("message"))
    usage = _dict(body.get("usage"))
    return {prefix + "/object": body.get("object"),
            prefix + "/message fields with text": _present(msg, ("content", "reasoning", "reasoning_content",
                                                                 "tool_calls")),
            prefix + "/finish_reason": choice.get("finish_reason"),
            prefix + "/usage keys": _present(usage, ("prompt_tokens", "completion_tokens", "total_tokens"))}


def chunk_kind(payload):
    """One SSE payload -> what it carries, as the smoke reads it ("role", "content", "reasoning", "tool_calls",
    "finish:<reason>", "usage", "empty", "[DONE]", "error"), joined with "+"."""
    if payload == smoke_sse.DONE:
        return "[DONE]"
    if not isinstance(payload, dict):
        return "invalid"
    if payload.get("error"):
        return "error"
    parts = []
    choices = payload.get("choices") or []
    if choices:
        choice = _first(choices)
        delta = _dict(choice.get("delta"))
        parts += [k for k in ("role", "content", "reasoning", "tool_calls") if delta.get(k)]
        if not delta.get("reasoning") and delta.get("reasoning_content"):
            parts.append("reasoning")
        if choice.get("finish_reason"):
            parts.append("finish:%s" % choice["finish_reason"])
    if payload.get("usage") and not choices:
        parts.append("usage")
    return "+".join(parts) or "empty"


def _collapse(kinds):
    """Runs of the same kind -> one entry with "*" (coalescing makes the run length a server choice)."""
    out = []
    for k in kinds:
        if out and out[-1].rstrip("*") == k:
            out[-1] = k + "*"
        else:
            out.append(k)
    return [k.rstrip("*") for k in out]


def norm_stream(events, max_tokens, prefix="stream"):
    """Decoded SSE events (``smoke_sse``: ``[(now, payload), ...]``) -> chunk shapes, reasoning keys, the usage
    chunk, and the smoke's own verdict (``smoke_measure``) on the stream."""
    payloads = [p for _now, p in events]
    dicts = [p for p in payloads if isinstance(p, dict)]
    keys = set()
    for p in dicts:
        delta = _dict(_first(p.get("choices")).get("delta"))
        keys.update(k for k in ("reasoning", "reasoning_content") if delta.get(k))
    res = smoke_measure.measure_stream(0.0, list(enumerate(payloads)))
    token_chunks = len(res["itl_s"]) + (1 if res["ttft_s"] is not None else 0)
    return {prefix + "/chunk shapes": _collapse(chunk_kind(p) for p in payloads),
            prefix + "/reasoning keys": sorted(keys),
            prefix + "/usage chunk": [sorted(p) for p in dicts if p.get("usage") and not p.get("choices")][-1:],
            prefix + "/smoke verdict": res["error"] or "ok",
            prefix + "/completion_tokens is max_tokens": res["output_tokens"] == max_tokens,
            prefix + "/one token per chunk": token_chunks == res["output_tokens"]}


def tool_id_format(call_id):
    for name, rx in TOOL_ID_FORMATS:
        if rx.match(call_id or ""):
            return name
    return "other"


def norm_tool_call(body, prefix="tool"):
    """A non-streaming forced tool call -> finish reason, call shape and id format (never the model's values)."""
    first = _first(_dict(_first(body.get("choices")).get("message")).get("tool_calls"))
    choice = _first(body.get("choices"))
    fn = _dict(first.get("function"))
    call_id = first.get("id") if isinstance(first.get("id"), str) else ""
    m = TOOL_ID_FORMATS[0][1].match(call_id)
    return {prefix + "/finish_reason": choice.get("finish_reason"),
            prefix + "/call keys": sorted(first),
            prefix + "/type": first.get("type"),
            prefix + "/id format": tool_id_format(call_id),
            prefix + "/id names the function": bool(m) and m.group("name") == fn.get("name"),
            prefix + "/arguments type": type(fn.get("arguments")).__name__ if fn else None}


def norm_error(status, body, case):
    """An error response -> status, the ``error`` object's keys, type, param, code and message."""
    err = body.get("error") if isinstance(body, dict) else None
    err = err if isinstance(err, dict) else {}
    prefix = "error/%s/" % case
    return {prefix + "status": status, prefix + "keys": sorted(err), prefix + "type": err.get("type"),
            prefix + "param": err.get("param"), prefix + "code": err.get("code"), prefix + "message": err.get("message")}


def norm_log(text):
    """A container log -> what the collection's parsers read from it: the process prefixes, the start-up phases
    (launch_status) in order, the KV figures found (smoke_logs), the load progress bar and the error lines of the
    start-up (those after it depend on the requests the server has had)."""
    lines = (text or "").splitlines()
    roles = sorted({m.group(1) for m in map(PREFIX_RE.match, lines) if m})
    phases = []
    for line in lines:
        for name, rx in launch_status.PHASES:
            if rx.search(line) and name not in phases:
                phases.append(name)
    kv = smoke_logs.parse_kv_log(text or "")
    return {"log/process prefixes": roles,
            "log/phases": [name for name, _rx in launch_status.PHASES if name in phases],
            "log/phase at serving": launch_status.classify_phase(lines[:_serving_index(lines) + 1])[0],
            "log/kv figures": sorted(k for k, v in kv.items() if v is not None),
            "log/load progress bar": any(launch_status.PROGRESS_RE.search(line) for line in lines),
            "log/error lines before serving": sum(1 for line in lines[:_serving_index(lines)]
                                                  if launch_status.ERROR_RE.search(line))}


def _serving_index(lines):
    """Index of the first line of the serving phase (the start-up ends there; later errors are the requests')."""
    serving = dict(launch_status.PHASES)["serving"]
    return next((i for i, line in enumerate(lines) if serving.search(line)), len(lines))


# --- I/O: the requests ---------------------------------------------------------------------------------------------
def _get(url, api_key=None, timeout=30.0):
    """GET -> (status, text); (None, why) when nothing answers."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + api_key} if api_key else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except OSError as e:
        return None, str(e)


def client_for(base_url, api_key=None, timeout=120.0):
    from openai import OpenAI

    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as smoke_server

    _root, api = smoke_server.split_base_url(base_url)
    return OpenAI(base_url=api, api_key=api_key or "EMPTY", max_retries=0, timeout=timeout)


def _error_of(call):
    """Run ``call`` (an SDK request expected to fail) -> (status, raw JSON body)."""
    import openai

    try:
        call()
    except openai.APIStatusError as exc:
        try:
            return exc.status_code, exc.response.json()
        except ValueError:
            return exc.status_code, None
    return 200, None


def stream_events(client, model, messages, max_tokens, extra_body):
    """One streamed chat as the smoke reads it (raw body, ``smoke_sse``) -> ``[(read index, payload), ...]``."""
    with client.chat.completions.with_streaming_response.create(
            model=model, messages=messages, max_tokens=max_tokens, stream=True,
            stream_options={"include_usage": True}, extra_body=extra_body) as resp:
        reads = list(enumerate(resp.http_response.iter_raw()))
    return smoke_sse.decode_sse(reads)


def forced_tool_call(client, model, extra_body, attempts=8):
    """A non-streaming call with ``tool_choice: required`` -> the first body that ends in a call, else the last.
    Random weights under structured output write a complete call about half the time and may run into max_tokens;
    the smoke retries likewise (smoke_tool_call_retries)."""
    body = None
    for _attempt in range(attempts):
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": "Look up order B-2041."}], tools=[PROBE_TOOL],
            tool_choice="required", max_tokens=1024, extra_body=dict(extra_body or {}))
        body = json.loads(raw.text)
        if _first(_dict(body).get("choices")).get("finish_reason") == "tool_calls":
            break
    return body


def observe_chats(client, model, max_tokens=8, extra_body=None):
    """The smoke's request kinds against one server: a non-streaming and a streaming chat (``ignore_eos``, so both
    end on ``length`` after ``max_tokens``), a forced tool call, and the two refusals."""
    msgs = [{"role": "user", "content": PROBE_PROMPT}]
    body = dict(extra_body or {}, ignore_eos=True)
    raw = client.chat.completions.with_raw_response.create(model=model, messages=msgs, max_tokens=max_tokens,
                                                           extra_body=body)
    out = norm_completion(json.loads(raw.text))
    out.update(norm_stream(stream_events(client, model, msgs, max_tokens, body), max_tokens))
    thinking = dict(body, chat_template_kwargs={"thinking": True})
    out.update(norm_stream(stream_events(client, model, msgs, 3 * max_tokens, thinking), 3 * max_tokens,
                           prefix="stream-thinking"))
    out.update(norm_tool_call(forced_tool_call(client, model, extra_body)))
    out.update(norm_error(*_error_of(lambda: client.chat.completions.create(
        model=model, messages=msgs, max_tokens=-1)), case="max_tokens -1"))
    out.update(norm_error(*_error_of(lambda: client.chat.completions.create(
        model=UNKNOWN_MODEL, messages=msgs, max_tokens=4)), case="unknown model"))
    return out


def observe(base_url, api_key=None, model=None, log_text=None, extra_body=None, timeout=120.0):
    """Every observable of one ready server (``log_text``: its container log, when there is one)."""
    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as smoke_server

    root, api = smoke_server.split_base_url(base_url)
    out = {"health/ready": _get(root + "/health", timeout=timeout)[0]}
    out.update(norm_version(*_get(root + "/version", timeout=timeout)))
    out.update(norm_models(*_get(api + "/models", api_key, timeout)))
    model = model or (out["models/ids"] or [None])[0]
    client = client_for(base_url, api_key, timeout)
    try:
        out.update(observe_chats(client, model, extra_body=extra_body))
    finally:
        client.close()
    out.update(norm_metrics(_get(root + "/metrics", timeout=timeout)[1]))
    if log_text is not None:
        out.update(norm_log(log_text))
    return out


# --- /health over time ---------------------------------------------------------------------------------------------
def _state(status):
    return "no answer" if status is None else status


def health_start_up(root, seconds, interval=0.05, clock=None, sleep=None):
    """/health polled from before the server is up until it answers 200 (or ``seconds`` pass) -> the distinct
    states in order, e.g. ``["no answer", 200]``."""
    import time

    clock, sleep = clock or time.monotonic, sleep or time.sleep
    deadline, states = clock() + seconds, []
    while clock() < deadline:
        st = _state(_get(root + "/health", timeout=2.0)[0])
        if not states or states[-1] != st:
            states.append(st)
        if st == 200:
            break
        sleep(interval)
    return states


def after_dead_rank(root, client, model, settle_s=3.0, sleep=None):
    """What a client sees once a rank is dead: /health, then one chat request, then /health again ->
    ``["health 200", "chat 500", "health 503"]`` (statuses, "no answer" when nothing answers)."""
    import time

    import openai

    sleep = sleep or time.sleep
    sleep(settle_s)
    out = ["health %s" % _state(_get(root + "/health", timeout=5.0)[0])]
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROBE_PROMPT}], max_tokens=4)
        out.append("chat 200")
    except openai.APIStatusError as exc:
        out.append("chat %s" % exc.status_code)
    except openai.APIError:
        out.append("chat no answer")
    sleep(1.0)
    out.append("health %s" % _state(_get(root + "/health", timeout=5.0)[0]))
    return out


# --- the table of known differences --------------------------------------------------------------------------------
TABLE = "sim/conformance.yml"


def load_table(repo):
    """The rows of sim/conformance.yml."""
    import os

    import yaml

    with open(os.path.join(repo, TABLE)) as handle:
        return yaml.safe_load(handle)["observables"]


def row_for(key, rows):
    """The row of an observable: its own, else the longest prefix (ending in "/" or ":") it starts with."""
    best = None
    for row in rows:
        k = row["key"]
        if k == key:
            return row
        if k[-1] in "/:" and key.startswith(k) and (best is None or len(k) > len(best["key"])):
            best = row
    return best


def _pin_problems(key, row, standin, real):
    out = []
    for side, value in (("standin", standin), ("real", real)):
        if side in row and value is not None and row[side] != value:
            out.append("%s: the %s value is %r, the table pins %r" % (key, side, value, row[side]))
    if "standin" in row and "real" in row and standin == real and standin is not None:
        out.append("%s: the table lists a difference, both are %r: mark it equal" % (key, standin))
    return out


def compare(standin, real, rows):
    """Both engines' observables against the table -> the problems (empty when they conform): an observable
    without a row, an unlisted difference, a pinned value that changed, a listed difference that is gone."""
    problems = []
    for key in sorted(set(standin) | set(real)):
        row = row_for(key, rows)
        s, r = standin.get(key), real.get(key)
        if key not in standin or key not in real:
            problems.append("%s: observed on %s only" % (key, "the stand-in" if key in standin else "the real engine"))
        elif row is None:
            problems.append("%s: no row in %s (stand-in %r, real %r)" % (key, TABLE, s, r))
        elif row["status"] == "equal" and s != r:
            problems.append("%s: stand-in %r, real engine %r; fix the stand-in or list the difference in %s"
                            % (key, s, r, TABLE))
        elif row["status"] == "differs":
            problems.extend(_pin_problems(key, row, s, r))
    return problems


def _cell(text):
    return " ".join(str(text).split()).replace("|", "\\|")


def docs_rows(rows):
    """The table as docs/sim.md shows it: one markdown row per entry."""
    out = ["| observable | read by | stand-in against real engine |", "| --- | --- | --- |"]
    for row in rows:
        verdict = row["status"]
        pins = ["%s `%s`" % (side, json.dumps(row[side])) for side in ("standin", "real") if side in row]
        if pins:
            verdict += " (%s)" % ", ".join(pins).replace("standin", "stand-in")
        if row.get("reason"):
            verdict += ": " + row["reason"]
        key = row["key"] + ("*" if row["key"][-1] in "/:" else "")
        out.append("| `%s` | %s | %s |" % (key, _cell(row["read_by"]), _cell(verdict)))
    return out


# --- the smoke and capacity step -----------------------------------------------------------------------------------
SERVER_FACTS = ("block_size", "kv_cache_max_concurrency", "kv_cache_size_tokens", "kv_cache_usage_perc",
                "max_model_len", "num_gpu_blocks", "version")


def norm_smoke(facts):
    """The smoke module's facts -> what it concluded and which server facts it could read (not the figures)."""
    server = facts.get("server") or {}
    window = server.get("window") or {}
    return {"smoke/group status": {g: r.get("status") for g, r in sorted((facts.get("groups") or {}).items())},
            "smoke/policy passed": (facts.get("policy") or {}).get("passed"),
            "smoke/server facts read": sorted(k for k in SERVER_FACTS if server.get(k) is not None),
            "smoke/window counts tokens": bool(window.get("prompt_tokens")) and bool(window.get("generation_tokens")),
            "smoke/server errors": list(server.get("errors") or [])}


def norm_capacity(out):
    """The capacity sweep's result -> where the KV budget came from, the levels run, failures and server reads."""
    steps = out.get("steps") or []
    return {"capacity/kv source": (out.get("kv") or {}).get("source"),
            "capacity/levels": [s.get("concurrency") for s in steps],
            "capacity/failed requests": sum(s.get("failed_requests") or 0 for s in steps),
            "capacity/server ttft read": bool(steps) and all(s.get("server_ttft_mean_s") is not None for s in steps),
            "capacity/errors": list(out.get("errors") or [])}


def _value_flags():
    return ("--served-model-name", "--max-model-len", "--tool-call-parser", "--tool-strict-level",
            "--reasoning-parser", "--revision")


def standin_args(real_args, host, port):
    """``vllm serve`` arguments for a stand-in that serves like the real head: its model and served name, context,
    tool and reasoning parsers (argv of the head container, ``vllm serve`` stripped), on ``host:port``, alone (the
    stand-in's KV model needs ``-tp 8`` to hold Kimi-K3's weights; parallelism is not an observable). An API key
    goes to the stand-in through ``VLLM_API_KEY``, never its argv."""
    args = list(real_args)
    if args[:2] == ["vllm", "serve"]:
        args = args[2:]
    elif args[:1] == ["serve"]:
        args = args[1:]
    out = ["serve", args[0]] if args and not args[0].startswith("-") else ["serve"]
    i = 0
    while i < len(args):
        flag, _eq, inline = args[i].partition("=")
        if flag in _value_flags():
            values = [inline] if inline else []
            i += 1
            while not inline and i < len(args) and not args[i].startswith("-"):
                values.append(args[i])  # --served-model-name takes several names
                i += 1
            out += [flag] + values
            continue
        if flag == "--enable-auto-tool-choice":
            out.append(flag)
        i += 1
    return out + ["--host", host, "--port", str(port), "-tp", "8"]
