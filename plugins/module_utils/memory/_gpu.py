# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: per-device GPU memory facts from nvidia-smi, amd-smi, rocm-smi and amdgpu sysfs.
"""Parsers for what GPU tools print, and the sysfs reader, each returning a list of device dicts:

    {index, name, backend ("cuda" | "rocm" | "sysfs"), total_bytes, free_bytes, used_bytes,
     gtt_total_bytes, gtt_free_bytes, gtt_used_bytes, pci_bus_id, apu, usable_bytes,
     usable_free_bytes, source, notes}

Sizes are bytes; a size a tool does not report is None. Output a parser does not expect raises
:class:`GPUToolError` naming the tool and the line. ``collect`` runs the tools through callables
the caller supplies (the module passes ``run_command``), so everything here stays testable
without a GPU.
"""
from __future__ import annotations

import csv
import functools
import json
import os
import re
from typing import Any, Callable, Iterable

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

MIB = 1024 * 1024
GIB = 1024 * MIB

NVIDIA_FIELDS = ("index", "name", "memory.total", "memory.free", "memory.used", "pci.bus_id", "compute_cap")
TOOLS = ("nvidia-smi", "amd-smi", "rocm-smi", "sysfs")
# Where ROCm installs its tools when they are not on PATH.
ROCM_BIN_DIRS = ("/opt/rocm/bin",)

# Integrated AMD GPUs, by the gfx target ROCm reports and by PCI device id. Their VRAM is a carve-out
# of system RAM and GTT maps more of it, so both pools count.
APU_GFX_TARGETS = {
    "gfx902": "Raven", "gfx90c": "Renoir/Cezanne", "gfx1035": "Rembrandt", "gfx1036": "Raphael",
    "gfx1103": "Phoenix/Hawk Point", "gfx1150": "Strix Point", "gfx1151": "Strix Halo", "gfx1152": "Krackan Point",
}
APU_PCI_IDS = {
    "0x1636": "Renoir", "0x1638": "Cezanne", "0x1681": "Rembrandt", "0x164e": "Raphael",
    "0x15bf": "Phoenix", "0x15c8": "Phoenix2", "0x1900": "Phoenix3", "0x150e": "Strix Point",
    "0x1586": "Strix Halo",
}
# Without a known id: a carve-out this small next to a GTT this much larger is an iGPU.
_APU_MAX_CARVEOUT = 2 * GIB
_APU_GTT_RATIO = 4

_NA = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]"}


class GPUToolError(SpecdecError):
    """A GPU tool (or sysfs file) printed something the parser cannot use."""

    def __init__(self, tool: str, problem: str, line_no: int | None = None, line: str | None = None) -> None:
        self.tool = tool
        self.problem = problem
        self.line_no = line_no
        self.line = line
        where = ""
        if line_no is not None:
            where = f" (line {line_no}: {line[:160]!r})" if line is not None else f" (line {line_no})"
        elif line is not None:
            where = f" ({line[:160]!r})"
        super().__init__(f"{tool}: {problem}{where}")


# ---------------------------------------------------------------------------------------------
# shared helpers


def _is_na(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in _NA)


def normalize_bdf(bus_id: str | None) -> str | None:
    """PCI address as ``dddd:bb:dd.f`` lower case (nvidia-smi prints an 8-digit domain)."""
    if _is_na(bus_id):
        return None
    m = re.fullmatch(r"\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\s*", bus_id)
    if not m:
        return None
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}.{m.group(4)}"


def _device(index: int, name: str, backend: str, source: str, total: int | None, used: int | None,
            free: int | None = None) -> dict[str, Any]:
    if free is None and total is not None and used is not None:
        free = max(total - used, 0)
    if used is None and total is not None and free is not None:
        used = max(total - free, 0)
    return {
        "index": index, "name": name, "backend": backend,
        "total_bytes": total, "free_bytes": free, "used_bytes": used,
        "gtt_total_bytes": None, "gtt_free_bytes": None, "gtt_used_bytes": None,
        "pci_bus_id": None, "apu": False, "apu_reason": None, "usable_bytes": total, "usable_free_bytes": free,
        "source": source, "notes": [],
    }


