#!/usr/bin/env python3
"""api.py - the tenant side of the scheduler load harness (tests/bench/scale/run.sh), through the gateway.

  api.py tenants URL ADMIN_TOKEN N OUT      creates N tenants through POST /admin/v1/tenants with their
                                            rate and active-job limits lifted; writes "tenant_id api_key"
                                            lines to OUT
  api.py jobs URL TENANTS N CLIENTS OUT     creates N jobs through POST /v1/fine_tuning/jobs from CLIENTS
                                            concurrent connections, tenant after tenant (each tenant's
                                            training file is file-<tenant_id>); writes "job_id created_at"
                                            lines (Unix seconds when the create was answered) to OUT and
                                            prints the create rate

Keep-alive connections (http.client), so what is measured is the gateway, not connection setup."""
import http.client
import json
import sys
import threading
import time
import urllib.parse


def connect(url):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=60)


def post(conn, path, token, body):
    conn.request("POST", path, json.dumps(body), {"authorization": f"Bearer {token}", "content-type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise SystemExit(f"api.py: POST {path} answered {r.status}: {data[:300]!r}")
    return json.loads(data)


def tenants(url, admin, n, out):
    conn = connect(url)
    with open(out, "w") as f:
        for i in range(n):
            t = post(conn, "/admin/v1/tenants", admin, {"name": f"scale-{i}", "rate_per_s": 1e9,
                                                        "rate_burst": 1000000000, "max_active_jobs": 1000000000})
            f.write(f"{t['id']} {t['api_key']}\n")


def jobs(url, tenants_file, n, clients, out):
    keys = [line.split() for line in open(tenants_file) if line.strip()]
    rows, lock = [], threading.Lock()

    def client(c):
        conn = connect(url)
        for i in range(c, n, clients):
            tenant, key = keys[i % len(keys)]
            job = post(conn, "/v1/fine_tuning/jobs", key, {"model": "whet-tiny", "training_file": f"file-{tenant}"})
            with lock:
                rows.append(f"{job['id']} {time.time():.6f}\n")

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    if len(rows) != n:
        raise SystemExit(f"api.py: {n - len(rows)} of {n} creates failed")
    with open(out, "w") as f:
        f.writelines(rows)
    print(f"{n} jobs created through the gateway in {elapsed:.1f} s ({n / elapsed:.0f}/s, {clients} clients)")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "tenants":
        tenants(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) == 7 and sys.argv[1] == "jobs":
        jobs(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    else:
        sys.exit(__doc__)
