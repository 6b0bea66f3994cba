"""The timing protocol the decode-bench peers share with `decode-bench run`: for each stream,
read DIR/<stream>.jsonl, decode every message once (warm-up, and the failure count), then
5 repetitions of about SECONDS each, and print the best:
    stream  messages  bytes  msgs/s  MB/s  failures
"""
import sys
import time


def decode_once(decode, messages, errors):
    failures = 0
    for m in messages:
        try:
            decode(m)
        except errors:
            failures += 1
    return failures


def main(decoders, errors):
    """`decoders`: stream name -> a function of one message's bytes; `errors`: what a refused message raises."""
    directory = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    only = sys.argv[3] if len(sys.argv) > 3 else None
    for stream, decode in decoders.items():
        if only is not None and stream != only:
            continue
        with open(f"{directory}/{stream}.jsonl", "rb") as f:
            messages = [line for line in f.read().split(b"\n") if line]
        size = sum(len(m) for m in messages)
        failures = decode_once(decode, messages, errors)
        rates = []
        for _ in range(5):
            passes = 0
            start = time.perf_counter()
            while True:
                decode_once(decode, messages, errors)
                passes += 1
                elapsed = time.perf_counter() - start
                if elapsed >= seconds:
                    break
            rates.append(passes * len(messages) / elapsed)
        rate = max(rates)  # best of 5, as decode-bench does: interference only slows a repetition down
        print(f"{stream}\t{len(messages)}\t{size}\t{int(rate)}\t{rate * size / len(messages) / 1e6:.1f}\t{failures}")
