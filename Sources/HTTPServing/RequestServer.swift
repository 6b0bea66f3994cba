import Foundation
import Logging
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOPosix
import ServiceLifecycle
import Synchronization

/// An answer: status, headers and a whole body (`Content-Length`, `Date` and `Connection` are
/// added by the server).
public struct ServerResponse: Sendable {
    public var status: HTTPResponseStatus
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(status: HTTPResponseStatus, headers: HTTPHeaders = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// What to do with a request once its head is read.
public enum RequestRoute: Sendable {
    /// Answer now; the body, if any, is not read (a kept-alive connection skips it).
    case answer(ServerResponse)
    /// Read the whole body, then answer with `handler`. A body over `limit` bytes is answered
    /// `tooLarge()` and its connection closed.
    ///
    /// The handler runs in a task that prefers the connection's event loop as its executor
    /// (``EventLoopTaskExecutor``): it and the nonisolated code it awaits run on the loop, and a
    /// continuation it waits on is resumed onto the loop by the thread that resumes it. A post
    /// waiting for the broker's acknowledgements wakes one thread when they come, the loop, which
    /// writes the answer; on Swift's pool it woke three (a pool thread to start, one to go on,
    /// then the loop). So the handler must not block: blocking calls go to threads of their own.
    case readBody(limit: Int, tooLarge: @Sendable () -> ServerResponse, handler: @Sendable ([UInt8]) async -> ServerResponse)
}

/// The HTTP/1 server of the ingest endpoint: NIO's HTTP/1 codec and pipelining handler and one
/// handler of ours, with no request or response streams in between. Each request costs an
/// event-loop read, one task for the answer and a write. On Hummingbird's channel (the console's
/// server, ``HTTP1Server``) the endpoint used a fifth more CPU per post of one record
/// (BENCHMARKS.md, "The HTTP server").
///
/// Its connection rules are the same as ``HTTP1Server``'s:
/// - a connection that sends nothing for `idleTimeout`, between requests or in the middle of one
///   (a body announced and withheld), is closed; one whose request is being answered is not;
/// - HTTP/1.0 keeps its connection only with `Connection: keep-alive` (RFC 9112 §9.3), and the
///   answer says which;
/// - a client that sends `Expect: 100-continue` gets `100 Continue` when its body will be read;
///   refused from its head instead, its connection closes with the answer;
/// - graceful shutdown stops accepting, answers the requests under way (each closes its
///   connection after its answer) and closes idle connections; `run` returns when all are closed.
public struct RequestServer: Service {
    public var host: String
    public var port: Int
    public var idleTimeout: Duration
    let route: @Sendable (HTTPRequestHead) -> RequestRoute
    let onListening: @Sendable (Int) -> Void
    let group: any EventLoopGroup

    public init(
        host: String, port: Int, idleTimeout: Duration, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        onListening: @escaping @Sendable (Int) -> Void = { _ in }, route: @escaping @Sendable (HTTPRequestHead) -> RequestRoute
    ) {
        self.host = host
        self.port = port
        self.idleTimeout = idleTimeout
        self.group = group
        self.onListening = onListening
        self.route = route
    }

    public func run() async throws {
        let quiesce = ServerQuiescingHelper(group: group)
        let idle = TimeAmount(idleTimeout)
        let route = self.route
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(quiesce.makeServerChannelHandler(channel: channel))
                }
            }
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    let requests = RequestHandler(route: route, eventLoop: channel.eventLoop)
                    try sync.addHandler(IdleStateHandler(readTimeout: idle))
                    try sync.addHandler(QuiesceRelay(requests: requests))
                    try sync.configureHTTPServerPipeline(withPipeliningAssistance: true, withErrorHandling: true)
                    try sync.addHandler(requests)
                }
            }
            .childChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.maxMessagesPerRead, value: 16)
            .bind(host: host, port: port).get()
        onListening(channel.localAddress?.port ?? port)
        // Stops accepting, lets each connection finish its answer and completes `closed` when
        // the last has closed; once, whichever of shutdown, cancellation or a failed listener
        // asks first.
        let closed = group.next().makePromise(of: Void.self)
        let once = Once()
        let shutDown: @Sendable () -> Void = { if once.first() { quiesce.initiateShutdown(promise: closed) } }
        try await withTaskCancellationHandler {
            try await withGracefulShutdownHandler {
                try? await channel.closeFuture.get()
                shutDown()
                try await closed.futureResult.get()
            } onGracefulShutdown: {
                shutDown()
            }
        } onCancel: {
            shutDown()
        }
    }
}

private final class Once: Sendable {
    private let done = Mutex(false)
    /// True the first time only.
    func first() -> Bool { done.withLock { done in defer { done = true }; return !done } }
}

