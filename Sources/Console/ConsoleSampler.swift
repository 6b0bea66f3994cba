import Foundation
import Kafka
import Logging
import Metrics
import Operations
import Pipeline
import ServiceLifecycle
import Synchronization

/// One partition of a stage's input, as the stage page shows it: its lag and its verdict in words.
public struct PartitionRow: Sendable, Codable, Hashable {
    public var lag: PartitionLag
    public var reason: String
}

/// One stage of the topology, as sampled last: `lag` computes the same (Operations' LagProbe and
/// LagEvaluator, Burrow's rules), from the committed offsets without joining the group.
public struct StageRow: Sendable, Codable, Hashable {
    public var stage: String
    public var group: String
    public var inputs: [String]
    /// Members of the group; nil when the broker does not say (tansu answers an active group's
    /// DescribeGroups without members).
    public var members: Int?
    /// Input partitions the group has committed on.
    public var partitions: Int
    public var lagRecords: Int64
    /// How long ago the log end passed the committed offsets (the longest of the partitions:
    /// ``PartitionLag/lagSeconds``); nil until two samples can say.
    public var lagSeconds: Double?
    /// Records committed per second, summed over the partitions, since the last sample.
    public var inRate: Double
    /// Records arriving per second (log end advancing).
    public var arrivalRate: Double
    /// Outputs per second, as the stage's live workers report it (nil when none reports).
    public var outRate: Double?
    /// At the current net rate; nil when the lag is not falling (0 when caught up).
    public var secondsToDrain: Double?
    /// The worst partition's status (OK, WARN, STALL, STOP, REWIND, ERR) and why, in words.
    public var status: String
    public var reason: String
    public var partitionRows: [PartitionRow]
    /// Epoch ms of the sample; nil before the first.
    public var sampledAt: Int64?
    public var error: String?

    var severity: Int { PartitionLagStatus(rawValue: status)?.severity ?? (error == nil ? -1 : 6) }
}

/// What the console knows: the stages' last sample and their history. Shared by the sampler
/// (writes) and the pages (read). Its health: live always; ready once every stage was sampled.
public final class ConsoleState: HealthReporting {
    private struct State {
        var rows: [String: StageRow] = [:]
        var history = LagHistory()
        var roster = WorkerRoster(statuses: [], members: [:], now: 0, silence: .seconds(30))
    }

    private let state = Mutex(State())
    public let topology: Topology

    public init(topology: Topology) {
        self.topology = topology
        state.withLock { s in
            for stage in topology.stages {
                s.rows[stage.name] = StageRow(
                    stage: stage.name, group: stage.group, inputs: stage.inputs, members: nil, partitions: 0, lagRecords: 0,
                    lagSeconds: nil, inRate: 0, arrivalRate: 0, outRate: nil, secondsToDrain: nil, status: "", reason: "not sampled yet",
                    partitionRows: [], sampledAt: nil, error: nil)
            }
        }
    }

    /// A stage whose workers report counts its live reporting workers; others keep the
    /// group's member count (nil when the broker does not list members). Records waiting while
    /// none of its workers is alive are at least WARN at once ("keeping up" says nothing when
    /// nobody is there to keep up), and STOP once the last report is older than
    /// ``noWorkerStopAfter``: the group's own state may still look active (tansu lists no
    /// members of an active group, and a killed member stays one until its session ends).
    static func withWorkers(_ row: StageRow, _ roster: WorkerRoster, now: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) -> StageRow {
        let reports = roster.rows.filter { $0.status.stage == row.stage }
        guard !reports.isEmpty else { return row }
        var row = row
        row.members = roster.alive(stage: row.stage)
        row.outRate = roster.outRate(stage: row.stage)
        if row.members == 0, row.lagRecords > 0 {
            let last = reports.map(\.status.reportedAt).max() ?? now
            let silent = max(0, now - last)
            let verdict: PartitionLagStatus = silent >= noWorkerStopAfter ? .stop : .warn
            let reason = "no live worker (the last report \(LagVerdict.duration(silent)) ago)"
            if (PartitionLagStatus(rawValue: row.status) ?? .ok) < verdict {
                row.status = verdict.rawValue
                row.reason = "\(reason): \(LagVerdict.grouped(row.lagRecords)) records waiting in all"
            }
            // Each partition with records waiting says the same (the page's table and the metrics).
            for i in row.partitionRows.indices where row.partitionRows[i].lag.lagRecords ?? 0 > 0 && row.partitionRows[i].lag.status < verdict {
                row.partitionRows[i].lag.status = verdict
                row.partitionRows[i].reason = reason
            }
        }
        return row
    }

