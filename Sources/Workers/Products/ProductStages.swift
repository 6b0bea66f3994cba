/// `products.decode`: open-market product messages → normalised product events on
/// `products.events` (key: product id; compacted topic semantics).
///
/// The kind comes from the ``eventHeader`` header (`created` / `updated` / `deleted`) when the
/// producer sets it; otherwise a tombstone is a deletion (key = product id), and a product is
/// `created` when `issued_at` equals `created_at`, else `updated`. Deletions are produced as
/// tombstones with the header, so the output topic can be compacted. A page yields one event
/// per product. Stateless.
public struct ProductDecodeStage: Stage {
    public var decoder: ProductDecoder
    /// Header naming the event kind.
    public var eventHeader: String

    public init(decoder: ProductDecoder = ProductDecoder(), eventHeader: String = "event-type") {
        self.decoder = decoder
        self.eventHeader = eventHeader
    }

    public var name: String { "products.decode" }

    public func process(_ record: InputRecord, state: inout NoState, context: StageContext) -> StageOutput {
        do {
            let events = try ProductEvent.decode(record, decoder: decoder, eventHeader: eventHeader)
            let id = record.identity
            return StageOutput(records: events.enumerated().map { i, e in
                OutputRecord(
                    output: "products.events", key: Array(String(e.productId).utf8), value: e.product?.jsonBytes(),
                    headers: [RecordHeader("event-type", e.kind.rawValue)],
                    dedupeKey: "product:\(e.productId):\(e.kind.rawValue):\(id)#\(i)")
            })
        } catch {
            return StageOutput(failures: [error])
        }
    }
}

extension ProductEvent {
    /// Reads the product events of one record (see ``ProductDecodeStage`` for the rules).
    public static func decode(
        _ record: InputRecord, decoder: ProductDecoder = ProductDecoder(), eventHeader: String = "event-type"
    ) throws(DecodeFailure) -> [ProductEvent] {
        var declared: ProductEventKind?
        if let raw = record.headers.string(named: eventHeader) {
            guard let kind = ProductEventKind(rawValue: raw) else {
                throw DecodeFailure(field: "header:\(eventHeader)", reason: .invalidValue, detail: "expected created, updated or deleted")
            }
            declared = kind
        }
        guard let value = record.value else {
            // A tombstone deletes the product named by the key.
            guard let key = record.key, let text = String(validating: key, as: UTF8.self), let id = Int64(text) else {
                throw DecodeFailure(field: "key", reason: .invalidValue, detail: "a deletion (tombstone) needs the product id as key")
            }
            return [ProductEvent(kind: .deleted, productId: id, product: nil)]
        }
        return try decoder.decode(value).map { p in
            let kind = declared ?? (p.issuedAt == p.createdAt ? .created : .updated)
            return ProductEvent(kind: kind, productId: p.id, product: kind == .deleted ? nil : p)
        }
    }
}

/// What the thumbnail stage (module `Thumbnails`) should render.
public struct ThumbnailRequest: Sendable, Hashable, Codable {
    public enum Fit: String, Sendable, Hashable, Codable {
        /// Whole image inside the box (letterboxed).
        case fit
        /// Box filled, overflow cropped.
        case cover
    }

    public var productId: Int64
    /// Position of the image in the product's `images` (0 is the product thumbnail when the
    /// message carries no images).
    public var imageIndex: Int
    public var sourceURL: String
    /// Configured size name (`list`, `grid`).
    public var sizeName: String
    public var width: Int
    public var height: Int
    public var fit: Fit
    /// `thumb:<product>:<index>:<size>:<url hash>`: stable for the same image and size, new when the URL changes.
    public var dedupeKey: String

    public init(
        productId: Int64, imageIndex: Int, sourceURL: String, sizeName: String, width: Int, height: Int, fit: Fit,
        dedupeKey: String
    ) {
        self.productId = productId
        self.imageIndex = imageIndex
        self.sourceURL = sourceURL
        self.sizeName = sizeName
        self.width = width
        self.height = height
        self.fit = fit
        self.dedupeKey = dedupeKey
    }

    /// `{"product_id","image_index","source_url","size","width","height","fit","dedupe_key"}`: the
    /// value of each `thumbnails.requests` record.
    public func jsonBytes() -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.key("product_id"); w.int(productId)
        w.key("image_index"); w.int(imageIndex)
        w.key("source_url"); w.string(sourceURL)
        w.key("size"); w.string(sizeName)
        w.key("width"); w.int(width)
        w.key("height"); w.int(height)
        w.key("fit"); w.string(fit.rawValue)
        w.key("dedupe_key"); w.string(dedupeKey)
        w.endObject()
        return w.bytes
    }
}

/// A configured thumbnail size.
public struct ThumbnailSize: Sendable, Hashable, Codable {
    public var name: String
    public var width: Int
    public var height: Int
    public var fit: ThumbnailRequest.Fit

    public init(name: String, width: Int, height: Int, fit: ThumbnailRequest.Fit) {
        self.name = name
        self.width = width
        self.height = height
        self.fit = fit
    }

