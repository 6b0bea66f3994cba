import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import Synchronization

/// A WebSocket server on 127.0.0.1 and a free port, for tests. Every connection runs the
/// handler with a ``WebSocketTestPeer``; when the handler returns the TCP connection is closed
/// without a close frame (a dropped connection, as the client sees it).
///
/// On NIO, not hummingbird-websocket (the HTTP test server is on Hummingbird): its handlers
/// see data frames only. WSCore's inbound stream answers every ping with a pong and consumes
/// pongs and close frames itself, and frames reach the handler unmasked, so a test could not
/// script a server that reads the client's pings without answering them, check that they are
/// masked, read the payload of the pong to its own ping, or read the code the client echoes
/// in its close frame; and when a handler returns, WSCore sends a close frame and waits for
/// the handshake, so a drop without a close frame cannot be scripted either (short of closing
/// the raw channel behind WSCore's back).
public final class WebSocketTestServer: Sendable {
    public let port: Int
    private let serverTask: Task<Void, Never>
    private let targets: Targets

    final class Targets: Sendable {
        let list = Mutex<[String]>([])
        let connections = Atomic<Int>(0)
    }

    /// The URL of `path` on this server.
    public func url(_ path: String = "/websocket/v1") -> String { "ws://127.0.0.1:\(port)\(path)" }

    /// The request targets (path and query) of the upgrades so far, in order.
    public var requestTargets: [String] { targets.list.withLock { $0 } }

    private init(port: Int, serverTask: Task<Void, Never>, targets: Targets) {
        self.port = port
        self.serverTask = serverTask
        self.targets = targets
    }

    enum Upgrade: Sendable {
        case websocket(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>)
        case notUpgraded
    }

    /// Starts listening; `handler` gets each connection, numbered from 1.
    public static func start(
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        handler: @escaping @Sendable (WebSocketTestPeer) async throws -> Void
    ) async throws -> WebSocketTestServer {
        let targets = Targets()
        let server: NIOAsyncChannel<EventLoopFuture<Upgrade>, Never> = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: 0) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let upgrader = NIOTypedWebSocketServerUpgrader<Upgrade>(
                        shouldUpgrade: { channel, head in
                            targets.list.withLock { $0.append(head.uri) }
                            return channel.eventLoop.makeSucceededFuture(HTTPHeaders())
                        },
                        upgradePipelineHandler: { channel, _ in
                            channel.eventLoop.makeCompletedFuture {
                                .websocket(try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(wrappingChannelSynchronously: channel))
                            }
                        })
                    return try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(
                        configuration: .init(upgradeConfiguration: .init(
                            upgraders: [upgrader],
                            notUpgradingCompletionHandler: { channel in
                                channel.close(promise: nil)
                                return channel.eventLoop.makeSucceededFuture(.notUpgraded)
                            })))
                }
            }
        let port = server.channel.localAddress?.port ?? 0
        let task = Task<Void, Never> {
            _ = try? await withThrowingDiscardingTaskGroup { group in
                try await server.executeThenClose { inbound in
                    for try await upgrade in inbound {
                        group.addTask {
                            guard case .websocket(let channel) = try? await upgrade.get() else { return }
                            let number = targets.connections.add(1, ordering: .relaxed).newValue
                            try? await channel.executeThenClose { inbound, outbound in
                                let peer = WebSocketTestPeer(number: number, inbound: inbound.makeAsyncIterator(), outbound: outbound)
                                try await handler(peer)
                            }
                        }
                    }
                }
            }
        }
        return WebSocketTestServer(port: port, serverTask: task, targets: targets)
    }

    /// Stops listening and ends every connection (their handlers are cancelled).
    public func close() async {
        serverTask.cancel()
        await serverTask.value
    }
}

/// One client connection, seen from the server.
public final class WebSocketTestPeer {
    /// 1 for the first connection to the server, 2 for the next…
    public let number: Int
    private var inbound: NIOAsyncChannelInboundStream<WebSocketFrame>.AsyncIterator
    private let outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>

    init(number: Int, inbound: NIOAsyncChannelInboundStream<WebSocketFrame>.AsyncIterator, outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>) {
        self.number = number
        self.inbound = inbound
        self.outbound = outbound
    }

    /// The next frame from the client (unmasked), or nil when it closed the connection.
    public func receive() async throws -> WebSocketFrame? {
        guard let frame = try await inbound.next() else { return nil }
        return WebSocketFrame(fin: frame.fin, opcode: frame.opcode, data: frame.unmaskedData)
    }

    /// Whether the client's frames are masked, as RFC 6455 requires (checked on the next frame).
    public func receiveChecked() async throws -> (frame: WebSocketFrame, masked: Bool)? {
        guard let frame = try await inbound.next() else { return nil }
        return (WebSocketFrame(fin: frame.fin, opcode: frame.opcode, data: frame.unmaskedData), frame.maskKey != nil)
    }

    /// The next text message, skipping pings (answered) and pongs; nil when the client closed.
    public func receiveText() async throws -> String? {
        while let frame = try await receive() {
            switch frame.opcode {
            case .text: return String(buffer: frame.data)
            case .ping: try await outbound.write(WebSocketFrame(fin: true, opcode: .pong, data: frame.data))
            case .connectionClose: return nil
            default: continue
            }
        }
        return nil
    }

    public func send(text: String) async throws {
        try await outbound.write(WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: text)))
    }

    public func send(binary bytes: [UInt8]) async throws {
        try await outbound.write(WebSocketFrame(fin: true, opcode: .binary, data: ByteBuffer(bytes: bytes)))
    }

    /// Sends `bytes` as a message split into `parts` fragments (a first frame and continuations).
    public func sendFragmented(_ opcode: WebSocketOpcode, _ bytes: [UInt8], parts: Int) async throws {
        let size = max(1, (bytes.count + parts - 1) / parts)
        var chunks = stride(from: 0, to: bytes.count, by: size).map { Array(bytes[$0..<min($0 + size, bytes.count)]) }
        if chunks.isEmpty { chunks = [[]] }
        for (i, chunk) in chunks.enumerated() {
            try await outbound.write(WebSocketFrame(fin: i == chunks.count - 1, opcode: i == 0 ? opcode : .continuation, data: ByteBuffer(bytes: chunk)))
        }
    }

    /// Sends a ping and waits for its pong, returning the pong's payload (nil: the client closed).
    /// Text and binary frames the client sends meanwhile are returned in `skipped`.
    public func ping(_ payload: String) async throws -> (pong: String?, skipped: [WebSocketFrame]) {
        try await outbound.write(WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer(string: payload)))
        var skipped: [WebSocketFrame] = []
        while let frame = try await receive() {
            switch frame.opcode {
            case .pong: return (String(buffer: frame.data), skipped)
            case .connectionClose: return (nil, skipped)
            default: skipped.append(frame)
            }
        }
        return (nil, skipped)
    }

    /// Sends a close frame with `code` (the client should answer with one).
    public func sendClose(code: UInt16, reason: String = "") async throws {
        var data = ByteBuffer()
        data.writeInteger(code)
        data.writeString(reason)
        try await outbound.write(WebSocketFrame(fin: true, opcode: .connectionClose, data: data))
    }

    /// Reads until the client closes the connection or sends a close frame.
    public func waitForClose() async throws {
        while let frame = try await receive() {
            if frame.opcode == .connectionClose { return }
            if frame.opcode == .ping { try await outbound.write(WebSocketFrame(fin: true, opcode: .pong, data: frame.data)) }
        }
    }
}
