"""Make the rehearsal model of the real-engine (cpu) profile: a tiny, random-weight model of Kimi's MLA + MoE
family with a locally trained tokenizer, laid out as a Hugging Face cache snapshot.

    python3 make_model.py CACHE_DIR REVISION [--model moonshotai/Kimi-K3]

Writes CACHE_DIR/hub/models--<org>--<name>/{refs/main, snapshots/REVISION/...}. Runs inside the engine image
(torch, transformers and tokenizers come from vLLM's CPU build), so the host needs none of them. Deterministic:
a fixed seed and locally generated text, so every cluster-up makes the same files.

Shape: DeepSeek-V3's layout, the architecture family of Kimi's MLA layers. Kimi-K3's MLA head is
kv_lora_rank 512 + qk_rope_head_dim 64 = 576, which is also one of the head sizes vLLM's CPU MLA backend
accepts (320, 512, 576); routed experts plus one shared expert; topk_method noaux_tc (vLLM's DeepSeek loader
expects e_score_correction_bias). Random weights: the text is random, so accuracy cannot be judged with it.
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


def make_weights(dest, shard_size):
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(0)
    cfg = dict(CONFIG)
    cfg.pop("architectures")
    cfg.pop("model_type")
    cfg["dtype"] = cfg.pop("torch_dtype")
    config = DeepseekV3Config(**cfg, bos_token_id=0, eos_token_id=8, pad_token_id=2)
    model = DeepseekV3ForCausalLM(config).to(torch.bfloat16)
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
    params = make_weights(tmp, a.shard_size)
    make_tokenizer(tmp)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(a.revision)
    shutil.rmtree(snap, ignore_errors=True)
    os.replace(tmp, snap)
    print(json.dumps({"model": a.model, "revision": a.revision, "path": snap, "made": True, "parameters": params}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
