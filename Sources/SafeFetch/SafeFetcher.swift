import AsyncHTTPClient
import Deadlines
import Foundation
import Logging
import NIOCore
import Synchronization

/// Reads `http(s)://` and `file://` URLs from sources that are not trusted: thumbnail source
/// images (Thumbnails) and upstream list pages (the pollers of Producers).
///
/// For every HTTP hop (the first request and each redirect) the fetcher:
/// 1. resolves the host itself and refuses the hop if *any* address is not allowed by the
///    ``DestinationPolicy`` — before any connection is made;
/// 2. connects through a fresh `HTTPClient` whose `dnsOverride` pins the host to the checked
///    address, so AsyncHTTPClient cannot resolve it again to something else (DNS rebinding).
///    TLS still verifies the certificate against the host name;
/// 3. has AsyncHTTPClient's redirect following turned off and re-validates each `Location`;
/// 4. streams the body, stopping as soon as it exceeds ``FetchConfiguration/maxBytes``.
///
/// A client per hop costs a connection set-up each time; sources are mostly on different
/// hosts anyway, and sharing a pool would bypass the pinning.
public struct SafeFetcher: Sendable {
    public let configuration: FetchConfiguration
    let resolver: any HostResolver
    let logger: Logger

    public init(
        configuration: FetchConfiguration = FetchConfiguration(),
        resolver: any HostResolver = SystemResolver(),
        logger: Logger = Logger(label: "safe-fetch")
    ) {
        self.configuration = configuration
        self.resolver = resolver
        self.logger = logger
    }

    /// Fetches `url`, retrying with exponential backoff on timeouts, failed connections, 429 and
    /// 5xx responses (never on other 4xx or refused destinations). `headers` go with every
    /// request (e.g. `If-None-Match`); a 304 answer is returned as it is, with no body.
    public func fetch(_ url: String, headers: [(String, String)] = [], accept: String = "*/*") async throws(FetchError) -> FetchedResponse {
        guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased() else {
            throw .invalidURL(url)
        }
        if scheme == "file" {
            return try await readFile(parsed, original: url)
        }
        guard scheme == "http" || scheme == "https" else { throw .unsupportedScheme(url: url) }

        var attempt = 1
        while true {
            do {
                var response = try await fetchOnce(parsed, headers: headers, accept: accept)
                response.attempts = attempt
                return response
            } catch {
                guard error.isRetriable, attempt < configuration.maxAttempts else { throw error }
                let delay = backoff(beforeRetry: attempt)
                logger.info("retrying fetch", metadata: [
                    "url": "\(url)", "error": "\(error)", "attempt": "\(attempt)", "delay": "\(delay)",
                ])
                do {
                    try await Task.sleep(for: delay)
                } catch {
                    throw FetchError.timedOut(url: url)  // cancelled while waiting to retry
                }
                attempt += 1
            }
        }
    }

    func backoff(beforeRetry attempt: Int) -> Duration {
        let exponential = configuration.initialBackoff * (1 << min(attempt - 1, 20))
        let capped = min(exponential, configuration.maxBackoff)
        // Half fixed, half random ("equal jitter"), so retries from many workers spread out.
        return capped / 2 + capped / 2 * Double.random(in: 0...1)
    }

    // MARK: - HTTP

    /// One attempt, bounded whole by ``FetchConfiguration/attemptTimeout``: name resolution,
    /// connections, every redirect hop and the whole body (a server that trickles its body a byte
    /// at a time keeps the read timeout from firing, not this one). Past the deadline the attempt
    /// is cancelled and left to end in the background; the caller gets `timedOut` at once.
    private func fetchOnce(_ start: URL, headers: [(String, String)], accept: String) async throws(FetchError) -> FetchedResponse {
        let result = await Deadline.race(until: .now + configuration.attemptTimeout) { () async -> Result<FetchedResponse, FetchError> in
            do throws(FetchError) {
                return .success(try await self.fetchAttempt(start, headers: headers, accept: accept))
            } catch {
                return .failure(error)
            }
        }
        guard let result else { throw .timedOut(url: start.absoluteString) }
        return try result.get()
    }

