import AsyncHTTPClient
import Foundation
import HTTPTesting
import Synchronization
import Testing
import Workers
@testable import Push

/// The APNs sender against a local APNs (HTTP/2 over TLS with a certificate made for the run)
/// that checks what the real one checks (the provider token's ES256 signature and claims, its
/// age and renewals, the headers, the payload) and answers as APNs does.
@Suite(.serialized, .timeLimit(.minutes(2))) struct APNsSenderTests {
    static let device = String(repeating: "ab", count: 32)

    static func notification(token: String = device, dedupe: String, collapse: String = "campaign-101") -> InputRecord {
        let n = PushNotification(recipient: .token(token), title: "Walk 10,000 steps", body: "Campaign 101 is 80% funded",
                                 data: ["campaign": "101"], collapseKey: collapse, dedupeKey: dedupe, imageURL: "https://cdn.example/t/1.jpg")
        return InputRecord(key: Array("token:\(token)".utf8), value: n.apnsJSON(),
                           headers: [RecordHeader("apns-collapse-id", collapse), RecordHeader("dedupe-key", "apns:" + dedupe)],
                           timestamp: 1, origin: RecordOrigin(topic: "notifications.apns", partition: 0, offset: 0))
    }

    /// A clock the sender and the fake share, moved by the test.
    final class Clock: Sendable {
        let offset = Mutex<TimeInterval>(0)
        func now() -> Date { Date().addingTimeInterval(offset.withLock { $0 }) }
        func advance(_ seconds: TimeInterval, _ fake: FakeAPNs) {
            offset.withLock { $0 += seconds }
            fake.advance(by: seconds)
        }
    }

    /// The sender as a topology builds it (`APNsSender.make`): the key and the CA from files.
    static func sender(
        _ fake: FakeAPNs, retry: PushRetry = FCMSenderTests.fastRetry, ledger: SentLedger? = nil, clock: Clock = Clock(), bundle: String? = nil
    ) throws -> APNsSender {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("apns-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }  // make reads the key and the CA
        try fake.keyP8.write(toFile: dir + "/AuthKey.p8", atomically: true, encoding: .utf8)
        try fake.certificate.writeTrustRoot(to: dir + "/ca.pem")
        var options = PushOptions()
        options.apnsKeyFile = dir + "/AuthKey.p8"
        options.apnsKeyID = fake.keyID
        options.apnsTeamID = fake.teamID
        options.apnsBundleID = bundle ?? fake.bundleID
        options.apnsEndpoint = fake.server.baseURL
        options.apnsCAFile = dir + "/ca.pem"
        options.app = "walk"
        var sender = try APNsSender.make(options: options, ledger: ledger, environment: [:], now: { clock.now() })
        sender = APNsSender(tokens: sender.tokens, client: sender.client, endpoint: sender.endpoint, headers: sender.headers, app: "walk", retry: retry, ledger: ledger)
        return sender
    }

    /// Runs `body` with a sender, then shuts its client and the fake down, also when it throws.
    static func run(
        _ fake: FakeAPNs, retry: PushRetry = FCMSenderTests.fastRetry, clock: Clock = Clock(), bundle: String? = nil,
        _ body: (APNsSender) async throws -> Void
    ) async throws {
        let sender = try Self.sender(fake, retry: retry, clock: clock, bundle: bundle)
        do { try await body(sender) } catch {
            await sender.shutdown()
            try? await fake.server.close()
            throw error
        }
        await sender.shutdown()
        try await fake.server.close()
    }

    static func json(_ record: OutputRecord) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(record.value ?? []))) as? [String: Any] ?? [:]
    }

    @Test func aNotificationGoesOverHTTP2WithItsHeadersAndAVerifiedProviderToken() async throws {
        let fake = try await FakeAPNs.start()
        var retry = FCMSenderTests.fastRetry
        retry.attemptTimeout = .seconds(10)  // 41 sends on a machine running every other suite too
        retry.deadline = .seconds(30)
        try await Self.run(fake, retry: retry) { sender in
            let before = Int64(Date().timeIntervalSince1970)
            let out = await sender.process(Self.notification(dedupe: "d1"))
            #expect(out.failures.isEmpty, "\(out.failures)")
            let sent = try #require(out.records.first)
            #expect(sent.output == "sent" && sent.key == Array("apns:d1".utf8), "keyed by the dedupe key")
            let value = Self.json(sent)
            #expect(value["provider"] as? String == "apns" && value["token"] as? String == Self.device)
            let delivered = try #require(fake.sent.first)
            #expect(fake.refused["HTTP2Required"] == nil, "APNs takes HTTP/2 only: \(fake.refused)")
            #expect(value["id"] as? String == delivered.apnsID && delivered.apnsID == APNsMessage.uuid("apns:d1"), "\(value)")
            #expect(delivered.headers["apns-topic"] == "com.example.walk" && delivered.headers["apns-push-type"] == "alert")
            #expect(delivered.headers["apns-priority"] == "10" && delivered.headers["apns-collapse-id"] == "campaign-101")
            let expiration = try #require(delivered.headers["apns-expiration"].flatMap { Int64($0) })
            #expect(expiration >= before + 24 * 3600 && expiration <= before + 24 * 3600 + 60, "kept a day: \(expiration)")
            let aps = try #require(delivered.json["aps"] as? [String: Any])
            #expect((aps["alert"] as? [String: Any])?["title"] as? String == "Walk 10,000 steps" && aps["mutable-content"] as? Int == 1)
            #expect(delivered.json["image"] as? String == "https://cdn.example/t/1.jpg")
            // Many sends, concurrently: one provider token, every one over HTTP/2. An attempt that timed out on
            // a loaded machine is sent again with the same apns-id, so notifications are counted by their ids.
            let outcomes = await withTaskGroup(of: String.self) { group in
                for i in 0..<40 {
                    group.addTask {
                        let out = await sender.process(Self.notification(dedupe: "many-\(i)"))
                        return out.records.first?.output ?? "failed: \(out.failures)"
                    }
                }
                return await group.reduce(into: [String]()) { $0.append($1) }
            }
            #expect(outcomes.filter { $0 != "sent" }.isEmpty, "\(outcomes.filter { $0 != "sent" })")
            #expect(Set(fake.sent.map(\.apnsID)).count == 41 && fake.refused.isEmpty, "\(fake.sent.count) sent, refused \(fake.refused)")
            #expect(fake.providerTokensSeen == 1 && sender.tokens.refreshes == 1, "the token is reused")
        }
    }

    @Test func unregisteredAndBadDeviceTokensGoToTheirTopicWithoutARetry() async throws {
        let fake = try await FakeAPNs.start()
        let gone = String(repeating: "cd", count: 32)
        fake.unregister(gone)
        try await Self.run(fake) { sender in
            for (token, reason) in [(gone, "410 Unregistered"), (String(repeating: "e", count: 63), "400 BadDeviceToken")] {
                let before = fake.server.requests.count
                let out = await sender.process(Self.notification(token: token, dedupe: token))
                let dead = try #require(out.records.first, "\(out.failures)")
                #expect(dead.output == "dead-tokens" && dead.key == Array(token.utf8) && out.failures.isEmpty)
                let value = Self.json(dead)
                #expect(value["provider"] as? String == "apns" && value["app"] as? String == "walk" && value["reason"] as? String == reason, "\(value)")
                #expect(fake.server.requests.count == before + 1, "no retry")
            }
        }
    }

    @Test func throttlingServerErrorsAndAResetConnectionAreRetriedThenSent() async throws {
        let fake = try await FakeAPNs.start()
        fake.fail([FakeAPNs.error(429, "TooManyRequests", headers: [.retryAfter: "1"]), FakeAPNs.error(503, "ServiceUnavailable"),
                   FakeAPNs.error(500, "InternalServerError"), .reset])
        var retry = FCMSenderTests.fastRetry
        retry.attempts = 5
        try await Self.run(fake, retry: retry) { sender in
            let started = ContinuousClock.now
            let out = await sender.process(Self.notification(dedupe: "d3"))
            #expect(out.records.first?.output == "sent", "\(out.failures)")
            #expect(ContinuousClock.now - started >= .seconds(1), "Retry-After was honoured")
            #expect(fake.sent.count == 1 && fake.server.requests.count == 5, "four failures, then the send")
        }
    }

    /// `ExpiredProviderToken` renews a token at least 20 minutes old, once; a younger one is not
    /// renewed (that would be `TooManyProviderTokenUpdates`): the send is retried, then fails.
    /// A token is renewed by itself after 40 minutes, within APNs' 20 to 60.
    @Test func theProviderTokenIsRenewedWithinAPNsLimitsAndNeverTooOften() async throws {
        let fake = try await FakeAPNs.start()
        let clock = Clock()
        var retry = FCMSenderTests.fastRetry
        retry.attempts = 2
        try await Self.run(fake, retry: retry, clock: clock) { sender in
            #expect(await sender.process(Self.notification(dedupe: "t1")).records.first?.output == "sent")
            // Young and refused: not renewed.
            fake.expireProviderTokens()
            let young = await sender.process(Self.notification(dedupe: "t2"))
            #expect(young.failures.first?.reason == .sendFailed && young.failures.first?.detail.contains("ExpiredProviderToken") == true, "\(young.failures)")
            #expect(sender.tokens.refreshes == 1)
            // 21 minutes on: renewed once, then sent.
            clock.advance(21 * 60, fake)
            #expect(await sender.process(Self.notification(dedupe: "t3")).records.first?.output == "sent")
            #expect(sender.tokens.refreshes == 2 && fake.providerTokensSeen == 2)
            // 41 minutes after that one: a new token without being asked.
            clock.advance(41 * 60, fake)
            #expect(await sender.process(Self.notification(dedupe: "t4")).records.first?.output == "sent")
            #expect(sender.tokens.refreshes == 3 && fake.providerTokensSeen == 3)
            #expect(fake.refused["TooManyProviderTokenUpdates"] == nil, "\(fake.refused)")
        }
    }

    /// A wrong bundle id (`DeviceTokenNotForTopic`) is a dead letter, not a dead token: pruning
    /// every token over a configuration error would lose them all. A topic has no APNs address.
    @Test func aWrongBundleAndATopicAreDeadLettersWithTheReason() async throws {
        let fake = try await FakeAPNs.start()
        try await Self.run(fake, bundle: "com.example.other") { sender in
            let out = await sender.process(Self.notification(dedupe: "b1"))
            #expect(out.records.isEmpty && out.failures.first?.reason == .sendRejected && out.failures.first?.detail == "400 DeviceTokenNotForTopic")
            var topic = Self.notification(dedupe: "b2")
            topic.key = Array("topic:campaign-101".utf8)
            let refused = await sender.process(topic)
            #expect(refused.failures.first?.reason == .sendRejected && refused.failures.first?.field == "key", "\(refused.failures)")
            #expect(fake.sent.isEmpty)
        }
    }

    /// A slow APNs: every attempt ends at its timeout, the send at its deadline.
    @Test func aSlowAPNsNeverHoldsASendPastItsDeadline() async throws {
        let fake = try await FakeAPNs.start()
        fake.setDelay(.seconds(5))
        var retry = FCMSenderTests.fastRetry
        retry.attemptTimeout = .milliseconds(400)
        retry.deadline = .seconds(2)
        retry.attempts = 100
        try await Self.run(fake, retry: retry) { sender in
            let started = ContinuousClock.now
            let out = await sender.process(Self.notification(dedupe: "s1"))
            let took = ContinuousClock.now - started
            #expect(out.failures.first?.reason == .sendFailed, "\(out)")
            // Far below the 40 s of 100 attempts of 400 ms; slack for a loaded CI machine, which can
            // be late to wake a timer (the FCM sender's twin of this took 4.9 s in one CI run).
            #expect(took < .seconds(8), "bounded by the 2 s deadline: \(took) (\(out.failures.first?.detail ?? ""))")
        }
    }

    @Test func aMissingOrBadKeyIsNamedNeverShown() throws {
        var options = PushOptions()
        options.apnsKeyID = "K"
        options.apnsTeamID = "T"
        options.apnsBundleID = "b"
        #expect(throws: PushConfigurationError.self) { try APNsSender.make(options: options, ledger: nil, environment: [:]) }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bad-\(UUID().uuidString).p8").path
        try "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWJ1dC1ub3QtYS1rZXk=\n-----END PRIVATE KEY-----\n".write(toFile: path, atomically: true, encoding: .utf8)
        options.apnsKeyFile = path
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            _ = try APNsSender.make(options: options, ledger: nil, environment: [:])
            Issue.record("a bad key must throw")
        } catch {
            #expect(error.description.contains(path) && error.description.contains("P-256") && !error.description.contains("c2VjcmV0"), "\(error)")
        }
    }
}
