# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the screen's timing of a real speculative round, on a copy of the target beside production.
"""What a speculative round really costs on this target, timed on a copy of it beside production.

The screen times a verification as a batch of K + 1 tokens on a cached prefix (``measure_batches``). A real round
costs more: the draft is built, the batch is decoded with logits for every row, each row is sampled and compared,
the cache is trimmed. On a target whose step is mostly fixed cost per call (a tiny model, well under a millisecond
a token) that difference is most of the round, and the screen over-predicted by up to 2x.

Where a copy of the target fits beside production (no GPU device on the host, production's model file readable,
memory for a second copy), the copy is started twice on a loopback port with production's own arguments and
environment (its port, keys, model source and speculation taken out) and ``ngram-mod`` at two depths, and given the
screen's prompts. Each request's decode time, its steps and its rows (``timings``: ``predicted_n``, ``draft_n``,
``draft_n_accepted``) fit ``time = steps x per_round_ms + rows x per_row_ms``; the same copy's batches are timed
as production's were, and the ratio of the fitted round to the batch corrects production's batch costs. Each
plain draft model is run on the copy too (depths 1 and its deepest K): what its rounds cost beyond that fitted
verification is the drafter's, fitted per round and per drafted token (a drafter in the server's own rounds costs
more than its side server's steps: on the project's tiny bed 0.8 ms a round and 0.4 a token against 0.33). A host
where a copy does not fit keeps the batch costs, and the screen says so (``verify_copy.used: false`` with why).
Production is never restarted or reconfigured; the copy is a transient unit with a runtime limit, stopped in every
case.
"""
from __future__ import annotations

import glob
import os
import random
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.screen._host_load import spread
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._unit_command import _llama_walk

GPU_NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/kfd", "/dev/dri/renderD*")
CTX = 4096
RESAMPLES = 200
# production's options the copy does not take: where it listens and who may ask, its model source, its
# speculation (the copy speculates its own way; every draft option's long names include a --spec-* one), its slots
# and context (one slot, a small context)
DROP_PREFIXES = ("--spec", "--draft", "--lookup-cache", "--ssl", "--api-key", "--mmproj", "--hf-", "--model",
                 "--port", "--host", "--ctx-size", "--parallel", "--slot-save-path", "--log-file", "--metrics",
                 "--alias", "--reuse-port")
# the environment it keeps: production's own LLAMA_ARG_* (those not dropped above) and these
ENV_KEEP = ("PATH", "LD_LIBRARY_PATH", "HOME", "LANG", "TZ")
ENV_KEEP_PREFIXES = ("OMP_", "GGML_", "LC_", "LLAMA_CACHE")


def _dropped(opt: Any) -> bool:
    return any(name.startswith(DROP_PREFIXES) for name in opt.names if name.startswith("--"))


def ngram_spec(n_max: int) -> List[str]:
    """The copy's own proposer for timing the target's rounds: ``ngram-mod`` at depth ``n_max``, drafting from a
    match of 8 tokens and down to one token."""
    return ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", str(int(n_max)), "--spec-ngram-mod-n-min", "1",
            "--spec-ngram-mod-n-match", "8"]


def draft_spec(draft: str, n_max: int, p_min: float = 0.0, n_min: int = 0) -> List[str]:
    """A draft-simple candidate's speculation, as the copy runs it to time the drafter in the server's rounds."""
    out = ["--spec-type", "draft-simple", "--spec-draft-model", str(draft), "--spec-draft-n-max", str(int(n_max))]
    if p_min:
        out += ["--spec-draft-p-min", str(p_min)]
    if n_min:
        out += ["--spec-draft-n-min", str(int(n_min))]
    return out


