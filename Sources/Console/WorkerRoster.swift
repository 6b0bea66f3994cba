import Foundation
import Kafka
import Operations
import Pipeline

/// The workers as they report themselves (`pipeline.workers`) joined with the groups' members:
/// alive (reported within `silence`), dead (silent longer), and the two mismatches — a member
/// that does not report, and a reporting worker that is not a member.
public struct WorkerRoster: Sendable {
    public struct Row: Sendable, Hashable {
        public var status: WorkerStatus
        public var alive: Bool
        /// nil when the broker does not list the group's members (tansu, for an active group).
        public var isMember: Bool?
    }

    public var rows: [Row]
    /// Members (client ids) of each group that no reporting worker accounts for.
    public var silentMembers: [String: [String]]

    /// Pure: the last status per worker, the groups' member client ids (nil: not listed), now.
    public init(statuses: [WorkerStatus], members: [String: [String]?], now: Int64, silence: Duration) {
        let silenceMs = Int64(silence.asSeconds * 1000)
        rows = statuses.sorted { ($0.stage, $0.host, $0.pid) < ($1.stage, $1.host, $1.pid) }.map { s in
            let listed = members[s.group] ?? nil
            return Row(status: s, alive: now - s.reportedAt <= silenceMs, isMember: listed.map { $0.contains(s.clientID) })
        }
        var silent: [String: [String]] = [:]
        for (group, listed) in members {
            guard let listed else { continue }
            let reporting = Set(statuses.filter { $0.group == group && now - $0.reportedAt <= silenceMs }.map(\.clientID))
            let missing = listed.filter { !reporting.contains($0) }
            if !missing.isEmpty { silent[group] = missing.sorted() }
        }
        silentMembers = silent
    }

    /// Workers alive per stage.
    public func alive(stage: String) -> Int { rows.filter { $0.status.stage == stage && $0.alive }.count }

    /// Outputs per second of a stage's live workers, nil when none reports.
    public func outRate(stage: String) -> Double? {
        let live = rows.filter { $0.status.stage == stage && $0.alive }
        return live.isEmpty ? nil : live.reduce(0) { $0 + $1.status.outRate }
    }

    /// What a stage's live workers reported for their last interval, summed (rates) or
    /// combined (latency: the mean weighted by each worker's input rate, the largest max); nil
    /// when no live worker reports.
    public func figures(stage: String) -> StageFigures? {
        let live = rows.filter { $0.status.stage == stage && $0.alive }.map(\.status)
        guard !live.isEmpty else { return nil }
        var outRates: [String: Double] = [:]
        for s in live { for (topic, rate) in s.outRates ?? [:] { outRates[topic, default: 0] += rate } }
        let timed = live.filter { $0.latencyMeanMs != nil }
        let weight = timed.reduce(0) { $0 + max($1.inRate, 0.001) }
        return StageFigures(
            outRate: live.reduce(0) { $0 + $1.outRate }, outRates: outRates,
            deadLetterRate: live.reduce(0) { $0 + ($1.deadLetterRate ?? 0) }, errorRate: live.reduce(0) { $0 + ($1.errorRate ?? 0) },
            latencyMeanMs: timed.isEmpty ? nil : timed.reduce(0) { $0 + $1.latencyMeanMs! * max($1.inRate, 0.001) } / weight,
            latencyMaxMs: timed.compactMap(\.latencyMaxMs).max())
    }
}

/// A stage's live workers' last reports, combined (``WorkerRoster/figures(stage:)``).
public struct StageFigures: Sendable, Hashable {
    public var outRate: Double
    public var outRates: [String: Double]
    public var deadLetterRate: Double
    public var errorRate: Double
    public var latencyMeanMs: Double?
    public var latencyMaxMs: Double?
}

/// Reads the status topic (without a group): the last status per key, tombstones removing it.
public struct WorkerStatusReader: Sendable {
    public var kafka: KafkaConfiguration
    public var topic: String

    public init(kafka: KafkaConfiguration, topic: String) {
        self.kafka = kafka
        self.topic = topic
    }

    public func read() async throws -> [WorkerStatus] {
        var last: [String: WorkerStatus] = [:]
        var reader = TopicReader(kafka: kafka)
        reader.idleTimeout = .seconds(10)
        let decoder = JSONDecoder()
        // No workers have reported yet when the topic does not exist.
        try await reader.readTopic(topic, orNothing: true) { batch in
            for record in batch {
                guard let key = record.key.map({ String(decoding: $0, as: UTF8.self) }) else { continue }
                if let value = record.value, let status = try? decoder.decode(WorkerStatus.self, from: Data(value)) {
                    last[key] = status
                } else {
                    last[key] = nil
                }
            }
        }
        return Array(last.values)
    }
}
