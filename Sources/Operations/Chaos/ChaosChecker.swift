import Foundation
import Kafka
import Workers

/// One tick the chaos verifier's producer sends: an Upbit ticker message, or garbage in its place.
public struct ChaosTick: Sendable {
    /// Sent as the `input-id` header (dead letters keep it).
    public var id: Int
    public var market: String
    public var tradeTime: Int64
    public var price: Double
    public var volume: Double
    public var garbage: Bool

    public static let markets = (0..<24).map { "KRW-C\($0)" }
    public static let base: Int64 = 1_700_000_000_000

    /// Tick `i` of a run: market `i % 24`, trade time 90 ms after the previous tick's (so per
    /// partition too), every 20th one garbage.
    public static func make(_ i: Int) -> ChaosTick {
        ChaosTick(
            id: i, market: markets[i % markets.count], tradeTime: base + Int64(i) * 90, price: 1000 + Double((i * 7919) % 500),
            volume: Double(1 + i % 5), garbage: i % 20 == 7)
    }

    /// One tick per market an hour after tick `after`: every minute before closes.
    public static func closing(after: Int) -> [ChaosTick] {
        markets.enumerated().map { m, market in
            ChaosTick(id: after + 1 + m, market: market, tradeTime: base + Int64(after) * 90 + 3_600_000, price: 1, volume: 1, garbage: false)
        }
    }

    public func record(topic: String) -> ProducerRecord {
        let json = garbage
            ? #"{"type":"ticker","code":"\#(market)","trade_price":"garbage \#(id)""#
            : #"{"type":"ticker","code":"\#(market)","trade_price":\#(price),"trade_volume":\#(volume),"signed_change_rate":0.01,"trade_timestamp":\#(tradeTime),"timestamp":\#(tradeTime + 5),"stream_type":"REALTIME"}"#
        return ProducerRecord(
            topic: topic, key: Array(market.utf8), value: Array(json.utf8), headers: [KafkaHeader(key: "input-id", string: String(id))],
            timestamp: tradeTime)
    }
}

/// A tick as it landed: its partition and offset.
public struct ChaosInput: Sendable {
    public var tick: ChaosTick
    public var partition: Int32
    public var offset: Int64

    public init(tick: ChaosTick, partition: Int32, offset: Int64) {
        self.tick = tick
        self.partition = partition
        self.offset = offset
    }
}

/// The one-minute candles the inputs must produce, computed here from the inputs alone (not by
/// the stage's code): per market and minute of trade time, open (earliest trade), high, low,
/// close (latest trade), volume, Σ price × volume and the last trade time; a minute is complete
/// once its partition's latest trade time is a minute plus the lateness past its start.
public struct CandleOracle: Sendable {
    public struct Candle: Sendable, Equatable {
        public var market: String
        public var minute: Int64
        public var open, high, low, close, volume, value: Double
        public var lastTrade: Int64
    }

    /// By "market minute".
    public private(set) var candles: [String: Candle] = [:]
    /// Good inputs per partition in offset order.
    let partitions: [Int32: [ChaosInput]]
    let latenessMillis: Int64

    public static func key(market: String, minute: Int64) -> String { "\(market) \(minute)" }

    public init(_ inputs: [ChaosInput], latenessMillis: Int64) {
        self.latenessMillis = latenessMillis
        partitions = Dictionary(grouping: inputs.filter { !$0.tick.garbage }, by: \.partition).mapValues { $0.sorted { $0.offset < $1.offset } }
        for (_, ordered) in partitions {
            guard let watermark = ordered.map(\.tick.tradeTime).max() else { continue }
            let open = Self.fold(ordered[...])
            for (key, c) in open where c.candle.minute + 60_000 + latenessMillis <= watermark { candles[key] = c.candle }
        }
    }

    /// What a candle stage's state must hold once it has taken a partition's inputs before
    /// `offset`: the candles not yet published (their minute plus the lateness not yet passed by
    /// the latest trade time), and that latest trade time.
    public func state(partition: Int32, before offset: Int64) -> (open: [String: Candle], watermark: Int64?) {
        let taken = (partitions[partition] ?? []).prefix { $0.offset < offset }
        guard let watermark = taken.map(\.tick.tradeTime).max() else { return ([:], nil) }
        var open: [String: Candle] = [:]
        for (key, c) in Self.fold(taken) where c.candle.minute + 60_000 + latenessMillis > watermark { open[key] = c.candle }
        return (open, watermark)
    }