def copy_args(argv: Sequence[str], model: str, port: int, spec: Sequence[str]) -> List[str]:
    """The copy's command line: production's binary and arguments less what :data:`DROP_PREFIXES` names, then its
    own model file, loopback port, one slot, a small context and ``spec`` (:func:`ngram_spec`, :func:`draft_spec`)."""
    words = [str(w) for w in argv]
    keep: List[str] = [words[0]] if words else []
    for start, end, opt in _llama_walk(words[1:]):
        if opt is None or not _dropped(opt):
            keep += words[1 + start:1 + end]
    return [*keep, "-m", model, "--host", "127.0.0.1", "--port", str(int(port)), "-c", str(CTX), "-np", "1",
            *spec]


def copy_env(environ: Mapping[str, str]) -> Dict[str, str]:
    """Production's environment as the copy gets it: its LLAMA_ARG_* settings less the dropped options (the env
    name of each option is the flags table's), and the runtime's own variables (:data:`ENV_KEEP`); no value with a
    newline (a transient unit's ``--setenv`` could not carry it)."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _flags as flags_mod

    dropped_env = {opt.env for opt in flags_mod.OPTIONS if opt.env and _dropped(opt)}
    out: Dict[str, str] = {}
    for name, value in environ.items():
        if "\n" in value or "\r" in value:
            continue
        if name.startswith("LLAMA_ARG_"):
            if name not in dropped_env:
                out[name] = value
        elif name in ENV_KEEP or name.startswith(ENV_KEEP_PREFIXES):
            out[name] = value
    return out


def meminfo_available(text: str) -> int | None:
    """MemAvailable from /proc/meminfo, in bytes."""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024
    return None


def fits(model: str | None, available: int | None, gpu_nodes: Sequence[str], extra: int = 0) -> str | None:
    """Why a copy of the target (and ``extra`` bytes of draft model beside it) does not fit here (None when it
    does)."""
    if gpu_nodes:
        return (f"the host has GPU devices ({', '.join(gpu_nodes[:2])}): a copy of the target would take "
                "production's VRAM, so the verification batches are timed on production alone")
    if not model or not os.path.isfile(model):
        return f"production's model file ({model or 'not in /props'}) is not readable here"
    if available is None:
        return "MemAvailable is not in /proc/meminfo: whether a copy fits is unknown"
    need = int(1.25 * (os.path.getsize(model) + int(extra))) + (512 << 20)
    if available < need:
        return (f"a copy of the target needs about {need >> 20} MiB and {available >> 20} MiB are available: "
                "the verification batches are timed on production alone")
    return None


def gpu_nodes(root: str = "/") -> List[str]:
    found: List[str] = []
    for pattern in GPU_NODES:
        found += sorted(glob.glob(os.path.join(root, pattern.lstrip("/"))))
    return found


def request_point(timings: Mapping[str, Any]) -> Tuple[int, int, float] | None:
    """(steps, rows, ms) of one speculative request's decode: the first token comes from the prefill, every later
    step yields its accepted draft tokens and one of its own, and verifies its draft plus one row."""
    try:
        n, ms = int(timings["predicted_n"]), float(timings["predicted_ms"])
        drafted, accepted = int(timings.get("draft_n") or 0), int(timings.get("draft_n_accepted") or 0)
    except (KeyError, TypeError, ValueError):
        return None
    steps = n - 1 - accepted
    if steps < 1 or ms <= 0 or drafted < accepted:
        return None
    return steps, steps + drafted, ms


def solve(points: Sequence[Tuple[int, int, float]]) -> Tuple[float, float] | None:
    """The unconstrained least squares of ``ms = steps x per_round + rows x per_row``; None when the points cannot
    tell the two apart (no points, or every point with the same rows per step)."""
    sxx = sum(s * s for s, _r, _m in points)
    syy = sum(r * r for _s, r, _m in points)
    sxy = sum(s * r for s, r, _m in points)
    sxm = sum(s * m for s, _r, m in points)
    sym = sum(r * m for _s, r, m in points)
    det = sxx * syy - sxy * sxy
    if not points or syy <= 0 or sxx <= 0 or det <= 1e-9 * sxx * syy:
        return None
    return (sxm * syy - sym * sxy) / det, (sym * sxx - sxm * sxy) / det


def fit_why(points: Sequence[Tuple[int, int, float]]) -> Tuple[Tuple[float, float] | None, str | None]:
    """:func:`fit` and, when it is None, why: a fit that cannot tell the costs apart, or whose costs come out
    negative or zero (a round cannot cost less than nothing: such a fit is noise, never used)."""
    got = fit(points)
    if got is not None:
        return got, None
    raw = solve(points)
    if raw is None:
        return None, (f"its {len(points)} requests cannot separate a round's fixed cost from its cost per "
                      "row or token (too few, or all alike)")
    return None, (f"its fit came out at {raw[0]:.3g} ms a round and {raw[1]:.3g} ms a row or token, a negative or "
                  "zero cost: noise (a busy host, or too few requests), not used")


def fit(points: Sequence[Tuple[int, int, float]]) -> Tuple[float, float] | None:
    """Least squares of ``ms = steps x per_round + rows x per_row`` with both costs kept at 0 or above and their
    sum above 0; None when the points cannot tell the two apart, or when even the one-cost fits (all of it per
    round, or all of it per row) come out negative or zero: such a fit is never used."""
    raw = solve(points)
    if raw is None:
        return None
    per_round, per_row = raw
    if per_round >= 0 and per_row >= 0 and per_round + per_row > 0:
        return per_round, per_row
    syy = sum(r * r for _s, r, _m in points)
    sxx = sum(s * s for s, _r, _m in points)
    rows_only = sum(r * m for _s, r, m in points) / syy
    rounds_only = sum(s * m for s, _r, m in points) / sxx
    if per_round < 0 and rows_only > 0:
        return 0.0, rows_only
    if per_row < 0 and rounds_only > 0:
        return rounds_only, 0.0
    return None


def bootstrap(points: Sequence[Tuple[int, int, float]], seed: Any, n: int = RESAMPLES) -> List[Tuple[float, float]]:
    rng = random.Random(f"copy:{seed}")
    out = []
    for _i in range(n):
        pick = [points[rng.randrange(len(points))] for _p in points]
        got = fit(pick)
        if got is not None:
            out.append(got)
    return out


def corrections(per_round: float, per_row: float, copy_batches: Mapping[int, float],
                max_rows: int | None = None) -> Dict[int, float]:
    """Per batch size b: the copy's fitted round of b rows over its own timed batch of b tokens. Production's
    batch times multiplied by these are what a round costs on production.

    ``max_rows``: the most rows a round the fit saw verified. A larger batch is not stretched along the fitted line
    (its cost per row was fitted on small rounds, and a large batch costs less per row: 49- and 65-row rounds came
    out 0.73-0.91x too slow): what a round costs beyond its batch at the largest size fitted, in ms, is added to
    the larger batch instead."""
    timed = {int(b): float(ms) for b, ms in copy_batches.items() if ms and ms > 0}
    inside = [b for b in timed if max_rows is None or b <= max_rows]
    top = max(inside) if inside else None
    out: Dict[int, float] = {}
    for b, ms in timed.items():
        if top is None or b <= top:
            out[b] = (per_round + per_row * b) / ms
        else:
            extra = per_round + per_row * top - timed[top]
            out[b] = max(ms + extra, 0.0) / ms
    return out


def production_process(port: int, proc: Any = None) -> Tuple[List[str], Dict[str, str], str] | str:
    """Production's llama-server process found by its listening port: (argv, environ, binary), or why not."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import ProcView, read_text

    view = proc or ProcView()
    owners = view.socket_owners(view.listening_inodes(int(port)))
    if len(owners) != 1:
        return f"no single process listens on production's port {port} here ({view.owners_text(owners)})"
    pid = owners[0]
    raw = read_text(os.path.join(view.proc, str(pid), "cmdline")) or ""
    argv = [part for part in raw.split("\x00") if part]
    try:
        binary = os.readlink(os.path.join(view.proc, str(pid), "exe"))
    except OSError:
        binary = argv[0] if argv else ""
    if not argv or "llama-server" not in os.path.basename(binary) + " " + os.path.basename(argv[0]):
        return f"the process on production's port {port} is not llama-server ({view.describe(pid)})"
    if not os.path.isfile(binary):
        binary = argv[0]
    return argv, view.environ(pid), binary


