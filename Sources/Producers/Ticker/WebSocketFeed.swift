import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import Synchronization
import Kafka

/// A WebSocket feed that stays connected: it connects, sends the subscription messages, and
/// yields every text and binary message the server sends, in order; when the connection drops
/// or cannot be made it reconnects after an exponential backoff with jitter and subscribes again.
///
/// Iterate it (``WebSocketFeedEvent``s) from one task. Pings from the server are answered with
/// pongs at once; the feed pings the server after ``Configuration/pingInterval`` without writing,
/// and drops a connection that sent nothing for ``Configuration/idleTimeout`` (a dead peer or
/// network). Reading is back-pressured: while the consumer is behind, the socket is not read
/// (and the idle timeout does not count).
///
/// It stops when the iterating task is cancelled (buffered messages are dropped), when
/// ``stop()`` is called (the connection is closed and what was already received is still
/// yielded), or with ``WebSocketFeedError/gaveUp(attempts:lastError:)`` after
/// ``ReconnectPolicy/maxAttempts`` failures in a row.
public struct WebSocketFeed: AsyncSequence, Sendable {
    public typealias Element = WebSocketFeedEvent

    public struct Configuration: Sendable {
        public var endpoint: WebSocketEndpoint
        /// Sent as text messages, in order, on every new connection (the subscription).
        public var subscription: [String]
        public var reconnect: ReconnectPolicy = ReconnectPolicy()
        /// Ping the server after this long without writing anything.
        public var pingInterval: Duration = .seconds(30)
        /// Drop the connection after this long without reading anything (pongs count), once a
        /// ping has gone unanswered for a ping interval.
        public var idleTimeout: Duration = .seconds(75)
        /// TCP connect, TLS and the HTTP upgrade together.
        public var connectTimeout: Duration = .seconds(10)
        /// Largest message (after reassembling fragments), in bytes.
        public var maxMessageSize: Int = 1 << 20
        /// How many messages are read ahead of the consumer.
        public var readAhead: Int = 256
        /// TLS for `wss://` (default: the system's trust roots, the host name verified).
        public var tls: TLSConfiguration = .makeClientConfiguration()
        /// Extra request headers for the upgrade request.
        public var headers: [(String, String)] = []

        public init(endpoint: WebSocketEndpoint, subscription: [String]) {
            self.endpoint = endpoint
            self.subscription = subscription
        }
    }

    public let configuration: Configuration
    let group: any EventLoopGroup
    let control = FeedControl()

    public init(configuration: Configuration, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        self.configuration = configuration
        self.group = group
    }

    /// Ends the feed gracefully: closes the connection, yields what was already received, then
    /// ends (no reconnect). A backoff wait in progress ends at once. Safe from any task or thread.
    public func stop() { control.stop() }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(feed: self) }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let feed: WebSocketFeed
        private var state: State = .disconnected(retryIn: nil)
        private var connections = 0
        /// Failures since a connection last delivered a message (connect failures and drops).
        private var failuresInARow = 0
        private var random = SystemRandomNumberGenerator()

        private enum State {
            case disconnected(retryIn: Duration?)
            case connected(WebSocketConnection)
            case finished
        }

        init(feed: WebSocketFeed) { self.feed = feed }

        public mutating func next() async throws -> WebSocketFeedEvent? {
            while true {
                switch state {
                case .finished:
                    return nil

                case .disconnected(let retryIn):
                    if let retryIn { await feed.control.sleep(for: retryIn) }
                    if Task.isCancelled || feed.control.isStopped {
                        state = .finished
                        return nil
                    }
                    do {
                        let connection = try await WebSocketConnection.open(feed.configuration, group: feed.group)
                        state = .connected(connection)
                        // A stop() during the handshake must close this connection too.
                        feed.control.register(connection.channel)
                        for text in feed.configuration.subscription { try await connection.send(text: text) }
                        connections += 1
                        return .connected(number: connections)
                    } catch {
                        if case .connected(let connection) = state { connection.close() }
                        if Task.isCancelled || feed.control.isStopped {
                            state = .finished
                            return nil
                        }
                        let retry = try backoff(after: error)
                        return .connectFailed(reason: Self.describe(error), retryIn: retry)
                    }

                case .connected(let connection):
                    let reason: String
                    do {
                        if let message = try await connection.next() {
                            failuresInARow = 0
                            return .message(message)
                        }
                        reason = "the connection closed"
                    } catch {
                        reason = Self.describe(error)
                    }
                    connection.close()
                    feed.control.register(nil)
                    if Task.isCancelled || feed.control.isStopped {
                        state = .finished
                        return nil
                    }
                    let retry = try backoff(after: WebSocketFeedError.disconnected(reason))
                    return .disconnected(reason: reason, retryIn: retry)
                }
            }
        }

        /// Counts a failure and moves to waiting; throws when the policy gives up.
        private mutating func backoff(after error: any Error) throws(WebSocketFeedError) -> Duration {
            failuresInARow += 1
            if let max = feed.configuration.reconnect.maxAttempts, failuresInARow >= max {
                state = .finished
                throw .gaveUp(attempts: failuresInARow, lastError: Self.describe(error))
            }
            let delay = feed.configuration.reconnect.delay(failures: failuresInARow, using: &random)
            state = .disconnected(retryIn: delay)
            return delay
        }

        static func describe(_ error: any Error) -> String {
            switch error {
            case let e as WebSocketFeedError: e.description
            case let e as IOError: "\(e)"
            case let e as ChannelError: "\(e)"
            default: String(describing: error)
            }
        }
    }
}