    /// Folds ticks (in offset order) into candles by market and minute.
    private static func fold(_ ordered: ArraySlice<ChaosInput>) -> [String: (first: Int64, candle: Candle)] {
        var open: [String: (first: Int64, candle: Candle)] = [:]
        for input in ordered {
                let t = input.tick
                let minute = t.tradeTime - ((t.tradeTime % 60_000) + 60_000) % 60_000
                let key = Self.key(market: t.market, minute: minute)
                if var c = open[key] {
                    if t.tradeTime < c.first {
                        c.first = t.tradeTime
                        c.candle.open = t.price
                    }
                    if t.tradeTime >= c.candle.lastTrade {
                        c.candle.lastTrade = t.tradeTime
                        c.candle.close = t.price
                    }
                    c.candle.high = max(c.candle.high, t.price)
                    c.candle.low = min(c.candle.low, t.price)
                    c.candle.volume += t.volume
                    c.candle.value += t.price * t.volume
                    open[key] = c
                } else {
                    open[key] = (t.tradeTime, Candle(
                        market: t.market, minute: minute, open: t.price, high: t.price, low: t.price, close: t.price,
                        volume: t.volume, value: t.price * t.volume, lastTrade: t.tradeTime))
                }
        }
        return open
    }
}

/// What a chaos run found. It passes when nothing is lost or wrong, every garbage input and
/// nothing else is dead-lettered, first occurrences keep their order, the group's offsets reach
/// the end, every changelog key ends at its partition's end, every worker exited as it should,
/// and (exactly once) nothing is duplicated.
public struct ChaosReport: Sendable, CustomStringConvertible {
    public var expected = 0
    public var lost: [String] = []
    public var wrong: [String] = []
    public var unexpected: [String] = []
    public var duplicates = 0
    public var outOfOrder: [String] = []
    public var garbage = 0
    public var garbageNotDeadLettered: [Int] = []
    /// Offsets missing inside the dead-letter topic's partitions (records the broker assigned an
    /// offset and no longer holds), `partition@offset`; at least once only (transactions' commit
    /// markers take offsets too).
    public var deadLetterOffsetsMissing: [String] = []
    public var deadLetterOffsetsMissingCount = 0
    /// The same for the candle topic.
    public var outputOffsetsMissing: [String] = []
    public var outputOffsetsMissingCount = 0
    public var goodDeadLettered: [String] = []
    public var offsetsAtEnd = false
    public var offsetsDetail = ""
    public var changelogKeys = 0
    public var checkpoints = 0
    /// Checkpoints whose state is not what the inputs before their offset make.
    public var checkpointsWrong: [String] = []
    public var changelogKeysBehind: [String] = []
    /// Checkpoints older than an earlier one of the same key.
    public var changelogRegressions = 0
    /// The run paused workers past their session: a zombie may write a stale checkpoint (at least
    /// once allows it: a restore starts at the checkpoint's offsets and reads the rest again).
    public var zombies = false
    public var badExits: [String] = []
    /// Workers that stopped because the broker no longer had records their idempotent producer
    /// had been told were written (librdkafka's fatal OUT_OF_ORDER_SEQUENCE_NUMBER after a tansu
    /// restart). The broker's fault when the run shows it lost acknowledged records
    /// (``brokerLostAcknowledged``); else a failure like any unexpected exit.
    public var sequenceExits: [String] = []
    /// Workers that stopped because their producer was fenced (expected; each was replaced).
    /// Such a worker's first copies may be out of minute order (``outOfOrder``, reported, not
    /// failed): librdkafka's idempotent producer fails the batch the broker refused and sends the
    /// later ones under a bumped epoch, so later candles can land while the refused ones do not;
    /// the worker stops, and the next owner makes the refused ones again, then the later ones once
    /// more. Their last copies come in minute order, and that is still checked.
    public var fencedExits = 0
    /// Workers killed by the final SIGTERM before they began (a raw wait status of 15 and an
    /// empty log): they had taken nothing.
    public var stoppedBeforeStart = 0
    /// Checkpoints dropped because the coordinator no longer counted their worker as a member
    /// (evicted; from the workers' logs): each would have landed after the new owner's.
    public var fencedCheckpoints = 0
    /// Each regression: the key, its offsets, the previous checkpoint's, where it sits.
    public var changelogRegressionDetails: [String] = []
    /// Every worker's whole log, written to files when the run failed.
    public var workerLogs: [String] = []
    /// Set when the broker stopped serving the group (tansu's known wedges), with what was seen.
    public var wedged: String?
    /// Inputs the broker acknowledged that its topic no longer holds (a broker's loss, not the
    /// workers'), and inputs held twice (the broker took a retried produce twice).
    public var inputsAcknowledged = 0
    public var inputsLostByBroker: [Int] = []
    public var inputsDuplicatedByBroker = 0
    public var exactlyOnce = false
    /// Outputs that failed past their attempts and were redriven (from the dead-letter topic to
    /// the candle topic) before the check; they arrive late, so first occurrences among them are
    /// not held to minute order.
    public var redriven = 0
    /// Candles the runtime sent again after a failed delivery that landed after later candles of
    /// their market (which were in flight): reported; those later candles must then have been
    /// sent again after them (``lastCopiesOutOfOrder``).
    public var lateAfterRetry: [String] = []
    /// Copies the runtime sent again because they had landed ahead of a retried candle.
    public var resent = 0
    /// Per market and output partition, the last copy of each candle out of minute order (what
    /// a reader keeping the newest candle ends with): a failed run, unless owners overlapped
    /// (``ownersOverlap``).
    public var lastCopiesOutOfOrder: [String] = []
    /// The run made members that still deliver after their partitions moved on (paused past
    /// their session, or evicted while their outputs were stuck): at least once, such a member's
    /// late outputs can land after the new owner's, so the last copies' order is reported, not
    /// failed (exactly once fences them).
    public var ownersOverlap = false

