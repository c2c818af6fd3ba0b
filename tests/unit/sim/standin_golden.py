"""The stand-in's request handling, exactly: `vllm serve` argv parsing over every flag of each snapshot and random
command lines, the tool-argument generator over JSON schemas, and chat request preparation (validation errors, the
reasoning / content / tool-call plan) over random bodies and server settings. Prints one digest per part as JSON.

Run by test_standin_golden.py in a process of its own (the chat settings come from the environment), as a module
from the repository root, which puts the root on the path: the stand-in's package is sim.standin.vllm_standin there.
Usage (in the repository root): python -m tests.unit.sim.standin_golden REPO
"""

import base64
import hashlib
import json
import os
import random
import struct
import sys
import zlib

REPO = os.path.abspath(sys.argv[1])
os.environ["VLLM_STANDIN_FLAGS_DIR"] = os.path.join(REPO, "data", "vllm_flags")
from sim.standin.vllm_standin import chat, flags  # noqa: E402  pylint: disable=wrong-import-position

N_RANDOM_ARGV = 1500
N_BODIES = 500
VALS = ["1", "-1", "0.5", "abc", "-", "--", "auto", '{"a":1}', "x=y", "-3", "1k", "", "true"]


def digest(items):
    h = hashlib.sha256()
    for item in items:
        h.update((json.dumps(item, sort_keys=True, default=repr) + "\n").encode())
    return h.hexdigest()[:16]


def argv_cases(names, rng):
    cases = []
    for n in names:
        cases += [
            [n],
            [n, "1"],
            [n + "=2"],
            [n, "a", "b"],
            ["m", n, "-5"],
            [n, "--x"],
            [n + ".foo", "3"],
            [n + ".bar=[1]"],
            [n + ".k"],
        ]
    for _unused in range(N_RANDOM_ARGV):
        argv = []
        for _k in range(rng.randint(0, 6)):
            r = rng.random()
            if r < 0.5:
                argv.append(rng.choice(names) + (("=" + rng.choice(VALS)) if rng.random() < 0.2 else ""))
            elif r < 0.6:
                argv.append(rng.choice(names) + "." + rng.choice(["x", "num_redundant_experts"]))
            elif r < 0.65:
                argv.append(rng.choice(["-h", "--help", "--bogus", "--", "-x", "--no-bogus"]))
            else:
                argv.append(rng.choice(VALS + ["model/a", "moonshotai/Kimi-K3"]))
        cases.append(argv)
    return cases


def parse_one(argv, snap):
    try:
        model, values, explicit = flags.parse_args(argv, snap)
        return ["ok", model, explicit, {d: values.get(d) for d in explicit}]
    except flags.ArgError as e:
        return ["err", str(e), getattr(e, "code", None)]


def flag_digests():
    out = {}
    for version in ("0.27.1", "0.28.0", "0.33.0"):
        snap = flags.Snapshot(flags.load_snapshot(version))
        cases = argv_cases(sorted(snap.lookup), random.Random(7))
        out["parse_args " + version] = digest([argv, parse_one(argv, snap)] for argv in cases)
    return out


def png(text):
    def chunk(t, b):
        return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))

    data = b"\x89PNG\r\n\x1a\n" + chunk(b"tEXt", b"kimi-sim-ocr\x00" + text.encode()) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(data).decode()


def nest(n):
    s = {"type": "object", "properties": {"r": {"type": "string"}, "s": {"type": "integer"}}, "required": ["r"]}
    for i in range(n):
        s = {"type": "object", "properties": {"k%d" % i: s, "opt": {"type": "boolean"}}}
    return s


DEEP = nest(7)
SCHEMAS = [
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "null"},
    {"const": 5},
    {"enum": ["celsius", "fahrenheit"]},
    {"enum": []},
    {"anyOf": [{"type": "integer"}, {"type": "string"}]},
    {"oneOf": [{"type": "number", "minimum": 10}]},
    {"allOf": [{"type": "boolean"}]},
    {"type": ["null", "integer"]},
    {"type": ["null"]},
    {"properties": {"a": {"type": "integer"}}},
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city"],
    },
    {"type": "object", "properties": {"x": {"type": "number", "exclusiveMinimum": 3, "exclusiveMaximum": 9}}},
    {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 2},
    {"type": "array"},
    {"type": "array", "minItems": 0},
    {"type": "integer", "minimum": 50, "maximum": 40},
    {"type": "integer", "exclusiveMinimum": 4},
    {"type": "number", "maximum": 0},
    {"type": "string", "format": "date"},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "email", "maxLength": 4},
    {"type": "string", "minLength": 20},
    DEEP,
    "notadict",
    {"type": "object", "required": ["zz"]},
    {},
]
TEXTS = [
    "",
    "What is the weather in Paris for 3 days?",
    "city is Berlin; days = 12.5 or -4 and 8",
    "use Fahrenheit please 2.5 7",
    "Say 'hello world' to Bob",
    "The Quick brown Fox. Jumps at Noon",
    "x: 42",
    "in New York City, 1000 items",
]


def gen_digest():
    items = []
    for s in SCHEMAS:
        for t in TEXTS:
            for key in ("", "city", "x", "days"):
                items.append([s, key, t, chat._gen_value(s, key, t, 0)])  # pylint: disable=protected-access
    return digest(items)


class Dep:
    def __init__(self, v):
        self.v = v


