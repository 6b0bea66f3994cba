import Foundation
import HTTPTypes

/// What a ``TestHTTPServer`` answers to one request: a status, headers, a body, and how the
/// body is delivered (all at once, chunked, trickled, or never).
public struct ScriptedResponse: Sendable {
    public enum Delivery: Sendable, Equatable {
        /// The whole body at once, with Content-Length.
        case whole
        /// Chunked transfer encoding (no Content-Length), `size` bytes a chunk.
        case chunked(size: Int)
        /// Content-Length, then the body `size` bytes at a time with `every` between writes: a
        /// body that never goes silent long enough for a read timeout, yet ends late.
        case trickle(every: Duration, size: Int)
        /// No answer at all: the request waits until the client gives up (closes the
        /// connection) or the server closes, and the connection is closed without a response.
        case hang
        /// The connection is closed at once, no response (with HTTP/2, every stream on it).
        case reset
    }

    public var status: HTTPResponse.Status
    public var headers: HTTPFields
    public var body: [UInt8]
    public var delivery: Delivery

    public init(status: HTTPResponse.Status, headers: HTTPFields = [:], body: [UInt8] = [], delivery: Delivery = .whole) {
        self.status = status
        self.headers = headers
        self.body = body
        self.delivery = delivery
    }

    /// 200 with `body` as `contentType`.
    public static func ok(_ body: [UInt8], contentType: String) -> Self {
        ScriptedResponse(status: .ok, headers: [.contentType: contentType], body: body)
    }

    /// `status` with a JSON body (written as given, not encoded).
    public static func json(_ text: String, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Self {
        var fields: HTTPFields = [.contentType: "application/json"]
        fields.append(contentsOf: headers)
        return ScriptedResponse(status: status, headers: fields, body: Array(text.utf8))
    }

    /// 302 to `location` (absolute, or relative to the request).
    public static func redirect(to location: String) -> Self {
        ScriptedResponse(status: .found, headers: [.location: location])
    }

    /// `status` with an empty body.
    public static func status(_ status: HTTPResponse.Status) -> Self {
        ScriptedResponse(status: status)
    }

    /// Never answers (see ``Delivery/hang``).
    public static let hang = ScriptedResponse(status: .ok, delivery: .hang)

    /// Closes the connection without an answer (see ``Delivery/reset``).
    public static let reset = ScriptedResponse(status: .ok, delivery: .reset)

    /// 200 with `body` one byte every `interval` (see ``Delivery/trickle(every:size:)``).
    public static func trickle(_ body: [UInt8], every interval: Duration) -> Self {
        ScriptedResponse(status: .ok, body: body, delivery: .trickle(every: interval, size: 1))
    }

    /// 200 with `body` in chunked encoding, 16 KiB a chunk.
    public static func chunked(_ body: [UInt8]) -> Self {
        ScriptedResponse(status: .ok, body: body, delivery: .chunked(size: 16 * 1024))
    }
}

/// One request a ``TestHTTPServer`` received.
public struct RecordedRequest: Sendable {
    public var method: HTTPRequest.Method
    /// The request target as sent: the path and the query (`/api/products?page_no=2`).
    public var target: String
    /// The target's path, without the query: what routes are matched on.
    public var path: String
    public var headers: HTTPFields
    /// The request's body (up to 4 MB).
    public var body: [UInt8] = []
    /// Whether it came over HTTP/2.
    public var http2 = false
    /// Which connection it came on: the client's address and port.
    public var connection = ""

    public init(method: HTTPRequest.Method, target: String, headers: HTTPFields) {
        self.method = method
        self.target = target
        self.path = String(target.prefix { $0 != "?" && $0 != "#" })
        self.headers = headers
    }

    /// The first value of the query parameter `name` (percent-decoded), or nil when absent.
    public func query(_ name: String) -> String? {
        URLComponents(string: target)?.queryItems?.first { $0.name == name }?.value
    }

    /// The value of the header field `name` (case-insensitive), or nil when absent or not a
    /// valid field name.
    public func header(_ name: String) -> String? {
        HTTPField.Name(name).flatMap { headers[$0] }
    }
}
