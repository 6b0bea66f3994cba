/// A validated open-market product, the same whichever API era it came from.
public struct Product: Sendable, Hashable, Codable {
    public enum Currency: String, Sendable, Hashable, Codable { case krw = "KRW", usd = "USD" }

    public struct Image: Sendable, Hashable, Codable {
        public var id: Int64
        /// Full-size image URL (may have no file extension).
        public var url: String
        public var thumbnailURL: String?
        public var issuedAt: Int64?

        public init(id: Int64, url: String, thumbnailURL: String? = nil, issuedAt: Int64? = nil) {
            self.id = id
            self.url = url
            self.thumbnailURL = thumbnailURL
            self.issuedAt = issuedAt
        }
    }

    public var id: Int64
    public var vendorId: Int64
    /// `vendorName` (new era) or `vendors.name` (detail responses); nil when neither is sent.
    public var vendorName: String?
    public var name: String
    public var description: String?
    /// Thumbnail URL (may have no file extension).
    public var thumbnail: String
    public var currency: Currency
    public var price: Double
    public var discountedPrice: Double
    /// Always `price - discountedPrice`: upstream's `bargain_price` is checked, not trusted.
    public var bargainPrice: Double
    /// True when upstream's `bargain_price` disagreed with `price - discounted_price` (and was replaced).
    public var bargainPriceCorrected: Bool
    public var stock: Int64
    /// Epoch ms (upstream sends Korean local time without a zone).
    public var createdAt: Int64
    public var issuedAt: Int64
    /// Detail images, at most 5 (empty for list responses, which do not carry them).
    public var images: [Image]

    public init(
        id: Int64, vendorId: Int64, vendorName: String? = nil, name: String, description: String? = nil,
        thumbnail: String, currency: Currency, price: Double, discountedPrice: Double = 0,
        bargainPriceCorrected: Bool = false, stock: Int64, createdAt: Int64, issuedAt: Int64, images: [Image] = []
    ) {
        self.id = id
        self.vendorId = vendorId
        self.vendorName = vendorName
        self.name = name
        self.description = description
        self.thumbnail = thumbnail
        self.currency = currency
        self.price = price
        self.discountedPrice = discountedPrice
        self.bargainPrice = price - discountedPrice
        self.bargainPriceCorrected = bargainPriceCorrected
        self.stock = stock
        self.createdAt = createdAt
        self.issuedAt = issuedAt
        self.images = images
    }

    /// The product in the API's snake_case shape, dates as UTC ISO-8601 with `Z` (the decoder reads
    /// it back unchanged).
    public func jsonBytes() -> [UInt8] {
        var w = JSONWriter(capacity: 512)
        write(to: &w)
        return w.bytes
    }

    func write(to w: inout JSONWriter) {
        w.beginObject()
        w.key("id"); w.int(id)
        w.key("vendor_id"); w.int(vendorId)
        if let vendorName { w.key("vendorName"); w.string(vendorName) }
        w.key("name"); w.string(name)
        if let description { w.key("description"); w.string(description) }
        w.key("thumbnail"); w.string(thumbnail)
        w.key("currency"); w.string(currency.rawValue)
        w.key("price"); w.double(price)
        w.key("bargain_price"); w.double(bargainPrice)
        w.key("discounted_price"); w.double(discountedPrice)
        w.key("stock"); w.int(stock)
        w.key("created_at"); w.string(LocalDateTime.isoUTC(createdAt))
        w.key("issued_at"); w.string(LocalDateTime.isoUTC(issuedAt))
        if !images.isEmpty {
            w.key("images")
            w.beginArray()
            for image in images {
                w.beginObject()
                w.key("id"); w.int(image.id)
                w.key("url"); w.string(image.url)
                if let t = image.thumbnailURL { w.key("thumbnail_url"); w.string(t) }
                if let i = image.issuedAt { w.key("issued_at"); w.string(LocalDateTime.isoUTC(i)) }
                w.endObject()
            }
            w.endArray()
        }
        w.endObject()
    }
}

/// What happened to a product.
public enum ProductEventKind: String, Sendable, Hashable, Codable {
    case created, updated, deleted
}

/// A product post as the pipeline sees it.
public struct ProductEvent: Sendable, Hashable, Codable {
    public var kind: ProductEventKind
    public var productId: Int64
    /// nil for `deleted`.
    public var product: Product?

    public init(kind: ProductEventKind, productId: Int64, product: Product?) {
        self.kind = kind
        self.productId = productId
        self.product = product
    }
}
