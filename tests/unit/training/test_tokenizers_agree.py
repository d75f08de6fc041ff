"""`psyche data prepare --tokenizer byte` and the tokenizer saved by `psyche model init` agree."""

from __future__ import annotations

from psyche.data.prepare import ByteTokenizer
from psyche.training.tokenizer import BOS_ID, EOS_ID, PAD_ID, byte_tokenizer


def test_byte_ids_and_specials_match() -> None:
    text = "héllo, wörld\n\t~"
    data_ids = ByteTokenizer().encode(text).tolist()
    hf = byte_tokenizer(model_max_length=64)
    assert hf.encode(text, add_special_tokens=False) == data_ids
    assert (ByteTokenizer.BOS, ByteTokenizer.EOS, ByteTokenizer.PAD) == (BOS_ID, EOS_ID, PAD_ID)
    assert hf.decode(data_ids) == text
