# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: PEP 440 versions, parsed and ordered with the standard library only.
"""Version gates: "0.20.1 or later" must refuse ``0.20.1rc1`` and ``0.20.1.dev42``.

A small port of the ordering PEP 440 defines (and ``packaging.version`` implements): epoch, release
(trailing zeros do not count: 1.0 == 1.0.0), then pre-releases (a < b < rc) and development releases
before the release, post-releases after it; ``.devN`` of a pre- or post-release sorts before that
pre- or post-release. The local part (``+cu124``) only breaks ties. Spellings are normalised as PEP
440 says (``alpha``/``beta``/``c``/``pre``/``preview``, ``-``/``_``/``.`` separators, an implicit 0).

``search`` reads the first version in a tool's output (``cmake version 3.28.0-rc1``, ``release 12.4,
V12.4.131``); whatever follows the longest PEP 440 prefix (a git hash such as ``-dd7f95766``) is ignored.
"""
from __future__ import annotations

import re
from typing import Any, Sequence, Tuple

_PRE = {"a": "a", "alpha": "a", "b": "b", "beta": "b", "c": "rc", "rc": "rc", "pre": "rc", "preview": "rc"}
_PRE_ORDER = {"a": 0, "b": 1, "rc": 2}
_PATTERN = (
    r"v?(?:(?P<epoch>\d+)!)?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre_l>alpha|beta|preview|pre|rc|a|b|c)[-_.]?(?P<pre_n>\d+)?)?"
    r"(?:-(?P<post_n1>\d+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>\d+)?)?"
    r"(?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>\d+)?)?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?"
)
_FULL = re.compile(r"\s*" + _PATTERN + r"\s*\Z", re.IGNORECASE)
_SEARCH = re.compile(r"(?<![\w.])" + _PATTERN, re.IGNORECASE)


class Version:
    """One PEP 440 version; compares with another Version or with a tuple of ints (a plain release)."""

    __slots__ = ("dev", "epoch", "local", "post", "pre", "release")

    def __init__(self, release: Sequence[int], epoch: int = 0, pre: Tuple[str, int] | None = None,
                 post: int | None = None, dev: int | None = None, local: str | None = None) -> None:
        self.epoch = int(epoch)
        self.release = tuple(int(p) for p in release)
        self.pre = pre
        self.post = post
        self.dev = dev
        self.local = local

    @classmethod
    def of(cls, other: Any) -> Version:
        if isinstance(other, Version):
            return other
        if isinstance(other, tuple):
            return cls(other)
        return parse(other)

    def key(self) -> tuple:
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:
            release.pop()
        # A plain .devN release sorts before every pre-release of the same release.
        if self.pre is None and self.post is None and self.dev is not None:
            pre: tuple = (-1, 0)
        elif self.pre is None:
            pre = (3, 0)
        else:
            pre = (_PRE_ORDER[self.pre[0]], self.pre[1])
        post = (-1,) if self.post is None else (self.post,)
        dev = (1, 0) if self.dev is None else (0, self.dev)
        local = () if self.local is None else tuple(
            (1, int(p), "") if p.isdigit() else (0, 0, p) for p in re.split(r"[-_.]", self.local.lower()))
        return (self.epoch, tuple(release), pre, post, dev, local)

    def _cmp(self, other: Any) -> tuple:
        return self.key(), Version.of(other).key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (Version, tuple)):
            return NotImplemented
        a, b = self._cmp(other)
        return a == b

    def __hash__(self) -> int:
        return hash(self.key())

    def __lt__(self, other: Any) -> bool:
        a, b = self._cmp(other)
        return a < b

    def __le__(self, other: Any) -> bool:
        a, b = self._cmp(other)
        return a <= b

    def __gt__(self, other: Any) -> bool:
        a, b = self._cmp(other)
        return a > b

    def __ge__(self, other: Any) -> bool:
        a, b = self._cmp(other)
        return a >= b

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None or self.dev is not None

    def __str__(self) -> str:
        text = (f"{self.epoch}!" if self.epoch else "") + ".".join(str(p) for p in self.release)
        if self.pre:
            text += f"{self.pre[0]}{self.pre[1]}"
        if self.post is not None:
            text += f".post{self.post}"
        if self.dev is not None:
            text += f".dev{self.dev}"
        if self.local:
            text += f"+{self.local}"
        return text

    def __repr__(self) -> str:
        return f"Version('{self}')"


def _from_match(m: re.Match) -> Version:
    pre = None
    if m.group("pre_l"):
        pre = (_PRE[m.group("pre_l").lower()], int(m.group("pre_n") or 0))
    post = None
    if m.group("post_n1") is not None:
        post = int(m.group("post_n1"))
    elif m.group("post_l"):
        post = int(m.group("post_n2") or 0)
    dev = int(m.group("dev_n") or 0) if m.group("dev_l") else None
    return Version([int(p) for p in m.group("release").split(".")], int(m.group("epoch") or 0), pre, post, dev,
                   m.group("local"))


def parse(text: Any) -> Version:
    """A PEP 440 version from ``text``; ValueError naming it when it is not one."""
    m = _FULL.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a PEP 440 version (like 0.20.1, 0.20.1rc1, 0.20.1.post2, 0.20.1.dev3)")
    return _from_match(m)


def search(text: Any) -> Version | None:
    """The first version (at least major.minor) in a tool's output, or None. What follows its longest
    PEP 440 prefix is ignored, and so are a ``-N`` suffix and a local part: in a tool's version
    (gcc ``12.2.0-14+deb12u1``) those are a distribution's package revision, not a later release."""
    for m in _SEARCH.finditer(str(text)):
        if "." in m.group("release"):
            found = _from_match(m)
            if m.group("post_n1") is not None:
                found.post = None
            found.local = None
            return found
    return None
