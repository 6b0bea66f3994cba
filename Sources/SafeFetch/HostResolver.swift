#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch

/// Turns a host name into the addresses a connection would use. The fetcher resolves names
/// itself so it can check every address before connecting, then pins the connection to a
/// checked address (so a second, different DNS answer cannot redirect it).
public protocol HostResolver: Sendable {
    /// All addresses for `host`; throws if there are none.
    func resolve(host: String) async throws -> [IPAddress]
}

/// `getaddrinfo`, run on a dispatch queue because it blocks.
public struct SystemResolver: HostResolver {
    public init() {}

    public func resolve(host: String) async throws -> [IPAddress] {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[IPAddress], any Error>) in
            DispatchQueue.global(qos: .userInitiated).async {
                continuation.resume(with: Self.lookup(host))
            }
        }
    }

    /// Why a name did not resolve: `getaddrinfo`'s message.
    public struct ResolutionError: Error, CustomStringConvertible {
        public let description: String

        public init(description: String) { self.description = description }
    }

    private static func lookup(_ host: String) -> Result<[IPAddress], any Error> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Glibc)
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
        hints.ai_socktype = SOCK_STREAM
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, nil, &hints, &list)
        guard status == 0, let list else {
            return .failure(ResolutionError(description: String(cString: gai_strerror(status))))
        }
        defer { freeaddrinfo(list) }
        var addresses: [IPAddress] = []
        var node: UnsafeMutablePointer<addrinfo>? = list
        while let current = node {
            if let sa = current.pointee.ai_addr {
                switch Int32(sa.pointee.sa_family) {
                case AF_INET:
                    sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                        var a = sin.pointee.sin_addr
                        addresses.append(IPAddress(bytes: withUnsafeBytes(of: &a) { Array($0) }))
                    }
                case AF_INET6:
                    sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                        var a = sin6.pointee.sin6_addr
                        addresses.append(IPAddress(bytes: withUnsafeBytes(of: &a) { Array($0) }))
                    }
                default:
                    break
                }
            }
            node = current.pointee.ai_next
        }
        var seen = Set<IPAddress>()
        let unique = addresses.filter { seen.insert($0).inserted }
        guard !unique.isEmpty else { return .failure(ResolutionError(description: "no addresses")) }
        return .success(unique)
    }
}
