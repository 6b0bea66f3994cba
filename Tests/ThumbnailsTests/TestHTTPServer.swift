// A tiny HTTP/1.1 server on 127.0.0.1, port 0, for fetch tests. Each path has a script of
// responses (the last one repeats) and the server counts the requests it received, so tests
// can assert "no retry" and "exactly one retry" from what the server saw.
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

struct ScriptedResponse: Sendable {
    var status: HTTPResponseStatus
    var headers: [(String, String)] = []
    var body: [UInt8] = []
    /// Send the body in chunks without Content-Length (chunked encoding).
    var chunked = false
    /// Never answer (to exercise the client's read timeout).
    var hang = false
    /// Send the body one byte per interval (a body that never goes silent long enough for a
    /// read timeout, yet never ends in time).
    var trickle: Duration?

    static func ok(_ body: [UInt8], contentType: String = "image/png") -> Self {
        ScriptedResponse(status: .ok, headers: [("Content-Type", contentType)], body: body)
    }

    static func redirect(to location: String) -> Self {
        ScriptedResponse(status: .found, headers: [("Location", location)])
    }
}

final class TestHTTPServer: Sendable {
    /// Routes and request counts, shared by every connection's handler.
    final class State: Sendable {
        let routes: Mutex<[String: [ScriptedResponse]]>
        let counts = Mutex<[String: Int]>([:])

        init(routes: [String: [ScriptedResponse]]) {
            self.routes = Mutex(routes)
        }

        func respond(_ path: String) -> ScriptedResponse {
            let seen = counts.withLock { counts -> Int in
                counts[path, default: 0] += 1
                return counts[path]!
            }
            return routes.withLock { routes in
                guard let script = routes[path], !script.isEmpty else { return ScriptedResponse(status: .notFound) }
                return script[min(seen, script.count) - 1]
            }
        }
    }

    private let state: State
    private let channel: any Channel
    let port: Int

    init(routes: [String: [ScriptedResponse]]) async throws {
        let state = State(routes: routes)
        self.state = state
        self.channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(Handler(respond: state.respond))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        self.port = channel.localAddress!.port!
    }

    var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Requests the server has received for `path`.
    func requests(to path: String) -> Int { state.counts.withLock { $0[path, default: 0] } }

    func close() async throws { try await channel.close() }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        let respond: @Sendable (String) -> ScriptedResponse
        var path = "/"

        init(respond: @escaping @Sendable (String) -> ScriptedResponse) {
            self.respond = respond
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case let .head(head):
                path = head.uri
            case .body:
                break
            case .end:
                let response = respond(path)
                if response.hang { return }
                var headers = HTTPHeaders(response.headers)
                if response.chunked {
                    headers.add(name: "Transfer-Encoding", value: "chunked")
                } else {
                    headers.add(name: "Content-Length", value: "\(response.body.count)")
                }
                headers.add(name: "Connection", value: "close")
                if let interval = response.trickle {
                    context.writeAndFlush(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: response.status, headers: headers))), promise: nil)
                    let channel = context.channel, body = response.body
                    var sent = 0
                    channel.eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: TimeAmount.nanoseconds(Int64(interval.components.seconds) * 1_000_000_000 + interval.components.attoseconds / 1_000_000_000)) { task in
                        guard channel.isActive, sent < body.count else {
                            task.cancel()
                            channel.writeAndFlush(HTTPServerResponsePart.end(nil)).whenComplete { _ in channel.close(promise: nil) }
                            return
                        }
                        channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(channel.allocator.buffer(bytes: body[sent..<(sent + 1)]))), promise: nil)
                        sent += 1
                    }
                    return
                }
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: response.status, headers: headers))), promise: nil)
                if !response.body.isEmpty {
                    let chunkSize = response.chunked ? 16 * 1024 : response.body.count
                    var offset = 0
                    while offset < response.body.count {
                        let end = min(offset + chunkSize, response.body.count)
                        let buffer = context.channel.allocator.buffer(bytes: response.body[offset..<end])
                        context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
                        offset = end
                    }
                }
                let channel = context.channel
                context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
            }
        }
    }
}