/// One connection's requests, one at a time (NIO's pipelining handler holds the next until the
/// answer is written).
final class RequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private enum State {
        case idle
        /// Answered from the head; the body's parts are dropped until its end.
        case skipping
        case reading(head: HTTPRequestHead, body: ByteBuffer?, limit: Int, tooLarge: @Sendable () -> ServerResponse, handler: @Sendable ([UInt8]) async -> ServerResponse)
        case answering
        /// Over its limit, or asked to close: nothing more is read.
        case closing
    }

    private var state = State.idle
    private var date = HTTPDate()
    /// The connection's event loop, where its requests' handlers run.
    private let executor: EventLoopTaskExecutor
    private let route: @Sendable (HTTPRequestHead) -> RequestRoute

    init(route: @escaping @Sendable (HTTPRequestHead) -> RequestRoute, eventLoop: any EventLoop) {
        self.route = route
        self.executor = EventLoopTaskExecutor(eventLoop)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch (unwrapInboundIn(data), state) {
        case (.head(let head), .idle):
            let declaredLength = head.headers.first(name: "content-length").flatMap { Int($0) }
            switch route(head) {
            case .answer(let response):
                // A declared body this connection would have to read past (or one of unknown
                // length), or one the client holds back until told to send it: the connection
                // closes with the answer instead.
                let chunked = head.headers[canonicalForm: "transfer-encoding"].contains { $0.lowercased() == "chunked" }
                let keepAlive = head.isKeepAlive && !chunked && (declaredLength ?? 0) <= 64 << 10 && !Self.expectsContinue(head)
                state = keepAlive ? .skipping : .closing
                write(response, keepAlive: keepAlive, head: head, context: context)
            case .readBody(let limit, let tooLarge, let handler):
                if let length = declaredLength, length > limit {
                    state = .closing
                    write(tooLarge(), keepAlive: false, head: head, context: context)
                    return
                }
                state = .reading(head: head, body: nil, limit: limit, tooLarge: tooLarge, handler: handler)
                if Self.expectsContinue(head) {
                    // The client waits for this before it sends the body (RFC 9110 §10.1.1).
                    context.writeAndFlush(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .continue))), promise: nil)
                }
            }
        case (.body(var part), .reading(let head, var body, let limit, let tooLarge, let handler)):
            state = .idle  // while `body` is held here, so that appending does not copy it
            if body == nil {
                body = part
            } else {
                body!.writeBuffer(&part)
            }
            guard body!.readableBytes <= limit else {
                state = .closing
                write(tooLarge(), keepAlive: false, head: head, context: context)
                return
            }
            state = .reading(head: head, body: body, limit: limit, tooLarge: tooLarge, handler: handler)
        case (.end, .reading(let head, let body, _, _, let handler)):
            let keepAlive = head.isKeepAlive
            state = .answering
            let bytes = body.map { Array($0.readableBytesView) } ?? []
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            // Started on the loop without a wake-up; the answer is written where the task ends.
            Task(executorPreference: executor) {
                let response = await handler(bytes)
                let (handler, context) = bound.value
                handler.answered(response, keepAlive: keepAlive, head: head, context: context)
            }
        case (.end, .skipping):
            state = .idle
        case (.body, .skipping), (_, .closing):
            break
        default:
            // A part out of order: the codec does not send one; close rather than guess.
            state = .closing
            context.close(promise: nil)
        }
    }

    private static func expectsContinue(_ head: HTTPRequestHead) -> Bool {
        head.version.minor >= 1 && head.headers[canonicalForm: "expect"].contains { $0.lowercased() == "100-continue" }
    }

    private func answered(_ response: ServerResponse, keepAlive: Bool, head: HTTPRequestHead, context: ChannelHandlerContext) {
        guard case .answering = state, context.channel.isActive else { return }
        state = keepAlive ? .idle : .closing
        write(response, keepAlive: keepAlive, head: head, context: context)
    }

    /// The answer to `head`: its length and date; whether the connection stays (said to an
    /// HTTP/1.0 client, which needs it to reuse the connection); no body after a HEAD.
    private func write(_ response: ServerResponse, keepAlive: Bool, head: HTTPRequestHead, context: ChannelHandlerContext) {
        var headers = response.headers
        headers.replaceOrAdd(name: "content-length", value: String(response.body.count))
        headers.replaceOrAdd(name: "date", value: date.now())
        if !keepAlive {
            headers.replaceOrAdd(name: "connection", value: "close")
        } else if head.version.minor == 0 {
            headers.replaceOrAdd(name: "connection", value: "keep-alive")
        }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: response.status, headers: headers))), promise: nil)
        if !response.body.isEmpty, head.method != .HEAD {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: response.body)))), promise: nil)
        }
        let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if !keepAlive { done.whenComplete { [channel = context.channel] _ in channel.close(promise: nil) } }
    }

    /// Whether a shutdown closes the connection now: its request's answer is not under way
    /// (NIO's pipelining handler waits for the end of a request, and so for a client that
    /// stopped sending in the middle of a body). Idle connections and those being answered are
    /// closed by that handler, the latter after their answer.
    var closesOnQuiesce: Bool {
        switch state {
        case .skipping, .reading: true
        case .idle, .answering, .closing: false
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            // Silent between requests or in the middle of one; a request being answered waits
            // for its answer, however long the broker takes.
            if case .answering = state { return }
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// An event loop as a task executor: a task that prefers it runs its nonisolated code on the
/// loop's thread, and a continuation it awaits is resumed onto the loop directly. With a
/// producer that serves its delivery reports on the same loop
/// (`DeliveryReportServing.scheduled { loop.execute($0) }`), a task awaiting reports is woken by
/// them with no other thread in between (`ingest http`'s handlers, `pipelinectl perf produce`).
public final class EventLoopTaskExecutor: TaskExecutor {
    public let eventLoop: any EventLoop

    public init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// Tells the request handler that the server is shutting down, ahead of NIO's pipelining
/// handler, which acts on that event and does not pass it on.
final class QuiesceRelay: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    private let requests: RequestHandler

    init(requests: RequestHandler) {
        self.requests = requests
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent, requests.closesOnQuiesce {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }
}

/// The `Date` header's value (RFC 9110 §5.6.7), formatted at most once a second.
struct HTTPDate {
    private var second = 0
    private var value = ""

    mutating func now() -> String {
        var t = time(nil)
        if second == t { return value }
        var parts = tm()
        gmtime_r(&t, &parts)
        var buffer = [Int8](repeating: 0, count: 64)
        let n = strftime(&buffer, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
        second = t
        value = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return value
    }
}
