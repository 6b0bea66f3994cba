import Foundation
import Kafka

/// A point in time given on the command line: epoch milliseconds, an ISO-8601 date-time
/// (`2024-03-04T09:00:00Z`, `2024-03-04T09:00:00+09:00`, `2024-03-04`), or a duration before now
/// (`90s`, `15m`, `2h`, `7d`, `1h30m`).
public enum TimeSpec {
    public struct Invalid: Error, CustomStringConvertible {
        public var text: String
        /// A time, but before 1970 or after 9999 (``NumberBounds/epochMillis``).
        public var outOfRange = false
        public var description: String {
            outOfRange
                ? "'\(text)' is not a time from 1970-01-01 to 9999-12-31 (epoch ms \(NumberBounds.epochMillis.lowerBound) to \(NumberBounds.epochMillis.upperBound))"
                : "'\(text)' is not a time: give epoch milliseconds (1714953600000), an ISO-8601 date-time (2024-05-06T00:00:00Z) or a duration before now (30s, 15m, 2h, 7d)"
        }
    }

    /// Epoch ms, from 1970 to 9999 (a negative time would reach the broker as ListOffsets'
    /// latest or earliest).
    public static func parse(_ text: String, now: Int64) throws(Invalid) -> Int64 {
        let t = text.trimmingCharacters(in: .whitespaces)
        let ms: Int64
        if let n = Int64(t), t.count >= 10 {
            ms = n
        } else if let d = duration(t) {
            ms = now.subtractingReportingOverflow(d).overflow ? Int64.min : now - d
        } else if let date = iso(t) {
            guard let n = NumberBounds.epochMillis(date) else { throw Invalid(text: text, outOfRange: true) }
            ms = n
        } else {
            throw Invalid(text: text)
        }
        guard NumberBounds.epochMillis.contains(ms) else { throw Invalid(text: text, outOfRange: true) }
        return ms
    }

    private static func iso(_ t: String) -> Date? {
        let iso = ISO8601DateFormatter()
        for options: ISO8601DateFormatter.Options in [[.withInternetDateTime, .withFractionalSeconds], [.withInternetDateTime], [.withFullDate]] {
            iso.formatOptions = options
            if let date = iso.date(from: t) { return date }
        }
        return nil
    }

    /// A duration such as `2h`, `1h30m`, `500ms`, in milliseconds; nil when it is not one or
    /// does not fit in Int64 milliseconds.
    public static func duration(_ text: String) -> Int64? {
        var total: Int64 = 0
        var number: Int64?
        var i = text.startIndex
        var sawUnit = false
        while i < text.endIndex {
            let c = text[i]
            if let d = c.wholeNumberValue, c.isASCII {
                let (tens, o1) = (number ?? 0).multipliedReportingOverflow(by: 10)
                let (next, o2) = tens.addingReportingOverflow(Int64(d))
                guard !o1, !o2 else { return nil }
                number = next
                i = text.index(after: i)
                continue
            }
            guard let n = number else { return nil }
            let rest = text[i...]
            let unit: Int64
            if rest.hasPrefix("ms") { unit = 1; i = text.index(i, offsetBy: 2) }
            else {
                switch c {
                case "s": unit = 1000
                case "m": unit = 60_000
                case "h": unit = 3_600_000
                case "d": unit = 86_400_000
                case "w": unit = 604_800_000
                default: return nil
                }
                i = text.index(after: i)
            }
            let (part, o1) = n.multipliedReportingOverflow(by: unit)
            let (sum, o2) = total.addingReportingOverflow(part)
            guard !o1, !o2 else { return nil }
            total = sum
            number = nil
            sawUnit = true
        }
        return sawUnit && number == nil ? total : nil
    }
}

