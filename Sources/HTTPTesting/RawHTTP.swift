import Foundation

/// Bytes written to a server as they are, on a connection of their own: what a hostile or
/// broken client sends (a body announced and withheld, garbage, a foreign `Host`), and when the
/// server closed the connection.
public enum RawHTTP {
    /// Sends `text` to 127.0.0.1:`port` and reads until the server closes the connection or
    /// `limit` seconds pass without a byte: what came back, and how long after sending it closed
    /// or reset the connection (nil: neither within the limit, or the connection failed). The socket calls block,
    /// so they run on a thread of their own, not on the cooperative pool the other tests share.
    public static func exchange(port: Int, _ text: String, limit: Int = 30) async -> (answer: String, closedAfter: Duration?) {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: blockingExchange(port: port, text, limit: limit)) }
        }
    }

    /// As ``exchange(port:_:limit:)``, with when the answer's first byte came (nil: none did):
    /// a test of "closed once answered" compares the two, so that a loaded machine that is slow
    /// to answer at all is not read as a connection left open.
    public static func timedExchange(port: Int, _ text: String, limit: Int = 30) async -> (answer: String, firstByteAfter: Duration?, closedAfter: Duration?) {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                guard let connection = Connection(port: port, limit: limit) else { return continuation.resume(returning: ("connect failed", nil, nil)) }
                let start = ContinuousClock.now
                connection.blockingSend(text)
                let (answer, closed) = connection.blockingRead(until: nil, since: start)
                continuation.resume(returning: (answer, connection.firstByte.map { $0 - start }, closed))
            }
        }
    }

    private static func blockingExchange(port: Int, _ text: String, limit: Int) -> (answer: String, closedAfter: Duration?) {
        guard let connection = Connection(port: port, limit: limit) else { return ("connect failed", nil) }
        let start = ContinuousClock.now
        connection.blockingSend(text)
        return connection.blockingRead(until: nil, since: start)
    }

    /// One connection kept open between steps: send, read up to a text, read until the server
    /// closes it. Each step blocks a thread of its own.
    public final class Connection: @unchecked Sendable {
        private let fd: Int32
        private var unread: [UInt8] = []
        /// When the first byte from the server came.
        fileprivate var firstByte: ContinuousClock.Instant?

        /// Connected to 127.0.0.1:`port`; a read waits at most `limit` seconds for a byte.
        public init?(port: Int, limit: Int = 30) {
            fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else {
                close(fd)
                return nil
            }
            var timeout = timeval(tv_sec: limit, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }

        deinit { close(fd) }

        public func send(_ text: String) async {
            await Self.offPool { self.blockingSend(text) }
        }

        /// What came until `text` was read (nil: until the server closed the connection), and
        /// when it closed or reset it, counted from `since` (nil: it did not, within the limit).
        public func read(until text: String?, since start: ContinuousClock.Instant = .now) async -> (answer: String, closedAfter: Duration?) {
            await Self.offPool { self.blockingRead(until: text, since: start) }
        }

        fileprivate func blockingSend(_ text: String) {
            _ = text.withCString { Glibc.send(fd, $0, strlen($0), 0) }
        }

        fileprivate func blockingRead(until text: String?, since start: ContinuousClock.Instant) -> (answer: String, closedAfter: Duration?) {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                if let text, let range = String(decoding: unread, as: UTF8.self).range(of: text) {
                    let answer = String(decoding: unread, as: UTF8.self)[..<range.upperBound]
                    unread.removeFirst(answer.utf8.count)
                    return (String(answer), nil)
                }
                let n = recv(fd, &buffer, buffer.count, 0)
                if n == 0 { return (String(decoding: unread, as: UTF8.self), ContinuousClock.now - start) }
                // A reset is the server closing too (abortively: it still held unread bytes).
                if n < 0, errno == ECONNRESET { return (String(decoding: unread, as: UTF8.self), ContinuousClock.now - start) }
                if n < 0 { return (String(decoding: unread, as: UTF8.self) + " [recv: errno \(errno)]", nil) }
                if firstByte == nil { firstByte = .now }
                unread += buffer[0..<n]
            }
        }

        private static func offPool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
            await withCheckedContinuation { continuation in
                Thread.detachNewThread { continuation.resume(returning: body()) }
            }
        }
    }
}
