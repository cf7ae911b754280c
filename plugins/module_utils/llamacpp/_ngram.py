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

- :class:`NgramMap`: ``common_speculative_impl_ngram_map_k`` over ``common_ngram_map_*`` (``common/ngram-map.cpp``),
  ``ngram-map-k`` (``key_only``) and ``ngram-map-k4v``: the last ``size_n`` tokens looked up through a hashed
  key map (2^18 slots) and a backward search, with per-key statistics (hits, up to four value m-grams and the
  tokens accepted at the last draft, which caps the next draft of that key); one per slot, kept across requests
  and trimmed at each request's start as llama.cpp does.

- :class:`NgramCache`: ``common_speculative_impl_ngram_cache`` over ``common/ngram-cache.cpp`` without the
  static and dynamic cache files (``--lookup-cache-static``/``-dynamic``): the context cache of 1- to 4-grams
  and the tokens seen after them, kept per slot across requests and fed only the tokens past its size, a draft
  of up to 8 tokens (fixed in the pinned tree) chosen by counts with llama.cpp's lax thresholds. Ties go to the
  first token in ``std::unordered_map``'s iteration order, which :class:`_UnorderedInts` reproduces (libstdc++'s
  prime rehash policy, identity hash of ints).
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

MAP_SIZE_N = 12
MAP_SIZE_M = 48
MAP_MIN_HITS = 1
MAP_HASH_SIZE = 262144  # COMMON_NGRAM_HASH_MAP_SIZE
MAP_MAX_VALUES = 4  # COMMON_NGRAM_MAX_VALUES
MAP_MAX_VALUE_COUNT = 16380  # COMMON_NGRAM_MAX_VALUE_COUNT
_MAP_LCG = 2654435761
_U32 = (1 << 32) - 1

CACHE_N_DRAFT = 8  # create_state_ngram_cache's n_draft
CACHE_NGRAM_MIN = 1
CACHE_NGRAM_MAX = 4
_CACHE_MIN_SAMPLE = (2, 2, 1, 1)  # draft_min_sample_size_lax
_CACHE_MIN_PERCENT = (66, 50, 50, 50)  # draft_min_percent_lax

PORTED = ("ngram-simple", "ngram-mod", "ngram-map-k", "ngram-map-k4v", "ngram-cache")
NOT_PORTED: tuple = ()


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


class _MapKey:
    """``common_ngram_map_key``: a key n-gram's place, hits and its (up to four) value m-grams."""

    def __init__(self, key_idx: int, m: int) -> None:
        self.key_idx = key_idx
        self.stat_idx = 0
        self.key_num = 0
        self.value_idx = [0] * MAP_MAX_VALUES
        self.value_num = [0] * MAP_MAX_VALUES
        self.n_accepted = [m] * MAP_MAX_VALUES


def _map_hash(tokens: Sequence[int], start: int, n: int) -> int:
    res = 0
    for i in range(n):
        res = (res * _MAP_LCG + tokens[start + i]) & _U32
    return res


def _same(tokens: Sequence[int], at: int, key: Sequence[int]) -> bool:
    return list(tokens[at:at + len(key)]) == list(key)


