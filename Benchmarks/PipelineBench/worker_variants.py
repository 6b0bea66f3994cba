#!/usr/bin/env python3
"""One `pipelinectl worker` (prices.decode, 4 partitions) run in several variants of its
environment against one local broker, with the kcat pipe after each round: CPU per record (user
+ system, every thread) of each variant, and optionally by thread.

    python3 Benchmarks/PipelineBench/worker_variants.py
    VARIANTS="none,/usr/lib/x86_64-linux-gnu/libjemalloc.so.2,T:glibc.malloc.arena_max=1" \\
        python3 Benchmarks/PipelineBench/worker_variants.py

Env: VARIANTS (comma-separated; `none` as shipped, a path to preload with LD_PRELOAD, or
`T:` followed by a GLIBC_TUNABLES value, `E:NAME=VALUE` for one more environment variable (a
test build's switch); default `none`), N (records, default 1,000,000),
ROUNDS (default 2; the variants' order reverses every other round), PIPELINECTL (default
.build/release/pipelinectl), DETAIL=1 (each variant's four busiest threads, by name). Needs
scripts/env.sh's environment (librdkafka 2.16) and kcat. A variant's threads are read from
/proc every 0.1 s until it exits; the last reading counts.
"""
import collections
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("PIPELINECTL", ".build/release/pipelinectl")
import bench_pipeline as bp  # noqa: E402  (its helpers: broker, topology, tickers, the pipe)

N = int(os.environ.get("N", "1000000"))
CTL = os.environ["PIPELINECTL"]
TICK = os.sysconf("SC_CLK_TCK")


def threads(pid):
    """Each thread of `pid`: (name, user s, system s, voluntary, involuntary switches)."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{t}/comm").read().strip()
            fields = open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()
            status = open(f"/proc/{pid}/task/{t}/status").read()
            vol = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
            inv = int(status.split("nonvoluntary_ctxt_switches:")[1].split()[0])
            out[t] = (name, int(fields[11]) / TICK, int(fields[12]) / TICK, vol, inv)
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass
    return out


def main():
    variants = os.environ.get("VARIANTS", "none").split(",")
    broker, bootstrap = bp.start_broker()
    try:
        work = tempfile.mkdtemp()
        source = "variants.in"
        subprocess.run([CTL, "topics", "create", "--bootstrap-server", bootstrap, source, "--partitions", "4"],
                       check=True, capture_output=True)
        path = os.path.join(work, "in.txt")
        with open(path, "w") as f:
            for line in bp.tick_lines(N):
                f.write(line)
        subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", source, "-K", "\t", "-l", path], check=True)
        for rnd in range(int(os.environ.get("ROUNDS", "2"))):
            for k, variant in enumerate(variants if rnd % 2 == 0 else variants[::-1]):
                env = dict(os.environ)
                if variant.startswith("T:"):
                    env["GLIBC_TUNABLES"] = variant[2:]
                elif variant.startswith("E:"):
                    name, _, value = variant[2:].partition("=")
                    env[name] = value
                elif variant != "none":
                    env["LD_PRELOAD"] = variant
                topo = os.path.join(work, f"t{rnd}_{k}.yaml")
                bp.topology(topo, f"g{rnd}_{k}", source, f"variants.out{rnd}_{k}", 4)
                with open(os.path.join(work, f"w{rnd}_{k}.log"), "w") as log:
                    p = subprocess.Popen(bp.swift_worker(bootstrap, topo, stop_after=N), stdout=subprocess.DEVNULL,
                                         stderr=log, env=env)
                    last = {}
                    while p.poll() is None:
                        last.update(threads(p.pid))
                        time.sleep(0.1)
                by_name = collections.defaultdict(lambda: [0.0, 0.0, 0, 0])
                for name, user, system, vol, inv in last.values():
                    a = by_name[name]
                    a[0] += user; a[1] += system; a[2] += vol; a[3] += inv
                user = sum(a[0] for a in by_name.values())
                system = sum(a[1] for a in by_name.values())
                print(f"round {rnd + 1} {variant}: {(user + system) / N * 1e6:.2f} us per record "
                      f"(user {user / N * 1e6:.2f}, system {system / N * 1e6:.2f})", flush=True)
                if os.environ.get("DETAIL"):
                    for name, a in sorted(by_name.items(), key=lambda x: -(x[1][0] + x[1][1]))[:4]:
                        print(f"    {name:22} user {a[0] / N * 1e6:5.2f} system {a[1] / N * 1e6:5.2f} us, "
                              f"switches per 1,000 records {a[2] / N * 1e3:.1f} + {a[3] / N * 1e3:.1f}")
            _, cpu, _ = bp.kcat_seconds(bootstrap, source, f"variants.pipe{rnd}", work)
            print(f"round {rnd + 1} kcat pipe: {cpu / N * 1e6:.2f} us per record", flush=True)
    finally:
        bp.stop(broker)


if __name__ == "__main__":
    main()
