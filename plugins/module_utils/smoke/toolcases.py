# -*- coding: utf-8 -*-
"""The tool-call cases of the verifier-scale smoke (data, no I/O).

Twelve tools whose schemas cover nested objects, arrays (bounded, unique items), enums, required and optional
fields, bounded and exclusive numbers, string patterns and formats. The cases built from them
(:func:`build_cases`):

- ``single``: one tool offered set, one call expected (36: three argument sets per tool);
- ``parallel``: two tools named in one prompt, two calls expected (6);
- ``no_call``: tools offered but the prompt asks for a direct answer; the expected trigger is "no tool call" (5);
- ``multi_turn_result``: an earlier call (id ``functions.<name>:0``) and its tool result fed back; a text answer
  that uses the result is expected (3);
- ``multi_turn_next``: the same history and a new user request; the next call is expected, its id numbered after
  the earlier one (3).

Every case is sent streaming and non-streaming. Kimi's ids are ``functions.<name>:<n>`` (n counts the calls of the
conversation); ids in the history follow that format, as K2-Vendor-Verifier rewrites them. A call whose id has that
format must name its function and count right; vLLM 0.32.0's kimi_k3 parser leaves the id to the server, which
makes a random one (accepted, see :func:`id_format_errors`).
"""
from __future__ import annotations

import re

ID_PATTERN = re.compile(r"^functions\.(?P<name>[A-Za-z0-9_\-]+):(?P<n>\d+)$")


def _fn(name, description, properties, required=None):
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required is not None:
        schema["required"] = required
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


_EMAIL = {"type": "string", "format": "email"}
TOOLS = [
    _fn("get_weather", "Weather forecast for a city.",
        {"city": {"type": "string", "minLength": 1}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
         "days": {"type": "integer", "minimum": 1, "maximum": 7}}, ["city", "unit"]),
    _fn("lookup_order", "Look up a shop order by its id.",
        {"order_id": {"type": "string", "minLength": 1, "maxLength": 32}, "include_items": {"type": "boolean"}},
        ["order_id"]),
    _fn("create_event", "Create a calendar event.",
        {"title": {"type": "string", "minLength": 1}, "start": {"type": "string", "format": "date-time"},
         "attendees": {"type": "array", "items": _EMAIL, "minItems": 1},
         "location": {"type": "object",
                      "properties": {"room": {"type": "string"},
                                     "floor": {"type": "integer", "minimum": 0, "maximum": 50}},
                      "required": ["room"], "additionalProperties": False}},
        ["title", "start", "attendees"]),
    _fn("book_flight", "Book a flight between two airports.",
        {"origin": {"type": "string", "pattern": "^[A-Z]{3}$"}, "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
         "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
         "cabin": {"type": "string", "enum": ["economy", "premium", "business"]}},
        ["origin", "destination", "passengers"]),
    _fn("set_thermostat", "Set the thermostat of a zone.",
        {"zone": {"type": "string", "enum": ["living", "bedroom", "office"]},
         "target_c": {"type": "number", "minimum": 10, "maximum": 30},
         "mode": {"type": "string", "enum": ["heat", "cool", "fan"]}}, ["zone", "target_c"]),
    _fn("search_docs", "Search the documentation.",
        {"query": {"type": "string", "minLength": 2},
         "filters": {"type": "object",
                     "properties": {"lang": {"type": "string", "enum": ["en", "de", "fr"]},
                                    "max_results": {"type": "integer", "minimum": 1, "maximum": 50}},
                     "additionalProperties": False}}, ["query"]),
    _fn("transfer_funds", "Transfer money between accounts.",
        {"from_account": {"type": "string"}, "to_account": {"type": "string"},
         "amount": {"type": "number", "exclusiveMinimum": 0, "maximum": 10000},
         "currency": {"type": "string", "enum": ["EUR", "USD", "NOK"]}},
        ["from_account", "to_account", "amount", "currency"]),
    _fn("add_tags", "Add tags to an item.",
        {"item_id": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string", "minLength": 1},
                                                 "minItems": 1, "maxItems": 5, "uniqueItems": True}},
        ["item_id", "tags"]),
    _fn("schedule_job", "Schedule a recurring job.",
        {"name": {"type": "string"}, "cron": {"type": "string", "minLength": 9},
         "retries": {"type": "integer", "minimum": 0, "maximum": 5},
         "notify": {"type": "object", "properties": {"email": _EMAIL, "on_failure": {"type": "boolean"}},
                    "required": ["email"], "additionalProperties": False}}, ["name", "cron"]),
    _fn("get_stock_price", "Latest stock price of a ticker symbol.",
        {"symbol": {"type": "string", "pattern": "^[A-Z]{1,5}$"},
         "exchange": {"type": "string", "enum": ["NYSE", "NASDAQ", "OSE"]}}, ["symbol"]),
    _fn("convert_units", "Convert a value between units.",
        {"value": {"type": "number"}, "from_unit": {"type": "string", "enum": ["km", "mi", "m", "ft"]},
         "to_unit": {"type": "string", "enum": ["km", "mi", "m", "ft"]}}, ["value", "from_unit", "to_unit"]),
    _fn("create_ticket", "Open a support ticket.",
        {"title": {"type": "string", "minLength": 3},
         "priority": {"type": "string", "enum": ["low", "medium", "high", "urgent"]},
         "labels": {"type": "array", "items": {"type": "string"}},
         "assignee": {"type": "object",
                      "properties": {"id": {"type": "integer", "minimum": 1}, "team": {"type": "string"}},
                      "required": ["id"], "additionalProperties": False}}, ["title", "priority"]),
]
TOOL_NAMES = [t["function"]["name"] for t in TOOLS]

