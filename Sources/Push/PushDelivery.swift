import AsyncHTTPClient
import Deadlines
import Foundation
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

/// Whom a notification goes to.
enum PushRecipient: Equatable, Sendable {
    case token(String), topic(String), condition(String)
}

/// What both senders do around one provider's attempts: the ledger check before the first,
/// the retries (``PushRetry``), one credential refresh, the metrics, and the outcome as
/// records (`sent`, `dead-tokens`) or a dead letter (`send-rejected`, `send-failed`).
struct PushDelivery: Sendable {
    let provider: String
    /// The app named on dead-token records.
    let app: String
    let retry: PushRetry
    let ledger: SentLedger?
    let metrics: PushMetrics

    init(provider: String, app: String, retry: PushRetry, ledger: SentLedger?) {
        self.provider = provider
        self.app = app
        self.retry = retry
        self.ledger = ledger
        self.metrics = PushMetrics(provider: provider)
    }

    /// Sends one notification: `attempt` tries once, bounded by the deadline it is given (the
    /// whole send's), and sorts the answer.
    func deliver(
        dedupeKey: String, recipient: PushRecipient, attempt: (ContinuousClock.Instant) async -> PushOutcome
    ) async -> TransformOutput {
        guard let ledger else { return await attempts(dedupeKey: dedupeKey, recipient: recipient, attempt: attempt).output }
        if !ledger.isLoaded { _ = await ledger.waitLoaded(timeout: .seconds(30)) }
        guard await ledger.claim(dedupeKey) else {
            metrics.outcome("duplicate")
            return .empty
        }
        let (output, sent) = await attempts(dedupeKey: dedupeKey, recipient: recipient, attempt: attempt)
        ledger.finish(dedupeKey, sent: sent)
        return output
    }

    /// The attempts of one send, and whether the provider accepted it.
    private func attempts(
        dedupeKey: String, recipient: PushRecipient, attempt: (ContinuousClock.Instant) async -> PushOutcome
    ) async -> (output: TransformOutput, sent: Bool) {
        let started = ContinuousClock.now
        let deadline = started + retry.deadline
        var random = SystemRandomNumberGenerator()
        var attempts = 0
        var refreshed = false
        var last = ""
        while true {
            attempts += 1
            switch await attempt(deadline) {
            case .sent(let id):
                metrics.sent(after: ContinuousClock.now - started)
                return (TransformOutput(records: [PushRecords.sent(provider: provider, id: id, dedupeKey, recipient: recipient)]), true)
            case .deadToken(let reason):
                metrics.outcome("dead-token")
                guard case .token(let token) = recipient else {
                    // A topic is never a dead token: the provider said so of something else.
                    return (TransformOutput(failures: [DecodeFailure(field: "topic", reason: .sendRejected, detail: reason)]), false)
                }
                return (TransformOutput(records: [PushRecords.deadToken(provider: provider, app: app, token: token, reason: reason, dedupeKey)]), false)
            case .rejected(let reason):
                metrics.outcome("rejected")
                return (TransformOutput(failures: [DecodeFailure(field: "$", reason: .sendRejected, detail: reason)]), false)
            case .refreshCredentials(let reason):
                last = reason
                if !refreshed {
                    refreshed = true
                    attempts -= 1  // a refresh is not an attempt
                    continue
                }
                metrics.outcome("rejected")
                return (TransformOutput(failures: [DecodeFailure(field: "$", reason: .sendRejected, detail: "refused after a new token: \(reason)")]), false)
            case .retry(let reason, let retryAfter):
                last = reason
                let wait = retry.backoff(after: attempts, retryAfter: retryAfter, random: &random)
                guard attempts < retry.attempts, ContinuousClock.now + wait < deadline else {
                    metrics.outcome("failed")
                    return (TransformOutput(failures: [DecodeFailure(field: "$", reason: .sendFailed, detail: "\(attempts) attempts: \(last)")]), false)
                }
                metrics.outcome("retried")
                try? await Task.sleep(for: wait)
            }
        }
    }
}

/// A provider's answer to one request.
struct PushAnswer: Sendable {
    var status: Int
    var body: [UInt8]
    var headers: HTTPHeaders
}

extension PushDelivery {
    /// One request and its whole answer, body included, within `timeout` (a trickled answer is
    /// cut): nil when the time ran out, the client's error when it failed.
    static func exchange(_ client: HTTPClient, _ request: HTTPClientRequest, timeout: Duration) async -> Result<PushAnswer, any Error>? {
        await Deadline.race(timeout) { () -> Result<PushAnswer, any Error> in
            do {
                let response = try await client.execute(request, timeout: .seconds(Int64(timeout.components.seconds) + 1))
                let body = try await response.body.collect(upTo: 256 * 1024)
                return .success(PushAnswer(status: Int(response.status.code), body: Array(body.readableBytesView), headers: response.headers))
            } catch {
                return .failure(error)
            }
        }
    }
}