    public init() {}

    public var passed: Bool {
        lost.isEmpty && garbageNotDeadLettered.isEmpty && sequenceExits.isEmpty && passedApartFromMissingRecords
    }

    /// The broker lost records it had acknowledged: inputs, or holes and acknowledged records gone
    /// in the outputs or dead letters.
    public var brokerLostAcknowledged: Bool {
        !inputsLostByBroker.isEmpty
            || outputOffsetsMissingCount + outputAcknowledgementsGone + deadLetterOffsetsMissingCount + deadLetterAcknowledgementsGone > 0
    }

    /// Every check but "nothing lost" and "every garbage input dead-lettered".
    private var passedApartFromMissingRecords: Bool {
        wedged == nil && inputsLostByBroker.isEmpty && wrong.isEmpty && unexpected.isEmpty && (outOfOrder.isEmpty || fencedExits > 0) && (ownersOverlap || lastCopiesOutOfOrder.isEmpty)
            && goodDeadLettered.isEmpty && offsetsAtEnd && checkpointsWrong.isEmpty && badExits.isEmpty && (!exactlyOnce || duplicates == 0)
            && (zombies || (changelogKeysBehind.isEmpty && changelogRegressions == 0))
    }

    /// Lost candles and garbage missing from the dead-letter topic that holes in those topics
    /// account for: the broker assigned offsets to records it no longer holds, at least as many
    /// as are missing (seen with tansu on S3 across a restart: it acknowledged records, the
    /// worker settled them, and they were gone after the restart), while everything else held.
    ///
    /// Also counted: records the workers were told were acknowledged (their acknowledgement
    /// log, on tansu) that the topic no longer holds as they were. Tansu can lose the last
    /// records it acknowledged before a restart and then write later ones at their offsets:
    /// that leaves no hole, only acknowledged records that are gone.
    public var outputLostByBroker: Bool {
        !exactlyOnce && !(lost.isEmpty && garbageNotDeadLettered.isEmpty && sequenceExits.isEmpty) && passedApartFromMissingRecords
            && (sequenceExits.isEmpty || brokerLostAcknowledged)
            && lost.count <= outputOffsetsMissingCount + outputAcknowledgementsGone
            && garbageNotDeadLettered.count <= deadLetterOffsetsMissingCount + deadLetterAcknowledgementsGone
    }

