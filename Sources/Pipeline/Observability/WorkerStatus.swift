import Foundation
import Synchronization
import Kafka
import Logging
import ServiceLifecycle

/// What a worker process reports about itself every few seconds to the status topic
/// (`pipeline.workers`, compacted, keyed `host/pid/stage`), as Karafka's processes do: the
/// console joins it with the group's membership. A worker that stops gracefully writes a
/// tombstone for its key; one that dies goes silent.
public struct WorkerStatus: Sendable, Codable, Hashable {
    public var stage: String
    public var group: String
    public var version: String
    public var host: String
    public var pid: Int32
    /// The worker's Kafka client id (what the group's member list shows).
    public var clientID: String
    /// Epoch ms.
    public var startedAt: Int64
    public var reportedAt: Int64
    public var assignedPartitions: Int
    public var inFlightRecords: Int
    public var lagRecords: Int64
    /// Inputs processed and outputs produced per second since the previous report.
    public var inRate: Double
    public var outRate: Double
    public var processed: Int
    public var produced: Int
    public var deadLettered: Int
    public var rssBytes: Int
    public var cpuSeconds: Double
    /// Seconds since the event loop last turned (polls included).
    public var lastLoopTurnAge: Double
    public var lastError: String?
    /// Failed delivery attempts and failed commits (nil from a worker before these fields).
    public var errors: Int?
    /// Since the previous report: dead letters and errors per second, and the end-to-end
    /// latency of the inputs settled (from the input record's timestamp), mean and max in ms.
    public var deadLetterRate: Double?
    public var errorRate: Double?
    public var latencyMeanMs: Double?
    public var latencyMaxMs: Double?
    /// Outputs per second per output topic since the previous report.
    public var outRates: [String: Double]?

    public init(
        stage: String, group: String, version: String, host: String, pid: Int32, clientID: String, startedAt: Int64, reportedAt: Int64,
        assignedPartitions: Int, inFlightRecords: Int, lagRecords: Int64, inRate: Double, outRate: Double, processed: Int, produced: Int, deadLettered: Int,
        rssBytes: Int, cpuSeconds: Double, lastLoopTurnAge: Double, lastError: String?
    ) {
        self.stage = stage
        self.group = group
        self.version = version
        self.host = host
        self.pid = pid
        self.clientID = clientID
        self.startedAt = startedAt
        self.reportedAt = reportedAt
        self.assignedPartitions = assignedPartitions
        self.inFlightRecords = inFlightRecords
        self.lagRecords = lagRecords
        self.inRate = inRate
        self.outRate = outRate
        self.processed = processed
        self.produced = produced
        self.deadLettered = deadLettered
        self.rssBytes = rssBytes
        self.cpuSeconds = cpuSeconds
        self.lastLoopTurnAge = lastLoopTurnAge
        self.lastError = lastError
    }

    public var key: String { "\(host)/\(pid)/\(stage)" }

    /// The client id a worker gives its Kafka clients, so that a group member can be matched
    /// with its status.
    public static func clientID(stage: String, host: String, pid: Int32) -> String { "\(stage)@\(host):\(pid)" }

    public static let defaultTopic = "pipeline.workers"
    public static let version = "1"
}

/// Reports a stage service's status every `interval` (a producer of its own: reporting never
/// holds up the stage; a failed report is logged and tried at the next interval; the worker
/// runs it so that its end, even by an error, does not stop the stage).
public final class WorkerStatusReporter: Service, Sendable {
    let service: StageService
    let topic: String
    let interval: Duration
    let kafka: KafkaConfiguration
    let logger: Logger
    let startedAt = Int64(Date().timeIntervalSince1970 * 1000)

    public init(service: StageService, topic: String, interval: Duration, kafka: KafkaConfiguration, logger: Logger) {
        self.service = service
        self.topic = topic
        self.interval = interval
        self.kafka = kafka
        self.logger = logger
    }

    public static var hostName: String { ProcessInfo.processInfo.hostName }

