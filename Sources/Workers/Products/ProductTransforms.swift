/// `products.decode`: open-market product messages → normalised product events on
/// `products.events` (key: product id; compacted topic semantics).
///
/// The kind comes from the ``eventHeader`` header (`created` / `updated` / `deleted`) when the
/// producer sets it; otherwise a tombstone is a deletion (key = product id), and a product is
/// `created` when `issued_at` equals `created_at`, else `updated`. Deletions are produced as
/// tombstones with the header, so the output topic can be compacted. A page yields one event
/// per product. Stateless.
public struct ProductDecodeTransform: Transform {
    public var decoder: ProductDecoder
    /// Header naming the event kind.
    public var eventHeader: String

    public init(decoder: ProductDecoder = ProductDecoder(), eventHeader: String = "event-type") {
        self.decoder = decoder
        self.eventHeader = eventHeader
    }

    public var name: String { "products.decode" }

    public func process(_ record: InputRecord, state: inout NoState, context: TransformContext, into out: inout TransformOutput) {
        do {
            let events = try ProductEvent.decode(record, decoder: decoder, eventHeader: eventHeader)
            let id = record.identity
            out.append(contentsOf: events.enumerated().map { i, e in
                OutputRecord(
                    output: "products.events", key: Array(String(e.productId).utf8), value: e.product?.jsonBytes(),
                    headers: [RecordHeader("event-type", e.kind.rawValue)],
                    dedupeKey: "product:\(e.productId):\(e.kind.rawValue):\(id)#\(i)")
            })
        } catch {
            return out.fail(error)
        }
    }
}

extension ProductEvent {
    /// Reads the product events of one record (see ``ProductDecodeTransform`` for the rules).
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

/// `products.thumbnails`: one ``ThumbnailRequest`` per image of a created or updated product
/// (output `thumbnails.requests`, key: product id); a product without images asks for its
/// `thumbnail`. Deletions produce nothing. Stateless; an unchanged image gets the same dedupe
/// key on every update. The sizes are the thumbnail worker's.
public struct ThumbnailRequestTransform: Transform {
    public var decoder: ProductDecoder

    public init(decoder: ProductDecoder = ProductDecoder()) {
        self.decoder = decoder
    }

    public var name: String { "products.thumbnails" }

    public func process(_ record: InputRecord, state: inout NoState, context: TransformContext, into out: inout TransformOutput) {
        let events: [ProductEvent]
        do { events = try ProductEvent.decode(record, decoder: decoder) } catch { return out.fail(error) }
        for case let product? in events.map(\.product) {
            let urls = product.images.isEmpty ? [product.thumbnail] : product.images.map(\.url)
            for (index, url) in urls.enumerated() {
                out.append(
                    ThumbnailRequest(owner: .product, ownerId: String(product.id), imageIndex: index, sourceURL: url).outputRecord())
            }
        }
    }
}


/// `products.new-notifications`: a "new products" notification per category, at most one per
/// ``interval``: the first new product opens a window; when a later record or
/// ``Transform/advance(state:context:)`` reaches the window's end, one notification summarises the
/// burst (topic `new-products-<category>`). The category comes from the ``categoryHeader`` header
/// (default category `all`). A product id is announced once (remembered for ``memoryMillis``),
/// so redelivery and edits do not re-announce it.
///
/// **With thumbnails**: given `thumbnails.ready` as a second input (records whose origin topic is
/// ``thumbnailsTopic``), the transform remembers each product's list thumbnail (its first image, size
/// ``thumbnailSize``) and the notification carries the one of the first product in the burst
/// that has one. The window is the wait: a thumbnail ready before the window closes is in the
/// notification, a later one is not (the notification never waits longer than ``intervalMillis``).
/// The runtime joins the two topics per partition (a stateful transform with several inputs: they
/// must be co-partitioned, keyed by product id), so a product and its thumbnail meet in one state;
/// products seen only in unkeyed list pages may miss theirs.
public struct NewProductsNotificationTransform: Transform {
    public struct Window: Codable, Sendable, Equatable {
        public var opensAt: Int64
        public var productIds: [Int64]
        public var names: [String]
    }

    public struct State: Codable, Sendable, Equatable {
        public var windows: [String: Window] = [:]
        /// Product id → time it was first seen.
        public var announced: [Int64: Int64] = [:]
        /// Product id → its list thumbnail, once ready.
        public var thumbnails: [Int64: Thumbnail] = [:]
        public init() {}
    }

