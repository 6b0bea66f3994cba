import AsyncHTTPClient
import Crypto
import Foundation
import Metrics
import NIOCore
import NIOHTTP1
import Synchronization
import Workers

/// An APNs signing key (`AuthKey_KEYID.p8` from the developer account), its key id and team id.
/// Read from a file or the environment, never from a flag; never logged.
public struct APNsKey: Sendable {
    public var keyID: String
    public var teamID: String
    let key: JWT.SigningKey

    public init(pem: String, keyID: String, teamID: String, source: String) throws(PushConfigurationError) {
        guard !keyID.isEmpty else { throw PushConfigurationError("key-id: missing (the 10-character id of the .p8 key)") }
        guard !teamID.isEmpty else { throw PushConfigurationError("team-id: missing (the developer account's 10-character team id)") }
        self.keyID = keyID
        self.teamID = teamID
        key = try JWT.SigningKey.p256(pem: pem, source: source)
    }

    public static func load(path: String, keyID: String, teamID: String) throws(PushConfigurationError) -> APNsKey {
        guard let data = FileManager.default.contents(atPath: path) else { throw PushConfigurationError("\(path): cannot read the APNs key file (.p8)") }
        return try APNsKey(pem: String(decoding: data, as: UTF8.self), keyID: keyID, teamID: teamID, source: path)
    }
}

/// APNs' provider token: an ES256 JWT (`kid` the key id; `iss` the team id, `iat` when made),
/// reused for every send and made anew once it is `lifetime` old (40 minutes: APNs refuses a
/// token older than an hour and one renewed more often than every 20 minutes). After APNs
/// answers `ExpiredProviderToken`, a token at least 20 minutes old is renewed at once; a younger
/// one is not (renewing it would earn `TooManyProviderTokenUpdates`).
public final class APNsProviderTokens: Sendable {
    public static let minimumAge: TimeInterval = 20 * 60

    let key: APNsKey
    let lifetime: TimeInterval
    let now: @Sendable () -> Date
    private let state = Mutex<(token: String, issued: Date)?>(nil)
    private let refreshesMade = Atomic<Int>(0)
    private let refreshCounter = Counter(label: PushMetricName.tokenRefreshes, dimensions: [("provider", "apns")])

    public init(key: APNsKey, lifetime: Duration = .seconds(40 * 60), now: @escaping @Sendable () -> Date = { Date() }) {
        self.key = key
        self.lifetime = Double(lifetime.components.seconds)
        self.now = now
    }

    /// How many tokens were made.
    public var refreshes: Int { refreshesMade.load(ordering: .relaxed) }

    /// The current token, made anew when it is `lifetime` old.
    public func token() throws -> String {
        let now = self.now()
        return try state.withLock { current in
            if let current, now.timeIntervalSince(current.issued) < lifetime { return current.token }
            let made = try make(at: now)
            current = (made, now)
            return made
        }
    }

    /// APNs said `token` expired: forgets it if it is the current one and old enough to renew.
    /// Whether the next ``token()`` is a new one.
    public func expired(_ token: String) -> Bool {
        let now = self.now()
        return state.withLock { current in
            guard let c = current else { return true }
            guard c.token == token else { return true }  // already renewed by another send
            guard now.timeIntervalSince(c.issued) >= Self.minimumAge else { return false }
            current = nil
            return true
        }
    }

    private func make(at now: Date) throws -> String {
        refreshesMade.add(1, ordering: .relaxed)
        refreshCounter.increment()
        return try JWT.sign(
            claims: ["iss": .text(key.teamID), "iat": .number(Int64(now.timeIntervalSince1970))], extraHeader: ["kid": key.keyID], key: key.key)
    }
}

/// What goes in every send's headers besides the token.
public struct APNsHeaders: Sendable, Hashable {
    /// `apns-topic`: the app's bundle id.
    public var topic: String
    /// `apns-push-type` (`alert` for what the render stage writes: `aps.alert`).
    public var pushType = "alert"
    /// `apns-priority`: 10 at once, 5 when the device sees fit, 1 the least.
    public var priority = 10
    /// How long APNs keeps a notification for a device that is off (`apns-expiration` is now
    /// plus this); zero: one attempt, not kept.
    public var expiration: Duration = .seconds(24 * 3600)