# Three argument sets per tool, written into the prompt as "key: value" pairs.
ARGS = {
    "get_weather": ["city: Oslo; unit: celsius", "city: Lima; unit: fahrenheit; days: 3",
                    "city: Bergen; unit: celsius; days: 7"],
    "lookup_order": ["order_id: B-2041", "order_id: C-77; include items", "order_id: Z-9000"],
    "create_event": ["title: Planning; attendees: ana@example.com", "title: Review; room: Fjord",
                     "title: Retro; room: Aurora; floor: 4"],
    "book_flight": ["origin: OSL; destination: LHR; passengers: 2", "origin: JFK; destination: SFO; passengers: 1",
                    "origin: BER; destination: MAD; passengers: 4; cabin: business"],
    "set_thermostat": ["zone: living; target_c: 21", "zone: office; target_c: 19; mode: heat",
                       "zone: bedroom; target_c: 17; mode: fan"],
    "search_docs": ["query: kv cache sizing", "query: tool parser; lang: de", "query: router setup; lang: fr"],
    "transfer_funds": ["from_account: ACC1001; to_account: ACC2002; amount: 250; currency: EUR",
                       "from_account: ACC3003; to_account: ACC4004; amount: 75; currency: USD",
                       "from_account: ACC5005; to_account: ACC6006; amount: 990; currency: NOK"],
    "add_tags": ["item_id: doc-17; tags: urgent", "item_id: img-3; tags: review", "item_id: note-8; tags: archive"],
    "schedule_job": ["name: backup; cron: 0 3 * * *", "name: report; cron: 30 6 * * 1; retries: 2",
                     "name: cleanup; cron: 15 1 * * *; email: ops@example.com"],
    "get_stock_price": ["symbol: NVDA", "symbol: AMD; exchange: NASDAQ", "symbol: EQNR; exchange: OSE"],
    "convert_units": ["value: 12.5; from_unit: km; to_unit: mi", "value: 3; from_unit: m; to_unit: ft",
                      "value: 100; from_unit: ft; to_unit: m"],
    "create_ticket": ["title: Disk full; priority: high", "title: Login slow; priority: low; team: web",
                      "title: GPU down; priority: urgent; id: 42"],
}
PARALLEL = [("get_weather", "lookup_order"), ("book_flight", "get_stock_price"), ("set_thermostat", "add_tags"),
            ("search_docs", "create_ticket"), ("convert_units", "get_weather"), ("lookup_order", "transfer_funds")]
