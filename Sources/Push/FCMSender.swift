import AsyncHTTPClient
import Deadlines
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Workers

/// How a sender retries: attempts in all, the backoff (exponential with full jitter, or the
/// provider's `Retry-After`), each attempt's timeout and the whole send's deadline.
public struct PushRetry: Sendable, Hashable {
    public var attempts = 5
    public var initialBackoff: Duration = .milliseconds(500)
    public var maxBackoff: Duration = .seconds(30)
    public var attemptTimeout: Duration = .seconds(10)
    /// No send waits past this, backoffs included: what is left is a `send-failed` dead letter.
    public var deadline: Duration = .seconds(60)

    public init() {}

    /// The wait before attempt `attempt + 1` (`attempt` from 1): the provider's `Retry-After`
    /// when it gave one (as given: a sender that cannot wait that long before its deadline
    /// gives up instead of coming back early), else a random time up to initial × 2^(attempt-1),
    /// at most `maxBackoff`.
    func backoff(after attempt: Int, retryAfter: Duration?, random: inout some RandomNumberGenerator) -> Duration {
        if let retryAfter { return retryAfter }
        let cap = min(maxBackoff, initialBackoff * (1 << min(attempt - 1, 20)))
        let ms = max(1, Int64(cap.components.seconds * 1000 + cap.components.attoseconds / 1_000_000_000_000_000))
        return .milliseconds(Int64.random(in: 1...ms, using: &random))
    }

    /// `Retry-After` as seconds or an HTTP date; nil when absent or unreadable.
    static func retryAfter(_ value: String?, now: Date) -> Duration? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int64(value), seconds >= 0 { return .seconds(seconds) }
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "GMT")
        f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = f.date(from: value) else { return nil }
        return .milliseconds(max(0, Int64(date.timeIntervalSince(now) * 1000)))
    }
}

/// What a provider answered, sorted into what the sender does with it.
public enum PushOutcome: Sendable, Equatable {
    /// Accepted; FCM's message name or APNs' `apns-id`.
    case sent(id: String)
    /// The device token is gone or invalid: no retry; the token goes to the dead-tokens topic.
    case deadToken(reason: String)
    /// Worth another attempt (429, 5xx, a connection or timeout failure), after `retryAfter`
    /// when the provider said.
    case retry(reason: String, retryAfter: Duration?)
    /// The credentials were refused: refresh once, then try again.
    case refreshCredentials(reason: String)
    /// Refused for good (a sender mismatch, an invalid payload): a dead letter with the reason.
    case rejected(reason: String)
}

/// `push.fcm`: one `notifications.fcm` record (an FCM HTTP v1 `messages:send` body) in, sent to
/// FCM; out, a `notifications.sent` record (keyed by the notification's dedupe key), or a
/// `notifications.dead-tokens` record (keyed by the token), or a dead letter (`send-rejected`,
/// `send-failed`).
///
/// Duplicates: a notification whose dedupe key the ``SentLedger`` holds is not sent again (a
/// redelivery after a crash between the send and the commit, once the sent record is in the
/// ledger). What can still repeat: a send whose sent record was not yet written when the worker
/// died. FCM collapses repeats on the device by the message's collapse key.
public struct FCMSender: ConcurrentTransform {
    public static let transformName = "push.fcm"
    public var name: String { Self.transformName }

    public let tokens: FCMAccessTokens
    public let client: HTTPClient
    /// `https://fcm.googleapis.com` (another one for a local fake).
    public let endpoint: String
    public let project: String
    /// The app named on dead-token records (for the app's backend to prune its tokens).
    public let app: String
    public let retry: PushRetry
    public let ledger: SentLedger?
    let metrics: PushMetrics
    let logger: Logger

