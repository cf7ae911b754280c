# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: which variable names look secret, and their values masked wherever they are shown.
"""A variable whose name looks like a secret is never shown: not in a report, a module's result or a message.

A name looks secret when one of its words (split at ``_``, ``-`` and ``.``) is ``TOKEN``, ``KEY``, ``SECRET``,
``PASSWORD`` (``PASSWD``, ``PASSPHRASE``), ``AUTH`` or ``CREDENTIAL(S)``, or ends in ``TOKEN``, ``SECRET``,
``PASSWORD`` or ``APIKEY`` (``HFTOKEN``): ``HF_TOKEN``, ``HUGGING_FACE_HUB_TOKEN``, ``LLAMA_API_KEY``,
``AWS_SECRET_ACCESS_KEY``. Plural counts such as ``LLAMA_ARG_IMAGE_MAX_TOKENS`` do not. The value is replaced by
``MASK`` (what Ansible shows for a ``no_log`` value); code that compares values skips a masked one (``is_masked``).
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, Mapping, Set

MASK = "********"
_WORDS = frozenset(("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "AUTH", "CREDENTIAL", "CREDENTIALS"))
_ENDINGS = ("TOKEN", "SECRET", "PASSWORD", "APIKEY")


def looks_secret(name: Any) -> bool:
    """Whether a variable's name looks like it holds a secret (module docstring)."""
    words = [w for w in re.split(r"[_\-.]", str(name).upper()) if w]
    return any(w in _WORDS or w.endswith(_ENDINGS) for w in words)


def is_masked(value: Any) -> bool:
    return value == MASK


def masked(env: Mapping[str, Any] | None) -> Dict[str, Any]:
    """``env`` with the value of each variable whose name looks secret replaced by ``MASK`` (None, an unset, kept)."""
    return {k: (MASK if v is not None and looks_secret(k) else v) for k, v in (env or {}).items()}


def secret_values(*envs: Mapping[str, Any] | None) -> Set[str]:
    """The non-empty values of the variables whose names look secret, for a module's ``no_log_values``."""
    return {str(v) for env in envs for k, v in (env or {}).items() if v not in (None, "") and looks_secret(k)}


def scrub(text: str, values: Iterable[str]) -> str:
    """``text`` with each of ``values`` (secrets) replaced by ``MASK``, longest first."""
    for value in sorted(set(values), key=len, reverse=True):
        if value:
            text = text.replace(value, MASK)
    return text