NO_CALL = ["What is 12 plus 30? Do not call any tool; answer directly.",
           "Do not call any tool. Say hello in French.",
           "Answer directly, do not call any tool: what colour is the sky on a clear day?",
           "Do not call any tool. Name the capital of Norway.",
           "Without calling a tool: do not call any tool, just say OK."]
MULTI_TURN = [("get_weather", "city: Oslo; unit: celsius", '{"temp_c": 4, "sky": "cloudy"}', "lookup_order"),
              ("lookup_order", "order_id: B-2041", '{"status": "shipped", "carrier": "Posten"}', "create_ticket"),
              ("get_stock_price", "symbol: NVDA", '{"price": 131.5, "currency": "USD"}', "convert_units")]


def tools_named(*names):
    return [t for t in TOOLS if t["function"]["name"] in names]


def _prompt(name, args):
    return "Use the %s tool with %s." % (name, args)


def _case(cid, kind, messages, tools, expected):
    return {"id": cid, "kind": kind, "messages": messages, "tools": tools, "expect_call": bool(expected),
            "expected_tools": list(expected)}


def _history(name, args, result):
    call = {"id": "functions.%s:0" % name, "type": "function",
            "function": {"name": name, "arguments": "{}"}}
    return [{"role": "user", "content": _prompt(name, args)},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": result}]


def build_cases():
    """All cases, in a fixed order (ids stable across runs, so two runs' figures compare)."""
    cases = []
    for name in TOOL_NAMES:
        for i, args in enumerate(ARGS[name]):
            others = [TOOL_NAMES[(TOOL_NAMES.index(name) + k) % len(TOOL_NAMES)] for k in (1, 5)]
            cases.append(_case("single-%s-%d" % (name, i), "single", [{"role": "user", "content": _prompt(name, args)}],
                               tools_named(name, *others), [name]))
    for a, b in PARALLEL:
        text = "In parallel, call %s with %s and call %s with %s." % (a, ARGS[a][0], b, ARGS[b][0])
        cases.append(_case("parallel-%s-%s" % (a, b), "parallel", [{"role": "user", "content": text}],
                           tools_named(a, b), [a, b]))
    for i, text in enumerate(NO_CALL):
        cases.append(_case("no-call-%d" % i, "no_call", [{"role": "user", "content": text}],
                           tools_named("get_weather", "search_docs"), []))
    for name, args, result, nxt in MULTI_TURN:
        hist = _history(name, args, result)
        cases.append(_case("multi-result-%s" % name, "multi_turn_result", hist, tools_named(name, nxt), []))
        follow = hist + [{"role": "user", "content": _prompt(nxt, ARGS[nxt][0])}]
        cases.append(_case("multi-next-%s" % name, "multi_turn_next", follow, tools_named(name, nxt), [nxt]))
    return cases


def prior_calls(messages):
    """Number of tool calls already in the conversation (the next call's ``n``)."""
    return sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")


def id_format_errors(calls, messages):
    """Calls with a wrong id: none, one repeated within the turn, or Kimi's format (``functions.<name>:<n>``) with
    another name or an n that does not count on from the conversation's earlier calls. An id in another format is
    the server's own, not the model's: vLLM 0.32.0's kimi_k3 parser gives its calls no id and the server a random
    ``chatcmpl-tool-<hex>`` (measured on the real engine, docs/sim.md "The rehearsal model")."""
    errors, seen = [], set()
    start = prior_calls(messages)
    for pos, call in enumerate(calls):
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id or call_id in seen:
            errors.append("call %d: id %r is missing or repeated" % (pos, call_id))
            continue
        seen.add(call_id)
        m = ID_PATTERN.match(call_id)
        if call_id.startswith("functions.") and (
                not m or m.group("name") != call.get("name") or int(m.group("n")) != start + pos):
            errors.append("call %d: id %r is not functions.%s:%d" % (pos, call_id, call.get("name"), start + pos))
    return errors
