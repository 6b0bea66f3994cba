import Foundation
import Testing
import Kafka
@testable import Operations
import Workers

/// The chaos verifier's plan and checker, on made-up runs: the checker must see each kind of
/// violation, and a plan must be the same for the same seed.
@Suite struct ChaosCheckerTests {
    @Test func aPlanIsTheSameForTheSameSeed() {
        let a = ChaosPlan.make(seed: 7, window: .seconds(30), faults: ChaosPlan.Fault.allCases, count: 6, sessionTimeout: .seconds(6))
        let b = ChaosPlan.make(seed: 7, window: .seconds(30), faults: ChaosPlan.Fault.allCases, count: 6, sessionTimeout: .seconds(6))
        let c = ChaosPlan.make(seed: 8, window: .seconds(30), faults: ChaosPlan.Fault.allCases, count: 6, sessionTimeout: .seconds(6))
        #expect(a == b)
        #expect(a != c)
        #expect(a.steps.count == 6)
        #expect(a.steps.map(\.at) == a.steps.map(\.at).sorted())
        #expect(a.steps.allSatisfy { $0.at < .seconds(30) })
        #expect(a.steps.filter { $0.fault == .pause }.allSatisfy { $0.hold > .seconds(6) }, "a pause outlasts the session")
    }

    /// 2,000 ticks on two partitions by market, as a run would send them.
    static func inputs() -> [ChaosInput] {
        var next: [Int32: Int64] = [:]
        return ((0..<2_000).map(ChaosTick.make) + ChaosTick.closing(after: 2_000)).map { tick in
            let partition = Int32((ChaosTick.markets.firstIndex(of: tick.market) ?? 0) % 2)
            defer { next[partition, default: 0] += 1 }
            return ChaosInput(tick: tick, partition: partition, offset: next[partition, default: 0])
        }
    }

    /// The candles as the stage would publish them, one record each, and the dead letters.
    static func published(_ oracle: CandleOracle, _ inputs: [ChaosInput]) -> (outputs: [ConsumerRecord], deadLetters: [ConsumerRecord]) {
        var offset: Int64 = 0
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        let outputs = oracle.candles.values.sorted { ($0.minute, $0.market) < ($1.minute, $1.market) }.map { c -> ConsumerRecord in
            let utc = String(formatter.string(from: Date(timeIntervalSince1970: Double(c.minute) / 1000)).prefix(19))
            let json = #"{"market":"\#(c.market)","candle_date_time_utc":"\#(utc)","opening_price":\#(c.open),"high_price":\#(c.high),"low_price":\#(c.low),"trade_price":\#(c.close),"timestamp":\#(c.lastTrade),"candle_acc_trade_price":\#(c.value),"candle_acc_trade_volume":\#(c.volume),"unit":1}"#
            defer { offset += 1 }
            return ConsumerRecord(topic: "out", partition: 0, offset: offset, key: Array(c.market.utf8), value: Array(json.utf8), headers: [], timestamp: nil)
        }
        let deadLetters = inputs.filter(\.tick.garbage).enumerated().map { i, input in
            ConsumerRecord(
                topic: "dlq", partition: 0, offset: Int64(i), key: nil, value: nil,
                headers: [KafkaHeader(key: "input-id", string: String(input.tick.id))], timestamp: nil)
        }
        return (outputs, deadLetters)
    }

