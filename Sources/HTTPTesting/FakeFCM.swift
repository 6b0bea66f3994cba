import Crypto
import Foundation
import HTTPTypes
import Synchronization
import _CryptoExtras

/// A local FCM as the real one behaves (HTTP v1, OAuth): a token endpoint that checks the
/// service account's RS256 assertion with its public key (signature, iss, aud, scope, iat/exp)
/// and hands out access tokens, and `messages:send` that checks the bearer token, the method,
/// the content type and the body, and answers as scripted per device token:
///
/// - `unregistered-*`: 404 `UNREGISTERED`; `invalid-*`: 400 `INVALID_ARGUMENT` about the token;
/// - `mismatch-*`: 403 `SENDER_ID_MISMATCH`;
/// - anything else: 200 with `projects/P/messages/N`,
///
/// after the queued failures (`fail(...)`: 429 with `Retry-After`, 503, 500, 401) are used up,
/// one per request. Tokens can be expired (`expireTokens()`): the next send gets 401.
public final class FakeFCM: Sendable {
    public let server: TestHTTPServer
    public let project: String
    let privateKey: _RSA.Signing.PrivateKey
    public let clientEmail = "pipeline@test-project.iam.gserviceaccount.com"
    private let state: Mutex<State>

    struct State {
        var issued: Set<String> = []
        var failures: [ScriptedResponse] = []
        var sent: [(token: String, body: [UInt8])] = []
        var assertionsRefused = 0
        var next = 1
        var delay: Duration = .zero
        var tokenDelay: Duration = .zero
    }

    /// With `tls`, HTTPS and HTTP/2, as the real one (clients trust `tls.pem`).
    public static func start(project: String = "test-project", tls: TestCertificate? = nil) async throws -> FakeFCM {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let box = Box()
        let server = try await TestHTTPServer(
            handlers: [
                "/token": { request in await box.fake!.token(request) },
                "/v1/projects/\(project)/messages:send": { request in await box.fake!.send(request) },
            ], tls: tls)
        let fake = FakeFCM(server: server, project: project, privateKey: key)
        box.fake = fake
        return fake
    }

    private init(server: TestHTTPServer, project: String, privateKey: _RSA.Signing.PrivateKey) {
        self.server = server
        self.project = project
        self.privateKey = privateKey
        self.state = Mutex(State())
    }

    /// Lets the handlers reach the fake made after the server.
    final class Box: @unchecked Sendable { var fake: FakeFCM? }

    /// A service-account key file for this fake (its token_uri is the fake's).
    public var serviceAccountJSON: [UInt8] {
        let object: [String: Any] = [
            "type": "service_account", "project_id": project, "private_key_id": "k1", "private_key": privateKey.pkcs8PEMRepresentation,
            "client_email": clientEmail, "token_uri": server.baseURL + "/token",
        ]
        return Array(try! JSONSerialization.data(withJSONObject: object))
    }

    public func fail(_ answers: [ScriptedResponse]) { state.withLock { $0.failures += answers } }
    public func clearFailures() { state.withLock { $0.failures = [] } }
    public func expireTokens() { state.withLock { $0.issued = [] } }
    public func setDelay(_ delay: Duration) { state.withLock { $0.delay = delay } }
    /// How long the token endpoint takes to answer.
    public func setTokenDelay(_ delay: Duration) { state.withLock { $0.tokenDelay = delay } }
    /// Once `accepted` sends were taken, later ones wait for ``release()`` (then get a 503).
    public func hold(after accepted: Int) { sendHold.hold(after: accepted) }
    public func release() { sendHold.release() }
    private let sendHold = SendHold()
    public var sent: [(token: String, body: [String: Any])] {
        state.withLock { $0.sent }.map { ($0.token, (try? JSONSerialization.jsonObject(with: Data($0.body))) as? [String: Any] ?? [:]) }
    }
    public var tokensIssued: Int { state.withLock { $0.next - 1 } }
    public var assertionsRefused: Int { state.withLock { $0.assertionsRefused } }

