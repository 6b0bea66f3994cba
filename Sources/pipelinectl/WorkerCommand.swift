import ArgumentParser
import Dispatch
import Foundation
import Logging
import Pipeline
import ServiceLifecycle
import Synchronization

/// `pipelinectl worker STAGE --topology FILE`: one stage of the topology as a long-running
/// member of its consumer group.
struct Worker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run one stage of the topology as a worker process (scale by starting more, up to the partition count).",
        discussion: """
            The worker joins the stage's consumer group, processes its input partitions in order
            (with per-partition state restored from the stage's changelog topic), produces outputs
            and dead letters, and commits an input only after everything it caused is delivered.

            SIGTERM or SIGINT stops it gracefully: it stops fetching, delivers what is in flight,
            checkpoints state, commits and leaves the group within --shutdown-deadline. A second
            signal exits at once (the inputs since the last commit are read again).

            Examples:
              pipelinectl worker prices-candles --topology topology.yaml --bootstrap-server kafka:9092
              KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 pipelinectl worker products-decode --topology topology.yaml
            """)

    @Argument(help: "The stage's name in the topology file.") var stage: String
    @Option(help: "The topology file.") var topology = "topology.yaml"
    @Option(name: .customLong("bootstrap-server"), help: "Kafka bootstrap servers, host:port[,host:port] (default: $KAFKA_BOOTSTRAP_SERVERS).")
    var bootstrapServer: String?
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
    @Option(help: "Stop gracefully after processing this many inputs (tests, demos).") var stopAfter: Int?
    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.") var logLevel: Logger.Level = .info

    func bootstrapServers() throws -> [String] {
        guard let list = bootstrapServer ?? ProcessInfo.processInfo.environment["KAFKA_BOOTSTRAP_SERVERS"] else {
            throw ValidationError("--bootstrap-server is required (or set KAFKA_BOOTSTRAP_SERVERS)")
        }
        try validateServers(list)
        return parseServers(list)
    }

    func run() async throws {
        try Preflight.checkRuntime()
        let servers = try bootstrapServers()
        let topology: Topology
        let definition: Topology.Stage
        do {
            topology = try Topology.load(path: self.topology)
            definition = try topology.stage(named: stage)
        } catch {
            throw ValidationError(error.description)
        }
        var logger = Logger(label: "pipelinectl.worker")
        logger.logLevel = logLevel
        var settings = WorkerSettings(bootstrapServers: servers)
        settings.shutdownDeadline = shutdownDeadline
        settings.sessionTimeout = sessionTimeout
        settings.heartbeatInterval = sessionTimeout.map { $0 / 6 }
        settings.stopAfterInputs = stopAfter
        let service = try StageService(definition: definition, topology: topology, settings: settings, logger: logger)

        let signals = SignalEscalation(deadline: shutdownDeadline + .seconds(5), logger: logger)
        signals.install()
        let group = ServiceGroup(
            configuration: .init(services: [service], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }
}

/// After the first SIGTERM/SIGINT (which the service group turns into a graceful shutdown): a
/// second signal exits at once, and a shutdown that overruns its deadline exits with status 1.
// @unchecked: every stored property is immutable after init except `count` (a Mutex); Dispatch
// sources are thread-safe.
final class SignalEscalation: @unchecked Sendable {
    let deadline: Duration
    let logger: Logger
    private let sources: [DispatchSourceSignal]
    private let queue = DispatchQueue(label: "signal-escalation")
    private let count = Mutex(0)

    init(deadline: Duration, logger: Logger) {
        self.deadline = deadline
        self.logger = logger
        self.sources = [SIGTERM, SIGINT].map { DispatchSource.makeSignalSource(signal: $0, queue: DispatchQueue(label: "signal")) }
    }

    func install() {
        for (source, sig) in zip(sources, [SIGTERM, SIGINT]) {
            signal(sig, SIG_IGN)
            source.setEventHandler { [self] in received(sig) }
            source.resume()
        }
    }

    private func received(_ sig: Int32) {
        let n = count.withLock { c in
            c += 1
            return c
        }
        if n == 1 {
            logger.info("signal \(sig): stopping gracefully (a second signal exits at once)")
            let seconds = Double(deadline.components.seconds) + Double(deadline.components.attoseconds) / 1e18
            queue.asyncAfter(deadline: .now() + seconds) { [logger] in
                logger.error("graceful shutdown did not finish within its deadline: exiting")
                exit(1)
            }
        } else {
            logger.warning("second signal \(sig): exiting now")
            exit(128 + sig)
        }
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