def _set_gtt(dev: dict[str, Any], total: int | None, used: int | None, free: int | None = None) -> None:
    if total is None:
        return
    if free is None and used is not None:
        free = max(total - used, 0)
    if used is None and free is not None:
        used = max(total - free, 0)
    dev.update(gtt_total_bytes=total, gtt_used_bytes=used, gtt_free_bytes=free)


def apu_reason(gfx: str | None = None, pci_device_id: str | None = None, vram_type: str | None = None,
               vram_total: int | None = None, gtt_total: int | None = None) -> str | None:
    """Why this AMD GPU counts as an APU (integrated, sharing system RAM), or None."""
    if gfx and gfx.strip().lower() in APU_GFX_TARGETS:
        return f"gfx target {gfx.strip().lower()} ({APU_GFX_TARGETS[gfx.strip().lower()]}) is an APU"
    if pci_device_id:
        dev_id = pci_device_id.strip().lower()
        if not dev_id.startswith("0x"):
            dev_id = "0x" + dev_id
        if dev_id in APU_PCI_IDS:
            return f"PCI device {dev_id} ({APU_PCI_IDS[dev_id]}) is an APU"
    if vram_type and "ddr" in vram_type.lower() and "gddr" not in vram_type.lower():
        return f"VRAM type {vram_type} is system memory, not graphics memory"
    if vram_total and gtt_total and vram_total <= _APU_MAX_CARVEOUT and gtt_total >= _APU_GTT_RATIO * vram_total:
        return (f"a {vram_total // MIB} MiB VRAM carve-out next to {gtt_total // MIB} MiB GTT "
                "(heuristic: no known id)")
    return None


_APU_NOTE = "APU: "


def apply_apu(dev: dict[str, Any], reason: str | None, host_mem_total: int | None = None) -> dict[str, Any]:
    """Marks an APU and counts VRAM + GTT as usable, saying so; a discrete GPU counts VRAM only.

    GTT is system RAM, so it is capped at ``host_mem_total`` (MemTotal, which excludes the VRAM
    carve-out) when that is known. Idempotent: call it again after the GTT facts change.
    """
    dev["notes"] = [n for n in dev["notes"] if not n.startswith(_APU_NOTE)]
    dev["usable_bytes"], dev["usable_free_bytes"] = dev["total_bytes"], dev["free_bytes"]
    dev["apu"], dev["apu_reason"] = reason is not None, reason
    if reason is None:
        return dev
    if dev["gtt_total_bytes"] is None or dev["total_bytes"] is None:
        dev["notes"].append(f"{_APU_NOTE}{reason}; this source reports no GTT size, so usable = VRAM only")
        return dev
    gtt, gtt_free = dev["gtt_total_bytes"], dev["gtt_free_bytes"]
    capped = ""
    if host_mem_total is not None and gtt > host_mem_total:
        gtt, capped = host_mem_total, f" (GTT capped at the host's MemTotal, {host_mem_total // MIB} MiB)"
        gtt_free = min(gtt_free, host_mem_total) if gtt_free is not None else None
    dev["usable_bytes"] = dev["total_bytes"] + gtt
    if dev["free_bytes"] is not None and gtt_free is not None:
        dev["usable_free_bytes"] = dev["free_bytes"] + gtt_free
    dev["notes"].append(
        f"{_APU_NOTE}{reason}. Its VRAM is a carve-out of system RAM and GTT maps more system RAM, so usable = "
        f"VRAM + GTT{capped}: an upper bound shared with the CPU. ROCm's HIP runtime may report only the "
        "larger pool as its total; budget against the backend's own number when it has one.")
    return dev


def read_mem_total(meminfo: str = "/proc/meminfo") -> int | None:
    """The host's MemTotal in bytes, or None when the file is absent."""
    text = _read(meminfo)
    if text is None:
        return None
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB\s*$", text, re.MULTILINE)
    if not m:
        raise GPUToolError("meminfo", f"{meminfo} has no 'MemTotal: N kB' line")
    return int(m.group(1)) * 1024