    /// What the console exports for a stage, per input topic, from the row the page shows
    /// (``withWorkers(_:_:now:)`` applied): the worst partition's status, and the longest lag
    /// in seconds (nil while a partition with records waiting has none: not exported). A stage
    /// whose sample failed is ERR on each of its inputs, as on the page.
    static func gauges(_ row: StageRow) -> [(topic: String, status: PartitionLagStatus, lagSeconds: Double?)] {
        if row.error != nil { return row.inputs.map { ($0, .err, nil) } }
        let byTopic = Dictionary(grouping: row.partitionRows.map(\.lag), by: \.topic)
        return byTopic.keys.sorted().map { topic in
            let parts = byTopic[topic]!
            let unknown = parts.contains { $0.lagRecords ?? 0 > 0 && $0.lagSeconds == nil }
            return (topic, PartitionLagStatus(worstOf: parts.map(\.status)), unknown ? nil : parts.compactMap(\.lagSeconds).max() ?? 0)
        }
    }

    /// How long a stage with records waiting may have no live worker before it is STOP (ms).
    static let noWorkerStopAfter: Int64 = 60_000

    /// Every stage, worst first (then by lag in seconds, then by name).
    public func rows() -> [StageRow] {
        state.withLock { s in
            s.rows.values.map { Self.withWorkers($0, s.roster) }.sorted {
                ($0.severity, $0.lagSeconds ?? 0, $0.lagRecords) != ($1.severity, $1.lagSeconds ?? 0, $1.lagRecords)
                    ? ($0.severity, $0.lagSeconds ?? 0, $0.lagRecords) > ($1.severity, $1.lagSeconds ?? 0, $1.lagRecords)
                    : $0.stage < $1.stage
            }
        }
    }

    public func row(_ stage: String) -> StageRow? { state.withLock { s in s.rows[stage].map { Self.withWorkers($0, s.roster) } } }

    public var roster: WorkerRoster { state.withLock { $0.roster } }

    /// The workers' reports joined with the groups' members.
    func update(roster: WorkerRoster) { state.withLock { $0.roster = roster } }

    public func liveness(now: ContinuousClock.Instant) -> HealthStatus { HealthStatus(ok: true, reason: "ok") }

    public func readiness(now: ContinuousClock.Instant) -> HealthStatus {
        let waiting = state.withLock { $0.rows.values.filter { $0.sampledAt == nil }.count }
        return waiting == 0 ? HealthStatus(ok: true, reason: "ok") : HealthStatus(ok: false, reason: "\(waiting) stages not sampled yet")
    }

    public func history(_ key: String, tier: Int, now: Int64) -> [LagHistory.Point] {
        state.withLock { $0.history.points(key, tier: tier, now: now) }
    }

    /// The history as it is now (to save it), and the one read back at start.
    var history: LagHistory { state.withLock { $0.history } }
    func restore(_ history: LagHistory) { state.withLock { $0.history = history } }

    func update(_ row: StageRow, at time: Int64) {
        state.withLock { s in
            s.rows[row.stage] = row
            guard row.error == nil else { return }
            s.history.record(row.stage, time: time, lagRecords: Double(row.lagRecords), lagSeconds: row.lagSeconds ?? 0,
                             inRate: row.inRate, arrivalRate: row.arrivalRate, workers: s.roster.figures(stage: row.stage))
            for p in row.partitionRows.map(\.lag) {
                s.history.record("\(row.stage)/\(p.topic)/\(p.partition)", time: time, lagRecords: Double(p.lagRecords ?? 0),
                                 lagSeconds: p.lagSeconds ?? 0, inRate: 0, arrivalRate: 0)
            }
        }
    }
}

/// Samples every stage's lag every `interval` and exports the verdicts the page shows as metrics
/// (``ConsoleState/gauges(_:)``), so that Alertmanager and the page agree: `pipeline_consumer_status{group,topic}` (0 OK, 1 WARN,
/// 2 STALL, 3 STOP, 4 REWIND, 5 ERR) and `pipeline_group_lag_seconds{group,topic}`.
public final class ConsoleSampler: Service, Sendable {
    let state: ConsoleState
    let kafka: KafkaConfiguration
    let interval: Duration
    let historyTopic: HistoryTopic
    let saveInterval: Duration
    let statuses: WorkerStatusReader
    let workerSilence: Duration
    let logger: Logger

