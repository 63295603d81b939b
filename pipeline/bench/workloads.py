"""Deterministic document-question workloads with planted facts (same seed -> same rows).

Every document is filler text with a few planted facts about invented people;
each question asks for one planted fact and carries the expected answer, so an
answer can be checked (and an answer that landed on the wrong row is caught).
"""

from __future__ import annotations

import random

_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ra",
    "ven",
    "tor",
    "sa",
    "bel",
    "dun",
    "fir",
    "gal",
    "hes",
    "jor",
    "kel",
    "mar",
    "nor",
    "pel",
    "quin",
    "ros",
    "tal",
    "ul",
    "vin",
    "wes",
    "zor",
]
_PETS = ["parrot", "tortoise", "goldfish", "ferret", "rabbit", "hamster", "goat", "pony", "iguana", "canary"]
_COLORS = ["crimson", "teal", "amber", "violet", "olive", "indigo", "maroon", "silver", "ivory"]
_FILLER = [
    "The committee met again on Tuesday to review the budget for the coming season.",
    "Rain fell steadily across the valley for most of the afternoon.",
    "Several visitors remarked on the quiet streets and the well-kept gardens.",
    "The old railway line was closed many years ago and is now a walking path.",
    "Local shops reported a busy week ahead of the harvest festival.",
    "A new bridge over the river is planned, although no date has been set.",
    "The library extended its opening hours during the winter months.",
    "Most residents agreed that the market square needed new lighting.",
    "Farmers in the district expect a good crop of apples this year.",
    "The school choir performed in the town hall to a full audience.",
    "A small museum near the harbour displays tools from the last century.",
    "Traffic on the main road was diverted while the repairs were made.",
    "The council published its annual report at the end of the month.",
    "Birdwatchers gathered at the marsh early each morning.",
    "An old clock tower still marks the hours in the centre of the village.",
    "The bakery on the corner has been owned by the same family for decades.",
]
# Each fact is stated the way its question is asked ("The X of P is V." / "What is
# the X of P?"). Measured with the default model (greedy, 40 documents x 7 facts):
# colour 39/40, pet 38/40, instrument 37/40, sport 40/40 answers contained the fact;
# fruit (35/40), home town (30/40) and profession (13/40) were dropped.
_INSTRUMENTS = ["violin", "trumpet", "cello", "flute", "harp", "guitar", "piano", "banjo", "clarinet"]
_SPORTS = ["tennis", "rowing", "cycling", "fencing", "archery", "hockey", "sailing", "climbing"]
_FACTS = [
    ("The favourite colour of {p} is {v}.", "What is the favourite colour of {p}?", _COLORS),
    ("The pet of {p} is a {v}.", "What is the pet of {p}?", _PETS),
    ("The favourite instrument of {p} is the {v}.", "What is the favourite instrument of {p}?", _INSTRUMENTS),
    ("The favourite sport of {p} is {v}.", "What is the favourite sport of {p}?", _SPORTS),
]


def _person(rng: random.Random, used: set[str]) -> str:
    while True:
        first = "".join(rng.choice(_SYLLABLES) for _ in range(2)).capitalize()
        last = "".join(rng.choice(_SYLLABLES) for _ in range(3)).capitalize()
        name = f"{first} {last}"
        if name not in used:
            used.add(name)
            return name


def make_document(rng: random.Random, n_facts: int, filler_sentences: int, used: set[str]):
    """A document with ``n_facts`` planted facts; returns (text, [(question, expected), ...])."""
    facts, qa = [], []
    for i in range(n_facts):
        template, question, values = _FACTS[i % len(_FACTS)]
        person = _person(rng, used)
        value = rng.choice(values)
        facts.append(template.format(p=person, v=value))
        qa.append((question.format(p=person), value))
    sentences = [rng.choice(_FILLER) for _ in range(filler_sentences)]
    for fact in facts:
        sentences.insert(rng.randrange(len(sentences) + 1), fact)
    return " ".join(sentences), qa


def document_questions(
    n_docs: int,
    questions_per_doc: int | list[int],
    *,
    filler_sentences: int = 12,
    seed: int = 0,
    order: str = "interleaved",
    id_prefix: str = "q",
) -> list[dict]:
    """Rows ``{id, doc_id, document, question, expected}``.

    ``questions_per_doc``: the same count for every document, or one count per document.
    ``order``: "grouped" (a document's questions together), "interleaved" (round-robin
    over documents), or "shuffled" (a seeded random order: siblings scattered).
    """
    rng = random.Random(seed)
    counts = [questions_per_doc] * n_docs if isinstance(questions_per_doc, int) else list(questions_per_doc)
    if len(counts) != n_docs:
        raise ValueError("questions_per_doc must have one count per document")
    used: set[str] = set()
    per_doc: list[list[dict]] = []
    for d, count in enumerate(counts):
        n_facts = max(1, min(count, len(_FACTS)))
        text, qa = make_document(rng, n_facts, filler_sentences, used)
        rows = []
        for q in range(count):
            question, expected = qa[q % len(qa)]
            rows.append({"doc_id": f"d{d:05d}", "document": text, "question": question, "expected": expected})
        per_doc.append(rows)
    if order == "grouped":
        flat = [r for rows in per_doc for r in rows]
    elif order == "interleaved":
        flat = [rows[i] for i in range(max(counts, default=0)) for rows in per_doc if i < len(rows)]
    elif order == "shuffled":
        flat = [r for rows in per_doc for r in rows]
        random.Random(seed + 1).shuffle(flat)
    else:
        raise ValueError(f"unknown order {order!r}")
    for i, row in enumerate(flat):
        row["id"] = f"{id_prefix}{i:06d}"
    return [{"id": r["id"], **{k: v for k, v in r.items() if k != "id"}} for r in flat]


def skewed_counts(n_docs: int, total: int, seed: int = 0, alpha: float = 1.2) -> list[int]:
    """Question counts per document following a Zipf-like popularity (a few hot documents)."""
    weights = [1.0 / (k + 1) ** alpha for k in range(n_docs)]
    rng = random.Random(seed)
    counts = [1] * n_docs
    for _ in range(total - n_docs):
        counts[rng.choices(range(n_docs), weights)[0]] += 1
    return counts


def completion_lines(rows: list[dict], seed: int = 0) -> list[dict]:
    """``document_questions`` rows as ``/v1/completions`` lines' rows: a line per document, its
    questions' prompts (``{document}\\n\\nQuestion: {question}\\nAnswer:``) in one list, the
    lines in a seeded random order, each prompt cut as the file job cuts it
    (pipeline/data/completion_lines.py). Rows ``{id, line, prefix, prompt, expected}``; ``line``:
    the line's number, its custom_id ``line-<n>``."""
    from pipeline.data.completion_lines import line_rows

    by_doc: dict[str, list[dict]] = {}
    for row in rows:
        by_doc.setdefault(row["doc_id"], []).append(row)
    docs = list(by_doc.values())
    random.Random(seed).shuffle(docs)
    out = []
    for n, questions in enumerate(docs):
        prompts = [f"{q['document']}\n\nQuestion: {q['question']}\nAnswer:" for q in questions]
        request = {"custom_id": f"line-{n}", "method": "POST", "url": "/v1/completions", "body": {"prompt": prompts}}
        for (row, _, _), q in zip(line_rows(n, request, None), questions):
            out.append(
                {
                    "id": f"{q['id']}",
                    "line": n,
                    "prefix": row["prefix"],
                    "prompt": row["prompt"],
                    "expected": q["expected"],
                }
            )
    return out
