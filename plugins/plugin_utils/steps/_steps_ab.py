# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side steps for the A/B role: sweep expansion, the design's choice, the seeded schedule, the look after a
# round, step 0's counters.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
from __future__ import annotations

import itertools
import json
import math
import random
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._breakeven import parse_spec_counters
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._secrets import masked
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._flags import parse as parse_flags
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _envfile as envfile
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._render import render_candidate, render_configs, server_key
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _choose, _judge

# A config with one of these statuses is never a winner whatever later rounds measure (its text differs, or it
# does not draft: properties of the config), so they do not measure it. A FAILED or INCOMPLETE config is measured
# on: its failure may be the host's, and every round's evidence goes into the report.
_DROPPED = (_judge.INVALID, _judge.NOT_ENGAGED)


def _sweep_value(config: str, name: Any, value: Any) -> str | None:
    """A sweep value as the process will get it, by the env-file rules every env value follows
    (booleans 1/0, null unsets; a mapping, a NUL byte or a bad name is refused, naming the config)."""
    try:
        return envfile.check_env_value(name, value, f"specdec_configs[{config}].sweep")
    except envfile.EnvFileError as exc:
        raise AnsibleFilterError(str(exc)) from None


def ab_expand(configs: list[dict[str, Any]], baseline: str = "baseline") -> list[dict[str, Any]]:
    """Expand each config's ``sweep`` ({VAR: [values]}) into one config per combination, named
    ``name@VAR=value,...``; the baseline must exist and must not sweep."""
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for config in configs or []:
        if not isinstance(config, dict) or not config.get("name"):
            raise AnsibleFilterError(f"specdec_configs: every config needs a name, got {config!r}")
        sweep = config.get("sweep") or {}
        if not isinstance(sweep, dict) or any(not isinstance(v, list) or not v for v in sweep.values()):
            raise AnsibleFilterError(f"specdec_configs[{config['name']}].sweep: give a mapping of variable -> list of values")
        if config["name"] == baseline and sweep:
            raise AnsibleFilterError(f"specdec_configs[{baseline}]: the baseline cannot sweep")
        keys = sorted(sweep)
        for values in itertools.product(*(sweep[k] for k in keys)) if keys else [()]:
            env = dict(config.get("env") or {})
            env.update({k: _sweep_value(config["name"], k, v) for k, v in zip(keys, values)})
            name = config["name"] + ("@" + ",".join(f"{k.replace('LLAMA_ARG_', '').lower()}={v}"
                                                    for k, v in zip(keys, values)) if keys else "")
            if name in names:
                raise AnsibleFilterError(f"specdec_configs: two configs are named {name!r}")
            names.add(name)
            item = {k: v for k, v in config.items() if k != "sweep"}
            item.update(name=name, env=env, base=config["name"])
            out.append(item)
    if baseline not in names:
        raise AnsibleFilterError(f"specdec_configs: no config named {baseline!r} (the baseline every round includes)")
    return out


def _server_key(config: Any, baseline: str) -> tuple[Any, ...]:
    if isinstance(config, dict):
        name = str(config.get("name"))
        return ("baseline",) if name == baseline else ("server", *_server(config))
    return ("name", str(config))


def ab_schedule(configs: list[Any], rounds: int, baseline: str = "baseline", seed: Any = 0) -> list[dict[str, Any]]:
    """Every config once per round, the baseline included, each on its own server start, in a seeded random
    order per round (recorded in the slots, so the report shows it and a rerun with the same seed repeats it).

    A random order balances positions on average: no config always runs right after a restart of a slow
    neighbour or in the first slot of a round. Two slots in a row never need the same candidate's server (the
    same rendering, or the same config across a round's boundary), because a candidate applied again over itself
    would not restart and would share the earlier slot's server start; the baseline's slot restarts production
    itself, so it may follow itself. ``configs`` are names, or configs
    ({name, env, flags}): then configs that render the same server are told apart by the rendering. Each slot:
    ``config``, ``round``, ``order`` (its position in the round), ``server`` (the rendering's index) and
    ``restart`` (always true: the baseline slot restarts production, see measure.yml) and ``baseline``.
    """
    try:
        rounds = int(rounds)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"spec_ab_max_rounds: expected a whole number of rounds, got {rounds!r}") from None
    if rounds < 1:
        raise AnsibleFilterError(f"spec_ab_max_rounds: {rounds} — run at least one round")
    names: list[str] = []
    servers: dict[str, int] = {}
    keys: dict[tuple[Any, ...], int] = {}
    for config in configs or []:
        name = str(config.get("name")) if isinstance(config, dict) else str(config)
        if name in servers:
            raise AnsibleFilterError(f"ab_schedule: two configs are named {name!r}")
        key = _server_key(config, baseline)
        servers[name] = keys.setdefault(key, len(keys))
        names.append(name)
    plan: list[dict[str, Any]] = []
    previous = None
    for r in range(rounds):
        order = _round_order(names, servers, random.Random(f"{seed}:{r}"), previous, servers.get(baseline))
        previous = servers[order[-1]] if order else previous
        plan += [{"config": n, "round": r, "order": i, "server": servers[n], "restart": True,
                  "baseline": n == baseline} for i, n in enumerate(order)]
    return plan