    @Test func aCleanRunPassesAndEachViolationIsSeen() throws {
        let inputs = Self.inputs()
        let oracle = CandleOracle(inputs, latenessMillis: 5_000)
        #expect(oracle.candles.count > 50)
        let (outputs, deadLetters) = Self.published(oracle, inputs)
        var ends: [Int32: Int64] = [:]
        for i in inputs { ends[i.partition] = max(ends[i.partition] ?? 0, i.offset + 1) }
        func check(_ outputs: [ConsumerRecord], _ deadLetters: [ConsumerRecord], committed: [Int32: Int64]? = nil) -> ChaosReport {
            ChaosChecker.check(
                inputs: inputs, oracle: oracle, outputs: outputs, deadLetters: deadLetters, changelog: [], committed: committed ?? ends, ends: ends,
                exactlyOnce: false)
        }
        let clean = check(outputs, deadLetters)
        #expect(clean.passed, "\(clean)")
        #expect(clean.expected == oracle.candles.count)

        let lost = check(Array(outputs.dropFirst()), deadLetters)
        #expect(lost.lost.count == 1 && !lost.passed)

        var changed = outputs
        changed[3].value = Array(String(decoding: changed[3].value!, as: UTF8.self).replacingOccurrences(of: #""unit":1"#, with: #""unit":1,"x":0"#)
            .replacingOccurrences(of: #""high_price":"#, with: #""high_price":1"#).utf8)
        let wrong = check(changed, deadLetters)
        #expect(wrong.wrong.count == 1 && !wrong.passed, "\(wrong)")

        let twice = check(outputs + [outputs[5]], deadLetters)
        #expect(twice.duplicates == 1 && twice.passed, "a duplicate is allowed at least once")

        var early = outputs[60]
        early.offset = -1
        let reordered = check([early] + outputs.filter { $0.offset != 60 }, deadLetters)
        #expect(!reordered.outOfOrder.isEmpty, "\(reordered)")
        // The same candle landing late because the runtime sent it again after a failed delivery:
        // the later candles of its market that landed first must be sent again after it (their
        // last copies in minute order), or the run fails; one the operator redrove is not held to
        // the order at all.
        var retried = outputs[3]
        retried.headers = [KafkaHeader(key: OutputRecord.retriedHeader, string: "1")]
        retried.offset = 100_000  // after every later candle of its market
        let late = check(outputs.filter { $0.offset != 3 } + [retried], deadLetters)
        #expect(late.outOfOrder.isEmpty && late.lateAfterRetry.count == 1 && !late.lastCopiesOutOfOrder.isEmpty && !late.passed, "\(late)")
        let market = outputs[3].key
        let copies = outputs.filter { $0.offset > 3 && $0.key == market }.enumerated().map { i, r in
            var copy = r
            copy.headers = [KafkaHeader(key: OutputRecord.resentHeader, string: "1")]
            copy.offset = 100_001 + Int64(i)
            return copy
        }
        #expect(!copies.isEmpty)
        let sentAgain = check(outputs.filter { $0.offset != 3 } + [retried] + copies, deadLetters)
        #expect(sentAgain.lastCopiesOutOfOrder.isEmpty && sentAgain.resent == copies.count && sentAgain.passed, "\(sentAgain)")
        // A worker stopped by its fenced producer: the batch the broker refused (candle 3) did not
        // land, later candles of its market did (librdkafka sends them under a bumped epoch); the
        // next owner makes candle 3 and the later ones again. First copies out of order, last
        // copies in order: reported, and the run passes only when workers did stop so.
        let madeAgain = outputs.filter { $0.offset > 3 && $0.key == market }.enumerated().map { i, r in
            var copy = r
            copy.offset = 100_001 + Int64(i)
            return copy
        }
        var again = outputs[3]
        again.offset = 100_000
        var afterFence = check(outputs.filter { $0.offset != 3 } + [again] + madeAgain, deadLetters)
        #expect(afterFence.outOfOrder.count == 1 && afterFence.lastCopiesOutOfOrder.isEmpty && !afterFence.passed, "\(afterFence)")
        afterFence.fencedExits = 1
        #expect(afterFence.passed && "\(afterFence)".contains("stopped by a fenced producer"), "\(afterFence)")
        var redriven = outputs[3]
        redriven.headers = [KafkaHeader(key: DeadLetterHeader.redriven, string: "1")]
        redriven.offset = 100_000
        let sentByOperator = check(outputs.filter { $0.offset != 3 } + [redriven], deadLetters)
        #expect(sentByOperator.outOfOrder.isEmpty && sentByOperator.lateAfterRetry.isEmpty && sentByOperator.passed, "\(sentByOperator)")

        let missingLetter = check(outputs, Array(deadLetters.dropLast()))
        #expect(missingLetter.garbageNotDeadLettered.count == 1 && !missingLetter.passed)

        var extra = deadLetters
        extra.append(ConsumerRecord(topic: "dlq", partition: 0, offset: 999, key: nil, value: nil, headers: [KafkaHeader(key: "input-id", string: "0")], timestamp: nil))
        let goodLettered = check(outputs, extra)
        #expect(goodLettered.goodDeadLettered.count == 1 && !goodLettered.passed)

        let behind = check(outputs, deadLetters, committed: ends.mapValues { $0 - 1 })
        #expect(!behind.offsetsAtEnd && !behind.passed)
    }

    /// A checkpoint older than the one before it for the same key is a regression, reported with
    /// the offsets of both and where it sits (without zombies, a failed run).
    @Test func aChangelogGoingBackIsARegressionWithItsPlace() {
        let inputs = Self.inputs()
        let oracle = CandleOracle(inputs, latenessMillis: 5_000)
        let (outputs, deadLetters) = Self.published(oracle, inputs)
        var ends: [Int32: Int64] = [:]
        for i in inputs { ends[i.partition] = max(ends[i.partition] ?? 0, i.offset + 1) }
        func checkpoint(_ offsets: String, at offset: Int64) -> ConsumerRecord {
            ConsumerRecord(
                topic: "changelog", partition: 1, offset: offset, key: Array("lane-1".utf8), value: Array("{}".utf8),
                headers: [KafkaHeader(key: "checkpoint.offsets", string: offsets)], timestamp: nil)
        }
        let report = ChaosChecker.check(
            inputs: inputs, oracle: oracle, outputs: outputs, deadLetters: deadLetters,
            changelog: [checkpoint("in/0=10,in/1=5", at: 0), checkpoint("in/0=12,in/1=7", at: 1), checkpoint("in/0=11,in/1=7", at: 2)],
            committed: ends, ends: ends, exactlyOnce: false)
        #expect(report.changelogRegressions == 1)
        #expect(report.changelogRegressionDetails.count == 1)
        #expect(report.changelogRegressionDetails.first?.contains("1@2") == true, "\(report.changelogRegressionDetails)")
        #expect(!report.passed)
        #expect(report.description.contains("regressions 1 ["))
    }

    /// Garbage missing from the dead-letter topic, and offsets missing from it: the records the
    /// broker once held at those offsets are gone (evidence for a broker's loss, not a worker's).
    @Test func missingDeadLettersNameTheOffsetsMissingFromTheTopic() {
        let inputs = Self.inputs()
        let oracle = CandleOracle(inputs, latenessMillis: 5_000)
        let (outputs, published) = Self.published(oracle, inputs)
        var deadLetters = published
        let gone = deadLetters.filter { [0, 3, 4, 5].contains($0.offset) }.compactMap { $0.header("input-id").flatMap { Int(String(decoding: $0, as: UTF8.self)) } }
        deadLetters.removeAll { [0, 3, 4, 5].contains($0.offset) }
        var ends: [Int32: Int64] = [:]
        for i in inputs { ends[i.partition] = max(ends[i.partition] ?? 0, i.offset + 1) }
        let report = ChaosChecker.check(
            inputs: inputs, oracle: oracle, outputs: outputs, deadLetters: deadLetters, changelog: [],
            committed: ends, ends: ends, exactlyOnce: false)
        #expect(report.garbageNotDeadLettered == gone.sorted())
        #expect(report.deadLetterOffsetsMissing == ["0@0", "0@3-5"])
        #expect(report.deadLetterOffsetsMissingCount == 4)
        #expect(report.description.contains("offsets missing from the topic 2 [\"0@0\", \"0@3-5\"]"), "\(report.description)")
        #expect(!report.passed)
        #expect(report.verdict == "BROKER LOST OUTPUT" && report.brokerFault, "four holes account for the four missing dead letters")

        // A dead letter missing without a hole is the workers' loss, not the broker's.
        var fewer = published
        fewer.removeAll { $0.offset == published.count - 1 }
        let workers = ChaosChecker.check(
            inputs: inputs, oracle: oracle, outputs: outputs, deadLetters: fewer, changelog: [],
            committed: ends, ends: ends, exactlyOnce: false)
        #expect(workers.garbageNotDeadLettered.count == 1 && workers.deadLetterOffsetsMissingCount == 0)
        #expect(workers.verdict == "FAIL" && !workers.brokerFault)

        // The same loss where the broker wrote another record at the lost offset (no hole): the
        // workers' acknowledgement log says it was acknowledged there, and the topic holds other
        // bytes; then it is the broker's.
        let last = published[published.count - 1]
        var replaced = fewer
        replaced.append(ConsumerRecord(topic: last.topic, partition: last.partition, offset: last.offset, key: last.key, value: Array("other".utf8),
                                       headers: [], timestamp: last.timestamp))
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("acks-\(UUID().uuidString).log").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let log = try! AcknowledgementLog(path: path)
        log.append(published.map { AcknowledgementLog.Entry(topic: "dl", partition: $0.partition, offset: $0.offset, value: $0.value) })
        log.append([AcknowledgementLog.Entry(topic: "other", partition: 0, offset: 0, value: nil)])
        let acks = AcknowledgementLog.read(path: path)
        #expect(acks.count == published.count + 1)
        #expect(AcknowledgementLog.gone(acks, topic: "dl", held: published) == 0, "every acknowledged one as it was")
        #expect(AcknowledgementLog.gone(acks, topic: "dl", held: replaced) == 1, "other bytes at an acknowledged offset")
        #expect(AcknowledgementLog.gone(acks, topic: "dl", held: fewer) == 1, "an acknowledged offset gone")
        var reused = ChaosChecker.check(
            inputs: inputs, oracle: oracle, outputs: outputs, deadLetters: replaced, changelog: [],
            committed: ends, ends: ends, exactlyOnce: false)
        #expect(reused.verdict == "FAIL" && reused.deadLetterOffsetsMissingCount == 0, "without the log: no hole, the workers'")
        reused.deadLetterAcknowledgementsGone = AcknowledgementLog.gone(acks, topic: "dl", held: replaced)
        #expect(reused.verdict == "BROKER LOST OUTPUT" && reused.description.contains("acknowledged and gone 1"), "\(reused.description)")
    }

    /// A worker stopped by the broker's out-of-order sequence (its idempotent producer ran ahead
    /// of a restarted tansu that lost what it had acknowledged): the broker's fault when the run
    /// shows acknowledged records lost, a failure when it shows none.
    @Test func aSequenceExitIsTheBrokersOnlyWhenItLostAcknowledgedRecords() {
        let inputs = Self.inputs()
        let oracle = CandleOracle(inputs, latenessMillis: 5_000)
        let (outputs, published) = Self.published(oracle, inputs)
        var ends: [Int32: Int64] = [:]
        for i in inputs { ends[i.partition] = max(ends[i.partition] ?? 0, i.offset + 1) }
        var clean = ChaosChecker.check(
            inputs: inputs, oracle: oracle, outputs: outputs, deadLetters: published, changelog: [],
            committed: ends, ends: ends, exactlyOnce: false)
        #expect(clean.verdict == "PASS", "\(clean.description)")
        clean.sequenceExits = ["pid 7 (log: /tmp/w.log)"]
        #expect(clean.verdict == "FAIL" && !clean.brokerFault, "nothing acknowledged was lost: the exit is the workers'")
        #expect(clean.description.contains("stopped on the broker's out-of-order sequence [\"pid 7"), "\(clean.description)")
        clean.outputAcknowledgementsGone = 1
        #expect(clean.verdict == "BROKER LOST OUTPUT" && clean.brokerFault, "an acknowledged output gone accounts for the exit")

        // Dead letters gone with holes where they were, and the same exit: the broker's.
        var deadLetters = published
        deadLetters.removeAll { [0, 3].contains($0.offset) }
        var holes = ChaosChecker.check(
            inputs: inputs, oracle: oracle, outputs: outputs, deadLetters: deadLetters, changelog: [],
            committed: ends, ends: ends, exactlyOnce: false)
        holes.sequenceExits = ["pid 7 (log: /tmp/w.log)"]
        #expect(holes.verdict == "BROKER LOST OUTPUT", "\(holes.description)")
        // Any other unexpected exit still fails the run.
        holes.badExits = ["pid 8: 134, expected 0"]
        #expect(holes.verdict == "FAIL")
    }

    /// The thumbnail workload's checker: a request with neither thumbnails nor a dead letter is
    /// lost, an answer to no request is unexpected, offsets short of the end fail the run.
    @Test func theThumbnailCheckerSeesEachViolation() throws {
        let requests = (0..<6).map { i in
            ThumbnailChaosInput(
                request: ThumbnailRequest(owner: .product, ownerId: "\(i / 4)", imageIndex: i % 4, sourceURL: "http://127.0.0.1:1/img/\(i).png"),
                partition: Int32(i % 2), offset: Int64(i / 2))
        }
        func ready(_ r: ThumbnailRequest, offset: Int64) -> ConsumerRecord {
            let json = #"{"owner":"\#(r.owner.rawValue)","owner_id":"\#(r.ownerId)","image_index":\#(r.imageIndex),"thumbnails":[{"name":"list","uri":"file:///t/x.jpg"}]}"#
            return ConsumerRecord(topic: "ready", partition: 0, offset: offset, key: nil, value: Array(json.utf8), headers: [], timestamp: nil)
        }
        func letter(_ r: ThumbnailRequest, offset: Int64) -> ConsumerRecord {
            let input = InputRecord(key: Array(r.recordKey.utf8), value: r.jsonBytes(), timestamp: 1, origin: RecordOrigin(topic: "requests", partition: 0, offset: 0))
            let d = DeadLetter(stage: "thumbnails", transform: "thumbnails.render", input: input, failure: DecodeFailure(field: "$", reason: .fetchFailed, detail: "timed out"))
            return ConsumerRecord(
                topic: "dlq", partition: 0, offset: offset, key: d.key, value: d.value,
                headers: d.recordHeaders.map { KafkaHeader(key: $0.name, value: $0.value) }, timestamp: 1)
        }
        let ends: [Int32: Int64] = [0: 3, 1: 3]
        let answers = requests.dropLast().enumerated().map { ready($1.request, offset: Int64($0)) }
        let clean = ThumbnailChaosChecker.check(
            requests: requests, ready: answers, deadLetters: [letter(requests[5].request, offset: 0)], committed: ends, ends: ends)
        #expect(clean.passed && clean.ready == 5 && clean.deadLettered == ["fetch-failed": 1], "\(clean)")
        let lost = ThumbnailChaosChecker.check(requests: requests, ready: answers, deadLetters: [], committed: ends, ends: ends)
        #expect(!lost.passed && lost.lost.count == 1, "\(lost)")
        let stranger = ThumbnailRequest(owner: .product, ownerId: "99", imageIndex: 0, sourceURL: "http://127.0.0.1:1/img/99.png")
        let unexpected = ThumbnailChaosChecker.check(
            requests: requests, ready: answers + [ready(stranger, offset: 9)], deadLetters: [letter(requests[5].request, offset: 0)], committed: ends, ends: ends)
        #expect(!unexpected.passed && unexpected.unexpected.count == 1, "\(unexpected)")
        let twice = ThumbnailChaosChecker.check(
            requests: requests, ready: answers + [answers[0]], deadLetters: [letter(requests[5].request, offset: 0)], committed: ends, ends: ends)
        #expect(twice.passed && twice.duplicates == 1, "a duplicate is allowed at least once: \(twice)")
        let behind = ThumbnailChaosChecker.check(
            requests: requests, ready: answers, deadLetters: [letter(requests[5].request, offset: 0)], committed: [0: 3, 1: 2], ends: ends)
        #expect(!behind.passed && !behind.offsetsAtEnd, "\(behind)")
    }
}