/// What a ``WebSocketFeed`` yields.
public enum WebSocketFeedEvent: Sendable, Hashable {
    /// Connected and subscribed; `number` counts connections from 1 (above 1: a reconnect).
    case connected(number: Int)
    /// One message (fragments reassembled).
    case message(WebSocketMessage)
    /// An established connection ended; the next one is tried after `retryIn`.
    case disconnected(reason: String, retryIn: Duration)
    /// A connection attempt failed; the next one is tried after `retryIn`.
    case connectFailed(reason: String, retryIn: Duration)
}

/// A text or binary WebSocket message.
public struct WebSocketMessage: Sendable, Hashable {
    public enum Kind: Sendable, Hashable { case text, binary }
    public var kind: Kind
    public var bytes: [UInt8]

    public init(kind: Kind, bytes: [UInt8]) {
        self.kind = kind
        self.bytes = bytes
    }

    public var text: String { String(decoding: bytes, as: UTF8.self) }
}

public enum WebSocketFeedError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The URL is not `ws://host[:port][/path]` or `wss://…`.
    case invalidURL(String, reason: String)
    /// The server answered the upgrade request with something other than 101 Switching Protocols.
    case upgradeRefused
    case connectTimedOut(Duration)
    /// Nothing was read for the idle timeout (pings unanswered).
    case idleTimeout(Duration)
    /// The server sent a close frame.
    case closedByServer(code: UInt16?, reason: String)
    case disconnected(String)
    /// ``ReconnectPolicy/maxAttempts`` failures in a row.
    case gaveUp(attempts: Int, lastError: String)

    public var description: String {
        switch self {
        case .invalidURL(let url, let reason): "'\(url)' is not a WebSocket URL: \(reason)"
        case .upgradeRefused: "the server refused the WebSocket upgrade (HTTP status other than 101)"
        case .connectTimedOut(let d): "no WebSocket connection within \(d)"
        case .idleTimeout(let d): "nothing received for \(d) (pings unanswered): the connection is dead"
        case .closedByServer(let code, let reason):
            "closed by the server (code \(code.map(String.init) ?? "none")\(reason.isEmpty ? "" : ": \(reason)"))"
        case .disconnected(let reason): reason
        case .gaveUp(let attempts, let last): "gave up after \(attempts) failed connections in a row; the last: \(last)"
        }
    }
}

/// Where a feed connects: `ws://host[:port][/path][?query]` or `wss://…`.
public struct WebSocketEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var tls: Bool
    public var host: String
    public var port: Int
    /// Path and query, at least "/".
    public var target: String

    public init(url: String) throws(WebSocketFeedError) {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased() else {
            throw .invalidURL(url, reason: "expected ws://host[:port]/path or wss://…")
        }
        switch scheme {
        case "ws": tls = false
        case "wss": tls = true
        default: throw .invalidURL(url, reason: "the scheme must be ws or wss, not \(scheme)")
        }
        guard var host = components.host, !host.isEmpty else { throw .invalidURL(url, reason: "no host") }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        self.host = host
        port = components.port ?? (tls ? 443 : 80)
        guard (1...65535).contains(port) else { throw .invalidURL(url, reason: "port \(port) is out of range") }
        var target = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        if let query = components.percentEncodedQuery { target += "?" + query }
        self.target = target
    }

    /// The Host header: the port only when it is not the scheme's default.
    var hostHeader: String {
        let h = host.contains(":") ? "[\(host)]" : host
        return port == (tls ? 443 : 80) ? h : "\(h):\(port)"
    }

    public var description: String { "\(tls ? "wss" : "ws")://\(hostHeader)\(target)" }
}

