import ArgumentParser
import Deadlines
import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Pipeline
import Producers
import Push
import TextTable
import Thumbnails
import Workers
import Kafka
import Operations

/// `pipelinectl dev`: the whole pipeline on this machine in one command.
struct Dev: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the whole pipeline locally: broker, topics, one worker per stage, the sample data, a live table.",
        discussion: """
            Starts the local broker (or uses --bootstrap-server), applies the topology, starts one \
            `pipelinectl worker` process per stage, and brings the sample streams the project \
            ships in through the producers as they run in production: a `pipelinectl ingest \
            http` endpoint that every samples/<app>/*.jsonl file is posted to, and one \
            `pipelinectl ingest poll` per list API, reading the lists the samples hold from \
            dev's own sample server (127.0.0.1:8089, which also serves the sample images). The \
            push stages send to a local FCM and APNs that dev starts. Then \
            it shows per stage: records in and out, dead letters, lag, rate, and the last \
            notification, and serves the operator console (`pipelinectl console`) on \
            http://127.0.0.1:8090/. Ctrl-C (or --duration) stops the producers, the console and \
            every worker gracefully, then the broker, and prints a summary (ending with what \
            reached each push provider); no process is left \
            behind. \
            Without a terminal it prints plain progress lines.

            Examples:
              pipelinectl dev
              pipelinectl dev --duration 60s          # stop by itself (CI)
              pipelinectl dev --until-idle            # stop once every stage is caught up
            """)

    @Option(help: "The topology file.") var topology = "topology.yaml"
    @Option(help: "The folder of sample streams (one sub-folder per app).") var samples = "samples"
    @OptionGroup var connection: BootstrapServer<EmbeddedBroker>
    @Option(help: "Stop after this long (e.g. 60s). Default: run until Ctrl-C.", transform: { text in
        guard let d = parseDuration(text) else { throw ValidationError("--duration: '\(text)' is not a duration such as 60s") }
        return d
    })
    var duration: Duration?
    @Flag(help: "Stop once everything is ingested and every stage has been caught up and quiet for 5 s.") var untilIdle = false
    @Option(help: "Only these stages (comma-separated names from the topology).") var stages: String?

    func run() async throws {
        try Preflight.checkRuntime()
        let topology: Topology
        do { topology = try Topology.load(path: self.topology) } catch { throw ValidationError(error.description) }
        var selected = topology.stages
        if let stages {
            let names = stages.split(separator: ",").map(String.init)
            for name in names where !topology.stages.contains(where: { $0.name == name }) {
                throw ValidationError("--stages: no stage '\(name)' in \(self.topology); it has: \(topology.stages.map(\.name).joined(separator: ", "))")
            }
            selected = topology.stages.filter { names.contains($0.name) }
        }
        let session = DevSession(topologyPath: self.topology, topology: topology, stages: selected, samples: samples)
        let stop = StopSignal(secondSignal: "killing the workers and the broker", onSecond: DevSession.killAll)
        stop.install()
        do {
            try await session.start(bootstrap: connection.servers)
            try await session.startConsole()
            try await session.ingest()
            try await session.watch(stop: stop, duration: duration, untilIdle: untilIdle)
        } catch {
            await session.shutdown()
            throw error
        }
        await session.shutdown()
        session.printSummary()
    }
}

/// One stage's worker process and what its /metrics said last.
struct DevWorker {
    var stage: Topology.Stage
    var process: ManagedProcess.Handle
    var port: Int?
    var metrics = DevMetrics()
    var previousIn: Double = 0
    var rate: Double = 0
    var exitStatus: Int32?
}

/// The figures of one scrape.
struct DevMetrics {
    var recordsIn: Double = 0
    var recordsOut: Double = 0
    var deadLetters: Double = 0
    var lag: Double = 0
    /// A push sender's attempts that were tried again (each may repeat a send whose acceptance
    /// did not reach the sender).
    var pushRetried: Double = 0

