import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPTesting
import Logging
import NIOPosix
import Prometheus
import Testing
import PipelineTesting
@testable import Pipeline
@testable import Kafka
@testable import Operations

/// A worker process watched the way an operator watches it: a real Prometheus server scrapes
/// its /metrics, the test reads the scraped series through Prometheus's API; /healthz and
/// /readyz answer, and readiness turns off when the broker goes away; logs are JSON lines,
/// rate-limited, and never carry a credential.
@Suite(.serialized, .timeLimit(.minutes(3))) struct ObservabilityTests {
    static func get(_ url: String) async throws -> (status: Int, body: String) {
        let (data, response) = try await URLSession.shared.data(from: URL(string: url)!)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }

    /// The port a worker logged for its endpoint (`--log-format json`, metadata `port`).
    static func endpointPort(_ worker: ManagedProcess.Handle) async throws -> Int {
        try await worker.waitForLine(containing: "metrics and health endpoint listening", timeout: .seconds(30))
        for line in worker.recentOutput().split(separator: "\n") where line.contains("metrics and health endpoint listening") {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            if let port = (object?["port"] as? String).flatMap(Int.init) { return port }
        }
        throw LocalBrokerError.startFailed("no port in the worker's log")
    }

    /// Asks Prometheus for the value of an instant query (summed), until `accept` holds.
    static func query(_ prometheus: Int, _ promQL: String, until accept: (Double) -> Bool) async throws -> Double {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(60)
        var last = -1.0
        while clock.now < deadline {
            let q = promQL.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? promQL
            let (status, body) = try await get("http://127.0.0.1:\(prometheus)/api/v1/query?query=\(q)")
            if status == 200,
                let json = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any],
                let data = json["data"] as? [String: Any], let result = data["result"] as? [[String: Any]],
                let first = result.first, let value = first["value"] as? [Any], let text = value.last as? String,
                let number = Double(text)
            {
                last = number
                if accept(number) { return number }
            }
            // Prometheus scrapes once a second: nothing to await but the next scrape.
            try await Task.sleep(for: .milliseconds(250))
        }
        throw LocalBrokerError.timedOut("\(promQL) stayed at \(last)")
    }

    struct Healthy: HealthReporting {
        func liveness(now: ContinuousClock.Instant) -> HealthStatus { HealthStatus(ok: true, reason: "ok") }
        func readiness(now: ContinuousClock.Instant) -> HealthStatus { HealthStatus(ok: true, reason: "ok") }
    }

    /// The endpoint closes a connection that goes silent for its idle timeout (2 s here), not
    /// before: one that sent half a request, and a kept-alive one after its answer. On a loop of
    /// its own; no upper bound but the read limit: under CI's load the close came seconds late.
    @Test func silentConnectionsToTheEndpointAreClosed() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let endpoint = try HTTPEndpoint(
            address: "127.0.0.1:0", registry: PrometheusCollectorRegistry(), health: Healthy(), logger: Logger(label: "test"),
            idleTimeout: .seconds(2), group: group)
        let running = Task { try await endpoint.run() }
        let port = try await endpoint.port()
        let half = await RawHTTP.exchange(port: port, "GET /metr", limit: 90)
        #expect(half.closedAfter.map { $0 >= .seconds(2) } == true, "half a request: \(String(describing: half.closedAfter)), \(half.answer.prefix(80))")
        let kept = await RawHTTP.exchange(port: port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", limit: 90)
        #expect(kept.answer.hasPrefix("HTTP/1.1 200"), "\(kept.answer.prefix(80))")
        #expect(kept.closedAfter.map { $0 >= .seconds(2) } == true, "kept alive: \(String(describing: kept.closedAfter))")
        running.cancel()
        _ = try? await running.value
        try await group.shutdownGracefully()
    }

    /// On a loopback address the endpoint answers only requests that name it so (DNS rebinding:
    /// a page of another site made to resolve to 127.0.0.1 would read the metrics): a foreign
    /// `Host`, or none, is 421 on every path.
    @Test func aLoopbackEndpointAnswersOnlyItsOwnNames() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let endpoint = try HTTPEndpoint(
            address: "127.0.0.1:0", registry: PrometheusCollectorRegistry(), health: Healthy(), logger: Logger(label: "test"), group: group)
        let running = Task { try await endpoint.run() }
        let port = try await endpoint.port()
        for (host, status) in [("127.0.0.1:\(port)", 200), ("localhost:\(port)", 200), ("[::1]:\(port)", 200), ("LOCALHOST", 200),
                               ("rebound.example:\(port)", 421), ("127.0.0.1.example", 421), ("", 421)] {
            for path in ["/metrics", "/healthz", "/readyz"] {
                let header = host.isEmpty ? "" : "Host: \(host)\r\n"
                let answer = await RawHTTP.exchange(port: port, "GET \(path) HTTP/1.1\r\n\(header)Connection: close\r\n\r\n").answer
                #expect(answer.hasPrefix("HTTP/1.1 \(status)"), "\(path) with Host '\(host)': \(answer.prefix(120))")
            }
        }
        running.cancel()
        _ = try? await running.value
        try await group.shutdownGracefully()
    }

    @Test func prometheusScrapesAWorkerAndReadinessFollowsTheBroker() async throws {
        let broker = try await LocalBroker.start()
        defer { broker.kill() }
        let bootstrap = broker.bootstrapServers
        let path = try WorkerProcessTests.writeTopology()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let topology = try Topology.load(path: path)
        let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
        _ = try await topology.apply(using: admin)
        await admin.close()

        // 4,000 ticks, every 20th garbage.
        let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
        let records = (0..<4000).map { i -> ProducerRecord in
            var r = PriceTicks.tick(i)
            if i % 20 == 3 { r.value = Array("not json \(i)".utf8) }
            return r
        }
        #expect(try await producer.send(records).allSatisfy { $0.error == nil })
        await producer.close()

        let worker = try WorkerProcessTests.startWorker(
            "prices-decode", topology: path, bootstrap: bootstrap,
            extra: ["--log-format", "json", "--readiness-timeout", "3s", "--statistics-interval", "1s"])
        defer { worker.kill() }
        let port = try await Self.endpointPort(worker)
        #expect(try await Self.get("http://127.0.0.1:\(port)/healthz").status == 200)

        // A real Prometheus on loopback scrapes it every second.
        let promPort = try FreePort.find()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("prom-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let config = """
            global: {scrape_interval: 1s, evaluation_interval: 1s}
            scrape_configs:
              - job_name: worker
                static_configs: [{targets: ["127.0.0.1:\(port)"]}]
            """
        try config.write(to: dir.appendingPathComponent("prometheus.yml"), atomically: true, encoding: .utf8)
        let prometheus = try ManagedProcess.launch(
            "/usr/bin/prometheus",
            arguments: [
                "--config.file=\(dir.path)/prometheus.yml", "--storage.tsdb.path=\(dir.path)/data",
                "--web.listen-address=127.0.0.1:\(promPort)",
            ], environment: [:])
        defer { prometheus.kill() }
        try await prometheus.waitForLine(containing: "Server is ready to receive web requests", timeout: .seconds(60))

        let processed = try await Self.query(promPort, #"sum(pipeline_records_in_total{stage="prices-decode"})"#) { $0 >= 4000 }
        #expect(processed >= 4000)
        let dead = try await Self.query(promPort, #"sum(pipeline_dead_letters_total{stage="prices-decode"})"#) { $0 >= 200 }
        #expect(dead == 200)
        let out = try await Self.query(promPort, #"sum(pipeline_records_out_total{stage="prices-decode",topic="prices.ticks"})"#) { $0 >= 3800 }
        #expect(out >= 3800)
        #expect(try await Self.query(promPort, #"count(pipeline_consumer_lag_records{stage="prices-decode"})"#) { $0 >= 4 } == 4)
        #expect(try await Self.query(promPort, #"sum(pipeline_consumer_lag_records{stage="prices-decode"})"#) { $0 == 0 } == 0)
        #expect(try await Self.query(promPort, #"count(pipeline_batch_processing_seconds_bucket{stage="prices-decode"})"#) { $0 > 0 } > 0)
        #expect(try await Self.query(promPort, #"count(pipeline_end_to_end_latency_seconds_count{stage="prices-decode"})"#) { $0 > 0 } > 0)
        #expect(try await Self.query(promPort, #"sum(pipeline_loop_busy_seconds_total{stage="prices-decode"})"#) { $0 > 0 } > 0)
        #expect(try await Self.query(promPort, #"count(kafka_consumergroup_group_lag{group="prices-decode"})"#) { $0 >= 4 } >= 4)
        #expect(try await Self.query(promPort, #"count(kafka_partition_latest_offset{topic="prices.raw"})"#) { $0 >= 4 } >= 4)
        #expect(try await Self.get("http://127.0.0.1:\(port)/readyz").status == 200)

        // Logs: JSON lines; dead letters logged, at most 10 in a burst.
        let lines = worker.output().split(separator: "\n")
        #expect(lines.allSatisfy { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) != nil }, "every line is JSON")
        let deadLines = lines.filter { $0.contains(#""message":"dead letter""#) }
        #expect(!deadLines.isEmpty && deadLines.count <= 10, "\(deadLines.count) dead-letter lines")

        // The broker goes away: commits fail, and the worker turns not-ready within its timeout.
        await broker.stop()
        let clock = ContinuousClock()
        let down = clock.now
        var readiness = (status: 200, body: "")
        while readiness.status == 200, clock.now - down < .seconds(30) {
            try await Task.sleep(for: .milliseconds(200))
            readiness = try await Self.get("http://127.0.0.1:\(port)/readyz")
        }
        #expect(readiness.status == 503, "not ready: \(readiness.body)")
        #expect(try await Self.get("http://127.0.0.1:\(port)/healthz").status == 200, "still alive")
    }

    @Test func aSASLPasswordNeverReachesTheLog() async throws {
        try await LocalBroker.with { broker in try await Self.runWithSASL(broker) }
    }

    static func runWithSASL(_ broker: LocalBroker) async throws {
        let path = try WorkerProcessTests.writeTopology()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let password = "s3cr3t-\(UUID().uuidString)"
        let worker = try ManagedProcess.launch(
            try WorkerProcessTests.pipelinectl(),
            arguments: [
                "worker", "prices-decode", "--topology", path, "--bootstrap-server", broker.bootstrapServers,
                "--metrics-address", "127.0.0.1:0", "--security-protocol", "sasl_plaintext", "--sasl-username", "worker",
                "--log-level", "debug", "--log-format", "json", "--kafka-debug", "conf,security,broker",
            ],
            environment: ["KAFKA_SASL_PASSWORD": password], watch: [password, "sasl.username"])
        // librdkafka's debug output dumps the configuration, and the broker does not speak SASL:
        // the worker logs the handshake failing. Wait for both.
        try await worker.waitForLine(containing: "sasl.password", timeout: .seconds(30))
        try await worker.waitForLine(containing: "SASL", timeout: .seconds(30))
        worker.terminate()
        _ = await worker.waitForExit()
        // Counted over every line (a loaded machine's debug log outgrew the kept tail in CI).
        #expect((worker.lines(containing: "sasl.username") ?? 0) > 0, "the configuration was logged")
        #expect(worker.lines(containing: password) == 0, "the password is never logged")
    }
}
