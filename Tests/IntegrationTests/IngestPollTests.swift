import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import PipelineTesting
import Testing
@testable import Kafka
@testable import Operations
@testable import Pipeline

/// `pipelinectl ingest poll` as a process on the real local broker, polling a real HTTP server
/// that serves the open market's list pages: exactly the changed records reach the topic
/// (read with a real client past the end), a vanished product gets a tombstone only after a
/// complete listing, nothing twice across a restart, and the upstream's failures (500, a
/// malformed page, no answer) are counted and survived.
@Suite(.serialized, .timeLimit(.minutes(4))) struct IngestPollTests {
    static func product(_ id: Int, price: Int = 1000) -> String {
        #"{"id":\#(id),"vendor_id":29,"vendorName":"wongbing","name":"Cap \#(id)","thumbnail":"http://img.example/\#(id).jpg","currency":"KRW","price":\#(price),"bargain_price":\#(price),"discounted_price":0,"stock":3,"created_at":"2022-10-18T00:00:00","issued_at":"2022-10-18T00:00:00"}"#
    }

    static func startPoller(_ upstream: FakeUpstream, bootstrap: String, extra: [String] = []) async throws -> (process: ManagedProcess.Handle, metrics: Int) {
        let process = try ManagedProcess.launch(
            try WorkerProcessTests.pipelinectl(),
            arguments: ["ingest", "poll", "products", "--url", upstream.url, "--page-size", "2", "--interval", "1s", "--tombstones",
                        "--rate-limit", "50", "--timeout", "2s", "--retries", "1", "--allow-network", "127.0.0.1/32",
                        "--metrics-address", "127.0.0.1:0", "--log-format", "json", "--bootstrap-server", bootstrap] + extra,
            environment: [:])
        let metrics = try await IngestHTTPTests.loggedPort(process, "metrics and health endpoint listening")
        return (process, metrics)
    }

    /// Waits for the poll numbered `n` to finish and returns its log line's fields.
    static func poll(_ process: ManagedProcess.Handle, _ n: Int) async throws -> [String: String] {
        let needle = #""poll":"\#(n)""#
        try await process.waitForLine(containing: needle, timeout: .seconds(60))
        for line in process.output().split(separator: "\n") where line.contains(needle) && line.contains("poll finished") {
            if let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String] { return object }
        }
        throw LocalBrokerError.startFailed("no poll \(n) line")
    }

    static func get(_ port: Int, _ path: String) async throws -> (Int, String) {
        let (data, response) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        return ((response as! HTTPURLResponse).statusCode, String(decoding: data, as: UTF8.self))
    }

    /// The value of one series of the Prometheus text (0 when absent).
    static func series(_ text: String, _ prefix: String) -> Double {
        for line in text.split(separator: "\n") where line.hasPrefix(prefix) {
            if let value = line.split(separator: " ").last.flatMap({ Double($0) }) { return value }
        }
        return 0
    }

    @Test func exactlyTheChangedRecordsReachTheTopicAcrossFailuresAndARestart() async throws {
        try await LocalBroker.with { broker in
            let upstream = try await FakeUpstream(catalogue: [Self.product(1), Self.product(2), Self.product(3)])
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [broker.bootstrapServers]))
            try await admin.createTopic(TopicSpec(name: "products.raw", partitions: 3))
            await admin.close()
            var (poller, metrics) = try await Self.startPoller(upstream, bootstrap: broker.bootstrapServers)

            // Poll 1 lists all three; poll 2 finds both pages unchanged (304: the poller sent
            // the page's ETag back).
            let first = try await Self.poll(poller, 1)
            #expect(first["produced"] == "3" && first["pages"] == "2" && first["outcome"] == "ok", "\(first)")
            let second = try await Self.poll(poller, 2)
            #expect(second["produced"] == "0" && second["not-modified"] == "2", "\(second)")
            #expect(upstream.requests.contains { $0.ifNoneMatch != nil })

            // Product 2's price changes, 3 is gone, 4 is new: 2 and 4 produced, 3 tombstoned.
            upstream.publish([Self.product(1), Self.product(2, price: 900), Self.product(4)])
            var changed: [String: String] = [:]
            for n in 3... {
                changed = try await Self.poll(poller, n)
                if changed["produced"] != "0" { break }
            }
            #expect(changed["produced"] == "2" && changed["tombstoned"] == "1", "\(changed)")
            let settled = Int(changed["poll"]!)!

            // Page 2 answers 500 (both attempts): the listing is incomplete, so product 4, which
            // is on it, is not tombstoned; then a malformed page 1, then no answer at all.
            upstream.inject([.status(500), .status(500)], page: 2)
            let failed = try await Self.poll(poller, settled + 1)
            #expect(failed["outcome"] == "partial" && failed["errors"] == "1" && failed["tombstoned"] == "0", "\(failed)")
            upstream.inject([.body("<html>maintenance</html>")], page: 1)
            let malformed = try await Self.poll(poller, settled + 2)
            #expect(malformed["outcome"] == "failed" && malformed["produced"] == "0", "\(malformed)")
            upstream.inject([.hang, .hang], page: 1)
            let silent = try await Self.poll(poller, settled + 3)
            #expect(silent["outcome"] == "failed", "\(silent)")
            let recovered = try await Self.poll(poller, settled + 4)
            #expect(recovered["outcome"] == "ok" && recovered["produced"] == "0" && recovered["tombstoned"] == "0", "\(recovered)")

            let (_, text) = try await Self.get(metrics, "/metrics")
            #expect(Self.series(text, #"pipeline_poll_errors_total{source="products",kind="http_status"}"#) == 1, "\(text)")
            #expect(Self.series(text, #"pipeline_poll_errors_total{source="products",kind="parse"}"#) == 1)
            #expect(Self.series(text, #"pipeline_poll_errors_total{source="products",kind="timeout"}"#) == 1)
            #expect(Self.series(text, #"pipeline_poll_records_total{source="products",outcome="produced"}"#) == 5)
            #expect(Self.series(text, #"pipeline_poll_last_success_timestamp_seconds{source="products"}"#) > 1.7e9)
            #expect(try await Self.get(metrics, "/readyz").0 == 200)

            // A restart: the state topic says what was produced; the first poll (no ETags in
            // memory any more) reads every page and produces nothing.
            poller.terminate()
            #expect(await poller.waitForExit() == 0, "\(poller.recentOutput())")
            (poller, metrics) = try await Self.startPoller(upstream, bootstrap: broker.bootstrapServers)
            defer { poller.kill() }
            let restarted = try await Self.poll(poller, 1)
            #expect(restarted["produced"] == "0" && restarted["tombstoned"] == "0" && restarted["not-modified"] == "0", "\(restarted)")
            #expect(poller.output().contains(#""known-keys":"3""#), "1, 2 and 4 known; 3 deleted")

            // The topic, read past its end: exactly 1, 2, 3, then 2 at its new price, 4, and
            // 3's tombstone; each keyed by its id, nothing twice.
            let records = try await OperatorCommandTests.readAll("products.raw", bootstrap: broker.bootstrapServers)
            let seen = records.map { record -> String in
                let key = String(decoding: record.key ?? [], as: UTF8.self)
                guard let value = record.value else { return "\(key):deleted" }
                return value == Array(Self.product(2, price: 900).utf8) ? "\(key):900" : "\(key)"
            }
            #expect(seen.sorted() == ["1", "2", "2:900", "3", "3:deleted", "4"], "\(seen)")
            let tombstone = records.first { $0.value == nil }
            #expect(tombstone?.headers.first { $0.key == "event-type" }?.value == Array("deleted".utf8))
            // One key's records stay on one partition, in order.
            let two = records.filter { $0.key == Array("2".utf8) }
            #expect(Set(two.map(\.partition)).count == 1 && two.last?.value == Array(Self.product(2, price: 900).utf8))
            try await upstream.close()
        }
    }

    @Test func onceAgainstAPrivateAddressIsRefusedWithoutAllowNetworkAndExitsOne() async throws {
        try await LocalBroker.with { broker in
            let upstream = try await FakeUpstream(catalogue: [Self.product(1)])
            let process = try ManagedProcess.launch(
                try WorkerProcessTests.pipelinectl(),
                arguments: ["ingest", "poll", "products", "--url", upstream.url, "--once", "--json", "--metrics-address", "127.0.0.1:0",
                            "--bootstrap-server", broker.bootstrapServers],
                environment: [:])
            let status = await process.waitForExit()
            let output = process.output()
            #expect(status == 1 << 8, "exit status 1 (a wait status): \(output)")
            #expect(output.contains("destination 127.0.0.1 is not allowed"), "\(output)")
            #expect(upstream.requests.isEmpty, "no request was sent")
            try await upstream.close()
        }
    }

    /// A listing cut by --max-pages is never complete: what lies beyond it is not taken for
    /// deleted (no tombstone), and the next full poll lists it again.
    @Test func aListingCutAtMaxPagesTombstonesNothing() async throws {
        try await LocalBroker.with { broker in
            let upstream = try await FakeUpstream(catalogue: [Self.product(1), Self.product(2), Self.product(3)])
            func once(_ maxPages: Int) async throws -> [String: Any] {
                let process = try ManagedProcess.launch(
                    try WorkerProcessTests.pipelinectl(),
                    arguments: ["ingest", "poll", "products", "--url", upstream.url, "--page-size", "2", "--max-pages", String(maxPages), "--tombstones",
                                "--once", "--json", "--allow-network", "127.0.0.1/32", "--metrics-address", "127.0.0.1:0",
                                "--bootstrap-server", broker.bootstrapServers],
                    environment: [:])
                #expect(await process.waitForExit() == 0, "\(process.output())")
                let output = process.output()
                guard let start = output.range(of: "{\n"), let end = output.range(of: "\n}", options: .backwards) else { return [:] }
                let json = output[start.lowerBound..<end.upperBound]
                return try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any] ?? [:]
            }
            let full = try await once(2)
            #expect(full["produced"] as? Int == 3 && full["complete"] as? Bool == true, "\(full)")
            // 3 moves off the listing, 4 comes on page 2: a poll of page 1 only sees neither.
            upstream.publish([Self.product(1), Self.product(2), Self.product(4)])
            let cut = try await once(1)
            #expect(cut["complete"] as? Bool == false && cut["tombstoned"] as? Int == 0 && cut["produced"] as? Int == 0, "\(cut)")
            let again = try await once(2)
            #expect(again["complete"] as? Bool == true && again["tombstoned"] as? Int == 1 && again["produced"] as? Int == 1, "\(again)")
            try await upstream.close()
        }
    }
}
