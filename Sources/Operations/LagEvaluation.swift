import Foundation
import Kafka
/// Consumer-lag status with Burrow's rules (github.com/linkedin/Burrow, "Consumer Lag
/// Evaluation Rules"), evaluated over a sliding window of commits per partition.
///
/// Pure: the caller supplies the window and the clock, so a scripted commit history gives a
/// known status.

/// A partition's status.
public enum PartitionLagStatus: String, Sendable, Codable, Comparable, CaseIterable {
    /// Caught up at some point in the window, or keeping up.
    case ok = "OK"
    /// Committing, but the lag did not decrease over the window: the consumer is falling behind.
    case warn = "WARN"
    /// Committing the same offset over the whole window while there is lag.
    case stall = "STALL"
    /// No commit for longer than the window spans while there is lag (or no member left).
    case stop = "STOP"
    /// The committed offset went backwards within the window.
    case rewind = "REWIND"
    /// The lag could not be determined (the log end could not be read, or the committed offset
    /// is past it).
    case err = "ERR"

    /// 0 (OK) to 5 (ERR): the order of badness, and the number the console exports as
    /// `pipeline_consumer_status`.
    public var severity: Int {
        switch self {
        case .ok: 0
        case .warn: 1
        case .stall: 2
        case .stop: 3
        case .rewind: 4
        case .err: 5
        }
    }

    public static func < (a: Self, b: Self) -> Bool { a.severity < b.severity }
}

extension PartitionLagStatus {
    /// A group's status: its worst partition's (OK with none), the one verdict the CLI and the
    /// console both show.
    public init(worstOf partitions: some Sequence<PartitionLagStatus>) {
        self = partitions.max() ?? .ok
    }

    /// Whether it needs an operator now (Burrow's ERR level: STALL, STOP, REWIND, ERR).
    public var isError: Bool { self > .warn }
}

/// One commit as the window holds it: the committed offset, the partition's log-end offset at
/// that moment, and when it was seen (epoch ms).
public struct CommitSample: Sendable, Hashable, Codable {
    public var offset: Int64
    public var logEnd: Int64
    public var time: Int64

    public init(offset: Int64, logEnd: Int64, time: Int64) {
        self.offset = offset
        self.logEnd = logEnd
        self.time = time
    }

    /// Records behind; never negative.
    public var lag: Int64 { max(0, logEnd - offset) }
}

/// Burrow's partition evaluation.
public enum LagEvaluator {
    /// The status of a partition from its window of commits (oldest first).
    ///
    /// - Parameters:
    ///   - window: the last commits, oldest first.
    ///   - currentLag: the lag now (log end now minus the last commit); nil when the log end
    ///     could not be read (ERR).
    ///   - now: epoch ms.
    ///   - hasMembers: false when the group has no member: with lag, nobody will commit (STOP).
    ///     Burrow infers this from the commit timestamps; Kafka returns none with committed
    ///     offsets, so an observer that samples them needs the membership instead.
    public static func status(window: [CommitSample], currentLag: Int64?, now: Int64, hasMembers: Bool = true) -> PartitionLagStatus {
        guard let currentLag else { return .err }
        guard let last = window.last, let first = window.first else { return .ok }
        if last.offset > last.logEnd { return .err }
        // Rule 1: any zero lag in the window (or now) means the consumer keeps up.
        if currentLag == 0 || window.contains(where: { $0.lag == 0 }) { return .ok }
        // Offsets going backwards: someone reset them, or the consumer re-committed older ones.
        for (a, b) in zip(window, window.dropFirst()) where b.offset < a.offset { return .rewind }
        // Rule 4: no commit for longer than the window spans.
        if !hasMembers || now - last.time > last.time - first.time && window.count > 1 { return .stop }
        guard window.count > 1 else { return .ok }  // one commit: no trend yet
        // Rule 2: commits keep coming with the same offset.
        if first.offset == last.offset { return .stall }
        // Rule 3: offsets move, but the lag never decreases.
        var lagNeverDecreases = true
        for (a, b) in zip(window, window.dropFirst()) where b.lag < a.lag { lagNeverDecreases = false }
        if lagNeverDecreases { return .warn }
        return .ok
    }
}

/// Lag in time as kafka-lag-exporter measures it: how long ago the log end passed the committed
/// offset, from log-end offsets sampled over time (interpolated between the two samples around
/// the committed offset; extrapolated back at the sampled rate when every sample is already past
/// it). Unlike the age of the first unconsumed record, it does not depend on the records' own
/// timestamps (replayed or late records would read as days behind).
public enum LogEndLag {
    /// Seconds since the log end passed `committed`, from `samples` (log-end offsets and when they
    /// were read, oldest first): 0 when the log end is not past it; nil when the samples cannot
    /// say (one sample, or a log end that did not move).
    public static func seconds(committed: Int64, samples: [CommitSample], now: Int64) -> Double? {
        guard let latest = samples.last else { return nil }
        if committed >= latest.logEnd { return 0 }
        let passed: Double
        if let i = samples.firstIndex(where: { $0.logEnd > committed }), i > 0 {
            // Between samples i-1 (not yet past) and i (past): interpolated.
            let a = samples[i - 1], b = samples[i]
            let fraction = Double(committed - a.logEnd) / Double(b.logEnd - a.logEnd)
            passed = Double(a.time) + max(0, fraction) * Double(b.time - a.time)
        } else {
            // Every sample is past it: back from the first, at the rate the log end grew.
            guard let first = samples.first, let moved = samples.first(where: { $0.logEnd > first.logEnd }), moved.time > first.time else { return nil }
            let perMillisecond = Double(moved.logEnd - first.logEnd) / Double(moved.time - first.time)
            passed = Double(first.time) - Double(first.logEnd - committed) / perMillisecond
        }
        return max(0, (Double(now) - passed) / 1000)
    }
}