def _round_order(names: list[str], servers: dict[str, int], rng: random.Random, previous: int | None,
                 restarts_itself: int | None) -> list[str]:
    """A random order in which no two neighbours (nor the first and the previous round's last) share a
    candidate's server; the baseline's slot restarts production itself, so it may follow itself (with two
    configs a stricter rule would fix the order of every round). Where it cannot be, the plain random order."""
    for _attempt in range(200):
        order = list(names)
        rng.shuffle(order)
        chain = ([previous] if previous is not None else []) + [servers[n] for n in order]
        if all(a != b or a == restarts_itself for a, b in zip(chain, chain[1:])):
            return order
    return order


def ab_round(schedule: list[dict[str, Any]], round_: int, active: list[str], previous: Any = None) -> list[dict[str, Any]]:
    """The slots of one round for the configs still measured (``active``), in the schedule's order; where
    dropping configs put two slots of the same server next to each other (or the first after ``previous``, the
    server of the last slot measured), the later one moves to the first place that keeps them apart."""
    slots = [dict(s) for s in schedule or [] if s.get("round") == int(round_) and s.get("config") in set(active or [])]
    out: list[dict[str, Any]] = []
    last = previous
    pending = list(slots)
    while pending:
        pick = next((s for s in pending if s.get("server") != last or s.get("baseline")), pending[0])
        pending.remove(pick)
        out.append(pick)
        last = pick.get("server")
    for i, s in enumerate(out):
        s["order"] = i
    return out


def ab_look(run: dict[str, Any]) -> dict[str, Any]:
    """The look after a round: the run so far judged (``_judge.judge``, the same code the report uses) and
    which configs the next round measures.

    A candidate is measured again while the sequential design has not decided it (WIN, LOSS or futile) and
    it is neither INVALID nor NOT ENGAGED (never a winner, whatever later rounds measure); a drafter probe
    while a config it serves is; the baseline while anything is. ``stop`` says the run is done.
    """
    try:
        judged = _judge.judge(run, n_boot=100)
    except (SpecdecError, ArithmeticError, ValueError) as exc:
        # A look that cannot be computed must not end the run with a traceback: it says why, decides nothing, and
        # the next round measures every config again; the report judges the whole run (and names a bad input).
        return _look_failed(run, exc)
    conf = judged["confirmatory"]
    configs = judged["configs"]
    dropped = {n: c["status"] for n, c in configs.items() if c["status"] in _DROPPED}
    active = [n for n in conf["active"] if n not in dropped]
    probes = [n for n, c in configs.items() if c["status"] == _judge.DRAFTER_PROBE
              and set(c.get("probe_for") or []) & set(active)]
    measure = [judged["baseline"], *active, *probes] if active else []
    lines = [f"after round {len(judged['rounds'])}: "
             + "; ".join(f"{n} {r['verdict']}" + (f" ({r['stopped']})" if r.get("stopped") else "")
                         + (f" {r['ratio']:.2f}x [{r['low']:.2f}, {r['high']:.2f}]" if r.get("low") else
                            f" {r['ratio']:.2f}x [interval too wide to mean anything]" if r.get("wide") else "")
                         + (f", under load {r['load']['ratio']:.2f}x {r['load']['verdict']}"
                            if (r.get("load") or {}).get("ratio") is not None else "")
                         for n, r in conf["verdicts"].items())]
    if dropped:
        lines.append("not measured again (never a winner): " + ", ".join(f"{n} {s}" for n, s in dropped.items()))
    lines.append(("next round: " + ", ".join(measure)) if measure else "the run is decided: no further round")
    return {"active": measure, "stop": not measure, "decided": {n: r.get("stopped") for n, r in
                                                                conf["verdicts"].items() if r.get("stopped")},
            "dropped": dropped, "lines": lines}


