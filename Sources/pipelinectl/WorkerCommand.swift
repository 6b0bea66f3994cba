import ArgumentParser
import Dispatch
import Foundation
import Logging
import Pipeline
import Push
import Workers
import Thumbnails
import Metrics
import Prometheus
import ServiceLifecycle
import Synchronization
import Kafka

/// `pipelinectl worker STAGE --topology FILE`: one stage of the topology as a long-running
/// member of its consumer group.
struct Worker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run one stage of the topology as a worker process (scale by starting more, up to the partition count).",
        discussion: """
            The worker joins the stage's consumer group, processes its input partitions in order \
            (with per-partition state restored from the stage's changelog topic), produces outputs \
            and dead letters, and commits an input only after everything it caused is delivered.

            SIGTERM or SIGINT stops it gracefully: it stops fetching, delivers what is in flight, \
            checkpoints state, commits and leaves the group within --shutdown-deadline. A second \
            signal exits at once (the inputs since the last commit are read again).

            Examples:
              pipelinectl worker prices-candles --topology topology.yaml \\
                  --bootstrap-server kafka:9092
              KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 pipelinectl worker products-decode \\
                  --topology topology.yaml
            """)

    @Argument(help: "The stage's name in the topology file.") var stage: String
    @Option(help: "The topology file.") var topology = "topology.yaml"
    @Option(help: "Graceful shutdown deadline (e.g. 30s).", transform: { text in
        guard let d = parseDuration(text) else { throw ValidationError("--shutdown-deadline: '\(text)' is not a duration such as 30s or 500ms") }
        return d
    })
    var shutdownDeadline: Duration = .seconds(30)
    @Option(help: "Consumer session timeout (e.g. 10s). Default: librdkafka's (45s); use 2s–6s against the local broker.", transform: { text in
        guard let d = parseDuration(text) else { throw ValidationError("--session-timeout: '\(text)' is not a duration such as 6s") }
        return d
    })
    var sessionTimeout: Duration?
    @Option(help: """
        How long the worker may go without taking its next consumer event (a revocation waiting \
        for stuck outputs, say) before the group takes it out (max.poll.interval.ms; at least the \
        session timeout). Default: librdkafka's (5m).
        """, transform: { text in
        guard let d = parseDuration(text) else { throw ValidationError("--max-poll-interval: '\(text)' is not a duration such as 5m") }
        return d
    })
    var maxPollInterval: Duration?
    @Option(help: """
        How long the producer waits for more outputs to share a request (linger.ms, 0ms to 900s; \
        default: 10ms). Every output waits for it; shorter sends more, smaller requests.
        """, transform: { text in
        guard let d = parseDuration(text), d <= .seconds(900) else {
            throw ValidationError("--linger: '\(text)' is not a duration from 0ms to 900s such as 20ms")
        }
        return d
    })
    var linger: Duration = WorkerSettings.defaultLinger
    @Option(help: "Stop gracefully after processing this many inputs (tests, demos).") var stopAfter: Int?
    @Option(help: "Address of /metrics, /healthz and /readyz (host:port; port 0 picks a free one, logged at start).")
    var metricsAddress = "0.0.0.0:9464"
    @Option(help: "Not ready after this long stuck in a rebalance, failing commits, or lagging without progress.", transform: { text in
        guard let d = parseDuration(text) else { throw ValidationError("--readiness-timeout: '\(text)' is not a duration such as 30s") }
        return d
    })
    var readinessTimeout: Duration = .seconds(30)
    @OptionGroup var connection: RequiredConnection
    @Option(help: "Seconds between librdkafka statistics (the kafka_* metrics and the group state in /readyz).", transform: { text in
        guard let d = parseDuration(text) else { throw ValidationError("--statistics-interval: '\(text)' is not a duration such as 5s") }
        return d
    })
    var statisticsInterval: Duration = .seconds(5)
    @Option(help: "The compacted topic the worker reports its status to, for the console (empty: none).") var statusTopic = WorkerStatus.defaultTopic
    @Option(help: "How often the worker reports its status (default: 5s).", transform: { text in
        guard let d = parseDuration(text), d > .zero else { throw ValidationError("--status-interval: '\(text)' is not a duration such as 5s") }
        return d
    })
    var statusInterval: Duration = .seconds(5)
    @Option(help: "librdkafka debug contexts, e.g. broker,cgrp,fetch (logged at debug level).") var kafkaDebug: String?
    @Option(name: .customShort("X"), parsing: .singleValue, help: "Raw librdkafka property key=value for the worker's clients (repeatable).")
    var properties: [String] = []
    @Option(name: .customLong("allow-network"), help: """
        A thumbnails stage may also fetch from this private network (CIDR, e.g. 10.1.0.0/16 for an internal CDN; repeatable). Private, loopback and metadata addresses are refused otherwise.
        """)
    var allowNetworks: [String] = []
    @Option(help: """
        Exactly-once stages: the producer's transactional.id. Keep it across restarts of one worker (a StatefulSet pod \
        name): a restart then aborts what its predecessor left open. Default: <group>-<instance id> with \
        --instance-id, else <group>-<host name>-<slot>, the lowest slot free on this host (a lock file), which a \
        worker restarted on the same host takes again.
        """)
    var transactionalId: String?
    @Option(help: .hidden) var acknowledgementLog: String?
    @Option(help: "Exactly-once stages: how long a transaction may stay open before the broker aborts it.", transform: { text in
        guard let d = parseDuration(text) else { throw ValidationError("--transaction-timeout: '\(text)' is not a duration such as 60s") }
        return d
    })
    var transactionTimeout: Duration = .seconds(60)
    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        // First of all: a SIGTERM at any moment of the start stops the worker gracefully instead
        // of killing it (the default action), and one that comes before the services run is kept.
        let signals = WorkerSignals.install(escalateAfter: shutdownDeadline + .seconds(5))
        try Preflight.checkRuntime()
        let topology: Topology
        var definition: Topology.Stage
        do {
            topology = try Topology.load(path: self.topology)
            definition = try topology.stage(named: stage)
        } catch {
            throw ValidationError(error.description)
        }
        if !allowNetworks.isEmpty {
            guard definition.rendersThumbnails else {
                throw ValidationError("--allow-network: stage \(stage) fetches nothing (only a thumbnails.render stage does)")
            }
            definition.options.thumbnails.allowNetworks += allowNetworks
        }
        let logger = logging.bootstrap(label: "pipelinectl.worker")
        let health = WorkerHealth(livenessTimeout: max(.seconds(30), readinessTimeout), readinessTimeout: readinessTimeout)
        let endpoint = try metricsEndpoint(metricsAddress, health: health, logger: logger)
        var kafka = try connection.configuration()
        kafka.debugContexts = kafkaDebug.map { $0.split(separator: ",").map(String.init) } ?? []
        kafka.raw = try parseProperties(properties)
        // A client id a group's member list can be matched with the worker's status by.
        if kafka.raw["client.id"] == nil {
            kafka.clientID = WorkerStatus.clientID(stage: definition.name, host: WorkerStatusReporter.hostName, pid: getpid())
        }
        var settings = WorkerSettings(kafka: kafka)
        settings.statisticsInterval = statisticsInterval
        settings.shutdownDeadline = shutdownDeadline
        settings.sessionTimeout = sessionTimeout
        settings.maxPollInterval = maxPollInterval
        settings.heartbeatInterval = sessionTimeout.map { $0 / 6 }
        settings.stopAfterInputs = stopAfter
        settings.linger = linger
        settings.transactionalID = transactionalId
        if let acknowledgementLog {
            do { settings.acknowledgementLog = try AcknowledgementLog(path: acknowledgementLog) } catch {
                throw ValidationError("--acknowledgement-log: \(error)")
            }
        }
        settings.transactionTimeout = transactionTimeout
        // A stage that does I/O is built here, where its module is linked.
        var concurrent: (stage: any ConcurrentTransform, pool: RenderPool?)?
        if definition.rendersThumbnails {
            do {
                let made = try ThumbnailTransform.make(options: definition.options.thumbnails, logger: logger)
                concurrent = (made.stage, made.pool)
            } catch {
                throw ValidationError("\(self.topology): stages.\(definition.name).options.\(error)")
            }
        }
        defer { concurrent?.pool?.shutdown() }
        // A push sender: its ledger of what was sent, read from its `sent` output topic.
        var ledgerService: SentLedgerService?
        // A push sender's HTTP client, closed after the stage.
        var closePushClient: (@Sendable () async -> Void)?
        if definition.sendsPushes {
            let ledger = SentLedger()
            do {
                if definition.chain == [APNsSender.transformName] {
                    let sender = try APNsSender.make(options: definition.options.push, ledger: ledger)
                    closePushClient = sender.shutdown
                    concurrent = (sender, nil)
                } else {
                    let sender = try FCMSender.make(options: definition.options.push, ledger: ledger, concurrency: definition.concurrency)
                    closePushClient = sender.shutdown
                    concurrent = (sender, nil)
                }
            } catch {
                throw ValidationError("\(self.topology): stages.\(definition.name).options.\(error)")
            }
            let window = definition.options.push.ledgerWindowMillis.map { Duration.milliseconds($0) } ?? .seconds(24 * 3600)
            ledgerService = SentLedgerService(ledger: ledger, topic: definition.topic(forOutput: "sent"), kafka: kafka, window: window, logger: logger)
        }
        let service = try StageService(
            definition: definition, topology: topology, settings: settings, health: health, logger: logger, concurrent: concurrent?.stage)

        let group = ServiceGroup(
            // Shutdown runs in reverse: the stage stops first, the endpoint last.
            // A stage that stops by itself (--stop-after) shuts the group down gracefully.
            // Signals come through `signals`, installed before anything else.
            configuration: .init(
                services: [.init(service: endpoint)]
                    + (statusTopic.isEmpty ? [] : [.init(
                        service: WorkerStatusReporter(service: service, topic: statusTopic, interval: statusInterval, kafka: kafka, logger: logger),
                        successTerminationBehavior: .ignore, failureTerminationBehavior: .ignore)])
                    + (ledgerService.map { [.init(service: $0, successTerminationBehavior: .ignore)] } ?? [])
                    + [.init(service: service, successTerminationBehavior: .gracefullyShutdownGroup)],
                logger: logger))
        signals.attach(logger: logger) { Task { await group.triggerGracefulShutdown() } }
        do { try await group.run() } catch {
            await closePushClient?()
            throw error
        }
        await closePushClient?()
    }
}

