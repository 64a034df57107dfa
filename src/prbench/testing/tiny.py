"""Tiny random tokenizers and models, saved to disk like real checkpoints.

Why: tests must go through the same `AutoTokenizer` / `AutoModel*.from_pretrained(dir)` code
that users hit, offline, in milliseconds. Everything here is deterministic given `seed`.

The tokenizer is byte-level: one token per byte (256), plus special tokens
(`<|pad|>`, `<|bos|>`, `<|eos|>`, `<|system|>`, `<|user|>`, `<|assistant|>`, `<|end|>`) and four
merges (" A", " B", " C", " D") so that single-token answer letters exist with and without a
leading space (needed to test choice scoring). Its post-processor adds `<|bos|>` like Llama's,
and the chat template *also* starts with `<|bos|>`: a caller that tokenizes the rendered
template with `add_special_tokens=True` gets a double BOS, which is exactly the bug tests check.

Chat format (`CHAT_TEMPLATE`)::

    <|bos|><|system|>...<|end|><|user|>...<|end|><|assistant|>...<|end|>   (+ <|assistant|> as generation prompt)

Typical use::

    from prbench.testing.tiny import make_tiny_causal_lm
    path = make_tiny_causal_lm(tmp_path / "lm", seed=0)       # AutoModelForCausalLM.from_pretrained(path)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from prbench.engines.transformers_engine import quiet_progress

PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
SYSTEM, USER, ASSISTANT, END = "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"
SPECIAL_TOKENS = (PAD, BOS, EOS, SYSTEM, USER, ASSISTANT, END)
MERGED_LETTERS = ("A", "B", "C", "D")

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unsupported role: ' + message['role']) }}"
    "{% endif %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

Arch = Literal["llama", "qwen2"]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what the ByteLevel pre-tokenizer emits)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    mapping: dict[int, str] = {}
    extra = 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def build_tiny_tokenizer(chat_template: bool = True, pad_token: bool = True) -> Any:
    """An in-memory `PreTrainedTokenizerFast`: byte-level BPE with 256 byte tokens and specials.

    Ids: bytes 0-255 in byte order, then the special tokens, then the merged " A".." D".
    `pad_token=False` leaves `pad_token` unset (to test engines' fallbacks);
    `chat_template=False` leaves `chat_template` unset (plain-format fallback).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    b2u = _bytes_to_unicode()
    vocab: dict[str, int] = {b2u[b]: b for b in range(256)}
    for special in SPECIAL_TOKENS:
        vocab[special] = len(vocab)
    space = b2u[ord(" ")]
    merges = [(space, letter) for letter in MERGED_LETTERS]
    for a, b in merges:
        vocab[a + b] = len(vocab)

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    bos_id = vocab[BOS]
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
            ),
        ]
    )
    kwargs: dict[str, Any] = {
        "tokenizer_object": tok,
        "bos_token": BOS,
        "eos_token": EOS,
        "model_max_length": 1024,
        "padding_side": "right",
    }
    if pad_token:
        kwargs["pad_token"] = PAD
    hf_tok = PreTrainedTokenizerFast(**kwargs)
    hf_tok.add_special_tokens({"additional_special_tokens": [SYSTEM, USER, ASSISTANT, END]})
    if chat_template:
        hf_tok.chat_template = CHAT_TEMPLATE
    return hf_tok


