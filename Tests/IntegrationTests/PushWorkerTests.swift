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

/// `pipelinectl worker` running a `push.fcm` and a `push.apns` stage against the local broker,
/// a local FCM and a local APNs (HTTP/2 over TLS) that check what the real ones check: every
/// notification reaches each provider at least once across a SIGKILL of both senders mid-batch;
/// what is sent twice is bounded by what was in flight at the kill (the stage's concurrency),
/// the sent ledger keeping the rest from going again; dead tokens reach their topic.
@Suite(.serialized, .timeLimit(.minutes(6))) struct PushWorkerTests {
    @Test func everyNotificationReachesFCMAndAPNsAcrossASigkillAndRepeatsAreBounded() async throws {
        let fake = try await FakeFCM.start()
        let apns = try await FakeAPNs.start()
        // Slow enough answers that sends are in flight when the worker is killed.
        fake.setDelay(.milliseconds(15))
        apns.setDelay(.milliseconds(15))
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("push-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let credentials = work.appendingPathComponent("fcm-service-account.json").path
        _ = FileManager.default.createFile(atPath: credentials, contents: Data(fake.serviceAccountJSON), attributes: [.posixPermissions: 0o600])
        let p8 = work.appendingPathComponent("AuthKey.p8").path
        _ = FileManager.default.createFile(atPath: p8, contents: Data(apns.keyP8.utf8), attributes: [.posixPermissions: 0o600])
        let ca = work.appendingPathComponent("apns-ca.pem").path
        try apns.certificate.writeTrustRoot(to: ca)
        let concurrency = 8
        let topologyPath = work.appendingPathComponent("topology.yaml").path
        try """
            topics:
              - {name: notifications.fcm, partitions: 2}
              - {name: notifications.apns, partitions: 2}
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
              - name: notifications-apns
                chain: [push.apns]
                inputs: [notifications.apns]
                outputs: {sent: notifications.sent, dead-tokens: notifications.dead-tokens}
                dead-letter-topic: pipeline.dead-letters
                concurrency: \(concurrency)
                options:
                  key-file: \(p8)
                  key-id: \(apns.keyID)
                  team-id: \(apns.teamID)
                  bundle-id: \(apns.bundleID)
                  apns-endpoint: "\(apns.server.baseURL)"
                  ca-file: \(ca)
                  app: walk
                  send-backoff: 50ms
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
            /// A device's APNs token: 64 hex digits.
            func device(_ i: Int) -> String { String(format: "%064x", i) }
            for i in dead { apns.unregister(device(1000 + i)) }
            let records = (0..<total).flatMap { i -> [ProducerRecord] in
                let token = dead.contains(i) ? "unregistered-\(i)" : "device-\(i % 37)"
                let n = PushNotification(recipient: .token(token), title: "Step \(i)", body: "b", collapseKey: "c\(i % 5)", dedupeKey: "n\(i)")
                var onIPhone = n
                onIPhone.recipient = .token(device(dead.contains(i) ? 1000 + i : i % 37))
                return [
                    ProducerRecord(topic: "notifications.fcm", key: Array("token:\(token)".utf8), value: n.fcmJSON(),
                                   headers: [KafkaHeader(key: "dedupe-key", string: "n\(i)")]),
                    ProducerRecord(topic: "notifications.apns", key: Array("token:\(device(dead.contains(i) ? 1000 + i : i % 37))".utf8),
                                   value: onIPhone.apnsJSON(), headers: [KafkaHeader(key: "dedupe-key", string: "apns:n\(i)"),
                                                                         KafkaHeader(key: "apns-collapse-id", string: "c\(i % 5)")]),
                ]
            }
            #expect(try await producer.send(records).allSatisfy { $0.error == nil })
            await producer.close()

            // Each provider stops answering after a quarter, so that the workers die mid-way
            // however slowly the test runs (a CI run's FCM worker sent all before APNs' reached a
            // quarter).
            fake.hold(after: total / 4)
            apns.hold(after: total / 4)
            let first = try WorkerProcessTests.startWorker("notifications-fcm", topology: topologyPath, bootstrap: bootstrap)
            defer { first.kill() }
            let firstAPNs = try WorkerProcessTests.startWorker("notifications-apns", topology: topologyPath, bootstrap: bootstrap)
            defer { firstAPNs.kill() }
            try await eventually("a quarter sent", within: .seconds(90)) { fake.sent.count >= total / 4 && apns.sent.count >= total / 4 }
            first.kill()
            firstAPNs.kill()
            _ = await first.waitForExit()
            _ = await firstAPNs.waitForExit()
            let atKill = fake.sent.count, atKillAPNs = apns.sent.count
            #expect(atKill < total - dead.count && atKillAPNs < total - dead.count, "killed mid-way: \(atKill) and \(atKillAPNs) sent")
            fake.release()
            apns.release()

            let second = try WorkerProcessTests.startWorker("notifications-fcm", topology: topologyPath, bootstrap: bootstrap)
            defer { second.kill() }
            let secondAPNs = try WorkerProcessTests.startWorker("notifications-apns", topology: topologyPath, bootstrap: bootstrap)
            defer { secondAPNs.kill() }
            let expected = Set((0..<total).filter { !dead.contains($0) }.map { "n\($0)" })
            try await eventually("every notification sent", within: .seconds(120)) {
                Set(fake.sentDedupeKeys).isSuperset(of: expected) && Set(apns.sentDedupeKeys).isSuperset(of: expected)
            }
            var deadTokens: [ConsumerRecord] = []
            let deadKeys = Set(dead.map { "unregistered-\($0)" } + dead.map { device(1000 + $0) })
            try await eventually("the dead tokens on their topic", within: .seconds(60)) {
                deadTokens = try await OperatorCommandTests.readAll("notifications.dead-tokens", bootstrap: bootstrap)
                return Set(deadTokens.compactMap { $0.key.map { String(decoding: $0, as: UTF8.self) } }) == deadKeys
            }
            #expect(apns.refused["HTTP2Required"] == nil && apns.providerTokensSeen == 2, "HTTP/2; one provider token per worker run: \(apns.providerTokensSeen), refused \(apns.refused)")
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
            secondAPNs.terminate()
            #expect(await second.waitForExit() == 0)
            #expect(await secondAPNs.waitForExit() == 0)

            for (provider, sentKeys, before) in [("FCM", fake.sentDedupeKeys, atKill), ("APNs", apns.sentDedupeKeys, atKillAPNs)] {
                let repeats = sentKeys.count - Set(sentKeys).count
                print("push: \(provider): \(total) notifications, \(before) sent before the SIGKILL, \(sentKeys.count) sends in all, \(repeats) repeated (in flight: up to \(concurrency) sends plus sent records not yet acknowledged)")
                #expect(Set(sentKeys) == expected, "\(provider): nothing else sent")
                // What can repeat: the sends in flight at the kill (`concurrency`) and the sends the
                // provider had accepted whose sent record the broker had not yet acknowledged (one
                // produce round trip's worth at this rate, under `concurrency` here).
                #expect(repeats <= 2 * concurrency, "\(provider): repeats bounded by what was in flight at the kill: \(repeats)")
            }
            let ledger = try await OperatorCommandTests.readAll("notifications.sent", bootstrap: bootstrap)
            #expect(Set(ledger.compactMap { $0.key.map { String(decoding: $0, as: UTF8.self) } }) == expected.union(expected.map { "apns:" + $0 }),
                    "one sent record per notification and provider")
        }
        try await fake.server.close()
        try await apns.server.close()
    }
}
