import Foundation
import Operations
import Synchronization

/// Who may use the console, and as what. Without tokens (a console on a loopback address) every
/// request is the operator "loopback". With tokens, each request carries one (`Authorization:
/// Bearer TOKEN`) or the session cookie `/login` sets, and acts as the token's owner.
public struct ConsoleAccess: Sendable {
    /// What a token's owner may do.
    public enum Role: String, Sendable, CaseIterable {
        /// Every page; no action (no redrive, no offset reset).
        case viewer
        /// Every page and every action.
        case `operator`
    }

    /// A token's owner: the name the redrive log records, and the role.
    public struct User: Sendable, Hashable {
        public var name: String
        public var role: Role
        public init(name: String, role: Role) {
            self.name = name
            self.role = role
        }
        /// Every request of a console without tokens (loopback only).
        public static let loopback = User(name: "loopback", role: .operator)
    }

    /// Tokens and their owners; empty: no token is required.
    let tokens: [(token: [UInt8], user: User)]

    public var requiresToken: Bool { !tokens.isEmpty }

    /// No token: every request is ``User/loopback``.
    public static let open = ConsoleAccess(tokens: [])

    init(tokens: [(token: [UInt8], user: User)]) { self.tokens = tokens }

    /// One token for one operator (`--token-file` with a single line, `$PIPELINE_CONSOLE_TOKEN`).
    public static func single(_ token: String, name: String = "token holder") -> ConsoleAccess {
        ConsoleAccess(tokens: [(Array(token.utf8), User(name: name, role: .operator))])
    }

    /// The shortest token taken.
    public static let minimumTokenLength = 16

    /// `--tokens-file`: one token per line, `name: token role` (role `viewer` or `operator`);
    /// blank lines and lines starting with `#` are skipped. Names are 1 to 64 letters, digits,
    /// `.`, `_`, `@` or `-`; tokens at least 16 characters without spaces; names and tokens
    /// unique. An error names the file's line.
    public static func parse(tokensFile text: String, source: String) throws(AccessError) -> ConsoleAccess {
        var tokens: [(token: [UInt8], user: User)] = []
        var names = Set<String>()
        var seen = Set<[UInt8]>()
        for (i, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces.union(CharacterSet(charactersIn: "\r")))
            if line.isEmpty || line.hasPrefix("#") { continue }
            let at = "\(source):\(i + 1)"
            guard let colon = line.firstIndex(of: ":") else {
                throw AccessError(description: "\(at): expected `name: token role` (role viewer or operator), got a line without ':'")
            }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces)
            let rest = line[line.index(after: colon)...].split(separator: " ", omittingEmptySubsequences: true)
            let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "._@-"))
            guard (1...64).contains(name.count), name.unicodeScalars.allSatisfy({ $0.isASCII && allowed.contains($0) }) else {
                throw AccessError(description: "\(at): the name '\(name)' is not 1 to 64 letters, digits, '.', '_', '@' or '-'")
            }
            guard rest.count == 2 else {
                throw AccessError(description: "\(at): expected `\(name): token role` (role viewer or operator), got \(rest.count) word(s) after the name")
            }
            let token = Array(rest[0].utf8)
            guard token.count >= minimumTokenLength else {
                throw AccessError(description: "\(at): the token of '\(name)' is shorter than \(minimumTokenLength) characters")
            }
            guard let role = Role(rawValue: String(rest[1])) else {
                throw AccessError(description: "\(at): the role of '\(name)' is '\(rest[1])'; it is viewer or operator")
            }
            guard name != User.loopback.name else {
                throw AccessError(description: "\(at): '\(name)' is the name of a console without tokens; choose another")
            }
            guard names.insert(name).inserted else { throw AccessError(description: "\(at): '\(name)' is named twice") }
            guard seen.insert(token).inserted else { throw AccessError(description: "\(at): the token of '\(name)' is another name's too") }
            tokens.append((token, User(name: name, role: role)))
        }
        guard !tokens.isEmpty else { throw AccessError(description: "\(source): no token in it (lines are `name: token role`)") }
        return ConsoleAccess(tokens: tokens)
    }

    /// The owner of `presented`, compared in constant time with every token.
    func user(presenting presented: [UInt8]) -> User? {
        var found: User?
        for (token, user) in tokens where ConstantTime.equal(presented, token) { found = user }
        return found
    }

    public struct AccessError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }
}

/// Who is making the request being answered (set by ``Guarded`` around the routes).
enum CurrentUser {
    @TaskLocal static var user = ConsoleAccess.User.loopback
}

/// The sessions `/login` starts: a random identifier in an HttpOnly, SameSite=Strict cookie,
/// unrelated to the token (nothing of the token can be learned or replayed from it), valid for
/// ``lifetime`` and ended by `/logout`. Kept in memory: a restart signs everyone out.
final class Sessions: Sendable {
    static let cookieName = "pipeline_console"
    /// Sessions held at most; past it the one closest to expiry goes.
    static let capacity = 10_000

    let lifetime: Duration
    private let sessions = Mutex<[String: (user: ConsoleAccess.User, expires: ContinuousClock.Instant)]>([:])

    init(lifetime: Duration = .seconds(12 * 3600)) { self.lifetime = lifetime }

    /// A new session for `user`: its identifier (32 random bytes, hex).
    func start(_ user: ConsoleAccess.User, now: ContinuousClock.Instant = .now) -> String {
        var generator = SystemRandomNumberGenerator()
        let id = (0..<4).map { _ in String(format: "%016llx", generator.next() as UInt64) }.joined()
        sessions.withLock { s in
            s = s.filter { $0.value.expires > now }
            if s.count >= Self.capacity, let oldest = s.min(by: { $0.value.expires < $1.value.expires }) { s[oldest.key] = nil }
            s[id] = (user, now + lifetime)
        }
        return id
    }

    /// The session's user while it lasts.
    func user(_ id: String, now: ContinuousClock.Instant = .now) -> ConsoleAccess.User? {
        sessions.withLock { s in
            guard let session = s[id] else { return nil }
            guard session.expires > now else {
                s[id] = nil
                return nil
            }
            return session.user
        }
    }

    func end(_ id: String) { sessions.withLock { _ = $0.removeValue(forKey: id) } }

    /// The session identifier in a `Cookie` header, if any.
    static func id(inCookies header: String?) -> String? {
        for cookie in (header ?? "").split(separator: ";") {
            let parts = cookie.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2, parts[0] == cookieName { return parts[1] }
        }
        return nil
    }

    /// `Set-Cookie` for a new session, and for signing out.
    func setCookie(_ id: String) -> String {
        "\(Self.cookieName)=\(id); HttpOnly; SameSite=Strict; Path=/; Max-Age=\(lifetime.components.seconds)"
    }
    static let clearCookie = "\(cookieName)=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"
}
