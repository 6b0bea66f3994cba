import Testing
@testable import Pipeline
@testable import Kafka
@testable import Operations

/// Burrow's rules over scripted commit histories: (offset, log end) per commit, one second apart.
@Suite struct LagEvaluationTests {
    /// Commits at t = 1000, 2000, …; `now` one second after the last unless given.
    static func window(_ commits: [(Int64, Int64)], start: Int64 = 1000) -> [CommitSample] {
        commits.enumerated().map { i, c in CommitSample(offset: c.0, logEnd: c.1, time: start + Int64(i) * 1000) }
    }

    static func status(_ commits: [(Int64, Int64)], now: Int64? = nil, currentLag: Int64? = nil, hasMembers: Bool = true) -> PartitionLagStatus {
        let w = window(commits)
        return LagEvaluator.status(window: w, currentLag: currentLag ?? w.last.map(\.lag) ?? 0,
                                   now: now ?? (w.last!.time + 1000), hasMembers: hasMembers)
    }

    @Test func caughtUpSomewhereInTheWindowIsOK() {
        #expect(Self.status([(10, 20), (20, 20), (25, 40), (30, 50)]) == .ok)
        #expect(Self.status([(10, 10), (10, 10), (10, 10)]) == .ok, "idle and caught up: same offset but no lag")
    }

    @Test func laggingButCatchingUpIsOK() {
        #expect(Self.status([(0, 100), (40, 120), (90, 130), (120, 140)]) == .ok)
    }

    @Test func movingButLagNeverDecreasingIsWARN() {
        #expect(Self.status([(0, 100), (10, 120), (20, 140), (30, 160)]) == .warn)
        #expect(Self.status([(0, 100), (10, 110), (20, 120)]) == .warn, "fixed lag counts as not decreasing")
    }

    @Test func sameOffsetWithLagOverTheWindowIsSTALL() {
        #expect(Self.status([(50, 60), (50, 70), (50, 80), (50, 80)]) == .stall)
    }

    @Test func noCommitForLongerThanTheWindowSpansIsSTOP() {
        // Window spans 3 s; the last commit was 10 s ago.
        #expect(Self.status([(0, 100), (10, 100), (20, 100), (30, 100)], now: 4000 + 10_000) == .stop)
        // The same window evaluated 2 s after the last commit: still within the span.
        #expect(Self.status([(0, 100), (10, 100), (20, 100), (30, 100)], now: 4000 + 2000) == .ok)
        // Caught up: not stopped, however long ago.
        #expect(Self.status([(0, 100), (100, 100)], now: 1_000_000) == .ok)
    }

    @Test func noMemberWithLagIsSTOP() {
        #expect(Self.status([(5, 10)], hasMembers: false) == .stop)
        #expect(Self.status([(10, 10)], hasMembers: false) == .ok)
    }

    @Test func offsetGoingBackwardsIsREWIND() {
        #expect(Self.status([(50, 100), (60, 110), (20, 120), (30, 130)]) == .rewind)
    }