def _look_failed(run: Any, exc: Exception) -> dict[str, Any]:
    """The look's answer when the run so far could not be judged: every config of the run goes on."""
    configs = run.get("configs") if isinstance(run, dict) else None
    names = [str(c["name"]) for c in configs or [] if isinstance(c, dict) and c.get("name") is not None]
    entries = run.get("entries") if isinstance(run, dict) else None
    rounds = {e.get("round") for e in entries or [] if isinstance(e, dict)}
    kind = "" if isinstance(exc, SpecdecError) else f"{type(exc).__name__}: "
    lines = [f"after round {len(rounds)}: the look could not be computed ({kind}{exc}); it decides nothing",
             ("next round: " + ", ".join(names)) if names else "no config to measure: the run stops"]
    return {"active": names, "stop": not names, "decided": {}, "dropped": {}, "lines": lines,
            "error": f"{kind}{exc}"}


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _sequential_setting(value: Any) -> bool | None:
    """spec_ab_sequential: ``auto`` (None: the plan chooses), or true / false (forced), as Ansible spells them."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower() if isinstance(value, str) else None
    if text == "auto":
        return None
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise AnsibleFilterError(f"spec_ab_sequential: expected auto, true or false, got {value!r}")


def _setting(settings: dict[str, Any], key: str, variable: str, kind: type = float) -> Any:
    value = settings.get(key)
    try:
        if isinstance(value, bool) or value is None:
            raise ValueError
        return kind(value) if kind is float else int(str(value).strip())
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"{variable}: expected a {'number' if kind is float else 'whole number'}, "
                                 f"got {value!r}") from None


def ab_design_choice(configs: Any, sequential: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """The run's design (docs/statistics.md, "Choosing the design"): with ``sequential`` auto (spec_ab_sequential),
    the sequential design or the fewest fixed rounds, whichever needs fewer expected starts at the sequential
    design's power to recommend the planned effect (``_choose.choose``); true or false force it. ``settings``:
    baseline, max_rounds, min_speedup, alpha, win_margin, noise (the round noise to plan for; empty or ``last``:
    the default), noise_from (where it came from), noise_last (``last`` was asked and no earlier run's noise was
    found), smoke. Returns ``_choose.choose``'s answer with ``chosen_by`` (what the
    report says) and, for a run with nothing to choose (a smoke run, no candidate), the design it keeps."""
    force = _sequential_setting(sequential)
    settings = dict(settings or {})
    names = [c.get("name") if isinstance(c, dict) else c for c in configs or []
             if not (isinstance(c, dict) and c.get("probe_for"))]
    m = len([n for n in names if n != settings.get("baseline")])
    max_rounds = _setting(settings, "max_rounds", "spec_ab_max_rounds", int)
    smoke = str(settings.get("smoke")).strip().lower() in _TRUE
    keep = True if force is None else force
    if smoke or m < 1 or max_rounds < 2 or m > _choose.MAX_CANDIDATES:
        reason = ("a smoke run gives no verdict" if smoke else "no candidate" if m < 1 else "fewer than 2 rounds"
                  if max_rounds < 2 else f"{m} candidates, more than the {_choose.MAX_CANDIDATES} the plan simulates")
        return {"sequential": keep, "rounds": max_rounds, "chosen_by": f"nothing to choose ({reason})",
                "line": f"design: {'sequential' if keep else f'fixed {max_rounds} rounds'} ({reason}: nothing to choose)"}
    noise_text = str(settings.get("noise") if settings.get("noise") is not None else "").strip()
    noise = (None if noise_text.lower() in ("", "none", "0", "0.0", "last")
             else _setting(settings, "noise", "spec_ab_planned_noise"))
    default = (f"the default {_choose.DEFAULT_NOISE:g}: no earlier run of this unit reported on this controller"
               if str(settings.get("noise_last")).strip().lower() in _TRUE else
               f"the default {_choose.DEFAULT_NOISE:g} (spec_ab_planned_noise empty)")
    try:
        got = _choose.choose(m, effect=_setting(settings, "min_speedup", "spec_ab_min_speedup"),
                             alpha=_setting(settings, "alpha", "spec_ab_alpha"),
                             win_margin=_setting(settings, "win_margin", "spec_ab_win_margin"),
                             max_rounds=max_rounds, noise=noise, force=force,
                             noise_from=str(settings.get("noise_from") or "")
                             or ("spec_ab_planned_noise" if noise is not None else default))
    except SpecdecError as exc:
        raise AnsibleFilterError(f"the design's choice: {exc}") from None
    if force is None:
        got["chosen_by"] = f"spec_ab_sequential auto: {got['line']}; {got['why']} ({got['runs']} simulated runs)"
    else:  # the line says forced, and what auto would choose
        got["chosen_by"] = f"spec_ab_sequential {'true' if force else 'false'}: {got['line']} ({got['runs']} simulated runs)"
    return got


def ab_report_noise(document: Any) -> dict[str, Any]:
    """The pooled noise of a judged run (its report.json), for the next run's design choice: the log-scale SD of one
    config's round value at the last look that measured one (``{"noise": s, "from": text}``), or ``{"noise": None}``
    when the document has none (not a report, a run without a look, text that is not JSON)."""
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            return {"noise": None, "from": ""}
    conf = ((document.get("judged") or {}).get("confirmatory") or {}) if isinstance(document, dict) else {}
    for look in reversed(conf.get("looks") or [] if isinstance(conf, dict) else []):
        value = look.get("noise") if isinstance(look, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
            return {"noise": math.log1p(value),
                    "from": f"the unit's last run {document.get('run_id')} (pooled noise {value:.1%})"}
    return {"noise": None, "from": ""}


def spec_counters(metrics_text: str | None) -> dict[str, Any]:
    """Speculation counters from a /metrics text (llama.cpp or vLLM); empty when there is none."""
    if not metrics_text:
        return {}
    return parse_spec_counters(metrics_text)


def _server(config: dict[str, Any]) -> tuple:
    """What decides the server a config starts, for grouping (its rendering's override and command line)."""
    rendering = config.get("rendering")
    if isinstance(rendering, dict):
        return server_key(rendering)
    try:
        return server_key(render_candidate({}, config.get("env"), config.get("flags"), str(config.get("name"))))
    except SpecdecError as exc:
        raise AnsibleFilterError(str(exc)) from None


def ab_render(configs: list[dict[str, Any]], base_env: dict[str, Any] | None = None,
              baseline: str | None = None, backend: str = "llamacpp",
              unit: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Each config rendered once over production (see module_utils/systemd/_render.py): name -> rendering. With the
    live unit (module serving_unit_info), in the unit's own form. The preflight lints its ``env`` (and ``argv``
    in form exec), unit_override writes its ``override`` (and ``exec_start``), the report records it."""
    try:
        return render_configs(configs or [], base_env or {}, baseline or "", backend or "llamacpp", unit or None)
    except SpecdecError as exc:
        raise AnsibleFilterError(str(exc)) from None


def ab_env(env: dict[str, Any] | None, flags: list[str] | None = None,
           base_env: dict[str, Any] | None = None) -> dict[str, str | None]:
    """A config's override of production (the rendering's ``override``): its env (null = unset) and its flags
    appended to production's LLAMA_EXTRA_ARGS, which is why ``base_env`` must be given with flags."""
    try:
        return render_candidate(base_env or {}, env, flags)["override"]
    except SpecdecError as exc:
        raise AnsibleFilterError(str(exc)) from None


