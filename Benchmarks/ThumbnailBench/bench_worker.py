"""Thumbnail worker end to end through Kafka against the stage alone, in one run
(run it through scripts/bench-thumbnail-worker).

Both make the same two JPEG thumbnails (list 200x200 cover, grid 800x800 fit, Q80) of the same
3000x2000 JPEGs, read as file:// sources, with 2 render threads (1 libvips thread per image) and
stored without fsync:
- stage:  thumbnail-bench --in-flight 2 --vips-threads 1 (ThumbnailService directly, 4 in flight);
- worker: `pipelinectl worker` running `thumbnails.render` (concurrency 4, render-threads 2) on the
  local broker: one request per image in, files stored, one `thumbnails.ready` event per image out
  and acknowledged, offsets committed. Counted from the first request processed to the last
  event acknowledged (the worker's active-seconds), so broker start-up and group join do not count.
Peak memory is max RSS from /usr/bin/time -v. Rounds alternate the order.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import shutil

# The helpers of the end-to-end benchmark: running, timing with peak RSS, logging.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "PipelineBench"))
from bench_pipeline import CTL, log, run, timed_rss as timed  # noqa: E402

BENCH = os.environ["THUMBNAIL_BENCH"]


def topology(path, src, store, requests, group):
    with open(path, "w") as f:
        f.write(f"""topics:
  - {{name: {requests}, partitions: 4}}
  - {{name: bench.ready, partitions: 4}}
  - {{name: bench.dead-letters, partitions: 1}}
stages:
  - name: thumbs
    chain: [thumbnails.render]
    inputs: [{requests}]
    outputs: {{thumbnails.ready: bench.ready}}
    dead-letter-topic: bench.dead-letters
    group: {group}
    concurrency: 4
    options:
      store-directory: {store}
      store-sync: false
      file-roots: [{src}]
      render-threads: 2
""")


def main():
    src = sys.argv[1]
    rounds = int(os.environ.get("ROUNDS", "3"))
    files = sorted(f for f in os.listdir(src) if f.endswith(".jpg"))
    count = len(files)
    broker = subprocess.Popen([CTL, "broker"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    bootstrap = broker.stdout.readline().strip().removeprefix("bootstrap server: ")
    work = tempfile.mkdtemp()
    results = {"stage": [], "worker": []}
    rss = {"stage": [], "worker": []}
    try:
        run([CTL, "topics", "create", "--bootstrap-server", bootstrap, "bench.ready", "--partitions", "4"])
        run([CTL, "topics", "create", "--bootstrap-server", bootstrap, "bench.dead-letters", "--partitions", "1"])
        for r in range(1, rounds + 1):
            order = ["stage", "worker"] if r % 2 else ["worker", "stage"]
            for side in order:
                store = os.path.join(work, f"{side}-{r}")
                os.makedirs(store)
                if side == "stage":
                    out, _, mib, _ = timed([BENCH, "--input", src, "--output", store, "--in-flight", "2", "--vips-threads", "1"])
                    m = re.search(r"thumbnails=(\d+) failures=(\d+).*seconds=([0-9.]+)", out)
                    made, failures, secs = int(m.group(1)), int(m.group(2)), float(m.group(3))
                else:
                    requests = f"bench.requests.{r}"
                    run([CTL, "topics", "create", "--bootstrap-server", bootstrap, requests, "--partitions", "4"])
                    lines = "".join(
                        f'img-{i}\t{{"owner":"product","owner_id":"{i}","image_index":0,"source_url":"file://{src}/{f}"}}\n'
                        for i, f in enumerate(files))
                    subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", requests, "-K", "\t"], input=lines, text=True, check=True)
                    topo = os.path.join(work, f"t{r}.yaml")
                    topology(topo, src, store, requests, f"bench-thumbs-{r}")
                    _, err, mib, _ = timed([CTL, "worker", "thumbs", "--topology", topo, "--bootstrap-server", bootstrap,
                                         "--session-timeout", "2s", "--metrics-address", "127.0.0.1:0", "--log-format", "json",
                                         "--stop-after", str(count)])
                    stopped = [json.loads(l) for l in err.splitlines() if '"worker stopped"' in l][-1]
                    secs = float(stopped["active-seconds"])
                    failures = int(stopped["dead-lettered"])
                    made = sum(1 for _, _, fs in os.walk(store) for x in fs if x.endswith(".jpg"))
                if failures or made != 2 * count:
                    raise RuntimeError(f"{side} round {r}: {made} thumbnails, {failures} failures (expected {2 * count}, 0)")
                results[side].append(2 * count / secs)
                rss[side].append(mib)
                log(f"round {r} {side}: {2 * count / secs:.1f} thumbnails/s, peak RSS {mib:.0f} MiB")
                shutil.rmtree(store)
    finally:
        broker.terminate()
        broker.wait()
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{count} JPEGs 3000x2000 -> {2 * count} thumbnails, {rounds} rounds; thumbnails/s best (min-max), peak RSS max")
    for side in ("stage", "worker"):
        v = results[side]
        print(f"{side:7} {max(v):7.1f} ({min(v):.1f}-{max(v):.1f})   peak RSS {max(rss[side]):.0f} MiB")
    print(f"worker / stage (best): {max(results['worker']) / max(results['stage']):.2f}x   "
          f"(per round: {', '.join(f'{w / s:.2f}' for w, s in zip(results['worker'], results['stage']))})")


if __name__ == "__main__":
    main()
