"""Make the rehearsal model of the real-engine (cpu) profile: a tiny model of Kimi's MLA + MoE family with
written weights and a locally trained tokenizer, laid out as a Hugging Face cache snapshot.

    python3 make_model.py CACHE_DIR REVISION [--model moonshotai/Kimi-K3]

Writes CACHE_DIR/hub/models--<org>--<name>/{refs/main, snapshots/REVISION/...}. Runs inside the engine image
(torch, transformers and tokenizers come from vLLM's CPU build), so the host needs none of them. Deterministic:
locally generated text and written weights, so every cluster-up makes the same files.

Shape: DeepSeek-V3's layout, the architecture family of Kimi's MLA layers. Kimi-K3's MLA head is
kv_lora_rank 512 + qk_rope_head_dim 64 = 576, which is also one of the head sizes vLLM's CPU MLA backend
accepts (320, 512, 576); routed experts plus one shared expert; topk_method noaux_tc (vLLM's DeepSeek loader
expects e_score_correction_bias).

Weights: written, not trained or random (``write_weights``), so that the real engine's Kimi-K3 parsers meet
Kimi-K3's own output. The MLPs and experts add nothing (zero down projections); layer 0's attention tells
each position whether its context holds ``<|close|>``, the bare ``think`` of a think marker and the bare
``tool`` of the chat template's tool declaration (one head each, concentrated on that token); the logits are a
linear function of the current token and those three facts (``SCORES``). What it writes:

- thinking on: a short reasoning (``REASONING``), then ``<|close|>think<|sep|>``, then the content loop;
- thinking off: the content loop (``CONTENT``, eight words round and round until ``max_tokens``: timing and
  capacity measure full-length answers, as with random weights);
- tools declared: ``<|close|>`` as soon as the response channel may close; with tool_choice required, Kimi-K3's
  XTML structural tag then forces the tools channel, and where it leaves a choice the preferences of ``SCORES``
  pick: the tool ``lookup_order`` ("l"), its argument ``order_id`` ("o") with the first content word as value,
  index 0, every element closed as soon as it may, then end of turn (98 tokens on vLLM 0.32.0; 119 after the
  reasoning).

Answers carry no knowledge: accuracy cannot be judged with this model; the protocol, both parsers and the
structured-output path can.
"""
import argparse
import json
import os
import random
import shutil
import sys

SPECIAL_TOKENS = [
    "[BOS]", "[EOS]", "[PAD]", "[UNK]",
    "<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>",
    "<think>", "</think>", "<|open|>", "<|close|>", "<|sep|>",
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
    "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
]

# Kimi's chat format: role markers, <|im_middle|> between role and content, <|im_end|> after each turn;
# tools declared in a system turn; the assistant's tool calls in Kimi's section markers.
CHAT_TEMPLATE = (
    "{%- if tools -%}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}<|im_system|>system<|im_middle|>"
    "{%- elif m['role'] == 'user' -%}<|im_user|>user<|im_middle|>"
    "{%- elif m['role'] == 'tool' -%}<|im_system|>tool<|im_middle|>"
    "{%- else -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
    "{%- if m['content'] is string -%}{{ m['content'] }}"
    "{%- elif m['content'] -%}{%- for part in m['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{%- if m.get('tool_calls') -%}<|tool_calls_section_begin|>{%- for tc in m['tool_calls'] -%}"
    "<|tool_call_begin|>{{ tc['id'] }}<|tool_call_argument_begin|>"
    "{{ tc['function']['arguments'] if tc['function']['arguments'] is string"
    " else tc['function']['arguments'] | tojson }}<|tool_call_end|>"
    "{%- endfor -%}<|tool_calls_section_end|>{%- endif -%}"
    "<|im_end|>{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>"
    "{%- if thinking is defined and not thinking -%}<|open|>response<|sep|>"
    "{%- else -%}<|open|>think<|sep|>{%- endif -%}{%- endif -%}"
)

CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "vocab_size": 2048,
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 2,
    "first_k_dense_replace": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
    "q_lora_rank": None,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 32,
    "v_head_dim": 32,
    "max_position_embeddings": 8192,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def corpus(seed=0, lines=4000):
    """Locally generated training text: words, digits, JSON and code-like lines (no download)."""
    rnd = random.Random(seed)
    words = ("the a of to and in is it you that was for on are with as be at one have this from by hot word but "
             "what some we can out other were all there when up use your how said an each she which do their time "
             "if will way about many then them write would like so these her long make thing see him two has look "
             "more day could go come did number sound no most people my over know water than call first who may "
             "down side been now find weather city temperature receipt total price tool call function arguments "
             "name json true false null think answer question").split()
    out = []
    for i in range(lines):
        kind = i % 4
        if kind == 0:
            out.append(" ".join(rnd.choice(words) for _word in range(rnd.randint(5, 20))) + ".")
        elif kind == 1:
            out.append("%d + %d = %d" % (rnd.randint(0, 999), rnd.randint(0, 999), rnd.randint(0, 1998)))
        elif kind == 2:
            out.append(json.dumps({rnd.choice(words): rnd.randint(0, 100), "name": rnd.choice(words)}))
        else:
            out.append("def %s(x):\n    return x * %d" % (rnd.choice(words), rnd.randint(1, 9)))
    return out


def make_tokenizer(dest):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=CONFIG["vocab_size"], special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="[BOS]", eos_token="<|im_end|>",
                                   pad_token="[PAD]", unk_token="[UNK]")
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = CONFIG["max_position_embeddings"]
    fast.save_pretrained(dest)


REASONING = [" what", " number", " would", " come"]
CONTENT = [" the", " weather", " in", " this", " city", " was", " hot", "."]
# What layer 0's attention finds in a position's context, one head each: a <|close|> (a channel has closed), the
# bare "think" of a think marker (thinking on), the bare "tool" of the template's tool declaration.
FEATURES = ("<|close|>", "think", "tool")
# The tokens with a hidden dimension of their own (after dimension 0, on everywhere): the markers, the features' bare
# words and both chains.
NAMED = ["<|sep|>", "<|close|>", "think", "tool"] + REASONING + CONTENT
# Logit units, times SCALE. "bias": every position; (token, next): the current token; (feature, next): the
# feature found. <|close|> scores 8 + 6 * (closed + tools - thinking): 14 or more exactly where the response
# channel should close for a call (tools declared, and no reasoning still open), otherwise at most 8, below the
# chains' 11. The reasoning starts after the think marker only (9 + 4 < 11 + 2), and not again once closed.
SCORES = {
    "bias": {"<|close|>": 8, "<|open|>": 1.5, "<|sep|>": 1.5, '"': 1, "l": 1, "o": 1, "0": 0.5},
    "next": dict([(("<|sep|>", CONTENT[0]), 11), (("<|sep|>", REASONING[0]), 9),
                  ((REASONING[-1], "<|close|>"), 15), (("<|close|>", "think"), 20), (("think", "<|sep|>"), 20)]
                 + [((a, b), 11) for a, b in zip(REASONING, REASONING[1:])]
                 + [((a, b), 11) for a, b in zip(CONTENT, CONTENT[1:] + CONTENT[:1])]),
    "feature": {("<|close|>", "<|close|>"): 6, ("tool", "<|close|>"): 6, ("think", "<|close|>"): -6,
                ("think", REASONING[0]): 4, ("<|close|>", REASONING[0]): -8},
}
SCALE = 3.0
# A feature head's key for its token: the normalised latent (sqrt(512) = 22.6) times KEY_GAIN against a query of
# 5.7-8 scores 26-37 over 0 elsewhere, so a context of 4,096 tokens leaves the head on its token.
KEY_GAIN = 2.0


def _dims(tok):
    """Hidden dimensions: 0 is on at every position, then one per token with behaviour of its own, then one per
    feature."""
    ids = {}
    for text in NAMED + [t for t in SCORES["bias"] if t not in NAMED]:
        got = tok.encode(text, add_special_tokens=False)
        if len(got) != 1:
            raise SystemExit("make_model: %r is %d tokens for this tokenizer, the weights need one" % (text, len(got)))
        ids[text] = got[0]
    dim = {t: 1 + i for i, t in enumerate(NAMED)}
    feat = {f: 1 + len(NAMED) + i for i, f in enumerate(FEATURES)}
    return ids, dim, feat


