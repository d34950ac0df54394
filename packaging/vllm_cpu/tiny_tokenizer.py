"""Write the tokenizer of meshdeck's tiny DeepSeek-shaped vLLM models (resources/vllm-models/*/tokenizer.json).

vLLM needs a tokenizer beside `config.json` to serve text completions. With `--load-format dummy` the
weights are random, so the tokenizer only has to cover every token id the model can emit (the config's
`vocab_size`, 1024) and round-trip any text. This one is a byte-level BPE built here, from the standard
library alone: DeepSeek's two special tokens (ids 0 and 1, as in DeepSeek's own tokenizer), the 256
byte symbols GPT-2's byte-level scheme uses, then two-symbol merges (space+letter, letter pairs, digit
pairs) up to the vocabulary size. Deterministic: the same bytes every run (a test checks the files in
the repository are exactly what this writes).

    python packaging/vllm_cpu/tiny_tokenizer.py resources/vllm-models/tiny-deepseek-v3
"""

from __future__ import annotations

import argparse
import json
import string
from pathlib import Path

VOCAB_SIZE = 1024
BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"


def byte_symbols() -> list[str]:
    """GPT-2's bytes_to_unicode: each byte as one printable character, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    symbols: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in symbols:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


def merges(count: int) -> list[tuple[str, str]]:
    space = byte_symbols()[ord(" ")]
    pairs = [(space, c) for c in string.ascii_lowercase + string.ascii_uppercase]
    pairs += [(a, b) for a in string.ascii_lowercase for b in string.ascii_lowercase]
    pairs += [(a, b) for a in string.digits for b in string.digits]
    if len(pairs) < count:
        raise ValueError(f"only {len(pairs)} merges are defined, {count} asked")
    return pairs[:count]


def special_token(token_id: int, content: str) -> dict:
    flags = dict.fromkeys(("single_word", "lstrip", "rstrip", "normalized"), False)
    return {"id": token_id, "content": content, **flags, "special": True}


def tokenizer_document(vocab_size: int = VOCAB_SIZE) -> dict:
    specials = [BOS, EOS]
    vocab: dict[str, int] = {token: index for index, token in enumerate(specials)}
    for symbol in byte_symbols():
        vocab[symbol] = len(vocab)
    merged = merges(vocab_size - len(vocab))
    for left, right in merged:
        vocab[left + right] = len(vocab)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [special_token(vocab[token], token) for token in specials],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [
                {"SpecialToken": {"id": BOS, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {BOS: {"id": BOS, "ids": [vocab[BOS]], "tokens": [BOS]}},
        },
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [[left, right] for left, right in merged],
        },
    }


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
    }


def write(directory: Path) -> list[Path]:
    written = []
    for name, document in (("tokenizer.json", tokenizer_document()), ("tokenizer_config.json", tokenizer_config())):
        path = directory / name
        path.write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        written.append(path)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="the model directory (holding config.json)")
    args = parser.parse_args()
    for path in write(args.directory):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
