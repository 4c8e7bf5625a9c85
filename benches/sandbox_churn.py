#!/usr/bin/env python3
"""Steady churn against a running `agentdeck sandbox`, sampling its RSS.

Each step creates a pod (simulated image) and deletes the one created
WINDOW steps before, writes two Events and updates one ConfigMap; steps are
paced to --rate per second. Every 30 s the sandbox's VmRSS is printed; at
the end, the growth in MiB/min from the sample at --warmup to the last.

  agentdeck sandbox --port 7443 --kubeconfig-out /tmp/churn.kubeconfig &
  python3 benches/sandbox_churn.py --kubeconfig /tmp/churn.kubeconfig \
      --pid $! --minutes 12

Only the standard library: the kubeconfig's server, CA and token are read
with a regex, requests go over one HTTPS connection.
"""

import argparse
import base64
import http.client
import json
import re
import ssl
import tempfile
import time
import urllib.parse

WINDOW = 20
NS = "default"


def kubeconfig(path):
    text = open(path).read()
    server = re.search(r"server: (\S+)", text).group(1)
    ca = base64.b64decode(re.search(r"certificate-authority-data: (\S+)", text).group(1))
    token = re.search(r"token: (\S+)", text).group(1)
    return server, ca, token


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Client:
    def __init__(self, server, ca, token):
        u = urllib.parse.urlparse(server)
        cafile = tempfile.NamedTemporaryFile(delete=False, suffix=".crt")
        cafile.write(ca)
        cafile.close()
        ctx = ssl.create_default_context(cafile=cafile.name)
        self.conn = http.client.HTTPSConnection(u.hostname, u.port, context=ctx)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        self.conn.request(method, path, body=data, headers=self.headers)
        r = self.conn.getresponse()
        r.read()
        return r.status


def pod(name):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "churn"},
            # The image is a name only: the sandbox plays the container.
            "annotations": {"sandbox.agentdeck.dev/simulate": "true"},
        },
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "example.com/sim:1"}],
        },
    }


def event(name, n):
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": f"churn-{n}", "namespace": NS},
        "reason": "Churn",
        "message": f"step {n} of a steady churn, to see whether memory levels off",
        "type": "Normal",
        "source": {"component": "churn"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--rate", type=float, default=4, help="steps per second")
    p.add_argument("--warmup", type=float, default=2, help="minutes before the growth is measured")
    a = p.parse_args()
    c = Client(*kubeconfig(a.kubeconfig))
    pods = f"/api/v1/namespaces/{NS}/pods"
    events = f"/api/v1/namespaces/{NS}/events"
    cms = f"/api/v1/namespaces/{NS}/configmaps"
    c.call("POST", cms, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "churn"}, "data": {"n": "0"}})
    start = time.monotonic()
    next_sample = start
    samples = []
    n = 0
    failures = 0
    while True:
        now = time.monotonic()
        if now >= next_sample:
            t = now - start
            samples.append((t, rss_mib(a.pid)))
            print(f"{t / 60:5.1f} min  RSS {samples[-1][1]:7.1f} MiB  steps {n}  failures {failures}", flush=True)
            next_sample += 30
            if t >= a.minutes * 60:
                break
        ok = [
            c.call("POST", pods, pod(f"churn-{n}")),
            c.call("POST", events, event(f"churn-{n}.a", n)),
            c.call("POST", events, event(f"churn-{n}.b", n)),
        ]
        c.headers["Content-Type"] = "application/merge-patch+json"
        ok.append(c.call("PATCH", cms + "/churn", {"data": {"n": str(n)}}))
        c.headers["Content-Type"] = "application/json"
        if n >= WINDOW:
            ok.append(c.call("DELETE", f"{pods}/churn-{n - WINDOW}"))
        failures += sum(1 for s in ok if s >= 300)
        n += 1
        pause = start + n / a.rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    warm = [s for s in samples if s[0] >= a.warmup * 60]
    if len(warm) >= 2:
        (t0, r0), (t1, r1) = warm[0], warm[-1]
        print(f"growth {(r1 - r0) / ((t1 - t0) / 60):.2f} MiB/min from {t0 / 60:.1f} to {t1 / 60:.1f} min "
              f"({r0:.1f} -> {r1:.1f} MiB), {n} steps at {a.rate}/s, {failures} failed requests")


if __name__ == "__main__":
    main()
