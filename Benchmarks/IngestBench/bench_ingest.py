"""`pipelinectl ingest http` against a direct produce, in one run on one local broker (run it
through scripts/bench-ingest). Per round, alternating which goes first: load.py posts bodies of
RECORDS tickers (JSON lines) from THREADS keep-alive connections, REQUESTS posts each, and
direct.py produces the same records from THREADS confluent-kafka producers, RECORDS at a time,
waiting for the acknowledgements each time (what one post waits for). Prints records per
second and the p50/p99 of a post (or of one produce-and-wait) per round, and the endpoint's
CPU per record.

PER_POST=1 also posts bodies of one ticker in each round, right after the round's ingest side
(the same connections and posts), and splits the endpoint's CPU into a part per post (a post of
one record) and a part per further record: (CPU per post of RECORDS - CPU per post of 1) /
(RECORDS - 1).

FLOOR=1 also posts the bodies of one ticker to `/v1` in each round, which the endpoint answers 404
from the request's head (the body is skipped; nothing is parsed or produced): the CPU per post of
HTTP alone, the floor under every post's cost.

THREAD_SPLIT=1 also prints, per round, the endpoint's CPU per post of RECORDS by thread kind
(its threads' names from /proc/PID/task, digits dropped: NIO's event loops, Swift's
cooperative pool, the producer's delivery-report thread, librdkafka's threads); "exited" is
what threads that ended meanwhile used (the process's total minus its live threads').
"""
import collections
import re
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "PipelineBench"))
from bench_pipeline import CTL, log, process_cpu, run, start_broker, stop, tick_lines  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"


def thread_cpu(pid):
    """CPU seconds (user + system) of each live thread of a process, summed by thread name with
    its digits dropped, and the process's total."""
    by_kind = collections.Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = re.sub(r"\d+", "#", f.read().strip())
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        by_kind[name] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return by_kind, process_cpu(pid)


def valid_tickers(n):
    """The first n of bench-pipeline's tickers that are valid (it makes every 50th invalid, and
    the endpoint answers a body with an invalid record 400), as JSON lines."""
    lines = (line.split("\t", 1)[1] for line in tick_lines(2 * n + 2))
    return [line for line in lines if '"trade_price":-' not in line][:n]


