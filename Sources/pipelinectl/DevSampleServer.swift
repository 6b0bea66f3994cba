import Foundation
import Hummingbird
import Logging
import NIOCore
import Operations
import Producers
import ServiceLifecycle
import Thumbnails
import Workers

/// `pipelinectl dev`'s stand-in for the apps' upstreams, on 127.0.0.1:8089:
/// - the images the samples reference (`/images/<name>`, `/static-file/<name>`; names in
///   `samples/images.txt`), each a generated PNG (a gradient tinted by its name, 480x360), so
///   the thumbnail worker fetches real images over real HTTP;
/// - the upstream list APIs the pollers read, in their own formats and paging, with the items
///   the samples list (``DevCatalogue``): `/upstream/campaigns` (Bigwalk's bare array),
///   `/upstream/products?page_no&items_per_page` (the open market, new era),
///   `/upstream/hangout/list/<page>` (Bappy), `/upstream/challenges/notstarted?lastId&pageSize`
///   (iGoMoney). Every list answer has an ETag; If-None-Match with it gets 304.
/// Any other path is a 404. The request target alone decides the answer, whatever the method.
final class DevSampleServer: Sendable {
    static let port = 8089
    static let base = "http://127.0.0.1:\(port)"
    let names: Set<String>
    let catalogue: DevCatalogue
    private let group: ServiceGroup
    private let run: Task<Void, any Error>

    /// Returns once the server is listening.
    init(imageList: String, catalogue: DevCatalogue) async throws {
        let text = (try? String(contentsOfFile: imageList, encoding: .utf8)) ?? ""
        let names = Set(text.split(whereSeparator: \.isNewline).map(String.init).filter { !$0.isEmpty })
        self.names = names
        self.catalogue = catalogue
        var logger = Logger(label: "dev-sample-server")
        logger.logLevel = .warning  // dev says itself where the server is
        // Nil once listening, or why the server stopped before.
        let (started, starting) = AsyncStream.makeStream(of: (any Error)?.self)
        let app = Application(
            responder: SampleResponder(names: names, catalogue: catalogue),
            configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: Self.port), serverName: nil),
            onServerRunning: { _ in starting.yield(nil) },
            logger: logger)
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [app], logger: logger))
        let run = Task {
            do {
                try await group.run()
                starting.yield(DevSampleServerError(description: "the server stopped before it was listening"))
            } catch {
                starting.yield(error)
                throw error
            }
        }
        var first = started.makeAsyncIterator()
        if case .some(.some(let error)) = await first.next() {
            throw DevSampleServerError(
                description: "cannot serve the samples on 127.0.0.1:\(Self.port) (the samples' image URLs point there): \(error)")
        }
        self.group = group
        self.run = run
    }

    /// The list URL a poller of `source` reads here.
    static func listURL(_ source: PollSource) -> String {
        switch source {
        case .campaigns: "\(base)/upstream/campaigns"
        case .products: "\(base)/upstream/products"
        case .hangouts: "\(base)/upstream/hangout/list/{page}?hangoutSort=Newest"
        case .challenges: "\(base)/upstream/challenges/notstarted?categoryId=-1&targetAmount=-1"
        }
    }

    /// Stops listening and closes the connections once their answers are written.
    func close() async {
        await group.triggerGracefulShutdown()
        try? await run.value
    }

    struct DevSampleServerError: Error, CustomStringConvertible { var description: String }

    private struct SampleResponder: HTTPResponder {
        let names: Set<String>
        let catalogue: DevCatalogue

        func respond(to request: Request, context: BasicRequestContext) async throws -> Response {
            let target = request.head.path ?? "/"
            var headers = HTTPFields()
            if target.hasPrefix("/upstream/") {
                switch catalogue.page(uri: target) {
                case .none:
                    return Response(status: .notFound)
                case .some(.failure(let refusal)):
                    headers[.contentType] = "application/json"
                    let body = #"{"status":400,"error":"Bad Request","message":"\#(refusal.message)"}"#
                    return Response(status: .badRequest, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: body)))
                case .some(.success(let page)):
                    let etag = "\"\(ContentHash.hex(ContentHash.of(page)))\""
                    headers[.eTag] = etag
                    if request.headers[.ifNoneMatch] == etag { return Response(status: .notModified, headers: headers) }
                    headers[.contentType] = "application/json"
                    return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: page)))
                }
            }
            // /images/<name> (products, spending proofs) and /static-file/<name> (the meetup app's images).
            let name =
                target.hasPrefix("/images/") ? String(target.dropFirst("/images/".count))
                : target.hasPrefix("/static-file/") ? String(target.dropFirst("/static-file/".count)) : ""
            guard names.contains(name) else { return Response(status: .notFound) }
            headers[.contentType] = "image/png"
            return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: SampleImage.png(named: name))))
        }
    }
}

