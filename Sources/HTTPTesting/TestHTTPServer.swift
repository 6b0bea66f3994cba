import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// A scriptable HTTP/1.1 server for tests, on Hummingbird: 127.0.0.1, a free port; with a
/// ``TestCertificate``, HTTPS with HTTP/2 (ALPN `h2`, HTTP/1.1 for clients without it).
///
/// Each path has a script, a queue of ``ScriptedResponse``s taken one per request (the last
/// one repeats once the others are used), or a handler that computes the answer from the
/// request (for a fake API whose answers depend on the query). A path with neither goes to the
/// fallback handler (for paths that carry a value, such as APNs' `/3/device/TOKEN`), else 404.
/// Every request is recorded, so tests can assert "no retry" or "exactly one retry" from what
/// the server saw.
public final class TestHTTPServer: Sendable {
    /// Computes the answer to a request on a path (see ``init(routes:handlers:)``).
    public typealias Handler = @Sendable (RecordedRequest) async -> ScriptedResponse

    public let port: Int
    private let state: State
    private let group: ServiceGroup
    private let run: Task<Void, any Error>

    public let isTLS: Bool

    /// `http://127.0.0.1:<port>` (`https://localhost:<port>` with TLS: the name the test
    /// certificate is for).
    public var baseURL: String { isTLS ? "https://localhost:\(port)" : "http://127.0.0.1:\(port)" }

    /// Returns once the server is listening: `routes` are scripts per path, `handlers`
    /// compute the answer per path (a handler wins over a script for the same path), `fallback`
    /// answers every other path; with `tls`, HTTPS and HTTP/2.
    public init(
        routes: [String: [ScriptedResponse]] = [:], handlers: [String: Handler] = [:], fallback: Handler? = nil, tls: TestCertificate? = nil
    ) async throws {
        let state = State(scripts: routes, handlers: handlers, fallback: fallback)
        var logger = Logger(label: "TestHTTPServer")
        logger.logLevel = .warning
        // The port once listening, or why the server stopped before.
        let (started, starting) = AsyncStream.makeStream(of: Result<Int, any Error>.self)
        let server: HTTPServerBuilder =
            if let tls {
                try .http2Upgrade(tlsConfiguration: tls.serverConfiguration, additionalChannelHandlers: [CloseWhenClientCloses()])
            } else {
                .http1(configuration: .init(additionalChannelHandlers: [CloseWhenClientCloses()]))
            }
        let app = Application(
            responder: ScriptResponder(state: state),
            server: server,
            configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: 0), serverName: nil),
            onServerRunning: { channel in
                if let port = channel.localAddress?.port {
                    starting.yield(.success(port))
                } else {
                    starting.yield(.failure(TestHTTPServerError(description: "the listening socket has no port")))
                }
            },
            logger: logger)
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [app], logger: logger))
        let run = Task {
            do {
                try await group.run()
                starting.yield(.failure(TestHTTPServerError(description: "the server stopped before it was listening")))
            } catch {
                starting.yield(.failure(error))
                throw error
            }
        }
        var first = started.makeAsyncIterator()
        let port: Int
        switch await first.next() {
        case .success(let listening):
            port = listening
        case .failure(let error):
            run.cancel()
            throw error
        case nil:
            run.cancel()
            throw TestHTTPServerError(description: "the server stopped before it was listening")
        }
        self.port = port
        self.isTLS = tls != nil
        self.state = state
        self.group = group
        self.run = run
    }

    /// Every request received so far, in order.
    public var requests: [RecordedRequest] { state.log.withLock { $0.requests } }

    /// How many requests the server has received for `path` (queries ignored).
    public func requests(to path: String) -> Int {
        state.log.withLock { log in log.requests.count { $0.path == path } }
    }

    /// Ends hanging and trickling responses (their connections are closed), then shuts the
    /// server down gracefully: it stops listening and closes every connection once its
    /// response is written.
    public func close() async throws {
        state.closeSlowResponses()
        await group.triggerGracefulShutdown()
        try await run.value
    }
}

public struct TestHTTPServerError: Error, CustomStringConvertible {
    public var description: String
}

// MARK: The server's state

extension TestHTTPServer {
    final class State: Sendable {
        struct Log {
            /// Requests answered from each script (the position in its queue).
            var served: [String: Int] = [:]
            var requests: [RecordedRequest] = []
        }

        /// The connections of responses that do not end by themselves (hang, trickle); nil
        /// once the server is closing.
        struct SlowResponses {
            var channels: [ObjectIdentifier: any Channel]? = [:]
        }

        let scripts: [String: [ScriptedResponse]]
        let handlers: [String: Handler]
        let fallback: Handler?
        let log = Mutex(Log())
        let slow = Mutex(SlowResponses())

