import Foundation
import Operations
import Workers

/// The upstream list APIs `pipelinectl ingest poll` reads, and how each one pages
/// (`../shared/docs/formats.md`). Pure: a page's bytes and the request in, items and the next
/// request out.
public enum PollSource: String, Sendable, CaseIterable {
    /// Bigwalk's campaign list (`/api/campaigns/category/{id}/story`): a bare JSON array,
    /// paged by `page` (from 0) and `size`; the next page while a page is full.
    case campaigns
    /// The open market's product list, either era: `{"pageNo"|"page_no", "hasNext"|"has_next",
    /// "lastPage"|"last_page", "pages": [products]}`; the next page is `page_no=N+1`.
    case products
    /// Bappy's hangout list: `{"status","message","data":{"HangoutList":[…],"pageInfo":{"totalCount",…}}}`;
    /// pages are numbered from 0 in the path (`{page}` in the URL) until `totalCount` is reached.
    case hangouts
    /// iGoMoney's `challenges/notstarted`: a bare array of `id < lastId`, newest first; the first
    /// page asks for `lastId` = 2^63-1 (the server's default is 10), the next `lastId=<last id>`
    /// while a page is full (`pageSize`).
    case challenges

    /// The stream (and so the input topic and the key) the items belong to.
    public var stream: UpstreamStream {
        switch self {
        case .campaigns: .campaigns
        case .products: .products
        case .hangouts: .hangouts
        case .challenges: .challenges
        }
    }

    /// Where the items are in a page.
    var itemsPath: [String] {
        switch self {
        case .campaigns, .challenges: []
        case .products: ["pages"]
        case .hangouts: ["data", "HangoutList"]
        }
    }

    /// The first page's request for the configured `url`: `{page}` becomes 0 for hangouts;
    /// products get `page_no=1` and `items_per_page`, challenges `pageSize` and `lastId` above
    /// every id, unless the URL sets them.
    public func firstPage(url: String, pageSize: Int) throws(PageError) -> PageRequest {
        let marker = Self.pageMarker
        guard var components = URLComponents(string: url.replacingOccurrences(of: "{page}", with: marker)),
            let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https", components.host?.isEmpty == false
        else {
            throw PageError(url: url, reason: "not an http(s) URL")
        }
        switch self {
        case .campaigns:
            components.setQueryDefault("page", "0")
            components.setQueryDefault("size", String(pageSize))
        case .products:
            components.setQueryDefault("page_no", "1")
            components.setQueryDefault("items_per_page", String(pageSize))
        case .hangouts:
            break
        case .challenges:
            components.setQueryDefault("pageSize", String(pageSize))
            // The server's `lastId` defaults to 10 (`@RequestParam(defaultValue = "10")`) and it
            // lists `id < lastId`: a first page without it would list only ids below 10.
            components.setQueryDefault("lastId", String(Int64.max))
        }
        guard let text = components.string?.replacingOccurrences(of: marker, with: "{page}") else {
            throw PageError(url: url, reason: "cannot build the page URL")
        }
        return PageRequest(template: text, number: 0, itemsBefore: 0)
    }
}

/// One page to fetch: the URL template (`{page}` is replaced by the page number) and how many
/// items the pages before it listed.
public struct PageRequest: Sendable, Hashable {
    public var template: String
    /// 0 for the first page of a poll.
    public var number: Int
    public var itemsBefore: Int

    public var url: String { template.replacingOccurrences(of: "{page}", with: String(number)) }
}

/// One listed item: its key (as `produce` keys the stream), its exact bytes and their hash.
public struct ListItem: Sendable, Hashable {
    public var key: String
    public var value: [UInt8]
    public var hash: UInt64

    public init(key: String, value: [UInt8]) {
        self.key = key
        self.value = value
        self.hash = ContentHash.of(value)
    }
}

/// A parsed page: its items and the page after it (nil: the listing is complete).
public struct ListPage: Sendable {
    public var items: [ListItem]
    /// Listed items without a key (counted, not produced: nothing to detect a change by).
    public var unkeyed: Int
    public var next: PageRequest?
}

/// A page that does not parse as its API's list format, with the URL and why.
public struct PageError: Error, Sendable, Hashable, CustomStringConvertible {
    public var url: String
    public var reason: String

    public init(url: String, reason: String) {
        self.url = url
        self.reason = reason
    }

    public var description: String { "\(url): \(reason)" }
}

extension PollSource {
    /// Reads one page fetched for `request`.
    public func parse(_ bytes: [UInt8], request: PageRequest) throws(PageError) -> ListPage {
        let url = request.url
        let found: [Range<Int>]?
        do {
            found = try JSONElements.ranges(in: bytes, at: itemsPath)
        } catch {
            throw PageError(url: url, reason: "not valid JSON (\(error.detail))")
        }
        guard let ranges = found else {
            throw PageError(url: url, reason: itemsPath.isEmpty
                ? "expected a JSON array of \(rawValue)"
                : "no array at \(itemsPath.joined(separator: ".")) (expected \(formatName))")
        }
        var page = ListPage(items: [], unkeyed: 0, next: nil)
        page.items.reserveCapacity(ranges.count)
        for range in ranges {
            let value = Array(bytes[range])
            guard let object = (try? JSONSerialization.jsonObject(with: Data(value))) as? [String: Any],
                let key = stream.entityKey(object)
            else {
                page.unkeyed += 1
                continue
            }
            page.items.append(ListItem(key: key, value: value))
        }
        page.next = try next(after: request, bytes: bytes, listed: ranges.count, lastItem: ranges.last.map { Array(bytes[$0]) })
        return page
    }

