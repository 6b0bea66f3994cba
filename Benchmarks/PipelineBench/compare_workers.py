"""Two builds of the worker against each other (run it through `COMPARE=... scripts/bench-pipeline`).

The sides of bench_pipeline.py each take several seconds one after another, and on these shared
machines a side's figure moves with its place in the round (the same binary on two sides of one
run has differed by 0.86x-1.39x). Here the two builds run in adjacent pairs instead, the one
that goes first alternating, on one broker and one input, and each pair gives a ratio: this
build's (A: PIPELINECTL, main's release build) over the other's (B: COMPARE). Printed per
pair, with the median: CPU per record (user + system of the worker process), throughput (first
record to last acknowledged output) and the broker's CPU per record in the same time.

Env: COMPARE (the other pipelinectl, required), MESSAGES (default 1,000,000), PAIRS (6),
PARTITIONS (4), CHAIN, LINGER and DEDUPE as in bench_pipeline.py; COMPARE_DEDUPE (header or content,
default DEDUPE) the target topic's declaration on B's side: header for a build before
`dedupe-key: content`, or the same build with COMPARE_DEDUPE=header to measure the header alone.
"""
import os
import statistics
import subprocess
import tempfile

import bench_pipeline as bp


def main():
    other = os.environ["COMPARE"]
    messages = int(os.environ.get("MESSAGES", "1000000"))
    pairs = int(os.environ.get("PAIRS", "6"))
    partitions = int(os.environ.get("PARTITIONS", "4"))
    sides = {"A": bp.CTL, "B": other}
    broker, bootstrap = bp.start_broker()
    tansu = bp.child_pid(broker.pid)
    work = tempfile.mkdtemp()
    figures = {"A": [], "B": []}
    try:
        bp.run([bp.CTL, "topics", "create", "--bootstrap-server", bootstrap, "bench.raw", "--partitions", str(partitions)])
        bp.run([bp.CTL, "topics", "create", "--bootstrap-server", bootstrap, "bench.dead-letters", "--partitions", "1"])
        bp.log(f"producing {messages} tickers to bench.raw ({partitions} partitions)")
        kp = subprocess.Popen(["kcat", "-P", "-b", bootstrap, "-t", "bench.raw", "-K", "\t", "-X", "linger.ms=20"],
                              stdin=subprocess.PIPE, text=True)
        for line in bp.tick_lines(messages):
            kp.stdin.write(line)
        kp.stdin.close(); kp.wait()
        for p in range(pairs):
            for side in ("A", "B") if p % 2 == 0 else ("B", "A"):
                target = f"bench.compare.{p}.{side}"
                group = f"bench-compare-{p}-{side}"
                bp.run([bp.CTL, "topics", "create", "--bootstrap-server", bootstrap, target, "--partitions", str(partitions)])
                topo = os.path.join(work, f"{group}.yaml")
                bp.topology(topo, group, "bench.raw", target, partitions, dedupe=os.environ.get("COMPARE_DEDUPE") if side == "B" else None)
                bp.changelog_topic(bootstrap, group, partitions)
                broker_before = bp.process_cpu(tansu)
                _, err, _, used = bp.timed_rss(bp.swift_worker(bootstrap, topo, stop_after=messages, ctl=sides[side]))
                seconds = bp.stopped_figure(err)
                figures[side].append((used / messages * 1e6, messages / seconds, (bp.process_cpu(tansu) - broker_before) / messages * 1e6))
                cpu, rate, broker_cpu = figures[side][-1]
                bp.log(f"pair {p + 1} {side}: CPU per record {cpu:.2f} us, {rate:,.0f} msg/s, broker {broker_cpu:.2f} us")
                bp.run([bp.CTL, "topics", "delete", "--bootstrap-server", bootstrap, target])
    finally:
        bp.stop(broker)

    def ratios(i):
        return [a[i] / b[i] for a, b in zip(figures["A"], figures["B"])]

    print(f"A: {sides['A']}\nB: {sides['B']}")
    print(f"{messages:,} Upbit tickers, {partitions} partitions, chain {bp.CHAIN}, {pairs} pairs (first side alternating); "
          f"dedupe-key: A {bp.DEDUPE}, B {os.environ.get('COMPARE_DEDUPE', bp.DEDUPE)}")
    for name, i in (("CPU per record", 0), ("throughput", 1), ("broker CPU per record", 2)):
        r = ratios(i)
        print(f"{name} A / B per pair: {', '.join(f'{x:.2f}' for x in r)} (median {statistics.median(r):.3f}, "
              f"{sum(x < 1 for x in r)} of {len(r)} below 1)")
    for side in ("A", "B"):
        cpu = [f[0] for f in figures[side]]
        rate = [f[1] for f in figures[side]]
        print(f"{side}: CPU per record {min(cpu):.2f}-{max(cpu):.2f} us, {min(rate):,.0f}-{max(rate):,.0f} msg/s")


if __name__ == "__main__":
    main()
