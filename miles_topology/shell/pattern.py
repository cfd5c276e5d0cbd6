"""Bash glob patterns (``*``, ``?``, ``[...]``) matched in time linear in the value.

``${X#p}``, ``${X%%p}``, ``${X/p/r}``, ``case`` and ``[[ X == p ]]`` on a value the input
chose: slicing the value at every offset and matching each slice (or a backtracking regex of
several ``*``) is quadratic or worse, and a 2^19-character value then runs for minutes. Here
the pattern is a small automaton whose states are stepped once per character, and a run of
characters no state can use is skipped with one regex search. Bracket syntax is fnmatch's,
as before (the reader used fnmatch).
"""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache

STAR, ANY = "*", "?"


@lru_cache(maxsize=256)
def atoms(pattern: str) -> tuple[str, ...]:
    """The pattern as atoms: STAR, ANY, a one-character literal, or a bracket ``[...]``."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "[":
            j = i + 1
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j < n:
                out.append(pattern[i:j + 1])
                i = j + 1
                continue
        if c == STAR and out and out[-1] == STAR:
            i += 1  # ** is *
            continue
        out.append(c)
        i += 1
    return tuple(out)


@lru_cache(maxsize=256)
def _class_rx(atom: str) -> re.Pattern:
    return re.compile(fnmatch.translate(atom))


def _takes(atom: str, c: str) -> bool:
    if atom == ANY:
        return True
    if len(atom) == 1:
        return atom == c
    return _class_rx(atom).match(c) is not None


class _Machine:
    """The automaton of one atom sequence, built lazily as a DFA: a state is the set of
    NFA states s (the first s atoms consumed), numbered; each number has a row, character ->
    next number, filled on first use (a run adds at most one entry a character, and the
    table is dropped before a run once it holds LIMIT). `unanchored`: a match may start at
    every character (the start state is added back after each step)."""

    LIMIT = 50_000

    def __init__(self, seq: tuple[str, ...], unanchored: bool = False):
        self.seq, self.m, self.unanchored = seq, len(seq), unanchored
        self.reset()

    def reset(self) -> None:
        self.sets: list[frozenset] = []
        self.ids: dict[frozenset, int] = {}
        self.rows: list[dict[str, int]] = []
        self.accepts: list[bool] = []
        self.skips: list[re.Pattern | None | bool] = []
        self.size = 0
        self.init = self.id(self.close({0}))
        self.dead = self.id(self.close({0}) if self.unanchored else frozenset())

    def id(self, states: frozenset) -> int:
        got = self.ids.get(states)
        if got is None:
            got = self.ids[states] = len(self.sets)
            self.sets.append(states)
            self.rows.append({})
            self.accepts.append(self.m in states)
            self.skips.append(False)
        return got

    def close(self, states) -> frozenset:
        out = set(states)
        for s in sorted(states):
            while s < self.m and self.seq[s] == STAR:
                s += 1
                out.add(s)
        return frozenset(out)

    def step(self, sid: int, c: str) -> int:
        got = self.rows[sid].get(c)
        if got is not None:
            return got
        nxt = {0} if self.unanchored else set()
        for s in self.sets[sid]:
            if s < self.m:
                a = self.seq[s]
                if a == STAR:
                    nxt.add(s)
                elif _takes(a, c):
                    nxt.add(s + 1)
        got = self.id(self.close(nxt))
        self.rows[sid][c] = got
        self.size += 1
        return got

    def skipper(self, sid: int) -> re.Pattern | None:
        """Where this state, all waiting in a ``*`` or on a literal or bracket after one,
        can next change: None when any character can change it."""
        rx = self.skips[sid]
        if rx is False:
            rx = None
            states, m, seq = self.sets[sid], self.m, self.seq
            if not self.unanchored and states and all(
                    s == m or seq[s] != ANY for s in states) and all(
                    s < m and seq[s] == STAR or s > 0 and seq[s - 1] == STAR for s in states):
                parts = [re.escape(seq[s]) if len(seq[s]) == 1 else
                         fnmatch.translate(seq[s]).removeprefix("(?s:").removesuffix(r")\Z")
                         for s in states if s < m and seq[s] != STAR]
                rx = re.compile("|".join(parts) if parts else r"(?!)", re.S)
            self.skips[sid] = rx
        return rx

    def ends(self, text: str, start: int, first: bool) -> int | None:
        """The end of the shortest (`first`) or longest match of text[start:e]."""
        if self.size > self.LIMIT:
            self.reset()
        sid, dead, accepts = self.init, self.dead, self.accepts
        best = start if accepts[sid] else None
        if first and best is not None:
            return best
        k, n = start, len(text)
        while k < n and sid != dead:
            rx = self.skipper(sid)
            if rx is not None:  # stable until the next character an atom here can take
                hit = rx.search(text, k)
                nk = hit.start() if hit else n
                if nk > k:
                    if accepts[sid]:
                        best = nk
                    k = nk
                    continue
            sid = self.step(sid, text[k])
            k += 1
            if accepts[sid]:
                best = k
                if first:
                    return best
        return best

    def hits(self, text: str) -> list[int]:
        """Unanchored: every e at which a match of text[:e] ends."""
        if self.size > self.LIMIT:
            self.reset()
        out = [0] if self.accepts[self.init] else []
        sid, rows, accepts, step = self.init, self.rows, self.accepts, self.step
        for k, c in enumerate(text, 1):
            nxt = rows[sid].get(c)
            sid = step(sid, c) if nxt is None else nxt
            if accepts[sid]:
                out.append(k)
        return out


@lru_cache(maxsize=256)
def _machine(seq: tuple[str, ...], unanchored: bool = False) -> _Machine:
    return _Machine(seq, unanchored)


@lru_cache(maxsize=256)
def _fixed_rx(pattern: str) -> re.Pattern:
    return re.compile(fnmatch.translate(pattern).removeprefix("(?s:").removesuffix(r")\Z"),
                      re.S)


def fullmatch(value: str, pattern: str) -> bool:
    """fnmatch.fnmatchcase(value, pattern), linear in the value."""
    seq = atoms(pattern)
    if not any(a == STAR or len(a) > 1 or a == ANY for a in seq):
        return value == pattern
    m = _machine(seq)
    e = m.ends(value, 0, False)
    return e == len(value)


def prefix(value: str, pattern: str, longest: bool) -> int | None:
    """The end k of the shortest or longest value[:k] the pattern matches."""
    return _machine(atoms(pattern)).ends(value, 0, not longest)


def suffix(value: str, pattern: str, longest: bool) -> int | None:
    """The start k of the shortest or longest value[k:] the pattern matches."""
    e = _machine(atoms(pattern)[::-1]).ends(value[::-1], 0, not longest)
    return None if e is None else len(value) - e


def strip(value: str, pattern: str, op: str) -> str:
    """``${X#p}`` ``${X##p}`` ``${X%p}`` ``${X%%p}``."""
    if op in ("#", "##"):
        k = prefix(value, pattern, op == "##")
        return value if k is None else value[k:]
    k = suffix(value, pattern, op == "%%")
    return value if k is None else value[:k]


def starts(value: str, pattern: str) -> list[int]:
    """Every i at which a match of the pattern starts, ascending (one backward pass)."""
    n = len(value)
    return [n - e for e in reversed(_machine(atoms(pattern)[::-1], True).hits(value[::-1]))]


def replace(value: str, pattern: str, rep: str, op: str) -> str:
    """``${X/p/r}`` (first), ``${X//p/r}`` (all), ``${X/#p/r}``, ``${X/%p/r}``: each match
    the longest at the leftmost place it starts, as bash."""
    if op == "/#":
        k = prefix(value, pattern, True)
        return value if k is None else rep + value[k:]
    if op == "/%":
        k = suffix(value, pattern, True)
        return value if k is None else value[:k] + rep
    seq = atoms(pattern)
    if STAR not in seq:  # fixed width: a regex is linear (no backtracking past the width)
        rx = _fixed_rx(pattern)
        return rx.sub(lambda _: rep, value, count=0 if op == "//" else 1)
    m = _machine(seq)
    out, pos = [], 0
    for i in starts(value, pattern):
        if i < pos:
            continue
        e = m.ends(value, i, False)
        if e is None or e == i and out:  # no empty match after a replacement
            continue
        out += [value[pos:i], rep]
        pos = max(e, i)
        if op != "//" or e == len(value):
            break
    return "".join(out) + value[pos:]