    /// Outputs and dead letters the broker acknowledged that the topics no longer hold as they
    /// were (from the workers' acknowledgement log; tansu runs only).
    public var outputAcknowledgementsGone = 0
    public var deadLetterAcknowledgementsGone = 0

    /// Whether the broker, not the workers, broke the run (wedged, or lost acknowledged records).
    public var brokerFault: Bool { wedged != nil || !inputsLostByBroker.isEmpty || outputLostByBroker }

    public var verdict: String {
        if wedged != nil { return "BROKER WEDGED" }
        if !inputsLostByBroker.isEmpty { return "BROKER LOST INPUT" }
        if outputLostByBroker { return "BROKER LOST OUTPUT" }
        return passed ? "PASS" : "FAIL"
    }

    /// Compares what the producer was told with what the input topic holds.
    public mutating func inputs(acknowledged: [ChaosInput], logged: [ChaosInput]) {
        inputsAcknowledged = acknowledged.count
        let held = Set(logged.map(\.tick.id))
        inputsLostByBroker = acknowledged.map(\.tick.id).filter { !held.contains($0) }.sorted()
        inputsDuplicatedByBroker = logged.count - held.count
    }

    public var description: String {
        func list<T>(_ items: [T]) -> String { items.isEmpty ? "0" : "\(items.count) \(items.prefix(3).map { "\($0)" })" }
        var lines = [
            "inputs: \(inputsAcknowledged) acknowledged, lost by the broker \(list(inputsLostByBroker)), held twice \(inputsDuplicatedByBroker)",
            "candles: expected \(expected), lost \(list(lost)), wrong \(list(wrong)), unexpected \(list(unexpected)), duplicates \(duplicates)\(exactlyOnce ? " (must be 0)" : ""), out of order \(list(outOfOrder))\(fencedExits > 0 && !outOfOrder.isEmpty ? " (first copies of workers stopped by a fenced producer: the batch refused, later ones landed; last copies checked)" : ""), late after a retry \(list(lateAfterRetry)) (sent again after them \(resent)), last copies out of order \(list(lastCopiesOutOfOrder))\(ownersOverlap && !lastCopiesOutOfOrder.isEmpty ? " (from members whose partitions had moved on)" : "")"
                + (exactlyOnce ? "" : ", offsets missing from the topic \(list(outputOffsetsMissing))")
                + (outputAcknowledgementsGone > 0 ? ", acknowledged and gone \(outputAcknowledgementsGone)" : ""),
            "dead letters: redriven outputs \(redriven), garbage \(garbage), garbage not dead-lettered \(list(garbageNotDeadLettered)), good input dead-lettered \(list(goodDeadLettered))"
                + (exactlyOnce ? "" : ", offsets missing from the topic \(list(deadLetterOffsetsMissing))")
                + (deadLetterAcknowledgementsGone > 0 ? ", acknowledged and gone \(deadLetterAcknowledgementsGone)" : ""),
            "offsets: \(offsetsAtEnd ? "the group's offsets reached the end" : "NOT at the end: \(offsetsDetail)")",
            "changelog: \(checkpoints) checkpoints of \(changelogKeys) keys, state wrong \(list(checkpointsWrong)), last behind the end \(list(changelogKeysBehind)), regressions \(changelogRegressions)"
                + (changelogRegressionDetails.isEmpty ? "" : " \(changelogRegressionDetails.prefix(3))")
                + (zombies && (!changelogKeysBehind.isEmpty || changelogRegressions > 0) ? " (from zombies: a restore starts at a checkpoint's offsets)" : ""),
            "workers: \(badExits.isEmpty ? "every exit as expected" : "unexpected exits \(badExits)")"
                + (fencedExits > 0 ? " (\(fencedExits) stopped by a fenced producer, each replaced)" : "")
                + (stoppedBeforeStart > 0 ? " (\(stoppedBeforeStart) stopped by the final SIGTERM before they began)" : "")
                + (sequenceExits.isEmpty ? "" : "; stopped on the broker's out-of-order sequence \(sequenceExits)")
                + (fencedCheckpoints > 0 ? " (\(fencedCheckpoints) checkpoints of evicted members fenced)" : ""),
        ]
        if let wedged { lines.append("broker wedged: \(wedged)") }
        if !workerLogs.isEmpty { lines.append("worker logs: \(workerLogs.joined(separator: ", "))") }
        return lines.joined(separator: "\n")
    }
}