def _embeddings(sd, ids, dim):
    emb = sd["model.embed_tokens.weight"]
    emb[:, 0] = 1.0
    for text, d in dim.items():
        emb[ids[text], d] = 1.0


def _feature_heads(sd, dim, feat):
    """Layer 0's attention: head h attends to the positions of FEATURES[h] (key and value from its latent slot h,
    no rotary part) with a query from dimension 0, and writes 1.0 into that feature's dimension."""
    heads, nope, rope, v = (CONFIG[k] for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim",
                                                "v_head_dim"))
    pre = "model.layers.0.self_attn."
    for h, f in enumerate(FEATURES):
        sd[pre + "kv_a_proj_with_mqa.weight"][h, dim[f]] = 1.0
        sd[pre + "kv_b_proj.weight"][h * (nope + v), h] = KEY_GAIN
        sd[pre + "kv_b_proj.weight"][h * (nope + v) + nope, h] = 1.0
        sd[pre + "q_proj.weight"][h * (nope + rope), 0] = 1.0
        sd[pre + "o_proj.weight"][feat[f], h * v] = CONFIG["kv_lora_rank"] ** -0.5


def _logits(sd, ids, dim, feat):
    head = sd["lm_head.weight"]
    for text, value in SCORES["bias"].items():
        head[ids[text], 0] = value * SCALE
    for (cur, nxt), value in SCORES["next"].items():
        head[ids[nxt], dim[cur]] = value * SCALE
    for (f, nxt), value in SCORES["feature"].items():
        head[ids[nxt], feat[f]] = value * SCALE


def write_weights(model, tok):
    """Every weight zero but the norms (one) and the state machine of the module docstring."""
    import torch

    sd = {k: torch.zeros_like(t, dtype=torch.float32) for k, t in model.state_dict().items()}
    for k in sd:
        if k.endswith("norm.weight"):
            sd[k] += 1.0
    ids, dim, feat = _dims(tok)
    _embeddings(sd, ids, dim)
    _feature_heads(sd, dim, feat)
    _logits(sd, ids, dim, feat)
    model.load_state_dict({k: t.to(torch.bfloat16) for k, t in sd.items()})


def make_weights(dest, shard_size, tok):
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    cfg = dict(CONFIG)
    cfg.pop("architectures")
    cfg.pop("model_type")
    cfg["dtype"] = cfg.pop("torch_dtype")
    config = DeepseekV3Config(**cfg, bos_token_id=0, eos_token_id=8, pad_token_id=2)
    model = DeepseekV3ForCausalLM(config).to(torch.bfloat16)
    write_weights(model, tok)
    model.save_pretrained(dest, safe_serialization=True, max_shard_size=shard_size)
    return sum(p.numel() for p in model.parameters())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache_dir")
    ap.add_argument("revision")
    ap.add_argument("--model", default="moonshotai/Kimi-K3")
    ap.add_argument("--shard-size", default="400KB", help="several shards and an index, like a real checkpoint")
    a = ap.parse_args(argv)
    repo = os.path.join(a.cache_dir, "hub", "models--" + a.model.replace("/", "--"))
    snap = os.path.join(repo, "snapshots", a.revision)
    if os.path.exists(os.path.join(snap, "model.safetensors.index.json")):
        print(json.dumps({"model": a.model, "revision": a.revision, "path": snap, "made": False}))
        return 0
    tmp = snap + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    make_tokenizer(tmp)
    from transformers import AutoTokenizer
    params = make_weights(tmp, a.shard_size, AutoTokenizer.from_pretrained(tmp))
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(a.revision)
    shutil.rmtree(snap, ignore_errors=True)
    os.replace(tmp, snap)
    print(json.dumps({"model": a.model, "revision": a.revision, "path": snap, "made": True, "parameters": params}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
