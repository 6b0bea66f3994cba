"""End-to-end benchmark driver (run it through scripts/bench-pipeline).

One worker decoding and filtering Upbit tickers and producing the typed ticks, against
(a) a kcat consume-to-produce pipe over the same topic (moving bytes without work: the floor) and
(b) a Python worker with confluent-kafka and msgspec doing the same job (decode, validate, the
same output JSON, with a dedupe-key header when the target topic is not declared
`dedupe-key: content`, invalid input to the dead-letter topic).
Throughput counts from the first record to the last acknowledged output; each side's CPU per
record (its processes' user + system time) and the broker's during its rounds are printed too,
since all share the machine's cores. Then two workers sharing 4 partitions, and per round on a
fresh broker, the latency at a steady 10,000 msg/s through the broker alone (the floor) and
through one worker.

CHAIN picks the worker's stages: `prices.decode` (the default; the only one the Python worker
does too), `prices.candles` (stateful: 1-minute candles, checkpointed to a changelog) or
`prices.decode,prices.alerts` (a chain: typed ticks fed to watchlist alerts, stateful). For the
latter two the Python side is skipped. THROUGHPUT_ONLY=1 skips the two-worker and latency parts.
BASELINE=path/to/another/pipelinectl adds its worker as one more side of every round (a
before/after of two builds in the same run, on the same broker and input).
LINGER (milliseconds, default 10: the worker's own default) is every side's producer linger.ms:
the pipe's, the Python worker's, and the Swift worker's when set. DEDUPE=header|content: the
target topic's declaration (default: the shipped topology's for the chain's output, content for
prices.ticks); BASELINE_DEDUPE the same for the BASELINE side (header for a build before it).
"""
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

CTL = os.environ.get("PIPELINECTL", ".build/release/pipelinectl")
# Every side's producer lingers this many milliseconds (linger.ms): the worker's default, 10 ms,
# unless LINGER is set (then the Swift worker gets --linger too, a BASELINE build -X linger.ms).
LINGER = os.environ.get("LINGER", "10")
HERE = os.path.dirname(os.path.abspath(__file__))
MARKETS = [f"KRW-C{i}" for i in range(40)]
CHAIN = os.environ.get("CHAIN", "prices.decode")
# Each chain's last output, sent to the round's target topic.
# "dedupe": how the target topic carries dedupe keys, as the shipped topology.yaml declares the
# chain's output topic (prices.ticks: `dedupe-key: content`, no header; the others: the header).
CHAINS = {
    "prices.decode": {"output": "prices.ticks", "stateful": False, "options": "", "dedupe": "content"},
    "prices.candles": {"output": "prices.candles.1m", "stateful": True, "options": ""},
    "prices.decode,prices.alerts": {
        "output": "notifications", "stateful": True,
        # Watchlist subscriptions on a quarter of the markets, both directions.
        "options": "    options:\n      alerts:\n" + "".join(
            f"        - {{subscriber: user-{i}, market: {MARKETS[i]}, threshold: {0.01 if i % 2 == 0 else -0.01}}}\n"
            for i in range(0, len(MARKETS), 4)),
    },
}
if CHAIN not in CHAINS:
    sys.exit(f"CHAIN must be one of {', '.join(CHAINS)}, not {CHAIN!r}")
# DEDUPE=header|content overrides the shipped declaration for the Swift and Python workers;
# BASELINE_DEDUPE (bench_pipeline.py) and COMPARE_DEDUPE (compare_workers.py) set it for the
# other build's side (an older build knows only the header: give it header).
DEDUPE = os.environ.get("DEDUPE", CHAINS[CHAIN].get("dedupe", "header"))
for name in ("DEDUPE", "BASELINE_DEDUPE", "COMPARE_DEDUPE"):
    if os.environ.get(name, DEDUPE) not in ("header", "content"):
        sys.exit(f"{name} must be header or content, not {os.environ[name]!r}")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def tick_lines(n, seed=7):
    rng = random.Random(seed)
    base = 1_700_000_000_000
    for i in range(n):
        m = MARKETS[i % len(MARKETS)]
        price = 1000 + rng.randrange(5000) / 10
        if i % 50 == 49:
            price = -price  # 2 % invalid: the filter drops (Swift: dead-letters) them
        t = base + i * 3
        yield (f'{m}\t{{"type":"ticker","code":"{m}","opening_price":1000.0,"high_price":1600.0,"low_price":990.0,'
               f'"trade_price":{price},"prev_closing_price":1001.0,"change":"RISE","signed_change_rate":0.0123,'
               f'"trade_volume":{1 + i % 7}.5,"acc_trade_volume_24h":12345.678,"trade_timestamp":{t},'
               f'"timestamp":{t + 4},"stream_type":"REALTIME"}}\n')


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def timed_rss(cmd):
    """Runs cmd under /usr/bin/time -v: (stdout, stderr, peak RSS in MiB, CPU seconds user + system)."""
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {p.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) / 1024
    cpu = sum(float(re.search(rf"{kind} time \(seconds\): ([0-9.]+)", p.stderr).group(1)) for kind in ("User", "System"))
    return p.stdout, p.stderr, rss, cpu


