# Controller-side filters for the A/B role: sweep expansion, the rotated schedule, and step 0's counters.
from __future__ import annotations

import itertools
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils._breakeven import parse_spec_counters
from ansible_collections.llmfleet.specdec.plugins.module_utils._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils._flags import parse as parse_flags
from ansible_collections.llmfleet.specdec.plugins.module_utils._flags import to_env


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
            env.update({k: str(v) for k, v in zip(keys, values)})
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


def ab_schedule(configs: list[Any], rounds: int, baseline: str = "baseline") -> list[dict[str, Any]]:
    """Every config once per round, the order rotated by one each round (baseline in every round).

    ``configs`` are names, or configs ({name, env, flags}): then configs whose server side is the same
    (the same env file once rendered) run next to each other, so the server restarts once per distinct
    server-side config per round, never in between. Each slot says which server-side config it needs
    (``server``, an index) and whether the server restarts for it (``restart``; production, the
    baseline, serves when the run starts, and the run ends by restoring it).
    """
    rounds = int(rounds)
    if rounds < 1:
        raise AnsibleFilterError(f"spec_ab_rounds: {rounds} — run at least one round")
    groups: list[list[str]] = []
    keys: dict[Any, int] = {}
    for config in configs or []:
        if isinstance(config, dict):
            name = str(config.get("name"))
            key = ("baseline",) if name == baseline else tuple(sorted(
                ab_env(config.get("env"), config.get("flags")).items()))
        else:
            name = str(config)
            key = ("name", name)
        if key not in keys:
            keys[key] = len(groups)
            groups.append([])
        groups[keys[key]].append(name)
    baseline_group = next((i for i, g in enumerate(groups) if baseline in g), None)
    plan = []
    serving = baseline_group
    for r in range(rounds):
        shift = r % len(groups) if groups else 0
        order = 0
        for index in list(range(shift, len(groups))) + list(range(shift)):
            for name in groups[index]:
                plan.append({"config": name, "round": r, "order": order, "server": index,
                             "restart": index != serving})
                serving = index
                order += 1
    return plan


def spec_counters(metrics_text: str | None) -> dict[str, Any]:
    """Speculation counters from a /metrics text (llama.cpp or vLLM); empty when there is none."""
    if not metrics_text:
        return {}
    return parse_spec_counters(metrics_text)


def ab_env(env: dict[str, Any] | None, flags: list[str] | None = None) -> dict[str, str]:
    """A config's env overrides plus its extra flags, rendered as the unit's env file holds them
    (LLAMA_ARG_* where llama.cpp has a name, the rest shell-quoted in LLAMA_EXTRA_ARGS)."""
    out = {k: ("" if v is None else str(v)) for k, v in (env or {}).items()}
    if flags:
        try:
            parsed = parse_flags([str(f) for f in flags], {})
            if parsed.get("problems"):
                raise SpecdecError("; ".join(str(p.get("message", p)) if isinstance(p, dict) else str(p)
                                             for p in parsed["problems"]))
            out.update(to_env(parsed))
        except SpecdecError as exc:
            raise AnsibleFilterError(f"config flags {flags!r}: {exc}") from None
    return out


def ab_report_configs(configs: list[dict[str, Any]], chains: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The configs as spec_report wants them: name, the chain that really runs, the env, the draft depth."""
    out = []
    for config in configs or []:
        env = ab_env(config.get("env"), config.get("flags"))
        item: dict[str, Any] = {"name": config["name"], "chain": list((chains or {}).get(config["name"]) or []),
                                "server_config": env}
        depth = env.get("LLAMA_ARG_SPEC_DRAFT_N_MAX")
        if depth and str(depth).isdigit():
            item["k"] = int(depth)
        out.append(item)
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"ab_expand": ab_expand, "ab_schedule": ab_schedule, "spec_counters": spec_counters,
                "ab_env": ab_env, "ab_report_configs": ab_report_configs}
