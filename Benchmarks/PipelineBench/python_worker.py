"""The Python peer of the end-to-end benchmark: the same job as the Swift `prices.decode` worker,
with confluent-kafka (librdkafka) and msgspec, the fastest Python JSON decoder with validation.

Per record, like the Swift stage: decode the Upbit ticker into a typed struct (every field the
Swift `PriceTick` keeps, unknown keys skipped) and validate it the same way (required fields,
positive trade price, non-negative prices and volumes, enum values, market code pattern, epoch-ms
times, low not above high); produce the typed tick as JSON with the same keys in the same order
and a `dedupe-key` header of the same form (none when DEDUPE is `content`: the output topic is
declared `dedupe-key: content`, as the Swift worker then sends none); send an invalid input to
the dead-letter topic with its reason and origin in `dead-letter.*` headers.

    python3 python_worker.py BOOTSTRAP INPUT_TOPIC OUTPUT_TOPIC COUNT [DEAD_LETTER_TOPIC [LINGER [DEDUPE]]]

Reads every partition of INPUT_TOPIC from the beginning (no group and no commits: the Swift
worker's input after its join, minus its commits), stops after COUNT inputs, waits until every
output and dead letter is acknowledged, and prints `active_seconds=` (first record to last
acknowledged output) and counts.
"""
import re
import sys
import time
from typing import Annotated, Literal, Optional

import msgspec
from confluent_kafka import Consumer, Producer, TopicPartition

MARKET = re.compile(r"^[A-Z0-9]+-[A-Z0-9]+$")
YEAR_10000 = 253_402_300_800_000
NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class Ticker(msgspec.Struct, omit_defaults=True):
    """The fields in the order the Swift stage writes them; absent optional fields are omitted."""
    code: str
    trade_price: Annotated[float, msgspec.Meta(gt=0)]
    signed_change_rate: float
    trade_volume: NonNegative
    trade_timestamp: Annotated[int, msgspec.Meta(gt=0, lt=YEAR_10000)]
    type: Optional[Literal["ticker"]] = None
    opening_price: Optional[NonNegative] = None
    high_price: Optional[NonNegative] = None
    low_price: Optional[NonNegative] = None
    prev_closing_price: Optional[NonNegative] = None
    change: Optional[Literal["RISE", "EVEN", "FALL"]] = None
    signed_change_price: Optional[float] = None
    acc_trade_volume_24h: Optional[NonNegative] = None
    acc_trade_price_24h: Optional[NonNegative] = None
    timestamp: Optional[Annotated[int, msgspec.Meta(gt=0, lt=YEAR_10000)]] = None
    ask_bid: Optional[Literal["ASK", "BID"]] = None
    stream_type: Optional[Literal["SNAPSHOT", "REALTIME"]] = None
    is_trading_suspended: Optional[bool] = None


class Tick(msgspec.Struct, omit_defaults=True):
    """The output: the Swift stage's key order (type and code first)."""
    type: str
    code: str
    trade_price: float
    opening_price: Optional[float] = None
    high_price: Optional[float] = None
    low_price: Optional[float] = None
    prev_closing_price: Optional[float] = None
    change: Optional[str] = None
    signed_change_price: Optional[float] = None
    signed_change_rate: float = 0.0
    trade_volume: float = 0.0
    acc_trade_volume_24h: Optional[float] = None
    acc_trade_price_24h: Optional[float] = None
    trade_timestamp: int = 0
    timestamp: Optional[int] = None
    ask_bid: Optional[str] = None
    stream_type: Optional[str] = None
    is_trading_suspended: Optional[bool] = None


decoder = msgspec.json.Decoder(Ticker)
encoder = msgspec.json.Encoder()


def transform(value):
    """(the typed tick as JSON, its market and trade time) or (None, the reason)."""
    try:
        t = decoder.decode(value)
    except msgspec.ValidationError as e:
        return None, f"invalid: {e}"
    except msgspec.DecodeError as e:
        return None, f"malformed: {e}"
    if not MARKET.match(t.code) or len(t.code) > 32:
        return None, "invalid: code is not a market code"
    if t.low_price is not None and t.high_price is not None and t.low_price > t.high_price:
        return None, "invalid: low_price above high_price"
    out = encoder.encode(Tick(
        "ticker", t.code, t.trade_price, t.opening_price, t.high_price, t.low_price, t.prev_closing_price,
        t.change, t.signed_change_price, t.signed_change_rate, t.trade_volume, t.acc_trade_volume_24h,
        t.acc_trade_price_24h, t.trade_timestamp, t.timestamp, t.ask_bid, t.stream_type, t.is_trading_suspended))
    return out, (t.code, t.trade_timestamp)


def main():
    bootstrap, source, target, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    dead_letters = sys.argv[5] if len(sys.argv) > 5 else "bench.dead-letters"
    linger = int(sys.argv[6]) if len(sys.argv) > 6 else 10  # ms, as the Swift worker's default
    keyed = (sys.argv[7] if len(sys.argv) > 7 else "header") != "content"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "py-bench", "enable.auto.commit": False})
    meta = consumer.list_topics(source, timeout=10)
    consumer.assign([TopicPartition(source, p, -2) for p in meta.topics[source].partitions])
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": linger})
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
            out, detail = transform(m.value())
            if out is not None:
                topic, value = target, out
                headers = [("dedupe-key", f"tick:{detail[0]}:{detail[1]}:{m.topic()}/{m.partition()}/{m.offset()}#0")] if keyed else None
                produced += 1
            else:
                topic, value = dead_letters, m.value()
                headers = [("dead-letter.stage", "prices.decode"), ("dead-letter.reason", detail),
                           ("dead-letter.origin.topic", m.topic()), ("dead-letter.origin.partition", str(m.partition())),
                           ("dead-letter.origin.offset", str(m.offset()))]
            while True:
                try:
                    producer.produce(topic, value, m.key(), headers=headers, on_delivery=delivered, timestamp=m.timestamp()[1])
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    producer.flush(60)
    consumer.close()
    print(f"active_seconds={last[0] - first:.3f} inputs={seen} outputs={produced} acked={acked[0]}")


if __name__ == "__main__":
    main()