/// Exponential backoff with jitter between connection attempts.
public struct ReconnectPolicy: Sendable, Hashable {
    /// The wait after the first failure.
    public var initialDelay: Duration = .milliseconds(500)
    public var maximumDelay: Duration = .seconds(30)
    public var multiplier: Double = 2
    /// Each wait is the exponential value times a random factor in 1 ± jitter, so that many
    /// clients dropped at once do not come back at once.
    public var jitter: Double = 0.25
    /// Give up after this many failures in a row (nil: never). A connection that delivered a
    /// message resets the count.
    public var maxAttempts: Int?

    public init() {}

    /// The wait after `failures` failures in a row (1 for the first).
    public func delay(failures: Int, using random: inout some RandomNumberGenerator) -> Duration {
        let exponent = Double(max(0, failures - 1))
        let base = min(initialDelay.asSeconds * pow(multiplier, exponent), maximumDelay.asSeconds)
        let factor = jitter > 0 ? Double.random(in: (1 - jitter)...(1 + jitter), using: &random) : 1
        return .nanoseconds(Int64((min(base * factor, maximumDelay.asSeconds) * 1e9).rounded()))
    }
}

extension Duration {
    var asTimeAmount: TimeAmount { .nanoseconds(Int64(asSeconds * 1e9)) }
}

/// Shared between a feed's copies and its iterator: the stop flag, the live channel (closed by
/// ``WebSocketFeed/stop()``) and a backoff wait (ended by it).
final class FeedControl: Sendable {
    private struct State {
        var stopped = false
        var channel: (any Channel)?
        var sleeper: (id: UInt64, continuation: CheckedContinuation<Void, Never>)?
        var nextSleeper: UInt64 = 0
    }
    private let state = Mutex(State())

    var isStopped: Bool { state.withLock { $0.stopped } }

    func stop() {
        let (channel, sleeper) = state.withLock { s in
            s.stopped = true
            defer { s.sleeper = nil }
            return (s.channel, s.sleeper?.continuation)
        }
        channel?.close(promise: nil)
        sleeper?.resume()
    }

    /// The connection stop() closes; closed at once when already stopped.
    func register(_ channel: (any Channel)?) {
        let stopped = state.withLock { s in
            s.channel = channel
            return s.stopped
        }
        if stopped { channel?.close(promise: nil) }
    }

    /// Waits for `duration`, or less when stopped or cancelled. Never blocks a thread.
    func sleep(for duration: Duration) async {
        let id = state.withLock { s in
            s.nextSleeper += 1
            return s.nextSleeper
        }
        let wake: @Sendable () -> Void = { [self] in
            let c = state.withLock { s -> CheckedContinuation<Void, Never>? in
                guard s.sleeper?.id == id else { return nil }
                defer { s.sleeper = nil }
                return s.sleeper?.continuation
            }
            c?.resume()
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s -> Bool in
                    if s.stopped { return true }
                    s.sleeper = (id, continuation)
                    return false
                }
                if now { continuation.resume(); return }
                let timer = MultiThreadedEventLoopGroup.singleton.next()
                timer.scheduleTask(in: duration.asTimeAmount) { wake() }
                if Task.isCancelled { wake() }
            }
        } onCancel: {
            wake()
        }
    }
}

final class TimeoutFlag: Sendable {
    let flag = Atomic<Bool>(false)
}

/// One upgraded WebSocket connection: its channel and the back-pressured stream of its messages.
final class WebSocketConnection {
    typealias Messages = NIOThrowingAsyncSequenceProducer<
        WebSocketMessage, any Error, NIOAsyncSequenceProducerBackPressureStrategies.HighLowWatermark, FeedHandler.Delegate>

    let channel: any Channel
    private let messages: Messages.AsyncIterator

    init(channel: any Channel, messages: Messages) {
        self.channel = channel
        self.messages = messages.makeAsyncIterator()
    }

    deinit { channel.close(promise: nil) }

    func next() async throws -> WebSocketMessage? { try await messages.next() }