/// Compares what a chaos run left in Kafka with the oracle.
public enum ChaosChecker {
    /// - Parameters:
    ///   - outputs: every record of the candle topic (read past the end, committed only).
    ///   - deadLetters: every record of the dead-letter topic.
    ///   - changelog: every record of the changelog topic.
    ///   - committed: the group's committed offsets per input partition; `ends` the end of each.
    public static func check(
        inputs: [ChaosInput], oracle: CandleOracle, outputs: [ConsumerRecord], deadLetters: [ConsumerRecord], changelog: [ConsumerRecord],
        committed: [Int32: Int64], ends: [Int32: Int64], exactlyOnce: Bool, zombies: Bool = false, ownersOverlap: Bool = false
    ) -> ChaosReport {
        var report = ChaosReport()
        report.exactlyOnce = exactlyOnce
        report.zombies = zombies
        report.ownersOverlap = ownersOverlap || zombies
        report.expected = oracle.candles.count
        var seen: [String: CandleOracle.Candle] = [:]
        var lastMinute: [String: Int64] = [:]
        // Each slot's last first copy, to show what an out-of-order candle came after.
        var lastFirst: [String: ConsumerRecord] = [:]
        func place(_ r: ConsumerRecord) -> String {
            "\(r.partition)@\(r.offset) t=\(r.timestamp.map(String.init) ?? "?")\(r.headers.isEmpty ? "" : " \(r.headers.map(\.key).sorted())")"
        }
        // Per slot, the position of the last copy of each candle the runtime sent (not redriven).
        var lastCopy: [String: [Int64: Int]] = [:]
        for (position, r) in outputs.sorted(by: { ($0.partition, $0.offset) < ($1.partition, $1.offset) }).enumerated() {
            guard let candle = parseCandle(r.value ?? []) else {
                report.unexpected.append("unreadable \(r.partition)@\(r.offset)")
                continue
            }
            let key = CandleOracle.key(market: candle.market, minute: candle.minute)
            if r.header(DeadLetterHeader.redriven) == nil { lastCopy["\(r.partition)/\(candle.market)", default: [:]][candle.minute] = position }
            if r.header(OutputRecord.resentHeader) != nil { report.resent += 1 }
            if let earlier = seen[key] {
                report.duplicates += 1
                if !same(earlier, candle) { report.wrong.append("\(key) (copies differ)") }
                continue
            }
            seen[key] = candle
            guard let expected = oracle.candles[key] else {
                report.unexpected.append(key)
                continue
            }
            if !same(expected, candle) { report.wrong.append("\(key): \(candle) expected \(expected)") }
            // First occurrences of a market's candles come in minute order within an output
            // partition (a redriven one comes whenever the operator sent it).
            let slot = "\(r.partition)/\(candle.market)"
            if r.header(DeadLetterHeader.redriven) != nil {
                // Redriven by the operator: it comes whenever it was sent.
            } else if r.header(OutputRecord.retriedHeader) != nil {
                // Sent again by the runtime after a failed delivery: later candles already in
                // flight may have landed first; they are sent again after it (checked below).
                if let last = lastMinute[slot], last >= candle.minute { report.lateAfterRetry.append(key) }
            } else {
                if let last = lastMinute[slot], last >= candle.minute {
                    report.outOfOrder.append("\(key) at \(place(r)) after minute \(last) at \(lastFirst[slot].map(place) ?? "?")")
                }
                lastMinute[slot] = candle.minute
                lastFirst[slot] = r
            }
        }
        report.lost = oracle.candles.keys.filter { seen[$0] == nil }.sorted()
        for (slot, copies) in lastCopy.sorted(by: { $0.key < $1.key }) {
            var previous: Int64?
            for (minute, _) in copies.sorted(by: { $0.value < $1.value }) {
                if let previous, previous > minute { report.lastCopiesOutOfOrder.append("\(slot) minute \(minute) after \(previous)") }
                previous = minute
            }
        }

        let garbage = Set(inputs.filter(\.tick.garbage).map(\.tick.id))
        report.garbage = garbage.count
        var dead = Set<Int>()
        for letter in deadLetters {
            guard let id = letter.header("input-id").flatMap({ Int(String(decoding: $0, as: UTF8.self)) }) else { continue }
            dead.insert(id)
            if !garbage.contains(id) {
                let reason = letter.header("dead-letter.reason").map { String(decoding: $0, as: UTF8.self) } ?? "?"
                report.goodDeadLettered.append("\(id) (\(reason))")
            }
        }
        report.garbageNotDeadLettered = garbage.subtracting(dead).sorted()
        if !exactlyOnce {
            (report.deadLetterOffsetsMissing, report.deadLetterOffsetsMissingCount) = missingOffsets(deadLetters)
            (report.outputOffsetsMissing, report.outputOffsetsMissingCount) = missingOffsets(outputs)
        }

        let behind = ends.filter { committed[$0.key] != $0.value }.sorted { $0.key < $1.key }
        report.offsetsAtEnd = behind.isEmpty
        report.offsetsDetail = behind.map { "partition \($0.key): committed \(committed[$0.key].map(String.init) ?? "none"), end \($0.value)" }.joined(separator: "; ")

        var latest: [String: [String: Int64]] = [:]
        for record in changelog.sorted(by: { ($0.partition, $0.offset) < ($1.partition, $1.offset) }) {
            guard let key = record.key.map({ String(decoding: $0, as: UTF8.self) }),
                let header = record.header("checkpoint.offsets").map({ String(decoding: $0, as: UTF8.self) })
            else { continue }
            var offsets: [String: Int64] = [:]
            for item in header.split(separator: ",") {
                let parts = item.split(separator: "=")
                if parts.count == 2, let o = Int64(parts[1]) { offsets[String(parts[0])] = o }
            }
            report.checkpoints += 1
            if let (tp, offset) = offsets.first, offsets.count == 1, let partition = tp.split(separator: "/").last.flatMap({ Int32($0) }) {
                let expected = oracle.state(partition: partition, before: offset)
                if let problem = checkState(record.value ?? [], expected: expected) {
                    report.checkpointsWrong.append("\(key) at \(offset) (\(record.partition)@\(record.offset)): \(problem)")
                }
            }
            if let previous = latest[key], offsets.contains(where: { $0.value < (previous[$0.key] ?? .min) }) {
                report.changelogRegressions += 1
                report.changelogRegressionDetails.append("\(key): \(offsets.sorted { $0.key < $1.key }) after \(previous.sorted { $0.key < $1.key }) at \(record.partition)@\(record.offset)")
            }
            latest[key] = offsets
        }
        report.changelogKeys = latest.count
        for (key, offsets) in latest.sorted(by: { $0.key < $1.key }) {
            for (tp, offset) in offsets {
                guard let partition = tp.split(separator: "/").last.flatMap({ Int32($0) }), let end = ends[partition] else { continue }
                if offset != end { report.changelogKeysBehind.append("\(key) at \(offset), end \(end)") }
            }
        }
        return report
    }

