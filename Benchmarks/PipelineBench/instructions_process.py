#!/usr/bin/env python3
"""Instructions per record of whole processes, counted by callgrind, in two comparisons:
- `worker`: a `pipelinectl worker` (CHAIN, default prices.decode) against the `kcat -C | kcat -P`
  pipe on the same input (bench-pipeline's sides);
- `produce`: `pipelinectl perf produce` against `kcat -P` of the same 200-byte messages, both
  idempotent with acks=all and linger.ms=5 (bench-kafka's produce sides).

Each side runs under `valgrind --tool=callgrind` with every thread counted (librdkafka's broker
and poll threads, the cooperative pool, the event loop): all instructions the process executed
in user space, from exec to exit. A side runs twice, on SMALL and LARGE tickers of
bench-pipeline's shape (4 partitions, keyed by market, 2 % invalid) on one local broker, and the
figure is the difference per record, so start-up, group join and shutdown cancel out.

What the figure is not: the kernel's work (system calls, wake-ups: see the context switches in
bench-pipeline) and the broker's. Under valgrind a process runs ~50x slower and one thread at a
time, so timer-driven work (linger expiry, commits every 100 ms, librdkafka's 1 s timers) and
the idempotent producer's poll loop while 5 requests wait are counted over a longer run than
they would be; the spread over RUNS says how much that moves the figure.

- `ingest`: `pipelinectl ingest http` alone (its shipping defaults) under `load.py`'s posts of 20
  valid tickers from 4 connections: instructions per post and per record, from SMALL_POSTS and
  LARGE_POSTS posts per connection (the endpoint answers; no peer runs under callgrind).

Usage: instructions_process.py [worker|produce|ingest ...] (default: worker and produce). Env: SMALL (20000), LARGE
(60000), RUNS (3), CHAIN, LINGER (the worker comparison's linger.ms on both sides; default 10,
the worker's own), PIPELINECTL, KEEP=1 (keep the callgrind files, for callgrind_annotate).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_pipeline import (CHAIN, CTL, LINGER, changelog_topic, log, run,  # noqa: E402
                            start_broker, stop, tick_lines, topology)
INGEST_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "IngestBench")
sys.path.insert(0, INGEST_BENCH)
from bench_ingest import valid_tickers  # noqa: E402

PARTITIONS = 4
SHIM_SO = None  # the preloaded sigsuspend (SHIM), built by main()
SESSION = "6s"  # tansu answers JoinGroup after half of it; valgrind's threads keep heartbeating


# Valgrind 3.19 (Debian 12) sanitizes rt_sigsuspend's mask in place, and libdispatch's thread that
# outlives an async main waits in sigsuspend() on a mask in read-only memory: valgrind crashes.
# This preloaded sigsuspend hands the kernel a copy.
SHIM = r"""
#define _GNU_SOURCE
#include <signal.h>
#include <unistd.h>
#include <sys/syscall.h>
int sigsuspend(const sigset_t *mask) {
    sigset_t copy = *mask;
    return (int)syscall(SYS_rt_sigsuspend, &copy, _NSIG / 8);
}
"""


def callgrind(cmd, out, env=None, **kw):
    """Popen of cmd under callgrind, every thread counted into one total."""
    return subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--quiet"] + cmd,
                            env=env, **kw)


def total(out):
    with open(out) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"{out}: no totals line")


def produce(bootstrap, topic, n):
    run([CTL, "topics", "create", "--bootstrap-server", bootstrap, topic, "--partitions", str(PARTITIONS)])
    kp = subprocess.Popen(["kcat", "-P", "-b", bootstrap, "-t", topic, "-K", "\t", "-X", "linger.ms=20"],
                          stdin=subprocess.PIPE, text=True)
    for line in tick_lines(n):
        kp.stdin.write(line)
    kp.stdin.close()
    if kp.wait() != 0:
        raise RuntimeError("kcat -P of the input failed")


def worker(ctl, bootstrap, source, target, n, work, tag):
    group = f"instr-{tag}"
    topo = os.path.join(work, f"{tag}.yaml")
    topology(topo, group, source, target, PARTITIONS)
    changelog_topic(bootstrap, group, PARTITIONS)
    out = os.path.join(work, f"{tag}.callgrind")
    cmd = [ctl, "worker", "bench-decode", "--topology", topo, "--bootstrap-server", bootstrap,
           "--session-timeout", SESSION, "--metrics-address", "127.0.0.1:0", "--log-format", "json",
           "--stop-after", str(n)]
    if "LINGER" in os.environ:
        cmd += ["--linger", f"{LINGER}ms"]
    with open(os.path.join(work, f"{tag}.log"), "w") as logf:
        p = callgrind(cmd, out, stdout=logf, stderr=subprocess.STDOUT, env={**os.environ, "SWIFT_DETERMINISTIC_HASHING": "1", "LD_PRELOAD": SHIM_SO})
        if p.wait() != 0:
            raise RuntimeError(f"worker failed: {open(logf.name).read()[-3000:]}")
    return total(out)


def pipe(bootstrap, source, target, work, tag):
    outs = [os.path.join(work, f"{tag}.{side}.callgrind") for side in ("C", "P")]
    c = callgrind(["kcat", "-C", "-b", bootstrap, "-t", source, "-o", "beginning", "-e", "-q", "-K", "\t"],
                  outs[0], stdout=subprocess.PIPE)
    p = callgrind(["kcat", "-P", "-b", bootstrap, "-t", target, "-K", "\t", "-X", f"linger.ms={LINGER}",
                   "-X", "enable.idempotence=true", "-X", "acks=all"], outs[1], stdin=c.stdout)
    c.stdout.close()
    if p.wait() != 0 or c.wait() != 0:
        raise RuntimeError("the kcat pipe failed")
    return sum(total(o) for o in outs)


def perf_produce(ctl, bootstrap, n, work, tag):
    out = os.path.join(work, f"{tag}.callgrind")
    target = f"instr.{tag}"
    run([CTL, "topics", "create", "--bootstrap-server", bootstrap, target, "--partitions", "1"])
    p = callgrind([ctl, "perf", "produce", "--bootstrap-server", bootstrap, "--topic", target, "--messages", str(n),
                   "--size", "200", "-X", "linger.ms=5"], out, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                  env={**os.environ, "SWIFT_DETERMINISTIC_HASHING": "1", "LD_PRELOAD": SHIM_SO})
    _, err = p.communicate()
    if p.returncode != 0:
        raise RuntimeError(f"perf produce failed: {err.decode()[-3000:]}")
    return total(out)


def kcat_produce(bootstrap, n, work, tag):
    out = os.path.join(work, f"{tag}.callgrind")
    target = f"instr.{tag}"
    run([CTL, "topics", "create", "--bootstrap-server", bootstrap, target, "--partitions", "1"])
    with open(os.path.join(work, f"messages.{n}"), "rb") as messages:
        p = callgrind(["kcat", "-P", "-b", bootstrap, "-t", target, "-X", "enable.idempotence=true", "-X", "acks=all",
                       "-X", "linger.ms=5"], out, stdin=messages)
        if p.wait() != 0:
            raise RuntimeError("kcat -P failed")
    return total(out)


def ingest_endpoint(ctl, bootstrap, body, records, connections, posts, work, tag):
    """Instructions of `pipelinectl ingest http` from start to exit, serving `connections` x
    `posts` posts of `body` (`records` tickers each) from load.py."""
    out = os.path.join(work, f"{tag}.callgrind")
    log_path = os.path.join(work, f"{tag}.log")
    with open(log_path, "w") as logf:
        p = callgrind([ctl, "ingest", "http", "--listen", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--log-format", "json",
                       "--bootstrap-server", bootstrap, "--rate-limit", "1000000"], out, stdout=subprocess.DEVNULL, stderr=logf,
                      env={**os.environ, "SWIFT_DETERMINISTIC_HASHING": "1", "LD_PRELOAD": SHIM_SO,
                           "PIPELINE_INGEST_TOKENS": "bench bench-token-0123456789abcdef"})
    port, deadline = None, time.monotonic() + 300
    while port is None:
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            raise RuntimeError(f"ingest http did not start: {open(log_path).read()[-3000:]}")
        for line in open(log_path):
            if "ingest endpoint listening" in line:
                port = int(json.loads(line)["port"])
        time.sleep(0.2)
    load = run([sys.executable, os.path.join(INGEST_BENCH, "load.py"), f"http://127.0.0.1:{port}/v1/prices",
                "bench-token-0123456789abcdef", body, str(records), str(connections), str(posts)]).stdout
    result = json.loads(load)
    p.send_signal(signal.SIGTERM)
    if p.wait() != 0:
        raise RuntimeError(f"ingest http failed: {open(log_path).read()[-3000:]}")
    if result["status"] != {"201": connections * posts}:
        raise RuntimeError(f"not every post was accepted: {load}")
    return total(out)


def compare(label, sides, measure, small, large, runs):
    """Runs each side on SMALL and LARGE records RUNS times (order alternating): rows of
    (Ir small, Ir large, per record) per side."""
    rows = {side: [] for side in sides}
    for r in range(1, runs + 1):
        counts = {}
        for side in (sides if r % 2 else list(reversed(sides))):
            for n in (small, large):
                counts[side, n] = measure(side, n, f"{label}.{side.split()[0]}.{r}.{n}")
                log(f"{label} run {r} {side} {n:,} records: {counts[side, n]:,} instructions")
            rows[side].append((counts[side, small], counts[side, large],
                               (counts[side, large] - counts[side, small]) / (large - small)))
        log(f"{label} run {r}: " + ", ".join(f"{side} {rows[side][-1][2]:,.0f}" for side in sides)
            + f" instructions per record ({rows[sides[0]][-1][2] / rows[sides[1]][-1][2]:.2f}x)")
    return rows


def table(rows, small, large, runs):
    sides = list(rows)
    print(f"| run | {'side':<14} | {'Ir (' + format(small, ',') + ')':>15} | {'Ir (' + format(large, ',') + ')':>15} "
          f"| per record | {sides[0].split()[0]} / {sides[1].split()[0]} |")
    print("|---|---|--:|--:|--:|--:|")
    for r in range(runs):
        for side in sides:
            s, l, per = rows[side][r]
            ratio = f"{rows[sides[0]][r][2] / rows[sides[1]][r][2]:.2f}x" if side == sides[0] else ""
            print(f"| {r + 1} | {side:<14} | {s:>15,} | {l:>15,} | {per:>10,.0f} | {ratio:>13} |")


def main():
    small = int(os.environ.get("SMALL", "20000"))
    large = int(os.environ.get("LARGE", "60000"))
    runs = int(os.environ.get("RUNS", "3"))
    work = tempfile.mkdtemp()
    # Valgrind 3.19 (Debian 12) cannot read the DWARF 5 that Swift 6 writes: a copy without it.
    ctl = os.path.join(work, "pipelinectl")
    subprocess.run(["cp", CTL, ctl], check=True)
    subprocess.run(["strip", "--strip-debug", ctl], check=True)
    with open(os.path.join(work, "shim.c"), "w") as f:
        f.write(SHIM)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", os.path.join(work, "shim.so"), os.path.join(work, "shim.c")], check=True)
    global SHIM_SO
    SHIM_SO = os.path.join(work, "shim.so")
    broker, bootstrap = start_broker()
    parts = sys.argv[1:] or ["worker", "produce"]
    try:
        if "worker" in parts:
            for n in (small, large):
                produce(bootstrap, f"instr.raw.{n}", n)

            def measure(side, n, tag):
                target = f"instr.out.{tag}"
                run([CTL, "topics", "create", "--bootstrap-server", bootstrap, target, "--partitions", str(PARTITIONS)])
                return (worker(ctl, bootstrap, f"instr.raw.{n}", target, n, work, tag) if side == "swift worker"
                        else pipe(bootstrap, f"instr.raw.{n}", target, work, tag))
            rows = compare("worker", ["swift worker", "kcat pipe"], measure, small, large, runs)
            print(f"whole-process instructions per record, worker ({CHAIN}) vs the kcat pipe, linger.ms {LINGER}, "
                  f"{PARTITIONS} partitions: (Ir({large:,}) - Ir({small:,})) / {large - small:,}")
            table(rows, small, large, runs)
        if "produce" in parts:
            for n in (small, large):
                with open(os.path.join(work, f"messages.{n}"), "wb") as f:
                    f.write((b"x" * 200 + b"\n") * n)
            rows = compare("produce", ["perf produce", "kcat -P"],
                           lambda side, n, tag: perf_produce(ctl, bootstrap, n, work, tag) if side == "perf produce"
                           else kcat_produce(bootstrap, n, work, tag), small, large, runs)
            print(f"whole-process instructions per record, `perf produce` vs `kcat -P`, 200-byte values, idempotent, "
                  f"acks=all, linger.ms 5, 1 partition: (Ir({large:,}) - Ir({small:,})) / {large - small:,}")
            table(rows, small, large, runs)
        if "ingest" in parts:
            records, connections = 20, 4
            small_posts = int(os.environ.get("SMALL_POSTS", "100"))
            large_posts = int(os.environ.get("LARGE_POSTS", "300"))
            body = os.path.join(work, "body.jsonl")
            with open(body, "w") as f:
                f.write("".join(valid_tickers(records)))
            print(f"whole-process instructions of `pipelinectl ingest http` (its defaults), {connections} connections "
                  f"posting {records} tickers a post: (Ir({large_posts} posts each) - Ir({small_posts})) / "
                  f"{connections * (large_posts - small_posts)} posts")
            print(f"| run | Ir ({small_posts} posts each) | Ir ({large_posts} posts each) | per post | per record |")
            print("|---|--:|--:|--:|--:|")
            for r in range(1, runs + 1):
                counts = [ingest_endpoint(ctl, bootstrap, body, records, connections, n, work, f"ingest.{r}.{n}")
                          for n in (small_posts, large_posts)]
                per_post = (counts[1] - counts[0]) / (connections * (large_posts - small_posts))
                log(f"ingest run {r}: {per_post:,.0f} instructions per post")
                print(f"| {r} | {counts[0]:,} | {counts[1]:,} | {per_post:,.0f} | {per_post / records:,.0f} |")
    finally:
        stop(broker)
        if os.environ.get("KEEP") == "1":
            log(f"callgrind files kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    if not set(sys.argv[1:]) <= {"worker", "produce", "ingest"}:
        sys.exit(f"usage: {sys.argv[0]} [worker|produce|ingest ...], not {' '.join(sys.argv[1:])}")
    main()