extension Topology.Stage {
    /// Whether this stage is the thumbnail worker (its I/O stage is built here, where the
    /// Thumbnails module is linked).
    var rendersThumbnails: Bool { chain == [ThumbnailTransform.transformName] }

    /// Whether this stage sends push notifications (FCM or APNs; built here, where Push is linked).
    var sendsPushes: Bool { chain == [FCMSender.transformName] || chain == [APNsSender.transformName] }
}

/// SIGTERM and SIGINT for a worker, handled from the first moment of its run: the first one
/// begins a graceful stop (at once if the services run, or as soon as they are attached), and
/// exits with status 1 if the stop overruns `escalateAfter`; a second one exits at once.
// @unchecked: the Dispatch sources are immutable after init and thread-safe; the rest is in a Mutex.
final class WorkerSignals: @unchecked Sendable {
    private struct State {
        var received = 0
        var logger: Logger?
        var stop: (@Sendable () -> Void)?
    }

    let escalateAfter: Duration
    private let sources: [DispatchSourceSignal]
    private let queue = DispatchQueue(label: "worker-signals")
    private let state = Mutex(State())

    private init(escalateAfter: Duration) {
        self.escalateAfter = escalateAfter
        self.sources = [SIGTERM, SIGINT].map { DispatchSource.makeSignalSource(signal: $0, queue: DispatchQueue(label: "signal")) }
    }