    public init(
        tokens: FCMAccessTokens, client: HTTPClient, endpoint: String = "https://fcm.googleapis.com", app: String? = nil,
        retry: PushRetry = PushRetry(), ledger: SentLedger? = nil, logger: Logger = Logger(label: "push.fcm")
    ) {
        self.tokens = tokens
        self.client = client
        self.endpoint = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
        self.project = tokens.account.projectID
        self.app = app ?? tokens.account.projectID
        self.retry = retry
        self.ledger = ledger
        self.metrics = PushMetrics(provider: "fcm")
        self.logger = logger
    }

    var sendURL: String { "\(endpoint)/v1/projects/\(project)/messages:send" }

    public func process(_ record: InputRecord) async -> TransformOutput {
        guard let slice = record.value else { return .empty }
        let value = Array(slice)
        let message: FCMMessage
        do throws(DecodeFailure) { message = try FCMMessage(value, headers: record.headers) } catch { return TransformOutput(failures: [error]) }
        if let ledger, !ledger.isLoaded { _ = await ledger.waitLoaded(timeout: .seconds(30)) }
        if let ledger, ledger.contains(message.dedupeKey) {
            metrics.outcome("duplicate")
            return .empty
        }
        let started = ContinuousClock.now
        let deadline = started + retry.deadline
        var random = SystemRandomNumberGenerator()
        var attempt = 0
        var refreshed = false
        var last = ""
        while true {
            attempt += 1
            let outcome = await send(value, deadline: deadline)
            switch outcome {
            case .sent(let id):
                metrics.sent(after: ContinuousClock.now - started)
                ledger?.insert(message.dedupeKey)
                return TransformOutput(records: [PushRecords.sent(provider: "fcm", id: id, message.dedupeKey, recipient: message.recipient, key: record.key)])
            case .deadToken(let reason):
                metrics.outcome("dead-token")
                guard case .token(let token) = message.recipient else {
                    // A topic is never a dead token: FCM said so of something else.
                    return TransformOutput(failures: [DecodeFailure(field: "message.topic", reason: .sendRejected, detail: reason)])
                }
                return TransformOutput(records: [PushRecords.deadToken(provider: "fcm", app: app, token: token, reason: reason, message.dedupeKey)])
            case .rejected(let reason):
                metrics.outcome("rejected")
                return TransformOutput(failures: [DecodeFailure(field: "$", reason: .sendRejected, detail: reason)])
            case .refreshCredentials(let reason):
                last = reason
                if !refreshed {
                    refreshed = true
                    attempt -= 1  // a refresh is not an attempt
                    continue
                }
                metrics.outcome("rejected")
                return TransformOutput(failures: [DecodeFailure(field: "$", reason: .sendRejected, detail: "refused after a new token: \(reason)")])
            case .retry(let reason, let retryAfter):
                last = reason
                let wait = retry.backoff(after: attempt, retryAfter: retryAfter, random: &random)
                guard attempt < retry.attempts, ContinuousClock.now + wait < deadline else {
                    metrics.outcome("failed")
                    return TransformOutput(failures: [DecodeFailure(field: "$", reason: .sendFailed, detail: "\(attempt) attempts: \(last)")])
                }
                metrics.outcome("retried")
                try? await Task.sleep(for: wait)
            }
        }
    }