    /// Sums the series of a Prometheus text exposition by metric name.
    static func parse(_ text: String) -> DevMetrics {
        var m = DevMetrics()
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            let name = line.prefix { $0 != "{" && $0 != " " }
            switch name {
            case MetricName.recordsIn: m.recordsIn += value
            case MetricName.recordsOut: m.recordsOut += value
            case MetricName.deadLetters: m.deadLetters += value
            case MetricName.lagRecords: m.lag += value
            case PushMetricName.sends where line.contains(#"outcome="retried""#): m.pushRetried += value
            default: break
            }
        }
        return m
    }
}

/// Everything `pipelinectl dev` starts, and how it stops it.
final class DevSession {
    /// Child pids, for a second Ctrl-C that cannot wait for graceful stops.
    static let childPIDs = NSLockedBox<[pid_t]>([])

    static func killAll() {
        for pid in childPIDs.get() { kill(pid, SIGKILL) }
    }

    let topologyPath: String
    let topology: Topology
    let stages: [Topology.Stage]
    let samples: String
    let interactive = isatty(STDOUT_FILENO) == 1
    private(set) var broker: LocalBroker?
    private(set) var sampleServer: DevSampleServer?
    /// The local FCM and APNs, when a push sender runs.
    private(set) var push: DevPushProviders?
    /// `ingest http`, the pollers and the console.
    private(set) var services: [(name: String, process: ManagedProcess.Handle)] = []
    private(set) var polled: [String: Int] = [:]
    private var serviceStatus: [String: Int32] = [:]
    private(set) var bootstrap: [String] = []
    private(set) var workers: [DevWorker] = []
    private(set) var ingested: [String: Int] = [:]
    private(set) var rejected: [String] = []
    private let lastNotification = NSLockedBox<String?>(nil)
    private var notificationTask: Task<Void, Never>?
    private var notificationReader: KafkaConsumer?
    private let clock = ContinuousClock()
    private var started = ContinuousClock.now

    init(topologyPath: String, topology: Topology, stages: [Topology.Stage], samples: String) {
        self.topologyPath = topologyPath
        self.topology = topology
        self.stages = stages
        self.samples = samples
    }

    func say(_ line: String) {
        print(line)
        fflush(nil)
    }