    private var formatName: String {
        switch self {
        case .campaigns: "Bigwalk's campaign array"
        case .products: "an open-market page {\"pages\": [...]}"
        case .hangouts: "Bappy's {\"data\": {\"HangoutList\": [...]}}"
        case .challenges: "iGoMoney's challenge array"
        }
    }

    private func next(after request: PageRequest, bytes: [UInt8], listed: Int, lastItem: [UInt8]?) throws(PageError) -> PageRequest? {
        guard listed > 0 else { return nil }
        var next = request
        next.number += 1
        next.itemsBefore += listed
        switch self {
        case .campaigns:
            let query = URLComponents(string: request.template)?.queryItems ?? []
            let size = query.first { $0.name == "size" }?.value.flatMap(Int.init) ?? listed
            let page = query.first { $0.name == "page" }?.value.flatMap(Int.init) ?? 0
            guard listed >= size else { return nil }
            next.template = Self.settingQuery(request.template, "page", String(page + 1))
            return next
        case .products:
            guard let page = (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any] else { return nil }
            let number = Self.int(page["pageNo"] ?? page["page_no"])
            let hasNext: Bool
            if let flag = (page["hasNext"] ?? page["has_next"]) as? Bool {
                hasNext = flag
            } else if let number, let last = Self.int(page["lastPage"] ?? page["last_page"]) {
                hasNext = number < last
            } else {
                throw PageError(url: request.url, reason: "a product page without hasNext/has_next or lastPage/last_page: cannot tell whether another page follows")
            }
            guard hasNext else { return nil }
            next.template = Self.settingQuery(request.template, "page_no", String((number ?? request.number + 1) + 1))
            return next
        case .hangouts:
            guard request.template.contains("{page}") else { return nil }
            guard let page = (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any],
                let data = page["data"] as? [String: Any], let info = data["pageInfo"] as? [String: Any],
                let total = Self.int(info["totalCount"])
            else {
                throw PageError(url: request.url, reason: "a hangout page without data.pageInfo.totalCount: cannot tell whether another page follows")
            }
            // A server that does not count (Bappy's committed code answers `totalCount: 0`)
            // is read until an empty page (or `--max-pages`).
            return total <= 0 || next.itemsBefore < total ? next : nil
        case .challenges:
            let size = URLComponents(string: request.template)?.queryItems?.first { $0.name == "pageSize" }?.value.flatMap(Int.init) ?? listed
            guard listed >= size, let lastItem,
                let object = (try? JSONSerialization.jsonObject(with: Data(lastItem))) as? [String: Any],
                let lastID = Self.int(object["id"])
            else { return nil }
            next.template = Self.settingQuery(request.template, "lastId", String(lastID))
            return next
        }
    }

    /// `{page}` is not valid in a URL: URLComponents sees this instead.
    static let pageMarker = "__PAGE__"

    static func int(_ value: Any?) -> Int? {
        switch value {
        case let n as NSNumber: n.intValue
        case let s as String: Int(s)
        default: nil
        }
    }

    static func settingQuery(_ template: String, _ name: String, _ value: String) -> String {
        let marker = pageMarker
        guard var components = URLComponents(string: template.replacingOccurrences(of: "{page}", with: marker)) else { return template }
        var items = components.queryItems ?? []
        items.removeAll { $0.name == name }
        items.append(URLQueryItem(name: name, value: value))
        components.queryItems = items
        return (components.string ?? template).replacingOccurrences(of: marker, with: "{page}")
    }
}

extension URLComponents {
    /// Sets `name` to `value` unless the URL gives it a value: an empty one (`lastId=`) counts
    /// as none (a Spring server reads it as the parameter's own default).
    mutating func setQueryDefault(_ name: String, _ value: String) {
        var items = queryItems ?? []
        guard !items.contains(where: { $0.name == name && $0.value?.isEmpty == false }) else { return }
        items.removeAll { $0.name == name }
        items.append(URLQueryItem(name: name, value: value))
        queryItems = items
    }
}

/// FNV-1a, 64 bits, over a record's exact bytes: what the change detection compares. Each key
/// is only compared with its own last hash, so a false "unchanged" needs a 1-in-2^64 collision
/// between two versions of one record.
public enum ContentHash {
    public static func of(_ bytes: [UInt8]) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in bytes {
            hash ^= UInt64(b)
            hash = hash &* 0x0000_0100_0000_01B3
        }
        return hash
    }

    public static func hex(_ hash: UInt64) -> String {
        let digits = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}