    public static func error(_ status: Int, _ state: String, _ message: String, code: String? = nil, retryAfter: String? = nil) -> ScriptedResponse {
        let details = code.map { #","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"\#($0)"}]"# } ?? ""
        var headers: HTTPFields = [:]
        if let retryAfter { headers[.retryAfter] = retryAfter }
        return .json(#"{"error":{"code":\#(status),"message":"\#(message)","status":"\#(state)"\#(details)}}"#,
                     status: HTTPResponse.Status(code: status), headers: headers)
    }

    func token(_ request: RecordedRequest) async -> ScriptedResponse {
        let delay = state.withLock { $0.tokenDelay }
        if delay > .zero { try? await Task.sleep(for: delay) }
        let form = String(decoding: request.body, as: UTF8.self)
        var fields: [String: String] = [:]
        for pair in form.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? "" }
            if kv.count == 2 { fields[kv[0]] = kv[1] }
        }
        guard request.method == .post, fields["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer", let assertion = fields["assertion"],
            verify(assertion)
        else {
            state.withLock { $0.assertionsRefused += 1 }
            return .json(#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#, status: .badRequest)
        }
        let token = state.withLock { s in
            defer { s.next += 1 }
            let t = "ya29.fake-\(s.next)"
            s.issued.insert(t)
            return t
        }
        return .json(#"{"access_token":"\#(token)","expires_in":3599,"token_type":"Bearer"}"#)
    }

    /// The assertion's signature with the account's public key, and its claims.
    func verify(_ jwt: String) -> Bool {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let header = Self.base64URL(parts[0]), let claims = Self.base64URL(parts[1]),
            let signature = Self.base64URL(parts[2]),
            let h = (try? JSONSerialization.jsonObject(with: Data(header))) as? [String: Any], h["alg"] as? String == "RS256",
            let c = (try? JSONSerialization.jsonObject(with: Data(claims))) as? [String: Any]
        else { return false }
        let signed = Data((parts[0] + "." + parts[1]).utf8)
        guard privateKey.publicKey.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: signed, padding: .insecurePKCS1v1_5)
        else { return false }
        let now = Date().timeIntervalSince1970
        guard c["iss"] as? String == clientEmail, c["aud"] as? String == server.baseURL + "/token",
            c["scope"] as? String == "https://www.googleapis.com/auth/firebase.messaging",
            let iat = (c["iat"] as? NSNumber)?.doubleValue, let exp = (c["exp"] as? NSNumber)?.doubleValue,
            iat <= now + 5, exp > now, exp - iat <= 3600
        else { return false }
        return true
    }

    /// base64url (padding optional), decoded here rather than by the code under test.
    static func base64URL(_ text: Substring) -> [UInt8]? {
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.count % 4 != 0 { s += "=" }
        return Data(base64Encoded: s).map(Array.init)
    }

    /// The dedupe keys of the messages sent (`message.data.dedupe_key`), in order, repeats kept.
    public var sentDedupeKeys: [String] {
        sent.compactMap { (($0.body["message"] as? [String: Any])?["data"] as? [String: Any])?["dedupe_key"] as? String }
    }

    func send(_ request: RecordedRequest) async -> ScriptedResponse {
        if await sendHold.wait(accepted: { state.withLock { $0.sent.count } }) { return Self.error(503, "UNAVAILABLE", "The service is currently unavailable.") }
        let delay = state.withLock { $0.delay }
        if delay > .zero { try? await Task.sleep(for: delay) }
        let bearer = request.headers[.authorization].flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
        guard request.method == .post, let bearer, state.withLock({ $0.issued.contains(bearer) }) else {
            return Self.error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
        }
        guard request.headers[.contentType]?.hasPrefix("application/json") == true,
            let object = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any],
            let message = object["message"] as? [String: Any]
        else {
            return Self.error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        }
        if let failure = state.withLock({ s -> ScriptedResponse? in s.failures.isEmpty ? nil : s.failures.removeFirst() }) { return failure }
        let token = message["token"] as? String ?? "topic:" + (message["topic"] as? String ?? "")
        if token.hasPrefix("unregistered") { return Self.error(404, "NOT_FOUND", "Requested entity was not found.", code: "UNREGISTERED") }
        if token.hasPrefix("invalid") {
            return Self.error(400, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token", code: "INVALID_ARGUMENT")
        }
        if token.hasPrefix("mismatch") { return Self.error(403, "PERMISSION_DENIED", "SenderId mismatch", code: "SENDER_ID_MISMATCH") }
        let name = state.withLock { s in
            s.sent.append((token, request.body))
            return "projects/\(project)/messages/0:\(s.sent.count)"
        }
        return .json(#"{"name":"\#(name)"}"#)
    }
}