    public init(
        state: ConsoleState, kafka: KafkaConfiguration, interval: Duration, historyTopic: String, saveInterval: Duration,
        statusTopic: String, workerSilence: Duration, logger: Logger
    ) {
        self.state = state
        self.kafka = kafka
        self.interval = interval
        self.historyTopic = HistoryTopic(topic: historyTopic, kafka: kafka)
        self.saveInterval = saveInterval
        self.statuses = WorkerStatusReader(kafka: kafka, topic: statusTopic)
        self.workerSilence = workerSilence
        self.logger = logger
    }

    /// Reads the saved history back (a console that cannot is still useful: it starts empty).
    private func restoreHistory() async {
        do {
            try await historyTopic.ensure()
            let history = try await historyTopic.load(stages: Set(state.topology.stages.map(\.name)))
            state.restore(history)
            logger.info("history restored", metadata: ["topic": "\(historyTopic.topic)", "series": "\(history.seriesCount)"])
        } catch {
            logger.warning("cannot read the history topic: starting without history", metadata: ["topic": "\(historyTopic.topic)", "error": "\(error)"])
        }
    }

    private func saveHistory(_ producer: KafkaProducer) async {
        do {
            try await historyTopic.save(state.history, with: producer)
        } catch {
            logger.warning("cannot save the history", metadata: ["topic": "\(historyTopic.topic)", "error": "\(error)"])
        }
    }

    struct Previous {
        var committed: Int64
        var logEnd: Int64
        var time: Int64
    }

