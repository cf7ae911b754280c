# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: lossless versus lossy-by-design judging of A/B configs, and the quality measures.
"""Which configs of an A/B run must be lossless, against which reference, and how different the others are.

The A/B vehicle can run any llama.cpp knob, not only speculation. Speculation is lossless under greedy
verification: a speculative config whose text differs from its reference is a correctness bug. Other
knobs change the numbers by design (a quantized model file, a q8_0 or q4_0 KV cache, another
batch/ubatch, another slot split, another backend placement); their text may differ from the
baseline's, and what the operator needs then is *how much*, beside the speed.

:func:`classify` compares a config's llama-server options (its rendered env, ``LLAMA_EXTRA_ARGS``
included, parsed as llama-server reads them) with the baseline's and sorts every changed option:

- speculative (``--spec-*``, ``--draft*``, ``--lookup-cache-*``): lossless by construction;
- numerics (:data:`NUMERICS`: model file, KV cache, batch/ubatch, slot split, backend placement): may
  change the text by design;
- neutral (:data:`NEUTRAL`: threads, ports, endpoints, logging): never change what is computed;
- anything else: treated as lossless (the strict default) and named, so the operator can declare it.

A config may declare ``lossless: true`` (judge strictly even though it changes numerics) or
``lossless: false`` (it changes numerics in a way this table does not know); a config that changes
nothing but speculation cannot be declared lossy.

:func:`plan` adds the reference: a pure speculative config is compared with the baseline; a mixed
config (a new KV type *and* a drafter) with the run's config that has the same options without the
speculation, when there is one; otherwise the mixed config is judged lossy-by-design against the
baseline and the report says its speculation is unverified.

:func:`quality` measures a lossy-by-design config against the baseline's greedy texts per shape.
Tokens here are word pieces: the answer split with GPT-2's pre-tokenizer pattern (the bench records
texts, not the server's token ids), so the numbers mean the same on every model.

The texts of a run live here too (:func:`is_empty`, :func:`first_divergence`, which prompt an answer
answered, the baseline's reference texts): the controller's ``_judge`` compares them for losslessness.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _flags

LOSSLESS = "lossless"
LOSSY = "lossy-by-design"
LOSSY_LABEL = "lossy by design"

# Options that change what the model computes: the text may differ by design. Value: what it is, for the report.
NUMERICS: dict[str, str] = {
    "--model": "model file", "--model-url": "model file", "--hf-repo": "model file", "--hf-file": "model file",
    "--docker-repo": "model file", "--lora": "adapter", "--lora-scaled": "adapter",
    "--control-vector": "adapter", "--control-vector-scaled": "adapter", "--override-kv": "model file",
    "--cache-type-k": "KV cache type", "--cache-type-v": "KV cache type", "--kv-offload": "KV cache placement",
    "--swa-full": "KV cache", "--kv-unified": "slot split", "--kv-unified-per-slot": "slot split",
    "--parallel": "slot split", "--ctx-size": "slot split",
    "--batch-size": "batch/ubatch", "--ubatch-size": "batch/ubatch",
    "--flash-attn": "backend kernels", "--gpu-layers": "backend placement", "--split-mode": "backend placement",
    "--tensor-split": "backend placement", "--main-gpu": "backend placement", "--device": "backend placement",
    "--override-tensor": "backend placement", "--cpu-moe": "backend placement", "--n-cpu-moe": "backend placement",
    "--n-cpu-ffn": "backend placement", "--repack": "backend kernels", "--op-offload": "backend placement",
    "--rpc": "backend placement", "--no-host": "backend placement",
}
# Options that never change what is computed for a request (scheduling, endpoints, logging).
NEUTRAL = frozenset({
    "--threads", "--threads-batch", "--cpu-mask", "--cpu-range", "--cpu-strict", "--prio", "--poll",
    "--cpu-mask-batch", "--cpu-range-batch", "--cpu-strict-batch", "--prio-batch", "--poll-batch", "--numa",
    "--host", "--port", "--reuse-port", "--path", "--api-prefix", "--alias", "--tags", "--timeout",
    "--threads-http", "--sse-ping-interval", "--metrics", "--props", "--slots", "--slot-save-path", "--perf",
    "--log-disable", "--log-file", "--log-jsonl", "--log-colors", "--verbose", "--verbosity", "--log-prefix",
    "--log-timestamps", "--log-prompts-dir", "--api-key", "--api-key-file", "--ssl-key-file", "--ssl-cert-file",
    "--cors-origins", "--cors-methods", "--cors-headers", "--cors-credentials", "--ui", "--ui-config",
    "--ui-config-file", "--warmup", "--offline", "--sleep-idle-seconds", "--load-mode", "--lazy-mode",
})
# GPT-2's pre-tokenizer split: what "token" means in the quality measures (see the module docstring).
_PIECES = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+")


class QualityError(SpecdecError):
    """A config's lossless declaration that cannot stand; the message names the config and the fix."""