def _draft_depth(env: dict[str, Any], argv: list[str] | None = None) -> int | None:
    try:
        value = parse_flags(list(argv or []), env).get("options", {}).get("--spec-draft-n-max")
    except SpecdecError:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def ab_report_configs(configs: list[dict[str, Any]], chains: dict[str, list[str]],
                      renderings: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The configs as spec_report wants them: name, the chain that really runs, what the config changes over
    production (``server_config``, null = unset), the draft depth llama-server resolves, and the rendering."""
    out = []
    for config in configs or []:
        rendering = (renderings or {}).get(config["name"])
        if rendering is None:
            rendering = ab_render([config], {})[config["name"]]
        # what the report and partial.json keep: a secret-looking value masked, the candidate's own too
        rendering = dict(rendering, override=masked(rendering.get("override")))
        item: dict[str, Any] = {"name": config["name"], "chain": list((chains or {}).get(config["name"]) or []),
                                "server_config": masked(rendering.get("server_config", rendering["override"])),
                                "rendering": rendering}
        if config.get("lossless") is not None:  # the config's own declaration (module_utils/bench/_quality.py)
            item["lossless"] = config["lossless"]
        depth = _draft_depth(rendering["env"], rendering["argv"] if rendering.get("form") == "exec" else None)
        if depth is not None:
            item["k"] = depth
        out.append(item)
    return out
