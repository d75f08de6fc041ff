"""prepare/synth: local text → token shards + data.toml → samples, and the CLI around them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from psyche.cli.main import cli
from psyche.data.factory import local_provider_from_path
from psyche.data.local import LocalDataProvider
from psyche.data.prepare import ByteTokenizer, prepare_corpus
from psyche.data.provider import DataError
from psyche.data.synth import synth_corpus
from psyche.data.tokenfiles import read_local_layout
from psyche.protocol.data_selection import BatchId
from psyche.protocol.locations import TokenSize
from psyche.protocol.run_file import load_data_config

DOCS = ["Hello, wörld! ✓\n", "second document\nwith two lines", "", "ünïcødé ☃ " * 20]


def _texts(tmp_path: Path) -> Path:
    src = tmp_path / "text"
    (src / "nested").mkdir(parents=True)
    for i, doc in enumerate(DOCS):
        (src / ("nested" if i % 2 else ".") / f"{i}.txt").write_text(doc, encoding="utf-8")
    (src / "ignored.bin").write_bytes(b"\xff\xfe")
    return src


def test_byte_tokenizer_round_trip() -> None:
    tok = ByteTokenizer()
    for doc in DOCS:
        ids = tok.encode(doc)
        assert ids.min(initial=0) >= 0 and ids.max(initial=0) < 256
        assert tok.decode(ids) == doc
    assert tok.decode_documents([*tok.encode("ab"), tok.EOS, *tok.encode("c")]) == ["ab", "c"]


def test_prepare_then_load_round_trips_the_text(tmp_path: Path) -> None:
    src, out = _texts(tmp_path), tmp_path / "tokens"
    seen: list[tuple[int, int]] = []
    res = prepare_corpus(
        [src],
        ByteTokenizer(),
        out,
        seq_len=4,
        shard_tokens=50,
        on_progress=lambda d, t: seen.append((d, t)),
    )
    order = ["0.txt", "2.txt", "nested/1.txt", "nested/3.txt"]  # sorted paths under the dir
    expected = [(src / name).read_text(encoding="utf-8") for name in order]
    assert res.n_documents == 4 and len(res.shards) == -(-res.n_tokens // 48)  # 50 → 12·4
    assert seen[-1][0] == seen[-1][1]
    layout = read_local_layout(res.shards[0], TokenSize.FourBytes)
    assert layout.dtype == np.dtype("<u2") and layout.data_offset > 0  # a real .npy header

    stream = np.concatenate([np.load(p) for p in res.shards]).astype(np.int64)
    assert len(stream) == res.n_tokens
    assert ByteTokenizer().decode_documents(stream) == expected

    dc = load_data_config(res.data_toml)
    assert (dc.dir, dc.token_size, dc.seq_len, dc.shuffle_seed) == (
        ".",
        TokenSize.TwoBytes,
        4,
        (0,) * 32,
    )
    provider = LocalDataProvider(dc.resolved_dir(res.data_toml), 4, dc.token_size)
    rows = provider.get_samples(BatchId(0, provider.num_samples - 1)).numpy().ravel()
    assert np.array_equal(rows, stream[: len(rows)])
    assert provider.num_samples == res.n_tokens // 4


def test_prepare_refuses_to_mix_with_old_shards(tmp_path: Path) -> None:
    src, out = _texts(tmp_path), tmp_path / "tokens"
    prepare_corpus([src], ByteTokenizer(), out, seq_len=4, shard_tokens=10)
    with pytest.raises(DataError, match="already holds token files"):
        prepare_corpus([src], ByteTokenizer(), out, seq_len=4)
    res = prepare_corpus([src / "0.txt"], ByteTokenizer(), out, seq_len=4, overwrite=True)
    assert sorted(out.glob("*.npy")) == res.shards


def test_prepare_rejects_a_corpus_shorter_than_one_sample(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text("hi")
    with pytest.raises(DataError, match="fewer than one sample"):
        prepare_corpus([tmp_path / "t.txt"], ByteTokenizer(), tmp_path / "o", seq_len=64)


def test_synth_is_deterministic_and_seeded(tmp_path: Path) -> None:
    a = synth_corpus(tmp_path / "a", 5000, seed=1)
    b = synth_corpus(tmp_path / "b", 5000, seed=1)
    c = synth_corpus(tmp_path / "c", 5000, seed=2)
    text = [p.read_text() for p in a]
    assert text == [p.read_text() for p in b]
    assert text != [p.read_text() for p in c]
    assert sum(map(len, text)) >= 5000 and sum(map(len, text[:-1])) < 5000
    assert all(t.isascii() for t in text)


def test_cli_synth_prepare_and_local_factory(tmp_path: Path) -> None:
    runner = CliRunner()
    corpus, out = tmp_path / "corpus", tmp_path / "out"
    r = runner.invoke(
        cli, ["data", "synth", "--out", str(corpus), "--tokens", "3000", "--seed", "3"]
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        cli,
        [
            "data",
            "prepare",
            "--text",
            str(corpus),
            "--tokenizer",
            "byte",
            "--out",
            str(out),
            "--seq-len",
            "32",
            "--token-size",
            "FourBytes",
            "--shuffle-seed",
            "258",
        ],
    )
    assert r.exit_code == 0, r.output
    dc = load_data_config(out / "data.toml")
    assert dc.token_size is TokenSize.FourBytes and dc.shuffle_seed[:3] == (2, 1, 0)
    provider = local_provider_from_path(out, 32)
    assert provider.num_samples >= 3000 // 32
    r = runner.invoke(cli, ["data", "prepare", "--text", str(corpus), "--out", str(out)])
    assert r.exit_code != 0 and "already holds token files" in r.output


def test_cli_prepare_with_a_local_hugging_face_tokenizer(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "</s>": 1, "hello": 2, "world": 3}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", eos_token="</s>")
    fast.save_pretrained(tmp_path / "tok")
    (tmp_path / "a.txt").write_text("hello world hello")
    (tmp_path / "b.txt").write_text("world zebra")
    out = tmp_path / "out"
    args = ["data", "prepare", "--text", str(tmp_path / "a.txt"), "--text", str(tmp_path / "b.txt")]
    args += ["--tokenizer", str(tmp_path / "tok"), "--out", str(out), "--seq-len", "2"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert list(np.load(out / "tokens-00000.npy")) == [2, 3, 2, 1, 3, 0, 1]