    /// Broker, topics, workers (each reports the port of its endpoint), the notification tail.
    func start(bootstrap servers: [String]?) async throws {
        started = clock.now
        if let servers {
            bootstrap = servers
        } else {
            let broker = try await LocalBroker.start()
            self.broker = broker
            bootstrap = [broker.bootstrapServers]
            say("local broker (tansu) at \(broker.bootstrapServers)")
        }
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: bootstrap))
        let report = try await topology.apply(using: admin)
        await admin.close()
        say("topics: \(report.created.count) created, \(report.unchanged.count) already there\(report.drift.isEmpty ? "" : ", drift: \(report.drift.joined(separator: "; "))")")

        // The sample images and upstream lists are served from this machine; the thumbnail
        // worker and the pollers may fetch from loopback for them (and only here).
        if FileManager.default.fileExists(atPath: samples) {
            let server = try await DevSampleServer(imageList: samples + "/images.txt", catalogue: DevCatalogue.load(samples: samples))
            sampleServer = server
            let lists = PollSource.allCases.map { "\($0.rawValue) \(server.catalogue.items[$0]?.count ?? 0)" }.joined(separator: ", ")
            say("sample server: \(server.names.count) images at \(DevSampleServer.base)/images/, upstream lists (\(lists)) at \(DevSampleServer.base)/upstream/")
        }
        if stages.contains(where: \.sendsPushes) {
            let push = try await DevPushProviders.start(topology: topology)
            self.push = push
            say("local push providers: FCM at \(push.fcm.server.baseURL), APNs (HTTP/2, TLS) at \(push.apns.server.baseURL)")
        }
        for stage in stages {
            let fetchesImages = stage.rendersThumbnails && sampleServer != nil
            let process = try ManagedProcess.launch(
                Self.executable,
                arguments: [
                    "worker", stage.name, "--topology", topologyPath, "--bootstrap-server", bootstrap.joined(separator: ","),
                    "--session-timeout", "2s", "--metrics-address", "127.0.0.1:0", "--log-format", "json",
                    "--statistics-interval", "1s", "--shutdown-deadline", "20s",
                ] + (fetchesImages ? ["--allow-network", "127.0.0.1/32"] : []),
                environment: stage.sendsPushes ? push?.environment ?? [:] : [:])
            Self.childPIDs.set(Self.childPIDs.get() + [process.pid])
            workers.append(DevWorker(stage: stage, process: process))
        }
        for i in workers.indices {
            workers[i].port = try await Self.endpointPort(workers[i].process)
        }
        say("\(workers.count) workers started: \(workers.map(\.stage.name).joined(separator: ", "))")
        startNotificationTail()
    }

    static var executable: String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    }

    /// The port a child logged (`--log-format json`, metadata `port`) on the line with `marker`.
    static func endpointPort(_ process: ManagedProcess.Handle, marker: String = "metrics and health endpoint listening") async throws -> Int {
        try await process.waitForLine(containing: marker, timeout: .seconds(60))
        for line in process.output().split(separator: "\n") where line.contains(marker) {
            if let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let port = (object["port"] as? String).flatMap(Int.init)
            {
                return port
            }
        }
        throw ValidationError("a worker did not report its endpoint: \(process.recentOutput())")
    }

    /// Reads the rendered notifications as they come (no group), keeping the last one's text.
    private func startNotificationTail() {
        guard topology.topic(named: "notifications.fcm") != nil else { return }
        var config = ConsumerConfiguration(bootstrapServers: bootstrap, groupID: "pipelinectl-dev-tail")
        config.autoCommit = false
        guard let reader = try? KafkaConsumer(configuration: config) else { return }
        let partitions = topology.topic(named: "notifications.fcm")?.partitions ?? 1
        let start = (0..<partitions).map { TopicPartitionOffset("notifications.fcm", Int32($0), offset: TopicPartitionOffset.beginning) }
        notificationReader = reader
        let box = lastNotification
        notificationTask = Task {
            guard (try? await reader.assign(start)) != nil else { return }
            await tailNotifications(reader, into: box)
        }
    }

    /// "title: body" of an FCM payload, or the start of the value.
    static func notificationText(_ value: [UInt8]) -> String {
        if let object = try? JSONSerialization.jsonObject(with: Data(value)) as? [String: Any] {
            let message = (object["message"] as? [String: Any]) ?? object
            if let n = message["notification"] as? [String: Any], let title = n["title"] as? String {
                return "\(title): \(n["body"] as? String ?? "")"
            }
        }
        return String(String(decoding: value.prefix(80), as: UTF8.self))
    }

    /// The producers, as they run in production, bring the samples in: every sample file is
    /// posted to a `pipelinectl ingest http` endpoint (JSON lines, in file order, up to 500 lines
    /// a post, each answered once durable), then a `pipelinectl ingest poll` per list API reads
    /// the sample server's lists (its first poll produces every listed item).
    func ingest() async throws {
        let fm = FileManager.default
        guard fm.fileExists(atPath: samples) else {
            say("no sample folder at \(samples): nothing ingested")
            return
        }
        let streams = UpstreamStream.allCases.filter { topology.topic(named: $0.topic) != nil }
        let servers = bootstrap.joined(separator: ",")
        let token = (0..<4).map { _ in String(UInt64.random(in: 1...UInt64.max), radix: 16) }.joined()
        let http = try launchService(
            "ingest http", ["ingest", "http", "--listen", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--log-format", "json",
                            "--rate-limit", "10000", "--bootstrap-server", servers],
            environment: ["PIPELINE_INGEST_TOKENS": "dev-samples \(token)"])
        let port = try await Self.endpointPort(http, marker: "ingest endpoint listening")
        say("ingest endpoint: http://127.0.0.1:\(port)/v1/{stream}")
        for stream in streams {
            let dir = (samples as NSString).appendingPathComponent(stream.rawValue)
            let files = ((try? fm.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.hasSuffix(".jsonl") }.sorted()
            for file in files {
                let path = (dir as NSString).appendingPathComponent(file)
                guard let data = fm.contents(atPath: path) else { continue }
                let lines = Array(data).split(separator: 0x0A).filter { $0.contains { !ProduceParser.isSpace($0) } }
                for start in stride(from: 0, to: lines.count, by: 500) {
                    let chunk = lines[start..<min(start + 500, lines.count)]
                    let body = Data(chunk.joined(separator: [0x0A]))
                    let (status, answer) = try await post(body, stream: stream, port: port, token: token)
                    if status == 201, let accepted = answer["accepted"] as? Int {
                        ingested[stream.topic, default: 0] += accepted
                    } else {
                        rejected.append("\(path) lines \(start + 1)–\(start + chunk.count): HTTP \(status) \(answer)")
                    }
                }
            }
        }
        // The pollers start once the posted streams are durable, so every run reads the same
        // order: the sample streams, then the listed items.
        var pollers: [(PollSource, ManagedProcess.Handle)] = []
        for source in PollSource.allCases where streams.contains(source.stream) && !(sampleServer?.catalogue.items[source] ?? []).isEmpty {
            let poller = try launchService(
                "ingest poll \(source.rawValue)",
                ["ingest", "poll", source.rawValue, "--url", DevSampleServer.listURL(source), "--interval", "10s", "--page-size", "10",
                 "--allow-network", "127.0.0.1/32", "--metrics-address", "127.0.0.1:0", "--log-format", "json", "--bootstrap-server", servers],
                environment: [:])
            pollers.append((source, poller))
        }

        for (source, poller) in pollers {
            try await poller.waitForLine(containing: #""poll":"1""#, timeout: .seconds(60))
            for line in poller.output().split(separator: "\n") where line.contains(#""poll":"1""#) {
                let fields = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: String]
                polled[source.stream.topic] = fields?["produced"].flatMap(Int.init) ?? 0
            }
        }
        let posted = ingested.keys.sorted().map { "\($0) \(ingested[$0]!)" }.joined(separator: ", ")
        let listed = polled.keys.sorted().map { "\($0) \(polled[$0]!)" }.joined(separator: ", ")
        say("ingested: posted to the endpoint: \(posted); polled from the upstream lists: \(listed.isEmpty ? "none" : listed)")
    }

    private func launchService(_ name: String, _ arguments: [String], environment: [String: String]) throws -> ManagedProcess.Handle {
        let process = try ManagedProcess.launch(Self.executable, arguments: arguments, environment: environment)
        Self.childPIDs.set(Self.childPIDs.get() + [process.pid])
        services.append((name, process))
        return process
    }

    /// The operator console on 127.0.0.1:8090, over this session's topology and broker.
    func startConsole() async throws {
        let console = try launchService(
            "console", ["console", "--topology", topologyPath, "--listen", "127.0.0.1:\(Self.consolePort)", "--metrics-address", "127.0.0.1:0",
                        "--sample-interval", "2s", "--log-format", "json", "--bootstrap-server", bootstrap.joined(separator: ",")],
            environment: [:])
        let port = try await Self.endpointPort(console, marker: "console listening")
        say("console: http://127.0.0.1:\(port)/ (stages, lag history, dead letters)")
    }

    static let consolePort = 8090

    private func post(_ body: Data, stream: UpstreamStream, port: Int, token: String) async throws -> (Int, [String: Any]) {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/v1/\(stream.rawValue)")!)
        request.httpMethod = "POST"
        request.httpBody = body
        request.timeoutInterval = 60
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        request.setValue("application/x-ndjson", forHTTPHeaderField: "Content-Type")
        let (data, response) = try await URLSession.shared.data(for: request)
        let answer = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? ["body": String(decoding: data.prefix(300), as: UTF8.self)]
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, answer)
    }

    /// Scrapes every worker once a second and shows the table, until a stop condition.
    func watch(stop: StopSignal, duration: Duration?, untilIdle: Bool) async throws {
        var quietSince: ContinuousClock.Instant?
        var lastPrint = clock.now - .seconds(10)
        var lastTotal = -1.0
        while true {
            if stop.isSet { say("stopping (signal)"); return }
            if let duration, clock.now - started >= duration { say("stopping (--duration \(duration) reached)"); return }
            await scrape()
            for i in workers.indices where !workers[i].process.isRunning {
                workers[i].exitStatus = await workers[i].process.waitForExit()
                throw ValidationError("worker \(workers[i].stage.name) exited (status \(workers[i].exitStatus!)): \(workers[i].process.recentOutput(lines: 10))")
            }
            if interactive {
                render(clear: true)
            } else if clock.now - lastPrint >= .seconds(5) {
                lastPrint = clock.now
                progressLine()
            }
            if untilIdle {
                let total = workers.reduce(0) { $0 + $1.metrics.recordsIn + $1.metrics.recordsOut }
                let lag = workers.reduce(0) { $0 + $1.metrics.lag }
                if total == lastTotal, lag == 0 {
                    if let since = quietSince, clock.now - since >= .seconds(5) { say("stopping (every stage caught up and quiet)"); return }
                    quietSince = quietSince ?? clock.now
                } else {
                    quietSince = nil
                }
                lastTotal = total
            }
            // A refresh interval for the screen, not a wait for an event.
            try? await Task.sleep(for: .seconds(1))
        }
    }

    private func scrape() async {
        for i in workers.indices {
            guard let port = workers[i].port, let url = URL(string: "http://127.0.0.1:\(port)/metrics") else { continue }
            guard let (data, _) = try? await URLSession.shared.data(from: url) else { continue }
            let m = DevMetrics.parse(String(decoding: data, as: UTF8.self))
            workers[i].rate = max(0, m.recordsIn - workers[i].previousIn)
            workers[i].previousIn = m.recordsIn
            workers[i].metrics = m
        }
    }

    private func render(clear: Bool) {
        var out = clear ? "\u{1B}[H\u{1B}[2J" : ""
        let elapsed = clock.now - started
        out += "pipelinectl dev — \(bootstrap.joined(separator: ",")) — \(elapsed.components.seconds) s — Ctrl-C stops everything\n\n"
        out += table()
        out += "\nlast notification: \(lastNotification.get() ?? "(none yet)")\n"
        print(out, terminator: "")
        fflush(nil)
    }

    /// One line per stage, each ending in a newline ("" without stages).
    func table() -> String {
        let table = TextTable<DevWorker> { w in
            [Column("stage" <- w.stage.name), Column("in" <- Self.n(w.metrics.recordsIn), align: .right),
             Column("out" <- Self.n(w.metrics.recordsOut), align: .right), Column("dead" <- Self.n(w.metrics.deadLetters), align: .right),
             Column("lag" <- Self.n(w.metrics.lag), align: .right), Column("rate/s" <- Self.n(w.rate), align: .right)]
        }
        return table.render(workers).map { $0 + "\n" } ?? ""
    }

    static func n(_ v: Double) -> String { String(Int(v)) }

    private func progressLine() {
        let parts = workers.map { "\($0.stage.name) in=\(Self.n($0.metrics.recordsIn)) out=\(Self.n($0.metrics.recordsOut)) dead=\(Self.n($0.metrics.deadLetters)) lag=\(Self.n($0.metrics.lag))" }
        say("[\((clock.now - started).components.seconds)s] " + parts.joined(separator: " | "))
    }

    /// SIGTERM to the producers and the console (they finish what they hold), then to every
    /// worker (they settle, checkpoint, commit, leave), then the broker.
    func shutdown() async {
        for p in services { p.process.terminate() }
        for p in services {
            if await Deadline.race(.seconds(30), { [process = p.process] in await process.waitForExit() }) == nil { p.process.kill() }
            serviceStatus[p.name] = await p.process.waitForExit()
        }
        for w in workers { w.process.terminate() }
        for i in workers.indices {
            let outcome = await Deadline.race(.seconds(30)) { [process = workers[i].process] in await process.waitForExit() }
            if let status = outcome {
                workers[i].exitStatus = status
            } else {
                workers[i].process.kill()
                workers[i].exitStatus = await workers[i].process.waitForExit()
            }
        }
        notificationTask?.cancel()
        if let reader = notificationReader { try? await reader.close(deadline: .seconds(5)) }
        await scrapeFinalFromLogs()
        await sampleServer?.close()
        await push?.close()
        if let broker { await broker.stop() }
    }

    /// The workers' last counts from their "worker stopped" log lines.
    private func scrapeFinalFromLogs() async {
        for i in workers.indices {
            for line in workers[i].process.output().split(separator: "\n") where line.contains("\"worker stopped\"") {
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { continue }
                if let p = (object["processed"] as? String).flatMap(Double.init) { workers[i].metrics.recordsIn = p }
                if let p = (object["produced"] as? String).flatMap(Double.init) { workers[i].metrics.recordsOut = p }
                if let d = (object["dead-lettered"] as? String).flatMap(Double.init) { workers[i].metrics.deadLetters = d }
            }
        }
    }

    func printSummary() {
        say("\nsummary (\((clock.now - started).components.seconds) s):")
        say(table(), terminator: "")
        let silent = workers.filter { $0.metrics.recordsOut == 0 }.map(\.stage.name)
        say("every worker stopped: " + workers.map { "\($0.stage.name)=\($0.exitStatus.map(String.init) ?? "?")" }.joined(separator: " "))
        if !services.isEmpty {
            say("producers and console stopped: " + services.map { "\($0.name)=\(serviceStatus[$0.name].map(String.init) ?? "?")" }.joined(separator: ", "))
        }
        if !silent.isEmpty { say("no output from: \(silent.joined(separator: ", "))") }
        if let last = lastNotification.get() { say("last notification: \(last)") }
        let retried = Int(workers.filter { $0.stage.sendsPushes }.reduce(0) { $0 + $1.metrics.pushRetried })
        for line in push?.summary(retried: retried) ?? [] { say(line) }
        for stage in stages where stage.rendersThumbnails {
            guard let root = ThumbnailTransform.storeRoot(stage.options.thumbnails) else { continue }
            let files = FileManager.default.enumerator(atPath: root)?.compactMap { $0 as? String }.filter { $0.contains(".") } ?? []
            say("thumbnails: \(files.count) files in \(root)")
        }
        for r in rejected { say("rejected: \(r)") }
    }

    func say(_ line: String, terminator: String) {
        print(line, terminator: terminator)
        fflush(nil)
    }
}

/// A value behind a lock, shared with a reader task.
final class NSLockedBox<T: Sendable>: @unchecked Sendable {  // every access holds `lock`
    private let lock = NSLock()
    private var value: T
    init(_ value: T) { self.value = value }
    func get() -> T { lock.withLock { value } }
    func set(_ v: T) { lock.withLock { value = v } }
}

/// Keeps the text of the last rendered notification in `box` until the reader closes.
private func tailNotifications(_ reader: KafkaConsumer, into box: NSLockedBox<String?>) async {
    var events = reader.makeAsyncIterator()
    while let event = try? await events.next() {
        guard case .records(let batch) = event, let last = batch.last?.value else { continue }
        box.set(DevSession.notificationText(last))
    }
}