def is_speculative(flag: str) -> bool:
    return flag.startswith(("--spec-", "--draft", "--lookup-cache-"))


def options_of(env: Mapping[str, Any] | None) -> dict[str, Any]:
    """llama-server's options (canonical flag -> value) from an env, LLAMA_EXTRA_ARGS included."""
    try:
        return dict(_flags.parse([], {k: ("" if v is None else v) for k, v in (env or {}).items()})["options"])
    except SpecdecError:
        return {}  # an env llama-server cannot read is the preflight's finding, not this one's


def config_env(config: Mapping[str, Any]) -> dict[str, Any]:
    """What the server receives for a config: the rendering's env when the run kept it (its effective env, with the
    command line's options as LLAMA_ARG_*, when it has one), else its override."""
    rendering = config.get("rendering")
    if isinstance(rendering, Mapping) and isinstance(rendering.get("effective_env"), Mapping):
        return dict(rendering["effective_env"])
    if isinstance(rendering, Mapping) and isinstance(rendering.get("env"), Mapping):
        return dict(rendering["env"])
    env = config.get("server_config")
    return dict(env) if isinstance(env, Mapping) else {}


def _declared(value: Any, name: str) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1"):
        return True
    if text in ("false", "no", "0"):
        return False
    raise QualityError(f"config {name}: lossless must be true or false (or left out to infer it), got {value!r}")


def _shown(value: Any) -> str:
    return "unset" if value is None else str(value)


def classify(env: Mapping[str, Any], baseline_env: Mapping[str, Any], name: str = "config",
             declared: Any = None) -> dict[str, Any]:
    """How a config must be judged against the baseline: lossless or lossy-by-design, and why."""
    mine, base = options_of(env), options_of(baseline_env)
    changed = sorted(f for f in set(mine) | set(base) if mine.get(f) != base.get(f))
    numerics = [{"flag": f, "kind": NUMERICS[f], "baseline": _shown(base.get(f)), "config": _shown(mine.get(f))}
                for f in changed if f in NUMERICS]
    speculative = [f for f in changed if is_speculative(f)]
    other = [f for f in changed if f not in NUMERICS and f not in NEUTRAL and not is_speculative(f)]
    said = _declared(declared, name)
    if said is False and not numerics and not other:
        what = (f"only speculative settings ({', '.join(speculative)})" if speculative
                else "nothing that alters the numbers")
        raise QualityError(f"config {name}: declares lossless: false but changes {what}; speculation must be "
                           f"lossless: remove lossless: false")
    if said is not None:
        judging = LOSSLESS if said else LOSSY
        source = f"declared (lossless: {'true' if said else 'false'})"
    elif numerics:
        judging = LOSSY
        source = "inferred: changes " + ", ".join(f"{n['kind']} ({n['flag']} {n['baseline']} -> {n['config']})"
                                                  for n in numerics)
    else:
        judging = LOSSLESS
        source = ("inferred: changes only speculative settings" if speculative and not other else
                  "inferred: changes nothing that alters the numbers" if not other else
                  f"inferred (strict default): {', '.join(other)} not known to change the numbers; declare "
                  f"lossless: false if it does")
    return {"judging": judging, "source": source, "numerics": numerics, "speculative": speculative,
            "other": other, "reference": None, "reference_note": None}


def _without_speculation(options: Mapping[str, Any]) -> dict[str, Any]:
    return {f: v for f, v in options.items() if not is_speculative(f)}


