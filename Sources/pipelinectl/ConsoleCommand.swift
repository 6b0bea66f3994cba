import ArgumentParser
import Console
import Foundation
import Kafka
import Logging
import Metrics
import Operations
import Pipeline
import Prometheus
import ServiceLifecycle

/// `pipelinectl console`: the operators' web page over the pipeline of a topology.
struct ConsoleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "console",
        abstract: "Serve the operator console: every stage's lag and verdict with history, and the dead letters.",
        discussion: """
            A web page for the pipeline of --topology: one row per stage, worst first, with its \
            workers, partitions, arrival, in and out rates, lag in records and in seconds, time \
            to drain, a sparkline of the last hour and Burrow's verdict with the reason in words \
            (what `pipelinectl lag` computes, sampled every --sample-interval without joining the \
            groups); a page per stage with its history (5 s points for 5 minutes, 1 min for an \
            hour, 30 min for a day; kept across restarts in --history-topic) and partitions; the dead letters grouped by stage, reason, \
            field and origin topic, filtered, and each one in full (key, value, headers; text \
            escaped, invalid UTF-8 marked). A selection of dead letters can be redriven to their \
            origin: a preview first (how many records to which topic and partition, how many \
            exceed --max-redrives, the equivalent `pipelinectl dlq redrive`), then the redrive; \
            each is recorded in --audit-topic and listed under Redrives. --read-only hides the \
            actions. The overview updates itself every 5 s, but not while \
            text is selected or a form is in use.

            It listens on 127.0.0.1 by default. Listening elsewhere needs tokens (never a flag): \
            named ones with roles from --tokens-file (lines `name: token role`, role viewer or \
            operator; a viewer sees every page and can act on none), or one operator token from \
            --token-file or $PIPELINE_CONSOLE_TOKEN. Requests then carry a token as \
            `Authorization: Bearer TOKEN` or sign in at /login (a session of 12 hours in an \
            HttpOnly, SameSite=Strict cookie that holds nothing of the token; Sign out ends it). \
            The redrive log and the log name the token's owner. Every page is sent with a strict \
            Content-Security-Policy.

            Only requests whose Host is localhost, a loopback address, the --listen address or a \
            name given with --allowed-host are answered (421 otherwise: DNS rebinding). A form \
            post must carry the page's CSRF token and come from the console's own pages (Origin, \
            or Sec-Fetch-Site same-origin), or it is refused with 403.

            The verdicts are also metrics on --metrics-address, so alerts and the page agree:
            pipeline_consumer_status{group,topic} (0 OK, 1 WARN, 2 STALL, 3 STOP, 4 REWIND, 5 ERR) \
            and pipeline_group_lag_seconds{group,topic}.

            Examples:
              pipelinectl console --topology topology.yaml --bootstrap-server kafka:9092
              PIPELINE_CONSOLE_TOKEN=… pipelinectl console --listen 0.0.0.0:8090
              # behind a proxy on this host
              pipelinectl console --allowed-host console.example.org
            """)

    @Option(help: "The topology file.") var topology = "topology.yaml"
    @Option(help: "Where to listen (host:port; port 0 picks a free one, logged at start).") var listen = "127.0.0.1:8090"
    @Option(help: "The token file (one line) required when --listen is not a loopback address. Default: $PIPELINE_CONSOLE_TOKEN.")
    var tokenFile: String?
    @Option(help: "Named tokens with roles, one per line: `name: token role` (viewer or operator). Instead of --token-file.")
    var tokensFile: String?
    @Option(name: .customLong("allowed-host"), help: ArgumentHelp(
        "A name or address the console is reached by, besides localhost, the loopback addresses and --listen's (repeatable).",
        valueName: "name"))
    var allowedHosts: [String] = []
    @Option(help: "Time between lag samples of every stage (default: 5s).", transform: Ingest.Upbit.duration("--sample-interval"))
    var sampleInterval: Duration = .seconds(5)
    @Option(help: "The newest dead letters read per partition of each dead-letter topic.") var deadLettersPerPartition = 10_000
    @Flag(help: "No actions: no redrive forms, every POST but /login refused.") var readOnly = false
    @Option(help: "Leave dead letters that were redriven this many times already.") var maxRedrives = 3
    @Option(help: "The topic of the redrive log (created if missing).") var auditTopic = "pipeline.console.redrives"
    @Option(help: "The compacted topic the lag history is kept in across restarts (created if missing).") var historyTopic = "pipeline.console.history"
    @Option(help: "How often the history is saved (default: 60s; also at a graceful stop).", transform: Ingest.Upbit.duration("--history-save-interval"))
    var historySaveInterval: Duration = .seconds(60)
    @Option(help: "The topic the workers report their status to.") var statusTopic = WorkerStatus.defaultTopic
    @Option(help: "A worker silent for this long is shown dead (default: 30s).", transform: Ingest.Upbit.duration("--worker-silence"))
    var workerSilence: Duration = .seconds(30)
    @Option(help: "Address of /metrics, /healthz and /readyz (host:port; port 0 picks a free one, logged at start).")
    var metricsAddress = "127.0.0.1:9467"
    @OptionGroup var connection: RequiredConnection
    @OptionGroup var logging: LoggingOptions

    func listenAddress() throws -> (host: String, port: Int) { try parseListen(listen, example: "127.0.0.1:8090") }

    func token() throws -> String? {
        if let tokenFile {
            guard let text = try? String(contentsOfFile: tokenFile, encoding: .utf8) else { throw ValidationError("--token-file: cannot read '\(tokenFile)'") }
            let token = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard token.count >= 16 else { throw ValidationError("--token-file: the token in '\(tokenFile)' is shorter than 16 characters") }
            return token
        }
        if let token = ProcessInfo.processInfo.environment["PIPELINE_CONSOLE_TOKEN"], !token.isEmpty {
            guard token.count >= 16 else { throw ValidationError("PIPELINE_CONSOLE_TOKEN is shorter than 16 characters") }
            return token
        }
        return nil
    }

    /// Who may use the console: `--tokens-file`, else the one token, else nobody needs one.
    func access() throws -> ConsoleAccess {
        if let tokensFile {
            guard tokenFile == nil else { throw ValidationError("--tokens-file and --token-file: give one of them") }
            guard let text = try? String(contentsOfFile: tokensFile, encoding: .utf8) else { throw ValidationError("--tokens-file: cannot read '\(tokensFile)'") }
            do { return try ConsoleAccess.parse(tokensFile: text, source: tokensFile) } catch { throw ValidationError("--tokens-file: \(error.description)") }
        }
        return try token().map { ConsoleAccess.single($0) } ?? .open
    }

    func validate() throws {
        let (host, _) = try listenAddress()
        if try !access().requiresToken, !ConsoleSettings.isLoopback(host) {
            throw ValidationError("--listen \(listen) is not a loopback address: give tokens with --tokens-file, --token-file or PIPELINE_CONSOLE_TOKEN (never a flag), or listen on 127.0.0.1")
        }
        for name in allowedHosts where HostPolicy.normalize(name) == nil {
            throw ValidationError("--allowed-host: '\(name)' is not a host name or an IP address (no scheme, port or path), e.g. console.example.org")
        }
        if deadLettersPerPartition <= 0 { throw ValidationError("--dead-letters-per-partition must be positive") }
        if maxRedrives <= 0 { throw ValidationError("--max-redrives must be at least 1, got \(maxRedrives)") }
    }

    func run() async throws {
        let signals = WorkerSignals.install(escalateAfter: .seconds(15))
        try Preflight.checkRuntime()
        let logger = logging.bootstrap(label: "pipelinectl.console")
        let topology: Topology
        do { topology = try Topology.load(path: self.topology) } catch { throw ValidationError(error.description) }
        let state = ConsoleState(topology: topology)
        let endpoint = try metricsEndpoint(metricsAddress, health: state, logger: logger)
        var settings = ConsoleSettings()
        (settings.host, settings.port) = try listenAddress()
        settings.access = try access()
        settings.allowedHosts = allowedHosts
        settings.deadLettersPerPartition = Int64(deadLettersPerPartition)
        settings.readOnly = readOnly
        settings.maxRedrives = maxRedrives
        settings.auditTopic = auditTopic
        settings.workerSilence = workerSilence
        let service = try ConsoleService(settings: settings, state: state, kafka: connection.kafka, logger: logger)
        let sampler = ConsoleSampler(
            state: state, kafka: connection.kafka, interval: sampleInterval, historyTopic: historyTopic, saveInterval: historySaveInterval,
            statusTopic: statusTopic, workerSilence: workerSilence, logger: logger)
        let group = ServiceGroup(configuration: .init(
            services: [.init(service: endpoint), .init(service: sampler), .init(service: service)], logger: logger))
        signals.attach(logger: logger) { Task { await group.triggerGracefulShutdown() } }
        try await group.run()
    }
}
