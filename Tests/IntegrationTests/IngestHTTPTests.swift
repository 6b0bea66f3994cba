import Deadlines
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPTesting
import PipelineTesting
import Testing
@testable import Kafka
@testable import Operations
@testable import Pipeline

/// `pipelinectl ingest http` as a process on the real local broker, posted to by a real HTTP
/// client: what a 2xx answer promises (every record durable, where the answer says), what
/// the error answers promise (nothing produced), idempotent retries, authentication, limits,
/// and a broker that goes away mid-request.
@Suite(.serialized, .timeLimit(.minutes(4))) struct IngestHTTPTests {
    static let pricesToken = "prices-token-0123456789"
    static let marketToken = "market-token-0123456789"
    static let tokens = "prices-relay \(pricesToken) prices\nmarket-backend \(marketToken) products"

    static func tick(_ i: Int, market: String? = nil) -> String {
        let code = market ?? ["KRW-BTC", "KRW-ETH", "KRW-XRP", "KRW-SOL"][i % 4]
        return #"{"type":"ticker","code":"\#(code)","trade_price":\#(1000 + i).5,"signed_change_rate":0.01,"trade_volume":2,"trade_timestamp":\#(1_700_000_000_000 + i)}"#
    }

    struct Answer {
        var status: Int
        var headers: [String: String]
        var json: [String: Any]
    }

    static func post(
        _ port: Int, _ stream: String, body: String, token: String? = pricesToken, idempotencyKey: String? = nil
    ) async throws -> Answer {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/v1/\(stream)")!)
        request.httpMethod = "POST"
        request.httpBody = Data(body.utf8)
        request.timeoutInterval = 60
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let idempotencyKey { request.setValue(idempotencyKey, forHTTPHeaderField: "Idempotency-Key") }
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = response as! HTTPURLResponse
        var headers: [String: String] = [:]
        for (k, v) in http.allHeaderFields { headers[String(describing: k).lowercased()] = String(describing: v) }
        let json = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? ["raw": String(decoding: data, as: UTF8.self)]
        return Answer(status: http.statusCode, headers: headers, json: json)
    }

    /// The port a service logged (`--log-format json`, metadata `port`) on the line with `message`.
    static func loggedPort(_ process: ManagedProcess.Handle, _ message: String) async throws -> Int {
        try await process.waitForLine(containing: message, timeout: .seconds(60))
        for line in process.output().split(separator: "\n") where line.contains(message) {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            if let port = (object?["port"] as? String).flatMap(Int.init) { return port }
        }
        throw LocalBrokerError.startFailed("no port on the line '\(message)'")
    }

    static func start(bootstrap: String, extra: [String] = []) async throws -> (process: ManagedProcess.Handle, port: Int, metrics: Int) {
        let process = try ManagedProcess.launch(
            try WorkerProcessTests.pipelinectl(),
            arguments: ["ingest", "http", "--listen", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--log-format", "json",
                        "--bootstrap-server", bootstrap] + extra,
            environment: ["PIPELINE_INGEST_TOKENS": tokens])
        let port = try await loggedPort(process, "ingest endpoint listening")
        let metrics = try await loggedPort(process, "metrics and health endpoint listening")
        return (process, port, metrics)
    }

    @Test func aCreatedAnswerMeansEveryRecordIsDurableWhereItSaysAndErrorsProduceNothing() async throws {
        try await LocalBroker.with { broker in
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [broker.bootstrapServers]))
            try await admin.createTopic(TopicSpec(name: "prices.raw", partitions: 3))
            await admin.close()
            let (ingest, port, metrics) = try await Self.start(
                bootstrap: broker.bootstrapServers, extra: ["--max-records", "50", "--max-body-bytes", "20000"])
            defer { ingest.kill() }

            // 30 valid records as JSON lines: 201 with a partition and offset for each.
            let body = (0..<30).map { Self.tick($0) }.joined(separator: "\n")
            let created = try await Self.post(port, "prices", body: body)
            #expect(created.status == 201, "\(created.json)")
            #expect(created.json["accepted"] as? Int == 30)
            let answered = (created.json["records"] as? [[String: Any]]) ?? []
            #expect(answered.map { $0["index"] as? Int } == (0..<30).map { $0 })

            // Invalid records: 400 naming each (index, field, reason); nothing of the body produced.
            let mixed = [Self.tick(100), #"{"type":"ticker","code":"KRW-BTC","trade_price":-5,"signed_change_rate":0,"trade_volume":1,"trade_timestamp":1}"#,
                         "{not json", Self.tick(101)].joined(separator: "\n")
            let refused = try await Self.post(port, "prices", body: mixed)
            #expect(refused.status == 400)
            let rejected = (refused.json["rejected"] as? [[String: Any]]) ?? []
            #expect(rejected.map { $0["index"] as? Int } == [1, 2])
            #expect(rejected.first?["field"] as? String == "trade_price" && rejected.first?["reason"] as? String == "invalid-value")
            #expect(rejected.last?["reason"] as? String == "malformed-json")

            // A retried post with the same Idempotency-Key: the same answer, nothing new; the key
            // with another body: 422.
            let first = try await Self.post(port, "prices", body: Self.tick(200), idempotencyKey: "order-7781")
            let again = try await Self.post(port, "prices", body: Self.tick(200), idempotencyKey: "order-7781")
            #expect(first.status == 201 && again.status == 201)
            #expect(again.headers["idempotent-replayed"] == "true")
            #expect((again.json["records"] as? [[String: Any]])?.first?["offset"] as? Int == (first.json["records"] as? [[String: Any]])?.first?["offset"] as? Int)
            #expect(try await Self.post(port, "prices", body: Self.tick(201), idempotencyKey: "order-7781").status == 422)

            // Authentication and limits: each answered before anything is produced.
            let noToken = try await Self.post(port, "prices", body: Self.tick(300), token: nil)
            let badToken = try await Self.post(port, "prices", body: Self.tick(300), token: "prices-token-0123456780")
            #expect(noToken.status == 401 && badToken.status == 401)
            #expect(noToken.json["error"] as? String == badToken.json["error"] as? String, "one answer: no hint of which part failed")
            #expect(noToken.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
            #expect(try await Self.post(port, "prices", body: Self.tick(300), token: Self.marketToken).status == 403)
            #expect(try await Self.post(port, "nonsense", body: Self.tick(300)).status == 404)
            let get = await RawHTTP.exchange(port: port, "GET /v1/prices HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            #expect(get.answer.hasPrefix("HTTP/1.1 405") && get.answer.lowercased().contains("\r\nallow: post\r\n"), "\(get.answer.prefix(200))")
            #expect(try await Self.post(port, "prices", body: String(repeating: " ", count: 20_001) + Self.tick(300)).status == 413)
            #expect(try await Self.post(port, "prices", body: (0..<51).map { Self.tick($0) }.joined(separator: "\n")).status == 413)
            // Two of a header that must be one (which would win?): 400, naming it.
            for (header, twice) in [
                ("Authorization", "Authorization: Bearer \(Self.pricesToken)\r\nAuthorization: Bearer \(Self.marketToken)"),
                ("Idempotency-Key", "Authorization: Bearer \(Self.pricesToken)\r\nIdempotency-Key: a-1\r\nIdempotency-Key: a-2"),
            ] {
                let body = Self.tick(400)
                let sent = await RawHTTP.exchange(
                    port: port, "POST /v1/prices HTTP/1.1\r\nHost: 127.0.0.1\r\n\(twice)\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)")
                #expect(sent.answer.hasPrefix("HTTP/1.1 400") && sent.answer.contains("more than one \(header)"), "\(sent.answer.prefix(300))")
            }

            // What a reader finds: exactly the 31 acknowledged records, once each, where the answers said.
            let records = try await OperatorCommandTests.readAll("prices.raw", bootstrap: broker.bootstrapServers)
            #expect(records.count == 31, "30 + 1 idempotent; nothing of the refused posts")
            let values = Set(records.map { String(decoding: $0.value ?? [], as: UTF8.self) })
            #expect(values == Set((0..<30).map { Self.tick($0) } + [Self.tick(200)]))
            for (i, a) in answered.enumerated() {
                let at = records.first { Int($0.partition) == a["partition"] as? Int && Int($0.offset) == a["offset"] as? Int }
                #expect(at.map { String(decoding: $0.value ?? [], as: UTF8.self) } == Self.tick(i), "record \(i) is where its answer says")
                #expect(at?.key == Array(["KRW-BTC", "KRW-ETH", "KRW-XRP", "KRW-SOL"][i % 4].utf8), "keyed by market")
            }

            let scraped = try await ObservabilityTests.get("http://127.0.0.1:\(metrics)/metrics").body
            #expect(scraped.contains(#"pipeline_ingest_records_total{stream="prices",outcome="accepted"} 31"#), "\(scraped)")
            #expect(scraped.contains(#"pipeline_ingest_records_total{stream="prices",outcome="rejected"} 2"#))
            ingest.terminate()
            #expect(await ingest.waitForExit() == 0, "SIGTERM: a graceful stop\n\(ingest.recentOutput())")
        }
    }

    @Test func aBrokerThatGoesAwayGets503AndTheRetryProducesOnlyWhatWasNotDurable() async throws {
        var broker = try await LocalBroker.start()
        defer { broker.kill() }
        let (ingest, port, metrics) = try await Self.start(bootstrap: broker.bootstrapServers, extra: ["--delivery-timeout", "3s"])
        defer { ingest.kill() }
        let warm = try await Self.post(port, "prices", body: Self.tick(0))
        #expect(warm.status == 201, "\(warm.json)")
        #expect(try await ObservabilityTests.get("http://127.0.0.1:\(metrics)/readyz").status == 200)

        await broker.stop()
        let body = (1...5).map { Self.tick($0) }.joined(separator: "\n")
        let failed = try await Self.post(port, "prices", body: body, idempotencyKey: "batch-1")
        #expect(failed.status == 503, "\(failed.json)")
        #expect(failed.headers["retry-after"] != nil)
        #expect(failed.json["accepted"] as? Int == 0, "nothing is reported durable that the broker did not acknowledge")
        #expect(try await ObservabilityTests.get("http://127.0.0.1:\(metrics)/readyz").status == 503)

        // The broker back (empty: memory storage); the client retries with the same key, as a
        // 503 with Retry-After asks, until it is answered 201 (the endpoint's producer reconnects
        // within a second, reconnect.backoff.max.ms=1000, not librdkafka's 10 s; a loaded machine
        // can still make the first retry time out): the five are produced once. The broker lost
        // the producer's id: with one request in flight (the default) librdkafka bumps the epoch
        // of that id again and again, each refused, until the statistics show it and a new
        // producer takes over (with 5 in flight, the second refusal is fatal instead).
        broker = try await broker.restart()
        let back = ContinuousClock.now
        var retried = try await Self.post(port, "prices", body: body, idempotencyKey: "batch-1")
        let retryUntil = ContinuousClock.now + .seconds(60)
        while retried.status == 503, ContinuousClock.now < retryUntil {
            retried = try await Self.post(port, "prices", body: body, idempotencyKey: "batch-1")
        }
        print("ingest answered 201 \(ContinuousClock.now - back) after the broker was back")
        #expect(retried.status == 201, "\(retried.json)\n\(ingest.recentOutput(lines: 30))")
        #expect(retried.json["accepted"] as? Int == 5)
        let records = try await OperatorCommandTests.readAll("prices.raw", bootstrap: broker.bootstrapServers)
        #expect(records.map { String(decoding: $0.value ?? [], as: UTF8.self) }.sorted() == (1...5).map { Self.tick($0) }.sorted())
        #expect(try await ObservabilityTests.get("http://127.0.0.1:\(metrics)/readyz").status == 200)
    }

    /// A connection that goes silent is closed after `--idle-timeout` (2 s here), not held with
    /// its handler for good: in the middle of a request (a body announced and withheld) and
    /// between requests (after an answer, on a kept-alive connection). An HTTP/1.0 request's
    /// connection closes with its answer unless it asked to keep it.
    @Test func silentAndHTTP10ConnectionsAreClosed() async throws {
        try await LocalBroker.with { broker in
            let (ingest, port, _) = try await Self.start(bootstrap: broker.bootstrapServers, extra: ["--idle-timeout", "2s"])
            defer { ingest.kill() }
            let withheld = await RawHTTP.exchange(
                port: port, "POST /v1/prices HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(Self.pricesToken)\r\nContent-Length: 500\r\n\r\n{\"type\"")
            #expect(withheld.closedAfter.map { $0 >= .seconds(2) } == true,
                    "a withheld body closed after \(withheld.closedAfter.map { "\($0)" } ?? "more than 30 s")")
            let answered = await RawHTTP.exchange(port: port, "POST /v1/prices HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
            #expect(answered.answer.hasPrefix("HTTP/1.1 401"), "\(answered.answer.prefix(80))")
            #expect(answered.closedAfter.map { $0 >= .seconds(2) } == true,
                    "an idle kept-alive connection closed after \(answered.closedAfter.map { "\($0)" } ?? "more than 30 s")")
            // HTTP/1.0: closed once answered, unless the request asks to keep the connection
            // (then the answer says it is kept, and the idle timeout ends it).
            let old = await RawHTTP.exchange(port: port, "POST /v1/prices HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}")
            #expect(old.answer.hasPrefix("HTTP/1.1 401") && old.answer.lowercased().contains("\r\nconnection: close\r\n"), "\(old.answer.prefix(300))")
            #expect(old.closedAfter.map { $0 < .milliseconds(1500) } == true, "HTTP/1.0 closed after \(old.closedAfter.map { "\($0)" } ?? "more than 30 s")")
            let kept = await RawHTTP.exchange(port: port, "POST /v1/prices HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}")
            #expect(kept.answer.lowercased().contains("\r\nconnection: keep-alive\r\n"), "\(kept.answer.prefix(300))")
            #expect(kept.closedAfter.map { $0 >= .seconds(2) } == true, "HTTP/1.0 keep-alive closed after \(kept.closedAfter.map { "\($0)" } ?? "more than 30 s")")
        }
    }

    /// `Expect: 100-continue` (clients that hold a body back until the server wants it): a post
    /// that may go on gets `100 Continue` and then its answer; one refused from its head gets the
    /// refusal and the connection closes, since its body may never come.
    @Test func aClientThatExpectsContinueIsToldToSendOrRefused() async throws {
        try await LocalBroker.with { broker in
            let (ingest, port, _) = try await Self.start(bootstrap: broker.bootstrapServers)
            defer { ingest.kill() }
            let body = Self.tick(1)
            let sending = try #require(RawHTTP.Connection(port: port))
            await sending.send(
                "POST /v1/prices HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(Self.pricesToken)\r\nExpect: 100-continue\r\nContent-Length: \(body.utf8.count)\r\n\r\n")
            let interim = await sending.read(until: "\r\n\r\n").answer
            #expect(interim.hasPrefix("HTTP/1.1 100 Continue"), "\(interim)")
            await sending.send(body)
            let answer = await sending.read(until: "]}\n").answer
            #expect(answer.hasPrefix("HTTP/1.1 201"), "\(answer.prefix(300))")
            let refused = await RawHTTP.exchange(port: port, "POST /v1/prices HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\nContent-Length: 500\r\n\r\n")
            #expect(refused.answer.hasPrefix("HTTP/1.1 401") && refused.answer.lowercased().contains("\r\nconnection: close\r\n"), "\(refused.answer.prefix(300))")
            #expect(refused.closedAfter.map { $0 < .seconds(2) } == true, "closed after \(refused.closedAfter.map { "\($0)" } ?? "more than 30 s")")
        }
    }

    /// SIGTERM stops the endpoint in a bounded time, whatever its connections do: an idle
    /// kept-alive one, and one whose request was answered from its head (401) while its body
    /// never comes, are closed at once (not after the 75 s idle timeout), and the process exits 0.
    @Test func aStopClosesIdleAndUnfinishedConnectionsAndExits() async throws {
        try await LocalBroker.with { broker in
            let (ingest, port, _) = try await Self.start(bootstrap: broker.bootstrapServers)
            defer { ingest.kill() }
            let idle = try #require(RawHTTP.Connection(port: port))
            await idle.send("POST /v1/prices HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
            #expect(await idle.read(until: "\r\n\r\n").answer.hasPrefix("HTTP/1.1 401"))
            let unfinished = try #require(RawHTTP.Connection(port: port))
            await unfinished.send("POST /v1/prices HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 500\r\n\r\n{\"type\"")
            #expect(await unfinished.read(until: "\r\n\r\n").answer.hasPrefix("HTTP/1.1 401"))
            let stopped = ContinuousClock.now
            ingest.terminate()
            async let idleClosed = idle.read(until: nil, since: stopped).closedAfter
            async let unfinishedClosed = unfinished.read(until: nil, since: stopped).closedAfter
            let status = await Deadline.race(.seconds(30)) { await ingest.waitForExit() }
            #expect(status.map(ManagedProcess.exitCode(waitStatus:)) == 0, "exit: \(status.map { "\($0)" } ?? "none within 30 s")\n\(ingest.recentOutput())")
            for (name, closed) in [("idle", await idleClosed), ("unfinished", await unfinishedClosed)] {
                #expect(closed.map { $0 < .seconds(20) } == true, "the \(name) connection closed after \(closed.map { "\($0)" } ?? "more than 30 s")")
            }
        }
    }

    /// An `Idempotency-Key` holds across replicas and restarts: two `ingest http` processes share
    /// their keys through a compacted topic. A retry sent to the other replica right after the
    /// answer, and one sent to a process started after both were killed, get the first answer
    /// and produce nothing; the same key with another body is refused on every replica.
    @Test func anIdempotencyKeyHoldsAcrossReplicasAndRestarts() async throws {
        try await LocalBroker.with { broker in
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [broker.bootstrapServers]))
            try await admin.createTopic(TopicSpec(name: "prices.raw", partitions: 3))
            await admin.close()
            let (a, portA, _) = try await Self.start(bootstrap: broker.bootstrapServers)
            defer { a.kill() }
            let (b, portB, _) = try await Self.start(bootstrap: broker.bootstrapServers)
            defer { b.kill() }
            let body = (0..<10).map { Self.tick($0) }.joined(separator: "\n")
            let first = try await Self.post(portA, "prices", body: body, idempotencyKey: "order-77")
            #expect(first.status == 201, "\(first.json)")
            let records = first.json["records"] as? [[String: Any]] ?? []

            let elsewhere = try await Self.post(portB, "prices", body: body, idempotencyKey: "order-77")
            #expect(elsewhere.status == 201 && elsewhere.headers["idempotent-replayed"] == "true", "the other replica answers as the first did: \(elsewhere.headers)")
            #expect((elsewhere.json["records"] as? [[String: Any]] ?? []).map { "\($0["partition"] ?? "")@\($0["offset"] ?? "")" }
                == records.map { "\($0["partition"] ?? "")@\($0["offset"] ?? "")" })
            let otherBody = try await Self.post(portB, "prices", body: Self.tick(99), idempotencyKey: "order-77")
            #expect(otherBody.status == 422, "\(otherBody.json)")

            a.kill()
            b.kill()
            _ = await a.waitForExit()
            _ = await b.waitForExit()
            let (c, portC, _) = try await Self.start(bootstrap: broker.bootstrapServers)
            defer { c.kill() }
            let afterRestart = try await Self.post(portC, "prices", body: body, idempotencyKey: "order-77")
            #expect(afterRestart.status == 201 && afterRestart.headers["idempotent-replayed"] == "true", "a restarted process still knows the key: \(afterRestart.headers)")
            let produced = try await OperatorCommandTests.readAll("prices.raw", bootstrap: broker.bootstrapServers)
            #expect(produced.count == 10, "produced once: \(produced.count) records")
        }
    }

    /// Load from a second process on loopback (8 connections, 50 posts each of 20 records):
    /// every post is answered, and what the answers accepted is exactly what a reader finds.
    @Test func aLoadFromASecondProcessIsCountedExactlyInTheTopic() async throws {
        try await LocalBroker.with { broker in
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [broker.bootstrapServers]))
            try await admin.createTopic(TopicSpec(name: "prices.raw", partitions: 4))
            await admin.close()
            let (ingest, port, _) = try await Self.start(bootstrap: broker.bootstrapServers, extra: ["--rate-limit", "100000"])
            defer { ingest.kill() }
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ingest-load-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: dir) }
            let body = dir.appendingPathComponent("body.jsonl")
            try (0..<20).map { Self.tick($0) }.joined(separator: "\n").write(to: body, atomically: true, encoding: .utf8)
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("Benchmarks/IngestBench/load.py").path
            let run = try await OperatorCommandTests.run(
                "/usr/bin/env", ["PYTHONDONTWRITEBYTECODE=1", "python3", script, "http://127.0.0.1:\(port)/v1/prices", Self.pricesToken, body.path, "20", "8", "50"])
            #expect(run.status == 0, "\(run.stderr)")
            let result = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any] ?? [:]
            #expect(result["requests"] as? Int == 400, "\(run.stdout)")
            #expect((result["status"] as? [String: Int]) == ["201": 400], "\(run.stdout)")
            let accepted = result["records_accepted"] as? Int ?? -1
            #expect(accepted == 8_000)
            let records = try await OperatorCommandTests.readAll("prices.raw", bootstrap: broker.bootstrapServers)
            #expect(records.count == accepted, "a reader finds exactly what the answers accepted")
        }
    }
}