class NgramMap:
    """``ngram-map-k`` (``key_only``) and ``ngram-map-k4v``: ``common_ngram_map`` of one slot."""

    def __init__(self, size_n: int = MAP_SIZE_N, size_m: int = MAP_SIZE_M, key_only: bool = True,
                 min_hits: int = MAP_MIN_HITS) -> None:
        self.n, self.m, self.key_only, self.min_hits = int(size_n), int(size_m), bool(key_only), int(min_hits)
        self.keys: List[_MapKey] = []
        self.key_map: Dict[int, int] = {}  # sparse: the C++ vector's non-zero slots
        self.key_map_last_idx = 0
        self.size_last_begin = 0
        self.idx_last_check = 0
        self.last_draft_created = False
        self.last_draft_key_idx = 0
        self.last_draft_value_idx = 0

    def begin(self, prompt: Sequence[int]) -> None:
        """``common_ngram_map_begin``: forget what lies past the previous request's start."""
        size_begin = len(prompt)
        cleanup = self.size_last_begin
        if cleanup > size_begin:
            cleanup = size_begin - self.n - self.m if size_begin > self.n + self.m else 0
        if size_begin < self.idx_last_check:
            self.key_map = {h: i for h, i in self.key_map.items() if i < cleanup}
            self.key_map_last_idx = cleanup - 1 if cleanup > 0 else 0
            for i in range(len(self.keys) - 1, -1, -1):
                key = self.keys[i]
                if key.key_idx >= cleanup:
                    del self.keys[i]
                    continue
                if self.key_only:
                    continue
                for j in range(MAP_MAX_VALUES - 1, -1, -1):
                    if key.value_idx[j] != 0 and key.value_idx[j] >= cleanup:
                        for arr in (key.value_idx, key.value_num, key.n_accepted):
                            arr[j:MAP_MAX_VALUES - 1] = arr[j + 1:MAP_MAX_VALUES]
                        key.value_idx[-1] = 0
                        key.value_num[-1] = 0
                if key.value_idx[0] == 0:
                    del self.keys[i]
        self.idx_last_check = size_begin
        self.size_last_begin = size_begin

    def _search(self, inp: Sequence[int], key: Sequence[int], start: int, stop: int) -> int:
        for j in range(start, stop, -1):
            if _same(inp, j, key):
                return j
        return 0

    def draft(self, inp: Sequence[int], sampled: int) -> List[int]:
        """``common_ngram_map_draft``."""
        self.last_draft_created = False
        self.last_draft_key_idx = 0
        self.last_draft_value_idx = 0
        cur_len, n, m = len(inp), self.n, self.m
        if cur_len < 2 * n + m:
            return []
        self.idx_last_check = cur_len
        key_tokens = [*inp[cur_len - n + 1:cur_len], sampled]
        last_begin, top = self.size_last_begin, cur_len - n - m - 1
        match_pos = 0
        idx_key = self.key_map.get(_map_hash(key_tokens, 0, n) % MAP_HASH_SIZE, 0)
        if idx_key != 0 and idx_key < top and _same(inp, idx_key, key_tokens):
            match_pos = idx_key
        if match_pos == 0 and last_begin > n + m + 1:
            match_pos = self._search(inp, key_tokens, last_begin - n - m - 1, self.key_map_last_idx)
        if match_pos == 0:
            match_pos = self._search(inp, key_tokens, top, max(last_begin, self.key_map_last_idx))
        ranges = [range(top, max(last_begin, self.key_map_last_idx), -1)]
        if last_begin > n + m + 1:
            ranges.insert(0, range(last_begin - n - m - 1, self.key_map_last_idx, -1))
        for span in ranges:
            for j in span:
                self.key_map.setdefault(_map_hash(inp, j, n) % MAP_HASH_SIZE, j)
        self.key_map_last_idx = max(top, self.key_map_last_idx)
        if match_pos == 0:
            return []
        key_offset = next((i for i, k in enumerate(self.keys) if _same(inp, k.key_idx, key_tokens)), len(self.keys))
        if key_offset == len(self.keys):
            self.keys.append(_MapKey(match_pos, m))
        curr = self.keys[key_offset]
        curr.key_num = min(curr.key_num + 1, MAP_MAX_VALUE_COUNT)
        if self.key_only:
            slot = 0
        else:
            if curr.key_num < self.min_hits:
                return []
            for i in range(curr.stat_idx, match_pos + 1):
                if not _same(inp, i, key_tokens):
                    continue
                begin_value = i + n
                idx_value = -1
                for v in range(MAP_MAX_VALUES):
                    begin_v = curr.value_idx[v]
                    if begin_v == 0:
                        curr.value_idx[v], curr.value_num[v], curr.n_accepted[v] = begin_value, 0, m
                        idx_value = v
                        break
                    if list(inp[begin_value:begin_value + m]) == list(inp[begin_v:begin_v + m]):
                        idx_value = v
                        break
                if idx_value >= 0:
                    curr.value_num[idx_value] = min(curr.value_num[idx_value] + 1, MAP_MAX_VALUE_COUNT)
            curr.stat_idx = match_pos
            max_occur, slot = 0, 0
            for v in range(MAP_MAX_VALUES):
                if curr.value_num[v] > max_occur:
                    max_occur, slot = curr.value_num[v], v
            sum_occur = sum(c for v, c in enumerate(curr.value_num) if v != slot)
            if sum_occur > 0 and max_occur < 2 * sum_occur:
                return []
        n_draft = min(m, curr.n_accepted[slot])
        self.last_draft_created = True
        self.last_draft_key_idx = key_offset
        self.last_draft_value_idx = slot
        # as llama.cpp: the tokens after the match (not those of the chosen value)
        return list(inp[match_pos + n:match_pos + n + max(n_draft, 0)])

    def accept(self, n_accepted: int) -> None:
        """``common_ngram_map_accept``: the chosen value remembers how much of its draft was taken."""
        if self.last_draft_created:
            self.keys[self.last_draft_key_idx].n_accepted[self.last_draft_value_idx] = int(n_accepted)