    @Test func unknownLogEndOrOffsetPastItIsERR() {
        #expect(LagEvaluator.status(window: Self.window([(5, 10)]), currentLag: nil, now: 5000) == .err)
        #expect(LagEvaluator.status(window: [CommitSample(offset: 12, logEnd: 10, time: 0)], currentLag: 0, now: 1) == .err,
                "a committed offset past the log end is an error even though the lag reads 0")
        #expect(LagEvaluator.status(window: [CommitSample(offset: 12, logEnd: 10, time: 0), CommitSample(offset: 14, logEnd: 10, time: 1)],
                                    currentLag: 2, now: 2) == .err)
    }

    @Test func oneCommitWithLagIsOKUntilThereIsATrend() {
        #expect(Self.status([(5, 10)]) == .ok)
        #expect(LagEvaluator.status(window: [], currentLag: 5, now: 0) == .ok)
    }

    /// One verdict for the CLI and the console: a group shows its worst partition's status
    /// (STOP stays STOP, not ERR); STALL, STOP, REWIND and ERR are errors (the CLI exits 3).
    @Test func groupStatusIsTheWorstPartitionsStatus() {
        #expect(PartitionLagStatus(worstOf: [.ok, .ok]) == .ok)
        #expect(PartitionLagStatus(worstOf: [.ok, .warn]) == .warn)
        for bad in [PartitionLagStatus.stall, .stop, .rewind, .err] {
            #expect(PartitionLagStatus(worstOf: [.warn, bad, .ok]) == bad)
            #expect(bad.isError)
        }
        #expect(!PartitionLagStatus.warn.isError && !PartitionLagStatus.ok.isError)
        #expect(PartitionLagStatus(worstOf: []) == .ok)
    }

    @Test func windowSlides() {
        var w = CommitWindow(capacity: 3)
        for i in 0..<5 { w.append(CommitSample(offset: Int64(i), logEnd: 10, time: Int64(i))) }
        #expect(w.samples.map(\.offset) == [2, 3, 4])
        // A STALL that ends once the consumer moves within the window.
        var history = CommitWindow(capacity: 3)
        for c in [(5, 10), (5, 10), (5, 10)] { history.append(CommitSample(offset: Int64(c.0), logEnd: Int64(c.1), time: 0)) }
        #expect(LagEvaluator.status(window: history.samples, currentLag: 5, now: 0) == .stall)
        history.append(CommitSample(offset: 10, logEnd: 10, time: 1))
        #expect(LagEvaluator.status(window: history.samples, currentLag: 0, now: 1) == .ok)
    }

    @Test func trendAndTimeToDrain() throws {
        // Lag 100 → 60 over 4 s: falling 10/s, 6 s to drain; consuming 20/s.
        let t = try #require(LagTrend(window: [CommitSample(offset: 0, logEnd: 100, time: 0), CommitSample(offset: 80, logEnd: 140, time: 4000)]))
        #expect(t.lagRate == -10)
        #expect(t.consumeRate == 20)
        #expect(t.secondsToDrain == 6)
        #expect(t.direction == "falling")
        let rising = try #require(LagTrend(window: [CommitSample(offset: 0, logEnd: 10, time: 0), CommitSample(offset: 5, logEnd: 30, time: 1000)]))
        #expect(rising.direction == "rising")
        #expect(rising.secondsToDrain == nil)
        #expect(LagTrend(window: [CommitSample(offset: 0, logEnd: 10, time: 0)]) == nil)
    }

    @Test func partitionLagInRecordsAndSeconds() {
        let behind = PartitionLag(topic: "t", partition: 0, committed: 40, logEnd: 50, firstUnconsumedTimestamp: 10_000, now: 12_500)
        #expect(behind.lagRecords == 10)
        #expect(behind.recordAgeSeconds == 2.5)
        #expect(behind.lagSeconds == nil, "from the log ends observed over time, not from one record")
        let caughtUp = PartitionLag(topic: "t", partition: 0, committed: 50, logEnd: 50, firstUnconsumedTimestamp: nil, now: 12_500)
        #expect(caughtUp.lagRecords == 0)
        #expect(caughtUp.lagSeconds == 0 && caughtUp.recordAgeSeconds == 0)
        let unknown = PartitionLag(topic: "t", partition: 0, committed: 50, logEnd: nil, firstUnconsumedTimestamp: nil, now: 0)
        #expect(unknown.lagRecords == nil)
    }

    /// Lag in time as kafka-lag-exporter measures it: when the log end passed the committed
    /// offset, interpolated between the log ends observed around it, or extrapolated back at
    /// the observed rate; nothing from one observation or a log end that stood still.
    @Test func lagInTimeComesFromTheLogEndsObservedOverTime() {
        let samples = [
            CommitSample(offset: 0, logEnd: 100, time: 10_000), CommitSample(offset: 0, logEnd: 200, time: 20_000),
            CommitSample(offset: 0, logEnd: 300, time: 30_000),
        ]
        // Offset 150 was passed halfway between 10 s and 20 s: 15 s; now is 40 s.
        #expect(LogEndLag.seconds(committed: 150, samples: samples, now: 40_000) == 25)
        // Offset 300 is the log end: caught up.
        #expect(LogEndLag.seconds(committed: 300, samples: samples, now: 40_000) == 0)
        // Offset 50 was passed before the first observation: at 10 records/s, 5 s before it.
        #expect(LogEndLag.seconds(committed: 50, samples: samples, now: 40_000) == 35)
        // One observation, or a log end that never moved: it cannot say.
        #expect(LogEndLag.seconds(committed: 50, samples: [samples[0]], now: 40_000) == nil)
        #expect(LogEndLag.seconds(committed: 50, samples: [samples[0], CommitSample(offset: 0, logEnd: 100, time: 20_000)], now: 40_000) == nil)
        // Old record timestamps do not matter: only when the log end moved.
        #expect(LogEndLag.seconds(committed: 250, samples: samples, now: 30_000) == 5)
    }

    /// A consumer that died with records waiting, and a producer that went quiet: once the
    /// samples that showed the log end passing its offset leave the window, the lag in time keeps
    /// growing from when it was worked out (it read nil, and the console exported 0); with no
    /// crossing ever seen, it is at least the time since the oldest observation.
    @Test func lagInTimeKeepsGrowingWhenTheLogEndAndTheCommitsStop() {
        var window = CommitWindow(capacity: 3)
        window.append(CommitSample(offset: 100, logEnd: 100, time: 0))
        window.append(CommitSample(offset: 100, logEnd: 200, time: 10_000))
        #expect(window.lagSeconds(committed: 100, now: 10_000) == 10)
        for t in stride(from: Int64(20_000), through: 60_000, by: 10_000) {
            window.append(CommitSample(offset: 100, logEnd: 200, time: t))
            #expect(window.lagSeconds(committed: 100, now: t) == Double(t) / 1000, "at \(t) ms")
        }
        #expect(LogEndLag.seconds(committed: 100, samples: window.samples, now: 60_000) == nil, "the window alone cannot say")

        var late = CommitWindow(capacity: 3)
        late.append(CommitSample(offset: 100, logEnd: 200, time: 5_000))
        #expect(late.lagSeconds(committed: 100, now: 5_000) == nil, "one observation")
        late.append(CommitSample(offset: 100, logEnd: 200, time: 10_000))
        #expect(late.lagSeconds(committed: 100, now: 10_000) == 5, "at least since the first observation")
        late.append(CommitSample(offset: 150, logEnd: 200, time: 15_000))
        #expect(late.lagSeconds(committed: 150, now: 15_000) == 10, "another offset: worked out again")
    }
}
