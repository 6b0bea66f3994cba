import Foundation
import Kafka
import Operations
import Pipeline
import Testing
import Workers
@testable import Console

/// The console's pure parts: escaping, the history's tiers and bounds, dead-letter grouping,
/// verdicts in words.
@Suite struct ConsolePartsTests {
    @Test func everythingFromKafkaIsEscapedAsText() {
        #expect(HTML.text(#"<script>alert("x")</script> & 'y'"#) == "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;")
        let (text, valid) = HTML.bytes([0x61, 0xFF, 0x62])
        #expect(!valid && text == "a\u{FFFD}b")
        #expect(HTML.bytes(Array("é".utf8)) == ("é", true))
        #expect(HTML.query("a b&c=d/é") == "a%20b%26c%3Dd%2F%C3%A9")
    }

    @Test func chartsAndSparklinesSayHowManyPointsTheyDraw() {
        let chart = HTML.chart([(0, 1), (5000, 3), (10000, 2)], label: "lag <x>", format: { String($0) })
        #expect(chart.contains(#"data-points="3""#))
        #expect(chart.contains("lag &lt;x&gt;"), "labels escaped")
        #expect(!chart.contains("style="), "no inline style (the CSP forbids it)")
        #expect(HTML.chart([], label: "l", format: { String($0) }).contains("no samples yet"))
        #expect(HTML.sparkline([1, 2, 3]).contains(#"data-points="3""#))
    }

    @Test func historyKeepsTheLastObservationPerIntervalInBoundedTiers() {
        var history = LagHistory()
        let t0: Int64 = 1_700_000_000_000 - 1_700_000_000_000 % 1_800_000
        for i in 0..<2000 {  // one observation a second for 2,000 s
            history.record("s", time: t0 + Int64(i) * 1000, lagRecords: Double(i), lagSeconds: 0, inRate: 0, arrivalRate: 0)
        }
        let now = t0 + 2_000_000
        let fine = history.points("s", tier: 0, now: now)
        #expect(fine.count == 60, "5 s points for 5 minutes")
        #expect(fine.last?.lagRecords == 1999, "the last observation of the interval stands for it")
        #expect(zip(fine, fine.dropFirst()).allSatisfy { $1.time - $0.time == 5000 })
        #expect(history.points("s", tier: 1, now: now).count == 34, "1 min points: 2,000 s span 34 intervals")
        #expect(history.points("s", tier: 2, now: now).count == 2, "30 min points")
        #expect(history.points("other", tier: 0, now: now).isEmpty)
        // The workers' figures of an interval: an observation without them keeps the last one's.
        var figures = StageFigures(outRate: 5, outRates: [:], deadLetterRate: 1, errorRate: 0, latencyMeanMs: 40, latencyMaxMs: 90)
        history.record("w", time: t0, lagRecords: 0, lagSeconds: 0, inRate: 0, arrivalRate: 0, workers: figures)
        figures.latencyMeanMs = nil
        figures.latencyMaxMs = nil
        history.record("w", time: t0 + 1000, lagRecords: 0, lagSeconds: 0, inRate: 0, arrivalRate: 0, workers: figures)
        history.record("w", time: t0 + 2000, lagRecords: 0, lagSeconds: 0, inRate: 0, arrivalRate: 0, workers: nil)
        #expect(history.points("w", tier: 0, now: t0 + 2000).map(\.latencyMeanMs) == [40] && history.points("w", tier: 0, now: t0 + 2000).first?.outRate == 5)
        // Out-of-order observations do not rewrite older points.
        history.record("s", time: t0, lagRecords: -1, lagSeconds: 0, inRate: 0, arrivalRate: 0)
        #expect(history.points("s", tier: 0, now: now).allSatisfy { $0.lagRecords >= 0 })
    }