def _save_tokenizer(tok: Any, path: Path, pad_token: bool) -> None:
    """save_pretrained, then pin `unk_token` (and `pad_token` when absent) to null in the config.

    Why: for some model types (qwen2) AutoTokenizer picks the architecture's own tokenizer class,
    whose defaults would *add* an `<|endoftext|>` unk/pad token beyond the model's vocabulary.
    """
    import json

    tok.save_pretrained(path)
    cfg_path = path / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["unk_token"] = None
    if not pad_token:
        cfg["pad_token"] = None
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def make_tiny_tokenizer(directory: str | Path, chat_template: bool = True, pad_token: bool = True) -> Path:
    """Save the tiny tokenizer to `directory`; `AutoTokenizer.from_pretrained(directory)` loads it."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    _save_tokenizer(build_tiny_tokenizer(chat_template=chat_template, pad_token=pad_token), path, pad_token)
    return path


def _config(arch: Arch, tokenizer: Any, pad_token: bool, num_labels: int | None, hidden_size: int) -> Any:
    from transformers import LlamaConfig, Qwen2Config

    ids = {
        "bos_token_id": tokenizer.convert_tokens_to_ids(BOS),
        "eos_token_id": tokenizer.convert_tokens_to_ids(EOS),
        "pad_token_id": tokenizer.convert_tokens_to_ids(PAD) if pad_token else None,
    }
    common: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        # Larger than the usual 0.02 so that logits are peaked: fewer near-ties in argmax,
        # which keeps "batched == unbatched" checks meaningful rather than flaky.
        "initializer_range": 0.2,
        "tie_word_embeddings": False,
        **ids,
    }
    if num_labels is not None:
        common["num_labels"] = num_labels
    if arch == "llama":
        return LlamaConfig(**common)
    if arch == "qwen2":
        return Qwen2Config(**common, use_sliding_window=False)
    raise ValueError(f"unknown tiny architecture {arch!r} (llama or qwen2)")


def _build_model(auto_cls: Any, directory: str | Path, seed: int, arch: Arch, chat_template: bool, pad_token: bool,
                 num_labels: int | None, hidden_size: int) -> tuple[Path, Any, Any, Any]:
    """The folder, tokenizer, config and seeded random model every tiny model starts from."""
    import torch

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    tok = build_tiny_tokenizer(chat_template=chat_template, pad_token=pad_token)
    config = _config(arch, tok, pad_token, num_labels, hidden_size)
    with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG untouched
        torch.manual_seed(seed)
        model = auto_cls.from_config(config)
    return path, tok, config, model.eval()


def _save_model(model: Any, tok: Any, path: Path, pad_token: bool) -> Path:
    with quiet_progress():
        model.save_pretrained(path)
    _save_tokenizer(tok, path, pad_token)
    return path


def make_tiny_causal_lm(
    directory: str | Path,
    seed: int = 0,
    arch: Arch = "llama",
    chat_template: bool = True,
    pad_token: bool = True,
    hidden_size: int = 32,
) -> Path:
    """Save a random tiny causal LM + tokenizer (safetensors) to `directory`; return the path.

    Loadable with `AutoModelForCausalLM.from_pretrained(directory)`. The generation config
    stops on both `<|eos|>` and `<|end|>` (end of an assistant turn).
    """
    from transformers import AutoModelForCausalLM, GenerationConfig

    path, tok, config, model = _build_model(AutoModelForCausalLM, directory, seed, arch, chat_template, pad_token,
                                            None, hidden_size)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=[config.eos_token_id, tok.convert_tokens_to_ids(END)],
        pad_token_id=config.pad_token_id,
    )
    return _save_model(model, tok, path, pad_token)


def make_tiny_seq_classifier(
    directory: str | Path,
    num_labels: int = 1,
    seed: int = 0,
    arch: Arch = "llama",
    chat_template: bool = True,
    pad_token: bool = True,
    hidden_size: int = 32,
) -> Path:
    """Save a random tiny sequence classifier (a scalar reward model when `num_labels=1`).

    Loadable with `AutoModelForSequenceClassification.from_pretrained(directory)`. With
    `pad_token=False` the config has no `pad_token_id`, so batched scoring must fall back.
    """
    from transformers import AutoModelForSequenceClassification

    path, tok, _, model = _build_model(AutoModelForSequenceClassification, directory, seed, arch, chat_template,
                                       pad_token, num_labels, hidden_size)
    return _save_model(model, tok, path, pad_token)
