"""Simulated engines: FCFS admission against the KV budget / max_num_seqs, and vLLM's Prometheus metrics."""
import collections
import threading
import time

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0]
LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                   240.0, 480.0, 960.0, 1920.0, 7680.0]
TOKEN_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000,
                 500000, 1000000]


class Histogram(object):
    __slots__ = ("buckets", "counts", "sum", "count")

    def __init__(self, buckets):
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, v):
        self.sum += v
        self.count += 1
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1
                break


class Request(object):
    __slots__ = ("rid", "prompt_tokens", "planned", "generated", "arrival", "admitted", "engine", "first_token_at",
                 "last_token_at", "pending_itl", "source")

    def __init__(self, rid, prompt_tokens, planned, arrival=None):
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.planned = planned
        self.generated = 0
        self.arrival = time.monotonic() if arrival is None else arrival
        self.admitted = None
        self.engine = None
        self.first_token_at = None
        self.last_token_at = None
        self.pending_itl = []
        self.source = "local_compute"  # where the prompt's KV came from (vLLM's PromptTokenStats sources)


PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


class Engine(object):
    def __init__(self, index, kv_tokens, max_num_seqs):
        self.index = index
        self.kv_tokens = kv_tokens
        self.max_num_seqs = max_num_seqs
        self.cond = threading.Condition()
        self.running = set()
        self.waiting = collections.deque()
        self.reserved = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.preemptions = 0
        self.success = collections.Counter()
        self.h_ttft = Histogram(TTFT_BUCKETS)
        self.h_itl = Histogram(ITL_BUCKETS)
        self.h_e2e = Histogram(LATENCY_BUCKETS)
        self.h_queue = Histogram(LATENCY_BUCKETS)
        self.h_prefill = Histogram(LATENCY_BUCKETS)
        self.h_decode = Histogram(LATENCY_BUCKETS)
        self.h_prompt = Histogram(TOKEN_BUCKETS)
        self.h_gen = Histogram(TOKEN_BUCKETS)
        self.by_source = collections.Counter()
        self.h_kv_computed = Histogram(TOKEN_BUCKETS)

    def load(self):
        return len(self.running) + len(self.waiting)

    def admit(self, req):
        """Blocks until `req` is first in line and fits (KV for prompt + planned output, max_num_seqs).

        Returns True when the request had to wait for capacity (queued), False when admitted at once.
        """
        need = req.prompt_tokens + req.planned
        waited = False
        with self.cond:
            req.engine = self
            self.waiting.append(req)
            while not (self.waiting[0] is req and len(self.running) < self.max_num_seqs
                       and (self.reserved + need <= self.kv_tokens or not self.running)):
                if self.waiting[0] is req or len(self.running) >= self.max_num_seqs or \
                        self.reserved + need > self.kv_tokens:
                    waited = True
                self.cond.wait()
            self.waiting.popleft()
            self.running.add(req)
            self.reserved += need
            req.admitted = time.monotonic()
            self.cond.notify_all()
        return waited

    FLUSH_EVERY = 16

    def token(self, req, now):
        """One generated token; ITL samples are flushed in batches to keep lock traffic low under load."""
        req.generated += 1
        if req.first_token_at is None:
            req.first_token_at = now
            with self.cond:
                self.h_ttft.observe(now - req.arrival)
                self.generation_tokens_total += 1
        else:
            req.pending_itl.append(now - req.last_token_at)
            if len(req.pending_itl) >= self.FLUSH_EVERY:
                self._flush(req)
        req.last_token_at = now

    def _flush(self, req):
        with self.cond:
            for v in req.pending_itl:
                self.h_itl.observe(v)
            self.generation_tokens_total += len(req.pending_itl)
        req.pending_itl = []

    def release(self, req, finished_reason):
        now = time.monotonic()
        if req.pending_itl:
            self._flush(req)
        with self.cond:
            if req in self.running:
                self.running.discard(req)
                self.reserved -= req.prompt_tokens + req.planned
            elif req in self.waiting:
                self.waiting.remove(req)
            self.success[finished_reason] += 1
            self.prompt_tokens_total += req.prompt_tokens if req.admitted else 0
            if req.admitted is not None:
                self.h_queue.observe(req.admitted - req.arrival)
                self.h_e2e.observe(now - req.arrival)
                self.h_prompt.observe(req.prompt_tokens)
                self.by_source[req.source] += req.prompt_tokens
                self.h_kv_computed.observe(req.prompt_tokens if req.source == "local_compute" else 0)
                self.h_gen.observe(req.generated)
                if req.first_token_at is not None:
                    self.h_prefill.observe(req.first_token_at - req.admitted)
                    self.h_decode.observe(now - req.first_token_at)
            self.cond.notify_all()

    def kv_usage(self):
        with self.cond:
            held = sum(r.prompt_tokens + r.generated for r in self.running)
        return min(1.0, held / float(self.kv_tokens)) if self.kv_tokens else 0.0


class EngineGroup(object):
    """The engines this HTTP server fronts; requests go to the least-loaded one."""

    def __init__(self, indices, kv_tokens, max_num_seqs):
        self.engines = [Engine(i, kv_tokens, max_num_seqs) for i in indices]
        self.lock = threading.Lock()

    def pick(self):
        with self.lock:
            return min(self.engines, key=lambda e: (e.load(), e.index))

    def server_load(self):
        return sum(e.load() for e in self.engines)


