#!/usr/bin/env python3
"""Posts one body again and again to `pipelinectl ingest http` from THREADS threads, each with
its own keep-alive connection, REQUESTS posts per thread, and prints one JSON line: requests by
status, records accepted (201 answers times the records per body), seconds, and latency
percentiles of the posts. Every post is answered before it ends, so `records_accepted` is
exactly what the service promised is durable (the test compares it with a reader's count).

    load.py URL TOKEN BODY_FILE RECORDS_PER_BODY THREADS REQUESTS_PER_THREAD
"""
import http.client
import json
import sys
import threading
import time
import urllib.parse

import timing


def main():
    url, token, body_file, per_body, threads, per_thread = sys.argv[1:7]
    per_body, threads, per_thread = int(per_body), int(threads), int(per_thread)
    body = open(body_file, "rb").read()
    target = urllib.parse.urlsplit(url)
    statuses, latencies, errors = {}, [], []
    lock = threading.Lock()

    def worker():
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
        mine, seen = [], {}
        for _ in range(per_thread):
            start = time.perf_counter()
            try:
                conn.request("POST", target.path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                status = response.status
            except Exception as e:  # a connection the server closed: count it, reconnect
                with lock:
                    errors.append(repr(e))
                conn.close()
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                continue
            mine.append(time.perf_counter() - start)
            seen[status] = seen.get(status, 0) + 1
        conn.close()
        with lock:
            latencies.extend(mine)
            for s, n in seen.items():
                statuses[s] = statuses.get(s, 0) + n

    seconds = timing.run_threads(threads, worker)

    accepted = statuses.get(201, 0) * per_body
    print(json.dumps({
        "requests": sum(statuses.values()), "status": {str(k): v for k, v in sorted(statuses.items())},
        "errors": errors[:5], "error_count": len(errors), "records_accepted": accepted, "seconds": round(seconds, 3),
        "records_per_second": round(accepted / seconds), **timing.percentiles(latencies),
    }))


if __name__ == "__main__":
    main()