    /// List rows show small square crops, the grid larger whole images.
    public static let defaults = [
        ThumbnailSize(name: "list", width: 160, height: 160, fit: .cover),
        ThumbnailSize(name: "grid", width: 480, height: 480, fit: .fit),
    ]
}

/// `products.thumbnails`: one ``ThumbnailRequest`` per image per configured size for created and
/// updated products (output `thumbnails.requests`, key: product id). Deletions produce nothing.
/// Stateless; an unchanged image gets the same dedupe key on every update.
public struct ThumbnailRequestStage: Stage {
    public var sizes: [ThumbnailSize]
    public var decoder: ProductDecoder

    public init(sizes: [ThumbnailSize] = ThumbnailSize.defaults, decoder: ProductDecoder = ProductDecoder()) {
        self.sizes = sizes
        self.decoder = decoder
    }

    public var name: String { "products.thumbnails" }

    public func process(_ record: InputRecord, state: inout NoState, context: StageContext) -> StageOutput {
        let events: [ProductEvent]
        do { events = try ProductEvent.decode(record, decoder: decoder) } catch { return StageOutput(failures: [error]) }
        var out = StageOutput()
        for case let product? in events.map(\.product) {
            let urls = product.images.isEmpty ? [product.thumbnail] : product.images.map(\.url)
            for (index, url) in urls.enumerated() {
                for size in sizes {
                    let key = "thumb:\(product.id):\(index):\(size.name):\(stableHash(url))"
                    let request = ThumbnailRequest(
                        productId: product.id, imageIndex: index, sourceURL: url, sizeName: size.name,
                        width: size.width, height: size.height, fit: size.fit, dedupeKey: key)
                    out.records.append(OutputRecord(
                        output: "thumbnails.requests", key: Array(String(product.id).utf8), value: request.jsonBytes(), dedupeKey: key))
                }
            }
        }
        return out
    }
}


/// `products.new-notifications`: a "new products" notification per category, at most one per
/// ``interval``: the first new product opens a window; when a later record or
/// ``Stage/advance(state:context:)`` reaches the window's end, one notification summarises the
/// burst (topic `new-products-<category>`). The category comes from the ``categoryHeader`` header
/// (default category `all`). A product id is announced once (remembered for ``memoryMillis``),
/// so redelivery and edits do not re-announce it.
public struct NewProductsNotificationStage: Stage {
    public struct Window: Codable, Sendable, Equatable {
        public var opensAt: Int64
        public var productIds: [Int64]
        public var names: [String]
    }

    public struct State: Codable, Sendable, Equatable {
        public var windows: [String: Window] = [:]
        /// Product id → time it was first seen.
        public var announced: [Int64: Int64] = [:]
        public init() {}
    }

    public var intervalMillis: Int64
    public var memoryMillis: Int64
    public var categoryHeader: String
    public var decoder: ProductDecoder

    public init(
        intervalMillis: Int64 = 5 * 60_000, memoryMillis: Int64 = 7 * 86_400_000, categoryHeader: String = "category",
        decoder: ProductDecoder = ProductDecoder()
    ) {
        self.intervalMillis = intervalMillis
        self.memoryMillis = memoryMillis
        self.categoryHeader = categoryHeader
        self.decoder = decoder
    }

    public var name: String { "products.new-notifications" }
    public var initialState: State { State() }

    public func process(_ record: InputRecord, state: inout State, context: StageContext) -> StageOutput {
        let events: [ProductEvent]
        do { events = try ProductEvent.decode(record, decoder: decoder) } catch { return StageOutput(failures: [error]) }
        // Close windows that are due at this record's time first: a burst ends before the next one starts.
        let out = flush(&state, now: record.timestamp)
        let category = record.headers.string(named: categoryHeader) ?? "all"
        for event in events where event.kind == .created {
            guard let product = event.product, state.announced[product.id] == nil else { continue }
            state.announced[product.id] = record.timestamp
            var window = state.windows[category] ?? Window(opensAt: record.timestamp, productIds: [], names: [])
            window.productIds.append(product.id)
            if window.names.count < 3 { window.names.append(product.name) }
            state.windows[category] = window
        }
        return out
    }

    public func advance(state: inout State, context: StageContext) -> StageOutput {
        flush(&state, now: context.now)
    }

    private func flush(_ state: inout State, now: Int64) -> StageOutput {
        var out = StageOutput()
        for category in state.windows.keys.sorted() {
            guard let w = state.windows[category], now >= w.opensAt.saturatingAdd(intervalMillis) else { continue }
            state.windows[category] = nil
            let more = w.productIds.count - 1
            let firstName = w.names.first ?? "A new product"
            let body = more > 0 ? "\(firstName) and \(more) more" : firstName
            let n = PushNotification(
                recipient: .topic("new-products-\(category)"), title: "New products", body: body,
                data: ["category": category, "count": String(w.productIds.count), "kind": "new-products"],
                collapseKey: "new-products-\(category)", dedupeKey: "new-products:\(category):\(w.opensAt)")
            out.records.append(n.outputRecord())
        }
        state.announced = state.announced.filter { now.saturatingSub($0.value) < memoryMillis }
        return out
    }
}