def _fmt(v):
    if isinstance(v, float):
        if v == int(v) and abs(v) < 1e15:
            return "%.1f" % v
        return repr(v)
    return str(v)


def _labels(d):
    """Label set as prometheus_client writes it: sorted by name, escaped."""
    return "{" + ",".join('%s="%s"' % (k, _esc(d[k])) for k in sorted(d)) + "}"


def _esc(v):
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# (family, Engine attribute, help): the per-engine counters.
COUNTERS = (
    ("vllm:num_preemptions", "preemptions", "Cumulative number of preemption from the engine."),
    ("vllm:prompt_tokens", "prompt_tokens_total", "Number of prefill tokens processed."),
    ("vllm:generation_tokens", "generation_tokens_total", "Number of generation tokens processed."))
# (family, Engine attribute, help): the per-engine histograms.
HISTOGRAMS = (
    ("vllm:time_to_first_token_seconds", "h_ttft", "Histogram of time to first token in seconds."),
    ("vllm:inter_token_latency_seconds", "h_itl", "Histogram of inter-token latency in seconds."),
    ("vllm:e2e_request_latency_seconds", "h_e2e", "Histogram of e2e request latency in seconds."),
    ("vllm:request_queue_time_seconds", "h_queue", "Histogram of time spent in WAITING phase for request."),
    ("vllm:request_prefill_time_seconds", "h_prefill", "Histogram of time spent in PREFILL phase for request."),
    ("vllm:request_decode_time_seconds", "h_decode", "Histogram of time spent in DECODE phase for request."),
    ("vllm:request_prompt_tokens", "h_prompt", "Number of prefill tokens processed."),
    ("vllm:request_generation_tokens", "h_gen", "Number of generation tokens processed."),
    ("vllm:request_prefill_kv_computed_tokens", "h_kv_computed",
     "Histogram of new KV tokens computed during prefill (excluding cached tokens)."))
FINISHED_REASONS = ("stop", "length", "abort", "error")


def _family(out, name, mtype, help_text):
    out.append("# HELP %s %s" % (name, help_text))
    out.append("# TYPE %s %s" % (name, mtype))


def _with(lb, key, value):
    l2 = dict(lb)
    l2[key] = value
    return l2


def _gauges(out, base, cache_info):
    for name, help_text, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", lambda e: len(e.running)),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", lambda e: len(e.waiting)),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lambda e: e.kv_usage())):
        _family(out, name, "gauge", help_text)
        for e, lb in base:
            out.append("%s%s %s" % (name, _labels(lb), _fmt(float(value(e)))))
    _family(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
    for e, _unused in base:
        out.append("vllm:cache_config_info%s 1.0" % _labels(_with(cache_info, "engine", str(e.index))))


def _counters(out, base):
    for name, attr, help_text in COUNTERS:
        _family(out, name + "_total", "counter", help_text)  # prometheus_client names counter families with _total
        for e, lb in base:
            out.append("%s_total%s %s" % (name, _labels(lb), _fmt(float(getattr(e, attr)))))
    # vLLM counts every prompt token looked up in the prefix cache and the ones found; the stand-in caches no prefix
    for name, help_text in (("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."),
                            ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")):
        _family(out, name + "_total", "counter", help_text)
        for e, lb in base:
            hits = name.endswith("hits")
            out.append("%s_total%s %s" % (name, _labels(lb), _fmt(0.0 if hits else float(e.prompt_tokens_total))))


def _labelled_counters(out, base):
    _family(out, "vllm:prompt_tokens_by_source_total", "counter", "Number of prompt tokens by source.")
    for e, lb in base:
        for source in PROMPT_SOURCES:
            out.append("vllm:prompt_tokens_by_source_total%s %s" % (
                _labels(_with(lb, "source", source)), _fmt(float(e.by_source[source]))))
    _family(out, "vllm:request_success_total", "counter", "Count of successfully processed requests.")
    for e, lb in base:
        for reason in FINISHED_REASONS:
            out.append("vllm:request_success_total%s %s" % (
                _labels(_with(lb, "finished_reason", reason)), _fmt(float(e.success.get(reason, 0)))))


def _histogram(out, name, e, h, lb):
    with e.cond:
        counts, total, count = list(h.counts), h.sum, h.count
    cum = 0
    for b, c in zip(h.buckets, counts):
        cum += c
        out.append("%s_bucket%s %s" % (name, _labels(_with(lb, "le", _fmt(float(b)))), _fmt(float(cum))))
    out.append("%s_bucket%s %s" % (name, _labels(_with(lb, "le", "+Inf")), _fmt(float(count))))
    out.append("%s_count%s %s" % (name, _labels(lb), _fmt(float(count))))
    out.append("%s_sum%s %s" % (name, _labels(lb), _fmt(float(total))))


def render_metrics(group, model_name, cache_info):
    """Prometheus text exposition (0.0.4) with vLLM's metric names and labels."""
    out = []
    base = [(e, {"model_name": model_name, "engine": str(e.index)}) for e in group.engines]
    _gauges(out, base, cache_info)
    _counters(out, base)
    _labelled_counters(out, base)
    for name, attr, help_text in HISTOGRAMS:
        _family(out, name, "histogram", help_text)
        for e, lb in base:
            _histogram(out, name, e, getattr(e, attr), lb)
    return "\n".join(out) + "\n"