/// A bounded, oldest-first window of commits per partition.
public struct CommitWindow: Sendable {
    public let capacity: Int
    public private(set) var samples: [CommitSample] = []

    public init(capacity: Int = 10) {
        precondition(capacity > 0)
        self.capacity = capacity
    }

    public mutating func append(_ sample: CommitSample) {
        samples.append(sample)
        if samples.count > capacity { samples.removeFirst(samples.count - capacity) }
    }

    /// When the log end passed a committed offset (epoch ms), as last worked out: kept past the
    /// window, so that a partition whose log end and commits both stopped (a dead consumer, a
    /// quiet producer) keeps its lag in time growing instead of losing it once the samples that
    /// showed the crossing have left the window.
    public private(set) var passed: (committed: Int64, time: Double)?

    /// ``LogEndLag/seconds(committed:samples:now:)`` over this window, remembering its answer:
    /// when the samples cannot say, the remembered time for the same committed offset, else a
    /// lower bound (since the oldest sample that is past it, once there are two); nil only with
    /// one sample and nothing remembered.
    public mutating func lagSeconds(committed: Int64, now: Int64) -> Double? {
        if let seconds = LogEndLag.seconds(committed: committed, samples: samples, now: now) {
            passed = (committed, Double(now) - seconds * 1000)
            return seconds
        }
        if let passed, passed.committed == committed { return max(0, (Double(now) - passed.time) / 1000) }
        guard samples.count > 1, let first = samples.first(where: { $0.logEnd > committed }) else { return nil }
        passed = (committed, Double(first.time))
        return max(0, Double(now - first.time) / 1000)
    }
}

/// Lag trend over a window: records per second (positive: rising) and the time to drain at the
/// current consumption rate.
public struct LagTrend: Sendable, Hashable, Codable {
    /// Change of lag, records per second (positive: lag rising).
    public var lagRate: Double
    /// Committed records per second.
    public var consumeRate: Double
    /// Seconds until lag reaches 0 at the current net rate; nil when the lag is not falling.
    public var secondsToDrain: Double?

    public init?(window: [CommitSample]) {
        guard let first = window.first, let last = window.last, last.time > first.time else { return nil }
        let seconds = Double(last.time - first.time) / 1000
        lagRate = Double(last.lag - first.lag) / seconds
        consumeRate = Double(last.offset - first.offset) / seconds
        secondsToDrain = lagRate < 0 ? Double(last.lag) / -lagRate : (last.lag == 0 ? 0 : nil)
    }

    public var direction: String { lagRate > 0 ? "rising" : lagRate < 0 ? "falling" : "steady" }
}

/// A partition's status in words, as an operator reads it: what the rule saw
/// ("STOP: no member commits, 1,200 behind").
public enum LagVerdict {
    public static func reason(_ partition: PartitionLag, window: [CommitSample], hasMembers: Bool) -> String {
        let behind = partition.lagRecords.map { "\(grouped($0)) behind" } ?? "log end unknown"
        switch partition.status {
        case .ok:
            return partition.lagRecords == 0 ? "caught up" : "keeping up, \(behind)"
        case .warn:
            let trend = LagTrend(window: window).map { String(format: "%+.1f/s", $0.lagRate) } ?? "rising"
            return "lag growing (\(trend)), \(behind)"
        case .stall:
            let span = (window.last?.time ?? 0) - (window.first?.time ?? 0)
            return "committed offset stuck at \(partition.committed) for \(duration(span)), \(behind)"
        case .stop:
            if !hasMembers { return "no member consumes, \(behind)" }
            let since = (window.last?.time).map { Int64(Date().timeIntervalSince1970 * 1000) - $0 } ?? 0
            return "no commit for \(duration(since)), \(behind)"
        case .rewind:
            return "committed offset went back (now \(partition.committed)), \(behind)"
        case .err:
            return partition.logEnd == nil ? "log end cannot be read" : "committed offset \(partition.committed) beyond the log end \(partition.logEnd!)"
        }
    }

    /// 1234567 as "1,234,567".
    public static func grouped(_ n: Int64) -> String {
        let digits = String(n.magnitude)
        var out = ""
        for (i, c) in digits.enumerated() {
            if i > 0, (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(c)
        }
        return (n < 0 ? "-" : "") + out
    }

    /// Milliseconds as "45 s", "3 m", "2 h 5 m".
    public static func duration(_ ms: Int64) -> String {
        let s = max(0, ms) / 1000
        if s < 120 { return "\(s) s" }
        if s < 7200 { return "\(s / 60) m" }
        return "\(s / 3600) h \(s % 3600 / 60) m"
    }
}
