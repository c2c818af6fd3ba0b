"""The rehearsal model's written weights as a state machine (sim/engine/make_model.py, SCORES): what it writes in
each case the cpu smoke sends, decided by the same linear scores the weights hold, without torch. The engine's
own answers are checked in tests/integration/test_real_engine.py (a)."""
import pytest

from sim.engine import make_model as mm

SCORED = sorted(set(mm.SCORES["bias"]) | {n for _c, n in mm.SCORES["next"]}
                | {n for _f, n in mm.SCORES["feature"]})
OTHER = "<any other token>"  # every token the tables do not name scores 0
CLOSE_THINK = ["<|close|>", "think", "<|sep|>"]


def scores(cur, seen):
    """Score of every named next token after ``cur`` with the features ``seen`` (a set of FEATURES) on."""
    out = {OTHER: 0.0}
    for nxt in SCORED:
        out[nxt] = (mm.SCORES["bias"].get(nxt, 0) + mm.SCORES["next"].get((cur, nxt), 0)
                    + sum(mm.SCORES["feature"].get((f, nxt), 0) for f in seen))
    return out


def pick(cur, seen, allowed=None):
    """(winner, its lead over the runner-up) among ``allowed`` (all by default)."""
    ranked = sorted(((s, t) for t, s in scores(cur, seen).items() if allowed is None or t in allowed), reverse=True)
    return ranked[0][1], ranked[0][0] - ranked[1][0]


def walk(prompt_seen, steps):
    """Free decoding from the generation prompt's last token (<|sep|>), features from the prompt plus the output."""
    seen, cur, out, leads = set(prompt_seen), "<|sep|>", [], []
    for _step in range(steps):
        cur, lead = pick(cur, seen)
        out.append(cur)
        leads.append(lead)
        seen |= {cur} & set(mm.FEATURES)
    return out, min(leads)


def test_thinking_on_reasons_closes_the_think_channel_then_loops_the_content():
    out, lead = walk({"think"}, 24)
    assert out == mm.REASONING + CLOSE_THINK + (mm.CONTENT * 3)[:24 - len(mm.REASONING) - 3]
    assert lead >= 2  # times SCALE and the final norm (3.6 at least): 21 nats or more at temperature 1


def test_thinking_off_loops_the_content_and_never_ends_the_turn():
    out, lead = walk(set(), 20)
    assert out == (mm.CONTENT * 3)[:20] and lead >= 2


@pytest.mark.parametrize("prompt_seen, before", [({"tool"}, []), ({"tool", "think"}, mm.REASONING + CLOSE_THINK)])
def test_tools_declared_close_the_response_channel_first(prompt_seen, before):
    out, lead = walk(prompt_seen, len(before) + 1)
    assert out == before + ["<|close|>"] and lead >= 2


def test_inside_the_forced_call_the_preferences_pick_lookup_order_its_key_index_0_and_close_early():
    in_call = {"tool", "<|close|>"}
    # the tool name: "get_weather" or "lookup_order"; the key: "order_id" or "include_items"
    assert pick('"', in_call, {"g", "l", OTHER})[0] == "l" and pick('"', in_call, {"o", "i", OTHER})[0] == "o"
    # index="[0-9]+": a first digit, then the closing quote
    assert pick('"', in_call, {"0", OTHER})[0] == "0" and pick("0", in_call, {'"', "0", OTHER})[0] == '"'
    # a string value needs one character: the first content word, then <|close|> as soon as it may
    assert pick("<|sep|>", in_call, set(mm.CONTENT) | {OTHER})[0] == mm.CONTENT[0]
    assert pick(mm.CONTENT[0], in_call)[0] == "<|close|>"
    # after an argument or a call: close rather than open another
    assert pick("<|sep|>", in_call, {"<|open|>", "<|close|>"})[0] == "<|close|>"
    # forced marker text: the marker token over its spelling in characters
    assert pick("response", in_call, {"<|sep|>", OTHER})[0] == "<|sep|>"
    assert pick("<|sep|>", in_call, {"<|open|>", OTHER})[0] == "<|open|>"


def test_every_token_the_weights_name_is_one_of_the_tokenizer_and_the_features_are_dims_of_their_own():
    named = mm.NAMED
    assert len(set(named)) == len(named) and 1 + len(named) + len(mm.FEATURES) <= mm.CONFIG["hidden_size"]
    assert set(mm.FEATURES) <= set(named) and len(mm.FEATURES) <= mm.CONFIG["num_attention_heads"]
    assert set(mm.REASONING + mm.CONTENT) <= set(named)
    assert {"<|open|>", "<|close|>", "<|sep|>"} <= set(mm.SPECIAL_TOKENS)
