"""`scripts/bench/accel-test --probe`: accel-test --probe on 2, 3 and 4 nodes, each a network namespace
on a switched veth network (the bridge in a namespace of its own), one rank per node, links limited
with `tc tbf`; printed, never asserted.

  1. Probe time against the node count, with every link at BASE Mbit/s and with the last node at SLOW
     Mbit/s (medians of R runs), what was named, and nccl-tests' bus bandwidth of the world's
     all_reduce (`accel-test --bench`, 64 MiB, float32) in the same network.
  2. The measured matrix beside the tc limits (the 4-node throttled run).
  3. REPEAT runs of the 4-node world throttled and not: how often exactly the throttled node was
     named (and nothing else), how often nothing was named, and the throttled node's measured rate
     against its limit (min/max, the ±15% band).

As in tests/probe.rs the nodes run in a cgroup of a large CPU weight (cgroup v1 cpu.shares 65536, or
v2 cpu.weight), so that the other work of a shared machine does not pass for a slow link; the links
not under test are held at BASE (2 Gbit/s), a rate two cores sustain. Inside that cgroup the
ranks' wake-ups come late (latencies of 1-2 ms where they are 40-120 µs outside it, on this
machine): the latency is also shown from one run outside it. Needs root (namespaces, tc).
Environment: R (default 3), REPEAT (default 10), BASE (default 2000), SLOW (default 200), NODES
(default `2,3,4`).
"""
import json
import os
import statistics
import subprocess
import sys
import time

bin_ = sys.argv[1]
R = int(os.environ.get("R", "3"))
REPEAT = int(os.environ.get("REPEAT", "10"))
BASE = int(os.environ.get("BASE", "2000"))
SLOW = int(os.environ.get("SLOW", "200"))
NODES = [int(n) for n in os.environ.get("NODES", "2,3,4").split(",")]
TAG = f"b{os.getpid() % 1000}"


def sh(*args, check=True):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        sys.exit(f"{' '.join(args)}: {p.stderr.strip()}")
    return p


class Fabric:
    def __init__(self, n, slot):
        self.n = n
        self.sw = f"accb{slot}sw"
        self.names = [f"accb{slot}n{i}" for i in range(n)]
        self.ips = [f"10.205.{slot}.{i + 1}" for i in range(n)]
        self.ports = [f"accb{slot}p{i}" for i in range(n)]
        for ns in self.names + [self.sw]:
            sh("ip", "netns", "del", ns, check=False)
        sh("ip", "netns", "add", self.sw)
        sh("ip", "-n", self.sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.sw, "link", "set", "br0", "up")
        for i, ns in enumerate(self.names):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", self.ports[i], "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", self.ports[i], "netns", self.sw)
            sh("ip", "-n", self.sw, "link", "set", self.ports[i], "master", "br0")
            sh("ip", "-n", self.sw, "link", "set", self.ports[i], "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.ips[i]}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def limit(self, i, mbit):
        for ns, dev in ((self.names[i], "eth0"), (self.sw, self.ports[i])):
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
               "rate", f"{mbit}mbit", "burst", "256kb", "latency", "50ms")

    def close(self):
        for ns in self.names + [self.sw]:
            sh("ip", "netns", "del", ns, check=False)


def cpu_group():
    name = f"accel-bench-probe-{os.getpid()}"
    for path, f, w in (("/sys/fs/cgroup/cpu", "cpu.shares", "65536"), ("/sys/fs/cgroup", "cpu.weight", "6400")):
        if os.path.exists(os.path.join(path, f)) or (f == "cpu.weight" and os.path.exists("/sys/fs/cgroup/cgroup.controllers")):
            d = os.path.join(path, name)
            try:
                os.makedirs(d, exist_ok=True)
                open(os.path.join(d, f), "w").write(w)
                return d
            except OSError:
                pass
    print("note: no cgroup of its own: measuring beside the machine's other work")
    return None


GROUP = cpu_group()
PORT = [13000 + (os.getpid() * 7) % 1900]


def world(fab, args, grouped=True):
    """Every node's accel-test at once; (wall seconds, [(rc, stdout, stderr)])."""
    PORT[0] += 2
    procs = []
    t = time.perf_counter()
    for i, ns in enumerate(fab.names):
        cmd = []
        if GROUP and grouped:
            cmd += ["sh", "-c", f"echo $$ > {GROUP}/cgroup.procs && exec \"$@\"", "sh"]
        cmd += ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', f"node{i}", bin_, "--cpu",
                "--num_processes", str(fab.n), "--num_machines", str(fab.n), "--machine_rank", str(i),
                "--main_process_ip", fab.ips[0], "--main_process_port", str(PORT[0]), "--timeout", "30"] + args
        env = dict(os.environ, GLOO_SOCKET_IFNAME="eth0")
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = []
    for p in procs:
        out, err = p.communicate()
        outs.append((p.returncode, out, err))
    return time.perf_counter() - t, outs


