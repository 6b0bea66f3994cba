import Crypto
import Foundation
import HTTPTypes
import Synchronization

/// A local APNs as the real one behaves: HTTPS with HTTP/2 only (a certificate made at start,
/// ``certificate``, which its clients trust), `POST /3/device/TOKEN`, a provider token checked
/// with the key's public half (ES256 signature, `kid`, `iss` the team, `iat` within the hour,
/// renewed at most every 20 minutes), the headers checked (`apns-topic` the bundle id,
/// `apns-push-type`, `apns-priority`, `apns-expiration`, `apns-collapse-id` up to 64 bytes,
/// `apns-id` a UUID) and the payload (JSON with `aps`, up to 4 KB). Answers as APNs does:
///
/// - 200 with `apns-id`;
/// - 400 `BadDeviceToken` for a token that is not 64 hex digits, 410 `Unregistered` (with its
///   `timestamp`) for one ``unregister(_:)`` named;
/// - 403 `ExpiredProviderToken` for a token made before ``expireProviderTokens()`` or over an
///   hour ago; 429 `TooManyProviderTokenUpdates` for a token renewed within 20 minutes;
///
/// after the queued failures (``fail(_:)``: 429, 500, 503, a reset connection) are used up, one
/// per request. Its clock can be moved (``advance(by:)``) with the sender's.
public final class FakeAPNs: Sendable {
    public let server: TestHTTPServer
    public let certificate: TestCertificate
    public let bundleID: String
    public let teamID: String
    public let keyID: String
    let privateKey: P256.Signing.PrivateKey
    private let state: Mutex<State>

    struct State {
        var failures: [ScriptedResponse] = []
        var unregistered: Set<String> = []
        var sent: [Sent] = []
        /// Tokens seen, with when each was first seen (the fake's clock).
        var tokens: [String: Date] = [:]
        /// When each connection last brought a new token.
        var lastNewToken: [String: Date] = [:]
        var expiredBefore: Date?
        var refused: [String: Int] = [:]
        var delay: Duration = .zero
        var offset: TimeInterval = 0
    }

    /// One notification APNs accepted.
    public struct Sent: Sendable {
        public var deviceToken: String
        public var apnsID: String
        public var headers: [String: String]
        public var payload: [UInt8]