    /// One attempt: a token, the POST, the answer sorted.
    func send(_ body: [UInt8], deadline: ContinuousClock.Instant) async -> PushOutcome {
        let token: String
        do { token = try await tokens.token() } catch {
            return .retry(reason: "no access token: \(error)", retryAfter: nil)
        }
        var request = HTTPClientRequest(url: sendURL)
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "Content-Type", value: "application/json; charset=utf-8")
        request.body = .bytes(ByteBuffer(bytes: body))
        let timeout = min(retry.attemptTimeout, max(.milliseconds(1), deadline - ContinuousClock.now))
        let client = self.client
        // The whole exchange, the answer's body included, within the attempt's time.
        let answered = await Deadline.race(timeout) { () -> Result<(status: Int, body: [UInt8], retryAfter: String?), any Error> in
            do {
                let response = try await client.execute(request, timeout: .seconds(Int64(timeout.components.seconds) + 1))
                let body = try await response.body.collect(upTo: 256 * 1024)
                return .success((Int(response.status.code), Array(body.readableBytesView), response.headers.first(name: "Retry-After")))
            } catch {
                return .failure(error)
            }
        }
        switch answered {
        case nil:
            return .retry(reason: "no whole answer within \(timeout)", retryAfter: nil)
        case .failure(let error)?:
            return .retry(reason: "\(error)", retryAfter: nil)
        case .success(let answer)?:
            let outcome = Self.classify(status: answer.status, body: answer.body, retryAfter: PushRetry.retryAfter(answer.retryAfter, now: Date()))
            if case .refreshCredentials = outcome { tokens.invalidate(token) }
            return outcome
        }
    }

    /// FCM HTTP v1's answers (https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode):
    /// 200 with the message name; `UNREGISTERED` (404) and an `INVALID_ARGUMENT` about the
    /// registration token are a dead token; `QUOTA_EXCEEDED` (429), `UNAVAILABLE` (503) and
    /// `INTERNAL` (500) are retried; 401 refreshes the token; the rest (`SENDER_ID_MISMATCH`,
    /// other 4xx) is refused for good.
    static func classify(status: Int, body: [UInt8], retryAfter: Duration?) -> PushOutcome {
        let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        if status == 200 {
            return .sent(id: object?["name"] as? String ?? "")
        }
        let error = object?["error"] as? [String: Any]
        let state = error?["status"] as? String ?? ""
        let message = error?["message"] as? String ?? String(decoding: body.prefix(200), as: UTF8.self)
        let details = error?["details"] as? [[String: Any]] ?? []
        let code = details.compactMap { $0["errorCode"] as? String }.first ?? state
        let reason = "\(status) \(code.isEmpty ? "?" : code): \(message)"
        switch (status, code) {
        case (404, "UNREGISTERED"), (_, "UNREGISTERED"): return .deadToken(reason: reason)
        case (400, "INVALID_ARGUMENT") where message.localizedCaseInsensitiveContains("registration token"): return .deadToken(reason: reason)
        case (401, _): return .refreshCredentials(reason: reason)
        case (429, _), (500...599, _): return .retry(reason: reason, retryAfter: retryAfter)
        default: return .rejected(reason: reason)
        }
    }
}

/// The fields of an FCM `messages:send` body the sender needs: whom it goes to and its dedupe
/// key (the record's `dedupe-key` header, else `message.data.dedupe_key`).
struct FCMMessage {
    enum Recipient: Equatable { case token(String), topic(String), condition(String) }
    var recipient: Recipient
    var dedupeKey: String

    init(_ value: [UInt8], headers: [RecordHeader]) throws(DecodeFailure) {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(value))) as? [String: Any] else {
            throw DecodeFailure(field: "$", reason: .malformedJSON, detail: "not a JSON object")
        }
        guard let message = object["message"] as? [String: Any] else {
            throw DecodeFailure(field: "message", reason: .missingField, detail: "an FCM messages:send body has a message")
        }
        if let token = message["token"] as? String, !token.isEmpty {
            recipient = .token(token)
        } else if let topic = message["topic"] as? String, !topic.isEmpty {
            recipient = .topic(topic)
        } else if let condition = message["condition"] as? String, !condition.isEmpty {
            recipient = .condition(condition)
        } else {
            throw DecodeFailure(field: "message.token", reason: .missingField, detail: "a message goes to a token, a topic or a condition")
        }
        let header = headers.string(named: "dedupe-key").flatMap { $0.isEmpty ? nil : $0 }
        let data = (message["data"] as? [String: Any])?["dedupe_key"] as? String
        guard let key = header ?? data else {
            throw DecodeFailure(field: "message.data.dedupe_key", reason: .missingField, detail: "no dedupe-key header and no data.dedupe_key")
        }
        dedupeKey = key
    }
}
