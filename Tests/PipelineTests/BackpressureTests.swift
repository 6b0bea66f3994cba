import Testing
@testable import Pipeline
@testable import Kafka

/// The in-flight bound: the gate closes when it is crossed and opens below half; partitions are
/// paused in librdkafka only when it stays closed; retries held apart.
@Suite(.timeLimit(.minutes(1))) struct BackpressureTests {
    @Test func closesAtTheBoundAndOpensBelowHalf() async {
        let b = Backpressure(maxRecords: 100, maxBytes: 1 << 20)
        #expect(!b.add(records: 60, bytes: 600))
        #expect(await b.waitWhileClosed(atMost: .seconds(60)), "open: no wait")
        #expect(b.add(records: 40, bytes: 400), "crossed")
        #expect(!b.add(records: 10, bytes: 100), "closed once")
        #expect(b.gate == .closed)
        let waiter = Task { await b.waitWhileClosed(atMost: .seconds(60)) }
        b.remove(records: 50, bytes: 500)
        #expect(b.gate == .closed, "60 left: above half")
        b.remove(records: 20, bytes: 200)
        #expect(b.gate == .open)
        #expect(await waiter.value, "the waiter goes on once the gate opens")
        #expect(b.inFlight.records == 40)
    }

    @Test func pausesOnlyWhenTheGateStaysClosed() async {
        let b = Backpressure(maxRecords: 100, maxBytes: 1 << 20)
        #expect(b.add(records: 100, bytes: 100))
        #expect(await !b.waitWhileClosed(atMost: .milliseconds(20)), "nothing settled in time")
        var paused = 0, resumed: [Set<TopicPartition>] = []
        #expect(b.pauseConsumer { paused += 1 })
        #expect(!b.pauseConsumer { paused += 1 }, "paused once")
        #expect(paused == 1 && b.gate == .paused)
        #expect(await b.waitWhileClosed(atMost: .seconds(60)), "paused: polling goes on without waiting")
        b.beginRetry(TopicPartition("t", 1))
        b.remove(records: 60, bytes: 60, resume: { resumed.append($0) })
        #expect(resumed == [[TopicPartition("t", 1)]], "resumed, except the partition in retry")
        #expect(b.endRetry(TopicPartition("t", 1)), "resumable once the worker is not paused")
        // A gate that opened before the pause: nothing to pause.
        #expect(b.add(records: 60, bytes: 60))
        b.remove(records: 60, bytes: 60, resume: { resumed.append($0) })
        #expect(!b.pauseConsumer { paused += 1 })
        #expect(paused == 1 && resumed.count == 1, "never paused, so never resumed")
    }

    @Test func aCancelledWaitEnds() async {
        let b = Backpressure(maxRecords: 1, maxBytes: 1 << 20)
        #expect(b.add(records: 1, bytes: 1))
        let waiter = Task { await b.waitWhileClosed(atMost: .seconds(600)) }
        waiter.cancel()
        #expect(await !waiter.value)
        #expect(b.gate == .closed)
    }

    @Test func bytesBoundToo() {
        let b = Backpressure(maxRecords: 1_000_000, maxBytes: 1000)
        #expect(!b.add(records: 1, bytes: 999))
        #expect(b.add(records: 1, bytes: 1))
        #expect(b.gate == .closed)
        b.remove(records: 2, bytes: 1000)
        #expect(b.gate == .open)
    }
}