    public func run() async throws {
        let admin = try KafkaAdmin(configuration: kafka, timeout: .seconds(10))
        var reader = TopicReader(kafka: kafka)
        reader.idleTimeout = .seconds(10)
        let probe = LagProbe(reader: reader)
        var windows: [String: [TopicPartition: CommitWindow]] = [:]
        var previous: [String: [TopicPartition: Previous]] = [:]
        await restoreHistory()
        var producerConfiguration = ProducerConfiguration(kafka: kafka)
        producerConfiguration.acks = .all
        // Replaced when it cannot deliver any more (fenced, its producer id lost).
        let producers = try ProducerSlot(logger: logger) { [producerConfiguration, logger] in
            try KafkaProducer(configuration: producerConfiguration, logger: logger)
        }
        var lastSave = ContinuousClock.now
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            var members: [String: [String]?] = [:]
            // The stages are sampled side by side (each probe mostly waits for the broker), at
            // most `parallelSamples` at once, so that a round stays short with many stages.
            let stages = state.topology.stages
            // Each stage is shown (and exported) as soon as its sample is taken: with a broker
            // that stopped answering, each is ERR after its own timeouts, not after the round's
            // (the example topology's 20 stages, 6 at a time: no ERR within 45 s of a pause).
            func record(_ sample: StageSample) {
                let stage = sample.stage
                windows[stage.name] = sample.window
                switch sample.result {
                case .success(let lag):
                    // Empty with no members: none; no members but another state: the broker does not list them.
                    members[stage.group] = lag.members.isEmpty && lag.state != "Empty" ? .some(nil) : lag.members.map(\.clientID)
                    let row = Self.row(stage, lag: lag, windows: sample.window, previous: &previous[stage.name, default: [:]], now: sample.time)
                    state.update(row, at: sample.time)
                case .failure(let error):
                    var row = state.row(stage.name)!
                    row.error = "\(error)"
                    row.status = PartitionLagStatus.err.rawValue
                    row.reason = "cannot read the group's lag: \(error)"
                    row.sampledAt = sample.time
                    state.update(row, at: sample.time)
                    logger.warning("lag sample failed", metadata: ["stage": "\(stage.name)", "error": "\(error)"])
                }
                if let row = state.row(stage.name) { export(row) }
            }
            await withTaskGroup(of: StageSample.self) { group in
                var next = 0
                func start() {
                    guard next < stages.count, !Task.isShuttingDownGracefully else { return }
                    let stage = stages[next]
                    next += 1
                    let window = windows[stage.name] ?? [:]
                    group.addTask { await Self.sample(stage, probe: probe, admin: admin, window: window) }
                }
                for _ in 0..<Self.parallelSamples { start() }
                for await sample in group {
                    record(sample)
                    start()
                }
            }
            do {
                state.update(roster: WorkerRoster(statuses: try await statuses.read(), members: members,
                                                  now: Int64(Date().timeIntervalSince1970 * 1000), silence: workerSilence))
            } catch {
                logger.warning("cannot read the worker status topic", metadata: ["topic": "\(statuses.topic)", "error": "\(error)"])
            }
            // Exported again with this round's workers' reports.
            for stage in stages { if let row = state.row(stage.name), row.sampledAt != nil { export(row) } }
            if ContinuousClock.now - lastSave >= saveInterval {
                await saveHistory(producers.current())
                lastSave = .now
            }
            try? await cancelWhenGracefulShutdown { [interval] in try await Task.sleep(for: interval) }
        }
        await saveHistory(producers.current())
        await producers.close(deadline: .seconds(10))
        await admin.close()
    }

    static func row(
        _ stage: Topology.Stage, lag: GroupLag, windows: [TopicPartition: CommitWindow], previous: inout [TopicPartition: Previous], now: Int64
    ) -> StageRow {
        let hasMembers = !lag.members.isEmpty || lag.state != "Empty"
        var inRate = 0.0, arrivalRate = 0.0
        var rows: [PartitionRow] = []
        for p in lag.partitions {
            if let before = previous[p.topicPartition], let end = p.logEnd, now > before.time {
                let seconds = Double(now - before.time) / 1000
                inRate += Double(max(0, p.committed - before.committed)) / seconds
                arrivalRate += Double(max(0, end - before.logEnd)) / seconds
            }
            if let end = p.logEnd { previous[p.topicPartition] = Previous(committed: p.committed, logEnd: end, time: now) }
            rows.append(PartitionRow(lag: p, reason: LagVerdict.reason(p, window: windows[p.topicPartition]?.samples ?? [], hasMembers: hasMembers)))
        }
        let worst = lag.partitions.max { ($0.status, $0.lagRecords ?? 0) < ($1.status, $1.lagRecords ?? 0) }
        let total = lag.totalLag
        let net = inRate - arrivalRate
        let members = lag.members.isEmpty && lag.state != "Empty" ? nil : lag.members.count
        return StageRow(
            stage: stage.name, group: stage.group, inputs: stage.inputs, members: members, partitions: lag.partitions.count,
            lagRecords: total, lagSeconds: lag.maxLagSeconds, inRate: inRate, arrivalRate: arrivalRate, outRate: nil,
            secondsToDrain: total == 0 ? 0 : (net > 0 ? Double(total) / net : nil),
            status: worst?.status.rawValue ?? "",
            reason: worst.map { w in
                let text = LagVerdict.reason(w, window: windows[w.topicPartition]?.samples ?? [], hasMembers: hasMembers)
                // Several partitions: the reason is the worst one's, and says which.
                return lag.partitions.count > 1 ? "\(w.topic)[\(w.partition)]: \(text)" : text
            } ?? "no commits yet: the group has consumed nothing",
            partitionRows: rows, sampledAt: now, error: nil)
    }

    /// Stages sampled at once.
    static let parallelSamples = 6

    struct StageSample: Sendable {
        var stage: Topology.Stage
        var window: [TopicPartition: CommitWindow]
        var result: Result<GroupLag, any Error>
        var time: Int64
    }

    static func sample(_ stage: Topology.Stage, probe: LagProbe, admin: KafkaAdmin, window: [TopicPartition: CommitWindow]) async -> StageSample {
        var window = window
        let time = Int64(Date().timeIntervalSince1970 * 1000)
        do {
            let lag = try await probe.groupLag(stage.group, admin: admin, topics: stage.inputs, windows: &window)
            return StageSample(stage: stage, window: window, result: .success(lag), time: time)
        } catch {
            return StageSample(stage: stage, window: window, result: .failure(error), time: time)
        }
    }

    private func export(_ row: StageRow) {
        for gauge in ConsoleState.gauges(row) {
            Gauge(label: ConsoleMetricName.consumerStatus, dimensions: [("group", row.group), ("topic", gauge.topic)]).record(Double(gauge.status.severity))
            if let seconds = gauge.lagSeconds {
                Gauge(label: ConsoleMetricName.groupLagSeconds, dimensions: [("group", row.group), ("topic", gauge.topic)]).record(seconds)
            }
        }
    }
}

public enum ConsoleMetricName {
    /// `{group, topic}`: Burrow's status as a number (0 OK, 1 WARN, 2 STALL, 3 STOP, 4 REWIND, 5 ERR).
    public static let consumerStatus = "pipeline_consumer_status"
    /// `{group, topic}`: the largest lag in seconds of the group's partitions of the topic.
    public static let groupLagSeconds = "pipeline_group_lag_seconds"
}
