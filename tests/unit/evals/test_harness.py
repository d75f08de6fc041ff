"""The harness against a brute-force reference: one sequence at a time, no batching or padding,
with tokens built from the byte tokenizer's definition (byte b is id b; EOS 257 starts a doc)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from tokenizers import processors
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from psyche.evals import (
    EvalHarness,
    EvalTask,
    MultipleChoiceDoc,
    synthetic_docs,
    tokenizer_from_files,
)
from psyche.evals.scoring import ChoiceTokens, continuation_logprobs, start_tokens
from psyche.training import Preset, byte_tokenizer, init_model, llama_config, write_model_dir
from psyche.training.tokenizer import BOS_ID, EOS_ID

ROOMY = Preset(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, max_seq_len=256)
SHORT = Preset(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, max_seq_len=32)

DOCS = (
    MultipleChoiceDoc("The cat sat on the", ("mat", "moon", "a very long ending here"), 0),
    MultipleChoiceDoc("Numbers: 1 2 3", ("4", "5 6 7 8 9", "x", "é ü"), 1),
    MultipleChoiceDoc("Colour of the sky?", ("blue", "green"), 1),
    MultipleChoiceDoc("Ends in a space ", ("yes", "no", "maybe so"), 2),
    MultipleChoiceDoc("Q", ("a", "bb", "ccc", "dddd", "eeeee"), 3),
    MultipleChoiceDoc("Pick one:", ("up", "down", "left", "right"), 0),
)
TASK = EvalTask("mixed", DOCS)


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    return init_model(llama_config(ROOMY), seed=3)


@pytest.fixture(scope="module")
def short_model() -> LlamaForCausalLM:
    return init_model(llama_config(SHORT), seed=4)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return byte_tokenizer(256)


def reference_logprob(model: torch.nn.Module, context: list[int], cont: list[int]) -> float:
    """Sum of log p(token | all before) over `cont`, one unpadded sequence; a sequence longer
    than the model's positions keeps its last max+1 tokens (the final one is only a target)."""
    seq = (context + cont)[-(model.config.max_position_embeddings + 1) :]
    n = min(len(cont), len(seq) - 1)
    with torch.no_grad():
        logits = model(torch.tensor([seq[:-1]])).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    return sum(float(logprobs[t - 1, seq[t]]) for t in range(len(seq) - n, len(seq)))


def reference_accuracies(
    model: torch.nn.Module, prompts: list[str], docs: list[MultipleChoiceDoc]
) -> tuple[float, float]:
    acc = norm = 0
    for prompt, doc in zip(prompts, docs, strict=True):
        conts = [c if prompt[-1].isspace() else " " + c for c in doc.choices]
        context = [EOS_ID, *prompt.encode()]
        lps = [reference_logprob(model, context, list(c.encode())) for c in conts]
        per_byte = [lp / len(c.encode()) for lp, c in zip(lps, conts, strict=True)]
        acc += max(range(len(lps)), key=lps.__getitem__) == doc.gold
        norm += max(range(len(lps)), key=per_byte.__getitem__) == doc.gold
    return acc / len(docs), norm / len(docs)


def test_tokens_and_logprobs_match_the_reference(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast
) -> None:
    start = start_tokens(tokenizer)
    assert start == (EOS_ID,)  # the byte tokenizer adds no BOS of its own
    items, expected = [], []
    for doc in DOCS:
        for choice in doc.choices:
            cont = choice if doc.context.endswith(" ") else " " + choice
            item = ChoiceTokens.build(tokenizer, start, doc.context, cont)
            assert item.context == (EOS_ID, *doc.context.encode())
            assert item.continuation == tuple(cont.encode())
            items.append(item)
            expected.append(reference_logprob(model, list(item.context), list(cont.encode())))
    # One padded batch of every choice of every doc (lengths 2 to 24 bytes) against the reference.
    batched = continuation_logprobs(model.eval(), items, max_len=256)
    assert batched == pytest.approx(expected, abs=1e-4)
    assert len(set(round(x, 3) for x in batched)) > len(batched) // 2  # not degenerate


