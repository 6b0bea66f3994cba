#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An IPv4 or IPv6 address, as the bytes that go on the wire.
public struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    /// 4 bytes (IPv4) or 16 bytes (IPv6), network order.
    public let bytes: [UInt8]

    /// Parses a textual IPv4 or IPv6 address (no brackets, no zone); nil if `text` is not one.
    public init?(_ text: String) {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            bytes = withUnsafeBytes(of: &v4) { Array($0) }
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            bytes = withUnsafeBytes(of: &v6) { Array($0) }
            return
        }
        return nil
    }

    init(bytes: [UInt8]) {
        precondition(bytes.count == 4 || bytes.count == 16)
        self.bytes = bytes
    }

    public var isIPv4: Bool { bytes.count == 4 }

    public var description: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let family = isIPv4 ? AF_INET : AF_INET6
        let ok = bytes.withUnsafeBytes { raw in
            inet_ntop(family, raw.baseAddress, &buffer, socklen_t(buffer.count)) != nil
        }
        return ok ? String(cString: buffer) : "?"
    }

    /// For IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::a.b.c.d)
    /// IPv6 addresses, the IPv4 address inside: these reach IPv4 hosts, so they are judged as such.
    var embeddedIPv4: IPAddress? {
        guard bytes.count == 16 else { return nil }
        let head = Array(bytes[0..<12])
        let mapped: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]
        let nat64: [UInt8] = [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0]
        let compatible = [UInt8](repeating: 0, count: 12)
        if head == mapped || head == nat64 || (head == compatible && bytes[12...].contains { $0 != 0 } && !(bytes[12...15].elementsEqual([0, 0, 0, 1]))) {
            return IPAddress(bytes: Array(bytes[12..<16]))
        }
        return nil
    }
}

/// A network in CIDR notation ("10.0.0.0/8", "fd00::/8"); a bare address is a /32 or /128.
public struct IPNetwork: Sendable, Hashable, CustomStringConvertible {
    public let address: IPAddress
    public let prefixLength: Int

    /// Parses "address" or "address/prefix"; nil if malformed.
    public init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1).map(String.init)
        guard let address = IPAddress(parts[0]) else { return nil }
        let maxPrefix = address.bytes.count * 8
        if parts.count == 2 {
            guard let prefix = Int(parts[1]), (0...maxPrefix).contains(prefix) else { return nil }
            self.prefixLength = prefix
        } else {
            self.prefixLength = maxPrefix
        }
        self.address = address
    }

    public var description: String { "\(address)/\(prefixLength)" }

    /// Whether `ip` is inside this network (same family only).
    public func contains(_ ip: IPAddress) -> Bool {
        guard ip.bytes.count == address.bytes.count else { return false }
        var remaining = prefixLength
        for i in 0..<ip.bytes.count where remaining > 0 {
            let bits = min(8, remaining)
            let mask = UInt8(truncatingIfNeeded: 0xff << (8 - bits))
            if ip.bytes[i] & mask != address.bytes[i] & mask { return false }
            remaining -= bits
        }
        return true
    }
}

/// Which destination addresses the fetcher may connect to.
///
/// By default only globally routable unicast addresses: private (RFC 1918, ULA), loopback,
/// link-local (cloud metadata services live at 169.254.169.254 and fd00:ec2::254), CGNAT,
/// multicast, reserved and unspecified ranges are refused, unless `allowList` names them.
public struct DestinationPolicy: Sendable, Hashable {
    /// Networks allowed even though they are not public (for tests, or an internal CDN).
    public var allowList: [IPNetwork]

    public init(allowList: [IPNetwork] = []) {
        self.allowList = allowList
    }

    /// Ranges that are never fetched from by default.
    public static let blockedNetworks: [IPNetwork] = [
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
        "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
        "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
        "::/128", "::1/128", "100::/64", "2001:db8::/32", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
    ].map { IPNetwork($0)! }

    /// Whether connecting to `ip` is allowed.
    public func allows(_ ip: IPAddress) -> Bool {
        if allowList.contains(where: { $0.contains(ip) }) { return true }
        if let inner = ip.embeddedIPv4 { return allows(inner) }
        return !Self.blockedNetworks.contains { $0.contains(ip) }
    }
}
