import Testing
@testable import Pipeline

/// The in-flight bound: pause when crossed, resume below half, retries held apart.
@Suite struct BackpressureTests {
    @Test func pausesAtTheBoundAndResumesBelowHalf() {
        let b = Backpressure(maxRecords: 100, maxBytes: 1 << 20)
        var paused = 0, resumed: [Set<TopicPartition>] = []
        #expect(b.add(records: 60, bytes: 600, pause: { paused += 1 }) == .none)
        #expect(b.add(records: 40, bytes: 400, pause: { paused += 1 }) == .pause)
        #expect(b.add(records: 10, bytes: 100, pause: { paused += 1 }) == .none, "paused once")
        #expect(paused == 1)
        b.beginRetry(TopicPartition("t", 1))
        #expect(b.remove(records: 50, bytes: 500, resume: { resumed.append($0) }) == .none, "60 left: above half")
        #expect(b.remove(records: 20, bytes: 200, resume: { resumed.append($0) }) == .resume)
        #expect(resumed == [[TopicPartition("t", 1)]], "the partition in retry stays paused")
        #expect(b.endRetry(TopicPartition("t", 1)), "resumable once the worker is not paused")
        #expect(b.inFlight.records == 40)
    }

    @Test func bytesBoundToo() {
        let b = Backpressure(maxRecords: 1_000_000, maxBytes: 1000)
        #expect(b.add(records: 1, bytes: 999) == .none)
        #expect(b.add(records: 1, bytes: 1) == .pause)
        #expect(b.isPaused)
        #expect(b.remove(records: 2, bytes: 1000) == .resume)
        #expect(!b.isPaused)
    }
}
