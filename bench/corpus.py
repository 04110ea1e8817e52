"""A deterministic transcript corpus: Zipf vocabulary, some non-English and CJK text, sessions of
varied length. The same seed gives the same corpus on any machine."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

SYLLABLES = ["ka", "lo", "mi", "ta", "re", "shu", "an", "bel", "cor", "dun", "ex", "fi", "gra", "hol", "in",
             "jo", "kel", "lum", "mor", "nu", "ox", "pra", "qui", "ros", "sta", "tur", "ul", "ven", "wil", "yo"]
ACCENTED = ["café", "perché", "già", "naïve", "résumé", "über", "straße", "señor", "ação", "été", "città",
            "déjà", "crème", "façade", "mañana", "jalapeño", "smörgåsbord", "øl", "tjänst", "łódź"]
CJK_CHARS = "東京北京上海大阪会議明日今日天気予定時間電話仕事家族学校銀行借金返済旅行計画報告資料確認問題"
KANA = "のにはをがでとからまでですますしたいるあるこれそれ"
HANGUL = "안녕하세요회의내일오늘일정은행대출"


@dataclass
class CorpusSpec:
    messages: int = 1_000_000
    sessions: int = 10_000
    vocabulary: int = 50_000
    zipf_s: float = 1.07
    accented_share: float = 0.08
    cjk_share: float = 0.04
    seed: int = 20261130


def vocabulary(n: int, rng: random.Random) -> list[str]:
    words: list[str] = []
    seen = set()
    for length in itertools.count(2):
        for combo in itertools.product(SYLLABLES, repeat=length):
            word = "".join(combo)
            if word not in seen:
                seen.add(word)
                words.append(word)
            if len(words) >= n:
                rng.shuffle(words)
                return words
    return words


def session_lengths(spec: CorpusSpec, rng: random.Random) -> list[int]:
    """Lengths with a long tail (most sessions short, a few very long), summing to spec.messages."""
    raw = [rng.paretovariate(1.3) for _ in range(spec.sessions)]
    scale = spec.messages / sum(raw)
    lengths = [max(1, int(r * scale)) for r in raw]
    lengths[0] += spec.messages - sum(lengths)
    while lengths[0] < 1:  # rounding pushed the first one under: take from the longest
        i = max(range(len(lengths)), key=lengths.__getitem__)
        lengths[i] -= 1
        lengths[0] += 1
    return lengths


def generate(spec: CorpusSpec) -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """Yield (session number, [(role, text), …]) for every session."""
    rng = random.Random(spec.seed)
    words = vocabulary(spec.vocabulary, rng)
    weights = list(itertools.accumulate(1.0 / (rank ** spec.zipf_s) for rank in range(1, len(words) + 1)))
    lengths = session_lengths(spec, rng)
    for number, length in enumerate(lengths):
        counts = [max(1, min(120, int(rng.lognormvariate(2.6, 0.7)))) for _ in range(length)]
        drawn = iter(rng.choices(words, cum_weights=weights, k=sum(counts)))
        out = []
        for i, count in enumerate(counts):
            role = "user" if i % 2 == 0 else "assistant"
            roll = rng.random()
            if roll < spec.cjk_share:
                pool = CJK_CHARS + KANA if rng.random() < 0.8 else HANGUL
                text = "".join(rng.choice(pool) for _ in range(count * 2))
                for _ in range(count):
                    next(drawn)
            else:
                parts = [next(drawn) for _ in range(count)]
                if roll < spec.cjk_share + spec.accented_share:
                    parts[rng.randrange(len(parts))] = rng.choice(ACCENTED)
                text = " ".join(parts)
            out.append((role, text))
        yield number, out
