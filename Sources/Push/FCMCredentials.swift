import AsyncHTTPClient
import Foundation
import Metrics
import NIOCore
import NIOHTTP1
import Synchronization

/// A Google service-account key file (what the Firebase console downloads): the fields the FCM
/// sender needs. Read from a file or the environment, never from a flag; never logged.
public struct ServiceAccount: Sendable {
    public var projectID: String
    public var clientEmail: String
    public var tokenURI: String
    let key: JWT.SigningKey

    /// Parses the file's JSON; the error names the field that is missing or wrong (never its value).
    public init(json bytes: [UInt8], source: String) throws(PushConfigurationError) {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any] else {
            throw PushConfigurationError("\(source): not a JSON object (a service-account key file from the Firebase console)")
        }
        func field(_ name: String) throws(PushConfigurationError) -> String {
            guard let value = object[name] as? String, !value.isEmpty else {
                throw PushConfigurationError("\(source): \(name) is missing (a service-account key file has it)")
            }
            return value
        }
        if let type = object["type"] as? String, type != "service_account" {
            throw PushConfigurationError("\(source): type is '\(type)', not service_account")
        }
        projectID = try field("project_id")
        clientEmail = try field("client_email")
        tokenURI = (object["token_uri"] as? String).flatMap { $0.isEmpty ? nil : $0 } ?? "https://oauth2.googleapis.com/token"
        key = try JWT.SigningKey.rsa(pem: try field("private_key"), source: "\(source): private_key")
    }

    /// From the file at `path`.
    public static func load(path: String) throws(PushConfigurationError) -> ServiceAccount {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw PushConfigurationError("\(path): cannot read the service-account key file")
        }
        return try ServiceAccount(json: Array(data), source: path)
    }

    /// The OAuth scope FCM's send needs.
    public static let scope = "https://www.googleapis.com/auth/firebase.messaging"

    /// The signed assertion exchanged for an access token (RFC 7523): valid an hour from `now`.
    func assertion(now: Date) throws -> String {
        let iat = Int64(now.timeIntervalSince1970)
        return try JWT.sign(
            claims: ["iss": .text(clientEmail), "scope": .text(Self.scope), "aud": .text(tokenURI), "iat": .number(iat), "exp": .number(iat + 3600)],
            key: key)
    }
}

/// FCM's OAuth 2.0 access token: exchanged at the service account's `token_uri`, cached until a
/// minute before it expires, refreshed by one caller at a time (the others wait for it), and
/// dropped after a 401 so that the next send gets a new one.
public final class FCMAccessTokens: Sendable {
    let account: ServiceAccount
    let client: HTTPClient
    let timeout: Duration
    private let state = Mutex<State>(State())

    private struct State {
        var token: (value: String, expires: Date)?
        var refreshing: Task<(String, Date), any Error>?
        var refreshes = 0
    }

    public init(account: ServiceAccount, client: HTTPClient, timeout: Duration = .seconds(10)) {
        self.account = account
        self.client = client
        self.timeout = timeout
    }

    /// How many times a token was fetched.
    public var refreshes: Int { state.withLock { $0.refreshes } }

    /// A token valid for at least another minute.
    public func token(now: Date = Date()) async throws -> String {
        enum Next { case cached(String), wait(Task<(String, Date), any Error>) }
        let next: Next = state.withLock { s in
            if let token = s.token, token.expires.timeIntervalSince(now) > 60 { return .cached(token.value) }
            if let running = s.refreshing { return .wait(running) }
            let running = Task { [self] in try await self.fetch(now: now) }
            s.refreshing = running
            return .wait(running)
        }
        let task: Task<(String, Date), any Error>
        switch next {
        case .cached(let value): return value
        case .wait(let running): task = running
        }
        do {
            let (value, expires) = try await task.value
            state.withLock { s in
                if s.refreshing == task {
                    s.refreshing = nil
                    s.token = (value, expires)
                    s.refreshes += 1
                }
            }
            return value
        } catch {
            state.withLock { s in if s.refreshing == task { s.refreshing = nil } }
            throw error
        }
    }

    /// Forgets `token` (FCM answered 401 with it): the next call fetches another.
    public func invalidate(_ token: String) {
        state.withLock { s in if s.token?.value == token { s.token = nil } }
    }

    private func fetch(now: Date) async throws -> (String, Date) {
        var request = HTTPClientRequest(url: account.tokenURI)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        let assertion = try account.assertion(now: now)
        request.body = .bytes(ByteBuffer(string: "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)"))
        let response = try await client.execute(request, timeout: .milliseconds(Int64(timeout.components.seconds * 1000)))
        let body = try await response.body.collect(upTo: 64 * 1024)
        guard response.status == .ok,
            let object = (try? JSONSerialization.jsonObject(with: Data(body.readableBytesView))) as? [String: Any],
            let token = object["access_token"] as? String, !token.isEmpty
        else {
            throw FCMTokenError(status: Int(response.status.code), body: String(buffer: body).prefix(300).description)
        }
        let seconds = (object["expires_in"] as? NSNumber)?.doubleValue ?? 3600
        Counter(label: PushMetricName.tokenRefreshes, dimensions: [("provider", "fcm")]).increment()
        return (token, now.addingTimeInterval(seconds))
    }
}

/// The token endpoint refused the service account's assertion.
public struct FCMTokenError: Error, Sendable, CustomStringConvertible {
    public var status: Int
    public var body: String
    public var description: String { "the OAuth token endpoint answered \(status): \(body)" }
}
