"""The Python peer of the end-to-end benchmark: the same job as the Swift `prices.decode` worker
(decode an Upbit ticker, validate it, drop what is invalid, produce the typed tick as JSON),
with confluent-kafka (librdkafka) and msgspec, the fastest Python JSON decoder with validation.

    python3 python_worker.py BOOTSTRAP INPUT_TOPIC OUTPUT_TOPIC COUNT

Reads every partition of INPUT_TOPIC from the beginning (no group, like the Swift worker's
input after its join), stops after COUNT inputs, waits until every output is acknowledged, and
prints `active_seconds=` (first record to last acknowledged output) and counts.
"""
import re
import sys
import time
from typing import Optional

import msgspec
from confluent_kafka import Consumer, Producer, TopicPartition

MARKET = re.compile(r"^[A-Z]{2,5}-[A-Z0-9]{1,15}$")


class Ticker(msgspec.Struct):
    code: str
    trade_price: float
    trade_volume: float
    signed_change_rate: float
    trade_timestamp: int
    type: Optional[str] = None
    change: Optional[str] = None
    timestamp: Optional[int] = None
    stream_type: Optional[str] = None


class Tick(msgspec.Struct):
    type: str
    code: str
    trade_price: float
    signed_change_rate: float
    trade_volume: float
    trade_timestamp: int


decoder = msgspec.json.Decoder(Ticker)
encoder = msgspec.json.Encoder()


def transform(value):
    """The typed tick, or None for invalid input (the Swift stage dead-letters it)."""
    try:
        t = decoder.decode(value)
    except msgspec.DecodeError:
        return None
    if t.trade_price < 0 or t.trade_volume < 0 or not MARKET.match(t.code):
        return None
    if t.change is not None and t.change not in ("RISE", "EVEN", "FALL"):
        return None
    return encoder.encode(Tick("ticker", t.code, t.trade_price, t.signed_change_rate, t.trade_volume, t.trade_timestamp))


def main():
    bootstrap, source, target, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "py-bench", "enable.auto.commit": False})
    meta = consumer.list_topics(source, timeout=10)
    consumer.assign([TopicPartition(source, p, -2) for p in meta.topics[source].partitions])
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    acked = [0]
    last = [0.0]

    def delivered(err, msg):
        if err is None:
            acked[0] += 1
            last[0] = time.monotonic()

    seen = produced = 0
    first = None
    while seen < count:
        batch = consumer.consume(num_messages=1000, timeout=1.0)
        if not batch:
            continue
        if first is None:
            first = time.monotonic()
        for m in batch:
            if m.error():
                continue
            seen += 1
            out = transform(m.value())
            if out is not None:
                while True:
                    try:
                        producer.produce(target, out, m.key(), on_delivery=delivered, timestamp=m.timestamp()[1])
                        break
                    except BufferError:
                        producer.poll(0.05)
                produced += 1
        producer.poll(0)
    producer.flush(60)
    consumer.close()
    print(f"active_seconds={last[0] - first:.3f} inputs={seen} outputs={produced} acked={acked[0]}")


if __name__ == "__main__":
    main()
