"""A deterministic synthetic English-like corpus, so demos and tests need no download.

Sentences come from a small grammar (subject, verb, object, optional adverb or clause) over a
fixed vocabulary; documents are a few paragraphs of such sentences on one "topic" noun, which
gives a tiny model something learnable (topic words recur within a document, syntax is regular)
without pretending to be real language. The generator is ``random.Random(seed)``, whose integer
seeding and ``choice``/``randrange`` are stable across CPython 3 releases, so a seed names one
corpus. Output is pure ASCII: byte-tokenizer tokens equal characters.
"""

from __future__ import annotations

import random
from pathlib import Path

__all__ = ["synth_corpus", "synth_document"]


def _words(text: str) -> tuple[str, ...]:
    return tuple(w.strip() for w in text.split("|"))


_ADJ = _words(
    "small|quiet|bright|heavy|ancient|curious|gentle|distant|rapid|silent|golden|hollow|patient|"
    "narrow|open|careful"
)
_NOUN = _words(
    "river|engine|garden|signal|market|forest|lantern|tower|bridge|letter|machine|valley|window|"
    "harbor|library|station|orchard|kettle"
)
_AGENT = _words("the farmer|a child|the old teacher|our neighbor|the engineer|a traveler|the baker")
_VERB = _words(
    "watches|builds|repairs|finds|carries|paints|follows|remembers|opens|measures|crosses|describes"
)
_ADV = _words("slowly|again|at dawn|without a word|every morning|in the rain|with great care")
_CONJ = ("because", "while", "after", "although", "until")


def _phrase(rng: random.Random, topic: str) -> str:
    noun = topic if rng.random() < 0.35 else rng.choice(_NOUN)
    if rng.random() < 0.5:
        return f"the {rng.choice(_ADJ)} {noun}"
    return f"the {noun}"


def _sentence(rng: random.Random, topic: str) -> str:
    s = f"{rng.choice(_AGENT)} {rng.choice(_VERB)} {_phrase(rng, topic)}"
    r = rng.random()
    if r < 0.3:
        s += f" {rng.choice(_ADV)}"
    elif r < 0.5:
        s += f" {rng.choice(_CONJ)} {rng.choice(_AGENT)} {rng.choice(_VERB)} {_phrase(rng, topic)}"
    return s[0].upper() + s[1:] + "."


def synth_document(rng: random.Random) -> str:
    """One document: a title line and 2–6 paragraphs of 3–9 sentences about one topic."""
    topic = rng.choice(_NOUN)
    paragraphs = [
        " ".join(_sentence(rng, topic) for _ in range(rng.randrange(3, 10)))
        for _ in range(rng.randrange(2, 7))
    ]
    return f"On the {topic}\n\n" + "\n\n".join(paragraphs) + "\n"


def synth_corpus(out_dir: str | Path, n_tokens: int, seed: int = 0) -> list[Path]:
    """Write ``doc-00000.txt``, … into ``out_dir`` until about ``n_tokens`` bytes are written.

    The total is the first document boundary at or after ``n_tokens`` bytes; with the byte
    tokenizer, ``psyche data prepare`` then yields that many tokens plus one EOS per document.
    """
    if n_tokens <= 0:
        raise ValueError("n_tokens must be positive")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    paths: list[Path] = []
    written = 0
    while written < n_tokens:
        doc = synth_document(rng)
        path = out / f"doc-{len(paths):05d}.txt"
        path.write_text(doc, encoding="ascii")
        paths.append(path)
        written += len(doc)
    return paths
