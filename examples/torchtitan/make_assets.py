"""Makes the two inputs TorchTitan's debug configs read and its wheel lacks:
a tokenizer (`tests/assets/tokenizer`: tokenizer.json and
tokenizer_config.json, byte-level BPE with Llama 3's special token names)
and a small `c4_test` text data set (`tests/assets/c4_test/data.json`, one
{"text": ...} object a line, what `load_dataset(path, split="train")` reads).
Both are made in place from seeded pseudo-English, so every machine makes
the same files.

    python examples/torchtitan/make_assets.py [DIR]   # DIR defaults to .

writes DIR/tests/assets/{tokenizer,c4_test}; run TorchTitan from DIR."""
import json
import os
import random
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def documents(n, seed=0):
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in "aeiou"] + ["th", "st", "qu", "ng"]
    words = sorted({"".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(600)})
    docs = []
    for _ in range(n):
        sentences = []
        for _ in range(rng.randint(3, 12)):
            s = " ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
            sentences.append(s[0].upper() + s[1:] + rng.choice(".!?"))
        docs.append(" ".join(sentences))
    return docs


def main(root):
    assets = os.path.join(root, "tests", "assets")
    docs = documents(2000)
    data_dir = os.path.join(assets, "c4_test")
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(data_dir, "data.json"), "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(docs, trainer)
    tok_dir = os.path.join(assets, "tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    tok.save(os.path.join(tok_dir, "tokenizer.json"))
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": False,
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=1)
    print(f"wrote {tok_dir} ({tok.get_vocab_size()} tokens) and {data_dir} ({len(docs)} documents)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
