"""What load.py and direct.py share: run a worker per thread and time them all, and the
latency percentiles of the posts (or produce-and-waits) they recorded."""
import threading
import time


def run_threads(threads, worker):
    """Runs `worker()` on `threads` threads at once; returns the seconds until all ended."""
    started = time.perf_counter()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - started


def percentiles(latencies):
    """p50 and p99 in milliseconds, rounded to 0.01 (0 when there are none)."""
    latencies = sorted(latencies)

    def pct(q):
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else 0

    return {"p50_ms": round(pct(0.50), 2), "p99_ms": round(pct(0.99), 2)}
