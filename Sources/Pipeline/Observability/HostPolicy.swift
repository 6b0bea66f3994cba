import Foundation

/// Which names a request may carry in `Host`, against DNS rebinding: a page of another site
/// whose name is made to resolve to this machine reaches a local server (the console, a
/// metrics endpoint) with that name in `Host` (and, to the browser, as that site's own origin,
/// so it could read the answers). Allowed: `localhost`, the loopback addresses (127.0.0.0/8,
/// ::1), the address the server listens on (unless it is 0.0.0.0 or ::) and the names given
/// (the console's `--allowed-host`). The port is not compared: a rebinding page controls the
/// name, not the port.
public struct HostPolicy: Sendable, Hashable {
    /// Lowercased names and IP literals (IPv6 without brackets).
    public let names: Set<String>
    /// The addresses among them, as bytes (so `::1` and `0:0::1` are one address).
    let addresses: Set<[UInt8]>

    public init(listening host: String, allowed: [String]) {
        var names: Set<String> = ["localhost"]
        var addresses: Set<[UInt8]> = [IPLiteral.loopbackV6]
        for (i, name) in ([host] + allowed).enumerated() {
            guard let n = Self.normalize(name) else { continue }
            let address = IPLiteral.parse(n)
            // 0.0.0.0 and :: are every address, not a name anyone reaches the console by.
            if i == 0, let address, address.allSatisfy({ $0 == 0 }) { continue }
            names.insert(n)
            if let address { addresses.insert(address) }
        }
        self.names = names
        self.addresses = addresses
    }

    /// A name as `--allowed-host` takes it and `Host` carries it: lowercased, without a final
    /// dot or IPv6 brackets; nil when it is not a host name or an IP address (a port, a scheme,
    /// a path, a user, spaces or nothing).
    public static func normalize(_ name: String) -> String? {
        var n = name.lowercased()
        if n.hasPrefix("["), n.hasSuffix("]") {
            n = String(n.dropFirst().dropLast())
            return IPLiteral.parse(n) == nil || !n.contains(":") ? nil : n
        }
        if IPLiteral.parse(n) != nil { return n }
        if n.hasSuffix(".") { n.removeLast() }
        let letters = Set("abcdefghijklmnopqrstuvwxyz0123456789-.")
        guard !n.isEmpty, n.allSatisfy(letters.contains), !n.hasPrefix("."), !n.contains("..") else { return nil }
        return n
    }

    /// The host of a `Host` value (`name`, `name:port`, `[v6]`, `[v6]:port`), normalized; nil
    /// when it is none of those.
    public static func host(ofAuthority authority: String) -> String? {
        var host = Substring(authority)
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return nil }
            let rest = host[host.index(after: close)...]
            guard rest.isEmpty || isPort(rest) else { return nil }
            host = host[...close]
        } else if let colon = host.lastIndex(of: ":") {
            guard isPort(host[colon...]) else { return nil }
            host = host[..<colon]
        }
        return normalize(String(host))
    }

    /// `:` and one to five digits.
    private static func isPort(_ s: Substring) -> Bool {
        s.first == ":" && (2...6).contains(s.count) && s.dropFirst().allSatisfy { $0.isASCII && $0.isNumber }
    }

    /// Whether `host` (a name or an address, as a listener is given) is only reachable from this
    /// machine: `localhost`, 127.0.0.0/8 or ::1.
    public static func isLoopback(_ host: String) -> Bool {
        guard let n = normalize(host) else { return false }
        if n == "localhost" { return true }
        guard let address = IPLiteral.parse(n) else { return false }
        return address == IPLiteral.loopbackV6 || (address.count == 4 && address[0] == 127)
    }

    /// Whether `authority` (the request's Host) names this server.
    public func allows(authority: String?) -> Bool {
        guard let authority, let host = Self.host(ofAuthority: authority) else { return false }
        if names.contains(host) { return true }
        guard let address = IPLiteral.parse(host) else { return false }
        return addresses.contains(address) || (address.count == 4 && address[0] == 127)
    }
}

/// IPv4 dotted quads (four decimal numbers, as inet_pton reads them: not `127.1`, not hex) and
/// IPv6 literals, as bytes.
enum IPLiteral {
    static let loopbackV6: [UInt8] = Array(repeating: 0, count: 15) + [1]

    static func parse(_ text: String) -> [UInt8]? {
        if text.contains(":") {
            var a = in6_addr()
            guard inet_pton(AF_INET6, text, &a) == 1 else { return nil }
            return withUnsafeBytes(of: &a) { Array($0) }
        }
        var a = in_addr()
        guard inet_pton(AF_INET, text, &a) == 1 else { return nil }
        return withUnsafeBytes(of: &a) { Array($0) }
    }
}