CONFIGS = [
    {
        "reasoning_parser": "kimi_k3",
        "enable_auto_tool_choice": True,
        "tool_call_parser": "kimi_k3",
        "limit_mm_per_prompt": '{"image": 2}',
    },
    {"reasoning_parser": None, "enable_auto_tool_choice": False, "language_model_only": True},
    {
        "reasoning_parser": "kimi_k3",
        "enable_auto_tool_choice": True,
        "tool_call_parser": "kimi_k3",
        "limit_mm_per_prompt": {"image": {"count": 1}, "video": "x"},
    },
]
ENVS = [
    {},
    {"VLLM_ENFORCE_STRICT_TOOL_CALLING": "0"},
    {
        "VLLM_STANDIN_TOOL_FAULT": "no_call,invalid_json,schema_violation,unknown_tool,leak_tokens,empty_args,bogus",
        "VLLM_STANDIN_TOOL_FAULT_RATE": "0.7",
    },
    {"VLLM_STANDIN_NATURAL_TOKENS": "5", "VLLM_STANDIN_IMAGE_TOKENS": "7"},
]
TOOLS = [
    None,
    [],
    [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "weather forecast for a city",
                "parameters": SCHEMAS[14],
            },
        }
    ],
    [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": "weather for a city", "parameters": SCHEMAS[14]},
        },
        {
            "type": "function",
            "function": {
                "name": "lookup_stock",
                "description": "stock price lookup",
                "parameters": {
                    "type": "object",
                    "properties": {"ticker": {"enum": ["ACME", "INIT"]}},
                    "required": ["ticker"],
                },
            },
        },
    ],
]
USER = [
    "What is the weather in Paris?",
    "Call lookup_stock and get_weather for ACME",
    "What is 12 * 7?",
    "Don't use any tools. Tell me a story",
    "",
    [{"type": "text", "text": "read this"}, {"type": "image_url", "image_url": {"url": png("HELLO OCR")}}],
    [{"type": "image_url", "image_url": "data:image/png;base64,AAAA"}],
    [{"type": "video_url", "video_url": {"url": "x"}}],
    [
        {"type": "image_url", "image_url": {"url": png("a")}},
        {"type": "input_image", "image_url": png("b")},
        {"type": "image_url", "image_url": {"url": png("c")}},
    ],
    [{"type": "bogus"}],
    5,
    [7],
    "x" * 600,
]


def make_bodies():
    rng = random.Random(11)
    bodies = []
    for _unused in range(N_BODIES):
        msgs = []
        if rng.random() < 0.2:
            msgs.append({"role": "system", "content": "You are helpful."})
        msgs.append({"role": "user", "content": rng.choice(USER)})
        r = rng.random()
        if r < 0.2:
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "functions.get_weather:0",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": "{}"},
                        }
                    ],
                }
            )
            msgs.append(
                {
                    "role": "tool",
                    "content": "sunny and 21 degrees " * rng.randint(1, 20),
                    "tool_call_id": "functions.get_weather:0",
                }
            )
        elif r < 0.25:
            msgs.append({"content": "no role"})
        elif r < 0.27:
            msgs = []
        elif r < 0.29:
            msgs = "notalist"
        body = {"messages": msgs, "model": "m"}
        t = rng.choice(TOOLS)
        if t is not None:
            body["tools"] = t
        tc = rng.choice(
            [
                None,
                None,
                "auto",
                "required",
                "none",
                "bogus",
                {"type": "function", "function": {"name": "get_weather"}},
                {"type": "function", "function": {"name": "nope"}},
            ]
        )
        if tc is not None:
            body["tool_choice"] = tc
        eff = rng.choice([None, None, "low", "high", "max", "none", "medium"])
        if eff is not None:
            body["reasoning_effort"] = eff
        if rng.random() < 0.15:
            body["chat_template_kwargs"] = rng.choice(
                [{"thinking": False}, {"enable_thinking": False}, {"thinking": True}]
            )
        mt = rng.choice([None, None, 1, 5, 40, 300, 0, -3, "x", "12", 10**6, 8000])
        if mt is not None:
            body[rng.choice(["max_tokens", "max_completion_tokens"])] = mt
        if rng.random() < 0.2:
            body["ignore_eos"] = True
        if rng.random() < 0.2:
            body["min_tokens"] = rng.choice([0, 10, 100])
        if rng.random() < 0.3:
            body["seed"] = rng.randint(0, 5)
        if rng.random() < 0.2:
            body["parallel_tool_calls"] = False
        bodies.append(body)
    return bodies


def prepare_one(beh, body):
    try:
        pt, plan = beh.prepare(json.loads(json.dumps(body)))
        return [
            "ok",
            pt,
            plan.reasoning,
            plan.content,
            plan.tool_calls,
            plan.tool_tokens,
            plan.finish_reason,
            plan.answer,
        ]
    except chat.RequestError as e:
        return ["err", e.message, e.status, e.etype, e.param]


ENV_KEYS = (
    "VLLM_ENFORCE_STRICT_TOOL_CALLING",
    "VLLM_STANDIN_TOOL_FAULT",
    "VLLM_STANDIN_TOOL_FAULT_RATE",
    "VLLM_STANDIN_NATURAL_TOKENS",
    "VLLM_STANDIN_IMAGE_TOKENS",
)


def prepare_digests():
    bodies = make_bodies()
    out = {}
    for n, env in enumerate(ENVS):
        for k in ENV_KEYS:
            os.environ.pop(k, None)
        os.environ.update(env)
        for c, cfg in enumerate(CONFIGS):
            for mml in (2000, 10**5):
                beh = chat.ChatBehaviour(Dep(cfg), mml)
                out["prepare env%d config%d len%d" % (n, c, mml)] = digest(prepare_one(beh, b) for b in bodies)
    return out


def main():
    out = flag_digests()
    out["_gen_value"] = gen_digest()
    out.update(prepare_digests())
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
