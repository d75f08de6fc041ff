"""A byte-level tokenizer that is built locally, so tiny demo models need no download.

Byte `b` is id `b`, and BOS, EOS and PAD are 256, 257 and 258 (259 ids): the same ids as
`psyche data prepare --tokenizer byte`, so token files made either way train and decode alike, and
any UTF-8 text round-trips exactly. Special-token strings inside text are not matched: text is
always tokenized as its bytes. The model's embedding is padded to a multiple of 8 rows (264); the
extra rows are simply never produced.

It is a Hugging Face `tokenizers` BPE model with no merges behind a ByteLevel pre-tokenizer, which
maps each byte to a printable stand-in character (the GPT-2 byte alphabet). That makes it an
ordinary `tokenizer.json` that `AutoTokenizer.from_pretrained` loads anywhere, with no custom code.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models
from tokenizers.pre_tokenizers import ByteLevel
from transformers import PreTrainedTokenizerFast

__all__ = [
    "BOS_ID",
    "BOS_TOKEN",
    "BYTE_TOKENS",
    "EOS_ID",
    "EOS_TOKEN",
    "PAD_ID",
    "PAD_TOKEN",
    "byte_tokenizer",
    "padded_vocab_size",
]

BYTE_TOKENS = 256
BOS_TOKEN, EOS_TOKEN, PAD_TOKEN = "<|bos|>", "<|eos|>", "<|pad|>"
BOS_ID, EOS_ID, PAD_ID = BYTE_TOKENS, BYTE_TOKENS + 1, BYTE_TOKENS + 2


def padded_vocab_size(n_tokens: int, multiple: int = 8) -> int:
    """`n_tokens` rounded up to a multiple of `multiple` (aligned embedding rows)."""
    if n_tokens <= 0 or multiple <= 0:
        raise ValueError(f"need positive sizes, got n_tokens={n_tokens}, multiple={multiple}")
    return -(-n_tokens // multiple) * multiple


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte → printable character map (what the ByteLevel pre-tokenizer emits)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping = {b: chr(b) for b in printable}
    # Bytes without a printable glyph of their own get the code points after 255, in byte order.
    extra = 0
    for b in range(BYTE_TOKENS):
        if b not in mapping:
            mapping[b] = chr(BYTE_TOKENS + extra)
            extra += 1
    return mapping


def byte_tokenizer(model_max_length: int) -> PreTrainedTokenizerFast:
    """The byte tokenizer, wrapped for `save_pretrained` (tokenizer.json + tokenizer_config.json).

    Encoding adds no special tokens: a sample is exactly the bytes of its text.
    """
    alphabet = _byte_alphabet()
    vocab = {alphabet[b]: b for b in range(BYTE_TOKENS)}
    vocab.update({BOS_TOKEN: BOS_ID, EOS_TOKEN: EOS_ID, PAD_TOKEN: PAD_ID})
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([BOS_TOKEN, EOS_TOKEN, PAD_TOKEN])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=model_max_length,
        split_special_tokens=True,
    )
    ids = tokenizer.convert_tokens_to_ids([BOS_TOKEN, EOS_TOKEN, PAD_TOKEN])
    if ids != [BOS_ID, EOS_ID, PAD_ID]:  # pragma: no cover - a tokenizers behaviour change
        raise RuntimeError(f"special tokens got ids {ids}, expected {[BOS_ID, EOS_ID, PAD_ID]}")
    return tokenizer
