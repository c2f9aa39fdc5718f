#!/usr/bin/env python3
"""Measures one work agent behind OCM's gRPC server from the hub's side (bench-grpc.sh runs it).

Bursts of N ManifestWorks (one ConfigMap each) are created on the hub as fast as one client can;
a watch on the hub records, per work, the first status the server wrote back (any condition) and
the first status with Applied and Available True. Then the burst is deleted and the watch records
when each work disappears (the server drops its finalizer when the agent reports Deleted).
Latencies are from the moment the create (or delete) request was sent. The agent's RSS and CPU
time come from /proc. Prints one JSON document on stdout. Standard library only.
"""

import argparse
import json
import math
import os
import ssl
import statistics
import sys
import threading
import time
import http.client
import urllib.parse

GROUP = "/apis/work.open-cluster-management.io/v1"


def pct(values, p):
    """Nearest-rank percentile of a list (None when empty)."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(p / 100.0 * len(s)) - 1))
    return s[k]


def summary(values):
    """p50/p99/min/max/mean in milliseconds of a list of seconds."""
    ms = [v * 1000.0 for v in values]
    if not ms:
        return {"n": 0}
    return {
        "n": len(ms),
        "p50_ms": round(pct(ms, 50), 1),
        "p99_ms": round(pct(ms, 99), 1),
        "min_ms": round(min(ms), 1),
        "max_ms": round(max(ms), 1),
        "mean_ms": round(statistics.mean(ms), 1),
    }


class Hub:
    """A few calls against the hub API server with the admin client certificate."""

    def __init__(self, server, ca, cert, key):
        u = urllib.parse.urlparse(server)
        self.host, self.port = u.hostname, u.port
        self.ctx = ssl.create_default_context(cafile=ca)
        self.ctx.load_cert_chain(cert, key)
        self.conn = self._connect()

    def _connect(self, timeout=30):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data else {}
        for attempt in range(3):
            try:
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                payload = resp.read()
                return resp.status, payload
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = self._connect()
                if attempt == 2:
                    raise
        return 0, b""


class Watch(threading.Thread):
    """Watches the cluster namespace's ManifestWorks and keeps first-seen times per work."""

    def __init__(self, hub, ns, rv):
        super().__init__(daemon=True)
        self.hub, self.ns, self.rv = hub, ns, rv
        self.lock = threading.Lock()
        self.first_status = {}
        self.applied = {}
        self.deleted = {}
        self.modified = {}
        self.stop = False

    def run(self):
        while not self.stop:
            conn = self.hub._connect(timeout=None)
            try:
                conn.request("GET", f"{GROUP}/namespaces/{self.ns}/manifestworks?watch=true&resourceVersion={self.rv}")
                resp = conn.getresponse()
                while not self.stop:
                    line = resp.readline()
                    if not line:
                        break
                    self.handle(json.loads(line), time.monotonic())
            except (http.client.HTTPException, OSError, ValueError):
                time.sleep(0.2)
            finally:
                conn.close()

    def handle(self, ev, t):
        obj = ev.get("object", {})
        meta = obj.get("metadata", {})
        name = meta.get("name")
        if not name:
            return
        rv = meta.get("resourceVersion")
        if rv:
            self.rv = rv
        with self.lock:
            if ev.get("type") == "DELETED":
                self.deleted.setdefault(name, t)
                return
            if ev.get("type") == "MODIFIED":
                self.modified[name] = self.modified.get(name, 0) + 1
            conds = {c.get("type"): c.get("status") for c in obj.get("status", {}).get("conditions", []) or []}
            if conds:
                self.first_status.setdefault(name, t)
            if conds.get("Applied") == "True" and conds.get("Available") == "True":
                self.applied.setdefault(name, t)


def work(name, ns, spoke_ns):
    return {
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"workload": {"manifests": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": spoke_ns},
            "data": {"key": name, "payload": "x" * 2048},
        }]}},
    }


