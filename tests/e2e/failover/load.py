#!/usr/bin/env python3
"""load.py - the client side of the failover test: a steady stream of file creates and job reads
through each gateway, every answer recorded, until STOP_FILE exists.

    load.py KEY JOB_ID STOP_FILE OUT.json http://gw1 http://gw2 ...

OUT.json is a list of [gateway index, monotonic-to-wall start time, seconds taken, method, HTTP code
(0: no HTTP answer at all), retry-after header or null, created file id or null]."""
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

key, job, stop_file, out_path, gateways = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
records, lock = [], threading.Lock()


def call(req):
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers.get("retry-after"), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("retry-after"), e.read()
    except Exception:  # refused, reset, timed out: no HTTP answer, which the test counts as a failure
        return 0, None, b""


def upload(base, n):
    boundary = "whetfailover%d" % n
    line = json.dumps({"messages": [{"role": "user", "content": "q%d" % n},
                                    {"role": "assistant", "content": "a%d" % n}]}) + "\n"
    body = ("--%s\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nfine-tune\r\n"
            "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f%d.jsonl\"\r\n"
            "Content-Type: application/jsonl\r\n\r\n%s\r\n--%s--\r\n" % (boundary, boundary, n, line, boundary))
    return urllib.request.Request(base + "/v1/files", data=body.encode(), method="POST", headers={
        "Authorization": "Bearer " + key, "Content-Type": "multipart/form-data; boundary=" + boundary})


def worker(index, base):
    n = 0
    while not os.path.exists(stop_file):
        n += 1
        for method in ("create", "get"):
            req = upload(base, index * 1000000 + n) if method == "create" else urllib.request.Request(
                base + "/v1/fine_tuning/jobs/" + job, headers={"Authorization": "Bearer " + key})
            started = time.time()
            code, retry_after, body = call(req)
            created = None
            if method == "create" and code in (200, 201):
                created = json.loads(body)["id"]
            with lock:
                records.append([index, started, time.time() - started, method, code, retry_after, created])
        time.sleep(0.05)


threads = [threading.Thread(target=worker, args=(i, g)) for i, g in enumerate(gateways)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(out_path, "w") as f:
    json.dump(records, f)