def plan(configs: Sequence[Mapping[str, Any]], baseline: str,
         skip: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """Every config's judging and reference (``skip``: configs that are never compared, such as drafter probes)."""
    by_name = {str(c["name"]): c for c in configs}
    base_env = config_env(by_name[baseline]) if baseline in by_name else {}
    base_spec = {f: v for f, v in options_of(base_env).items() if is_speculative(f)}
    out: dict[str, dict[str, Any]] = {}
    for c in configs:
        name = str(c["name"])
        if name == baseline:
            out[name] = {"judging": "reference", "source": "the baseline", "numerics": [], "speculative": [],
                         "other": [], "reference": None, "reference_note": None}
            continue
        p = classify(config_env(c), base_env, name, c.get("lossless"))
        if name in skip:
            p.update(judging="not compared", reference=None)
        elif p["judging"] == LOSSLESS or not p["speculative"]:
            p["reference"] = baseline
        else:
            # a mixed config: its speculation must be lossless against the same numerics without it
            mine = _without_speculation(options_of(config_env(c)))
            same = [str(o["name"]) for o in configs if str(o["name"]) not in (name, *skip)
                    and _without_speculation(options_of(config_env(o))) == mine
                    and {f: v for f, v in options_of(config_env(o)).items() if is_speculative(f)} == base_spec]
            if same:
                source = p["source"].replace("inferred: changes ", "inferred: speculation layered on ", 1)
                p.update(judging=LOSSLESS, reference=same[0], source=source,
                         reference_note=f"same numerics without the speculation ({same[0]}): its speculation "
                                        f"must be lossless against that; quality against the baseline beside it")
            else:
                p.update(reference=baseline,
                         reference_note="no config in this run has the same numerics without the speculation, so "
                                        "its speculation is unverified: add one (the same knobs, no drafter) to "
                                        "check it")
        out[name] = p
    return out


def pieces(text: str) -> list[str]:
    """The word pieces of a text (GPT-2's pre-tokenizer split)."""
    return _PIECES.findall(text)


def compare(reference: str, text: str) -> dict[str, Any]:
    """One answer against the reference's: identical?, first difference (chars, pieces), agreement."""
    a, b = pieces(reference), pieces(text)
    common = min(len(a), len(b))
    agree = sum(1 for i in range(common) if a[i] == b[i])
    first_piece = next((i for i in range(common) if a[i] != b[i]), common)
    limit = min(len(reference), len(text))
    first_char = next((i for i in range(limit) if reference[i] != text[i]), limit)
    return {"identical": reference == text, "first_char": None if reference == text else first_char,
            "first_piece": None if reference == text else first_piece, "agree": agree, "common": common}


def _summary(rows: list[dict[str, Any]], vacuous: int) -> dict[str, Any]:
    differ = [r for r in rows if not r["identical"]]
    common = sum(r["common"] for r in rows)
    return {
        "prompts": len(rows), "identical": len(rows) - len(differ),
        "identical_share": (len(rows) - len(differ)) / len(rows) if rows else None,
        "first_difference_chars": sum(r["first_char"] for r in differ) / len(differ) if differ else None,
        "first_difference_tokens": sum(r["first_piece"] for r in differ) / len(differ) if differ else None,
        "token_agreement": sum(r["agree"] for r in rows) / common if common else None,
        "vacuous": vacuous,
    }


# ---------------------------------------------------------------------------------------------
# the texts of a run: here, not in the controller's _judge, because quality() and setup() need them too


def is_empty(request: Mapping[str, Any]) -> bool:
    """An answer that says nothing: flagged empty by spec_bench, or only whitespace."""
    text = request.get("text")
    return bool(request.get("empty")) or not isinstance(text, str) or not text.strip()


def first_divergence(a: str, b: str, context: int = 24) -> dict[str, Any] | None:
    """Where two texts first differ (character position) with a short context of each; None when equal."""
    if a == b:
        return None
    limit = min(len(a), len(b))
    pos = next((i for i in range(limit) if a[i] != b[i]), limit)
    start = max(0, pos - context)
    return {
        "position": pos,
        "baseline": a[start:pos + context],
        "candidate": b[start:pos + context],
        "context_start": start,
        "baseline_len": len(a),
        "candidate_len": len(b),
    }


def _text_key(r: Mapping[str, Any]) -> tuple[str, Any]:
    """Which prompt a request answered: its fingerprint when the bench recorded one (rounds and repeats
    may send different prompts under the same index), else its shape and index."""
    return (r["shape"], r.get("prompt_sha256") or r.get("prompt_index", 0))


def _reference_texts(requests: list[dict[str, Any]]) -> tuple[dict[tuple[str, Any], str], list[str]]:
    """The baseline's first non-empty text per (shape, prompt) and where the baseline disagrees with itself."""
    ref: dict[tuple[str, Any], str] = {}
    warnings = []
    for r in requests:
        if is_empty(r):
            continue
        key = _text_key(r)
        if key not in ref:
            ref[key] = r["text"]
        elif r["text"] != ref[key]:
            d = first_divergence(ref[key], r["text"])
            warnings.append(f"the baseline is not deterministic on {key[0]} prompt {r.get('prompt_index', 0)} "
                            f"(round {r['round']}, "
                            f"repeat {r.get('repeat', 0)}, char {d['position']}): losslessness verdicts on this "
                            f"prompt are unreliable; is temperature 0 really in force?")
    return ref, warnings


def quality(requests: Sequence[Mapping[str, Any]], reference: Mapping[tuple[str, Any], str]) -> dict[str, Any]:
    """Per shape and over all shapes: the config's greedy answers against the reference texts.

    One answer per prompt (the first non-empty one; at temperature 0 its repeats are the same);
    ``identical_share`` is the share of prompts whose text equals the reference's,
    ``first_difference_*`` the mean position of the first difference over the prompts that differ (in
    characters and in word pieces), ``token_agreement`` the share of word-piece positions that agree
    over the length both answers have. A prompt with an empty answer on either side is ``vacuous``."""
    seen: dict[tuple[str, Any], str] = {}
    empty: set[tuple[str, Any]] = set()
    for r in requests:
        key = _text_key(r)
        if is_empty(r):
            empty.add(key)
        elif key not in seen:
            seen[key] = r["text"]
    shapes: dict[str, list[dict[str, Any]]] = {}
    vacuous: dict[str, int] = {}
    for key in list(seen) + sorted(empty - set(seen), key=repr):
        if key not in seen or key not in reference:
            vacuous[key[0]] = vacuous.get(key[0], 0) + 1
            shapes.setdefault(key[0], [])
            continue
        shapes.setdefault(key[0], []).append(compare(reference[key], seen[key]))
    out = {s: _summary(rows, vacuous.get(s, 0)) for s, rows in shapes.items()}
    every = [row for rows in shapes.values() for row in rows]
    return {"shapes": out, "overall": _summary(every, sum(vacuous.values())),
            "tokens": "word pieces (GPT-2's pre-tokenizer split of the text)"}


def as_lossy(texts: Mapping[str, Any]) -> dict[str, Any]:
    """A text comparison of a lossy-by-design config: differences are measured, never a correctness bug."""
    out = dict(texts)
    out["lossless"] = LOSSY_LABEL if texts.get("compared") else texts.get("lossless")
    return out


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100.0 * value:.1f} %"


