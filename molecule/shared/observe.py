# Molecule helper, run on the container host: what llama-server itself says it serves, as one JSON line.
# argv: UNIT PORT COMPLETE(0/1). Asks systemd for the MainPID, the server for /slots, /props and
# (COMPLETE=1) a 16-token completion, and /proc for the MainPID's environment.
import json
import subprocess
import sys
import urllib.request

unit, port, complete = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
base = f"http://127.0.0.1:{port}"
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    with opener.open(request, timeout=30) as reply:
        return json.loads(reply.read())


show = subprocess.run(["systemctl", "show", unit, "-p", "MainPID", "-p", "ActiveState"],
                      stdout=subprocess.PIPE, text=True, check=True).stdout
props = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
pid = int(props["MainPID"])
with open(f"/proc/{pid}/environ", "rb") as handle:
    env = dict(item.decode().split("=", 1) for item in handle.read().split(b"\0") if b"=" in item)
slots = get("/slots")
info = get("/props")
seen = {
    "pid": pid,
    "active": props["ActiveState"],
    "speculative": slots[0]["speculative"],
    "model_path": info["model_path"],
    "n_ctx": info["default_generation_settings"]["n_ctx"],
    "env": env,
    "draft_n": None,
}
if complete:
    reply = get("/completion", {"prompt": "Speculative decoding lets a small draft model", "n_predict": 16,
                                "temperature": 0, "cache_prompt": False})
    seen["draft_n"] = reply["timings"].get("draft_n", 0)
print(json.dumps(seen))
