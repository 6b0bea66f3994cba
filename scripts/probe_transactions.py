"""What the broker does with transactions; prints one line per fact. See scripts/probe-transactions."""
import os, signal, subprocess, sys, time, uuid
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CTL = os.path.join(os.path.dirname(__file__), "..", ".build", "debug", "pipelinectl")


def read(bootstrap, topic, partitions, isolation):
    r = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4()}", "isolation.level": isolation,
                  "enable.auto.commit": False, "enable.partition.eof": True})
    r.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, at_end, deadline = [], set(), time.time() + 10
    while len(at_end) < partitions and time.time() < deadline:
        m = r.poll(0.3)
        if m is None:
            continue
        if m.error():
            at_end.add(m.partition())
        else:
            values.append(m.value())
            at_end.discard(m.partition())
    r.close()
    return values


def main():
    broker = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        broker = subprocess.Popen([CTL, "broker"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        bootstrap = broker.stdout.readline().strip().removeprefix("bootstrap server: ")
    run = uuid.uuid4().hex[:8]
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = {name: f"probe-{name}-{run}" for name in ["small", "large", "hanging"]}
        for f in admin.create_topics([NewTopic(t, 4) for t in topics.values()]).values():
            f.result()
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"probe-{run}", "linger.ms": 5})
        p.init_transactions(10)
        for name, count in [("small", 10), ("large", 1000)]:
            for outcome in ["commit", "abort", "commit"]:
                p.begin_transaction()
                for j in range(count):
                    p.produce(topics[name], key=str(j), value=f"{outcome}-{j}".encode())
                p.flush(10)
                (p.abort_transaction if outcome == "abort" else p.commit_transaction)(10)
            committed = read(bootstrap, topics[name], 4, "read_committed")
            uncommitted = read(bootstrap, topics[name], 4, "read_uncommitted")
            aborted_seen = sum(v.startswith(b"abort") for v in committed)
            print(f"aborted transaction of {count} records: read_committed reads {len(committed)} of {len(uncommitted)} "
                  f"({aborted_seen} aborted) -> {'hidden' if aborted_seen == 0 else 'NOT hidden'}")
        # A producer killed with its transaction open, then a new producer with the same id.
        child = subprocess.Popen([sys.executable, "-c", f"""
from confluent_kafka import Producer
import time
p = Producer({{"bootstrap.servers": "{bootstrap}", "transactional.id": "probe-killed-{run}", "transaction.timeout.ms": 4000}})
p.init_transactions(10); p.begin_transaction()
for i in range(3): p.produce("{topics['hanging']}", value=b"left-open", partition=0)
p.flush(5); print("ready", flush=True); time.sleep(100)
"""], stdout=subprocess.PIPE, text=True)
        child.stdout.readline()
        child.send_signal(signal.SIGKILL)
        child.wait()
        plain = Producer({"bootstrap.servers": bootstrap})
        plain.produce(topics["hanging"], value=b"after", partition=0)
        plain.flush(10)
        time.sleep(6)
        seen = read(bootstrap, topics["hanging"], 1, "read_committed")
        print(f"6 s after a killed producer's transaction.timeout.ms (4 s): read_committed reads {len(seen)} of 4 records "
              f"-> {'expired' if seen == [b'after'] else 'still open (blocks readers)'}")
        again = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"probe-killed-{run}"})
        again.init_transactions(10)
        seen = read(bootstrap, topics["hanging"], 1, "read_committed")
        left = sum(v == b"left-open" for v in seen)
        print(f"after a new producer with the same id initialised: read_committed reads {len(seen)} records, "
              f"{left} of the killed producer's -> {'aborted' if left == 0 and b'after' in seen else 'NOT aborted'}")
        try:
            p2 = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"probe-{run}"})
            p2.init_transactions(10)
            p.begin_transaction()
            p.produce(topics["small"], value=b"zombie")
            p.commit_transaction(10)
            print("the old producer committed after a newer one with its id initialised -> NOT fenced")
        except KafkaException as e:
            print(f"the old producer is fenced: {e.args[0].name()}")
    finally:
        if broker:
            broker.terminate()
            broker.wait()


if __name__ == "__main__":
    main()