def _num(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"


def markdown_lines(judged: Mapping[str, Any]) -> list[str]:
    """The report's "Lossless or lossy by design" section: each config's judging, reference and quality."""
    configs = judged["configs"]
    rows = [(n, configs[n]) for n in judged["order"] if (configs[n].get("judging") or {}).get("judging")
            in (LOSSLESS, LOSSY)]
    if not rows:
        return []
    out = ["Speculation must be lossless: any text difference against its reference is a correctness bug "
           "(INVALID). A config that changes the numbers by design (model file, KV cache type, batch/ubatch, "
           "slot split, backend placement) is judged for speed as usual and, in place of the lossless gate, "
           "measured against the baseline's greedy texts.", ""]
    for name, c in rows:
        j = c["judging"]
        ref = j.get("reference")
        out.append(f"- {name}: **{j['judging']}** ({j['source']})" + (f"; reference: {ref}" if ref else "")
                   + (f"; {j['reference_note']}" if j.get("reference_note") else ""))
    lossy = [(n, c) for n, c in rows if c.get("quality")]
    if not lossy:
        return out
    out += ["", "**Quality against the baseline's greedy texts** (tokens are word pieces: the text split with "
            "GPT-2's pre-tokenizer; first difference: mean over the prompts that differ; agreement: word-piece "
            "positions that match over the length both answers have)", ""]
    header = ["config", "shape", "prompts", "identical", "first difference (chars)", "first difference (tokens)",
              "token agreement", "speed verdict"]
    body = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _dummy in header) + "|"]
    for name, c in lossy:
        for shape, q in [*c["quality"]["shapes"].items(), ("all", c["quality"]["overall"])]:
            row = (c["shapes"].get(shape) or {}) if shape != "all" else {}
            speed = row.get("verdict", "-") if shape != "all" else "-"
            if row.get("speedup") is not None:
                speed = f"{speed} {row['speedup']:.2f}x"
            body.append("| " + " | ".join([name, shape, str(q["prompts"]),
                                           f"{q['identical']} ({_pct(q['identical_share'])})",
                                           _num(q["first_difference_chars"]), _num(q["first_difference_tokens"]),
                                           _pct(q["token_agreement"]), speed]) + " |")
    out += body
    out += ["", "> Speed bought with quality is the operator's decision: a lossy-by-design config is never "
                "recommended automatically, and promoting it needs the explicit acknowledgement "
                "(specdec_promote_accept_lossy=true)."]
    return out


