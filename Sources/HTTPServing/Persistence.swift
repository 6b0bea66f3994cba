import NIOHTTP1

extension HTTPRequestHead {
    /// Whether the connection persists after this request (RFC 9112 §9.3): a `close` token in any
    /// `Connection` header, in any case, closes it; otherwise HTTP/1.1 persists, and HTTP/1.0 only
    /// with `keep-alive`. (NIO's `isKeepAlive` takes llhttp's verdict, which for HTTP/1.0 looks
    /// only for `keep-alive`: `Connection: keep-alive, close` kept the connection open.)
    var persists: Bool {
        func lowered(_ byte: UInt8) -> UInt8 { (65...90).contains(byte) ? byte | 0x20 : byte }
        var keepAlive = false
        for token in headers[canonicalForm: "connection"] {
            if token.utf8.elementsEqual("close".utf8, by: { lowered($0) == $1 }) { return false }
            if token.utf8.elementsEqual("keep-alive".utf8, by: { lowered($0) == $1 }) { keepAlive = true }
        }
        return version.major == 1 && version.minor == 0 ? keepAlive : true
    }
}