        public var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(payload))) as? [String: Any] ?? [:] }
    }

    /// `certificate`: the one it serves (a new one by default).
    public static func start(
        bundleID: String = "com.example.walk", teamID: String = "TEAM123456", keyID: String = "KEY1234567", certificate: TestCertificate? = nil
    ) async throws -> FakeAPNs {
        let certificate = try certificate ?? TestCertificate()
        let box = Box()
        let server = try await TestHTTPServer(fallback: { request in await box.fake!.answer(request) }, tls: certificate)
        let fake = FakeAPNs(server: server, certificate: certificate, bundleID: bundleID, teamID: teamID, keyID: keyID)
        box.fake = fake
        return fake
    }

    private init(server: TestHTTPServer, certificate: TestCertificate, bundleID: String, teamID: String, keyID: String) {
        self.server = server
        self.certificate = certificate
        self.bundleID = bundleID
        self.teamID = teamID
        self.keyID = keyID
        self.privateKey = P256.Signing.PrivateKey()
        self.state = Mutex(State())
    }

    final class Box: @unchecked Sendable { var fake: FakeAPNs? }

    /// The signing key as the developer account hands it out (`AuthKey_KEYID.p8`).
    public var keyP8: String { privateKey.pemRepresentation }

    public func fail(_ answers: [ScriptedResponse]) { state.withLock { $0.failures += answers } }
    public func unregister(_ token: String) { state.withLock { _ = $0.unregistered.insert(token) } }
    public func setDelay(_ delay: Duration) { state.withLock { $0.delay = delay } }
    /// Once `accepted` sends were taken, later ones wait for ``release()`` (then get a 503).
    public func hold(after accepted: Int) { sendHold.hold(after: accepted) }
    public func release() { sendHold.release() }
    private let sendHold = SendHold()
    /// Every provider token made until now counts as expired.
    public func expireProviderTokens() { state.withLock { $0.expiredBefore = Date().addingTimeInterval($0.offset + 1) } }
    /// Moves the fake's clock (the sender's must move with it).
    public func advance(by seconds: TimeInterval) { state.withLock { $0.offset += seconds } }
    public var now: Date { Date().addingTimeInterval(state.withLock { $0.offset }) }

    public var sent: [Sent] { state.withLock { $0.sent } }
    /// The distinct provider tokens it saw.
    public var providerTokensSeen: Int { state.withLock { $0.tokens.count } }
    /// How many requests were refused, by reason (`BadDeviceToken`, `TooManyProviderTokenUpdates`…).
    public var refused: [String: Int] { state.withLock { $0.refused } }
    public var sentDedupeKeys: [String] { sent.compactMap { $0.json["dedupe_key"] as? String } }

    public static func error(_ status: Int, _ reason: String, headers: HTTPFields = [:]) -> ScriptedResponse {
        .json(#"{"reason":"\#(reason)"}"#, status: HTTPResponse.Status(code: status), headers: headers)
    }

    func refuse(_ status: Int, _ reason: String) -> ScriptedResponse {
        state.withLock { $0.refused[reason, default: 0] += 1 }
        if status == 410 {
            let ms = Int64(now.timeIntervalSince1970 * 1000)
            return .json(#"{"reason":"\#(reason)","timestamp":\#(ms)}"#, status: .init(code: 410))
        }
        return Self.error(status, reason)
    }

    func answer(_ request: RecordedRequest) async -> ScriptedResponse {
        if await sendHold.wait(accepted: { state.withLock { $0.sent.count } }) { return Self.error(503, "ServiceUnavailable") }
        let delay = state.withLock { $0.delay }
        if delay > .zero { try? await Task.sleep(for: delay) }
        guard request.http2 else { return refuse(400, "HTTP2Required") }
        guard request.path.hasPrefix("/3/device/") else { return refuse(404, "BadPath") }
        guard request.method == .post else { return refuse(405, "MethodNotAllowed") }
        let token = String(request.path.dropFirst("/3/device/".count))
        // The provider token.
        guard let bearer = request.header("authorization"), bearer.hasPrefix("bearer ") else { return refuse(403, "MissingProviderToken") }
        let jwt = String(bearer.dropFirst(7))
        guard let iat = verify(jwt) else { return refuse(403, "InvalidProviderToken") }
        let tokenVerdict: String? = state.withLock { s in
            let now = Date().addingTimeInterval(s.offset)
            if let before = s.expiredBefore, iat < before { return "ExpiredProviderToken" }
            if now.timeIntervalSince(iat) > 3600 { return "ExpiredProviderToken" }
            let connection = request.connection
            if s.tokens[jwt] == nil {
                // A new token: refused within 20 minutes of this connection's last one.
                if let last = s.lastNewToken[connection], now.timeIntervalSince(last) < 20 * 60 { return "TooManyProviderTokenUpdates" }
                s.tokens[jwt] = now
                s.lastNewToken[connection] = now
            } else if s.lastNewToken[connection] == nil {
                s.lastNewToken[connection] = now
            }
            return nil
        }
        switch tokenVerdict {
        case "ExpiredProviderToken"?: return refuse(403, "ExpiredProviderToken")
        case let other?: return refuse(429, other)
        case nil: break
        }
        // The headers.
        guard let topic = request.header("apns-topic") else { return refuse(400, "MissingTopic") }
        guard topic == bundleID else { return refuse(400, "DeviceTokenNotForTopic") }
        let types = ["alert", "background", "location", "voip", "complication", "fileprovider", "mdm", "liveactivity", "pushtotalk", "widgets"]
        guard let type = request.header("apns-push-type"), types.contains(type) else { return refuse(400, "InvalidPushType") }
        if let p = request.header("apns-priority"), !["10", "5", "1"].contains(p) { return refuse(400, "BadPriority") }
        if let e = request.header("apns-expiration"), Int64(e) == nil { return refuse(400, "BadExpirationDate") }
        if let c = request.header("apns-collapse-id"), c.utf8.count > 64 { return refuse(400, "BadCollapseId") }
        let id = request.header("apns-id") ?? UUID().uuidString
        guard UUID(uuidString: id) != nil else { return refuse(400, "BadMessageId") }
        // The payload.
        guard !request.body.isEmpty else { return refuse(400, "PayloadEmpty") }
        guard request.body.count <= 4096 else { return refuse(413, "PayloadTooLarge") }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any], let aps = object["aps"] as? [String: Any]
        else { return refuse(400, "BadPayload") }
        if type == "alert", aps["alert"] == nil { return refuse(400, "BadPayload") }
        if let failure = state.withLock({ s -> ScriptedResponse? in s.failures.isEmpty ? nil : s.failures.removeFirst() }) { return failure }
        // The device token.
        guard token.utf8.count == 64, token.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) else {
            return refuse(400, "BadDeviceToken")
        }
        if state.withLock({ $0.unregistered.contains(token) }) { return refuse(410, "Unregistered") }
        var headers: [String: String] = [:]
        for field in request.headers where field.name.canonicalName.hasPrefix("apns-") { headers[field.name.canonicalName] = field.value }
        state.withLock { $0.sent.append(Sent(deviceToken: token, apnsID: id, headers: headers, payload: request.body)) }
        var answer = ScriptedResponse.status(.ok)
        answer.headers[HTTPField.Name("apns-id")!] = id
        return answer
    }

    /// The provider token's signature with the key's public half, its header and claims; its
    /// `iat` when valid.
    func verify(_ jwt: String) -> Date? {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let header = FakeFCM.base64URL(parts[0]), let claims = FakeFCM.base64URL(parts[1]),
            let signature = FakeFCM.base64URL(parts[2]),
            let h = (try? JSONSerialization.jsonObject(with: Data(header))) as? [String: Any], h["alg"] as? String == "ES256",
            h["kid"] as? String == keyID,
            let c = (try? JSONSerialization.jsonObject(with: Data(claims))) as? [String: Any], c["iss"] as? String == teamID,
            let iat = (c["iat"] as? NSNumber)?.doubleValue,
            let sig = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
            privateKey.publicKey.isValidSignature(sig, for: Data((parts[0] + "." + parts[1]).utf8))
        else { return nil }
        let date = Date(timeIntervalSince1970: iat)
        // A token from the future is refused too.
        guard date.timeIntervalSince(now) <= 60 else { return nil }
        return date
    }
}
