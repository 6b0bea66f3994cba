/// Lag and rates over time, in Karafka's three tiers: 5 s points for 5 minutes, 1 min points
/// for an hour, 30 min points for a day. Each tier is a ring of fixed size per series, so memory
/// is bounded: (60 + 60 + 48) points of 120 bytes per series, 20 KB per stage or partition.
/// Pure: times are passed in.
public struct LagHistory: Sendable {
    public struct Point: Sendable, Hashable, Codable {
        /// Start of the point's interval, epoch ms.
        public var time: Int64
        public var lagRecords: Double
        public var lagSeconds: Double
        /// Records consumed (committed) per second.
        public var inRate: Double
        /// Records arriving (log end advancing) per second.
        public var arrivalRate: Double
        /// As the stage's live workers reported (nil with no live worker, and in history saved
        /// before these were kept): outputs, dead letters and errors per second, and the
        /// end-to-end latency (ms, the mean and the largest).
        public var outRate: Double?
        public var deadLetterRate: Double?
        public var errorRate: Double?
        public var latencyMeanMs: Double?
        public var latencyMaxMs: Double?
    }

    public struct Tier: Sendable, Hashable {
        public var name: String
        /// Milliseconds per point.
        public var resolution: Int64
        public var capacity: Int
    }

    public static let tiers = [
        Tier(name: "5m", resolution: 5_000, capacity: 60),
        Tier(name: "1h", resolution: 60_000, capacity: 60),
        Tier(name: "24h", resolution: 1_800_000, capacity: 48),
    ]

    /// Per series, per tier: points oldest first, at most the tier's capacity.
    private var series: [String: [[Point]]] = [:]

    public init() {}

    public var seriesCount: Int { series.count }

    public var keys: [String] { Array(series.keys) }

    /// One series' points, every tier (what the history topic stores per key).
    public func snapshot(_ key: String) -> [[Point]]? { series[key] }

    /// Puts back a series read from the history topic (tiers cut to their capacity).
    public mutating func restore(_ key: String, tiers: [[Point]]) {
        guard tiers.count == Self.tiers.count else { return }
        series[key] = zip(tiers, Self.tiers).map { points, tier in Array(points.sorted { $0.time < $1.time }.suffix(tier.capacity)) }
    }

    /// Records an observation of `key` at `time`: each tier keeps the last observation of each of
    /// its intervals (lag is a level, so the latest value stands for the interval).
    public mutating func record(
        _ key: String, time: Int64, lagRecords: Double, lagSeconds: Double, inRate: Double, arrivalRate: Double, workers: StageFigures? = nil
    ) {
        var tiers = series[key] ?? Array(repeating: [], count: Self.tiers.count)
        for (i, tier) in Self.tiers.enumerated() {
            let start = time - time % tier.resolution
            let point = Point(
                time: start, lagRecords: lagRecords, lagSeconds: lagSeconds, inRate: inRate, arrivalRate: arrivalRate,
                outRate: workers?.outRate, deadLetterRate: workers?.deadLetterRate, errorRate: workers?.errorRate,
                latencyMeanMs: workers?.latencyMeanMs, latencyMaxMs: workers?.latencyMaxMs)
            if let last = tiers[i].last, last.time == start {
                // The workers' figures of the interval: the latest one any observation had (an
                // observation without, such as no input settled since the last report, does
                // not erase it).
                var merged = point
                merged.outRate = point.outRate ?? last.outRate
                merged.deadLetterRate = point.deadLetterRate ?? last.deadLetterRate
                merged.errorRate = point.errorRate ?? last.errorRate
                merged.latencyMeanMs = point.latencyMeanMs ?? last.latencyMeanMs
                merged.latencyMaxMs = point.latencyMaxMs ?? last.latencyMaxMs
                tiers[i][tiers[i].count - 1] = merged
            } else if tiers[i].last.map({ $0.time < start }) ?? true {
                tiers[i].append(point)
                if tiers[i].count > tier.capacity { tiers[i].removeFirst(tiers[i].count - tier.capacity) }
            }
        }
        series[key] = tiers
    }

    /// The points of `key` in tier `tier` (an index of ``tiers``), oldest first, within the
    /// tier's span before `now`.
    public func points(_ key: String, tier: Int, now: Int64) -> [Point] {
        guard let tiers = series[key], tiers.indices.contains(tier) else { return [] }
        let t = Self.tiers[tier]
        let oldest = now - t.resolution * Int64(t.capacity)
        return tiers[tier].filter { $0.time >= oldest }
    }
}