def evidence(judged_config: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a promotion records of a config's judging: None for a lossless config with nothing measured."""
    j = judged_config.get("judging") or {}
    if j.get("judging") != LOSSY and not judged_config.get("quality"):
        return None
    return {"judging": j.get("judging"), "source": j.get("source"), "reference": j.get("reference"),
            "numerics": j.get("numerics"), "quality": judged_config.get("quality")}


NOT_RECOMMENDED = ("lossy by design: speed bought with quality is the operator's decision (its speed verdicts and "
                   "quality numbers are in the report; promoting it needs specdec_promote_accept_lossy=true)")


def promotion_evidence(report: Mapping[str, Any], winner: str, accept_lossy: bool = False) -> dict[str, Any] | None:
    """The judging a promotion records (None for a lossless winner); refuses a lossy-by-design winner unless
    the operator accepts it explicitly."""
    judged = (report.get("judged") or {}).get("configs") or {}
    found = evidence(judged.get(winner) or {})
    if found is None or found["judging"] != LOSSY:
        return found
    overall = (found.get("quality") or {}).get("overall") or {}
    summary = (f"identical on {overall.get('identical', '-')} of {overall.get('prompts', '-')} prompts, token "
               f"agreement {_pct(overall.get('token_agreement'))}")
    if not accept_lossy:
        raise QualityError(f"specdec_promote_config: {winner!r} is lossy by design in run {report.get('run_id')} "
                           f"({found['source']}; against the baseline's greedy texts: {summary}); speed bought with "
                           f"quality is the operator's decision: set specdec_promote_accept_lossy=true to promote it")
    return dict(found, accepted="specdec_promote_accept_lossy=true", summary=summary)


def summary_lines(judged: Mapping[str, Any]) -> list[str]:
    """One plain line per lossy-by-design config (quality against the baseline) and per mixed config's reference."""
    lines = []
    for name in judged["order"]:
        c = judged["configs"][name]
        j = c.get("judging") or {}
        if j.get("judging") == LOSSY and c.get("quality"):
            o = c["quality"]["overall"]
            first = ("-" if o["first_difference_chars"] is None else
                     f"char {o['first_difference_chars']:.1f} (token {o['first_difference_tokens']:.1f})")
            lines.append(f"quality of {name} against the baseline (lossy by design: the operator's decision): identical "
                         f"on {o['identical']} of {o['prompts']} prompts, first difference at {first}, token agreement "
                         f"{_pct(o['token_agreement'])}")
        elif j.get("judging") == LOSSLESS and j.get("reference") not in (None, judged["baseline"]):
            lines.append(f"{name}: lossless against {j['reference']} (the same numerics without its speculation)")
    return lines


def setup(g: dict[str, Any], plan: Mapping[str, Any], gathered: Mapping[str, Any], baseline: str,
          ref: Mapping[tuple[str, Any], str], warnings: list[str]) -> None:
    """Marks a gathered config (``_judge.judge``) knob / lossy, sets its text reference when that is another
    config, and its quality against the baseline's texts when it changes the numbers."""
    g["knob"] = bool(plan["numerics"]) or plan["judging"] == LOSSY
    g["lossy"] = plan["judging"] == LOSSY
    if plan.get("reference") and plan["reference"] in gathered and plan["reference"] != baseline:
        g["reference_texts"] = _reference_texts(gathered[plan["reference"]]["requests"])[0]
    if g["knob"] and g["requests"]:
        g["quality"] = quality(g["requests"], ref)
    if plan.get("reference_note") and plan["judging"] == LOSSY and plan["speculative"]:
        warnings.append(f"{g['name']!r}: {plan['reference_note']}")
