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

/// The HTTP/1 server of the ingest endpoint: NIO's HTTP/1 request decoder and one handler of
/// ours (``RequestHandler``), with no request or response streams in between. Each request costs
/// an event-loop read, one task for the answer and one write. On Hummingbird's channel (the console's
/// server, ``HTTP1Server``) the endpoint used a fifth more CPU per post of one record
/// (BENCHMARKS.md, "The HTTP server").
///
/// Its connection rules are the same as ``HTTP1Server``'s:
/// - a connection that sends nothing for `idleTimeout`, between requests or in the middle of one
///   (a body announced and withheld), is closed; one whose request is being answered is not;
/// - a request not whole within `requestTimeout` of its first byte (a head or body trickled in a
///   byte at a time, which `idleTimeout` never sees as silence) gets 408 and the close;
/// - HTTP/1.0 keeps its connection only with `Connection: keep-alive` (RFC 9112 §9.3), and the
///   answer says which;
/// - a client that sends `Expect: 100-continue` gets `100 Continue` when its body will be read;
///   refused from its head instead, its connection closes with the answer;
/// - graceful shutdown stops accepting, answers the requests under way (each closes its
///   connection after its answer) and closes idle connections; `run` returns when all are closed;
/// - requests pipelined behind one being answered are answered in order; one that cannot be
///   parsed gets 400 and the connection closes.
public struct RequestServer: Service {
    public var host: String
    public var port: Int
    public var idleTimeout: Duration
    /// A request must be whole (head and body) within this long of its first byte, however
    /// steadily it trickles in (each byte would reset `idleTimeout`): else 408 and the close.
    public var requestTimeout: Duration
    let route: @Sendable (HTTPRequestHead) -> RequestRoute
    let onListening: @Sendable (Int) -> Void
    let group: any EventLoopGroup

    public init(
        host: String, port: Int, idleTimeout: Duration, requestTimeout: Duration = .seconds(30),
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        onListening: @escaping @Sendable (Int) -> Void = { _ in }, route: @escaping @Sendable (HTTPRequestHead) -> RequestRoute
    ) {
        self.host = host
        self.port = port
        self.idleTimeout = idleTimeout
        self.requestTimeout = requestTimeout
        self.group = group
        self.onListening = onListening
        self.route = route
    }

    public func run() async throws {
        let quiesce = ServerQuiescingHelper(group: group)
        let idle = TimeAmount(idleTimeout)
        let requestTimeout = TimeAmount(self.requestTimeout)
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
                    let requests = RequestHandler(route: route, eventLoop: channel.eventLoop, requestTimeout: requestTimeout)
                    try sync.addHandler(IdleStateHandler(readTimeout: idle))
                    try sync.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))
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