def _strip_warnings(tool: str, text: str) -> tuple[str, int]:
    """The JSON part of a tool's stdout, skipping leading WARNING lines; and how many lines were skipped."""
    if not isinstance(text, str):
        raise GPUToolError(tool, f"expected text output, got {type(text).__name__}")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if not s:
            continue
        if s.startswith(("{", "[")):
            return "\n".join(lines[i:]), i
        if s.upper().startswith("WARNING"):
            continue
        raise GPUToolError(tool, "expected JSON output", i + 1, line)
    raise GPUToolError(tool, "printed no JSON at all (empty output)")


def _load_json(tool: str, text: str) -> Any:
    body, skipped = _strip_warnings(tool, text)
    try:
        return json.loads(body)
    except ValueError as exc:
        line_no = getattr(exc, "lineno", None)
        lines = body.splitlines()
        line = lines[line_no - 1] if line_no and 0 < line_no <= len(lines) else None
        msg = getattr(exc, "msg", str(exc))
        raise GPUToolError(tool, f"output is not valid JSON: {msg}",
                           line_no + skipped if line_no else None, line) from None


# ---------------------------------------------------------------------------------------------
# nvidia-smi


def nvidia_smi_args(fields: Iterable[str] = NVIDIA_FIELDS) -> list[str]:
    return ["--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]


def _mib(tool: str, value: str, line_no: int, line: str, field: str) -> int | None:
    if _is_na(value):
        return None
    v = value.strip()
    unit = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(MiB|GiB|KiB|B)?", v)
    if not unit:
        raise GPUToolError(tool, f"{field} is not a size: {value.strip()!r}", line_no, line)
    number = float(unit.group(1))
    scale = {"MiB": MIB, "GiB": GIB, "KiB": 1024, "B": 1, None: MIB}[unit.group(2)]
    return round(number * scale)


def parse_nvidia_smi_csv(text: str, fields: Iterable[str] = NVIDIA_FIELDS) -> list[dict[str, Any]]:
    """Devices from ``nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]``.

    Accepts the header line (``memory.total [MiB]``) and values with units (``24576 MiB``).
    Memory is in MiB. ``No devices were found`` is an empty list.
    """
    tool = "nvidia-smi"
    if not isinstance(text, str):
        raise GPUToolError(tool, f"expected text output, got {type(text).__name__}")
    fields = list(fields)
    devices: list[dict[str, Any]] = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.strip().startswith("No devices were found"):
            return []
        if "has failed" in line or "couldn't communicate" in line:
            raise GPUToolError(tool, "the NVIDIA driver is not reachable", line_no, line)
        cells = next(csv.reader([line], skipinitialspace=True))
        cells = [c.strip() for c in cells]
        names = [re.sub(r"\s*\[.*\]$", "", c) for c in cells]
        if not devices and "memory.total" in names and all(re.fullmatch(r"[a-z][a-z0-9_.]*", n) for n in names):
            fields = names  # the header line of --format=csv
            continue
        if len(cells) != len(fields):
            raise GPUToolError(
                tool, f"expected {len(fields)} comma-separated fields ({', '.join(fields)}), got {len(cells)}",
                line_no, line)
        row = dict(zip(fields, cells))
        for need in ("index", "memory.total"):
            if need not in row:
                raise GPUToolError(tool, f"the query has no {need} column", line_no, line)
        if not row["index"].isdigit():
            raise GPUToolError(tool, f"index is not a number: {row['index']!r}", line_no, line)
        total = _mib(tool, row["memory.total"], line_no, line, "memory.total")
        free = _mib(tool, row.get("memory.free", ""), line_no, line, "memory.free")
        used = _mib(tool, row.get("memory.used", ""), line_no, line, "memory.used")
        dev = _device(int(row["index"]), row.get("name") or f"GPU {row['index']}", "cuda", tool, total, used, free)
        # nvidia-smi's total includes memory the driver reserves: free = total - used - reserved
        if free is not None:
            dev["free_bytes"] = free
            dev["usable_free_bytes"] = free
        dev["pci_bus_id"] = normalize_bdf(row.get("pci.bus_id"))
        if not _is_na(row.get("compute_cap")):
            dev["compute_cap"] = row["compute_cap"]
        if total is None:
            dev["notes"].append("nvidia-smi reports no memory size for this device (unified memory?)")
        devices.append(dev)
    return devices


# ---------------------------------------------------------------------------------------------
# rocm-smi


def rocm_smi_args() -> list[str]:
    return ["--showproductname", "--showmeminfo", "vram", "gtt", "--showbus", "--json"]


def _int_field(tool: str, card: str, data: dict[str, Any], key: str) -> int | None:
    if key not in data or _is_na(data[key]):
        return None
    value = str(data[key]).strip()
    if not value.isdigit():
        raise GPUToolError(tool, f"{card}: {key!r} is not a byte count: {data[key]!r}")
    return int(value)


def parse_rocm_smi_json(text: str) -> list[dict[str, Any]]:
    """Devices from ``rocm-smi --showproductname --showmeminfo vram gtt --showbus --json``.

    rocm-smi prints ``{"card0": {"VRAM Total Memory (B)": "...", ...}, "system": {...}}`` with
    every value a string; leading WARNING lines are skipped.
    """
    tool = "rocm-smi"
    data = _load_json(tool, text)
    if not isinstance(data, dict):
        raise GPUToolError(tool, f"expected a JSON object of cards, got {type(data).__name__}")
    devices = []
    for card, info in data.items():
        m = re.fullmatch(r"card(\d+)", card)
        if not m:
            if card == "system":
                continue
            raise GPUToolError(tool, f"unexpected top-level key {card!r} (expected cardN or system)")
        if not isinstance(info, dict):
            raise GPUToolError(tool, f"{card}: expected an object, got {type(info).__name__}")
        total = _int_field(tool, card, info, "VRAM Total Memory (B)")
        used = _int_field(tool, card, info, "VRAM Total Used Memory (B)")
        if total is None:
            raise GPUToolError(tool, f"{card} has no 'VRAM Total Memory (B)': run it with --showmeminfo vram")
        name = next((str(info[k]) for k in ("Card Series", "Card series", "Device Name", "Card SKU", "Card Model")
                     if not _is_na(info.get(k))), card)
        dev = _device(int(m.group(1)), name, "rocm", tool, total, used)
        _set_gtt(dev, _int_field(tool, card, info, "GTT Total Memory (B)"),
                 _int_field(tool, card, info, "GTT Total Used Memory (B)"))
        dev["pci_bus_id"] = normalize_bdf(info.get("PCI Bus"))
        gfx = None if _is_na(info.get("GFX Version")) else str(info["GFX Version"])
        if gfx:
            dev["gfx_target"] = gfx
        device_id = info.get("Device ID") or info.get("Card Model")
        apply_apu(dev, apu_reason(gfx, None if _is_na(device_id) else str(device_id),
                                  vram_total=total, gtt_total=dev["gtt_total_bytes"]))
        devices.append(dev)
    return sorted(devices, key=lambda d: d["index"])


# ---------------------------------------------------------------------------------------------
# amd-smi


def amd_smi_metric_args() -> list[str]:
    return ["metric", "--mem-usage", "--json"]


def amd_smi_static_args() -> list[str]:
    return ["static", "--asic", "--bus", "--vram", "--json"]


_UNITS = {"B": 1, "KB": 1024, "KIB": 1024, "MB": MIB, "MIB": MIB, "GB": GIB, "GIB": GIB}


def _value_unit(tool: str, gpu: Any, key: str, item: Any) -> int | None:
    """amd-smi's ``{"value": 512, "unit": "MB"}`` (binary megabytes) as bytes; "N/A" as None."""
    if _is_na(item):
        return None
    if isinstance(item, dict):
        value, unit = item.get("value"), str(item.get("unit", "MB")).upper()
    else:
        value, unit = item, "MB"
    if _is_na(value):
        return None
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not numeric and not str(value).replace(".", "", 1).isdigit():
        raise GPUToolError(tool, f"gpu {gpu}: {key} is not a size: {item!r}")
    if unit not in _UNITS:
        raise GPUToolError(tool, f"gpu {gpu}: {key} has an unknown unit {unit!r}")
    return round(float(value) * _UNITS[unit])


def _amd_smi_entries(tool: str, text: str) -> list[dict[str, Any]]:
    data = _load_json(tool, text)
    if isinstance(data, dict) and "gpu_data" in data:
        data = data["gpu_data"]
    if isinstance(data, dict) and "gpu" in data:
        data = [data]
    if not isinstance(data, list) or not all(isinstance(e, dict) and "gpu" in e for e in data):
        raise GPUToolError(tool, "expected a list of {\"gpu\": N, ...} entries (or {\"gpu_data\": [...]})")
    return data


def parse_amd_smi_json(metric_text: str, static_text: str | None = None) -> list[dict[str, Any]]:
    """Devices from ``amd-smi metric --mem-usage --json``, named by ``amd-smi static --asic --bus --vram --json``.

    Accepts both layouts amd-smi has printed: a bare list of per-GPU objects and
    ``{"gpu_data": [...]}``. Sizes come as ``{"value": N, "unit": "MB"}`` (MiB).
    """
    tool = "amd-smi"
    static: dict[int, dict[str, Any]] = {}
    if static_text:
        for entry in _amd_smi_entries(tool + " static", static_text):
            static[entry["gpu"]] = entry
    devices = []
    for entry in _amd_smi_entries(tool, metric_text):
        gpu = entry["gpu"]
        if isinstance(gpu, bool) or not isinstance(gpu, int):
            raise GPUToolError(tool, f"gpu index is not a number: {gpu!r}")
        mem = entry.get("mem_usage")
        if not isinstance(mem, dict):
            raise GPUToolError(tool, f"gpu {gpu}: no mem_usage object: run it as `amd-smi metric --mem-usage --json`")
        total = _value_unit(tool, gpu, "total_vram", mem.get("total_vram"))
        if total is None:
            raise GPUToolError(tool, f"gpu {gpu}: mem_usage has no total_vram")
        st = static.get(gpu, {})
        asic = st.get("asic") if isinstance(st.get("asic"), dict) else {}
        vram = st.get("vram") if isinstance(st.get("vram"), dict) else {}
        bus = st.get("bus") if isinstance(st.get("bus"), dict) else {}
        name = asic.get("market_name")
        dev = _device(gpu, name if not _is_na(name) else f"gpu {gpu}", "rocm", tool, total,
                      _value_unit(tool, gpu, "used_vram", mem.get("used_vram")),
                      _value_unit(tool, gpu, "free_vram", mem.get("free_vram")))
        _set_gtt(dev, _value_unit(tool, gpu, "total_gtt", mem.get("total_gtt")),
                 _value_unit(tool, gpu, "used_gtt", mem.get("used_gtt")),
                 _value_unit(tool, gpu, "free_gtt", mem.get("free_gtt")))
        dev["pci_bus_id"] = normalize_bdf(bus.get("bdf"))
        gfx = asic.get("target_graphics_version")
        if not _is_na(gfx):
            dev["gfx_target"] = str(gfx)
        vram_type = vram.get("type")
        apply_apu(dev, apu_reason(None if _is_na(gfx) else str(gfx),
                                  None if _is_na(asic.get("device_id")) else str(asic.get("device_id")),
                                  None if _is_na(vram_type) else str(vram_type),
                                  total, dev["gtt_total_bytes"]))
        devices.append(dev)
    return sorted(devices, key=lambda d: d["index"])


# ---------------------------------------------------------------------------------------------
# sysfs (amdgpu)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise GPUToolError("sysfs", f"cannot read {path}: {exc.strerror}") from None


def _read_int(path: str) -> int | None:
    text = _read(path)
    if text is None:
        return None
    if not text.isdigit():
        raise GPUToolError("sysfs", f"{path} does not hold a byte count", line=text)
    return int(text)


def _bdf_of(device_dir: str) -> str | None:
    uevent = _read(os.path.join(device_dir, "uevent")) or ""
    for line in uevent.splitlines():
        if line.startswith("PCI_SLOT_NAME="):
            return normalize_bdf(line.split("=", 1)[1])
    return normalize_bdf(os.path.basename(os.path.realpath(device_dir)))


def read_sysfs(root: str = "/sys") -> list[dict[str, Any]]:
    """amdgpu devices from ``<root>/class/drm/card*/device/mem_info_{vram,gtt}_{total,used}``.

    Cards without ``mem_info_vram_total`` (other drivers, display connectors) are skipped.
    """
    drm = os.path.join(root, "class", "drm")
    if not os.path.isdir(drm):
        return []
    devices = []
    cards = sorted((e for e in os.listdir(drm) if re.fullmatch(r"card\d+", e)), key=lambda e: int(e[4:]))
    for card in cards:
        dev_dir = os.path.join(drm, card, "device")
        total = _read_int(os.path.join(dev_dir, "mem_info_vram_total"))
        if total is None:
            continue
        vendor = _read(os.path.join(dev_dir, "vendor"))
        device_id = _read(os.path.join(dev_dir, "device"))
        product = _read(os.path.join(dev_dir, "product_name"))
        ids = f"{(vendor or '?').replace('0x', '')}:{(device_id or '?').replace('0x', '')}"
        name = product if product else f"PCI {ids}"
        dev = _device(int(card[4:]), name, "sysfs", "sysfs", total,
                      _read_int(os.path.join(dev_dir, "mem_info_vram_used")))
        _set_gtt(dev, _read_int(os.path.join(dev_dir, "mem_info_gtt_total")),
                 _read_int(os.path.join(dev_dir, "mem_info_gtt_used")))
        dev["pci_bus_id"] = _bdf_of(dev_dir)
        dev["pci_id"] = ids
        dev["sysfs_path"] = dev_dir
        apply_apu(dev, apu_reason(None, device_id, None, total, dev["gtt_total_bytes"]))
        devices.append(dev)
    return devices


# ---------------------------------------------------------------------------------------------
# running the tools and merging what they saw


def _run(run_tool: Callable[[list[str]], tuple[int, str, str]], tool: str, argv: list[str]) -> str:
    rc, out, err = run_tool(argv)
    first = next((line for line in (out or "").splitlines() + (err or "").splitlines() if line.strip()), "")
    if rc != 0:
        raise GPUToolError(tool, f"`{' '.join(argv)}` exited with {rc}", line=first or None)
    if not (out or "").strip() and first:
        # rocm-smi without the amdgpu driver logs its error to stderr and still exits 0
        raise GPUToolError(tool, f"`{' '.join(argv)}` printed nothing but an error", line=first)
    return out


def query_nvidia_smi(path: str, run_tool) -> list[dict[str, Any]]:
    try:
        return parse_nvidia_smi_csv(_run(run_tool, "nvidia-smi", [path, *nvidia_smi_args()]))
    except GPUToolError as exc:
        # drivers before compute_cap was queryable refuse the field; ask again without it
        if not (exc.line and "compute_cap" in exc.line and "not a valid field" in exc.line):
            raise
        fields = [f for f in NVIDIA_FIELDS if f != "compute_cap"]
        return parse_nvidia_smi_csv(_run(run_tool, "nvidia-smi", [path, *nvidia_smi_args(fields)]), fields)


def query_amd_smi(path: str, run_tool) -> list[dict[str, Any]]:
    metric = _run(run_tool, "amd-smi", [path, *amd_smi_metric_args()])
    try:
        static = _run(run_tool, "amd-smi", [path, *amd_smi_static_args()])
    except GPUToolError:
        static = None  # names only; the memory facts stand without them
    return parse_amd_smi_json(metric, static)


def query_rocm_smi(path: str, run_tool) -> list[dict[str, Any]]:
    return parse_rocm_smi_json(_run(run_tool, "rocm-smi", [path, *rocm_smi_args()]))


def merge_devices(by_source: dict[str, list[dict[str, Any]]], host_mem_total: int | None = None) -> list[dict[str, Any]]:
    """One entry per physical device, by PCI address, preferring the sources in TOOLS order.

    A later source fills in GTT facts (and an APU verdict) the first one lacked; every source that
    saw the device is listed under ``seen_by``. Devices without a PCI address are all kept.
    """
    merged: list[dict[str, Any]] = []
    by_bdf: dict[str, dict[str, Any]] = {}
    for tool in TOOLS:
        for dev in by_source.get(tool, []):
            bdf = dev.get("pci_bus_id")
            first = by_bdf.get(bdf) if bdf else None
            if first is None:
                first = dict(dev, notes=list(dev["notes"]), seen_by=[tool])
                merged.append(first)
                if bdf:
                    by_bdf[bdf] = first
            else:
                first["seen_by"].append(tool)
                if first["gtt_total_bytes"] is None and dev["gtt_total_bytes"] is not None:
                    _set_gtt(first, dev["gtt_total_bytes"], dev["gtt_used_bytes"], dev["gtt_free_bytes"])
                    first["notes"].append(f"GTT from {tool}")
                first["apu_reason"] = first["apu_reason"] or dev["apu_reason"]
            apply_apu(first, first["apu_reason"], host_mem_total)
    return merged


def collect(tools: Iterable[str], find_tool: Callable[[str], str | None],
            run_tool: Callable[[list[str]], tuple[int, str, str]], sysfs_root: str = "/sys",
            required: Iterable[str] = (), meminfo: str = "/proc/meminfo") -> dict[str, Any]:
    """Runs each tool that exists, parses it, and merges: ``{devices, by_source, sources, errors}``.

    A tool in ``required`` that is not installed is an error; others are skipped quietly.
    Unexpected output from a tool lands in ``errors`` (the other tools still count).
    """
    tools = list(tools)
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        raise GPUToolError("tools", f"unknown {', '.join(map(repr, unknown))}; expected some of {', '.join(TOOLS)}")
    by_source: dict[str, list[dict[str, Any]]] = {}
    sources: list[dict[str, Any]] = []
    errors: list[str] = []
    queries = {"nvidia-smi": query_nvidia_smi, "amd-smi": query_amd_smi, "rocm-smi": query_rocm_smi}
    for tool in TOOLS:
        if tool not in tools:
            continue
        if tool == "sysfs":
            path = sysfs_root
            if not os.path.isdir(os.path.join(sysfs_root, "class", "drm")):
                if tool in required:
                    errors.append(f"sysfs: no {os.path.join(sysfs_root, 'class', 'drm')} on this host")
                continue
            runner = functools.partial(read_sysfs, sysfs_root)
        else:
            path = find_tool(tool)
            if path is None:
                if tool in required:
                    errors.append(f"{tool}: not installed (not on PATH nor in {', '.join(ROCM_BIN_DIRS)})")
                continue
            runner = functools.partial(queries[tool], path, run_tool)
        try:
            found = runner()
        except GPUToolError as exc:
            errors.append(str(exc))
            sources.append({"tool": tool, "path": path, "devices": 0, "ok": False})
            continue
        by_source[tool] = found
        sources.append({"tool": tool, "path": path, "devices": len(found), "ok": True})
    try:
        host_mem_total = read_mem_total(meminfo)
    except GPUToolError as exc:
        errors.append(str(exc))
        host_mem_total = None
    return {"devices": merge_devices(by_source, host_mem_total), "by_source": by_source, "sources": sources,
            "errors": errors, "host_mem_total_bytes": host_mem_total}
