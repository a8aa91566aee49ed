#!/usr/bin/env python3
"""Regenerates the GPT-2-style BPE fixture in this folder.

Needs the Hugging Face `tokenizers` package (pip install tokenizers); the
tests only read what it writes, so neither the test machine nor CI needs it.

Trains a small byte-level BPE exactly as GPT-2's is configured (ByteLevel
pre-tokenizer, add_prefix_space False, GPT-2's regex, "<|endoftext|>" as
the special token) on the varied text below, saves vocab.json and
merges.txt as Hugging Face writes them, and writes expected.jsonl: one
{"text": ..., "ids": [...]} per probe, the ids being what `tokenizers`
encodes. The probes are not the training text, so many of their pre-tokens
end up as several merged pieces and some as single bytes.

big.json describes one document too large to commit: the probes joined by
"\n", with a final "\n", repeated `repeat` times (over 8 MiB, so ddpprep
encodes it in place and in pieces); it records the count and the SHA-256 of
its ids as little-endian uint16, which is what a shard holds.

Usage: python3 make-fixture.py [OUTDIR]   (default: this script's folder)
"""
import hashlib
import json
import os
import struct
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

TRAIN = [
    "The quick brown fox jumps over the lazy dog. It's what they're doing, "
    "isn't it? We've seen I'm sure you'll say he'd go.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod "
    "tempor incididunt ut labore et dolore magna aliqua.",
    "Numbers: 0 1 2 3 42 1234567890 3.14159 2,718 -17 +5e10 0x1F 100%",
    "Punctuation!!! ... ??? --- *** ((( ))) [[]] {{}} <<>> @@ ## $$ ^^ && ~~",
    "Der Bär läuft über die Straße. Ça va très bien, merci! ¿Qué tal? Ñandú.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. Привет мир!",
    "Γειά σου Κόσμε. Αλφάβητο ελληνικό. שלום עולם. مرحبا بالعالم ١٢٣٤",
    "日本語のテキストです。東京は大きい都市です。中文文本，你好世界！한국어 텍스트입니다.",
    "हिन्दी पाठ। नमस्ते दुनिया १२३ ४५६. தமிழ் உரை. ภาษาไทย สวัสดี",
    "Emoji: 😀 😃 🎉 👍🏽 🇫🇷 ❤️ ✨ 🚀🚀🚀",
    "def main():\n    return 0\n\n\tif x == y:\n\t\tprint('tabs')\n",
    "   leading spaces and trailing spaces   \n\n\n  multiple\nnewlines\r\n",
    "Mixed\u00a0no-break\u2003em space\u3000ideographic space and\u2028line sep",
]

PROBES = [
    "Hello world",
    "hello, world!",
    "The quick brown fox.",
    "It's John's book; they're here, we've gone, I'm ok, you'll see, he'd go.",
    "don't won't can't shouldn't",
    "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE  (upper case: not contractions in GPT-2's pattern)",
    "x's's''s",
    "   three leading spaces",
    "trailing spaces   ",
    "a  b   c    d",
    "tab\tseparated\t\tvalues",
    "line one\nline two\n\nline four\n",
    "windows\r\nline\r\nends",
    "\n\n\n",
    "    ",
    " ",
    "mixed \t \n whitespace \n\t ",
    "numbers 1234567890 and 3.14159 and 1,000,000",
    "x1y2z3 abc123def 42nd",
    "!!!??? ... ,,, ;;; :::",
    "(parens) [brackets] {braces} <angles>",
    "email@example.com https://example.org/path?q=1&r=2#frag",
    "Ça va? Über straße, naïve café, Ñandú.",
    "Привет, мир! Съешь ещё.",
    "Γειά σου Κόσμε",
    "שלום עולם",
    "مرحبا بالعالم ١٢٣",
    "日本語のテキスト、東京。",
    "你好，世界！",
    "한국어 텍스트",
    "नमस्ते दुनिया १२३",
    "ภาษาไทย สวัสดี",
    "emoji 😀🎉 👍🏽 🇫🇷 ❤️ end",
    "🚀🚀🚀",
    "no\u00a0break\u2003em\u3000ideo",
    "fullwidth ＡＢＣ１２３",
    "roman Ⅻ and superscript ² and fraction ½",
    "zero\u200bwidth joiner\u200d",
    "next\u0085line \x1cfile sep\u2028line sep\u2029para \u180emongolian\ufeffbom",
    "control\x00\x01\x7f chars \x0b\x0cvt ff",
    "def f(x):\n    return x  # comment\n",
    "",
    "a",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
    "Mixed 42 Ünïcödé\t\ttabs  and   spaces\n",
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        min_frequency=1,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TRAIN * 3, trainer=trainer)
    tok.model.save(out)  # vocab.json + merges.txt, as Hugging Face writes them
    with open(os.path.join(out, "expected.jsonl"), "w", encoding="utf-8") as f:
        for text in PROBES:
            ids = tok.encode(text).ids
            assert tok.decode(ids) == text, text
            f.write(json.dumps({"text": text, "ids": ids}, ensure_ascii=False) + "\n")
    repeat = 6500
    ids = tok.encode(("\n".join(PROBES) + "\n") * repeat).ids
    digest = hashlib.sha256(struct.pack("<%dH" % len(ids), *ids)).hexdigest()
    with open(os.path.join(out, "big.json"), "w") as f:
        json.dump({"repeat": repeat, "n_ids": len(ids), "sha256": digest}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