/// What the samples list, per upstream list API: the items of the list responses in the
/// sample streams (campaign arrays, product pages, hangout lists, `ChallengeResponse`
/// objects), the last version of each key, in the order keys first appear.
struct DevCatalogue: Sendable {
    var items: [PollSource: [[UInt8]]] = [:]

    static func load(samples: String) -> DevCatalogue {
        var catalogue = DevCatalogue()
        let fm = FileManager.default
        for source in PollSource.allCases {
            let dir = (samples as NSString).appendingPathComponent(source.stream.rawValue)
            let files = ((try? fm.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.hasSuffix(".jsonl") }.sorted()
            var order: [String] = []
            var latest: [String: [UInt8]] = [:]
            for file in files {
                guard let data = fm.contents(atPath: (dir as NSString).appendingPathComponent(file)) else { continue }
                for line in Array(data).split(separator: 0x0A) {
                    guard let value = JSONLinesRunner.parseLine(Array(line), topic: "", offset: 0).value.map(Array.init) else { continue }
                    for item in listed(value, source: source) {
                        guard let object = (try? JSONSerialization.jsonObject(with: Data(item))) as? [String: Any],
                            let key = source.stream.entityKey(object)
                        else { continue }
                        if source == .challenges, object["leaderId"] == nil { continue }  // a spending record, not a challenge
                        if latest.updateValue(item, forKey: key) == nil { order.append(key) }
                    }
                }
            }
            catalogue.items[source] = order.map { latest[$0]! }
        }
        return catalogue
    }

    /// The items a sample value lists for `source`.
    private static func listed(_ value: [UInt8], source: PollSource) -> [[UInt8]] {
        let path: [String] = switch source {
        case .campaigns, .challenges: []
        case .products: ["pages"]
        case .hangouts: ["data", "HangoutList"]
        }
        if let ranges = try? JSONElements.ranges(in: value, at: path) { return ranges.map { Array(value[$0]) } }
        // iGoMoney answers single challenges as bare objects.
        if source == .challenges, value.first == UInt8(ascii: "{") { return [value] }
        return []
    }

    /// A parameter the real server would refuse (Spring answers 400 for a number it cannot read).
    struct Refusal: Error {
        var message: String
    }

    /// The body of a list request, in its upstream's format and paged as its server pages
    /// (`../shared/docs/formats.md`; the servers' code where it is public), a refusal where the
    /// server refuses, or nil for an unknown path.
    func page(uri: String) -> Result<[UInt8], Refusal>? {
        guard let components = URLComponents(string: uri) else { return nil }
        // Spring reads an empty value as a missing one (the parameter's default).
        let query = Dictionary(
            (components.queryItems ?? []).compactMap { item in item.value.flatMap { $0.isEmpty ? nil : (item.name, $0) } },
            uniquingKeysWith: { a, _ in a })
        let path = components.path
        func join(_ items: some Sequence<[UInt8]>) -> String { items.map { String(decoding: $0, as: UTF8.self) }.joined(separator: ",") }
        /// An integer parameter: its default when missing, a refusal when not a number or below `minimum`.
        func number(_ name: String, default value: Int, minimum: Int) -> Result<Int, Refusal> {
            guard let text = query[name] else { return .success(value) }
            guard let n = Int(text) else { return .failure(Refusal(message: "Failed to convert '\(name)' with value '\(text)' to a number")) }
            guard n >= minimum else { return .failure(Refusal(message: "'\(name)' must be at least \(minimum), got \(n)")) }
            return .success(n)
        }
        if path == "/upstream/campaigns" {
            // Bigwalk: `page` from 0 and `size` (the Android app asks for 20), a bare array.
            return number("page", default: 0, minimum: 0).flatMap { page in
                number("size", default: 20, minimum: 1).map { size in
                    Array("[\(join((items[.campaigns] ?? []).dropFirst(page * size).prefix(size)))]".utf8)
                }
            }
        }
        if path == "/upstream/products" {
            let all = items[.products] ?? []
            return number("items_per_page", default: 20, minimum: 1).flatMap { size in
                number("page_no", default: 1, minimum: 1).map { number in
                    let last = max(1, (all.count + size - 1) / size)
                    let slice = all.dropFirst((number - 1) * size).prefix(size)
                    return Array(#"{"pageNo":\#(number),"itemsPerPage":\#(size),"totalCount":\#(all.count),"offset":\#((number - 1) * size),"limit":\#(size),"lastPage":\#(last),"hasNext":\#(number < last),"hasPrev":\#(number > 1),"pages":[\#(join(slice))]}"#.utf8)
                }
            }
        }
        if path.hasPrefix("/upstream/hangout/list/") {
            // Bappy: the page number from 0 in the path, ten a page.
            guard let number = Int(path.dropFirst("/upstream/hangout/list/".count)), number >= 0 else {
                return .failure(Refusal(message: "the page number must be a number from 0"))
            }
            let all = items[.hangouts] ?? []
            let size = 10
            let slice = all.dropFirst(number * size).prefix(size)
            return .success(Array(#"{"status":"OK","message":"success","data":{"HangoutList":[\#(join(slice))],"pageInfo":{"totalCount":\#(all.count),"currentCount":\#(slice.count)}}}"#.utf8))
        }
        if path == "/upstream/challenges/notstarted" {
            // As IgoMoney_BE's ChallengeController: `lastId` optional with default 10 and
            // `pageSize` with default 10 (missing or empty), `id < lastId`, newest first.
            let all = (items[.challenges] ?? []).compactMap { item -> (Int, [UInt8])? in
                guard let object = (try? JSONSerialization.jsonObject(with: Data(item))) as? [String: Any], let id = (object["id"] as? NSNumber)?.intValue else { return nil }
                return (id, item)
            }.sorted { $0.0 > $1.0 }
            return number("pageSize", default: 10, minimum: 1).flatMap { size in
                number("lastId", default: 10, minimum: Int.min).map { lastID in
                    Array("[\(join(all.filter { $0.0 < lastID }.prefix(size).map(\.1)))]".utf8)
                }
            }
        }
        return nil
    }
}

/// A generated sample image: a gradient tinted by the name.
enum SampleImage {
    static func png(named name: String, width: Int = 480, height: Int = 360) -> [UInt8] {
        var hash: UInt32 = 2_166_136_261
        for b in name.utf8 { hash = (hash ^ UInt32(b)) &* 16_777_619 }
        let tint = (UInt8(truncatingIfNeeded: hash), UInt8(truncatingIfNeeded: hash >> 8), UInt8(truncatingIfNeeded: hash >> 16))
        var raw: [UInt8] = []
        raw.reserveCapacity((width * 3 + 1) * height)
        for y in 0..<height {
            raw.append(0)
            for x in 0..<width {
                raw.append(UInt8(truncatingIfNeeded: Int(tint.0) / 2 + x * 127 / width))
                raw.append(UInt8(truncatingIfNeeded: Int(tint.1) / 2 + y * 127 / height))
                raw.append(UInt8(truncatingIfNeeded: Int(tint.2) / 2 + (x + y) * 127 / (width + height)))
            }
        }
        return StoredPNG.encode(width: width, height: height, raw: raw)
    }
}
