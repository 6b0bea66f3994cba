// An upstream list API for the poller tests: a real HTTP/1.1 server on 127.0.0.1, port 0,
// serving the open market's product list (new era, `page_no` / `items_per_page`) from a
// catalogue the test changes. ETag and If-None-Match as a real server does them (304 when the
// page is the same), and faults the test queues per page: a status, a malformed body, or no
// answer at all. A new catalogue takes effect at the next request for page 1, so that one poll
// never reads two versions.
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

final class FakeUpstream: Sendable {
    enum Fault: Sendable {
        case status(Int)
        case body(String)
        case hang
    }

    struct Request: Sendable {
        var page: Int
        var ifNoneMatch: String?
    }

    private struct State {
        var catalogue: [String]
        var pending: [String]?
        var faults: [Int: [Fault]] = [:]
        var requests: [Request] = []
    }

    private final class Store: Sendable {
        let state: Mutex<State>
        init(_ state: State) { self.state = Mutex(state) }
    }

    private let store: Store
    private let channel: any Channel
    let port: Int

    /// `catalogue`: the products' JSON objects, in listing order.
    init(catalogue: [String]) async throws {
        let store = Store(State(catalogue: catalogue))
        self.store = store
        let respond: @Sendable (String, String?) -> (Int, [(String, String)], String)? = { uri, ifNoneMatch in
            FakeUpstream.respond(store, uri: uri, ifNoneMatch: ifNoneMatch)
        }
        self.channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(Handler(respond: respond))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        self.port = channel.localAddress!.port!
    }

    var url: String { "http://127.0.0.1:\(port)/api/products" }

    /// The next request for page 1 starts serving `catalogue`.
    func publish(_ catalogue: [String]) { store.state.withLock { $0.pending = catalogue } }

    /// The next requests for `page` get these faults, one each, before the catalogue again.
    func inject(_ faults: [Fault], page: Int) { store.state.withLock { $0.faults[page, default: []] += faults } }

    var requests: [Request] { store.state.withLock { $0.requests } }

    func close() async throws { try await channel.close() }

    private static func respond(_ store: Store, uri: String, ifNoneMatch: String?) -> (Int, [(String, String)], String)? {
        let query = URLComponents(string: uri)?.queryItems ?? []
        let page = query.first { $0.name == "page_no" }?.value.flatMap(Int.init) ?? 1
        let size = query.first { $0.name == "items_per_page" }?.value.flatMap(Int.init) ?? 20
        // Refused like a server refuses a page number or size it cannot use (never a crash here).
        guard page >= 1, size >= 1 else { return (400, [("Content-Type", "application/json")], #"{"error":"page_no and items_per_page must be at least 1"}"#) }
        return store.state.withLock { s -> (Int, [(String, String)], String)? in
            s.requests.append(Request(page: page, ifNoneMatch: ifNoneMatch))
            if page == 1, let next = s.pending {
                s.catalogue = next
                s.pending = nil
            }
            if var queued = s.faults[page], !queued.isEmpty {
                let fault = queued.removeFirst()
                s.faults[page] = queued
                switch fault {
                case .status(let code): return (code, [], #"{"error":"injected"}"#)
                case .body(let text): return (200, [("Content-Type", "application/json")], text)
                case .hang: return nil
                }
            }
            let total = s.catalogue.count
            let last = max(1, (total + size - 1) / size)
            let items = s.catalogue.dropFirst((page - 1) * size).prefix(size)
            let body = #"{"pageNo":\#(page),"itemsPerPage":\#(size),"totalCount":\#(total),"offset":\#((page - 1) * size),"limit":\#(size),"lastPage":\#(last),"hasNext":\#(page < last),"hasPrev":\#(page > 1),"pages":[\#(items.joined(separator: ","))]}"#
            let etag = "\"\(String(body.hashValue, radix: 16))\""
            if ifNoneMatch == etag { return (304, [("ETag", etag)], "") }
            return (200, [("Content-Type", "application/json"), ("ETag", etag)], body)
        }
    }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        let respond: @Sendable (String, String?) -> (Int, [(String, String)], String)?
        var head: HTTPRequestHead?

        init(respond: @escaping @Sendable (String, String?) -> (Int, [(String, String)], String)?) {
            self.respond = respond
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let h):
                head = h
            case .body:
                break
            case .end:
                guard let head, let (status, fields, body) = respond(head.uri, head.headers.first(name: "If-None-Match")) else { return }
                var headers = HTTPHeaders(fields)
                headers.add(name: "Content-Length", value: "\(body.utf8.count)")
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: status), headers: headers))), promise: nil)
                if !body.isEmpty {
                    context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: body)))), promise: nil)
                }
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }
}