    /// Compares a checkpoint of the candle stage (its state as JSON: `open` by market, then
    /// minute, `watermark`) with what the inputs before its offset make; nil when they agree.
    static func checkState(_ bytes: [UInt8], expected: (open: [String: CandleOracle.Candle], watermark: Int64?)) -> String? {
        guard let state = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else { return "unreadable state" }
        var open: [String: CandleOracle.Candle] = [:]
        for (_, byMinute) in (state["open"] as? [String: Any]) ?? [:] {
            // A dictionary keyed by Int64 encodes as [key, value, key, value, …].
            let entries: [Any] = (byMinute as? [Any]) ?? ((byMinute as? [String: Any]).map { $0.flatMap { [$0.key, $0.value] } } ?? [])
            for value in entries {
                guard let entry = value as? [String: Any], let c = entry["candle"] as? [String: Any],
                    let market = c["market"] as? String, let minute = (c["minuteStart"] as? NSNumber)?.int64Value,
                    let o = (c["open"] as? NSNumber)?.doubleValue, let h = (c["high"] as? NSNumber)?.doubleValue,
                    let l = (c["low"] as? NSNumber)?.doubleValue, let cl = (c["close"] as? NSNumber)?.doubleValue,
                    let volume = (c["accTradeVolume"] as? NSNumber)?.doubleValue, let v = (c["accTradePrice"] as? NSNumber)?.doubleValue,
                    let last = (c["lastTradeTimestamp"] as? NSNumber)?.int64Value
                else { continue }
                open[CandleOracle.key(market: market, minute: minute)] = CandleOracle.Candle(
                    market: market, minute: minute, open: o, high: h, low: l, close: cl, volume: volume, value: v, lastTrade: last)
            }
        }
        if let watermark = expected.watermark, (state["watermark"] as? NSNumber)?.int64Value != watermark {
            return "watermark \(String(describing: state["watermark"])), expected \(watermark)"
        }
        let missing = expected.open.keys.filter { open[$0] == nil }.sorted()
        let extra = open.keys.filter { expected.open[$0] == nil }.sorted()
        let differing = expected.open.keys.filter { key in open[key].map { !same($0, expected.open[key]!) } ?? false }.sorted()
        if missing.isEmpty, extra.isEmpty, differing.isEmpty { return nil }
        return "open candles missing \(missing.prefix(2)), extra \(extra.prefix(2)), differing \(differing.prefix(2))"
    }