class NgramCache:
    """``ngram-cache`` without cache files: the context n-gram cache of one slot, kept across requests."""

    def __init__(self, n_draft: int = CACHE_N_DRAFT) -> None:
        self.n_draft = int(n_draft)
        self.context: Dict[tuple, Dict[int, int]] = {}  # n-gram -> next token -> count, in first-seen order
        self.cache_size = 0

    def begin(self, prompt: Sequence[int]) -> None:
        """Nothing: llama.cpp's ``begin`` is a no-op for the cache."""

    def _update(self, inp: Sequence[int]) -> None:
        # common_ngram_cache_update(..., inp, nnew = len(inp)): n-grams inside ``inp`` only
        for size in range(CACHE_NGRAM_MIN, CACHE_NGRAM_MAX + 1):
            for i in range(size, len(inp)):
                part = self.context.setdefault(tuple(inp[i - size:i]), {})
                part[inp[i]] = part.get(inp[i], 0) + 1

    def _try(self, ngrams: List[tuple]) -> int | None:
        for i in range(len(ngrams) - 1, -1, -1):
            part = self.context.get(ngrams[i])
            if part is None:
                continue
            max_count, sum_count, max_token = 0, 0, None
            for token, count in reversed(list(part.items())):  # libstdc++'s order where it matters
                if count > max_count:  # no static cache: every static weight is 1
                    max_token, max_count = token, count
                sum_count += count
            if sum_count < _CACHE_MIN_SAMPLE[i] or 100 * max_count < _CACHE_MIN_PERCENT[i] * sum_count:
                continue
            return max_token
        return None

    def draft(self, prompt: Sequence[int], last: int) -> List[int]:
        if self.cache_size < len(prompt) + 1:
            self._update([*prompt[self.cache_size:], last])
            self.cache_size = len(prompt) + 1
        inp = [*prompt, last]
        if len(inp) < 2:  # LLAMA_NGRAM_STATIC
            return []
        draft: List[int] = []
        while len(draft) < self.n_draft:
            seq = inp + draft
            ngrams = [tuple(seq[len(seq) - size:]) for size in range(CACHE_NGRAM_MIN, CACHE_NGRAM_MAX + 1)]
            token = self._try(ngrams)
            if token is None:
                break  # the dynamic and static caches are empty without files
            draft.append(token)
        return draft

    def accept(self, n_accepted: int) -> None:
        """Nothing: the cache learns from the tokens it is given, not from the outcome."""