    public init(topic: String) { self.topic = topic }
}

/// `push.apns`: one `notifications.apns` record (the APNs payload; the device token in the key,
/// `token:HEX`; `apns-collapse-id` as a header) in, sent to APNs over HTTP/2; out, a
/// `notifications.sent` record (keyed by the dedupe key), a `notifications.dead-tokens` record
/// (keyed by the token), or a dead letter (`send-rejected`, `send-failed`).
///
/// Every send of one notification carries the same `apns-id` (a UUID made from its dedupe key):
/// a repeat is the same notification to APNs' logs and the app. Duplicates are bounded as FCM's
/// are (``SentLedger``); the device replaces rather than stacks a repeat with the same
/// `apns-collapse-id`.
public struct APNsSender: ConcurrentTransform {
    public static let transformName = "push.apns"
    public var name: String { Self.transformName }

    public let tokens: APNsProviderTokens
    public let client: HTTPClient
    /// `https://api.push.apple.com` (the sandbox for development builds, a local APNs in tests).
    public let endpoint: String
    public let headers: APNsHeaders
    let delivery: PushDelivery

    public init(
        tokens: APNsProviderTokens, client: HTTPClient, endpoint: String = "https://api.push.apple.com", headers: APNsHeaders, app: String? = nil,
        retry: PushRetry = PushRetry(), ledger: SentLedger? = nil
    ) {
        self.tokens = tokens
        self.client = client
        self.endpoint = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
        self.headers = headers
        self.delivery = PushDelivery(provider: "apns", app: app ?? headers.topic, retry: retry, ledger: ledger)
    }

    public var retry: PushRetry { delivery.retry }

    /// Closes the connection to APNs (after the stage stopped).
    public func shutdown() async { try? await client.shutdown() }

    public func process(_ record: InputRecord) async -> TransformOutput {
        guard let slice = record.value else { return .empty }
        let message: APNsMessage
        do throws(DecodeFailure) { message = try APNsMessage(key: record.key, value: Array(slice), headers: record.headers) } catch {
            return TransformOutput(failures: [error])
        }
        return await delivery.deliver(dedupeKey: message.dedupeKey, recipient: .token(message.deviceToken)) { deadline in
            await send(message, deadline: deadline)
        }
    }

    /// One attempt: the provider token, the POST on the HTTP/2 connection, the answer sorted.
    func send(_ message: APNsMessage, deadline: ContinuousClock.Instant) async -> PushOutcome {
        let token: String
        do { token = try tokens.token() } catch { return .rejected(reason: "cannot sign the provider token: \(error)") }
        var request = HTTPClientRequest(url: "\(endpoint)/3/device/\(message.deviceToken)")
        request.method = .POST
        request.headers.add(name: "authorization", value: "bearer \(token)")
        request.headers.add(name: "apns-topic", value: headers.topic)
        request.headers.add(name: "apns-push-type", value: headers.pushType)
        request.headers.add(name: "apns-priority", value: String(headers.priority))
        let expiration = headers.expiration == .zero ? 0 : Int64(Date().timeIntervalSince1970) + headers.expiration.components.seconds
        request.headers.add(name: "apns-expiration", value: String(expiration))
        request.headers.add(name: "apns-id", value: message.apnsID)
        if let collapse = message.collapseID { request.headers.add(name: "apns-collapse-id", value: collapse) }
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: message.payload))
        let timeout = min(retry.attemptTimeout, max(.milliseconds(1), deadline - ContinuousClock.now))
        switch await PushDelivery.exchange(client, request, timeout: timeout) {
        case nil:
            return .retry(reason: "no whole answer within \(timeout)", retryAfter: nil)
        case .failure(let error)?:
            return .retry(reason: "\(error)", retryAfter: nil)
        case .success(let answer)?:
            let outcome = Self.classify(
                status: answer.status, body: answer.body, apnsID: answer.headers.first(name: "apns-id") ?? message.apnsID,
                retryAfter: PushRetry.retryAfter(answer.headers.first(name: "Retry-After"), now: Date()))
            if case .refreshCredentials(let reason) = outcome, !tokens.expired(token) {
                // Younger than 20 minutes: a new one would be refused (TooManyProviderTokenUpdates).
                return .retry(reason: "\(reason) (the token is younger than 20 minutes: not renewed)", retryAfter: nil)
            }
            return outcome
        }
    }

    /// APNs' answers (Apple's "Handling notification responses from APNs"): 200 with the
    /// `apns-id`; 410 (`Unregistered`, `ExpiredToken`) and 400 `BadDeviceToken` are a dead
    /// token; 403 `ExpiredProviderToken` renews the provider token; 429 (`TooManyRequests`,
    /// `TooManyProviderTokenUpdates`) and 5xx are retried; the rest (`BadTopic`,
    /// `DeviceTokenNotForTopic`, which a wrong bundle id causes for every token, so it is not a
    /// dead token; `InvalidProviderToken`; `PayloadTooLarge`) is refused for good.
    static func classify(status: Int, body: [UInt8], apnsID: String, retryAfter: Duration?) -> PushOutcome {
        if status == 200 { return .sent(id: apnsID) }
        let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        let code = object?["reason"] as? String ?? ""
        let reason = "\(status) \(code.isEmpty ? String(decoding: body.prefix(200), as: UTF8.self) : code)"
        switch (status, code) {
        case (410, _), (400, "BadDeviceToken"): return .deadToken(reason: reason)
        case (403, "ExpiredProviderToken"): return .refreshCredentials(reason: reason)
        case (429, _), (500...599, _): return .retry(reason: reason, retryAfter: retryAfter)
        default: return .rejected(reason: reason)
        }
    }
}