/// Which records a replay takes: partitions, an offset range, a time range, key and header
/// matches. Offsets and times are half-open: `from` included, `to` / `until` excluded.
public struct ReplayFilter: Sendable {
    public var partitions: Set<Int32>?
    public var fromOffset: Int64?
    public var toOffset: Int64?
    /// Epoch ms, included.
    public var since: Int64?
    /// Epoch ms, excluded.
    public var until: Int64?
    /// The exact key (UTF-8).
    public var key: String?
    /// Header name and value that must be present (value nil: the header only needs to exist).
    public var headers: [(name: String, value: String?)] = []

    public init() {}

    /// `name=value` or `name` (present with any value).
    public static func parseHeader(_ text: String) -> (name: String, value: String?)? {
        guard let eq = text.firstIndex(of: "=") else { return text.isEmpty ? nil : (text, nil) }
        let name = String(text[..<eq])
        guard !name.isEmpty else { return nil }
        return (name, String(text[text.index(after: eq)...]))
    }

    public func matches(_ r: ConsumerRecord) -> Bool {
        if let partitions, !partitions.contains(r.partition) { return false }
        if let fromOffset, r.offset < fromOffset { return false }
        if let toOffset, r.offset >= toOffset { return false }
        if since != nil || until != nil {
            guard let ts = r.timestamp else { return false }
            if let since, ts < since { return false }
            if let until, ts >= until { return false }
        }
        if let key, r.key != Array(key.utf8) { return false }
        for h in headers {
            guard let found = r.headers.first(where: { $0.key == h.name }) else { return false }
            if let want = h.value, found.value != Array(want.utf8) { return false }
        }
        return true
    }

    /// Where to start reading each partition.
    public func startOffsets(_ partitions: [TopicPartition]) -> [TopicPartitionOffset] {
        partitions.filter { self.partitions?.contains($0.partition) ?? true }
            .map { TopicPartitionOffset($0.topic, $0.partition, offset: fromOffset ?? TopicPartitionOffset.beginning) }
    }

    /// Where to stop (exclusive), when an offset range ends.
    public func stopOffsets(_ partitions: [TopicPartition]) -> [TopicPartition: Int64] {
        guard let toOffset else { return [:] }
        return Dictionary(uniqueKeysWithValues: partitions.map { ($0, toOffset) })
    }
}

/// Spaces records out: a fixed rate, or the original gaps between their timestamps.
public struct Pacer: Sendable {
    public enum Mode: Sendable, Hashable {
        case unlimited
        case perSecond(Double)
        case original
    }

    public var mode: Mode
    private var lastTimestamp: Int64?

    public init(_ mode: Mode) { self.mode = mode }

    /// How long to wait before sending this record.
    public mutating func delay(before record: ConsumerRecord) -> Duration {
        switch mode {
        case .unlimited:
            return .zero
        case .perSecond(let rate):
            // A rate so low that the wait does not fit in Int64 nanoseconds waits as long as one can.
            let nanoseconds = (1e9 / rate).rounded(.down)
            guard nanoseconds.isFinite, nanoseconds < 0x1p63 else { return nanoseconds > 0 ? .nanoseconds(Int64.max) : .zero }
            return .nanoseconds(Int64(max(0, nanoseconds)))
        case .original:
            defer { lastTimestamp = record.timestamp ?? lastTimestamp }
            guard let last = lastTimestamp, let ts = record.timestamp, ts > last else { return .zero }
            // Timestamps come from the records: their gap may not fit in Int64.
            let (gap, overflow) = ts.subtractingReportingOverflow(last)
            return .milliseconds(overflow ? Int64.max : gap)
        }
    }
}

extension ConsumerRecord {
    /// The same record for another topic: key, value, headers and timestamp kept; the
    /// partitioner chooses the partition (by key).
    public func replayed(to topic: String, keepPartition: Bool = false) -> ProducerRecord {
        ProducerRecord(topic: topic, partition: keepPartition ? partition : nil, key: key, value: value, headers: headers, timestamp: timestamp)
    }
}
