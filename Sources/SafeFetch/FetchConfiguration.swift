import Foundation

/// How the fetcher reads sources.
public struct FetchConfiguration: Sendable {
    /// Time allowed to establish a TCP (and TLS) connection.
    public var connectTimeout: Duration
    /// Longest silence allowed while reading a response.
    public var readTimeout: Duration
    /// Budget for one attempt, all redirect hops included.
    public var attemptTimeout: Duration
    /// Largest body accepted, in bytes; counted while streaming, so a lying or missing
    /// Content-Length cannot make the fetcher buffer more. Default: the renderer's 20 MB.
    public var maxBytes: Int
    /// Redirect hops followed per attempt; each hop's destination is checked again.
    public var maxRedirects: Int
    /// Attempts in total (1 = no retry). Retries happen on timeouts, failed connections and
    /// 5xx responses only; 4xx and refused destinations are final.
    public var maxAttempts: Int
    /// Backoff before retry n is `min(initialBackoff * 2^(n-1), maxBackoff)`, half of it
    /// randomised. Tests set milliseconds here.
    public var initialBackoff: Duration
    public var maxBackoff: Duration
    /// Destinations allowed besides public addresses (see ``DestinationPolicy``).
    public var destinations: DestinationPolicy
    /// Directories `file://` sources may be read from (after resolving symlinks and `..`).
    /// Empty: `file://` is refused.
    public var fileRoots: [String]
    /// Sent with every request.
    public var userAgent: String

    public init(
        connectTimeout: Duration = .seconds(5),
        readTimeout: Duration = .seconds(10),
        attemptTimeout: Duration = .seconds(30),
        maxBytes: Int = 20_000_000,
        maxRedirects: Int = 5,
        maxAttempts: Int = 3,
        initialBackoff: Duration = .milliseconds(250),
        maxBackoff: Duration = .seconds(5),
        destinations: DestinationPolicy = DestinationPolicy(),
        fileRoots: [String] = [],
        userAgent: String = "kafka-worker-pipeline/1"
    ) {
        self.connectTimeout = connectTimeout
        self.readTimeout = readTimeout
        self.attemptTimeout = attemptTimeout
        self.maxBytes = maxBytes
        self.maxRedirects = maxRedirects
        self.maxAttempts = maxAttempts
        self.initialBackoff = initialBackoff
        self.maxBackoff = maxBackoff
        self.destinations = destinations
        self.fileRoots = fileRoots
        self.userAgent = userAgent
    }
}

/// Why a source could not be fetched. Every case names the URL.
public enum FetchError: Error, Sendable, Hashable, CustomStringConvertible {
    case invalidURL(String)
    /// Only `http`, `https` and (under ``FetchConfiguration/fileRoots``) `file` are read;
    /// redirects may only go to `http` and `https`.
    case unsupportedScheme(url: String)
    /// The host resolves to an address the ``DestinationPolicy`` refuses; no connection was made.
    case destinationNotAllowed(url: String, address: String)
    case resolutionFailed(url: String, reason: String)
    /// The server answered with a status other than 2xx or a followed redirect.
    case httpStatus(url: String, status: Int)
    /// The body is larger than ``FetchConfiguration/maxBytes``.
    case tooLarge(url: String, limit: Int)
    case timedOut(url: String)
    case connectionFailed(url: String, reason: String)
    case tooManyRedirects(url: String, limit: Int)
    case redirectWithoutLocation(url: String, status: Int)
    /// A `file://` path outside every configured root (or none configured).
    case fileNotAllowed(path: String)
    case fileReadFailed(path: String, errno: Int32)

    /// Whether another attempt may succeed: timeouts, failed connections, 429 and 5xx.
    public var isRetriable: Bool {
        switch self {
        case .timedOut, .connectionFailed: true
        case let .httpStatus(_, status): status == 429 || (500...599).contains(status)
        default: false
        }
    }

    public var description: String {
        switch self {
        case let .invalidURL(url): "invalid URL \(url)"
        case let .unsupportedScheme(url): "unsupported URL scheme in \(url)"
        case let .destinationNotAllowed(url, address): "\(url): destination \(address) is not allowed"
        case let .resolutionFailed(url, reason): "\(url): cannot resolve host: \(reason)"
        case let .httpStatus(url, status): "\(url): HTTP \(status)"
        case let .tooLarge(url, limit): "\(url): body larger than \(limit) bytes"
        case let .timedOut(url): "\(url): timed out"
        case let .connectionFailed(url, reason): "\(url): connection failed: \(reason)"
        case let .tooManyRedirects(url, limit): "\(url): more than \(limit) redirects"
        case let .redirectWithoutLocation(url, status): "\(url): HTTP \(status) without Location"
        case let .fileNotAllowed(path): "file \(path) is outside the allowed roots"
        case let .fileReadFailed(path, errno): "cannot read \(path): errno \(errno)"
        }
    }
}

/// A fetched source: a 2xx answer with its body, or a 304 without one.
public struct FetchedResponse: Sendable {
    public var status: Int
    public var bytes: [UInt8]
    /// The response's header fields as sent (`file://`: none).
    public var headers: [(String, String)]
    /// The URL the bytes came from, after redirects.
    public var finalURL: String
    /// Attempts made (1 if the first succeeded).
    public var attempts: Int

    public init(status: Int, bytes: [UInt8], headers: [(String, String)], finalURL: String, attempts: Int) {
        self.status = status
        self.bytes = bytes
        self.headers = headers
        self.finalURL = finalURL
        self.attempts = attempts
    }

    /// The first value of header `name` (case-insensitive).
    public func header(_ name: String) -> String? {
        headers.first { $0.0.caseInsensitiveCompare(name) == .orderedSame }?.1
    }

    public var contentType: String? { header("Content-Type") }
}