def test_accuracies_match_the_reference(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast
) -> None:
    (score,) = EvalHarness([TASK], tokenizer, batch_size=5).run(model)
    acc, norm = reference_accuracies(model, [d.context for d in DOCS], list(DOCS))
    assert (score.task, score.index, score.docs, score.complete) == ("mixed", 0, len(DOCS), True)
    assert (score.accuracy, score.accuracy_norm) == pytest.approx((acc, norm))


def test_batched_equals_unbatched_with_fewshot(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast
) -> None:
    docs = synthetic_docs(24, seed=5)
    task = EvalTask("synth", tuple(docs), tuple(synthetic_docs(16, seed=5, split="train")))
    one = EvalHarness([task, TASK], tokenizer, fewshot=2, batch_size=1).run(model)
    many = EvalHarness([task, TASK], tokenizer, fewshot=2, batch_size=13).run(model)
    assert one == many
    prompts = [EvalHarness([task], tokenizer, fewshot=2).prompt(task, i) for i in range(24)]
    assert (one[0].accuracy, one[0].accuracy_norm) == pytest.approx(
        reference_accuracies(model, prompts, docs)
    )


def test_fewshot_prompts_are_deterministic_per_seed(tokenizer: PreTrainedTokenizerFast) -> None:
    pool = tuple(synthetic_docs(30, seed=1, split="train"))
    task = EvalTask("synth", tuple(synthetic_docs(10, seed=1)), pool)
    a = EvalHarness([task], tokenizer, fewshot=3, seed=7)
    for i in range(10):
        examples = a.fewshot_examples(task, i)
        assert len(examples) == 3 and all(ex in pool for ex in examples)
        shots = [f"{ex.context} {ex.choices[ex.gold]}" for ex in examples]
        assert a.prompt(task, i) == "\n\n".join([*shots, task.docs[i].context])
    again = EvalHarness([task], tokenizer, fewshot=3, seed=7, max_docs=4)
    assert [again.prompt(task, i) for i in range(10)] == [a.prompt(task, i) for i in range(10)]
    other = EvalHarness([task], tokenizer, fewshot=3, seed=8)
    assert [other.prompt(task, i) for i in range(10)] != [a.prompt(task, i) for i in range(10)]
    assert len({a.prompt(task, i).rsplit("\n\n", 1)[0] for i in range(10)}) > 1  # varies by doc


def test_without_a_pool_examples_are_the_other_docs(tokenizer: PreTrainedTokenizerFast) -> None:
    harness = EvalHarness([TASK], tokenizer, fewshot=len(DOCS) + 3)
    for i, doc in enumerate(DOCS):
        examples = harness.fewshot_examples(TASK, i)
        # Every other doc, in some order, and never the doc itself (the cap is the pool size).
        assert sorted(map(repr, examples)) == sorted(repr(d) for d in DOCS if d is not doc)
    assert EvalHarness([TASK], tokenizer).prompt(TASK, 2) == DOCS[2].context


def test_cancel_returns_the_docs_done_so_far(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast
) -> None:
    second = EvalTask("second", DOCS[:2])
    harness = EvalHarness([TASK, second], tokenizer, batch_size=7)
    full = harness.run(model)
    assert [s.complete for s in full] == [True, True]
    cancel = threading.Event()
    # Cancel during the first forward pass: 7 sequences cover doc 0 (3 choices) and doc 1 (4).
    hook = model.register_forward_hook(lambda *_: cancel.set())
    try:
        (partial,) = harness.run(model, cancel)
    finally:
        hook.remove()
    assert (partial.task, partial.docs, partial.complete) == ("mixed", 2, False)
    done = EvalHarness([EvalTask("head", DOCS[:2])], tokenizer).run(model)[0]
    assert (partial.accuracy, partial.accuracy_norm) == (done.accuracy, done.accuracy_norm)
    assert harness.run(model, cancel) == []  # already set: nothing is scored