    /// Clients mask every frame they send (RFC 6455 section 5.3).
    func send(text: String) async throws {
        let frame = WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: ByteBuffer(string: text))
        try await channel.writeAndFlush(frame)
    }

    func close() { channel.close(promise: nil) }

    enum Upgrade: Sendable {
        case upgraded(any Channel, Messages)
        case refused
    }

    /// Connects, upgrades, and sets up the frame handling; fails after `connectTimeout`.
    static func open(_ configuration: WebSocketFeed.Configuration, group: any EventLoopGroup) async throws -> WebSocketConnection {
        let endpoint = configuration.endpoint
        let sslContext = endpoint.tls ? try NIOSSLContext(configuration: configuration.tls) : nil
        let timeout = configuration.connectTimeout
        let timedOut = TimeoutFlag()
        let upgrade: EventLoopFuture<Upgrade> = try await ClientBootstrap(group: group)
            .connectTimeout(timeout.asTimeAmount)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connect(host: endpoint.host, port: endpoint.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let sslContext {
                        // SNI and certificate checks need a name; an IP address literal goes without SNI.
                        let isAddress = (try? SocketAddress(ipAddress: endpoint.host, port: 0)) != nil
                        try channel.pipeline.syncOperations.addHandler(
                            try NIOSSLClientHandler(context: sslContext, serverHostname: isAddress ? nil : endpoint.host))
                    }
                    let upgrader = NIOTypedWebSocketClientUpgrader<Upgrade>(
                        maxFrameSize: configuration.maxMessageSize,
                        upgradePipelineHandler: { channel, _ in
                            channel.eventLoop.makeCompletedFuture {
                                let messages = try FeedHandler.install(on: channel, configuration)
                                return .upgraded(channel, messages)
                            }
                        })
                    var headers = HTTPHeaders()
                    headers.add(name: "Host", value: endpoint.hostHeader)
                    headers.add(name: "User-Agent", value: "pipelinectl")
                    headers.add(name: "Content-Length", value: "0")
                    for (name, value) in configuration.headers { headers.add(name: name, value: value) }
                    let upgradeConfiguration = NIOTypedHTTPClientUpgradeConfiguration<Upgrade>(
                        upgradeRequestHead: HTTPRequestHead(version: .http1_1, method: .GET, uri: endpoint.target, headers: headers),
                        upgraders: [upgrader],
                        notUpgradingCompletionHandler: { channel in
                            channel.close(promise: nil)
                            return channel.eventLoop.makeSucceededFuture(.refused)
                        })
                    let negotiated = try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(
                        configuration: .init(upgradeConfiguration: upgradeConfiguration))
                    // The connect timeout covers TLS and the upgrade too: close a channel still
                    // negotiating when it passes (the negotiation then fails).
                    let timer = channel.eventLoop.scheduleTask(in: timeout.asTimeAmount) {
                        timedOut.flag.store(true, ordering: .relaxed)
                        channel.close(promise: nil)
                    }
                    negotiated.whenComplete { _ in timer.cancel() }
                    return negotiated
                }
            }
        let result: Upgrade
        do { result = try await upgrade.get() } catch {
            // A negotiation cut short by the timer fails with whatever the close caused.
            if timedOut.flag.load(ordering: .relaxed) { throw WebSocketFeedError.connectTimedOut(timeout) }
            throw error
        }
        switch result {
        case .upgraded(let channel, let messages): return WebSocketConnection(channel: channel, messages: messages)
        case .refused: throw WebSocketFeedError.upgradeRefused
        }
    }
}