    public struct Thumbnail: Codable, Sendable, Equatable {
        public var uri: String
        public var readyAt: Int64
    }

    public var intervalMillis: Int64
    public var memoryMillis: Int64
    public var categoryHeader: String
    public var decoder: ProductDecoder
    /// Records from this topic are `thumbnails.ready` events, not products.
    public var thumbnailsTopic: String
    /// The thumbnail size a notification shows.
    public var thumbnailSize: String

    public init(
        intervalMillis: Int64 = 5 * 60_000, memoryMillis: Int64 = 7 * 86_400_000, categoryHeader: String = "category",
        decoder: ProductDecoder = ProductDecoder(), thumbnailsTopic: String = "thumbnails.ready", thumbnailSize: String = "list"
    ) {
        self.intervalMillis = intervalMillis
        self.memoryMillis = memoryMillis
        self.categoryHeader = categoryHeader
        self.decoder = decoder
        self.thumbnailsTopic = thumbnailsTopic
        self.thumbnailSize = thumbnailSize
    }

    public var name: String { "products.new-notifications" }
    public var initialState: State { State() }

    public func process(_ record: InputRecord, state: inout State, context: TransformContext, into out: inout TransformOutput) {
        if record.origin.topic == thumbnailsTopic {
            guard let value = record.value else { return }
            let ready: ThumbnailReady
            do { ready = try ThumbnailReady.decode(value, limits: decoder.limits) } catch { return out.fail(error) }
            if ready.owner == ThumbnailRequest.Owner.product.rawValue, ready.imageIndex == 0, let id = Int64(ready.ownerId),
                let uri = ready.uris[thumbnailSize]
            {
                state.thumbnails[id] = Thumbnail(uri: uri, readyAt: record.timestamp)
            }
            return
        }
        let events: [ProductEvent]
        do { events = try ProductEvent.decode(record, decoder: decoder) } catch { return out.fail(error) }
        // Close windows that are due at this record's time first: a burst ends before the next one starts.
        flush(&state, now: record.timestamp, into: &out)
        let category = record.headers.string(named: categoryHeader) ?? "all"
        for event in events where event.kind == .created {
            guard let product = event.product, state.announced[product.id] == nil else { continue }
            state.announced[product.id] = record.timestamp
            var window = state.windows[category] ?? Window(opensAt: record.timestamp, productIds: [], names: [])
            window.productIds.append(product.id)
            if window.names.count < 3 { window.names.append(product.name) }
            state.windows[category] = window
        }
    }

    public func advance(state: inout State, context: TransformContext, into out: inout TransformOutput) {
        flush(&state, now: context.now, into: &out)
    }

    private func flush(_ state: inout State, now: Int64, into out: inout TransformOutput) {
        for category in state.windows.keys.sorted() {
            guard let w = state.windows[category], now >= w.opensAt.saturatingAdd(intervalMillis) else { continue }
            state.windows[category] = nil
            let more = w.productIds.count - 1
            let firstName = w.names.first ?? "A new product"
            let body = more > 0 ? "\(firstName) and \(more) more" : firstName
            let thumbnails = state.thumbnails
            let image = w.productIds.lazy.compactMap { thumbnails[$0]?.uri }.first
            let n = PushNotification(
                recipient: .topic("new-products-\(category)"), title: "New products", body: body,
                data: ["category": category, "count": String(w.productIds.count), "kind": "new-products"],
                collapseKey: "new-products-\(category)", dedupeKey: "new-products:\(category):\(w.opensAt)", imageURL: image)
            out.append(n.outputRecord())
        }
        state.announced = state.announced.filter { now.saturatingSub($0.value) < memoryMillis }
        state.thumbnails = state.thumbnails.filter { now.saturatingSub($0.value.readyAt) < memoryMillis }
    }
}

extension ProductDecodeTransform {
    public static let options = [TransformOption.utcOffset]
}

extension ThumbnailRequestTransform {
    public static let options = [TransformOption.utcOffset]
}

extension NewProductsNotificationTransform {
    /// `new-products-interval`: how long new products are gathered into one notification (default 5m).
    public static let options = [
        TransformOption.utcOffset,
        TransformOption("new-products-interval") { value, options throws(OptionError) in options.newProductsIntervalMillis = try value.milliseconds() },
    ]
}