def test_left_truncation_keeps_inputs_within_the_model(
    short_model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast
) -> None:
    docs = synthetic_docs(12, seed=2)
    task = EvalTask("synth", tuple(docs), tuple(synthetic_docs(12, seed=2, split="train")))
    harness = EvalHarness([task], tokenizer, fewshot=2, batch_size=6)
    prompts = [harness.prompt(task, i) for i in range(12)]
    assert min(len(p) for p in prompts) > 40  # every sequence is longer than 32 positions
    widths: list[int] = []
    hook = short_model.register_forward_pre_hook(
        lambda _m, _a, kw: widths.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    try:
        (score,) = harness.run(short_model)
    finally:
        hook.remove()
    assert widths and max(widths) == 32
    assert (score.accuracy, score.accuracy_norm) == pytest.approx(
        reference_accuracies(short_model, prompts, docs)
    )
    # A continuation longer than the model keeps (and scores) only its last tokens.
    start = start_tokens(tokenizer)
    long = ChoiceTokens.build(tokenizer, start, "x", " " + "y" * 50)
    (value,) = continuation_logprobs(short_model, [long], max_len=32)
    assert value == pytest.approx(
        reference_logprob(short_model, list(long.context), list(long.continuation)), abs=1e-4
    )


def test_the_model_mode_is_restored(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast
) -> None:
    harness = EvalHarness([EvalTask("t", DOCS[:1])], tokenizer)
    model.train()
    harness.run(model)
    assert model.training
    model.eval()
    harness.run(model)
    assert not model.training


def test_a_tokenizer_that_adds_bos_starts_contexts_with_it() -> None:
    tokenizer = byte_tokenizer(64)
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", special_tokens=[("<|bos|>", BOS_ID)]
    )
    assert tokenizer.encode("a") == [BOS_ID, 97]
    assert start_tokens(tokenizer) == (BOS_ID,)


def test_tokenizer_from_files(tmp_path: Path) -> None:
    out = write_model_dir(tmp_path / "m", preset=SHORT, seed=0).path
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.suffix != ".safetensors"}
    assert "tokenizer.json" in files
    tokenizer = tokenizer_from_files(files)
    assert tokenizer.encode("hé", add_special_tokens=False) == [104, 195, 169]
    assert start_tokens(tokenizer) == (EOS_ID,)
    with pytest.raises(ValueError, match="not a plain file name"):
        tokenizer_from_files({**files, "../escape.json": b"{}"})
    assert not (tmp_path / "escape.json").exists()


def test_a_trained_model_solves_the_synthetic_task(tokenizer: PreTrainedTokenizerFast) -> None:
    """A few seconds of AdamW on the train split's text teaches the tiny model the alphabet:
    after "...w " comes "x". It must then pick the gold choice (nearly) always, while the same
    model untrained is near chance (1 in 4). Everything is seeded, so the numbers are fixed."""
    val = tuple(synthetic_docs(64, seed=0))
    train = tuple(synthetic_docs(256, seed=0, split="train"))
    harness = EvalHarness([EvalTask("alphabet", val, train)], tokenizer, batch_size=32)
    model = init_model(llama_config(SHORT), seed=0)
    (untrained,) = harness.run(model)
    # 64 docs at chance: mean 0.25, standard deviation 0.054; 0.5 is over four deviations away.
    assert untrained.accuracy < 0.5

    text = "\n\n".join(d.context + " " + d.choices[d.gold] for d in train)
    data = torch.tensor(list(text.encode()))
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(100):
        starts = torch.randint(0, len(data) - 32, (16,), generator=generator)
        batch = torch.stack([data[s : s + 32] for s in starts])
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    (trained,) = harness.run(model)
    assert trained.docs == 64
    assert trained.accuracy >= 0.95 and trained.accuracy_norm >= 0.95
    (fewshot,) = EvalHarness([EvalTask("alphabet", val, train)], tokenizer, fewshot=2).run(model)
    assert fewshot.accuracy >= 0.95
