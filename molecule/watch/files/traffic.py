#!/usr/bin/env python3
# Live traffic for the watch's window: completions for SECONDS seconds, greedy or sampled at a temperature.
import json
import sys
import time
import urllib.request

url, temperature, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
PROMPTS = ["The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog.",
           "Once upon a time there was a small village by the sea where the fishermen",
           "The report lists every configuration, its decode rate and the verdict for each traffic shape."]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
end = time.time() + seconds
sent = 0
while time.time() < end:
    body = {"prompt": PROMPTS[sent % len(PROMPTS)], "n_predict": 48, "temperature": temperature, "seed": sent,
            "cache_prompt": False}
    req = urllib.request.Request(url + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        opener.open(req, timeout=60).read()
    except OSError:
        time.sleep(0.5)  # the unit is restarting: wait for it
    sent += 1
print(sent)