def _served(side: Any, conts: Sequence[Mapping[str, Any]], timeout: int, grid: Sequence[int] | None,
            loads: List[Dict[str, Any]] | None = None, production_port: int | None = None) -> tuple:
    """The copy's requests: one warm-up, then every prompt at its budget; (its points, its timed batches). The
    host's other work while they ran (production's and the copy's own CPU left out) is appended to ``loads``."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import measure_batches
    from ansible_collections.llmfleet.specdec.plugins.module_utils.screen._host_load import HostLoad

    client = side.start()
    load = HostLoad("the copy of the target", ports=[side.port, *([production_port] if production_port else [])])
    load.start()
    try:
        client.timeout = timeout
        client._json("POST", "/completion", {"prompt": list(conts[0]["prompt"]), "n_predict": 8,
                                             "temperature": 0.0, "cache_prompt": False})  # warm-up
        points = []
        for cont in conts:
            reply = client._json("POST", "/completion", {"prompt": list(cont["prompt"]),
                                                         "n_predict": int(cont["budget"]), "temperature": 0.0,
                                                         "cache_prompt": False})
            timings = reply.get("timings") or {}
            point = request_point(timings)
            if point:
                points.append((*point, int(timings.get("draft_n") or 0)))
        batches = {}
        if grid:
            timed = measure_batches(client, list(grid))
            batches = {int(b): list(v) for b, v in timed["samples"].items() if v}
        if loads is not None:
            loads.append(load.stop())
        return points, batches
    finally:
        side.stop()


def run_copy(endpoint_port: int, model: str | None, conts: Sequence[Mapping[str, Any]], grid: Sequence[int], *,
             drafts: Sequence[Mapping[str, Any]] = (), launch: str = "systemd", runtime_max: int = 900,
             timeout: int = 600, seed: Any = 0, proc: Any = None, root: str = "/",
             meminfo: str | None = None) -> Dict[str, Any]:
    """Time real speculative rounds on a copy of the target (see the module's doc), its batches on ``grid`` (the
    batch sizes production's were timed on). ``drafts`` (``name``, ``draft``, ``k``, ``p_min``, ``n_min``): each
    draft-simple candidate is run on the copy at depths 1 and ``k``, and what its rounds cost beyond the target's
    fitted verification is fitted as the drafter's cost per round plus per drafted token.

    Returns ``used`` and ``why`` and, when used, ``per_round_ms``, ``per_row_ms``, ``requests``, ``rounds``,
    ``corrections`` (batch size -> factor; above ``max_rows``, the most rows a fitted round verified, the round's
    extra ms at that size is added, not stretched), ``draws`` (the bootstrap's correction dicts), ``copy_verify_ms``,
    ``spread`` (of each batch's repeats), ``load`` (the host's other work per phase) and ``drafters`` (name ->
    ``fit`` ``(per_round_ms, per_token_ms)``, ``draws``, or ``why`` when it could not: a fit whose costs come out
    negative or zero is never used)."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import EndpointError
    from ansible_collections.llmfleet.specdec.plugins.module_utils.screen._side import ScreenError, SideServer, free_port
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import read_text

    def available() -> int | None:  # read again before a draft's copy: the last copy's memory is back
        return meminfo_available(meminfo if meminfo is not None else (read_text("/proc/meminfo") or ""))

    why = fits(model, available(), gpu_nodes(root))
    if why:
        return {"used": False, "why": why}
    found = production_process(endpoint_port, proc)
    if isinstance(found, str):
        return {"used": False, "why": found}
    argv, environ, binary = found
    env = copy_env(environ)

    def side(spec: Sequence[str]) -> Any:
        port = free_port()
        return SideServer("target copy", [binary, *copy_args(argv, str(model), port, spec)[1:]], port,
                          launch=launch, runtime_max=runtime_max, env=env, what="the copy of the target",
                          port_option="port")

    points: List[Tuple[int, int, float]] = []
    batches: Dict[int, List[float]] = {}
    loads: List[Dict[str, Any]] = []
    depths = (2, max(8, min(max(grid) - 1, 16)))
    max_rows = depths[-1] + 1  # the largest round the copy verifies: its deepest draft and the target's token
    try:
        for n_max in depths:
            got, timed = _served(side(ngram_spec(n_max)), conts, timeout, grid if n_max == depths[-1] else None,
                                 loads, endpoint_port)
            points += [(s, r, m) for s, r, m, _d in got]
            batches = timed or batches
    except (ScreenError, EndpointError) as exc:
        return {"used": False, "why": f"the copy of the target did not serve its requests ({exc})"}
    got_fit, fit_note = fit_why(points)
    med = {b: sorted(v)[len(v) // 2] for b, v in batches.items()}
    if got_fit is None or not med:
        return {"used": False, "load": loads,
                "why": f"the copy of the target was not used: {fit_note or 'it timed no batch'}; the verification "
                       "is timed as batches on production"}
    per_round, per_row = got_fit
    draws = [corrections(r, w, {b: v[random.Random(f"{seed}:{i}:{b}").randrange(len(v))]
                                for b, v in batches.items()}, max_rows)
             for i, (r, w) in enumerate(bootstrap(points, seed))]
    drafters: Dict[str, Any] = {}
    for item in drafts:
        got = []
        draft_size = os.path.getsize(item["draft"]) if os.path.isfile(str(item["draft"])) else 0
        too_big = fits(model, available(), [], draft_size)
        if too_big:
            drafters[item["name"]] = {"why": f"the copy with the draft does not fit: {too_big}"}
            continue
        try:
            for k in sorted({1, int(item["k"])}):  # two depths, so that a round's cost and a token's differ
                got += _served(side(draft_spec(item["draft"], k, item.get("p_min") or 0.0, item.get("n_min") or 0)),
                               conts, timeout, None, loads, endpoint_port)[0]
        except (ScreenError, EndpointError) as exc:
            drafters[item["name"]] = {"why": f"the copy did not serve with the draft ({exc})"}
            continue
        # what the rounds cost beyond the target's own (per_round, per_row): the drafter's, per round and token
        rest = [(s, d, m - s * per_round - r * per_row) for s, r, m, d in got if d > 0]
        drafter, drafter_note = fit_why(rest)
        if drafter is None:
            drafters[item["name"]] = {"why": f"the drafter's cost on the copy is not used: {drafter_note}; its side "
                                             "server's steps are used"}
            continue
        drafters[item["name"]] = {"fit": list(drafter), "requests": len(rest),
                                  "draws": [list(x) for x in bootstrap(rest, f"{seed}:{item['name']}")]}
    return {"used": True, "why": None, "per_round_ms": per_round, "per_row_ms": per_row, "requests": len(points),
            "rounds": sum(s for s, _r, _m in points), "model": model,
            "corrections": corrections(per_round, per_row, med, max_rows), "draws": draws, "max_rows": max_rows,
            "copy_verify_ms": {str(b): ms for b, ms in sorted(med.items())}, "drafters": drafters, "load": loads,
            "spread": {str(b): spread(v, f"the copy's batch of {b}") for b, v in sorted(batches.items())}}