    static func same(_ a: CandleOracle.Candle, _ b: CandleOracle.Candle) -> Bool {
        func close(_ x: Double, _ y: Double) -> Bool { abs(x - y) <= 1e-9 * max(1, abs(x), abs(y)) }
        return a.market == b.market && a.minute == b.minute && a.lastTrade == b.lastTrade && close(a.open, b.open) && close(a.high, b.high)
            && close(a.low, b.low) && close(a.close, b.close) && close(a.volume, b.volume) && close(a.value, b.value)
    }

    /// An output candle (Upbit's minute-candle JSON) read with JSONSerialization, not the stage's writer.
    static func parseCandle(_ bytes: [UInt8]) -> CandleOracle.Candle? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
            let market = object["market"] as? String, let utc = object["candle_date_time_utc"] as? String,
            let minute = minuteStart(utc),
            let open = (object["opening_price"] as? NSNumber)?.doubleValue, let high = (object["high_price"] as? NSNumber)?.doubleValue,
            let low = (object["low_price"] as? NSNumber)?.doubleValue, let close = (object["trade_price"] as? NSNumber)?.doubleValue,
            let volume = (object["candle_acc_trade_volume"] as? NSNumber)?.doubleValue,
            let value = (object["candle_acc_trade_price"] as? NSNumber)?.doubleValue,
            let last = (object["timestamp"] as? NSNumber)?.int64Value
        else { return nil }
        return CandleOracle.Candle(market: market, minute: minute, open: open, high: high, low: low, close: close, volume: volume, value: value, lastTrade: last)
    }

    /// `2023-11-14T22:13:00` (UTC) as epoch milliseconds.
    static func minuteStart(_ utc: String) -> Int64? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withFullDate, .withTime, .withColonSeparatorInTime, .withDashSeparatorInDate]
        formatter.timeZone = TimeZone(identifier: "UTC")
        guard let date = formatter.date(from: utc) else { return nil }
        return Int64((date.timeIntervalSince1970 * 1000).rounded())
    }
}

extension ChaosChecker {
    /// Offsets absent between offset 0 and the last record of each partition, `partition@offset`
    /// (ranges shortened to their ends), and how many: a topic written without transactions has
    /// no holes.
    static func missingOffsets(_ records: [ConsumerRecord]) -> (ranges: [String], count: Int) {
        var missing: [String] = []
        var count = 0
        for (partition, held) in Dictionary(grouping: records, by: \.partition).sorted(by: { $0.key < $1.key }) {
            var next: Int64 = 0
            for offset in Set(held.map(\.offset)).sorted() {
                if offset > next {
                    missing.append(offset - 1 > next ? "\(partition)@\(next)-\(offset - 1)" : "\(partition)@\(next)")
                    count += Int(offset - next)
                }
                next = offset + 1
            }
        }
        return (missing, count)
    }
}