/// Runs on the connection's event loop after the upgrade: reassembled text and binary messages
/// go to the consumer's stream, pings are answered, close frames are echoed, and the idle
/// events send pings and detect a dead connection.
final class FeedHandler: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// Called by the stream (from the consumer's task): hops to the event loop.
    struct Delegate: NIOAsyncSequenceProducerDelegate {
        let handler: NIOLoopBound<FeedHandler>

        func produceMore() {
            handler.eventLoop.execute { handler.value.produceMore() }
        }

        func didTerminate() {
            handler.eventLoop.execute { handler.value.context?.close(promise: nil) }
        }
    }

    private var source: WebSocketConnection.Messages.Source?
    private var context: ChannelHandlerContext?
    private var producing = true
    private var pendingRead = false
    private var closeSent = false
    /// The first ping sent since the last read: the server has not answered it.
    private var unansweredPingSince: NIODeadline?
    private let idleTimeout: Duration
    private let pingInterval: TimeAmount

    private init(idleTimeout: Duration, pingInterval: Duration) {
        self.idleTimeout = idleTimeout
        self.pingInterval = pingInterval.asTimeAmount
    }

    /// Adds the handlers after the WebSocket codec and returns the message stream.
    static func install(on channel: any Channel, _ configuration: WebSocketFeed.Configuration) throws -> WebSocketConnection.Messages {
        let handler = FeedHandler(idleTimeout: configuration.idleTimeout, pingInterval: configuration.pingInterval)
        let readAhead = max(1, configuration.readAhead)
        let new = WebSocketConnection.Messages.makeSequence(
            elementType: WebSocketMessage.self,
            backPressureStrategy: .init(lowWatermark: readAhead / 2, highWatermark: readAhead),
            finishOnDeinit: false,
            delegate: Delegate(handler: NIOLoopBound(handler, eventLoop: channel.eventLoop)))
        handler.source = new.source
        let pipeline = channel.pipeline.syncOperations
        try pipeline.addHandler(
            IdleStateHandler(readTimeout: configuration.idleTimeout.asTimeAmount, writeTimeout: configuration.pingInterval.asTimeAmount))
        try pipeline.addHandler(
            NIOWebSocketFrameAggregator(
                minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 1 << 16, maxAccumulatedFrameSize: configuration.maxMessageSize))
        try pipeline.addHandler(handler)
        return new.sequence
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        finish(nil)
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        unansweredPingSince = nil
        switch frame.opcode {
        case .text, .binary:
            var data = frame.unmaskedData
            let bytes = data.readBytes(length: data.readableBytes) ?? []
            let message = WebSocketMessage(kind: frame.opcode == .text ? .text : .binary, bytes: bytes)
            switch source?.yield(message) {
            case .stopProducing: producing = false
            case .dropped: context.close(promise: nil)  // nobody reads any more
            case .produceMore, nil: break
            }
        case .ping:
            // Answer with the same payload (RFC 6455 section 5.5.3), masked as every client frame.
            let pong = WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData)
            context.writeAndFlush(wrapOutboundOut(pong), promise: nil)
        case .connectionClose:
            var data = frame.unmaskedData
            let code = data.readInteger(as: UInt16.self)
            let reason = data.readString(length: data.readableBytes) ?? ""
            finish(WebSocketFeedError.closedByServer(code: code, reason: reason))
            sendClose(context: context, code: code.map { WebSocketErrorCode(codeNumber: Int($0)) } ?? .normalClosure)
        default:
            break  // pongs: reading them is what keeps the idle timer quiet
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let idle = event as? IdleStateHandler.IdleStateEvent else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        switch idle {
        case .write:
            ping(context: context)
        case .read:
            // While the consumer is behind we do not read, so silence proves nothing then.
            guard producing else { return }
            // Silence proves the connection dead only once a ping went unanswered for a ping
            // interval. An event loop that stalled (a starved container) fires the write and the
            // read idle events in one turn, before reading what arrived meanwhile: the ping it
            // just sent had no time to be answered, so judge at the next idle period.
            guard let pinged = unansweredPingSince else { return ping(context: context) }
            guard NIODeadline.now() - pinged >= pingInterval else { return }
            finish(WebSocketFeedError.idleTimeout(idleTimeout))
            context.close(promise: nil)
        case .all:
            break
        }
    }

    private func ping(context: ChannelHandlerContext) {
        let ping = WebSocketFrame(fin: true, opcode: .ping, maskKey: .random(), data: ByteBuffer(string: "pipelinectl"))
        context.writeAndFlush(wrapOutboundOut(ping), promise: nil)
        if unansweredPingSince == nil { unansweredPingSince = .now() }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        finish(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish(nil)
        context.fireChannelInactive()
    }

    func read(context: ChannelHandlerContext) {
        if producing { context.read() } else { pendingRead = true }
    }

    private func produceMore() {
        producing = true
        if pendingRead, let context {
            pendingRead = false
            context.read()
        }
    }

    /// Ends the stream once: messages already yielded are still read, then the error (or the end).
    private func finish(_ error: (any Error)?) {
        guard let source else { return }
        self.source = nil
        if let error { source.finish(error) } else { source.finish() }
    }

    private func sendClose(context: ChannelHandlerContext, code: WebSocketErrorCode) {
        guard !closeSent else { return }
        closeSent = true
        var data = context.channel.allocator.buffer(capacity: 2)
        data.write(webSocketErrorCode: code)
        let frame = WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: data)
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(frame)).whenComplete { _ in loopBound.value.close(promise: nil) }
    }
}
