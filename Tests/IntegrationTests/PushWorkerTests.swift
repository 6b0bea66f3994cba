import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPTesting
import Kafka
import Operations
import Pipeline
import PipelineTesting
import Testing
import Workers

/// `pipelinectl worker` running a `push.fcm` stage against the local broker and a local FCM
/// that checks what the real one checks: every notification reaches FCM at least once across a
/// SIGKILL of the sender mid-batch; what is sent twice is bounded by what was in flight at the
/// kill (the stage's concurrency), the sent ledger keeping the rest from going again; dead
/// tokens reach their topic.
@Suite(.serialized, .timeLimit(.minutes(5))) struct PushWorkerTests {
    @Test func everyNotificationReachesFCMAcrossASigkillAndRepeatsAreBounded() async throws {
        let fake = try await FakeFCM.start()
        // Slow enough answers that sends are in flight when the worker is killed.
        fake.setDelay(.milliseconds(15))
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("push-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let credentials = work.appendingPathComponent("fcm-service-account.json").path
        FileManager.default.createFile(atPath: credentials, contents: Data(fake.serviceAccountJSON), attributes: [.posixPermissions: 0o600])
        let concurrency = 8
        let topologyPath = work.appendingPathComponent("topology.yaml").path
        try """
            topics:
              - {name: notifications.fcm, partitions: 2}
              - {name: notifications.sent, partitions: 2, config: {cleanup.policy: compact}}
              - {name: notifications.dead-tokens, partitions: 1, config: {cleanup.policy: compact}}
              - {name: pipeline.dead-letters, partitions: 1}
            stages:
              - name: notifications-fcm
                chain: [push.fcm]
                inputs: [notifications.fcm]
                outputs: {sent: notifications.sent, dead-tokens: notifications.dead-tokens}
                dead-letter-topic: pipeline.dead-letters
                concurrency: \(concurrency)
                options: {credentials-file: \(credentials), fcm-endpoint: "\(fake.server.baseURL)", app: walk, send-backoff: 50ms}
            """.write(toFile: topologyPath, atomically: true, encoding: .utf8)

        try await LocalBroker.with { broker in
            let bootstrap = broker.bootstrapServers
            let topology = try Topology.load(path: topologyPath)
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
            _ = try await topology.apply(using: admin)
            await admin.close()
            let total = 400
            let dead = Set([7, 123, 301])
            let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
            let records = (0..<total).map { i -> ProducerRecord in
                let token = dead.contains(i) ? "unregistered-\(i)" : "device-\(i % 37)"
                let n = PushNotification(recipient: .token(token), title: "Step \(i)", body: "b", collapseKey: "c\(i % 5)", dedupeKey: "n\(i)")
                return ProducerRecord(topic: "notifications.fcm", key: Array("token:\(token)".utf8), value: n.fcmJSON(),
                                      headers: [KafkaHeader(key: "dedupe-key", string: "n\(i)")])
            }
            #expect(try await producer.send(records).allSatisfy { $0.error == nil })
            await producer.close()

            let first = try WorkerProcessTests.startWorker("notifications-fcm", topology: topologyPath, bootstrap: bootstrap)
            defer { first.kill() }
            try await eventually("a quarter sent", within: .seconds(90)) { fake.sent.count >= total / 4 }
            first.kill()
            _ = await first.waitForExit()
            let atKill = fake.sent.count
            #expect(atKill < total - dead.count, "killed mid-way: \(atKill) sent")

            let second = try WorkerProcessTests.startWorker("notifications-fcm", topology: topologyPath, bootstrap: bootstrap)
            defer { second.kill() }
            let expected = Set((0..<total).filter { !dead.contains($0) }.map { "n\($0)" })
            try await eventually("every notification sent", within: .seconds(120)) { Set(fake.sentDedupeKeys).isSuperset(of: expected) }
            var deadTokens: [ConsumerRecord] = []
            try await eventually("the dead tokens on their topic", within: .seconds(60)) {
                deadTokens = try await OperatorCommandTests.readAll("notifications.dead-tokens", bootstrap: bootstrap)
                return Set(deadTokens.compactMap { $0.key.map { String(decoding: $0, as: UTF8.self) } }) == Set(dead.map { "unregistered-\($0)" })
            }
            // The sender's metrics, as Prometheus scrapes them from the worker.
            let line = second.output().split(separator: "\n").last { $0.contains("metrics and health endpoint listening") } ?? ""
            let port = line.range(of: #"port=(\d+)"#, options: .regularExpression).flatMap { Int(line[$0].dropFirst(5)) }
            let (data, _) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(try #require(port))/metrics")!)
            let metrics = String(decoding: data, as: UTF8.self).split(separator: "\n").filter { !$0.hasPrefix("#") }
            /// The value of the series `name` that has every one of `labels` (in any order).
            func value(_ name: String, _ labels: [String]) -> Double? {
                metrics.first { $0.hasPrefix(name + "{") && labels.allSatisfy($0.contains) }.flatMap { Double($0.split(separator: " ").last ?? "") }
            }
            #expect((value("push_sends_total", [#"provider="fcm""#, #"outcome="sent""#]) ?? 0) > 0, "\(metrics.filter { $0.hasPrefix("push_") })")
            #expect((value("push_token_refreshes_total", [#"provider="fcm""#]) ?? 0) >= 1)
            #expect(metrics.contains { $0.hasPrefix("push_send_seconds_bucket") }, "the latency histogram")
            second.terminate()
            #expect(await second.waitForExit() == 0)

            let sentKeys = fake.sentDedupeKeys
            let repeats = sentKeys.count - Set(sentKeys).count
            print("push: \(total) notifications, \(atKill) sent before the SIGKILL, \(sentKeys.count) sends in all, \(repeats) repeated (in flight: up to \(concurrency) sends plus sent records not yet acknowledged)")
            #expect(Set(sentKeys) == expected, "nothing else sent")
            // What can repeat: the sends in flight at the kill (`concurrency`) and the sends FCM had
            // accepted whose sent record the broker had not yet acknowledged (one produce round
            // trip's worth at this rate, under `concurrency` here).
            #expect(repeats <= 2 * concurrency, "repeats bounded by what was in flight at the kill: \(repeats)")
            let ledger = try await OperatorCommandTests.readAll("notifications.sent", bootstrap: bootstrap)
            #expect(Set(ledger.compactMap { $0.key.map { String(decoding: $0, as: UTF8.self) } }) == expected, "one sent record per notification")
        }
        try await fake.server.close()
    }
}