/// One connection's requests, one at a time, and their answers, each written as one buffer.
///
/// It is the connection's whole HTTP/1 state machine after NIO's request decoder: NIO's
/// pipelining, protocol-error and response-encoding handlers are not in the pipeline (without
/// them the endpoint runs 7 % fewer instructions per post of 20 tickers: BENCHMARKS.md, "One
/// handler after the decoder"). So it also does what they did:
/// - requests a client sends before its previous answer (pipelining) wait in `waiting`, and the
///   socket is not read while an answer is under way;
/// - a request the decoder cannot parse is answered 400 and its connection closed, after the
///   answers to the requests before it;
/// - a shutdown (`ChannelShouldQuiesceEvent`) closes an idle connection or one in the middle of a
///   request at once, and one being answered after its answer, which says `Connection: close`.
final class RequestHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum State {
        case idle
        /// Answered from the head; the body's parts are dropped until its end.
        case skipping
        case reading(head: HTTPRequestHead, body: ByteBuffer?, limit: Int, tooLarge: @Sendable () -> ServerResponse, handler: @Sendable ([UInt8]) async -> ServerResponse)
        /// The handler's task runs; its answer is written by ``answered(_:keepAlive:head:context:)``.
        case answering
        /// Over its limit, refused, asked to close or shutting down: nothing more is read.
        case closing
    }

    private enum Waiting {
        case part(HTTPServerRequestPart)
        /// The decoder could not parse what came next.
        case unparsable
    }

    private var state = State.idle
    /// What the decoder read while an answer was under way, in order.
    private var waiting = CircularBuffer<Waiting>()
    /// A read of the socket asked for while an answer was under way, made once it is written.
    private var readHeld = false
    /// The server is shutting down: the answer under way closes the connection.
    private var quiescing = false
    private var date = HTTPDate()
    /// The connection's event loop, where its requests' handlers run.
    private let executor: EventLoopTaskExecutor
    private let route: @Sendable (HTTPRequestHead) -> RequestRoute
    private let requestTimeout: TimeAmount
    /// When the request under way began to arrive (nil: none is, or it is whole).
    private var requestStarted: NIODeadline?
    /// A request ended in the read under way: bytes after it in the same read, if any, start the
    /// next one's clock with the next read (a gap of one idle spell at most).
    private var endedInRead = false
    /// Checks ``requestStarted`` against ``requestTimeout`` (one timer per connection, not one
    /// per request: the ingest endpoint's posts pay one clock read each).
    private var deadlineCheck: RepeatedTask?

    init(route: @escaping @Sendable (HTTPRequestHead) -> RequestRoute, eventLoop: any EventLoop, requestTimeout: TimeAmount = .seconds(30)) {
        self.route = route
        self.executor = EventLoopTaskExecutor(eventLoop)
        self.requestTimeout = requestTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        // A request is cut off within a quarter of the timeout (at most a second) after it.
        let every = TimeAmount.nanoseconds(min(requestTimeout.nanoseconds / 4, 1_000_000_000))
        deadlineCheck = context.eventLoop.scheduleRepeatedTask(initialDelay: every, delay: every) { _ in
            let (handler, context) = bound.value
            // Not whole in time: 408 (RFC 9110 §15.5.9). (A request being answered has no clock.)
            if let started = handler.requestStarted, NIODeadline.now() - started >= handler.requestTimeout, !handler.isAnswering {
                handler.requestStarted = nil
                handler.refuse("HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n", context: context)
            }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadlineCheck?.cancel()
        deadlineCheck = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadlineCheck?.cancel()
        deadlineCheck = nil
        context.fireChannelInactive()
    }

    /// Bytes came: unless they completed a request (or an answer is under way), a request is
    /// arriving, and its clock starts if it has not. (The decoder passes on every read's
    /// completion, also one that made no part yet: a head arriving a byte at a time.)
    func channelReadComplete(context: ChannelHandlerContext) {
        if requestStarted == nil, !endedInRead, takesInput { requestStarted = .now() }
        endedInRead = false
        context.fireChannelReadComplete()
    }

    /// A request is whole: its clock stops.
    private func requestEnded() {
        requestStarted = nil
        endedInRead = true
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if takesInput {
            handle(part, context: context)
        } else if isAnswering {
            waiting.append(.part(part))
        }
    }

    private func handle(_ part: HTTPServerRequestPart, context: ChannelHandlerContext) {
        switch (part, state) {
        case (.head(let head), .idle):
            let declaredLength = head.headers.first(name: "content-length").flatMap { Int($0) }
            switch route(head) {
            case .answer(let response):
                // A declared body this connection would have to read past (or one of unknown
                // length), or one the client holds back until told to send it: the connection
                // closes with the answer instead.
                let chunked = head.headers[canonicalForm: "transfer-encoding"].contains { $0.lowercased() == "chunked" }
                let keepAlive = head.persists && !chunked && (declaredLength ?? 0) <= 64 << 10 && !Self.expectsContinue(head) && !quiescing
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
                    var buffer = context.channel.allocator.buffer(capacity: 25)
                    buffer.writeStaticString("HTTP/1.1 100 Continue\r\n\r\n")
                    context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
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
            requestEnded()
            let keepAlive = head.persists
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
            requestEnded()
            state = .idle
        case (.body, .skipping):
            break
        default:
            // A part out of order: the decoder does not send one; close rather than guess.
            state = .closing
            context.close(promise: nil)
        }
    }

    private static func expectsContinue(_ head: HTTPRequestHead) -> Bool {
        head.version.minor >= 1 && head.headers[canonicalForm: "expect"].contains { $0.lowercased() == "100-continue" }
    }

    private func answered(_ response: ServerResponse, keepAlive: Bool, head: HTTPRequestHead, context: ChannelHandlerContext) {
        guard case .answering = state, context.channel.isActive else { return }
        let keepAlive = keepAlive && !quiescing
        state = keepAlive ? .idle : .closing
        write(response, keepAlive: keepAlive, head: head, context: context)
        // The requests that came meanwhile, up to the next answer under way, then the socket again.
        while takesInput, let next = waiting.popFirst() {
            switch next {
            case .part(let part): handle(part, context: context)
            case .unparsable: unparsable(context: context)
            }
        }
        if readHeld, !isAnswering {
            readHeld = false
            context.read()
        }
    }

    private var isAnswering: Bool {
        if case .answering = state { return true }
        return false
    }

    /// Whether a part read now would be handled (not waiting behind an answer, nor dropped).
    private var takesInput: Bool {
        switch state {
        case .answering, .closing: false
        case .idle, .skipping, .reading: true
        }
    }

    /// The answer to `head`, as one buffer: status line, its headers, its length and date,
    /// whether the connection stays (said to an HTTP/1.0 client, which needs it to reuse the
    /// connection), and the body (none after a HEAD).
    private func write(_ response: ServerResponse, keepAlive: Bool, head: HTTPRequestHead, context: ChannelHandlerContext) {
        var response = response
        if !response.headers.allSatisfy({ Self.isFieldSafe($0.name) && Self.isFieldSafe($0.value) }) {
            // A header that would split the answer (CR, LF or NUL): none of it goes out.
            response = ServerResponse(status: .internalServerError)
        }
        let withBody = !response.body.isEmpty && head.method != .HEAD
        var buffer = context.channel.allocator.buffer(capacity: 160 + response.headers.count * 48 + (withBody ? response.body.count : 0))
        buffer.writeStaticString("HTTP/1.1 ")
        let code = Int(response.status.code)
        if (100...999).contains(code) {
            buffer.writeInteger(UInt8(ascii: "0") &+ UInt8(code / 100))
            buffer.writeInteger(UInt8(ascii: "0") &+ UInt8(code / 10 % 10))
            buffer.writeInteger(UInt8(ascii: "0") &+ UInt8(code % 10))
        } else {
            buffer.writeString(String(code))
        }
        buffer.writeInteger(UInt8(ascii: " "))
        buffer.writeString(response.status.reasonPhrase)
        buffer.writeStaticString("\r\n")
        for (name, value) in response.headers where !Self.isServerField(name) {
            buffer.writeString(name)
            buffer.writeStaticString(": ")
            buffer.writeString(value)
            buffer.writeStaticString("\r\n")
        }
        buffer.writeStaticString("content-length: ")
        buffer.writeString(String(response.body.count))
        buffer.writeStaticString("\r\ndate: ")
        buffer.writeString(date.now())
        if !keepAlive {
            buffer.writeStaticString("\r\nconnection: close")
        } else if head.version.minor == 0 {
            buffer.writeStaticString("\r\nconnection: keep-alive")
        }
        buffer.writeStaticString("\r\n\r\n")
        if withBody { buffer.writeBytes(response.body) }
        let done = context.writeAndFlush(wrapOutboundOut(buffer))
        if !keepAlive { done.whenComplete { [channel = context.channel] _ in channel.close(promise: nil) } }
    }

    /// The fields the server writes itself (``ServerResponse``).
    private static func isServerField(_ name: String) -> Bool {
        switch name.utf8.count {
        case 4: name.lowercased() == "date"
        case 10: name.lowercased() == "connection"
        case 14: name.lowercased() == "content-length"
        default: false
        }
    }

    private static func isFieldSafe(_ text: String) -> Bool {
        !text.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0x00 }
    }

    /// Not while an answer is under way: the next request would only wait in `waiting`, and a
    /// client that pipelines without end would grow it.
    func read(context: ChannelHandlerContext) {
        if isAnswering {
            readHeld = true
        } else {
            context.read()
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            // Silent between requests or in the middle of one; a request being answered waits
            // for its answer, however long the broker takes.
            if isAnswering { return }
            context.close(promise: nil)
            return
        }
        if event is ChannelShouldQuiesceEvent {
            // Idle, or a request not yet whole (a client that stopped sending in the middle of a
            // body would hold the shutdown): closed now. Being answered: after its answer.
            switch state {
            case .answering: quiescing = true
            case .closing: break
            case .idle, .skipping, .reading:
                state = .closing
                context.close(promise: nil)
            }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard error is HTTPParserError else {
            state = .closing
            context.close(promise: nil)
            return
        }
        // Answered after the answer under way, as the request it stands for would have been.
        if isAnswering {
            waiting.append(.unparsable)
        } else {
            unparsable(context: context)
        }
    }

    /// A request the decoder cannot parse: 400, then the close.
    private func unparsable(context: ChannelHandlerContext) {
        refuse("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n", context: context)
    }

    /// A request that will not be answered (unparsable, or not whole in time): `answer`, then the
    /// close; only the close if its answer was given already (from its head).
    private func refuse(_ answer: StaticString, context: ChannelHandlerContext) {
        switch state {
        case .idle, .reading:
            state = .closing
            guard context.channel.isActive else { return }
            var buffer = context.channel.allocator.buffer(capacity: 80)
            buffer.writeStaticString(answer)
            context.writeAndFlush(wrapOutboundOut(buffer)).whenComplete { [channel = context.channel] _ in channel.close(promise: nil) }
        case .skipping, .answering, .closing:
            state = .closing
            context.close(promise: nil)
        }
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
