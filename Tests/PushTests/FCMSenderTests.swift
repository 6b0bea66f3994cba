import AsyncHTTPClient
import Foundation
import HTTPTesting
import Push
import Testing
import Workers
@testable import Push

/// The FCM sender against a local FCM that checks what the real one checks (the assertion's
/// signature and claims, the bearer token, the body) and answers as FCM does.
@Suite(.serialized, .timeLimit(.minutes(2))) struct FCMSenderTests {
    static func notification(token: String, dedupe: String) -> InputRecord {
        let n = PushNotification(recipient: .token(token), title: "Walk 10,000 steps", body: "Campaign 101 is 80% funded",
                                 data: ["campaign": "101"], collapseKey: "campaign-101", dedupeKey: dedupe, imageURL: "https://cdn.example/t/1.jpg")
        return InputRecord(key: Array("token:\(token)".utf8), value: n.fcmJSON(), headers: [RecordHeader("dedupe-key", "fcm:" + dedupe)],
                           timestamp: 1, origin: RecordOrigin(topic: "notifications.fcm", partition: 0, offset: 0))
    }

    static func sender(_ fake: FakeFCM, retry: PushRetry = Self.fastRetry, ledger: SentLedger? = nil) throws -> FCMSender {
        let account = try ServiceAccount(json: fake.serviceAccountJSON, source: "test")
        let tokens = FCMAccessTokens(account: account, client: .shared)
        return FCMSender(tokens: tokens, client: .shared, endpoint: fake.server.baseURL, app: "walk", retry: retry, ledger: ledger)
    }

    static var fastRetry: PushRetry {
        var r = PushRetry()
        r.initialBackoff = .milliseconds(20)
        r.maxBackoff = .milliseconds(200)
        // Generous: a local answer on a loaded CI machine can take seconds, and an attempt cut
        // short would add a request the counts below do not expect.
        r.attemptTimeout = .seconds(10)
        r.deadline = .seconds(30)
        return r
    }

    static func json(_ record: OutputRecord) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(record.value ?? []))) as? [String: Any] ?? [:]
    }

    @Test func aNotificationIsSentWithAVerifiedTokenAndRecordedAsSent() async throws {
        let fake = try await FakeFCM.start()
        let sender = try Self.sender(fake)
        let out = await sender.process(Self.notification(token: "device-1", dedupe: "d1"))
        #expect(out.failures.isEmpty, "\(out.failures)")
        let sent = try #require(out.records.first)
        #expect(sent.output == "sent" && sent.key == Array("fcm:d1".utf8), "keyed by the dedupe key")
        let value = Self.json(sent)
        #expect(value["provider"] as? String == "fcm" && value["token"] as? String == "device-1")
        #expect((value["id"] as? String)?.hasPrefix("projects/test-project/messages/") == true, "\(value)")
        #expect(fake.sent.count == 1 && fake.assertionsRefused == 0)
        let message = try #require(fake.sent.first?.body["message"] as? [String: Any])
        #expect((message["notification"] as? [String: Any])?["title"] as? String == "Walk 10,000 steps")
        // The token is cached: a second send fetches none.
        _ = await sender.process(Self.notification(token: "device-2", dedupe: "d2"))
        #expect(fake.tokensIssued == 1 && fake.sent.count == 2)
        try await fake.server.close()
    }

    @Test func deadTokensGoToTheirTopicAndAreNotRetried() async throws {
        let fake = try await FakeFCM.start()
        let sender = try Self.sender(fake)
        for token in ["unregistered-1", "invalid-2"] {
            let before = fake.server.requests(to: "/v1/projects/test-project/messages:send")
            let out = await sender.process(Self.notification(token: token, dedupe: token))
            let dead = try #require(out.records.first)
            #expect(dead.output == "dead-tokens" && dead.key == Array(token.utf8) && out.failures.isEmpty)
            let value = Self.json(dead)
            #expect(value["app"] as? String == "walk" && value["token"] as? String == token)
            #expect((value["reason"] as? String)?.contains(token.hasPrefix("unregistered") ? "UNREGISTERED" : "INVALID_ARGUMENT") == true, "\(value)")
            #expect(fake.server.requests(to: "/v1/projects/test-project/messages:send") == before + 1, "no retry")
        }
        try await fake.server.close()
    }

    @Test func quotaUnavailableAndAResetAreRetriedHonouringRetryAfterThenSent() async throws {
        let fake = try await FakeFCM.start()
        fake.fail([FakeFCM.error(429, "RESOURCE_EXHAUSTED", "quota", code: "QUOTA_EXCEEDED", retryAfter: "1"),
                   FakeFCM.error(503, "UNAVAILABLE", "unavailable", code: "UNAVAILABLE"),
                   FakeFCM.error(500, "INTERNAL", "internal", code: "INTERNAL"), .reset])
        let sender = try Self.sender(fake)
        let started = ContinuousClock.now
        let out = await sender.process(Self.notification(token: "device-3", dedupe: "d3"))
        let took = ContinuousClock.now - started
        #expect(out.records.first?.output == "sent", "\(out.failures)")
        #expect(fake.server.requests(to: "/v1/projects/test-project/messages:send") == 5, "four failures, then the send")
        #expect(took >= .seconds(1), "Retry-After: 1 was waited: \(took)")
        try await fake.server.close()
    }

    @Test func anExpiredTokenIsRefreshedOnceOnA401() async throws {
        let fake = try await FakeFCM.start()
        let sender = try Self.sender(fake)
        _ = await sender.process(Self.notification(token: "device-4", dedupe: "d4"))
        fake.expireTokens()
        let out = await sender.process(Self.notification(token: "device-5", dedupe: "d5"))
        #expect(out.records.first?.output == "sent", "\(out.failures)")
        #expect(fake.tokensIssued == 2, "one refresh")
        try await fake.server.close()
    }

    @Test func aSenderMismatchIsADeadLetterWithTheProvidersReason() async throws {
        let fake = try await FakeFCM.start()
        let sender = try Self.sender(fake)
        let out = await sender.process(Self.notification(token: "mismatch-1", dedupe: "d6"))
        let failure = try #require(out.failures.first)
        #expect(failure.reason == .sendRejected && failure.detail.contains("SENDER_ID_MISMATCH") && out.records.isEmpty, "\(failure)")
        try await fake.server.close()
    }

    /// Nothing waits past the send's deadline: a provider that keeps failing (and one that
    /// does not answer) ends in a `send-failed` dead letter within it, and a `Retry-After`
    /// beyond the deadline is not waited for.
    @Test func attemptsAndTheDeadlineBoundASend() async throws {
        let fake = try await FakeFCM.start()
        fake.fail(Array(repeating: FakeFCM.error(503, "UNAVAILABLE", "down", code: "UNAVAILABLE"), count: 20))
        var retry = Self.fastRetry
        retry.attempts = 3
        let out = await (try Self.sender(fake, retry: retry)).process(Self.notification(token: "device-7", dedupe: "d7"))
        #expect(out.failures.first?.reason == .sendFailed && out.failures.first?.detail.contains("3 attempts") == true, "\(out.failures)")
        #expect(fake.server.requests(to: "/v1/projects/test-project/messages:send") == 3)

        fake.clearFailures()
        fake.fail([FakeFCM.error(429, "RESOURCE_EXHAUSTED", "quota", code: "QUOTA_EXCEEDED", retryAfter: "3600")])
        let patient = ContinuousClock.now
        let later = await (try Self.sender(fake, retry: retry)).process(Self.notification(token: "device-10", dedupe: "d10"))
        // Under the 30 s deadline, not waited out (a fresh-clone CI run took over 2 s to make the sender and send once).
        #expect(later.failures.first?.reason == .sendFailed && ContinuousClock.now - patient < .seconds(10), "an hour's Retry-After: given up at once")
        // An answer whose body trickles for 10 s: the attempt ends at its timeout, the next one is sent.
        fake.fail([ScriptedResponse(status: .ok, headers: [.contentType: "application/json"],
                                    body: Array(#"{"name":"projects/test-project/messages/trickled"}"#.utf8), delivery: .trickle(every: .milliseconds(200), size: 1))])
        var short = retry
        short.attemptTimeout = .milliseconds(500)
        let before = fake.server.requests(to: "/v1/projects/test-project/messages:send")
        let trickled = ContinuousClock.now
        let cut = await (try Self.sender(fake, retry: short)).process(Self.notification(token: "device-11", dedupe: "d11"))
        // Far below the trickle's 10 s (a loaded CI machine took over 3 s for the two attempts).
        #expect(cut.records.first?.output == "sent" && ContinuousClock.now - trickled < .seconds(7), "\(cut.failures)")
        // At least two: on a loaded machine the next attempt can overrun its 500 ms too (a CI run
        // saw a third); never one, which would mean the trickled answer was waited for.
        #expect(fake.server.requests(to: "/v1/projects/test-project/messages:send") >= before + 2, "the trickled attempt was cut, the next sent")
        fake.setDelay(.seconds(3))
        retry.attempts = 100
        retry.attemptTimeout = .milliseconds(300)
        retry.deadline = .seconds(2)
        let started = ContinuousClock.now
        let slow = await (try Self.sender(fake, retry: retry)).process(Self.notification(token: "device-8", dedupe: "d8"))
        let took = ContinuousClock.now - started
        #expect(slow.failures.first?.reason == .sendFailed, "\(slow)")
        // Far below the 30 s of 100 attempts of 300 ms; slack for a loaded CI machine, which can be
        // late to wake a timer (one run of the whole suite took 4.9 s here).
        #expect(took < .seconds(8), "bounded by the 2 s deadline: \(took) (\(slow.failures.first?.detail ?? ""))")
        // A token endpoint that takes 12 s (a fresh sender has no token yet): the fetch counts
        // against the same deadline.
        fake.setDelay(.zero)
        fake.setTokenDelay(.seconds(12))
        let fetching = ContinuousClock.now
        let tokenless = await (try Self.sender(fake, retry: retry)).process(Self.notification(token: "device-12", dedupe: "d12"))
        let waited = ContinuousClock.now - fetching
        #expect(tokenless.failures.first?.reason == .sendFailed && tokenless.failures.first?.detail.contains("access token") == true, "\(tokenless)")
        // Far below the endpoint's 12 s; slack for a loaded CI machine (one run of the suite: 4.8 s).
        #expect(waited < .seconds(8), "the token fetch is bounded by the 2 s deadline: \(waited)")
        try await fake.server.close()
    }

    /// A notification the ledger holds (sent before, by this worker or another) is not sent again.
    @Test func theLedgerKeepsARedeliveredNotificationFromBeingSentTwice() async throws {
        let fake = try await FakeFCM.start()
        let ledger = SentLedger()
        ledger.markLoaded()
        let sender = try Self.sender(fake, ledger: ledger)
        #expect(await sender.process(Self.notification(token: "device-9", dedupe: "d9")).records.count == 1)
        let again = await sender.process(Self.notification(token: "device-9", dedupe: "d9"))
        #expect(again.records.isEmpty && again.failures.isEmpty, "the redelivery produces nothing")
        #expect(fake.sent.count == 1, "sent once")
        try await fake.server.close()
    }

    /// The same notification twice at once (a stage that keeps state per input partition emits
    /// it once per partition an entity arrives on): the second waits for the first's outcome and
    /// is not sent; after a send that failed, the next one of the key goes.
    @Test func theSameKeyInFlightTwiceIsSentOnce() async throws {
        let fake = try await FakeFCM.start()
        fake.setDelay(.milliseconds(200))
        let ledger = SentLedger()
        ledger.markLoaded()
        let sender = try Self.sender(fake, ledger: ledger)
        let outs = await withTaskGroup(of: TransformOutput.self) { group in
            for _ in 0..<3 { group.addTask { await sender.process(Self.notification(token: "device-5", dedupe: "d5")) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(fake.sent.count == 1 && outs.filter { !$0.records.isEmpty }.count == 1, "sent once: \(fake.sent.count)")
        var once = Self.fastRetry
        once.attempts = 1
        let failing = try Self.sender(fake, retry: once, ledger: ledger)
        fake.fail([FakeFCM.error(503, "UNAVAILABLE", "unavailable"), FakeFCM.error(503, "UNAVAILABLE", "unavailable")])
        let before = fake.server.requests.count
        let failed = await withTaskGroup(of: TransformOutput.self) { group in
            for _ in 0..<2 { group.addTask { await failing.process(Self.notification(token: "device-6", dedupe: "d6")) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(failed.allSatisfy { $0.failures.first?.reason == .sendFailed } && fake.server.requests.count - before >= 2, "each tried: \(failed)")
        try await fake.server.close()
    }

    @Test func aBadServiceAccountFileIsNamedNeverShown() throws {
        #expect(throws: PushConfigurationError.self) { try ServiceAccount(json: Array("[]".utf8), source: "sa.json") }
        let badKey = #expect(throws: PushConfigurationError.self) {
            try ServiceAccount(json: Array(#"{"type":"service_account","project_id":"p","client_email":"e","private_key":"SECRET-NOT-A-KEY"}"#.utf8), source: "sa.json")
        }
        #expect(badKey?.description.contains("private_key") == true && badKey?.description.contains("SECRET") == false, "\(String(describing: badKey))")
        let noProject = #expect(throws: PushConfigurationError.self) {
            try ServiceAccount(json: Array(#"{"type":"service_account","client_email":"e","private_key":"k"}"#.utf8), source: "sa.json")
        }
        #expect(noProject?.description == "sa.json: project_id is missing (a service-account key file has it)")
    }

    @Test func backoffIsExponentialWithJitterAndRetryAfterWins() {
        var r = PushRetry()
        r.initialBackoff = .milliseconds(100)
        r.maxBackoff = .seconds(1)
        var random = SystemRandomNumberGenerator()
        for attempt in 1...8 {
            let wait = r.backoff(after: attempt, retryAfter: nil, random: &random)
            #expect(wait > .zero && wait <= min(.seconds(1), .milliseconds(100 * (1 << (attempt - 1)))), "\(attempt): \(wait)")
        }
        #expect(r.backoff(after: 1, retryAfter: .seconds(7), random: &random) == .seconds(7), "Retry-After as given")
        #expect(PushRetry.retryAfter("3", now: Date()) == .seconds(3))
        #expect(PushRetry.retryAfter("soon", now: Date()) == nil)
        // An HTTP date: the time until then (2027-01-15 08:00:00 GMT is 1,800,000,000).
        #expect(PushRetry.retryAfter("Fri, 15 Jan 2027 08:00:10 GMT", now: Date(timeIntervalSince1970: 1_800_000_000)) == .seconds(10))
    }
}