/// The parts of a `notifications.apns` record a send needs.
struct APNsMessage: Sendable {
    var deviceToken: String
    var payload: [UInt8]
    var dedupeKey: String
    var collapseID: String?
    /// The same UUID for every send of this notification (from its dedupe key).
    var apnsID: String

    init(key: [UInt8]?, value: [UInt8], headers: [RecordHeader]) throws(DecodeFailure) {
        let key = key.map { String(decoding: $0, as: UTF8.self) } ?? ""
        if key.hasPrefix("topic:") {
            throw DecodeFailure(field: "key", reason: .sendRejected, detail: "APNs has no topics; '\(key)' reaches iPhones through FCM")
        }
        guard key.hasPrefix("token:"), key.count > 6 else {
            throw DecodeFailure(field: "key", reason: .missingField, detail: "an APNs record's key is token:DEVICE_TOKEN")
        }
        deviceToken = String(key.dropFirst(6))
        guard NotificationRenderTransform.isHexadecimal(deviceToken) else {
            // Not hex: it could not be in a URL's path as it is, and APNs would call it a bad token.
            throw DecodeFailure(field: "key", reason: .sendRejected, detail: "an APNs device token is hexadecimal")
        }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(value))) as? [String: Any], object["aps"] is [String: Any] else {
            throw DecodeFailure(field: "aps", reason: .missingField, detail: "an APNs payload is a JSON object with aps")
        }
        let header = headers.string(named: "dedupe-key").flatMap { $0.isEmpty ? nil : $0 }
        guard let dedupe = header ?? (object["dedupe_key"] as? String) else {
            throw DecodeFailure(field: "dedupe_key", reason: .missingField, detail: "no dedupe-key header and no dedupe_key")
        }
        payload = value
        dedupeKey = dedupe
        collapseID = headers.string(named: "apns-collapse-id").flatMap { $0.isEmpty ? nil : $0 }
        apnsID = Self.uuid(dedupe)
    }

    /// A UUID (upper case, as APNs writes them) from the first 16 bytes of SHA-256(dedupe key),
    /// with the version (8, custom) and variant bits set.
    static func uuid(_ text: String) -> String {
        var b = Array(SHA256.hash(data: Data(text.utf8)).prefix(16))
        b[6] = (b[6] & 0x0f) | 0x80
        b[8] = (b[8] & 0x3f) | 0x80
        let hex = b.map { String(format: "%02X", $0) }.joined()
        let c = Array(hex)
        return "\(String(c[0..<8]))-\(String(c[8..<12]))-\(String(c[12..<16]))-\(String(c[16..<20]))-\(String(c[20..<32]))"
    }
}
