import AsyncHTTPClient
import Deadlines
import Foundation
import NIOCore
import NIOHTTP1
import Workers

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
    let delivery: PushDelivery
    public var project: String { tokens.account.projectID }
    /// The app named on dead-token records (for the app's backend to prune its tokens).
    public var app: String { delivery.app }
    public var retry: PushRetry { delivery.retry }

    public init(
        tokens: FCMAccessTokens, client: HTTPClient, endpoint: String = "https://fcm.googleapis.com", app: String? = nil,
        retry: PushRetry = PushRetry(), ledger: SentLedger? = nil
    ) {
        self.tokens = tokens
        self.client = client
        self.endpoint = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
        self.delivery = PushDelivery(provider: "fcm", app: app ?? tokens.account.projectID, retry: retry, ledger: ledger)
    }

    var sendURL: String { "\(endpoint)/v1/projects/\(project)/messages:send" }

    /// Closes the client's connections (after the stage stopped); not for `HTTPClient.shared`.
    public func shutdown() async { try? await client.shutdown() }

    public func process(_ record: InputRecord) async -> TransformOutput {
        guard let slice = record.value else { return .empty }
        let value = Array(slice)
        let message: FCMMessage
        do throws(DecodeFailure) { message = try FCMMessage(value, headers: record.headers) } catch { return TransformOutput(failures: [error]) }
        return await delivery.deliver(dedupeKey: message.dedupeKey, recipient: message.recipient) { deadline in
            await send(value, deadline: deadline)
        }
    }

    /// One attempt: a token, the POST, the answer sorted.
    func send(_ body: [UInt8], deadline: ContinuousClock.Instant) async -> PushOutcome {
        // The token fetch counts against the send's deadline too: a slow token endpoint must not
        // hold the send past it (an abandoned fetch goes on; the next send waits for it).
        let tokens = self.tokens
        let fetched = await Deadline.race(until: deadline) { () -> Result<String, any Error> in
            do { return .success(try await tokens.token()) } catch { return .failure(error) }
        }
        let token: String
        switch fetched {
        case nil: return .retry(reason: "no access token before the send's deadline", retryAfter: nil)
        case .failure(let error)?: return .retry(reason: "no access token: \(error)", retryAfter: nil)
        case .success(let value)?: token = value
        }
        var request = HTTPClientRequest(url: sendURL)
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "Content-Type", value: "application/json; charset=utf-8")
        request.body = .bytes(ByteBuffer(bytes: body))
        let timeout = min(retry.attemptTimeout, max(.milliseconds(1), deadline - ContinuousClock.now))
        switch await PushDelivery.exchange(client, request, timeout: timeout) {
        case nil:
            return .retry(reason: "no whole answer within \(timeout)", retryAfter: nil)
        case .failure(let error)?:
            return .retry(reason: "\(error)", retryAfter: nil)
        case .success(let answer)?:
            let outcome = Self.classify(status: answer.status, body: answer.body, retryAfter: PushRetry.retryAfter(answer.headers.first(name: "Retry-After"), now: Date()))
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
    var recipient: PushRecipient
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