def proc(pid):
    """VmRSS/VmHWM in MiB and CPU seconds of a process (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            st = {ln.split(":")[0]: ln.split(":")[1].strip() for ln in f if ":" in ln}
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return {
            "rss_mib": round(int(st["VmRSS"].split()[0]) / 1024.0, 1),
            "hwm_mib": round(int(st["VmHWM"].split()[0]) / 1024.0, 1),
            "cpu_s": round((int(fields[11]) + int(fields[12])) / tick, 2),
        }
    except (OSError, KeyError, IndexError, ValueError):
        return None


def wait_for(cond, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def run_burst(hub, watch, ns, spoke_ns, prefix, n, timeout):
    names = [f"{prefix}-{i:03d}" for i in range(n)]
    sent = {}
    for name in names:
        sent[name] = time.monotonic()
        status, body = hub.call("POST", f"{GROUP}/namespaces/{ns}/manifestworks", work(name, ns, spoke_ns))
        if status != 201:
            raise SystemExit(f"create {name}: HTTP {status} {body[:200]!r}")
    create_s = time.monotonic() - sent[names[0]]
    done = wait_for(lambda: all(x in watch.applied for x in names), timeout)
    with watch.lock:
        first = [watch.first_status[x] - sent[x] for x in names if x in watch.first_status]
        applied = [watch.applied[x] - sent[x] for x in names if x in watch.applied]
        modified = [watch.modified.get(x, 0) for x in names]
    all_applied = max((watch.applied[x] for x in names if x in watch.applied), default=None)
    res = {
        "burst": n,
        "create_requests_s": round(create_s, 3),
        "first_status": summary(first),
        "applied_available": summary(applied),
        "all_applied_s": round(all_applied - sent[names[0]], 3) if all_applied else None,
        "missing_applied": n - len(applied),
        "timed_out": not done,
        "hub_updates_per_work_until_applied": round(statistics.mean(modified), 2) if modified else None,
    }
    time.sleep(1.0)
    dsent = {}
    for name in names:
        dsent[name] = time.monotonic()
        status, body = hub.call("DELETE", f"{GROUP}/namespaces/{ns}/manifestworks/{name}")
        if status not in (200, 202):
            raise SystemExit(f"delete {name}: HTTP {status} {body[:200]!r}")
    done = wait_for(lambda: all(x in watch.deleted for x in names), timeout)
    with watch.lock:
        # Only works the agent had reported: one without a status has no finalizer of the server,
        # so the hub deletes it at once and its time says nothing about the agent.
        deleted = [watch.deleted[x] - dsent[x] for x in names if x in watch.deleted and x in watch.first_status]
    res["delete_round_trip"] = summary(deleted)
    res["missing_deleted"] = sum(1 for x in names if x not in watch.deleted)
    res["delete_timed_out"] = not done
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--server", required=True, help="hub API server URL")
    ap.add_argument("--ca", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--namespace", default="cluster1")
    ap.add_argument("--spoke-namespace", default="interop")
    ap.add_argument("--bursts", default="20,50,100")
    ap.add_argument("--agent-pid", type=int, required=True)
    ap.add_argument("--prefix", default="b")
    ap.add_argument("--timeout", type=float, default=180.0)
    args = ap.parse_args()

    hub = Hub(args.server, args.ca, args.cert, args.key)
    status, body = hub.call("GET", f"{GROUP}/namespaces/{args.namespace}/manifestworks")
    if status != 200:
        raise SystemExit(f"list works: HTTP {status}")
    lst = json.loads(body)
    if lst.get("items"):
        raise SystemExit(f"{len(lst['items'])} works already in {args.namespace}: start from an empty namespace")
    watch = Watch(hub, args.namespace, lst["metadata"]["resourceVersion"])
    watch.start()

    out = {"agent_start": proc(args.agent_pid)}
    # One work through the whole path first: connections, caches and informers are warm for both.
    warm = run_burst(hub, watch, args.namespace, args.spoke_namespace, f"{args.prefix}-warm", 1, args.timeout)
    out["warmup"] = warm
    out["bursts"] = []
    for n in [int(x) for x in args.bursts.split(",") if x]:
        time.sleep(2.0)
        res = run_burst(hub, watch, args.namespace, args.spoke_namespace, f"{args.prefix}{n}", n, args.timeout)
        res["agent_after"] = proc(args.agent_pid)
        out["bursts"].append(res)
        print(f"burst {n}: first status p50 {res['first_status'].get('p50_ms')} ms, applied p50 "
              f"{res['applied_available'].get('p50_ms')} ms, delete p50 {res['delete_round_trip'].get('p50_ms')} ms",
              file=sys.stderr)
    out["agent_end"] = proc(args.agent_pid)
    watch.stop = True
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