    public func run() async throws {
        // The stage's connection without --kafka-debug: the report's client should not drown
        // the stage's own debug output.
        var quiet = kafka
        quiet.debugContexts = []
        var configuration = ProducerConfiguration(kafka: quiet)
        configuration.messageTimeout = interval * 2
        // Replaced when it cannot deliver any more (fenced, its producer id lost): a report is
        // not worth stopping the worker for, and a broken producer would fail it for good.
        let producers = try ProducerSlot(logger: logger) { [configuration, logger] in try KafkaProducer(configuration: configuration, logger: logger) }
        var previous = Previous(at: .now)
        var failing = false
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            let status = self.status(previous: &previous)
            do {
                let report = try await producers.current().send(ProducerRecord(topic: topic, key: Array(status.key.utf8), value: Array(try JSONEncoder().encode(status))))
                if let error = report.error { throw error }
                failing = false
            } catch {
                if !failing { logger.warning("cannot report the worker's status", metadata: ["topic": "\(topic)", "error": "\(error)"]) }
                failing = true
            }
            try? await cancelWhenGracefulShutdown { [interval] in try await Task.sleep(for: interval) }
        }
        // Gone, not dead: a tombstone for this worker's key.
        let key = self.status(previous: &previous).key
        _ = try? await producers.current().send(ProducerRecord(topic: topic, key: Array(key.utf8), value: nil))
        await producers.close(deadline: .seconds(5))
    }

    /// The totals of the previous report (rates are the differences over the interval).
    struct Previous {
        var processed = 0
        var produced = 0
        var deadLettered = 0
        var errors = 0
        var producedByTopic: [String: Int] = [:]
        var at: ContinuousClock.Instant
    }

    func status(previous: inout Previous) -> WorkerStatus {
        let progress = service.progress
        let health = service.health.snapshot()
        let processed = progress.processed
        let produced = progress.produced
        let now = ContinuousClock.now
        let seconds = (now - previous.at).asSeconds
        func rate(_ now: Int, _ before: Int) -> Double { seconds > 0 ? Double(max(0, now - before)) / seconds : 0 }
        let latency = service.takeLatency()
        let outRates = progress.producedByTopic.reduce(into: [String: Double]()) { rates, entry in
            rates[entry.key] = rate(entry.value, previous.producedByTopic[entry.key] ?? 0)
        }
        let before = previous
        previous = Previous(processed: processed, produced: produced, deadLettered: progress.deadLettered, errors: progress.errors,
                            producedByTopic: progress.producedByTopic, at: now)
        let host = Self.hostName
        let pid = getpid()
        var status = WorkerStatus(
            stage: service.definition.name, group: service.definition.group, version: WorkerStatus.version, host: host, pid: pid,
            clientID: kafka.clientID ?? WorkerStatus.clientID(stage: service.definition.name, host: host, pid: pid),
            startedAt: startedAt, reportedAt: Int64(Date().timeIntervalSince1970 * 1000), assignedPartitions: health.assigned,
            inFlightRecords: progress.inFlightRecords, lagRecords: health.lagRecords, inRate: rate(processed, before.processed),
            outRate: rate(produced, before.produced), processed: processed, produced: produced, deadLettered: progress.deadLettered,
            rssBytes: Self.rss(), cpuSeconds: Self.cpuSeconds(), lastLoopTurnAge: health.loopAge.asSeconds, lastError: health.lastError)
        status.errors = progress.errors
        status.deadLetterRate = rate(progress.deadLettered, before.deadLettered)
        status.errorRate = rate(progress.errors, before.errors)
        status.latencyMeanMs = latency?.mean
        status.latencyMaxMs = latency?.max
        status.outRates = outRates
        return status
    }

    /// Resident memory from /proc/self/statm (0 where there is none).
    static func rss() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// User + system CPU time of the process.
    static func cpuSeconds() -> Double {
        var usage = rusage()
        guard getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage) == 0 else { return 0 }
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1_000_000
    }
}
