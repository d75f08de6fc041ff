"""Log-likelihood of a continuation given a context, for many (context, continuation) pairs at once.

Tokenization (`ChoiceTokens.build`):

- the context starts with the tokenizer's own start token(s) when it adds any (Llama's BOS);
  otherwise with EOS, the token that separates documents in psyche's packed training streams
  (the byte tokenizer adds nothing), so the first context token is predicted as a document start;
- the continuation's tokens are those the tokenizer gives ``context + continuation`` beyond the
  tokens of the context alone. This keeps the leading space attached to the first word, as the
  text would be tokenized in training (SentencePiece's ``▁word``); when a merge crosses the
  boundary, so the context's tokens are not a prefix of the whole, the continuation is tokenized
  on its own.

Scoring (`continuation_logprobs`): each sequence is context + continuation, and only the
continuation's tokens are scored (summed log-probabilities). A sequence longer than the model's
``max_len`` positions loses tokens from the left: the last ``max_len + 1`` tokens are kept, since
the final token is only a target, never an input. Sequences are batched with right padding and an
attention mask; with causal attention the real tokens never see the padding, so a padded row gives
the same log-probabilities as the sequence alone.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

__all__ = ["ChoiceTokens", "continuation_logprobs", "model_max_length", "start_tokens"]


def start_tokens(tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    """The ids every context starts with (see the module docstring)."""
    plain = list(tokenizer.encode("a", add_special_tokens=False))
    full = list(tokenizer.encode("a", add_special_tokens=True))
    for i in range(len(full) - len(plain) + 1):
        if full[i : i + len(plain)] == plain:
            if i:
                return tuple(full[:i])
            break
    for special in (tokenizer.eos_token_id, tokenizer.bos_token_id):
        if isinstance(special, int):
            return (special,)
    return ()


@dataclass(frozen=True, slots=True)
class ChoiceTokens:
    """One (context, continuation) pair as token ids; only `continuation` is scored."""

    context: tuple[int, ...]
    continuation: tuple[int, ...]

    @classmethod
    def build(
        cls,
        tokenizer: PreTrainedTokenizerBase,
        start: tuple[int, ...],
        context: str,
        continuation: str,
        context_ids: Sequence[int] | None = None,
    ) -> ChoiceTokens:
        """Tokenize a pair; pass `context_ids` (the context without `start`) to reuse them."""
        ctx = list(context_ids if context_ids is not None else encode(tokenizer, context))
        whole = encode(tokenizer, context + continuation)
        if whole[: len(ctx)] == ctx and len(whole) > len(ctx):
            cont = whole[len(ctx) :]
        else:
            cont = encode(tokenizer, continuation)
        if not cont:
            raise ValueError(f"continuation {continuation!r} has no tokens")
        if not start and not ctx:
            raise ValueError("an empty context needs a start token (the tokenizer has no BOS/EOS)")
        return cls(start + tuple(ctx), tuple(cont))


def encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of `text`, without special tokens."""
    return [int(t) for t in tokenizer.encode(text, add_special_tokens=False, verbose=False)]


def model_max_length(model: torch.nn.Module) -> int:
    """How many positions the model takes: ``config.max_position_embeddings``."""
    config = getattr(model, "config", None)
    value = getattr(config, "max_position_embeddings", None)
    if not isinstance(value, int) or value < 2:
        raise ValueError(f"the model's config has no usable max_position_embeddings ({value!r})")
    return value


def _window(item: ChoiceTokens, max_len: int) -> tuple[list[int], int]:
    """The sequence's last `max_len + 1` tokens and how many of them are scored."""
    seq = [*item.context, *item.continuation]
    kept = seq[-(max_len + 1) :]
    return kept, min(len(item.continuation), len(kept) - 1)


def _accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def continuation_logprobs(
    model: torch.nn.Module, items: Sequence[ChoiceTokens], max_len: int
) -> list[float]:
    """The summed log-probability of each item's continuation, in one padded forward pass.

    Call with the model in eval mode (the harness does), or dropout makes the scores random.
    """
    if not items:
        return []
    with torch.no_grad():
        return _logprobs(model, items, max_len)


def _logprobs(model: torch.nn.Module, items: Sequence[ChoiceTokens], max_len: int) -> list[float]:
    device = next(model.parameters()).device
    windows = [_window(item, max_len) for item in items]
    inputs = [seq[:-1] for seq, _ in windows]
    width = max(len(x) for x in inputs)
    # Padding id 0 is in every vocabulary; its value is irrelevant, being masked and never scored.
    ids = torch.zeros((len(items), width), dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    for row, x in enumerate(inputs):
        ids[row, : len(x)] = torch.tensor(x, dtype=torch.long)
        mask[row, : len(x)] = 1
    # Scored positions of a row are [len(input) - n_scored, len(input)); only logits from the
    # earliest of them on are needed, which saves a (batch, width, vocab) tensor for big vocabs.
    first = min(len(x) - n for x, (_, n) in zip(inputs, windows, strict=True))
    extra: dict[str, Any] = {"use_cache": False}
    offset = 0
    if _accepts_logits_to_keep(model):
        extra["logits_to_keep"] = width - first
        offset = first
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), **extra)
    logits = out.logits
    sums = []
    for row, (x, (seq, n)) in enumerate(zip(inputs, windows, strict=True)):
        start = len(x) - n - offset
        logprobs = torch.log_softmax(logits[row, start : start + n].float(), dim=-1)
        targets = torch.tensor(seq[-n:], dtype=torch.long, device=logprobs.device)
        sums.append(logprobs.gather(1, targets[:, None]).sum())
    # One transfer for the whole batch rather than a device sync per row.
    return [float(v) for v in torch.stack(sums).tolist()]
