#!/usr/bin/env python3
"""The floor for `pipelinectl ingest http`: the same records produced directly with
confluent-kafka (librdkafka, acks=all, idempotent, like the endpoint's producer), THREADS
threads each with its own producer, each "post" being RECORDS_PER_BODY records produced and
then waited for (flush), REQUESTS_PER_THREAD times. Prints the same JSON line as load.py.

    direct.py BOOTSTRAP TOPIC BODY_FILE RECORDS_PER_BODY THREADS REQUESTS_PER_THREAD
"""
import json
import sys
import threading
import time

from confluent_kafka import Producer

import timing


def main():
    bootstrap, topic, body_file, per_body, threads, per_thread = sys.argv[1:7]
    per_body, threads, per_thread = int(per_body), int(threads), int(per_thread)
    lines = [l for l in open(body_file, "rb").read().split(b"\n") if l.strip()][:per_body]
    keys = [json.loads(l)["code"].encode() for l in lines]
    latencies, failed = [], [0]
    lock = threading.Lock()

    def worker():
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
        mine, bad = [], [0]

        def report(err, _msg):
            if err is not None:
                bad[0] += 1

        for _ in range(per_thread):
            start = time.perf_counter()
            for k, v in zip(keys, lines):
                p.produce(topic, v, k, on_delivery=report)
            p.flush()
            mine.append(time.perf_counter() - start)
        with lock:
            latencies.extend(mine)
            failed[0] += bad[0]

    seconds = timing.run_threads(threads, worker)

    accepted = threads * per_thread * per_body - failed[0]
    print(json.dumps({"requests": threads * per_thread, "records_accepted": accepted, "failed": failed[0], "seconds": round(seconds, 3),
                      "records_per_second": round(accepted / seconds), **timing.percentiles(latencies)}))


if __name__ == "__main__":
    main()