def main():
    rounds = int(os.environ.get("ROUNDS", "3"))
    per_body = int(os.environ.get("RECORDS", "20"))
    threads = int(os.environ.get("THREADS", "8"))
    requests = int(os.environ.get("REQUESTS", "500"))
    broker, bootstrap = start_broker()
    work = tempfile.mkdtemp()
    body = os.path.join(work, "body.jsonl")
    with open(body, "w") as f:
        f.write("".join(valid_tickers(per_body)))
    per_post = os.environ.get("PER_POST") == "1" and per_body > 1
    body1 = os.path.join(work, "body1.jsonl")
    with open(body1, "w") as f:
        f.write("".join(line.split("\t", 1)[1] for line in tick_lines(1)))
    ingest = None
    try:
        for topic in ("prices.raw", "bench.direct"):
            run([CTL, "topics", "create", "--bootstrap-server", bootstrap, topic, "--partitions", "4"])
        log_path = os.path.join(work, "ingest.log")
        ingest = subprocess.Popen(
            [CTL, "ingest", "http", "--listen", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--log-format", "json",
             "--bootstrap-server", bootstrap, "--rate-limit", "1000000",
             *(["--linger", os.environ["LINGER"]] if os.environ.get("LINGER") else []),
             *os.environ.get("INGEST_ARGS", "").split()],
            env={**os.environ, "PIPELINE_INGEST_TOKENS": f"bench {TOKEN}"}, stderr=open(log_path, "w"), stdout=subprocess.DEVNULL)
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            for line in open(log_path):
                if "ingest endpoint listening" in line:
                    port = int(json.loads(line)["port"])
            time.sleep(0.1)
        if port is None:
            raise RuntimeError("the ingest endpoint did not start: " + open(log_path).read()[-2000:])
        rows = {"ingest http": [], "direct produce": []}
        cpu = []
        split = []  # per round: (CPU per post of one record, CPU per further record), us

        thread_split = os.environ.get("THREAD_SPLIT") == "1"
        floor = os.environ.get("FLOOR") == "1"
        head_only = []  # per round: CPU per post answered from the head, us

        def post(file, records, path="/v1/prices", status="201"):
            """load.py against the endpoint: its result and the endpoint's CPU per post, us."""
            threads_before = thread_cpu(ingest.pid) if thread_split else None
            before = process_cpu(ingest.pid)
            out = run([sys.executable, os.path.join(HERE, "load.py"), f"http://127.0.0.1:{port}{path}", TOKEN, file,
                       str(records), str(threads), str(requests)]).stdout
            result = json.loads(out)
            if result["status"] != {status: threads * requests}:
                raise RuntimeError(f"not every post was answered {status}: {out}")
            if threads_before:
                (kinds_before, total_before), (kinds_after, total_after) = threads_before, thread_cpu(ingest.pid)
                us = 1e6 / (threads * requests)
                used = {k: (kinds_after[k] - kinds_before.get(k, 0)) * us for k in kinds_after}
                used["exited"] = (total_after - total_before) * us - sum(used.values())
                log(f"  CPU per post of {records} by thread, us: "
                    + ", ".join(f"{k} {v:.0f}" for k, v in sorted(used.items(), key=lambda kv: -kv[1]) if abs(v) >= 0.5))
            return result, (process_cpu(ingest.pid) - before) / (threads * requests) * 1e6
        for r in range(1, rounds + 1):
            order = ["ingest http", "direct produce"] if r % 2 else ["direct produce", "ingest http"]
            for side in order:
                if side == "ingest http":
                    result, per_post_cpu = post(body, per_body)
                    cpu.append(per_post_cpu / per_body)
                    if per_post:
                        one = post(body1, 1)[1]
                        split.append((one, (per_post_cpu - one) / (per_body - 1)))
                        log(f"round {r} ingest http, posts of 1: {one:.1f} us per post")
                    if floor:
                        # The same posts to a path the endpoint answers from the head (404 and
                        # its JSON body; nothing read, parsed or produced): what HTTP alone costs.
                        head_only.append(post(body1, 1, path="/v1", status="404")[1])
                        log(f"round {r} ingest http, answered from the head: {head_only[-1]:.1f} us per post")
                else:
                    out = run([sys.executable, os.path.join(HERE, "direct.py"), bootstrap, "bench.direct", body,
                               str(per_body), str(threads), str(requests)]).stdout
                    result = json.loads(out)
                rows[side].append(result)
                log(f"round {r} {side}: {result['records_per_second']:,} records/s, p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms")
    finally:
        if ingest is not None:
            ingest.terminate()
            ingest.wait()
        stop(broker)

    print(f"\n{threads} connections x {requests} posts of {per_body} tickers per round, {rounds} rounds, "
          f"the endpoint's --linger {os.environ.get('LINGER') or 'default'}"
          f"{' and ' + os.environ['INGEST_ARGS'] if os.environ.get('INGEST_ARGS') else ''} (min-max over rounds)")
    for side, results in rows.items():
        rate = [x["records_per_second"] for x in results]
        p50 = [x["p50_ms"] for x in results]
        p99 = [x["p99_ms"] for x in results]
        print(f"{side:15} records/s {min(rate):,}-{max(rate):,}   p50 {min(p50)}-{max(p50)} ms   p99 {min(p99)}-{max(p99)} ms")
    ratio = [a["records_per_second"] / b["records_per_second"] for a, b in zip(rows["ingest http"], rows["direct produce"])]
    print(f"ingest http / direct produce, per round: {', '.join(f'{x:.2f}x' for x in ratio)}")
    print(f"ingest http CPU per record (the service process, user + system): {min(cpu):.1f}-{max(cpu):.1f} us")
    if head_only:
        print(f"ingest http CPU per post answered from the head (404, nothing produced): {', '.join(f'{a:.0f}' for a in head_only)} us (per round)")
    if split:
        print(f"ingest http CPU per post of 1 record: {', '.join(f'{a:.0f}' for a, _ in split)} us; "
              f"per further record: {', '.join(f'{b:.1f}' for _, b in split)} us (per round)")


if __name__ == "__main__":
    main()
