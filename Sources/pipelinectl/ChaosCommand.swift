import ArgumentParser
import Deadlines
import HTTPTesting
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Kafka
import Logging
import Operations
import Pipeline
import Synchronization
import Thumbnails
import Workers

/// `pipelinectl chaos`: runs a stateful stage's workers against a broker while a producer feeds
/// them and a nemesis applies faults drawn from a seed, then reads everything the run left and
/// checks it against an oracle computed from the input.
struct Chaos: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check the worker runtime's guarantees under faults (a Jepsen-style nemesis and checker).",
        discussion: """
            Each seed is one run: a fresh topology of one candle stage (prices.candles, with its \
            changelog), `--workers` `pipelinectl worker` processes, a producer feeding `--ticks` \
            Upbit ticks (5 % garbage) over the fault window, and a nemesis applying faults at \
            random moments drawn from the seed:

              kill            SIGKILL a worker, no waiting for a settled group; a new one starts
              pause           SIGSTOP a worker past its session timeout, then SIGCONT (a zombie)
              join-leave      a worker joins, later leaves with SIGTERM
              outputs-down    the output topic's leader is down for a while (--broker mock only)
              broker-restart  the broker is killed and restarted (--broker local, S3 storage, only)
              producer-fenced the output broker answers produce requests PRODUCER_FENCED: the \
            worker that gets it stops (exit 1) and a new one starts (--broker mock only)
              evict           the outputs' leader is down past the workers' max.poll.interval.ms \
            (the run sets 8 s and the eager protocol) while a worker joins: a member stuck in its \
            revocation is evicted; its checkpoints must never land after the new owner's \
            (--broker mock only)
              slow-upstream   (--workload thumbnails) the image server trickles bodies and leaves \
            requests hanging for a while, and for at least its next 10 requests

            Then everything heals, one tick per market an hour later closes every minute, the run \
            waits until the group's offsets reach the end, stops the workers with SIGTERM, reads \
            every output, dead letter and changelog record (read_committed, past the end) and \
            prints: candles lost, wrong (against candles computed here from the input, not by the \
            stage's code), duplicated and out of order; dead letters of good input, garbage not \
            dead-lettered; whether the offsets reached the end and every changelog key with them; \
            unexpected worker exits. A group that stops being served (tansu wedges a group when a \
            member dies or joins mid-rebalance) is reported as BROKER WEDGED, not as a pass.

            Brokers: `--broker mock` (librdkafka's mock cluster, in this process, on loopback \
            ports), `--broker local` (tansu, started here), or `--bootstrap-server` for any \
            cluster (process faults only; topics and group get a fresh name per run). With \
            `--delivery exactly-once` on a broker that hides aborted transactions (Apache Kafka), \
            duplicates must be 0.

            Retries: `--retries default` runs the workers on the shipping retry policy (the \
            topology's default, librdkafka's message timeout); `--retries low` on 2 attempts of \
            1.5 s, so outputs fail past their attempts during an outage (made 5 s or longer) and go \
            to the dead-letter topic as themselves. After the workers stop, the run redrives every \
            delivery-failed dead letter, as an operator would, and only then checks: every \
            expected candle must be there.

            Workloads: `candles` (the stateful candle stage, checked as above) or `thumbnails` \
            (the I/O thumbnail stage, concurrency 8, fetching small PNGs from a server in this \
            process with a 1 s fetch timeout and 2 attempts): every request must end as \
            thumbnails or as a dead letter, the group's offsets must reach the end (no slow fetch \
            pins a partition), and every worker must stop when told.

            Profiles: `ci` (what the test suite runs: two mock seeds with the process faults and \
            outputs-down, one mock seed with fenced producers and evictions, one mock seed with low \
            retries, one local seed with the faults tansu survives, one thumbnail seed), `long` (ten \
            seeds per broker with every fault, five mock and three local seeds with low retries, \
            longer windows).

            Exit status: 0 every run passed; 1 a run found a violation; 3 no violation, but in a run \
            the broker failed (BROKER WEDGED; BROKER LOST INPUT: records it acknowledged are no \
            longer in the input topic, and the oracle works from what the topic holds; BROKER LOST \
            OUTPUT: candles or dead letters are missing and as many offsets of their topics hold \
            nothing, records the broker took and lost after the workers settled them).

            Examples:
              pipelinectl chaos --profile ci
              pipelinectl chaos --broker mock --seed 7 --faults kill,pause --window 60s
              pipelinectl chaos --bootstrap-server kafka:9092 --delivery exactly-once \\
                  --seed 1 --seed 2
            """)

    enum BrokerKind: String, ExpressibleByArgument, CaseIterable { case mock, local }
    /// What the workers run: the stateful candle stage, or the thumbnail stage (I/O, concurrent)
    /// against an image server that the `slow-upstream` fault slows down.
    enum Workload: String, ExpressibleByArgument, CaseIterable {
        case candles, thumbnails

        func allows(_ fault: ChaosPlan.Fault) -> Bool {
            switch self {
            case .candles: fault != .slowUpstream
            case .thumbnails: [.kill, .pause, .joinLeave, .slowUpstream, .outputsDown].contains(fault)
            }
        }
    }
    enum Profile: String, ExpressibleByArgument, CaseIterable { case ci, long }

    @Option(help: "mock or local: the broker to start. With --bootstrap-server instead, the run uses that cluster, with process faults only.") var broker: BrokerKind?
    @OptionGroup var connection: BootstrapServer<EmbeddedBroker>
    @Option(help: "A seed (repeatable). Default: the profile's.") var seed: [UInt64] = []
    @Option(help: "ci or long: seeds, brokers, faults and windows when not given.") var profile: Profile?
    @Option(help: "Comma-separated faults (see above). Default: every one the broker allows.") var faults: String?
    @Option(help: "How long faults are applied while input flows (e.g. 30s).", transform: { text in
        guard let d = parseDuration(text), d > .zero else { throw ValidationError("--window: '\(text)' is not a duration such as 30s") }
        return d
    })
    var window: Duration?
    @Option(help: "Faults per run (default: one per 5 s of window).") var faultCount: Int?
    @Option(help: "Ticks fed per run (default 12,000).") var ticks: Int?
    @Option(help: "Workers running at the start.") var workers = 2
    @Option(help: "candles (the stateful candle stage) or thumbnails (the I/O thumbnail stage and an image server). Default: the profile's.")
    var workload: Workload?
    @Option(help: "at-least-once or exactly-once.") var delivery = "at-least-once"
    @Option(help: """
        default (the topology's shipping retry policy and librdkafka's message timeout) or low (2 attempts, \
        message.timeout.ms=1500, request.timeout.ms=1000, socket.timeout.ms=3000: outputs fail past their attempts \
        while a fault lasts, are dead-lettered, and the run redrives them before it checks). Default: the profile's.
        """)
    var retries: Chaos.Retries?
    @Option(help: "Report a stall as a wedged broker after this long without progress.", transform: { text in
        guard let d = parseDuration(text), d > .zero else { throw ValidationError("--stall-after: '\(text)' is not a duration such as 60s") }
        return d
    })
    var stallAfter: Duration = .seconds(60)
    @Flag(help: "Go on with the next seed after one that failed the workers (a seed the broker failed never stops the run).") var keepGoing = false
    @Flag(help: "Write every worker's log to a file and name it in the report, also when the run passes.") var keepLogs = false
    @Option(help: "The pipelinectl binary that runs the workers (default: this one), e.g. an older build to compare.")
    var workerBinary: String?

    func validate() throws {
        guard Topology.Delivery(rawValue: delivery) != nil else { throw ValidationError("--delivery: expected at-least-once or exactly-once, found '\(delivery)'") }
        guard workers >= 1 else { throw ValidationError("--workers: at least 1") }
        if let faults {
            for name in faults.split(separator: ",") where ChaosPlan.Fault(rawValue: String(name)) == nil {
                throw ValidationError("--faults: unknown fault '\(name)'; expected: \(ChaosPlan.Fault.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }
        if broker != nil, connection.flag != nil { throw ValidationError("--broker and --bootstrap-server: give one of them") }
        if let workerBinary, !FileManager.default.isExecutableFile(atPath: workerBinary) {
            throw ValidationError("--worker-binary: '\(workerBinary)' is not an executable file")
        }
    }

    /// One run to make: where, which seed, which faults, for how long.
    struct RunSpec {
        var target: ChaosTarget.Kind
        var seed: UInt64
        var faults: [ChaosPlan.Fault]
        var window: Duration
        var faultCount: Int
        var ticks: Int
        var retries: Retries
        var workload: Workload = .candles
    }

    /// The retry configuration a run's workers use.
    enum Retries: String, ExpressibleByArgument, CaseIterable {
        /// No `retry:` in the topology, librdkafka's message timeout: what ships.
        case `default`
        /// 2 attempts of 1.5 s: deliveries fail past their attempts within a fault.
        case low
    }

    func specs() -> [RunSpec] {
        let explicit = faults.map { $0.split(separator: ",").compactMap { ChaosPlan.Fault(rawValue: String($0)) } }
        func make(
            _ kind: ChaosTarget.Kind, seeds: [UInt64], faults defaults: [ChaosPlan.Fault], window defaultWindow: Duration, ticks defaultTicks: Int,
            retries defaultRetries: Retries = .default, workload defaultWorkload: Workload = .candles
        ) -> [RunSpec] {
            let w = window ?? defaultWindow
            let load = workload ?? defaultWorkload
            let allowed = (explicit ?? defaults).filter { kind.allows($0) && load.allows($0) }
            return seeds.map {
                RunSpec(
                    target: kind, seed: $0, faults: allowed, window: w, faultCount: faultCount ?? max(1, Int(w.components.seconds / 5)),
                    ticks: ticks ?? (load == .thumbnails ? defaultTicks / 20 : defaultTicks), retries: retries ?? defaultRetries, workload: load)
            }
        }
        if let bootstrapServer = connection.flag {
            let kind = ChaosTarget.Kind.external(bootstrapServer)
            return make(kind, seeds: seed.isEmpty ? [1, 2, 3] : seed, faults: [.kill, .pause, .joinLeave], window: .seconds(30), ticks: 12_000)
        }
        switch profile {
        case .ci:
            // Tansu wedges a group when a member dies or joins while a rebalance is under way
            // (docs/guarantees.md, "Checking the guarantees"): on it the CI profile restarts the
            // broker and pauses workers; kills and joins run on the mock cluster.
            // One mock seed runs with low retries: outputs-down makes deliveries fail past their
            // attempts, and the run redrives their dead letters before it checks.
            return make(.mock, seeds: seed.isEmpty ? [11, 12] : seed, faults: [.kill, .pause, .joinLeave, .outputsDown], window: .seconds(25), ticks: 10_000)
                + make(.mock, seeds: seed.isEmpty ? [13] : [], faults: [.producerFenced, .evict, .kill], window: .seconds(20), ticks: 8_000)
                + make(.mock, seeds: seed.isEmpty ? [15] : [], faults: [.outputsDown, .kill], window: .seconds(20), ticks: 8_000, retries: .low)
                + make(.local, seeds: seed.isEmpty ? [21] : seed, faults: [.brokerRestart, .pause], window: .seconds(20), ticks: 8_000)
                + make(.mock, seeds: seed.isEmpty ? [31] : [], faults: [.slowUpstream, .kill, .pause], window: .seconds(20), ticks: 8_000, workload: .thumbnails)
        case .long:
            return make(.mock, seeds: seed.isEmpty ? Array(101...110) : seed, faults: ChaosPlan.Fault.allCases, window: .seconds(60), ticks: 30_000)
                + make(.mock, seeds: seed.isEmpty ? Array(111...115) : [], faults: ChaosPlan.Fault.allCases, window: .seconds(60), ticks: 30_000, retries: .low)
                + make(.local, seeds: seed.isEmpty ? Array(201...210) : seed, faults: ChaosPlan.Fault.allCases, window: .seconds(60), ticks: 30_000)
                + make(.local, seeds: seed.isEmpty ? Array(211...213) : [], faults: ChaosPlan.Fault.allCases, window: .seconds(60), ticks: 30_000, retries: .low)
                + make(.mock, seeds: seed.isEmpty ? Array(301...303) : [], faults: ChaosPlan.Fault.allCases, window: .seconds(60), ticks: 30_000, workload: .thumbnails)
                + make(.local, seeds: seed.isEmpty ? Array(311...312) : [], faults: ChaosPlan.Fault.allCases, window: .seconds(60), ticks: 30_000, workload: .thumbnails)
        case nil:
            let kind: ChaosTarget.Kind = broker == .local ? .local : .mock
            return make(kind, seeds: seed.isEmpty ? [1] : seed, faults: ChaosPlan.Fault.allCases, window: .seconds(30), ticks: 12_000)
        }
    }

    func run() async throws {
        try Preflight.checkRuntime()
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = .warning
            return h
        }
        let exactlyOnce = delivery == Topology.Delivery.exactlyOnce.rawValue
        var failed = 0, wedged = 0
        for spec in specs() {
            // Low retries: outages long enough that deliveries fail past their attempts (2 × 1.5 s).
            let plan = ChaosPlan.make(
                seed: spec.seed, window: spec.window, faults: spec.faults, count: spec.faultCount, sessionTimeout: spec.target.sessionTimeout,
                minimumOutage: spec.retries == .low ? .seconds(5) : .seconds(1))
            print("== \(spec.target.name), \(spec.workload == .thumbnails ? "thumbnails, " : "")\(spec.retries == .low ? "low retries, " : "")\(plan)")
            fflush(nil)
            let report: any ChaosVerdict
            do {
                report = try await ChaosRun(
                    spec: spec, plan: plan, workers: workers, exactlyOnce: exactlyOnce, stallAfter: stallAfter,
                    workerBinary: workerBinary ?? ChaosRun.executable, keepLogs: keepLogs
                ).run()
            } catch {
                print("   the run could not complete: \(error)")
                failed += 1
                if !keepGoing { break }
                continue
            }
            print(report.description.split(separator: "\n").map { "   \($0)" }.joined(separator: "\n"))
            print("   \(report.verdict) (\(spec.target.name), seed \(spec.seed))")
            fflush(nil)
            if report.brokerFault { wedged += 1 } else if !report.passed { failed += 1 }
            // A broker's fault (wedged, lost acknowledged records) says nothing against the
            // workers: the next seeds still run, so a profile checks all of its paths.
            if !report.passed, !report.brokerFault, !keepGoing { break }
        }
        if failed > 0 { throw ExitCode(1) }
        if wedged > 0 { throw ExitCode(3) }
    }
}

/// Where a chaos run happens: librdkafka's mock cluster, the local broker, or a given cluster.
struct ChaosTarget {
    enum Kind {
        case mock
        case local
        case external(String)

        var name: String {
            switch self {
            case .mock: "mock cluster"
            case .local: "local broker (tansu)"
            case .external(let servers): servers
            }
        }

        func allows(_ fault: ChaosPlan.Fault) -> Bool {
            switch (self, fault) {
            case (.mock, .brokerRestart), (.local, .outputsDown), (.external, .outputsDown), (.external, .brokerRestart): false
            // Pushed request errors and a broker taken down: the mock cluster's.
            case (.local, .producerFenced), (.external, .producerFenced), (.local, .evict), (.external, .evict): false
            default: true
            }
        }

        /// Tansu answers a join after about half the session timeout: keep it short there.
        var sessionTimeout: Duration {
            if case .local = self { return .seconds(2) }
            return .seconds(6)
        }
    }

    let kind: Kind
    private(set) var bootstrap: String
    private var mock: KafkaMockCluster?
    private var local: LocalBroker?

    /// The output topic's leader on the mock cluster (the others lead everything else).
    static let outputBroker: Int32 = 2

    static func start(_ kind: Kind, topics: [Topology.Topic], outputs: String, group: String, restartable: Bool) async throws -> ChaosTarget {
        switch kind {
        case .mock:
            let mock = try KafkaMockCluster(brokers: 3)
            for t in topics {
                try mock.createTopic(t.name, partitions: t.partitions)
                for p in 0..<t.partitions { mock.setPartitionLeader(t.name, partition: Int32(p), brokerID: t.name == outputs ? outputBroker : 1 + Int32(p % 2) * 2) }
            }
            mock.setCoordinator("group", key: group, brokerID: 1)
            return ChaosTarget(kind: kind, bootstrap: mock.bootstrapServers, mock: mock, local: nil)
        case .local:
            var options = LocalBroker.Options(storage: restartable ? .s3 : .memory)
            options.startTimeout = .seconds(60)
            let broker = try await LocalBroker.start(options)
            try await Self.create(topics, bootstrap: broker.bootstrapServers)
            return ChaosTarget(kind: kind, bootstrap: broker.bootstrapServers, mock: nil, local: broker)
        case .external(let servers):
            try await Self.create(topics, bootstrap: servers)
            return ChaosTarget(kind: kind, bootstrap: servers, mock: nil, local: nil)
        }
    }

    private static func create(_ topics: [Topology.Topic], bootstrap: String) async throws {
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
        for t in topics { try await admin.createTopic(TopicSpec(name: t.name, partitions: t.partitions, config: t.config), ignoreExisting: true) }
        await admin.close()
    }

    func outputs(up: Bool) {
        if up { mock?.setBrokerUp(Self.outputBroker) } else { mock?.setBrokerDown(Self.outputBroker) }
    }

    /// The output topic's broker answers its next produce requests with PRODUCER_FENCED.
    func fenceProducers() {
        mock?.pushRequestErrors(brokerID: Self.outputBroker, apiKey: 0, errorCodes: Array(repeating: 90, count: 3))
    }

    mutating func restartBroker() async throws {
        guard let local else { return }
        self.local = try await local.restart()
    }

    func stop() async {
        await local?.stop()
    }
}

/// Why a run could not complete (not a verdict on the workers).
struct ChaosRunError: Error, CustomStringConvertible {
    let description: String
}

/// One seed's run: broker, workers, producer, nemesis, then the checker.
actor ChaosRun {
    let spec: Chaos.RunSpec
    let plan: ChaosPlan
    let initialWorkers: Int
    let exactlyOnce: Bool
    let stallAfter: Duration
    let workerBinary: String
    let id: String
    let stage: String
    let topics: (input: String, output: String, changelog: String, deadLetters: String)
    private var workers: [ManagedProcess.Handle] = []
    /// Workers stopped for good by the nemesis, and how each had to end.
    private var ended: [(ManagedProcess.Handle, expected: String)] = []
    /// Workers the nemesis killed (their logs go with a failed run's report too).
    private var killed: [ManagedProcess.Handle] = []
    private var paused: Set<pid_t> = []
    /// Workers that stopped because their producer was fenced (and were replaced).
    private var fencedExits = 0
    /// Workers the final SIGTERM reached before they began (see ``stopWorkers()``).
    private var stoppedBeforeStart = 0
    /// Workers whose idempotent producer stopped on the broker's "out of order sequence number"
    /// after a restart of tansu (see ``stopWorkers()``).
    private var desyncedExits: [String] = []
    private var target: ChaosTarget?
    private let topologyPath: String
    /// The thumbnail workload's image server.
    private var images: ChaosImageServer?

    let keepLogs: Bool

    init(spec: Chaos.RunSpec, plan: ChaosPlan, workers: Int, exactlyOnce: Bool, stallAfter: Duration, workerBinary: String, keepLogs: Bool = false) {
        self.keepLogs = keepLogs
        self.workerBinary = workerBinary
        self.spec = spec
        self.plan = plan
        self.initialWorkers = workers
        self.exactlyOnce = exactlyOnce
        self.stallAfter = stallAfter
        id = "\(spec.seed)-\(UInt32.random(in: 0..<UInt32.max) % 100_000)"
        switch spec.workload {
        case .candles:
            stage = "chaos-candles-\(id)"
            topics = ("chaos.raw-\(id)", "chaos.candles-\(id)", "chaos.changelog-\(id)", "chaos.dead-letters-\(id)")
        case .thumbnails:
            stage = "chaos-thumbnails-\(id)"
            topics = ("chaos.thumbnail-requests-\(id)", "chaos.thumbnails-ready-\(id)", "", "chaos.dead-letters-\(id)")
        }
        topologyPath = FileManager.default.temporaryDirectory.appendingPathComponent("chaos-topology-\(id).yaml").path
    }

    static let latenessMillis: Int64 = 5_000

    /// Low retries: a delivery times out after 1.5 s. A request to a broker that went down
    /// mid-flight is given up after 1 s (its socket after 3 s): otherwise an idempotent producer
    /// that must drain its in-flight requests before it bumps its epoch after a timeout waits
    /// for librdkafka's default 60 s socket timeout, and every partition of the worker waits
    /// with it.
    static let lowRetryProperties = ["message.timeout.ms=1500", "request.timeout.ms=1000", "socket.timeout.ms=3000"]

    var topologyYAML: String {
        if spec.workload == .thumbnails {
            return """
                topics:
                  - {name: \(topics.input), partitions: 4}
                  - {name: \(topics.output), partitions: 4}
                  - {name: \(topics.deadLetters), partitions: 1}
                stages:
                  - name: \(stage)
                    chain: [thumbnails.render]
                    inputs: [\(topics.input)]
                    outputs: {thumbnails.ready: \(topics.output)}
                    dead-letter-topic: \(topics.deadLetters)
                    concurrency: 8
                    options:
                      store-directory: \(thumbnailStore)
                      allow-networks: [127.0.0.1/32]
                      fetch-timeout: 1s
                      fetch-attempts: 2
                      fetch-backoff: 100ms
                      render-threads: 1
                """
        }
        return """
        topics:
          - {name: \(topics.input), partitions: 4}
          - {name: \(topics.output), partitions: 4}
          - {name: \(topics.changelog), partitions: 4, config: {cleanup.policy: compact}}
          - {name: \(topics.deadLetters), partitions: 1}
        stages:
          - name: \(stage)
            chain: [prices.candles]
            inputs: [\(topics.input)]
            outputs: {prices.candles.1m: \(topics.output)}
            dead-letter-topic: \(topics.deadLetters)
            changelog: \(topics.changelog)
            delivery: \(exactlyOnce ? "exactly-once" : "at-least-once")
            checkpoint-interval: 200ms
            options: {candle-lateness: \(Self.latenessMillis / 1000)s}\(spec.retries == .low ? "\n    retry: {attempts: 2, initial-backoff: 100ms, max-backoff: 500ms}" : "")
        """
    }

    /// Where the thumbnail workload's workers store thumbnails.
    private var thumbnailStore: String { FileManager.default.temporaryDirectory.appendingPathComponent("chaos-thumbnails-\(id)").path }

    func run() async throws -> any ChaosVerdict {
        try topologyYAML.write(toFile: topologyPath, atomically: true, encoding: .utf8)
        defer {
            try? FileManager.default.removeItem(atPath: topologyPath)
            try? FileManager.default.removeItem(atPath: thumbnailStore)
        }
        let topology = try Topology.load(path: topologyPath)
        target = try await ChaosTarget.start(
            spec.target, topics: topology.topics, outputs: topics.output, group: stage, restartable: spec.faults.contains(.brokerRestart))
        defer { for w in workers + ended.map(\.0) { w.kill() } }
        do {
            let report: any ChaosVerdict = spec.workload == .thumbnails ? try await runThumbnails() : try await runOnBroker()
            await target?.stop()
            return report
        } catch {
            for w in workers { print("   worker \(w.pid):\n\(w.recentOutput(lines: 15))") }
            await target?.stop()
            throw error
        }
    }

    private var bootstrap: String { target!.bootstrap }

    private func runOnBroker() async throws -> ChaosReport {
        for _ in 0..<initialWorkers { try startWorker() }
        // The fault window opens once the group has formed (tansu's first join takes a second).
        try await awaitAssignment()
        let clock = ContinuousClock()
        let windowStart = clock.now
        let producer = try ChaosInputProducer(bootstrap: bootstrap)
        let feed = Task { [topics, spec] () throws -> [ChaosInput] in
            try await Self.feed(producer, topic: topics.input, count: spec.ticks, over: spec.window)
        }
        for step in plan.steps {
            let due = windowStart + step.at
            if clock.now < due { try await Task.sleep(until: due, clock: clock) }
            try await apply(step)
        }
        var inputs = try await feed.value
        try await heal()
        // One tick per market an hour later: every minute of the run closes.
        inputs += try await producer.send(ChaosTick.closing(after: spec.ticks), topic: topics.input)
        await producer.close()
        // What the workers can read: the input topic as it is, each tick where it landed (after a
        // restart tansu can hold less than it acknowledged). The oracle and the ends work from it;
        // what the broker acknowledged and no longer has is the broker's loss.
        let reader = TopicReader(kafka: KafkaConfiguration(bootstrapServers: [bootstrap]))
        let ticks = Dictionary(uniqueKeysWithValues: inputs.map { ($0.tick.id, $0.tick) })
        var ends: [Int32: Int64] = [:]
        let logged = try await Self.readAll(reader, topics.input, partitions: 4).compactMap { r -> ChaosInput? in
            ends[r.partition] = max(ends[r.partition] ?? 0, r.offset + 1)
            guard let id = r.header("input-id").flatMap({ Int(String(decoding: $0, as: UTF8.self)) }), let tick = ticks[id] else { return nil }
            return ChaosInput(tick: tick, partition: r.partition, offset: r.offset)
        }

        var report = ChaosReport()
        let committed = try await awaitOffsets(ends, wedge: &report.wedged)
        report.badExits = await stopWorkers()
        // The operator's part: the faults are over, so every output that failed past its
        // attempts is redriven to where it belonged (they are in the dead-letter topic as
        // themselves). The check then requires every expected candle.
        var redrive = DeadLetterSelection()
        redrive.reasons = [DecodeFailure.Reason.deliveryFailed.rawValue]
        let failedDeliveries = try await Self.readAll(reader, topics.deadLetters, partitions: 1).compactMap(DeadLetterEntry.init).filter(redrive.matches)
        if !failedDeliveries.isEmpty {
            let redriver = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
            let (sent, failures) = try await RedrivePlan(failedDeliveries, maxRedrives: 3).execute(with: redriver)
            await redriver.close()
            if let first = failures.first { throw ChaosRunError(description: "redriving \(failures.count) of \(failedDeliveries.count) dead letters failed: \(first)") }
            report.redriven = sent
        }
        let outputs = try await Self.readAll(reader, topics.output, partitions: 4)
        let deadLetters = try await Self.readAll(reader, topics.deadLetters, partitions: 1)
        let changelog = try await Self.readAll(reader, topics.changelog, partitions: 4)
        let oracle = CandleOracle(logged, latenessMillis: Self.latenessMillis)
        var checked = ChaosChecker.check(
            inputs: logged, oracle: oracle, outputs: outputs, deadLetters: deadLetters, changelog: changelog, committed: committed, ends: ends,
            exactlyOnce: exactlyOnce, zombies: plan.steps.contains { $0.fault == .pause },
            ownersOverlap: !exactlyOnce && plan.steps.contains { $0.fault == .evict })
        checked.inputs(acknowledged: inputs, logged: logged)
        if isLocalBroker {
            // Acknowledged outputs and dead letters the broker no longer holds as they were
            // (gone, or other bytes at their offset): its loss, which leaves no hole when it
            // wrote later records at the lost offsets.
            let acks = AcknowledgementLog.read(path: acknowledgementLogPath)
            checked.outputAcknowledgementsGone = AcknowledgementLog.gone(acks, topic: topics.output, held: outputs)
            checked.deadLetterAcknowledgementsGone = AcknowledgementLog.gone(acks, topic: topics.deadLetters, held: deadLetters)
            try? FileManager.default.removeItem(atPath: acknowledgementLogPath)
        }
        checked.wedged = report.wedged
        checked.badExits = report.badExits
        checked.sequenceExits = desyncedExits
        checked.fencedExits = fencedExits
        checked.stoppedBeforeStart = stoppedBeforeStart
        // What an evicted member's ownership check said before a checkpoint (the worker's log).
        checked.fencedCheckpoints = (killed + ended.map(\.0)).reduce(0) {
            $0 + $1.output().components(separatedBy: "the coordinator no longer counts this worker as the owner").count - 1
        }
        checked.redriven = report.redriven
        if !checked.passed || keepLogs {
            // Every worker's whole log (the killed ones' too), for whoever looks into the failure.
            for w in killed + ended.map(\.0) {
                let log = FileManager.default.temporaryDirectory.appendingPathComponent("chaos-worker-\(id)-\(w.pid).log").path
                if (try? w.output().write(toFile: log, atomically: true, encoding: .utf8)) != nil { checked.workerLogs.append(log) }
            }
        }
        return checked
    }

    /// The thumbnail workload: requests for images on a local server, which `slow-upstream`
    /// slows down; then every request must end as thumbnails or a dead letter, no slow fetch may
    /// pin a partition (the offsets reach the end), and every worker stops when told.
    private func runThumbnails() async throws -> ThumbnailChaosReport {
        let images = try await ChaosImageServer(count: spec.ticks)
        self.images = images
        defer { Task { await images.close() } }
        for _ in 0..<initialWorkers { try startWorker() }
        try await awaitAssignment()
        let clock = ContinuousClock()
        let windowStart = clock.now
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
        let feed = Task { [topics, spec] () throws -> [ThumbnailChaosInput] in
            try await Self.feedRequests(producer, topic: topics.input, count: spec.ticks, over: spec.window, images: images)
        }
        for step in plan.steps {
            let due = windowStart + step.at
            if clock.now < due { try await Task.sleep(until: due, clock: clock) }
            try await apply(step)
        }
        let requests = try await feed.value
        await producer.close()
        try await heal()
        var ends: [Int32: Int64] = [:]
        for r in requests { ends[r.partition] = max(ends[r.partition] ?? 0, r.offset + 1) }
        var wedged: String?
        let committed = try await awaitOffsets(ends, wedge: &wedged)
        let badExits = await stopWorkers()
        let reader = TopicReader(kafka: KafkaConfiguration(bootstrapServers: [bootstrap]))
        let ready = try await Self.readAll(reader, topics.output, partitions: 4)
        // librdkafka's mock cluster keeps 5 MB per partition and drops the oldest batches past
        // it: a log that no longer starts at 0 cannot be checked.
        for p in 0..<4 {
            let first = ready.filter { $0.partition == Int32(p) }.map(\.offset).min()
            if let first, first > 0 {
                throw ChaosRunError(description: "the broker dropped the start of \(topics.output)[\(p)] (first offset \(first); the mock cluster keeps 5 MB per partition): feed fewer requests")
            }
        }
        var report = ThumbnailChaosChecker.check(
            requests: requests, ready: ready,
            deadLetters: try await Self.readAll(reader, topics.deadLetters, partitions: 1), committed: committed, ends: ends)
        report.wedged = wedged
        // This checker does not tell a broker's loss apart: an out-of-order sequence exit fails it.
        report.badExits = badExits + desyncedExits.map { "\($0): exit 1 on the broker's out-of-order sequence" }
        report.fedWhileSlow = images.requestedWhileSlow
        if !report.passed || keepLogs {
            for w in killed + ended.map(\.0) {
                let log = FileManager.default.temporaryDirectory.appendingPathComponent("chaos-worker-\(id)-\(w.pid).log").path
                if (try? w.output().write(toFile: log, atomically: true, encoding: .utf8)) != nil { report.workerLogs.append(log) }
            }
        }
        return report
    }

    /// Stops the running workers (SIGTERM) and waits for every worker that ended to exit as it
    /// had to; returns the exits that did not, each with its log's end (the log goes to a file).
    private func stopWorkers() async -> [String] {
        for w in workers {
            w.terminate()
            ended.append((w, "0"))
        }
        var badExits: [String] = []
        for (w, expected) in ended {
            let status = await Deadline.race(.seconds(30)) { await w.waitForExit() }
            let seen = status.map(String.init) ?? "still running 30 s after it was stopped"
            if seen != expected {
                // The whole log goes to a file; the report names it and quotes the crash or the end.
                let log = FileManager.default.temporaryDirectory.appendingPathComponent("chaos-worker-\(id)-\(w.pid).log").path
                try? w.output().write(toFile: log, atomically: true, encoding: .utf8)
                // Tansu restarted on S3 can lose the last records it acknowledged; the producer's
                // next sequence number then runs ahead of the broker's log, which librdkafka
                // treats as fatal (OUT_OF_ORDER_SEQUENCE_NUMBER) and the worker stops (exit 1).
                // The checker counts such an exit against the broker when the run shows the loss.
                if isLocalBroker, plan.steps.contains(where: { $0.fault == .brokerRestart }), seen == "256",
                    w.output().contains("sequence desynchronization")
                {
                    desyncedExits.append("pid \(w.pid) (log: \(log))")
                    continue
                }
                // A replacement started just before the stop, killed by the SIGTERM's default action
                // before it reached its handlers (between exec and `run`, which installs them first
                // and would exit 0) and before its first log line: it took nothing.
                if status == SIGTERM, w.output().isEmpty {
                    stoppedBeforeStart += 1
                    continue
                }
                // Fenced just before it was stopped (after the last look for fenced workers): as
                // expected as one replaced during the run.
                if let status, stoppedByItsProducer(w, status: status) {
                    fencedExits += 1
                    continue
                }
                let lines = w.output().split(separator: "\n").filter { !$0.contains("dead letter") && !$0.contains("Connect to") }
                let crash = lines.firstIndex { $0.contains("crashed:") || $0.contains("Fatal error") }
                let quoted = crash.map { Array(lines[max(0, $0 - 2)..<min(lines.count, $0 + 25)]) } ?? Array(lines.suffix(15))
                badExits.append("pid \(w.pid): \(seen), expected \(expected) (log: \(log))\n" + quoted.joined(separator: "\n"))
            }
        }
        workers = []
        return badExits
    }

    /// Sends `count` thumbnail requests (one image each, on `images`) spread over `duration`.
    static func feedRequests(
        _ producer: KafkaProducer, topic: String, count: Int, over duration: Duration, images: ChaosImageServer
    ) async throws -> [ThumbnailChaosInput] {
        let chunk = 20
        let chunks = max(1, (count + chunk - 1) / chunk)
        let pause = duration / chunks
        var inputs: [ThumbnailChaosInput] = []
        let clock = ContinuousClock()
        let start = clock.now
        for c in 0..<chunks {
            let requests = (c * chunk..<min(count, (c + 1) * chunk)).map {
                ThumbnailRequest(owner: .product, ownerId: "\($0 / 4)", imageIndex: $0 % 4, sourceURL: images.url(of: $0))
            }
            let reports = try await producer.send(requests.map { ProducerRecord(topic: topic, key: Array($0.recordKey.utf8), value: $0.jsonBytes()) })
            for (request, report) in zip(requests, reports) {
                if let error = report.error { throw error }
                inputs.append(ThumbnailChaosInput(request: request, partition: report.partition, offset: report.offset))
            }
            let next = start + pause * (c + 1)
            if clock.now < next { try await Task.sleep(until: next, clock: clock) }
        }
        return inputs
    }

    // MARK: Workers

    static nonisolated let executable: String = {
        let exe = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        return FileManager.default.isExecutableFile(atPath: exe) ? exe : CommandLine.arguments[0]
    }()

    /// Where the workers write what the broker acknowledged (tansu runs only).
    var acknowledgementLogPath: String { FileManager.default.temporaryDirectory.appendingPathComponent("chaos-acks-\(id).log").path }

    var isLocalBroker: Bool {
        if case .local = spec.target { return true }
        return false
    }

    private func startWorker() throws {
        let session = spec.target.sessionTimeout
        let w = try ManagedProcess.launch(
            workerBinary,
            arguments: [
                "worker", stage, "--topology", topologyPath, "--bootstrap-server", bootstrap,
                "--session-timeout", "\(session.components.seconds)s", "--shutdown-deadline", "20s",
                "--metrics-address", "127.0.0.1:0", "--statistics-interval", "1s", "--transactional-id", "\(stage)-\(UInt32.random(in: 0..<UInt32.max))",
            ] + (spec.retries == .low ? Self.lowRetryProperties.flatMap { ["-X", $0] } : [])
                // On tansu: what the broker acknowledged, to tell its losses from the workers'.
                + (isLocalBroker ? ["--acknowledgement-log", acknowledgementLogPath] : [])
                + (plan.steps.contains { $0.fault == .evict } ? Self.evictionArguments : []),
            environment: [:])
        workers.append(w)
    }

    /// A run with evictions: the eager protocol (a member revokes everything before it rejoins,
    /// so one stuck in its revocation misses the rebalance's deadline) and a short
    /// `max.poll.interval.ms`. (A cooperative member stays a member while it revokes.)
    static let evictionArguments = [
        "-X", "partition.assignment.strategy=range", "--max-poll-interval", "\(ChaosPlan.evictionPollInterval.components.seconds)s",
    ]

    /// Workers that stopped by themselves because their producer could not deliver any more
    /// (``ChaosPlan/Fault/producerFenced``) are expected to (exit 1); each is replaced by a new
    /// one, as an orchestrator would. Any other exit stays for the report.
    private func replaceFencedWorkers() async throws {
        // A fenced producer stops its worker (exit 1), and an orchestrator starts another: after
        // the producer-fenced fault, and after a tansu restart, which leaves idempotent producers
        // PRODUCER_FENCED (local low-retry seed 41 stalled with both workers stopped so).
        for w in workers where !w.isRunning {
            let status = await w.waitForExit()
            guard stoppedByItsProducer(w, status: status) else { continue }
            workers.removeAll { $0.pid == w.pid }
            ended.append((w, "\(status)"))
            fencedExits += 1
            try startWorker()
        }
    }

    /// The worker stopped by itself (exit 1) because its producer could not deliver any more, in
    /// a run whose faults fence producers (the producer-fenced fault; a tansu restart).
    private func stoppedByItsProducer(_ w: ManagedProcess.Handle, status: Int32) -> Bool {
        plan.steps.contains(where: { $0.fault == .producerFenced || (isLocalBroker && $0.fault == .brokerRestart) })
            && ManagedProcess.exitCode(waitStatus: status) == 1 && w.output().contains("the producer cannot deliver any more")
    }

    /// A worker's /readyz body (nil when it does not answer).
    private func readiness(_ w: ManagedProcess.Handle) async -> String? {
        let line = w.output().split(separator: "\n").last { $0.contains("metrics and health endpoint listening") } ?? ""
        guard let range = line.range(of: #"port=(\d+)"#, options: .regularExpression), let port = Int(line[range].dropFirst(5)),
            let (data, _) = try? await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/readyz")!)
        else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// Waits until every starting worker holds partitions (as many as the input's 4 can go to).
    /// Opening the window when the first one does would let a worker that started late join
    /// during the first fault: its rebalance revokes the partitions whose outputs the fault was
    /// meant to fail (in CI the low-retry seed then had no delivery fail past its attempts).
    private func awaitAssignment() async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(60)
        let needed = min(workers.count, 4)
        var assigned = 0
        while clock.now < deadline {
            assigned = workers.filter { $0.output().contains("partitions assigned") }.count
            if assigned >= needed { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw LocalBrokerError.timedOut("\(assigned) of \(needed) workers were assigned partitions within 60 s")
    }

    private func apply(_ step: ChaosPlan.Step) async throws {
        try await replaceFencedWorkers()
        let running = workers.filter { !paused.contains($0.pid) }
        switch step.fault {
        case .kill:
            guard !running.isEmpty else { return }
            let victim = running[step.worker % running.count]
            victim.kill()
            _ = await victim.waitForExit()
            workers.removeAll { $0.pid == victim.pid }
            killed.append(victim)
            let hold = step.hold
            try await Task.sleep(for: hold)
            try startWorker()
        case .pause:
            // Keep one worker running: pausing the last would only stall the run.
            guard running.count > 1 else { return }
            let victim = running[step.worker % running.count]
            Foundation.kill(victim.pid, SIGSTOP)
            paused.insert(victim.pid)
            let hold = step.hold, pid = victim.pid
            Task { [weak self] in
                try? await Task.sleep(for: hold)
                Foundation.kill(pid, SIGCONT)
                await self?.resumed(pid)
            }
        case .joinLeave:
            try startWorker()
            guard let joined = workers.last else { return }
            let hold = step.hold
            Task { [weak self] in
                try? await Task.sleep(for: hold)
                await self?.leave(joined)
            }
        case .outputsDown:
            target?.outputs(up: false)
            let hold = step.hold, target = self.target
            Task {
                try? await Task.sleep(for: hold)
                target?.outputs(up: true)
            }
        case .brokerRestart:
            guard var restarted = target else { return }
            try await restarted.restartBroker()
            target = restarted
        case .producerFenced:
            target?.fenceProducers()
        case .slowUpstream:
            images?.slow(for: step.hold)
        case .evict:
            // The outputs go down first, so that the members' deliveries are stuck when the
            // joiner's rebalance asks them to revoke.
            target?.outputs(up: false)
            let hold = step.hold, target = self.target
            Task { [weak self] in
                try? await Task.sleep(for: .seconds(2))
                try? await self?.join()
                try? await Task.sleep(for: hold - .seconds(2))
                target?.outputs(up: true)
            }
        }
    }

    private func resumed(_ pid: pid_t) { paused.remove(pid) }

    private func join() throws { try startWorker() }

    private func leave(_ w: ManagedProcess.Handle) {
        guard workers.contains(where: { $0.pid == w.pid }), workers.count > 1 else { return }
        workers.removeAll { $0.pid == w.pid }
        w.terminate()
        ended.append((w, "0"))
    }

    /// Ends every fault: paused workers go on, the outputs' broker is up, and as many workers
    /// run as at the start.
    private func heal() async throws {
        try await replaceFencedWorkers()
        for pid in paused { Foundation.kill(pid, SIGCONT) }
        paused = []
        target?.outputs(up: true)
        while workers.count < initialWorkers { try startWorker() }
    }

    /// Waits until the group's committed offsets reach the end of every input partition. A stall
    /// (no offset moves for `stallAfter`) with every worker joining is the broker wedged.
    private func awaitOffsets(_ ends: [Int32: Int64], wedge: inout String?) async throws -> [Int32: Int64] {
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
        defer { Task { await admin.close() } }
        let clock = ContinuousClock()
        var last: [Int32: Int64] = [:]
        var lastMove = clock.now
        while true {
            try await replaceFencedWorkers()
            let offsets = (try? await admin.committedOffsets(group: stage, partitions: (0..<4).map { TopicPartition(topics.input, $0) })) ?? []
            var committed: [Int32: Int64] = [:]
            for o in offsets where o.offset >= 0 { committed[o.partition] = o.offset }
            if ends.allSatisfy({ committed[$0.key] == $0.value }) { return committed }
            if committed != last {
                last = committed
                lastMove = clock.now
            } else if clock.now - lastMove > stallAfter {
                var bodies: [String] = []
                for w in workers { bodies.append(await readiness(w) ?? "no answer") }
                let joining = !bodies.isEmpty && bodies.allSatisfy { $0.contains("joining") || $0.contains("rebalancing") }
                let seen = "no committed offset moved for \(stallAfter); /readyz: \(bodies)"
                if joining, case .local = spec.target {
                    wedge = "the group has stayed in a rebalance: \(seen) (tansu: a member died or joined while a rebalance was under way)"
                } else {
                    print("   stalled: \(seen)")
                    for w in workers { print("   worker \(w.pid):\n\(w.recentOutput(lines: 20))") }
                }
                return committed
            }
            try await Task.sleep(for: .milliseconds(500))
        }
    }

    // MARK: Input and output

    /// Sends `count` ticks spread over `duration` in chunks, and returns where each landed.
    static func feed(_ producer: ChaosInputProducer, topic: String, count: Int, over duration: Duration) async throws -> [ChaosInput] {
        let chunk = 200
        let chunks = max(1, (count + chunk - 1) / chunk)
        let pause = duration / chunks
        var inputs: [ChaosInput] = []
        inputs.reserveCapacity(count)
        let clock = ContinuousClock()
        let start = clock.now
        for c in 0..<chunks {
            inputs += try await producer.send((c * chunk..<min(count, (c + 1) * chunk)).map(ChaosTick.make), topic: topic)
            let next = start + pause * (c + 1)
            if clock.now < next { try await Task.sleep(until: next, clock: clock) }
        }
        return inputs
    }

    static func readAll(_ reader: TopicReader, _ topic: String, partitions: Int) async throws -> [ConsumerRecord] {
        var records: [ConsumerRecord] = []
        try await reader.read(from: (0..<partitions).map { TopicPartitionOffset(topic, Int32($0), offset: TopicPartitionOffset.beginning) }) { batch in
            records += batch
            return true
        }
        return records
    }
}

/// The run's input producer. The inputs are the harness's, not what the run checks: a tick
/// the broker refused is sent again, up to 5 times, through a ``ProducerSlot``, which replaces a
/// producer that cannot deliver any more. (A tansu restart forgets the idempotent producer's
/// sequence: every later produce of that client fails with OUT_OF_ORDER_SEQUENCE_NUMBER or
/// PRODUCER_FENCED, which ended local seed 24 as "could not complete".) A tick that was written
/// after all and sent again is held twice; the checker works from what the topic holds and
/// counts those.
struct ChaosInputProducer {
    private let producers: ProducerSlot
    static let attempts = 5

    init(bootstrap: String) throws {
        producers = try ProducerSlot(logger: Logger(label: "pipelinectl.chaos.input")) {
            try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
        }
    }

    /// Where each tick landed, in order.
    func send(_ ticks: [ChaosTick], topic: String) async throws -> [ChaosInput] {
        var landed = [ChaosInput?](repeating: nil, count: ticks.count)
        var pending = Array(ticks.indices)
        for attempt in 1...Self.attempts {
            let reports = try await producers.current().send(pending.map { ticks[$0].record(topic: topic) })
            var failed: [Int] = []
            var lastError: (any Error)?
            for (i, report) in zip(pending, reports) {
                if let error = report.error {
                    failed.append(i)
                    lastError = error
                } else {
                    landed[i] = ChaosInput(tick: ticks[i], partition: report.partition, offset: report.offset)
                }
            }
            if failed.isEmpty { break }
            if attempt == Self.attempts, let lastError { throw lastError }
            pending = failed
        }
        return landed.compactMap { $0 }
    }

    func close() async { await producers.close(deadline: .seconds(10)) }
}

/// The thumbnail workload's image server (loopback, port 0): image `i` is a small PNG at
/// `/img/i.png`. While slow (``ChaosPlan/Fault/slowUpstream``), every body trickles a byte per
/// 50 ms and every fifth request is left hanging. The slowness lasts its hold and at least the
/// next ``slowAtLeast`` requests: a hold in which no worker fetched (all of them waiting on a
/// rebalance that a paused member holds up, as a CI run saw) still slows the fetches after it.
final class ChaosImageServer: Sendable {
    private final class Slowness: Sendable {
        /// Slow until this instant, and for this many more requests.
        let state = Mutex<(until: ContinuousClock.Instant?, owed: Int)>((nil, 0))
        let answered = Atomic<Int>(0)
    }

    static let slowAtLeast = 10

    private let server: TestHTTPServer
    private let slowness = Slowness()

    init(count: Int) async throws {
        var raw: [UInt8] = []
        for y in 0..<24 {
            raw.append(0)
            for x in 0..<32 { raw += [UInt8(x * 8), UInt8(y * 10), UInt8((x + y) & 0xff)] }
        }
        let png = StoredPNG.container(width: 32, height: 24, colourType: 2, idat: StoredPNG.zlibStored(raw))
        let slowness = self.slowness
        let handler: TestHTTPServer.Handler = { _ in
            let slow = slowness.state.withLock { state in
                let owed = state.owed > 0
                if owed { state.owed -= 1 }
                return owed || state.until.map { ContinuousClock.now < $0 } ?? false
            }
            guard slow else { return .ok(png, contentType: "image/png") }
            let n = slowness.answered.add(1, ordering: .relaxed).newValue
            return n % 5 == 0 ? .hang : .trickle(png, every: .milliseconds(50))
        }
        server = try await TestHTTPServer(handlers: Dictionary(uniqueKeysWithValues: (0..<count).map { ("/img/\($0).png", handler) }))
    }

    func url(of image: Int) -> String { "\(server.baseURL)/img/\(image).png" }

    func slow(for hold: Duration) {
        slowness.state.withLock { $0 = (until: .now + hold, owed: Self.slowAtLeast) }
    }

    /// Requests answered slowly so far.
    var requestedWhileSlow: Int { slowness.answered.load(ordering: .relaxed) }

    func close() async { try? await server.close() }
}