    /// Takes over SIGTERM and SIGINT (their default action would end the process).
    static func install(escalateAfter: Duration) -> WorkerSignals {
        let signals = WorkerSignals(escalateAfter: escalateAfter)
        for (source, sig) in zip(signals.sources, [SIGTERM, SIGINT]) {
            signal(sig, SIG_IGN)
            source.setEventHandler { [signals] in signals.received(sig) }
            source.resume()
        }
        return signals
    }

    /// From now on a signal logs here and runs `stop`; one that came before runs it now.
    func attach(logger: Logger, stop: @escaping @Sendable () -> Void) {
        let earlier = state.withLock { s in
            s.logger = logger
            s.stop = stop
            return s.received
        }
        if earlier > 0 {
            logger.info("a signal came while the worker was starting: stopping gracefully")
            stop()
        }
    }

    private func received(_ sig: Int32) {
        let (n, logger, stop) = state.withLock { s in
            s.received += 1
            return (s.received, s.logger, s.stop)
        }
        if n == 1 {
            logger?.info("signal \(sig): stopping gracefully (a second signal exits at once)")
            stop?()
            queue.asyncAfter(deadline: .now() + escalateAfter.asSeconds) {
                logger?.error("graceful shutdown did not finish within its deadline: exiting")
                exit(1)
            }
        } else {
            logger?.warning("second signal \(sig): exiting now")
            exit(128 + sig)
        }
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
