import Foundation

/// The ranges a number read from a request or a command-line flag must fall in before any
/// arithmetic uses it. The console and `pipelinectl` check the same ones, so an offset the CLI
/// refuses the console refuses too, with the same words.
public enum NumberBounds {
    /// An offset a request or flag names: the offset after it (where a read of it stops) must
    /// exist too, so `Int64.max` is out.
    public static let offset: ClosedRange<Int64> = 0...(Int64.max - 1)
    /// A partition number (Kafka's are Int32).
    public static let partition: ClosedRange<Int64> = 0...Int64(Int32.max)
    /// A shift of committed offsets: 10^15 records either way, more than any partition holds
    /// (a million records a second for 31 years). A committed offset read from the broker plus
    /// a shift is still added with overflow checks (see ``OffsetReset/plan``).
    public static let shift: ClosedRange<Int64> = -1_000_000_000_000_000...1_000_000_000_000_000
    /// Epoch milliseconds from 1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z, the span
    /// ISO-8601 writes. A negative time would reach the broker as ListOffsets' special
    /// timestamps (-1 latest, -2 earliest) instead of a time.
    public static let epochMillis: ClosedRange<Int64> = 0...253_402_300_799_999

    /// A number that is not a whole number in its range, in words: "'…' is not an offset from 0
    /// to 9223372036854775806".
    public struct OutOfRange: Error, Sendable, Hashable, CustomStringConvertible {
        public var text: String
        /// What was expected, with its article: "an offset", "a partition".
        public var what: String
        public var range: ClosedRange<Int64>

        public init(text: String, what: String, range: ClosedRange<Int64>) {
            self.text = text
            self.what = what
            self.range = range
        }

        public var description: String {
            "'\(text)' is not \(what) from \(range.lowerBound) to \(range.upperBound)"
        }
    }

    /// `text` as a whole number in `range` (decimal, an optional sign; anything else, digits
    /// beyond Int64 included, is refused rather than clamped).
    public static func parse(_ text: String, _ range: ClosedRange<Int64>, what: String) throws(OutOfRange) -> Int64 {
        guard let n = Int64(text), range.contains(n) else { throw OutOfRange(text: text, what: what, range: range) }
        return n
    }

    /// `n` if it is in `range`.
    public static func check(_ n: Int64, _ range: ClosedRange<Int64>, what: String) throws(OutOfRange) -> Int64 {
        guard range.contains(n) else { throw OutOfRange(text: String(n), what: what, range: range) }
        return n
    }

    /// A date as epoch ms, if it is in ``epochMillis`` (no trapping conversion of a Double).
    public static func epochMillis(_ date: Date) -> Int64? {
        let ms = (date.timeIntervalSince1970 * 1000).rounded()
        guard ms.isFinite, ms >= Double(epochMillis.lowerBound), ms <= Double(epochMillis.upperBound) else { return nil }
        return Int64(ms)
    }

    /// `a + b`, held at `Int64.min` / `Int64.max` instead of overflowing.
    public static func saturatingAdd(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? (b > 0 ? .max : .min) : sum
    }

    /// `a - b`, held at `Int64.min` / `Int64.max` instead of overflowing.
    public static func saturatingSubtract(_ a: Int64, _ b: Int64) -> Int64 {
        let (difference, overflow) = a.subtractingReportingOverflow(b)
        return overflow ? (b > 0 ? .min : .max) : difference
    }
}