def probe(fab, grouped=True):
    wall, outs = world(fab, ["--check", "barrier", "--probe=links", "--json"], grouped)
    rc, out, err = outs[0]
    try:
        return wall, rc, json.loads(out)
    except json.JSONDecodeError:
        sys.exit(f"accel-test failed (exit {rc}): {out[-2000:]} {err[-2000:]}")


def busbw(fab):
    _, outs = world(fab, ["--check", "barrier", "--bench", "--max_size", "64M", "--json"])
    doc = json.loads(outs[0][1])
    rows = [r for r in doc["bench"] if r["op"] == "all_reduce"]
    return max(rows, key=lambda r: r["size"])


def named(doc):
    return [f"{s['kind']}:n{s['node']}" for s in doc["probe"]["stragglers"]]


def limits(n, slow_node):
    return [SLOW if i == slow_node else BASE for i in range(n)]


print(f"== accel-test --probe=links, 1 rank per node, links at {BASE} Mbit/s and one node at {SLOW} Mbit/s (tc tbf), medians of {R} runs")
print(f"{'nodes':>5} {'slow node':>9} {'rounds':>6} {'probe s':>8} {'wall s':>7}  {'named':<14} {'all_reduce busbw @64MiB':>24}")
matrices = {}
slot = os.getpid() % 200
for n in NODES:
    for slow_node in (None, n - 1):
        fab = Fabric(n, slot)
        try:
            lim = limits(n, slow_node)
            for i, m in enumerate(lim):
                fab.limit(i, m)
            runs = [probe(fab) for _ in range(R)]
            row = busbw(fab)
            if n == max(NODES) and slow_node is not None:
                # Latency outside the cgroup: inside it, wake-ups come a scheduler tick late.
                ungrouped = probe(fab, grouped=False)[2]
        finally:
            fab.close()
        secs = statistics.median(r[2]["probe"]["seconds"] for r in runs)
        walls = statistics.median(r[0] for r in runs)
        names = sorted({",".join(named(r[2])) or "-" for r in runs})
        bus = f"{row['busbw'] * 8:.3f} Gbit/s ({row['busbw']:.3f} GB/s)"
        print(f"{n:>5} {('n' + str(slow_node)) if slow_node is not None else '-':>9} {runs[0][2]['probe']['node_rounds']:>6} {secs:>8.2f} {walls:>7.2f}  {' | '.join(names):<14} {bus:>24}")
        matrices[(n, slow_node)] = (lim, runs[-1][2])

n = max(NODES)
lim, doc = matrices[(n, n - 1)]
print(f"\n== measured Gbit/s beside the tc limit (min of the two ends), {n} nodes, n{n - 1} at {SLOW} Mbit/s (last run)")
rate = {(l["from_node"], l["to_node"]): l["gbps"] for l in doc["probe"]["links"] if not l["within_node"]}
print(f"{'from/to':<8}" + "".join(f"{'n' + str(b):>16}" for b in range(n)))
for a in range(n):
    cells = []
    for b in range(n):
        if a == b:
            cells.append(f"{'-':>16}")
        else:
            limit = min(lim[a], lim[b]) / 1000
            cells.append(f"{rate[(a, b)]:>7.3f} / {limit:<6.2f}")
    print(f"{'n' + str(a):<8}" + "".join(cells))
for what, d in (("in the cgroup", doc), ("outside it (one more run)", ungrouped)):
    lat = {(l["node_a"], l["node_b"]): l["us"] for l in d["probe"]["latency"]}
    print(f"latency, µs one way, {what}: " + ", ".join(f"n{a}-n{b} {u:.0f}" for (a, b), u in sorted(lat.items())))

print(f"\n== {REPEAT} runs each, {n} nodes: throttled (n{n - 1} at {SLOW} Mbit/s) and not")
for slow_node in (n - 1, None):
    fab = Fabric(n, slot)
    try:
        for i, m in enumerate(limits(n, slow_node)):
            fab.limit(i, m)
        good, times, slow_rates = 0, [], []
        for _ in range(REPEAT):
            wall, rc, doc = probe(fab)
            times.append(doc["probe"]["seconds"])
            want = [f"node:n{slow_node}"] if slow_node is not None else []
            good += named(doc) == want and rc == (6 if want else 0)
            if slow_node is not None:
                slow_rates += [l["gbps"] for l in doc["probe"]["links"]
                               if l["from_node"] == slow_node or l["to_node"] == slow_node]
    finally:
        fab.close()
    what = f"exactly n{slow_node} named" if slow_node is not None else "nothing named"
    line = f"{'throttled' if slow_node is not None else 'even':<10} {what}: {good}/{REPEAT}; probe time median {statistics.median(times):.2f} s (max {max(times):.2f})"
    if slow_rates:
        limit = SLOW / 1000
        inside = sum(abs(g - limit) <= 0.15 * limit for g in slow_rates)
        line += f"; n{slow_node}'s {len(slow_rates)} link measurements {min(slow_rates):.3f}–{max(slow_rates):.3f} Gbit/s vs limit {limit}, {inside}/{len(slow_rates)} within ±15%"
    print(line)

if GROUP:
    for _ in range(50):
        try:
            os.rmdir(GROUP)
            break
        except OSError:
            time.sleep(0.1)
