// An upstream list API for the poller tests: a TestHTTPServer whose handler serves the open
// market's product list (new era, `page_no` / `items_per_page`) from a catalogue the test
// changes. ETag and If-None-Match as a real server does them (304 when the page is the same),
// and faults the test queues per page: a status, a malformed body, or no answer at all. A new
// catalogue takes effect at the next request for page 1, so that one poll never reads two
// versions.
import HTTPTesting
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

    static let path = "/api/products"
    private let store: Store
    private let server: TestHTTPServer

    /// `catalogue`: the products' JSON objects, in listing order.
    init(catalogue: [String]) async throws {
        let store = Store(State(catalogue: catalogue))
        self.store = store
        self.server = try await TestHTTPServer(handlers: [Self.path: { FakeUpstream.respond(store, $0) }])
    }

    var url: String { server.baseURL + Self.path }

    /// The next request for page 1 starts serving `catalogue`.
    func publish(_ catalogue: [String]) { store.state.withLock { $0.pending = catalogue } }

    /// The next requests for `page` get these faults, one each, before the catalogue again.
    func inject(_ faults: [Fault], page: Int) { store.state.withLock { $0.faults[page, default: []] += faults } }

    var requests: [Request] { store.state.withLock { $0.requests } }

    func close() async throws { try await server.close() }

    private static func respond(_ store: Store, _ request: RecordedRequest) -> ScriptedResponse {
        let page = request.query("page_no").flatMap(Int.init) ?? 1
        let size = request.query("items_per_page").flatMap(Int.init) ?? 20
        // Refused like a server refuses a page number or size it cannot use (never a crash here).
        guard page >= 1, size >= 1 else { return .json(#"{"error":"page_no and items_per_page must be at least 1"}"#, status: .badRequest) }
        let ifNoneMatch = request.header("If-None-Match")
        return store.state.withLock { s -> ScriptedResponse in
            s.requests.append(Request(page: page, ifNoneMatch: ifNoneMatch))
            if page == 1, let next = s.pending {
                s.catalogue = next
                s.pending = nil
            }
            if var queued = s.faults[page], !queued.isEmpty {
                let fault = queued.removeFirst()
                s.faults[page] = queued
                switch fault {
                case .status(let code): return ScriptedResponse(status: .init(code: code), body: Array(#"{"error":"injected"}"#.utf8))
                case .body(let text): return .json(text)
                case .hang: return .hang
                }
            }
            let total = s.catalogue.count
            let last = max(1, (total + size - 1) / size)
            let items = s.catalogue.dropFirst((page - 1) * size).prefix(size)
            let body = #"{"pageNo":\#(page),"itemsPerPage":\#(size),"totalCount":\#(total),"offset":\#((page - 1) * size),"limit":\#(size),"lastPage":\#(last),"hasNext":\#(page < last),"hasPrev":\#(page > 1),"pages":[\#(items.joined(separator: ","))]}"#
            let etag = "\"\(String(body.hashValue, radix: 16))\""
            if ifNoneMatch == etag { return ScriptedResponse(status: .notModified, headers: [.eTag: etag]) }
            return .json(body, headers: [.eTag: etag])
        }
    }
}