def context_switches(time_output):
    """Voluntary (a thread waited: a wake-up later) and involuntary context switches of a process
    and all its threads, from /usr/bin/time -v's report or "-f '%U %S %w %c'"."""
    m = re.search(r"Voluntary context switches: (\d+)\s+Involuntary context switches: (\d+)", time_output)
    if m:
        return int(m.group(1)), int(m.group(2))
    fields = time_output.split()
    return int(fields[-2]), int(fields[-1])


def windowed(result):
    """latency.py's p50 by 4-second window, e.g. `11 23 37 68`."""
    return " ".join(f"{w['p50_ms']:.0f}" for w in result["windows"])


def start_broker():
    """A fresh local broker: (its `pipelinectl broker` process, the bootstrap address)."""
    broker = subprocess.Popen([CTL, "broker"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return broker, broker.stdout.readline().strip().removeprefix("bootstrap server: ")


def stop(broker):
    if broker.poll() is None:
        broker.terminate()
        broker.wait()


def child_pid(parent):
    """The pid of `parent`'s one child process (the broker's tansu)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:
                        return int(entry)
            except (FileNotFoundError, ProcessLookupError):
                pass
    raise RuntimeError(f"process {parent} has no child")


def process_cpu(pid):
    """CPU seconds (user + system) a running process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def topology(path, group, source, target, partitions, dedupe=None):
    """The worker's topology: CHAIN from source to target; a stateful chain checkpoints to a
    changelog topic of its own per group (see changelog_topic). `dedupe` (default DEDUPE): the
    target topic's `dedupe-key` declaration."""
    chain = CHAINS[CHAIN]
    changelog = f"{group}.changelog"
    declared = ", dedupe-key: content" if (dedupe or DEDUPE) == "content" else ""
    with open(path, "w") as f:
        f.write(f"""topics:
  - {{name: {source}, partitions: {partitions}}}
  - {{name: {target}, partitions: {partitions}{declared}}}
  - {{name: bench.dead-letters, partitions: 1}}
""" + (f"  - {{name: {changelog}, partitions: {partitions}, config: {{cleanup.policy: compact}}}}\n" if chain["stateful"] else "") + f"""stages:
  - name: bench-decode
    chain: [{CHAIN.replace(",", ", ")}]
    inputs: [{source}]
    outputs: {{{chain["output"]}: {target}}}
    dead-letter-topic: bench.dead-letters
    group: {group}
""" + (f"    changelog: {changelog}\n" if chain["stateful"] else "") + chain["options"])


def changelog_topic(bootstrap, group, partitions):
    """Creates a stateful chain's changelog topic for this group (nothing for a stateless one)."""
    if CHAINS[CHAIN]["stateful"]:
        run([CTL, "topics", "create", "--bootstrap-server", bootstrap, f"{group}.changelog", "--partitions", str(partitions),
             "--cleanup-policy", "compact"])


def swift_worker(bootstrap, topo, stop_after=None, extra=(), ctl=None):
    cmd = [ctl or CTL, "worker", "bench-decode", "--topology", topo, "--bootstrap-server", bootstrap,
           "--session-timeout", "2s", "--metrics-address", "127.0.0.1:0", "--log-format", "json", *extra]
    if "LINGER" in os.environ:
        cmd += ["-X", f"linger.ms={LINGER}"] if ctl else ["--linger", f"{LINGER}ms"]
    if stop_after:
        cmd += ["--stop-after", str(stop_after)]
    return cmd


def stopped_figure(log_text, field="active-seconds"):
    """A figure of the worker's last log line ("worker stopped"): by default first record to last
    acknowledged output; "loop-busy-seconds", how long its event loop was busy in that time."""
    for line in log_text.splitlines():
        if '"worker stopped"' in line:
            return float(json.loads(line)[field])
    raise RuntimeError("no 'worker stopped' line: " + log_text[-2000:])


def kcat_seconds(bootstrap, source, target, work):
    """First record to last acknowledged output of `kcat -C | kcat -P`: (T(all) - T(first record),
    CPU seconds of both kcat processes)."""
    times = [os.path.join(work, f"kcat-{side}.time") for side in ("C", "P")]
    t0 = time.monotonic()
    c = subprocess.Popen(["/usr/bin/time", "-f", "%U %S %w %c", "-o", times[0],
                          "kcat", "-C", "-b", bootstrap, "-t", source, "-o", "beginning", "-e", "-q", "-K", "\t"],
                         stdout=subprocess.PIPE)
    p = subprocess.Popen(["/usr/bin/time", "-f", "%U %S %w %c", "-o", times[1],
                          "kcat", "-P", "-b", bootstrap, "-t", target, "-K", "\t", "-X", f"linger.ms={LINGER}",
                          "-X", "enable.idempotence=true", "-X", "acks=all"], stdin=c.stdout)
    c.stdout.close()
    p.wait(); c.wait()
    total = time.monotonic() - t0
    reports = [open(path).read() for path in times]
    cpu = sum(float(x) for r in reports for x in r.split()[-4:-2])
    switches = [sum(x) for x in zip(*(context_switches(r) for r in reports))]
    t0 = time.monotonic()
    run(["kcat", "-C", "-b", bootstrap, "-t", source, "-o", "beginning", "-c", "1", "-q"])
    first = time.monotonic() - t0
    return total - first, cpu, tuple(switches)


def metrics_port(proc_log_path):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(proc_log_path) as f:
            for line in f:
                if "metrics and health endpoint listening" in line:
                    return int(json.loads(line)["port"])
        time.sleep(0.1)
    raise RuntimeError("worker did not report its endpoint")


def scrape_in(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("pipeline_records_in_total"))


def main():
    messages = int(os.environ.get("MESSAGES", "2000000"))
    rounds = int(os.environ.get("ROUNDS", "3"))
    partitions = int(os.environ.get("PARTITIONS", "4"))
    broker, bootstrap = start_broker()
    tansu = child_pid(broker.pid)
    work = tempfile.mkdtemp()
    results = {"kcat pipe": [], "swift worker": [], "python worker": []}
    if CHAIN != "prices.decode":
        del results["python worker"]  # it does prices.decode only
    baseline = os.environ.get("BASELINE")
    if baseline:
        results["baseline worker"] = []
    rss = {side: [] for side in results if side != "kcat pipe"}
    # CPU per record (user + system, microseconds) of the side's processes and of the broker
    # during that side's round: what each costs the 2 cores they share.
    cpu = {side: [] for side in results}
    # Context switches per 1,000 records (voluntary: a thread waited and was woken; involuntary:
    # preempted), every thread of the side's processes: a figure that travels between processors.
    switches = {side: [] for side in results}
    loop_busy = []  # the Swift worker's event loop: busy seconds per active second
    broker_cpu = {side: [] for side in results}
    try:
        run([CTL, "topics", "create", "--bootstrap-server", bootstrap, "bench.raw", "--partitions", str(partitions)])
        run([CTL, "topics", "create", "--bootstrap-server", bootstrap, "bench.dead-letters", "--partitions", "1"])
        log(f"producing {messages} tickers to bench.raw ({partitions} partitions)")
        kp = subprocess.Popen(["kcat", "-P", "-b", bootstrap, "-t", "bench.raw", "-K", "\t", "-X", "linger.ms=20"],
                              stdin=subprocess.PIPE, text=True)
        for line in tick_lines(messages):
            kp.stdin.write(line)
        kp.stdin.close(); kp.wait()
        valid = messages - messages // 50
        for r in range(1, rounds + 1):
            order = list(results)
            if r % 2 == 0:
                order.reverse()
            for side in order:
                target = f"bench.out.{side.split()[0]}.{r}"
                run([CTL, "topics", "create", "--bootstrap-server", bootstrap, target, "--partitions", str(partitions)])
                broker_before = process_cpu(tansu)
                if side == "kcat pipe":
                    secs, used, sw = kcat_seconds(bootstrap, "bench.raw", target, work)
                elif side in ("swift worker", "baseline worker"):
                    group = f"bench-{side.split()[0]}-{r}"
                    topo = os.path.join(work, f"{group}.yaml")
                    topology(topo, group, "bench.raw", target, partitions,
                             dedupe=os.environ.get("BASELINE_DEDUPE") if side == "baseline worker" else None)
                    changelog_topic(bootstrap, group, partitions)
                    _, err, mib, used = timed_rss(swift_worker(
                        bootstrap, topo, stop_after=messages, ctl=baseline if side == "baseline worker" else None))
                    secs = stopped_figure(err)
                    sw = context_switches(err)
                    rss[side].append(mib)
                    if side == "swift worker":
                        loop_busy.append(stopped_figure(err, "loop-busy-seconds") / secs)
                else:
                    out, err, mib, used = timed_rss([sys.executable, os.path.join(HERE, "python_worker.py"), bootstrap, "bench.raw", target, str(messages),
                                                        "bench.dead-letters", LINGER, DEDUPE])
                    sw = context_switches(err)
                    secs = float(re.search(r"active_seconds=([0-9.]+)", out).group(1))
                    rss[side].append(mib)
                results[side].append(messages / secs)
                cpu[side].append(used / messages * 1e6)
                switches[side].append((sw[0] * 1000 / messages, sw[1] * 1000 / messages))
                broker_cpu[side].append((process_cpu(tansu) - broker_before) / messages * 1e6)
                log(f"round {r} {side}: {messages / secs:,.0f} msg/s, CPU per record {cpu[side][-1]:.2f} us, "
                    f"broker {broker_cpu[side][-1]:.2f} us, context switches per 1,000 records "
                    f"{switches[side][-1][0]:.1f} voluntary + {switches[side][-1][1]:.1f} involuntary" + (f", loop busy {loop_busy[-1]:.0%}" if side == "swift worker" else ""))
                run([CTL, "topics", "delete", "--bootstrap-server", bootstrap, target])

        # Two workers sharing the partitions, per round, against one worker's best.
        two = []
        throughput_only = os.environ.get("THROUGHPUT_ONLY") == "1"
        for r in range(0 if throughput_only else rounds):
            topo = os.path.join(work, f"two{r}.yaml")
            target = f"bench.two.out.{r}"
            run([CTL, "topics", "create", "--bootstrap-server", bootstrap, target, "--partitions", str(partitions)])
            topology(topo, f"bench-two-{r}", "bench.raw", target, partitions)
            changelog_topic(bootstrap, f"bench-two-{r}", partitions)
            logs = [open(os.path.join(work, f"two{r}-{i}.log"), "w") for i in range(2)]
            workers = [subprocess.Popen(swift_worker(bootstrap, topo), stderr=l, stdout=l) for l in logs]
            ports = [metrics_port(l.name) for l in logs]
            while sum(scrape_in(p) for p in ports) < messages:
                time.sleep(0.2)
            for w in workers:
                w.terminate()
            for w in workers:
                w.wait()
            actives = [stopped_figure(open(l.name).read()) for l in logs]
            two.append(messages / max(actives))
            log(f"round {r} two workers: {two[-1]:,.0f} msg/s")
            run([CTL, "topics", "delete", "--bootstrap-server", bootstrap, target])
        # Latency at a steady rate, per round on a fresh broker (one that has held the throughput
        # rounds' millions of records has shown pauses of seconds): first through the broker
        # alone (the producer's topic read back directly: the floor no worker can beat), then
        # through one Swift worker.
        stop(broker)
        rate, seconds = os.environ.get("RATE", "10000"), os.environ.get("SECONDS", "20")
        floor, through = [], []
        for r in range(0 if throughput_only else rounds):
            broker, bootstrap = start_broker()
            run([CTL, "topics", "create", "--bootstrap-server", bootstrap, "bench.dead-letters", "--partitions", "1"])
            direct = f"bench.direct.{r}"
            run([CTL, "topics", "create", "--bootstrap-server", bootstrap, direct, "--partitions", str(partitions)])
            out = subprocess.run([sys.executable, os.path.join(HERE, "latency.py"), bootstrap, direct, direct, rate, seconds],
                                 capture_output=True, text=True, check=True)
            floor.append(json.loads(out.stdout.strip().splitlines()[-1]))
            source, target = f"bench.lat.{r}", f"bench.lat.out.{r}"
            run([CTL, "topics", "create", "--bootstrap-server", bootstrap, source, "--partitions", str(partitions)])
            run([CTL, "topics", "create", "--bootstrap-server", bootstrap, target, "--partitions", str(partitions)])
            topo = os.path.join(work, f"lat{r}.yaml")
            topology(topo, f"bench-lat-{r}", source, target, partitions)
            changelog_topic(bootstrap, f"bench-lat-{r}", partitions)
            wlog = open(os.path.join(work, f"lat{r}.log"), "w")
            worker = subprocess.Popen(swift_worker(bootstrap, topo), stderr=wlog, stdout=wlog)
            metrics_port(wlog.name)
            out = subprocess.run([sys.executable, os.path.join(HERE, "latency.py"), bootstrap, source, target, rate, seconds],
                                 capture_output=True, text=True, check=True)
            worker.terminate(); worker.wait()
            through.append(json.loads(out.stdout.strip().splitlines()[-1]))
            log(f"round {r} latency p50/p99 ms: broker alone {floor[-1]['p50_ms']:.0f}/{floor[-1]['p99_ms']:.0f}, "
                f"through the worker {through[-1]['p50_ms']:.0f}/{through[-1]['p99_ms']:.0f}; p50 by 4 s window: "
                f"broker alone {windowed(floor[-1])}, through the worker {windowed(through[-1])}")
            stop(broker)
    finally:
        stop(broker)

    def fmt(v):
        return f"{max(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})"

    model = next((l.split(":", 1)[1].strip() for l in run(["lscpu"]).stdout.splitlines() if l.startswith("Model name:")), "?")
    print(f"\nprocessor: {model}, {os.cpu_count()} cores")
    print(f"{messages:,} Upbit tickers, {partitions} partitions, {rounds} rounds, worker chain {CHAIN}; msg/s best (min-max), first record to last acknowledged output")
    for side, v in results.items():
        print(f"{side:14} {fmt(v):>32}" + (f"   peak RSS {max(rss[side]):.0f} MiB" if side in rss else ""))
    print("CPU per record in microseconds, user + system, min-max over rounds (the side's processes; the broker in the same rounds):")
    for side in results:
        print(f"{side:14} {min(cpu[side]):.2f}-{max(cpu[side]):.2f}   broker {min(broker_cpu[side]):.2f}-{max(broker_cpu[side]):.2f}")
    print("context switches per 1,000 records, min-max over rounds (voluntary: waits and wake-ups; involuntary):")
    for side in results:
        vol, inv = [x[0] for x in switches[side]], [x[1] for x in switches[side]]
        print(f"{side:14} {min(vol):.1f}-{max(vol):.1f} voluntary, {min(inv):.1f}-{max(inv):.1f} involuntary")
    if not CHAINS[CHAIN]["stateful"]:
        # (A stateful worker's loop also restores its state before the first record, which
        # "active" does not count.)
        print(f"swift worker's event loop busy {min(loop_busy):.0%}-{max(loop_busy):.0%} of its active time")
    s, k = max(results["swift worker"]), max(results["kcat pipe"])
    p = max(results["python worker"]) if "python worker" in results else None
    print(f"swift / kcat pipe {s / k:.2f}x" + (f"   swift / python {s / p:.2f}x" if p else "")
          + f"   (valid inputs {valid:,}, the rest dead-lettered)")
    # Round by round (the sides of one round ran back to back): the ratios issue 22 asks for.
    def ratios(a, b):
        v = [x / y for x, y in zip(a, b)]
        return ", ".join(f"{x:.2f}" for x in v) + f" (median {statistics.median(v):.2f})"
    print(f"per round: CPU per record swift / kcat pipe {ratios(cpu['swift worker'], cpu['kcat pipe'])}"
          + (f"; swift / python {ratios(cpu['swift worker'], cpu['python worker'])}" if p else "")
          + f"; throughput swift / kcat pipe {ratios(results['swift worker'], results['kcat pipe'])}")
    if baseline:
        print(f"per round: CPU per record swift / baseline {ratios(cpu['swift worker'], cpu['baseline worker'])}; "
              f"baseline / kcat pipe {ratios(cpu['baseline worker'], cpu['kcat pipe'])}; "
              f"throughput swift / baseline {ratios(results['swift worker'], results['baseline worker'])}")
    if throughput_only:
        return
    def spread(rows, key):
        v = [row[key] for row in rows]
        return f"{min(v):.0f}-{max(v):.0f}"

    print(f"latency at {rate} msg/s for {seconds} s, p50 and p99 in ms (min-max over {rounds} rounds): "
          f"broker alone p50 {spread(floor, 'p50_ms')}, p99 {spread(floor, 'p99_ms')}; "
          f"through one worker p50 {spread(through, 'p50_ms')}, p99 {spread(through, 'p99_ms')}")
    def by_window(rows):
        return ", ".join(f"{min(r['windows'][i]['p50_ms'] for r in rows):.0f}-{max(r['windows'][i]['p50_ms'] for r in rows):.0f}"
                         for i in range(min(len(r["windows"]) for r in rows)))
    print(f"latency p50 by 4 s window from second 2 (min-max over rounds): broker alone {by_window(floor)}; "
          f"through one worker {by_window(through)}")
    print(f"two workers on {partitions} partitions: {fmt(two)} msg/s ({max(two) / s:.2f}x one worker's best)")

if __name__ == "__main__":
    main()
