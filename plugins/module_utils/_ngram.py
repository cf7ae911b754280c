# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: llama.cpp's n-gram proposers, ported token for token, for the screen's replay.
"""The n-gram proposers of the pinned llama.cpp tree (llama-cpp-python 0.3.36's ``vendor/llama.cpp``), in Python.

Each proposer answers what llama-server would draft at one step: ``draft(tokens, last)`` with ``tokens`` the
slot's tokens before the last sampled one and ``last`` that token (llama.cpp's ``prompt`` and ``id_last``), and
is told the outcome with ``accept(n_accepted)``, as ``common/speculative.cpp`` calls its implementations.

- :class:`NgramSimple`: ``common_ngram_simple_draft`` (``common/ngram-map.cpp``): the last ``size_n`` tokens
  searched backwards in the history, the ``size_m`` tokens after the match drafted, none when fewer than
  ``size_n`` follow it. Stateless.
- :class:`NgramMod`: ``common_speculative_impl_ngram_mod`` (``common/speculative.cpp``) over ``common_ngram_mod``
  (``common/ngram-mod.cpp``): a hashed table of ``n_match``-grams to their next token (4 Mi entries, the LCG hash
  of the pinned tree), filled from each request's prompt and in chunks of 32 generated tokens, shared across
  requests like the server's one instance, reset when a quarter full or after five rounds accepting under a
  quarter of their draft; a draft is the chain of next tokens, dropped when shorter than ``n_min``.

``ngram-map-k``, ``ngram-map-k4v`` and ``ngram-cache`` are not ported: the screen reports them unscreenable.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

# llama.cpp's defaults (common/common.h: common_params_speculative_ngram_map, _ngram_mod)
SIMPLE_SIZE_N = 12
SIMPLE_SIZE_M = 48
MOD_N_MATCH = 24
MOD_N_MAX = 64
MOD_N_MIN = 48
MOD_SIZE = 4 * 1024 * 1024
_MASK = (1 << 64) - 1
_LCG = 6364136223846793005

PORTED = ("ngram-simple", "ngram-mod")
NOT_PORTED = ("ngram-map-k", "ngram-map-k4v", "ngram-cache")


class NgramSimple:
    """``ngram-simple``: look the last ``size_n`` tokens up in the history, draft the ``size_m`` after them."""

    def __init__(self, size_n: int = SIMPLE_SIZE_N, size_m: int = SIMPLE_SIZE_M) -> None:
        self.size_n, self.size_m = int(size_n), int(size_m)

    def begin(self, prompt: Sequence[int]) -> None:
        """Nothing: the proposer keeps no state."""

    def draft(self, tokens: Sequence[int], last: int) -> List[int]:
        n_min, n_max = self.size_n, self.size_m
        cur_len = len(tokens)
        if cur_len <= n_min + n_max + 1:
            return []
        pattern = [*tokens[cur_len - n_min + 1:cur_len], last]
        match_pos = 0  # position 0 means no match, as in llama.cpp
        j = cur_len - n_min - 1
        while j > 0:
            if list(tokens[j:j + len(pattern)]) == pattern:
                match_pos = j
                break
            j -= 1
        if match_pos == 0:
            return []
        copy_max = min(n_max, cur_len - (match_pos + n_min))
        if copy_max < n_min:
            return []
        return list(tokens[match_pos + n_min:match_pos + n_min + copy_max])

    def accept(self, n_accepted: int) -> None:
        """Nothing: the proposer keeps no state."""


class NgramMod:
    """``ngram-mod``: a hashed n-gram -> next-token table shared across requests (one per server)."""

    def __init__(self, n_match: int = MOD_N_MATCH, n_max: int = MOD_N_MAX, n_min: int = MOD_N_MIN,
                 size: int = MOD_SIZE) -> None:
        self.n, self.n_max, self.n_min, self.size = int(n_match), int(n_max), int(n_min), int(size)
        self.entries: Dict[int, int] = {}  # sparse: the C++ table's non-empty slots
        self.i_last = 0
        self.n_draft_last = 0
        self.n_low = 0

    def _idx(self, tokens: Sequence[int], at: int) -> int:
        res = 0
        for i in range(self.n):
            res = (res * _LCG + (tokens[at + i] & _MASK)) & _MASK
        return res % self.size

    def _add(self, tokens: Sequence[int], at: int) -> None:
        self.entries[self._idx(tokens, at)] = tokens[at + self.n]

    def reset(self) -> None:
        self.entries.clear()

    def begin(self, prompt: Sequence[int]) -> None:
        """A request starts: its prompt's n-grams into the table."""
        self.i_last = 0
        self.n_draft_last = 0
        if len(prompt) < self.n:
            return
        for i in range(len(prompt) - self.n):
            self._add(prompt, i)
        self.i_last = len(prompt) - self.n
        if len(self.entries) / self.size > 0.25:
            self.reset()

    def draft(self, tokens: Sequence[int], last: int) -> List[int]:
        self.n_draft_last = 0
        cur_len = len(tokens)
        n = self.n
        if cur_len < n:
            return []
        if self.i_last + 32 < cur_len:
            for i in range(self.i_last, cur_len - n):
                self._add(tokens, i)
            self.i_last = cur_len - n
        result = [*tokens[cur_len - n + 1:cur_len], last]
        for i in range(self.n_max):
            token = self.entries.get(self._idx(result, i))
            if token is None:
                if i < self.n_min:
                    return []
                break
            result.append(token)
        drafted = result[n:]
        self.n_draft_last = len(drafted)
        return drafted

    def accept(self, n_accepted: int) -> None:
        if self.n_draft_last > 0:
            if n_accepted / self.n_draft_last < 0.25:
                self.n_low += 1
                if self.n_low >= 5:
                    self.reset()
                    self.n_low = 0
                    self.i_last = 0
            else:
                self.n_low = 0
