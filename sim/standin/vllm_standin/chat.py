"""Chat-completion behaviour of the stand-in: tokenizer, "OCR" of PNG tEXt chunks, reasoning, tool calls, faults."""
import base64
import binascii
import hashlib
import json
import os
import random
import re
import struct
import threading
import zlib

from . import faults as faults_mod
from . import solver

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 3
OCR_KEYWORD = b"kimi-sim-ocr"
LEAK = "<|close|>message<|sep|>"
TOOL_FAULTS = ("no_call", "invalid_json", "schema_violation", "unknown_tool", "leak_tokens", "empty_args")
EFFORTS = ("low", "high", "max", "none")
WORDS = ("the", "model", "stand-in", "answers", "with", "deterministic", "filler", "text", "for", "testing",
         "latency", "and", "capacity", "of", "a", "simulated", "Kimi", "K3", "deployment", "on", "vLLM", "tokens",
         "stream", "steadily", "until", "done")


class RequestError(Exception):
    def __init__(self, message, status=400, etype="BadRequestError", param=None):
        Exception.__init__(self, message)
        self.message = message
        self.status = status
        self.etype = etype
        self.param = param


def tokenize(text):
    """The stand-in tokenizer: fixed 4-character pieces (used for prompts, outputs, usage and KV accounting)."""
    if not text:
        return []
    return [text[i:i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]


def count_tokens(text):
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN if text else 0


def env_int(name, default):
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        return default


# --- images ------------------------------------------------------------------------------------------------------
def png_ocr_text(url):
    """Text of a `kimi-sim-ocr` tEXt/zTXt/iTXt chunk in a PNG data URL, else None. Never fetches http(s) URLs."""
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    header, _sep, payload = url.partition(",")
    if ";base64" not in header:
        return None
    try:
        data = base64.b64decode(payload, validate=False)
    except (binascii.Error, ValueError):
        return None
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return None
    pos = 8
    while pos + 8 <= len(data):
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        try:
            if ctype == b"tEXt":
                key, _sep, text = body.partition(b"\x00")
                if key == OCR_KEYWORD:
                    return text.decode("latin-1")
            elif ctype == b"zTXt":
                key, _sep, rest = body.partition(b"\x00")
                if key == OCR_KEYWORD:
                    return zlib.decompress(rest[1:]).decode("latin-1")
            elif ctype == b"iTXt":
                key, _sep, rest = body.partition(b"\x00")
                if key == OCR_KEYWORD:
                    comp_flag = rest[0]
                    rest = rest[2:]
                    _lang, _sep, rest = rest.partition(b"\x00")
                    _tkey, _sep, text = rest.partition(b"\x00")
                    if comp_flag:
                        text = zlib.decompress(text)
                    return text.decode("utf-8")
        except (zlib.error, IndexError, UnicodeDecodeError):
            return None
        if ctype == b"IEND":
            break
    return None


def _content_parts(content):
    """Normalise message content to (texts, image_urls, other_media_count)."""
    texts, images, other = [], [], 0
    if content is None:
        return texts, images, other
    if isinstance(content, str):
        return [content], images, other
    if not isinstance(content, list):
        raise RequestError("Invalid message content: expected a string or a list of content parts")
    for part in content:
        if not isinstance(part, dict):
            raise RequestError("Invalid content part: %r" % (part,))
        ptype = part.get("type")
        if ptype in ("text", "input_text"):
            texts.append(str(part.get("text", "")))
        elif ptype in ("image_url", "input_image"):
            iu = part.get("image_url")
            url = iu.get("url") if isinstance(iu, dict) else iu
            images.append(url or "")
        elif ptype in ("video_url", "audio_url", "input_audio"):
            other += 1
        else:
            raise RequestError("Unknown part type: %s" % ptype)
    return texts, images, other


class Plan(object):
    """What the response will contain, as token-sized pieces."""

    def __init__(self):
        self.reasoning = []      # list of str pieces
        self.content = []        # list of str pieces (before a tool call)
        self.tool_calls = []     # dicts {id, name, arguments}
        self.tool_tokens = 0
        self.finish_reason = "stop"
        self.answer = None       # the solver's answer to a checkable prompt (faults may corrupt it)
        self.needle = False      # the answer is the long-context needle (a fault may lose it)

    @property
    def tool_call(self):
        """The first tool call, or None."""
        return self.tool_calls[0] if self.tool_calls else None

    @property
    def completion_tokens(self):
        return len(self.reasoning) + len(self.content) + self.tool_tokens


class ChatBehaviour(object):
    def __init__(self, dep, max_model_len, faults=None):
        v = dep.v
        self.serving_faults = faults or faults_mod.NONE
        self.reasoning_parser = v.get("reasoning_parser") or None
        self.auto_tool = bool(v.get("enable_auto_tool_choice")) and bool(v.get("tool_call_parser"))
        self.language_only = bool(v.get("language_model_only"))
        self.mm_limits = self._mm_limits(v.get("limit_mm_per_prompt"))
        self.max_model_len = max_model_len
        self.strict = os.environ.get("VLLM_ENFORCE_STRICT_TOOL_CALLING", "true").strip().lower() in (
            "1", "true", "yes", "on")
        faults = [f.strip() for f in os.environ.get("VLLM_STANDIN_TOOL_FAULT", "").split(",") if f.strip()]
        self.unknown_faults = [f for f in faults if f not in TOOL_FAULTS]
        self.faults = [f for f in faults if f in TOOL_FAULTS]
        try:
            self.fault_rate = float(os.environ.get("VLLM_STANDIN_TOOL_FAULT_RATE", "") or 1.0)
        except ValueError:
            self.fault_rate = 1.0
        self.seed = os.environ.get("VLLM_STANDIN_SEED", "0")
        self.natural_tokens = env_int("VLLM_STANDIN_NATURAL_TOKENS", 64)
        self.image_tokens = env_int("VLLM_STANDIN_IMAGE_TOKENS", 1024)
        self.counter = 0
        self.lock = threading.Lock()

    @staticmethod
    def _mm_limits(raw):
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError:
                return {}
        out = {}
        if isinstance(raw, dict):
            for k, val in raw.items():
                if isinstance(val, dict):
                    val = val.get("count", 999)
                try:
                    out[k] = int(val)
                except (TypeError, ValueError):
                    pass
        return out

    def _pick_fault(self):
        if not self.faults:
            return None
        with self.lock:
            self.counter += 1
            n = self.counter
        rng = random.Random("%s:%d" % (self.seed, n))
        if rng.random() < self.fault_rate:
            return self.faults[rng.randrange(len(self.faults))]
        return None

    # --- request parsing -----------------------------------------------------------------------------------------
    def prepare(self, body):
        """Validate a /v1/chat/completions body; returns (prompt_tokens, plan)."""
        prompt_tokens, plan = self._prepare(body)
        if self.serving_faults.reasoning_leak and plan.reasoning:
            # a reasoning parser that is not wired: the think part and its end marker stay in the content
            plan.content = plan.reasoning + tokenize("</think>") + plan.content
            plan.reasoning = []
        return prompt_tokens, plan

    def _tool_plan(self, plan, take, budget, tools, text, named, msgs, body):
        """The tool-call answer: one call per chosen tool, ids ``functions.<name>:<n>`` numbered after the calls
        already in the conversation (Kimi's parsers), the drawn tool fault applied to the first call."""
        fault = self._pick_fault()
        if fault == "no_call":
            plan.content = take(tokenize("I can answer that without calling a tool."))
            return plan
        start = sum(len(m.get("tool_calls") or []) for m in msgs if m.get("role") == "assistant")
        calls = []
        for pos, tool in enumerate(_choose_tools(tools, text, named, body.get("parallel_tool_calls") is not False)):
            fn = tool.get("function") or {}
            schema = fn.get("parameters") or {"type": "object", "properties": {}}
            name, arguments = _call_text(fn.get("name", "tool"), schema, _gen_value(schema, "", text, 0),
                                         fault if pos == 0 else None)
            calls.append({"id": "functions.%s:%d" % (name, start + pos), "name": name, "arguments": arguments})
        if fault == "leak_tokens":
            plan.content = take(tokenize(LEAK))
        call_tokens = sum(count_tokens(c["name"] + c["arguments"]) + 8 for c in calls)
        if budget[0] < call_tokens:
            plan.tool_tokens = budget[0]
            budget[0] = 0
            plan.finish_reason = "length"
            return plan
        plan.tool_calls = calls
        plan.tool_tokens = call_tokens
        plan.finish_reason = "tool_calls"
        return plan

    def _scan(self, msgs):
        """Prompt tokens and what the answer depends on (last user text and images, last role, last tool output)."""
        if not isinstance(msgs, list) or not msgs:
            raise RequestError("messages must be a non-empty list", param="messages")
        scan = _Scan()
        for m in msgs:
            if not isinstance(m, dict) or "role" not in m:
                raise RequestError("each message needs a role", param="messages")
            texts, images, other = _content_parts(m.get("content"))
            text = "\n".join(texts)
            scan.n_images += len(images)
            if other and self.language_only:
                raise RequestError("This model does not support multimodal inputs (--language-model-only).")
            scan.prompt_tokens += MESSAGE_OVERHEAD + count_tokens(text) + self.image_tokens * (len(images) + other)
            if m.get("tool_calls"):
                scan.prompt_tokens += count_tokens(json.dumps(m["tool_calls"]))
            scan.all_text.append(text)
            scan.last_role = m["role"]
            if m["role"] == "user":
                scan.last_user_text, scan.last_user_images = text, images
            if m["role"] == "tool":
                scan.last_tool_text = text
        if scan.n_images and self.language_only:
            raise RequestError("This model does not support multimodal inputs (--language-model-only).")
        if "image" in self.mm_limits and scan.n_images > self.mm_limits["image"]:
            raise RequestError("At most %d image(s) may be provided in one prompt." % self.mm_limits["image"])
        return scan

    def _check_tool_choice(self, tool_choice, tools):
        """The named tool of a named tool choice (None otherwise), after vLLM's checks of the choice."""
        if isinstance(tool_choice, dict):
            named = (tool_choice.get("function") or {}).get("name")
            if not self.strict:
                raise RequestError("Named tool choice for Kimi K3 requires strict tool calling "
                                   "(VLLM_ENFORCE_STRICT_TOOL_CALLING=1).", param="tool_choice")
            if not any((t.get("function") or {}).get("name") == named for t in tools):
                raise RequestError("Tool '%s' has not been passed in `tools`." % named, param="tool_choice")
            return named
        if tool_choice in (None, "auto"):
            if tools and tool_choice == "auto" and not self.auto_tool:
                raise RequestError('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                                   'to be set', param="tool_choice")
        elif tool_choice == "required":
            if not tools:
                raise RequestError("When using `tool_choice`, `tools` must be set.", param="tool_choice")
        elif tool_choice != "none":
            raise RequestError("Invalid tool_choice %r" % (tool_choice,), param="tool_choice")
        return None

    def _max_tokens(self, body, prompt_tokens):
        """The output budget: max_completion_tokens / max_tokens checked against the context, else what is left."""
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if prompt_tokens >= self.max_model_len:
            raise RequestError("This model's maximum context length is %d tokens. However, your request has %d input "
                               "tokens. Please reduce the length of the input messages."
                               % (self.max_model_len, prompt_tokens), param="messages")
        if max_tokens is None:
            return self.max_model_len - prompt_tokens
        try:
            max_tokens = int(max_tokens)
        except (TypeError, ValueError):
            raise RequestError("max_tokens must be an integer", param="max_tokens")
        if max_tokens < 1:
            # vLLM's VLLMValidationError appends its parameter and value to the message
            raise RequestError("max_tokens must be at least 1, got %d. (parameter=max_tokens, value=%d)"
                               % (max_tokens, max_tokens), param="max_tokens")
        if prompt_tokens + max_tokens > self.max_model_len:
            raise RequestError(
                "'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is "
                "%d tokens and your request has %d input tokens (%d > %d - %d)." % (
                    max_tokens, self.max_model_len, prompt_tokens, max_tokens, self.max_model_len,
                    prompt_tokens), param="max_tokens")
        return max_tokens

    def _wants_tool(self, tools, scan, named, tool_choice):
        return bool(tools) and scan.last_role != "tool" and (
            named is not None or tool_choice == "required" or (
                tool_choice in (None, "auto") and self.auto_tool and not declines_tools(scan.last_user_text)))

    def _answer_text(self, plan, body, rng, budget, scan):
        """The plain answer: the tool's result, the images' text, the solver's answer or filler."""
        readable = [t for t in (png_ocr_text(u) for u in scan.last_user_images) if t]
        if scan.last_role == "tool":
            return "The tool returned: %s" % " ".join(scan.last_tool_text.split())[:200]
        if scan.last_user_images and readable:
            return "\n".join(readable)
        if scan.last_user_images:
            return "I cannot read the image: it could not be decoded."
        if solver.solve(scan.last_user_text) is not None:
            plan.answer = solver.solve(scan.last_user_text)
            plan.needle = solver.is_needle_question(scan.last_user_text)
            return plan.answer
        ignore_eos = bool(body.get("ignore_eos"))
        min_tokens = int(body.get("min_tokens") or 0)
        n = budget[0] if ignore_eos else max(min_tokens, min(budget[0], self.natural_tokens))
        if ignore_eos:
            plan.finish_reason = "length"  # without an end of sequence only max_tokens stops it, as in vLLM
        return _filler(rng, n * CHARS_PER_TOKEN)

    def _prepare(self, body):
        msgs = body.get("messages")
        scan = self._scan(msgs)
        tools = body.get("tools") or []
        prompt_tokens = scan.prompt_tokens + (count_tokens(json.dumps(tools)) if tools else 0)
        effort, thinking = _thinking(body)
        tool_choice = body.get("tool_choice")
        named = self._check_tool_choice(tool_choice, tools)
        max_tokens = self._max_tokens(body, prompt_tokens)
        seed_material = hashlib.sha256("\n".join(scan.all_text).encode("utf-8", "replace")).hexdigest()
        rng = random.Random(seed_material + str(body.get("seed", "")))
        plan = Plan()
        budget = [max_tokens]

        def take(pieces):
            n = min(len(pieces), budget[0])
            budget[0] -= n
            if n < len(pieces):
                plan.finish_reason = "length"
            return pieces[:n]

        if self.reasoning_parser and thinking:
            plan.reasoning = take(tokenize(_reasoning_text(rng, effort, scan.last_user_text)))
        if budget[0] <= 0:
            return prompt_tokens, plan
        if self._wants_tool(tools, scan, named, tool_choice):
            return prompt_tokens, self._tool_plan(plan, take, budget, tools, scan.last_user_text, named, msgs, body)
        plan.content = take(tokenize(self._answer_text(plan, body, rng, budget, scan)))
        return prompt_tokens, plan


class _Scan(object):
    """What a request's messages hold, as the answer needs it."""

    def __init__(self):
        self.prompt_tokens = 3
        self.all_text = []
        self.last_user_text, self.last_user_images, self.last_role, self.last_tool_text = "", [], None, ""
        self.n_images = 0


def _thinking(body):
    """(reasoning_effort, thinking on) of a request (reference 14.3)."""
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in EFFORTS:
        raise RequestError("Invalid reasoning_effort %r for Kimi K3: expected one of 'low', 'high', 'max', "
                           "'none'." % (effort,), param="reasoning_effort")
    kwargs = body.get("chat_template_kwargs") or {}
    thinking = not (kwargs.get("thinking") is False or kwargs.get("enable_thinking") is False or effort == "none")
    return effort, thinking


def _reasoning_text(rng, effort, last_user_text):
    size = {"low": 12, "high": 48, "max": 96}.get(effort, 24)
    topic = " ".join(last_user_text.split())[:60] or "the request"
    rtext = "The user asks: %s. " % topic
    rtext += _filler(rng, size * CHARS_PER_TOKEN - len(rtext)) if size * CHARS_PER_TOKEN > len(rtext) else ""
    return rtext.strip() + " I will answer concisely."


def _filler(rng, nchars):
    out = []
    size = 0
    while size < nchars:
        w = WORDS[rng.randrange(len(WORDS))]
        out.append(w)
        size += len(w) + 1
    text = " ".join(out)
    text = text[:max(nchars, 0)]
    return text


def declines_tools(text):
    """The prompt asks for a direct answer (the stand-in's model then answers ``auto`` in text)."""
    return re.search(r"\b(do not call any tool|without calling a tool)\b", text or "", re.I) is not None


def _call_text(name, schema, args, fault):
    """``(name, arguments)`` of one call with a tool-parser fault applied."""
    if fault == "invalid_json":
        arguments = json.dumps(args)[:-1] + ', "'
    elif fault == "schema_violation":
        arguments = json.dumps(_violate(schema, args))
    elif fault == "empty_args":
        arguments = "{}"
    else:
        arguments = json.dumps(args)
    return (name + "_unknown" if fault == "unknown_tool" else name), arguments


def _choose_tools(tools, text, named, parallel):
    """The named tool; else the offered tools whose names the prompt spells out (in the order it does, all of them
    when parallel calls are allowed); else the best match by name/description words."""
    if named:
        return [_choose_tool(tools, text, named)]
    spelled = []
    for t in tools:
        name = (t.get("function") or {}).get("name") or ""
        m = re.search(r"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])" % re.escape(name), text) if name else None
        if m:
            spelled.append((m.start(), t))
    if spelled:
        ordered = [t for _pos, t in sorted(spelled, key=lambda x: x[0])]
        return ordered if parallel else ordered[:1]
    return [_choose_tool(tools, text, None)]


def _choose_tool(tools, text, named):
    if named:
        for t in tools:
            if (t.get("function") or {}).get("name") == named:
                return t
    low = text.lower()
    best, best_score = tools[0], 0
    for t in tools:
        fn = t.get("function") or {}
        words = set(re.split(r"[^a-z0-9]+", (fn.get("name", "") + " " + fn.get("description", "")).lower()))
        score = sum(1 for w in words if len(w) >= 3 and re.search(r"\b%s\b" % re.escape(w), low))
        if score > best_score:
            best, best_score = t, score
    return best


def _extract_string(key, text):
    k = key.replace("_", "[ _-]?")
    m = re.search(r"\b%s\b\s*(?:is|=|:)\s*[\"']?([^\"',.;\n]+)" % k, text, re.I)
    if m:
        return m.group(1).strip()
    m = re.search(r"[\"']([^\"']{1,80})[\"']", text)
    if m:
        return m.group(1)
    m = re.search(r"\b(?:in|for|of|at|to|from|about)\s+([A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)", text)
    if m:
        return m.group(1)
    caps = re.findall(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z][\w-]*)", text)
    if caps:
        return caps[0]
    return "example"


def _schema_type(schema):
    stype = schema.get("type")
    if isinstance(stype, list):
        stype = next((t for t in stype if t != "null"), "null")
    if stype is None:
        stype = "object" if "properties" in schema else "string"
    return stype


def _gen_object(schema, text, depth):
    props = schema.get("properties") or {}
    required = schema.get("required")
    names = list(required) if required is not None else list(props)
    if depth > 4:
        names = list(required or [])
    return dict((n, _gen_value(props.get(n, {"type": "string"}), n, text, depth + 1)) for n in names)


def _gen_array(schema, key, text, depth):
    n = max(1, int(schema.get("minItems", 1)))
    if "maxItems" in schema:
        n = min(n, int(schema["maxItems"]))
    return [_gen_value(schema.get("items", {"type": "string"}), key, text, depth + 1) for _unused in range(n)]


def _gen_number(schema, stype, text):
    """The first number in the prompt that fits the schema, else its minimum (or 1) capped at its maximum."""
    val = None
    for s in re.findall(r"-?\d+(?:\.\d+)?", text):
        x = float(s)
        if stype == "integer" and x != int(x):
            continue
        if not _within(schema, x):
            continue
        val = x
        break
    if val is None:
        val = schema.get("minimum", schema["exclusiveMinimum"] + 1 if "exclusiveMinimum" in schema else 1)
        if "maximum" in schema and val > schema["maximum"]:
            val = schema["maximum"]
    return int(val) if stype == "integer" else float(val)


# String formats the stand-in fills with a fixed valid value.
FORMAT_VALUES = {"date": "2026-01-01", "date-time": "2026-01-01T00:00:00Z", "email": "user@example.com"}


def _gen_string(schema, key, text):
    s = _extract_string(key, text) if key else "example"
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in FORMAT_VALUES:
        s = FORMAT_VALUES[fmt]
    if "minLength" in schema and len(s) < schema["minLength"]:
        s = s + "x" * (schema["minLength"] - len(s))
    if "maxLength" in schema:
        s = s[:schema["maxLength"]]
    return s


def _gen_value(schema, key, text, depth):
    """A value that satisfies ``schema``, taken from the prompt ``text`` where it can be (the property ``key``)."""
    if not isinstance(schema, dict):
        return "example"
    if "const" in schema:
        return schema["const"]
    if "enum" in schema and schema["enum"]:
        for e in schema["enum"]:
            if isinstance(e, str) and e.lower() in text.lower():
                return e
        return schema["enum"][0]
    for comb in ("anyOf", "oneOf", "allOf"):
        if schema.get(comb):
            return _gen_value(schema[comb][0], key, text, depth)
    stype = _schema_type(schema)
    if stype == "object":
        return _gen_object(schema, text, depth)
    if stype == "array":
        return _gen_array(schema, key, text, depth)
    if stype in ("integer", "number"):
        return _gen_number(schema, stype, text)
    if stype == "boolean":
        return True
    if stype == "null":
        return None
    return _gen_string(schema, key, text)


def _within(schema, x):
    """``x`` satisfies the schema's minimum/maximum and exclusive bounds."""
    return not ("minimum" in schema and x < schema["minimum"] or "maximum" in schema and x > schema["maximum"]
                or "exclusiveMinimum" in schema and x <= schema["exclusiveMinimum"]
                or "exclusiveMaximum" in schema and x >= schema["exclusiveMaximum"])


def _violate(schema, args):
    """Valid JSON that breaks the schema: wrong type for a property (or a non-object)."""
    props = (schema or {}).get("properties") or {}
    required = (schema or {}).get("required") or []
    target = (required or list(props) or [None])[0]
    if target is None or not isinstance(args, dict):
        return ["not", "an", "object"]
    ptype = (props.get(target) or {}).get("type")
    bad = dict(args)
    bad[target] = "not-a-number" if ptype in ("integer", "number", "boolean", "array", "object") else 12345
    if (props.get(target) or {}).get("enum") is not None and ptype in (None, "string"):
        bad[target] = "__not_in_enum__"
    return bad