    @Test func aSavedSeriesComesBackCutToItsTiers() throws {
        var history = LagHistory()
        for i in 0..<100 { history.record("s", time: Int64(i) * 5000, lagRecords: Double(i), lagSeconds: 0, inRate: 0, arrivalRate: 0) }
        let saved = try JSONEncoder().encode(try #require(history.snapshot("s")))
        var restored = LagHistory()
        restored.restore("s", tiers: try JSONDecoder().decode([[LagHistory.Point]].self, from: saved))
        #expect(restored.points("s", tier: 0, now: 500_000) == history.points("s", tier: 0, now: 500_000))
        #expect(restored.points("s", tier: 0, now: 500_000).count == 60)
        var oversized = LagHistory()
        oversized.restore("s", tiers: [(0..<500).map { LagHistory.Point(time: Int64($0) * 5000, lagRecords: 0, lagSeconds: 0, inRate: 0, arrivalRate: 0) }, [], []])
        #expect(oversized.snapshot("s")?[0].count == 60, "a stored series longer than its tier is cut")
        oversized.restore("t", tiers: [[]])
        #expect(oversized.snapshot("t") == nil, "a record with another number of tiers is ignored")
    }

    func entry(stage: String, reason: DecodeFailure.Reason, field: String, origin: String, offset: Int64, time: Int64) -> DeadLetterEntry {
        let input = InputRecord(value: Array("x".utf8), timestamp: time, origin: RecordOrigin(topic: origin, partition: 0, offset: offset))
        let letter = DeadLetter(stage: stage, transform: nil, input: input, failure: DecodeFailure(field: field, reason: reason, detail: "d"))
        let record = ConsumerRecord(topic: "pipeline.dead-letters", partition: 1, offset: offset, key: letter.key, value: letter.value,
                                    headers: letter.recordHeaders.map { KafkaHeader(key: $0.name, value: $0.value) }, timestamp: time)
        return DeadLetterEntry(record)!
    }

    @Test func deadLettersGroupByStageReasonFieldAndOrigin() {
        let entries = [
            entry(stage: "prices.decode", reason: .malformedJSON, field: "$", origin: "prices.raw", offset: 1, time: 100),
            entry(stage: "prices.decode", reason: .malformedJSON, field: "$", origin: "prices.raw", offset: 2, time: 300),
            entry(stage: "prices.decode", reason: .missingField, field: "trade_price", origin: "prices.raw", offset: 3, time: 200),
        ]
        let groups = DeadLetterGroup.groups(entries)
        #expect(groups.map(\.count) == [2, 1])
        #expect(groups[0].firstSeen == 100 && groups[0].lastSeen == 300 && groups[0].latest.offset == 2)
        let missing = DeadLetterSelection(query: ["reason": "missing-field", "stage": ""])
        #expect(missing.matches(entries[2]) && !missing.matches(entries[0]))
        #expect(missing.flags == "--reason 'missing-field'")
        #expect(DeadLetterSelection(query: ["field": "it's"]).flags == #"--field 'it'\''s'"#, "quoted for a shell")
        // A redrive covers the dead letters it sent, by offset range and selection.
        let plan = RedrivePlan([entries[0], entries[1]], maxRedrives: 3)
        #expect(plan.destinations.map(\.count) == [2] && plan.destinations[0].topic == "prices.raw" && plan.destinations[0].partition == 0)
        let record = RedriveRecord(time: 1, who: "loopback", selection: DeadLetterSelection(query: ["reason": "malformed-json"]),
                                   maxRedrives: 3, sent: 2, failed: 0, exhausted: 0, redriven: [entries[0], entries[1]])
        #expect(record.covers(entries[0]) && record.covers(entries[1]) && !record.covers(entries[2]))
    }

    /// The dead-letter page shows what was sent: JSON laid out changes whitespace only (the
    /// duplicate key that was the defect, the number as written, the keys' order all stay), the
    /// exact bytes are one click away, and bytes that are not UTF-8 are also a hex dump.
    @Test func aDeadLetterShowsTheExactBytes() throws {
        let sent = #"{"market":"KRW-BTC","trade_price":"oops","trade_price":2874000.00000000,"esc":"a\"b\u00e9","list":[1,{},[]],"z":null}"#
        let laidOut = try #require(ExactView.laidOut(Array(sent.utf8)))
        #expect(laidOut == """
            {
              "market": "KRW-BTC",
              "trade_price": "oops",
              "trade_price": 2874000.00000000,
              "esc": "a\\"b\\u00e9",
              "list": [
                1,
                {},
                []
              ],
              "z": null
            }
            """)
        #expect(laidOut.filter { !" \n".contains($0) } == sent.filter { $0 != " " }, "only whitespace differs")
        for notJSON in ["plain text", "{\"open\": [1, 2}", "[1] [2]", "{\"unterminated\": \"x}", "42"] {
            #expect(ExactView.laidOut(Array(notJSON.utf8)) == nil, "\(notJSON)")
        }
        let input = InputRecord(key: Array("k".utf8), value: Array(sent.utf8), timestamp: 1, origin: RecordOrigin(topic: "prices.raw", partition: 0, offset: 7))
        let letter = DeadLetter(stage: "prices-decode", transform: nil, input: input, failure: DecodeFailure(field: "trade_price", reason: .wrongType, detail: "d"))
        let record = ConsumerRecord(topic: "pipeline.dead-letters", partition: 0, offset: 3, key: letter.key, value: letter.value,
                                    headers: letter.recordHeaders.map { KafkaHeader(key: $0.name, value: $0.value) }, timestamp: 1)
        let page = ConsolePages(state: ConsoleState(topology: try Topology.parse(ConsoleUnderTest.topology))).deadLetter(try #require(DeadLetterEntry(record)), csrf: nil, redrivenBy: nil)
        #expect(page.contains(HTML.text(laidOut)) && page.contains("exact bytes (\(sent.utf8.count) bytes, as sent)") && page.contains(HTML.text(sent)))
        let binary: [UInt8] = [0x7b, 0xff, 0x00, 0x41] + Array(repeating: 0x42, count: 14)
        #expect(ExactView.hexDump(binary) == """
            00000000  7b ff 00 41 42 42 42 42  42 42 42 42 42 42 42 42 |{..ABBBBBBBBBBBB|
            00000010  42 42                                            |BB|

            """)
    }

    @Test func verdictsSayWhatTheRuleSaw() {
        var p = PartitionLag(topic: "t", partition: 0, committed: 10, logEnd: 1210, firstUnconsumedTimestamp: nil, now: 0)
        p.status = .stop
        #expect(LagVerdict.reason(p, window: [], hasMembers: false) == "no member consumes, 1,200 behind")
        p.status = .stall
        let window = [CommitSample(offset: 10, logEnd: 1000, time: 0), CommitSample(offset: 10, logEnd: 1210, time: 180_000)]
        #expect(LagVerdict.reason(p, window: window, hasMembers: true) == "committed offset stuck at 10 for 3 m, 1,200 behind")
        p.status = .ok
        p.lagRecords = 0
        #expect(LagVerdict.reason(p, window: [], hasMembers: true) == "caught up")
        #expect(LagVerdict.grouped(-1_234_567) == "-1,234,567")
    }

    @Test func aFindQuerySaysWhatIsWrongWithIt() throws {
        #expect(try MessageQuery(by: "offset", value: "2:1500") == .offset(partition: 2, offset: 1500))
        #expect(try MessageQuery(by: "header", value: "user-id=u=1") == .header(name: "user-id", value: "u=1"))
        #expect(try MessageQuery(by: "time", value: "2026-11-25T10:00:00Z") == .time(1_795_600_800_000))
        for (by, value, reason) in [("offset", "2", "PARTITION:OFFSET"), ("header", "=x", "NAME=VALUE"), ("time", "soon", "not a time"), ("colour", "red", "by key, header, offset or time")] {
            #expect(throws: MessageQueryError.self, "\(by) \(value)") { try MessageQuery(by: by, value: value) }
            do { _ = try MessageQuery(by: by, value: value) } catch { #expect(error.reason.contains(reason), "\(error.reason)") }
        }
    }

    func status(_ stage: String, pid: Int32, reportedAt: Int64) -> WorkerStatus {
        WorkerStatus(stage: stage, group: stage, version: "1", host: "h", pid: pid, clientID: WorkerStatus.clientID(stage: stage, host: "h", pid: pid),
                     startedAt: 0, reportedAt: reportedAt, assignedPartitions: 1, inFlightRecords: 0, lagRecords: 0, inRate: 0, outRate: 2, processed: 0,
                     produced: 0, deadLettered: 0, rssBytes: 0, cpuSeconds: 0, lastLoopTurnAge: 0, lastError: nil)
    }

    @Test func theRosterFlagsSilentWorkersAndBothMembershipMismatches() {
        let now: Int64 = 100_000
        let statuses = [status("a", pid: 1, reportedAt: now - 1000), status("a", pid: 2, reportedAt: now - 31_000), status("b", pid: 3, reportedAt: now)]
        let members: [String: [String]?] = [
            "a": [WorkerStatus.clientID(stage: "a", host: "h", pid: 1), "a@other:9"],  // pid 9 does not report
            "b": [String]?.none,  // the broker does not list them
        ]
        let roster = WorkerRoster(statuses: statuses, members: members, now: now, silence: .seconds(30))
        #expect(roster.rows.map(\.alive) == [true, false, true])
        #expect(roster.rows.map(\.isMember) == [Bool?.some(true), .some(false), .none], "pid 2 reports but is not a member; b's membership is unknown")
        #expect(roster.silentMembers == ["a": ["a@other:9"]])
        #expect(roster.alive(stage: "a") == 1)
        #expect(roster.outRate(stage: "a") == 2 && roster.outRate(stage: "c") == nil, "out: the live workers' sum")
    }

    /// Records waiting while none of a stage's workers is alive: WARN at once, STOP once the last
    /// report is older than a minute, whatever the lag rules said (they saw commits keep up).
    @Test func recordsWaitingWithNoLiveWorkerAreNeverOK() {
        let now: Int64 = 1_000_000
        var row = StageRow(
            stage: "prices-decode", group: "prices-decode", inputs: ["prices.raw"], members: nil, partitions: 4, lagRecords: 1_800,
            lagSeconds: 3, inRate: 0, arrivalRate: 10, outRate: nil, secondsToDrain: nil, status: "OK", reason: "keeping up, 769 behind",
            partitionRows: [], sampledAt: now, error: nil)
        let justDied = WorkerRoster(statuses: [status("prices-decode", pid: 1, reportedAt: now - 35_000)], members: [:], now: now, silence: .seconds(30))
        let warned = ConsoleState.withWorkers(row, justDied, now: now)
        #expect(warned.members == 0)
        #expect(warned.status == "WARN" && warned.reason.contains("no live worker") && warned.reason.contains("1,800"), "\(warned.status): \(warned.reason)")
        let longGone = WorkerRoster(statuses: [status("prices-decode", pid: 1, reportedAt: now - 95_000)], members: [:], now: now, silence: .seconds(30))
        #expect(ConsoleState.withWorkers(row, longGone, now: now).status == "STOP")
        // A live worker, or nothing waiting: the lag rules' verdict stands.
        let alive = WorkerRoster(statuses: [status("prices-decode", pid: 1, reportedAt: now - 1_000)], members: [:], now: now, silence: .seconds(30))
        #expect(ConsoleState.withWorkers(row, alive, now: now).status == "OK")
        row.lagRecords = 0
        #expect(ConsoleState.withWorkers(row, longGone, now: now).status == "OK")
    }

    /// The metrics say what the page says: a stage with records waiting and no live worker is
    /// WARN (then STOP) on its inputs, partition rows included; a stage whose sample failed is
    /// ERR; a lag in seconds not yet known is not exported (it read 0 with records waiting).
    @Test func theExportedStatusAndLagAreThePages() {
        let now: Int64 = 1_000_000
        func part(_ topic: String, _ partition: Int32, lag: Int64, seconds: Double?) -> PartitionRow {
            var p = PartitionLag(topic: topic, partition: partition, committed: 10, logEnd: 10 + lag, firstUnconsumedTimestamp: nil, now: now)
            p.lagSeconds = lag == 0 ? 0 : seconds
            return PartitionRow(lag: p, reason: "keeping up")
        }
        let row = StageRow(
            stage: "prices-decode", group: "prices-decode", inputs: ["prices.raw", "prices.extra"], members: nil, partitions: 3, lagRecords: 50,
            lagSeconds: 7, inRate: 0, arrivalRate: 0, outRate: nil, secondsToDrain: nil, status: "OK", reason: "keeping up",
            partitionRows: [part("prices.raw", 0, lag: 50, seconds: 7), part("prices.raw", 1, lag: 0, seconds: nil), part("prices.extra", 0, lag: 0, seconds: nil)],
            sampledAt: now, error: nil)
        let dead = WorkerRoster(statuses: [status("prices-decode", pid: 1, reportedAt: now - 35_000)], members: [:], now: now, silence: .seconds(30))
        let page = ConsoleState.withWorkers(row, dead, now: now)
        #expect(page.partitionRows.map(\.lag.status) == [.warn, .ok, .ok], "only the partition with records waiting")
        let gauges = ConsoleState.gauges(page)
        #expect(gauges.map(\.topic) == ["prices.extra", "prices.raw"])
        #expect(gauges.map(\.status) == [.ok, .warn] && gauges.map(\.lagSeconds) == [0, 7], "\(gauges)")
        #expect(ConsoleState.gauges(ConsoleState.withWorkers(row, dead, now: now + 60_000)).map(\.status) == [.ok, .stop])

        var unknown = row
        unknown.partitionRows[0].lag.lagSeconds = nil
        #expect(ConsoleState.gauges(unknown).map(\.lagSeconds) == [0, nil], "not known: not exported")

        var failed = row
        failed.error = "broker unreachable"
        let errs = ConsoleState.gauges(failed)
        #expect(errs.map(\.topic) == ["prices.raw", "prices.extra"] && errs.allSatisfy { $0.status == .err && $0.lagSeconds == nil }, "\(errs)")
    }

    /// The stage page: charts with labelled axes for lag, rates, dead letters, errors and
    /// end-to-end latency (from the workers' reports); the stage's workers with their rates and
    /// latency; its outputs per topic; its own dead letters only, counted by reason.
    @Test func aStagePageShowsItsWorkersOutputsDeadLettersAndCharts() throws {
        let topology = try Topology.parse("""
            topics:
              - {name: prices.raw, partitions: 1}
              - {name: prices.ticks, partitions: 1}
              - {name: pipeline.dead-letters, partitions: 1}
            stages:
              - {name: prices-decode, chain: [prices.decode], inputs: [prices.raw], outputs: {ticks: prices.ticks}, dead-letter-topic: pipeline.dead-letters}
              - {name: other, chain: [prices.decode], inputs: [prices.raw], outputs: {ticks: prices.ticks}, dead-letter-topic: pipeline.dead-letters}
            """)
        let state = ConsoleState(topology: topology)
        let now: Int64 = 1_800_000_000_000
        var live = status("prices-decode", pid: 7, reportedAt: now - 1_000)
        live.inRate = 100
        live.deadLettered = 12
        live.deadLetterRate = 2.5
        live.errors = 3
        live.errorRate = 0.5
        live.latencyMeanMs = 40
        live.latencyMaxMs = 250
        live.outRates = ["prices.ticks": 97.5]
        var slower = status("prices-decode", pid: 8, reportedAt: now - 2_000)
        slower.inRate = 300
        slower.latencyMeanMs = 80
        slower.latencyMaxMs = 900
        slower.outRates = ["prices.ticks": 2.5]
        let roster = WorkerRoster(statuses: [live, slower, status("other", pid: 9, reportedAt: now)], members: [:], now: now, silence: .seconds(30))
        let figures = try #require(roster.figures(stage: "prices-decode"))
        #expect(figures.outRates == ["prices.ticks": 100] && figures.deadLetterRate == 2.5 && figures.errorRate == 0.5)
        #expect(figures.latencyMeanMs == 70 && figures.latencyMaxMs == 900, "the mean weighted by input rate (40×100 + 80×300)/400, the largest max")
        state.update(roster: roster)
        var row = try #require(state.row("prices-decode"))
        row.sampledAt = now - 5_000
        state.update(row, at: now - 5_000)
        row.sampledAt = now
        state.update(row, at: now)

        func letter(_ stage: String, _ reason: DecodeFailure.Reason, offset: Int64) throws -> DeadLetterEntry {
            let input = InputRecord(key: Array("KRW-BTC".utf8), value: Array("{bad".utf8), timestamp: 1234,
                                    origin: RecordOrigin(topic: "prices.raw", partition: 0, offset: offset))
            let d = DeadLetter(stage: stage, transform: nil, input: input, failure: DecodeFailure(field: "price", reason: reason, detail: "d"))
            return try #require(DeadLetterEntry(ConsumerRecord(
                topic: "pipeline.dead-letters", partition: 0, offset: offset, key: d.key, value: d.value,
                headers: d.recordHeaders.map { KafkaHeader(key: $0.name, value: $0.value) }, timestamp: 1234 + offset)))
        }
        let letters = [try letter("prices-decode", .missingField, offset: 1), try letter("prices-decode", .missingField, offset: 2),
                       try letter("prices-decode", .wrongType, offset: 3), try letter("other", .wrongType, offset: 4)]
        let page = try #require(ConsolePages(state: state).stage("prices-decode", tier: 0, now: now, deadLetters: letters, deadLetterError: nil))
        #expect(page.components(separatedBy: "<figure class=\"chart\">").count - 1 == 7, "seven charts")
        for title in ["records", "seconds", "records/s", "dead letters/s", "errors/s", "ms", "time (UTC)"] {
            #expect(page.contains(">\(HTML.text(title))</text>"), "an axis titled \(title)")
        }
        #expect(page.contains("dead letters per second: 2.5/s now") && page.contains("errors per second (failed deliveries and commits): 0.5/s now"))
        #expect(page.contains("end-to-end latency, mean") && page.contains("70 ms now"), "the latency chart's last point")
        #expect(page.contains("data-worker=\"h/7/prices-decode\"") && page.contains("data-worker=\"h/8/prices-decode\""))
        #expect(!page.contains("data-worker=\"h/9/other\""), "another stage's worker is not listed")
        #expect(page.contains("<td>40 ms</td><td>250 ms</td>"), "a worker's latency, mean and max")
        #expect(page.contains("data-topic=\"prices.ticks\"") && page.contains("100/s"), "outputs per topic")
        #expect(page.contains("3 dead letters: 2 missing-field, 1 wrong-type"), "its own dead letters only, by reason")
        #expect(page.contains("href=\"/dead-letters?stage=prices-decode\""))
        #expect(!page.contains("style="), "no inline style")

        // No worker: said so, and the workers' charts have no samples.
        let bare = ConsoleState(topology: topology)
        let empty = try #require(ConsolePages(state: bare).stage("other", tier: 0, now: now, deadLetters: [], deadLetterError: "broker down"))
        #expect(empty.contains("id=\"no-workers\"") && empty.contains("cannot read the dead letters: broker down") && empty.contains("no samples yet"))
    }

    @Test func onlyLoopbackListensWithoutAToken() {
        #expect(ConsoleSettings.isLoopback("127.0.0.1") && ConsoleSettings.isLoopback("localhost") && ConsoleSettings.isLoopback("::1"))
        #expect(!ConsoleSettings.isLoopback("0.0.0.0") && !ConsoleSettings.isLoopback("10.0.0.5"))
    }

    /// A tokens file is `name: token role` per line; every mistake is refused with its line.
    @Test func aTokensFileNamesEachTokensOwnerAndRole() throws {
        let access = try ConsoleAccess.parse(tokensFile: """
            # who may use the console
            alice: alice-token-0123456789 operator

            bob:   bob-token-01234567890   viewer
            """, source: "tokens")
        #expect(access.user(presenting: Array("alice-token-0123456789".utf8)) == ConsoleAccess.User(name: "alice", role: .operator))
        #expect(access.user(presenting: Array("bob-token-01234567890".utf8)) == ConsoleAccess.User(name: "bob", role: .viewer))
        #expect(access.user(presenting: Array("bob-token-0123456789".utf8)) == nil)
        for (text, says) in [
            ("alice alice-token-0123456789 operator", "tokens:1: expected `name: token role`"),
            ("alice: short operator", "tokens:1: the token of 'alice' is shorter than 16"),
            ("alice: alice-token-0123456789 admin", "tokens:1: the role of 'alice' is 'admin'"),
            ("alice: alice-token-0123456789", "tokens:1: expected `alice: token role`"),
            ("al ice: alice-token-0123456789 viewer", "tokens:1: the name 'al ice'"),
            ("\nalice: alice-token-0123456789 viewer\nalice: other-token-0123456789 viewer", "tokens:3: 'alice' is named twice"),
            ("a: same-token-0123456789 viewer\nb: same-token-0123456789 viewer", "tokens:2: the token of 'b' is another name's too"),
            ("loopback: alice-token-0123456789 viewer", "tokens:1: 'loopback'"),
            ("# nothing\n", "tokens: no token in it"),
        ] {
            let error = #expect(throws: ConsoleAccess.AccessError.self) { try ConsoleAccess.parse(tokensFile: text, source: "tokens") }
            #expect(error?.description.hasPrefix(says) == true, "\(error?.description ?? "no error")")
        }
    }

    /// A session is a random identifier, unrelated to the token, that ends with its lifetime or
    /// with a sign-out.
    @Test func sessionsAreRandomExpireAndEnd() {
        let sessions = Sessions(lifetime: .seconds(60))
        let alice = ConsoleAccess.User(name: "alice", role: .operator)
        let now = ContinuousClock.now
        let first = sessions.start(alice, now: now), second = sessions.start(alice, now: now)
        #expect(first != second && first.count == 64, "two sign-ins, two random identifiers")
        #expect(sessions.user(first, now: now + .seconds(59)) == alice)
        #expect(sessions.user(first, now: now + .seconds(61)) == nil, "expired")
        sessions.end(second)
        #expect(sessions.user(second, now: now) == nil, "signed out")
        #expect(sessions.setCookie(first).contains("HttpOnly; SameSite=Strict; Path=/; Max-Age=60"))
    }

    @Test func hostsAreTheConsolesOwnNamesOnly() {
        let policy = HostPolicy(listening: "10.1.2.3", allowed: ["Console.Example.org.", "fd00::5", "[fd00::6]"])
        for host in ["localhost", "localhost:8090", "127.0.0.1", "127.255.0.1:1", "[::1]", "[0:0:0:0:0:0:0:1]:8090", "10.1.2.3:8090",
                     "console.example.org", "CONSOLE.example.org.:80", "[fd00::5]:8090", "[fd00:0::6]"] {
            #expect(policy.allows(authority: host), "\(host)")
        }
        for host in [nil, "", ":8090", "10.1.2.4", "example.org", "console.example.org.evil", "evil.console.example.org", "[fd00::7]", "fd00::5",
                     "localhost:http", "localhost:123456", "127.1", "2130706433", "0177.0.0.1", "[::ffff:10.1.2.3]x", "user@localhost"] {
            #expect(!policy.allows(authority: host), "\(host ?? "no Host")")
        }
        // Listening on every address names none: 0.0.0.0 and :: are not taken as names.
        #expect(!HostPolicy(listening: "0.0.0.0", allowed: []).allows(authority: "0.0.0.0:8090"))
        #expect(!HostPolicy(listening: "::", allowed: []).allows(authority: "[::]:8090"))
        #expect(HostPolicy(listening: "::1", allowed: []).allows(authority: "[::1]:8090"))
        #expect(HostPolicy.normalize("a_b") == nil && HostPolicy.normalize("[example.org]") == nil && HostPolicy.normalize("[10.0.0.1]") == nil)
    }

    @Test func requestParametersAreReadStrictly() throws {
        #expect(try RequestParameters.decode("a=1&b=x+y%2Bz&c=%C3%A9&d&e=") == ["a": "1", "b": "x y+z", "c": "é", "d": "", "e": ""])
        for (text, name) in [("stage=%FF", "stage"), ("stage=%", "stage"), ("stage=%4", "stage"), ("a=1&a=2", "a"), ("%FF=1", "a parameter name")] {
            #expect(throws: BadParameter.self, "\(text)") { try RequestParameters.decode(text) }
            do { _ = try RequestParameters.decode(text) } catch { #expect(error.name == name, "\(text): \(error)") }
        }
        #expect(try RequestParameters.path("%2B5+", name: "p") == "+5+")
        #expect(try RequestParameters.time("1970-01-01T00:00:00Z", name: "t") == 0)
        #expect(throws: BadParameter.self) { try RequestParameters.time("1969-12-31T23:59:59Z", name: "t") }
    }

    /// 50 stages of 4 partitions each, every one with a 5-minute history: the overview renders
    /// in well under 200 ms (a debug build; best of 5).
    @Test func fiftyStagesOfFourPartitionsRenderUnder200Milliseconds() throws {
        var yaml = "topics:\n"
        for i in 0..<50 { yaml += "  - {name: in.t\(i), partitions: 4}\n" }
        yaml += "  - {name: pipeline.dead-letters, partitions: 4}\nstages:\n"
        for i in 0..<50 {
            yaml += "  - {name: stage-\(i), chain: [prices.decode], inputs: [in.t\(i)], outputs: {ticks: in.t\((i + 1) % 50)}, dead-letter-topic: pipeline.dead-letters}\n"
        }
        let topology = try Topology.parse(yaml)
        #expect(topology.stages.count == 50)
        let state = ConsoleState(topology: topology)
        let t0: Int64 = 1_700_000_000_000
        for tick in 0..<60 {
            for (i, stage) in topology.stages.enumerated() {
                let rows = (0..<4).map { p in
                    var lag = PartitionLag(topic: "in.t\(i)", partition: Int32(p), committed: 100, logEnd: 100 + Int64(tick * p),
                                           firstUnconsumedTimestamp: t0, now: t0 + Int64(tick) * 5000)
                    lag.status = p == 3 && i == 7 ? .stall : .ok
                    lag.owner = "w-\(p)"
                    return PartitionRow(lag: lag, reason: "r")
                }
                state.update(StageRow(
                    stage: stage.name, group: stage.group, inputs: stage.inputs, members: 2, partitions: 4, lagRecords: Int64(tick * 6),
                    lagSeconds: Double(tick), inRate: 10, arrivalRate: 12, outRate: nil, secondsToDrain: nil, status: i == 7 ? "STALL" : "OK",
                    reason: "r", partitionRows: rows, sampledAt: t0 + Int64(tick) * 5000, error: nil), at: t0 + Int64(tick) * 5000)
            }
        }
        let pages = ConsolePages(state: state)
        var best = Duration.seconds(10)
        var html = ""
        for _ in 0..<5 {
            let start = ContinuousClock.now
            html = pages.overview(now: t0 + 300_000)
            best = min(best, ContinuousClock.now - start)
        }
        #expect(html.components(separatedBy: "<tr data-stage=").count - 1 == 50)
        #expect(html.range(of: "stage-7")!.lowerBound < html.range(of: "stage-0\"")!.lowerBound, "the STALL stage first")
        #expect(best < .milliseconds(200), "\(best)")
    }
}
