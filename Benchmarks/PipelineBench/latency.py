"""Steady-rate producer plus an output reader: end-to-end latency through a running worker.

    python3 latency.py BOOTSTRAP INPUT OUTPUT RATE SECONDS

Produces RATE tickers per second for SECONDS (timestamped at send), reads the worker's outputs
(which keep the input's timestamp) and prints one JSON line with p50/p99 of (read time - send
time) in ms, skipping the first two seconds (warm-up), over the whole run and by 4-second window.
"""
import json
import sys
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, source, target, rate, seconds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat-reader", "fetch.wait.max.ms": 5, "enable.auto.commit": False})
meta = consumer.list_topics(target, timeout=10)
consumer.assign([TopicPartition(target, p, -1) for p in meta.topics[target].partitions])
samples = []
done = threading.Event()


def read():
    # One record per poll, stamped when it arrives. (`consume(num_messages=1000, timeout=0.1)`
    # returns only once 1,000 records or 0.1 s have gathered, which at 10,000 msg/s added up to
    # 100 ms to every sample.)
    while not done.is_set():
        m = consumer.poll(0.1)
        if m is not None and not m.error():
            now = time.time() * 1000
            samples.append((now, now - m.timestamp()[1]))


reader = threading.Thread(target=read)
reader.start()
time.sleep(1)  # the reader's assignment is in place
producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "enable.idempotence": True})
start = time.time()
sent = 0
while time.time() - start < seconds:
    due = int((time.time() - start) * rate)
    while sent < due:
        m = f"KRW-C{sent % 40}"
        t = int(time.time() * 1000)
        v = (f'{{"type":"ticker","code":"{m}","trade_price":1000.5,"change":"RISE","signed_change_rate":0.01,'
             f'"trade_volume":1.5,"trade_timestamp":{t},"timestamp":{t},"stream_type":"REALTIME"}}')
        producer.produce(source, v.encode(), m.encode(), timestamp=t)
        sent += 1
    producer.poll(0)
    time.sleep(0.001)
producer.flush(30)
time.sleep(2)
done.set()
reader.join()
consumer.close()
warm = start * 1000 + 2000


def percentiles(values):
    v = sorted(values)
    p = lambda q: v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")
    return p(0.5), p(0.99)


lat = [l for (at, l) in samples if at >= warm]
p50, p99 = percentiles(lat)
# The same by 4-second window after the warm-up: on a broker whose latency grows as a topic
# gets longer (tansu's does), the whole-run figures depend on the run's length.
windows = []
for w in range(2, seconds - 3, 4):
    w50, w99 = percentiles([l for (at, l) in samples if start * 1000 + w * 1000 <= at < start * 1000 + (w + 4) * 1000])
    windows.append({"from_s": w, "p50_ms": w50, "p99_ms": w99})
print(json.dumps({"rate": rate, "seconds": seconds, "sent": sent, "samples": len(lat), "p50_ms": p50, "p99_ms": p99, "windows": windows}))