    private func fetchAttempt(_ start: URL, headers: [(String, String)], accept: String) async throws(FetchError) -> FetchedResponse {
        let deadline = NIODeadline.now() + TimeAmount(configuration.attemptTimeout)
        var current = start
        var redirects = 0
        while true {
            let hop = try await fetchHop(current, headers: headers, accept: accept, deadline: deadline)
            switch hop {
            case let .body(status, bytes, responseHeaders):
                return FetchedResponse(status: status, bytes: bytes, headers: responseHeaders, finalURL: current.absoluteString, attempts: 1)
            case let .redirect(status, location):
                guard let location else {
                    throw .redirectWithoutLocation(url: current.absoluteString, status: status)
                }
                guard redirects < configuration.maxRedirects else {
                    throw .tooManyRedirects(url: start.absoluteString, limit: configuration.maxRedirects)
                }
                guard let next = URL(string: location, relativeTo: current)?.absoluteURL else {
                    throw .invalidURL(location)
                }
                guard let scheme = next.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
                    throw .unsupportedScheme(url: next.absoluteString)
                }
                logger.debug("following redirect", metadata: ["from": "\(current)", "to": "\(next)"])
                redirects += 1
                current = next
            }
        }
    }

    private enum Hop {
        case body(status: Int, [UInt8], headers: [(String, String)])
        case redirect(status: Int, location: String?)
    }

    /// One request to one URL, after checking where it would connect.
    private func fetchHop(_ url: URL, headers: [(String, String)], accept: String, deadline: NIODeadline) async throws(FetchError) -> Hop {
        let text = url.absoluteString
        guard var host = url.host, !host.isEmpty else { throw .invalidURL(text) }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }

        // 1. Every address the name has must be allowed; the connection is pinned to the first.
        let addresses: [IPAddress]
        if let literal = IPAddress(host) {
            addresses = [literal]
        } else {
            do {
                addresses = try await resolver.resolve(host: host)
            } catch {
                throw .resolutionFailed(url: text, reason: "\(error)")
            }
        }
        if let refused = addresses.first(where: { !configuration.destinations.allows($0) }) {
            throw .destinationNotAllowed(url: text, address: refused.description)
        }
        guard let pinned = addresses.first else { throw .resolutionFailed(url: text, reason: "no addresses") }

        // 2. A client that connects only to the checked address and follows no redirects.
        var clientConfiguration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: TimeAmount(configuration.connectTimeout), read: TimeAmount(configuration.readTimeout)),
            decompression: .disabled
        )
        if IPAddress(host) == nil {
            clientConfiguration.dnsOverride = [host: pinned.description]
        }
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)

        let result: Result<Hop, FetchError>
        do {
            result = .success(try await request(url, headers: headers, accept: accept, client: client, deadline: deadline))
        } catch let error as FetchError {
            result = .failure(error)
        } catch {
            result = .failure(Self.classify(error, url: text))
        }
        // Always shut the client down (it owns the connection), whatever happened; in the
        // background, so that closing the connection does not count against the attempt's time.
        Task { try? await client.shutdown() }
        return try result.get()
    }

    private func request(_ url: URL, headers: [(String, String)], accept: String, client: HTTPClient, deadline: NIODeadline) async throws -> Hop {
        let text = url.absoluteString
        var request = HTTPClientRequest(url: text)
        request.method = .GET
        request.headers.add(name: "User-Agent", value: configuration.userAgent)
        request.headers.add(name: "Accept", value: accept)
        for (name, value) in headers { request.headers.replaceOrAdd(name: name, value: value) }

        let response = try await client.execute(request, deadline: deadline, logger: logger)
        let status = Int(response.status.code)
        let responseHeaders = response.headers.map { ($0.name, $0.value) }
        switch status {
        case 200...299:
            break
        case 304:
            return .body(status: 304, [], headers: responseHeaders)
        case 301, 302, 303, 307, 308:
            return .redirect(status: status, location: response.headers.first(name: "Location"))
        default:
            throw FetchError.httpStatus(url: text, status: status)
        }

        let limit = configuration.maxBytes
        if let declared = response.headers.first(name: "Content-Length").flatMap(Int.init), declared > limit {
            throw FetchError.tooLarge(url: text, limit: limit)
        }
        var bytes: [UInt8] = []
        for try await chunk in response.body {
            guard bytes.count + chunk.readableBytes <= limit else {
                throw FetchError.tooLarge(url: text, limit: limit)
            }
            bytes.append(contentsOf: chunk.readableBytesView)
        }
        return .body(status: status, bytes, headers: responseHeaders)
    }

    private static func classify(_ error: any Error, url: String) -> FetchError {
        if let error = error as? HTTPClientError {
            switch error {
            case .connectTimeout, .readTimeout, .deadlineExceeded, .writeTimeout:
                return .timedOut(url: url)
            default:
                return .connectionFailed(url: url, reason: "\(error)")
            }
        }
        if error is CancellationError { return .timedOut(url: url) }
        return .connectionFailed(url: url, reason: "\(error)")
    }

    // MARK: - file://

    private func readFile(_ url: URL, original: String) async throws(FetchError) -> FetchedResponse {
        let path = url.path
        let roots = configuration.fileRoots
        let limit = configuration.maxBytes
        let result: Result<[UInt8], FetchError> = await withCheckedContinuation { continuation in
            // open/read block: keep them off the cooperative pool.
            DispatchQueue.global(qos: .userInitiated).async {
                continuation.resume(returning: Self.readFileBlocking(path, roots: roots, limit: limit, url: original))
            }
        }
        return FetchedResponse(status: 200, bytes: try result.get(), headers: [], finalURL: original, attempts: 1)
    }

    private static func readFileBlocking(_ path: String, roots: [String], limit: Int, url: String) -> Result<[UInt8], FetchError> {
        // Resolve symlinks and ".." first, then require the real path to be under a real root.
        guard let real = realpath(path, nil) else { return .failure(.fileReadFailed(path: path, errno: errno)) }
        let resolved = String(cString: real)
        free(real)
        let allowed = roots.contains { root in
            guard let realRoot = realpath(root, nil) else { return false }
            defer { free(realRoot) }
            let base = String(cString: realRoot)
            return resolved == base || resolved.hasPrefix(base.hasSuffix("/") ? base : base + "/")
        }
        guard allowed else { return .failure(.fileNotAllowed(path: resolved)) }

        let fd = open(resolved, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(.fileReadFailed(path: resolved, errno: errno)) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return .failure(.fileReadFailed(path: resolved, errno: errno)) }
        guard (info.st_mode & S_IFMT) == S_IFREG else { return .failure(.fileReadFailed(path: resolved, errno: EINVAL)) }
        guard Int(info.st_size) <= limit else { return .failure(.tooLarge(url: url, limit: limit)) }

        // Read up to limit+1 bytes: the file may grow after fstat.
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size) + 1)
        var count = 0
        while count < bytes.count {
            let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + count, $0.count - count) }
            if n < 0 {
                if errno == EINTR { continue }
                return .failure(.fileReadFailed(path: resolved, errno: errno))
            }
            if n == 0 { break }
            count += n
            if count > limit { return .failure(.tooLarge(url: url, limit: limit)) }
            if count == bytes.count { bytes.append(contentsOf: [UInt8](repeating: 0, count: 64 * 1024)) }
        }
        bytes.removeSubrange(count...)
        return .success(bytes)
    }
}

extension TimeAmount {
    init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
