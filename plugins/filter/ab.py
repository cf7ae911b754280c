# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side filters for the A/B role: sweep expansion, the rotated schedule, and step 0's counters.
from __future__ import annotations

import itertools
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils import _envfile as envfile
from ansible_collections.llmfleet.specdec.plugins.module_utils._breakeven import parse_spec_counters
from ansible_collections.llmfleet.specdec.plugins.module_utils._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils._flags import parse as parse_flags
from ansible_collections.llmfleet.specdec.plugins.module_utils._render import render_candidate, render_configs, server_key


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
            key = ("baseline",) if name == baseline else _server(config)
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
    """Each config rendered once over production (see module_utils/_render.py): name -> rendering. With the
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
        item: dict[str, Any] = {"name": config["name"], "chain": list((chains or {}).get(config["name"]) or []),
                                "server_config": dict(rendering.get("server_config", rendering["override"])),
                                "rendering": rendering}
        if config.get("lossless") is not None:  # the config's own declaration (module_utils/_quality.py)
            item["lossless"] = config["lossless"]
        depth = _draft_depth(rendering["env"], rendering["argv"] if rendering.get("form") == "exec" else None)
        if depth is not None:
            item["k"] = depth
        out.append(item)
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"ab_expand": ab_expand, "ab_schedule": ab_schedule, "spec_counters": spec_counters,
                "ab_env": ab_env, "ab_render": ab_render, "ab_report_configs": ab_report_configs}