        init(scripts: [String: [ScriptedResponse]], handlers: [String: Handler], fallback: Handler?) {
            self.scripts = scripts
            self.handlers = handlers
            self.fallback = fallback
        }

        /// Records `request` and answers it from its path's handler or script, else the
        /// fallback (404 without).
        func answer(_ request: RecordedRequest) async -> ScriptedResponse {
            let handler = handlers[request.path] ?? (scripts[request.path] == nil ? fallback : nil)
            let scripted = log.withLock { log -> ScriptedResponse? in
                log.requests.append(request)
                guard handler == nil else { return nil }
                guard let script = scripts[request.path], !script.isEmpty else { return .status(.notFound) }
                let position = log.served[request.path, default: 0]
                log.served[request.path] = position + 1
                return script[min(position, script.count - 1)]
            }
            if let scripted { return scripted }
            return await handler?(request) ?? .status(.notFound)
        }

        /// Tracks the connection of a response that does not end by itself until `body` returns;
        /// closes it at once when the server is already closing.
        func whileSlow<T>(_ channel: any Channel, _ body: () async throws -> T) async throws -> T {
            let id = ObjectIdentifier(channel)
            let tracked = slow.withLock { slow -> Bool in
                guard slow.channels != nil else { return false }
                slow.channels?[id] = channel
                return true
            }
            defer { slow.withLock { _ = $0.channels?.removeValue(forKey: id) } }
            if !tracked { try? await channel.close() }
            return try await body()
        }

        func closeSlowResponses() {
            let channels = slow.withLock { slow in
                defer { slow.channels = nil }
                return Array((slow.channels ?? [:]).values)
            }
            for channel in channels { channel.close(promise: nil) }
        }
    }
}

// MARK: Hummingbird glue

/// The request context: Hummingbird's basic one plus the request's connection (a hanging
/// response waits for it to close).
struct ConnectionContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = CoreRequestContextStorage(source: source)
        channel = source.channel
    }
}

/// Answers every request from the server's state, delivering the body as scripted.
struct ScriptResponder: HTTPResponder {
    let state: TestHTTPServer.State

    /// Thrown for a hang once its connection closed: there is nobody to answer.
    struct ConnectionClosed: Error {}

    func respond(to request: Request, context: ConnectionContext) async throws -> Response {
        var received = RecordedRequest(method: request.method, target: request.head.path ?? "/", headers: request.headers)
        // An HTTP/2 request comes on a stream channel, a child of the connection's.
        received.http2 = context.channel.parent != nil
        // The client's address and port: an object's identity can come back for a later
        // connection once the first is freed (a benchmark saw it).
        received.connection = (context.channel.parent ?? context.channel).remoteAddress?.description ?? ""
        // The body, bounded (a fake API reads forms and JSON, never uploads).
        if let collected = try? await request.body.collect(upTo: 4 * 1024 * 1024) { received.body = Array(collected.readableBytesView) }
        let scripted = await state.answer(received)
        let body = scripted.body
        switch scripted.delivery {
        case .whole:
            return Response(status: scripted.status, headers: scripted.headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: body)))
        case .chunked(let size):
            return Response(status: scripted.status, headers: scripted.headers, body: ResponseBody { writer in
                for start in stride(from: 0, to: body.count, by: max(1, size)) {
                    try await writer.write(ByteBuffer(bytes: body[start..<min(start + max(1, size), body.count)]))
                }
                try await writer.finish(nil)
            })
        case .trickle(let interval, let size):
            let channel = context.channel
            return Response(status: scripted.status, headers: scripted.headers, body: ResponseBody(contentLength: body.count) { [state] writer in
                try await state.whileSlow(channel) {
                    // A write to a connection the client closed fails, which ends the body.
                    for start in stride(from: 0, to: body.count, by: max(1, size)) {
                        if start > 0 { try await Task.sleep(for: interval) }
                        try await writer.write(ByteBuffer(bytes: body[start..<min(start + max(1, size), body.count)]))
                    }
                }
                try await writer.finish(nil)
            })
        case .reset:
            // The whole connection, every stream on it too.
            try? await (context.channel.parent ?? context.channel).close()
            throw ConnectionClosed()
        case .hang:
            try await state.whileSlow(context.channel) {
                try? await context.channel.closeFuture.get()
            }
            throw ConnectionClosed()
        }
    }
}

/// Closes a connection when the client closes its side. Hummingbird allows half-closed
/// connections (its server keeps answering a client that shut down writing); no client of
/// these tests half-closes, so a read EOF means the client gave up, which ends a hang.
final class CloseWhenClientCloses: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Any

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event {
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }
}
