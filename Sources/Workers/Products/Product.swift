/// A validated open-market product, the same whichever API era it came from.
///
/// Its text (names, description, URLs) is kept as UTF-8 in one buffer shared with its images
/// (``TextBuffer``): the decoder makes one allocation for a product's strings instead of one per
/// string, and a `String` is made when a property is read. Equality, hashing and `Codable` are
/// those of the values the properties give.
public struct Product: Sendable, Hashable, Codable {
    public enum Currency: String, Sendable, Hashable, Codable { case krw = "KRW", usd = "USD" }

    public struct Image: Sendable, Hashable, Codable {
        public var id: Int64
        /// Full-size image URL (may have no file extension).
        public var url: String {
            get { text.string(urlText) }
            set { urlText = text.append(newValue) }
        }
        public var thumbnailURL: String? {
            get { thumbnailText.map { text.string($0) } }
            set { thumbnailText = newValue.map { t in text.append(t) } }
        }
        public var issuedAt: Int64?

        /// The buffer the URLs are in (the product's, when decoded).
        var text: TextBuffer
        var urlText: TextBuffer.Slice
        var thumbnailText: TextBuffer.Slice?

        public init(id: Int64, url: String, thumbnailURL: String? = nil, issuedAt: Int64? = nil) {
            var text = TextBuffer()
            let urlText = text.append(url)
            let thumbnailText = thumbnailURL.map { text.append($0) }
            self.init(id: id, text: text, url: urlText, thumbnailURL: thumbnailText, issuedAt: issuedAt)
        }

        init(id: Int64, text: TextBuffer, url: TextBuffer.Slice, thumbnailURL: TextBuffer.Slice?, issuedAt: Int64?) {
            self.id = id
            self.text = text
            self.urlText = url
            self.thumbnailText = thumbnailURL
            self.issuedAt = issuedAt
        }

        public static func == (a: Image, b: Image) -> Bool {
            a.id == b.id && a.url == b.url && a.thumbnailURL == b.thumbnailURL && a.issuedAt == b.issuedAt
        }

        public func hash(into h: inout Hasher) {
            h.combine(id)
            h.combine(url)
            h.combine(thumbnailURL)
            h.combine(issuedAt)
        }

        private enum CodingKeys: String, CodingKey { case id, url, thumbnailURL, issuedAt }

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                id: try c.decode(Int64.self, forKey: .id), url: try c.decode(String.self, forKey: .url),
                thumbnailURL: try c.decodeIfPresent(String.self, forKey: .thumbnailURL),
                issuedAt: try c.decodeIfPresent(Int64.self, forKey: .issuedAt))
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(id, forKey: .id)
            try c.encode(url, forKey: .url)
            try c.encodeIfPresent(thumbnailURL, forKey: .thumbnailURL)
            try c.encodeIfPresent(issuedAt, forKey: .issuedAt)
        }
    }

    public var id: Int64
    public var vendorId: Int64
    /// `vendorName` (new era) or `vendors.name` (detail responses); nil when neither is sent.
    public var vendorName: String? {
        get { vendorNameText.map { text.string($0) } }
        set { vendorNameText = newValue.map { t in text.append(t) } }
    }
    public var name: String {
        get { text.string(nameText) }
        set { nameText = text.append(newValue) }
    }
    public var description: String? {
        get { descriptionText.map { text.string($0) } }
        set { descriptionText = newValue.map { t in text.append(t) } }
    }
    /// Thumbnail URL (may have no file extension).
    public var thumbnail: String {
        get { text.string(thumbnailText) }
        set { thumbnailText = text.append(newValue) }
    }
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

    /// The buffer the text properties are in (shared with the images when decoded).
    var text: TextBuffer
    var vendorNameText: TextBuffer.Slice?
    var nameText: TextBuffer.Slice
    var descriptionText: TextBuffer.Slice?
    var thumbnailText: TextBuffer.Slice

    public init(
        id: Int64, vendorId: Int64, vendorName: String? = nil, name: String, description: String? = nil,
        thumbnail: String, currency: Currency, price: Double, discountedPrice: Double = 0,
        bargainPriceCorrected: Bool = false, stock: Int64, createdAt: Int64, issuedAt: Int64, images: [Image] = []
    ) {
        var text = TextBuffer()
        let vendorNameText = vendorName.map { text.append($0) }
        let nameText = text.append(name)
        let descriptionText = description.map { text.append($0) }
        let thumbnailText = text.append(thumbnail)
        self.init(
            id: id, vendorId: vendorId, text: text, vendorName: vendorNameText, name: nameText,
            description: descriptionText, thumbnail: thumbnailText, currency: currency, price: price,
            discountedPrice: discountedPrice, bargainPriceCorrected: bargainPriceCorrected, stock: stock,
            createdAt: createdAt, issuedAt: issuedAt, images: images)
    }

    /// A product whose text is in `text` (the decoder's).
    init(
        id: Int64, vendorId: Int64, text: TextBuffer, vendorName: TextBuffer.Slice?, name: TextBuffer.Slice,
        description: TextBuffer.Slice?, thumbnail: TextBuffer.Slice, currency: Currency, price: Double,
        discountedPrice: Double, bargainPriceCorrected: Bool, stock: Int64, createdAt: Int64, issuedAt: Int64, images: [Image]
    ) {
        self.id = id
        self.vendorId = vendorId
        self.text = text
        self.vendorNameText = vendorName
        self.nameText = name
        self.descriptionText = description
        self.thumbnailText = thumbnail
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
        if let vendorNameText { w.key("vendorName"); text.withUTF8(vendorNameText) { w.string(utf8: $0) } }
        w.key("name"); text.withUTF8(nameText) { w.string(utf8: $0) }
        if let descriptionText { w.key("description"); text.withUTF8(descriptionText) { w.string(utf8: $0) } }
        w.key("thumbnail"); text.withUTF8(thumbnailText) { w.string(utf8: $0) }
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
                w.key("url"); image.text.withUTF8(image.urlText) { w.string(utf8: $0) }
                if let t = image.thumbnailText { w.key("thumbnail_url"); image.text.withUTF8(t) { w.string(utf8: $0) } }
                if let i = image.issuedAt { w.key("issued_at"); w.string(LocalDateTime.isoUTC(i)) }
                w.endObject()
            }
            w.endArray()
        }
        w.endObject()
    }

    public static func == (a: Product, b: Product) -> Bool {
        a.id == b.id && a.vendorId == b.vendorId && a.vendorName == b.vendorName && a.name == b.name
            && a.description == b.description && a.thumbnail == b.thumbnail && a.currency == b.currency
            && a.price == b.price && a.discountedPrice == b.discountedPrice && a.bargainPrice == b.bargainPrice
            && a.bargainPriceCorrected == b.bargainPriceCorrected && a.stock == b.stock && a.createdAt == b.createdAt
            && a.issuedAt == b.issuedAt && a.images == b.images
    }

    public func hash(into h: inout Hasher) {
        h.combine(id)
        h.combine(vendorId)
        h.combine(vendorName)
        h.combine(name)
        h.combine(description)
        h.combine(thumbnail)
        h.combine(currency)
        h.combine(price)
        h.combine(discountedPrice)
        h.combine(bargainPrice)
        h.combine(bargainPriceCorrected)
        h.combine(stock)
        h.combine(createdAt)
        h.combine(issuedAt)
        h.combine(images)
    }

    private enum CodingKeys: String, CodingKey {
        case id, vendorId, vendorName, name, description, thumbnail, currency, price, discountedPrice, bargainPrice
        case bargainPriceCorrected, stock, createdAt, issuedAt, images
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            id: try c.decode(Int64.self, forKey: .id), vendorId: try c.decode(Int64.self, forKey: .vendorId),
            vendorName: try c.decodeIfPresent(String.self, forKey: .vendorName), name: try c.decode(String.self, forKey: .name),
            description: try c.decodeIfPresent(String.self, forKey: .description),
            thumbnail: try c.decode(String.self, forKey: .thumbnail), currency: try c.decode(Currency.self, forKey: .currency),
            price: try c.decode(Double.self, forKey: .price), discountedPrice: try c.decode(Double.self, forKey: .discountedPrice),
            bargainPriceCorrected: try c.decode(Bool.self, forKey: .bargainPriceCorrected),
            stock: try c.decode(Int64.self, forKey: .stock), createdAt: try c.decode(Int64.self, forKey: .createdAt),
            issuedAt: try c.decode(Int64.self, forKey: .issuedAt), images: try c.decode([Image].self, forKey: .images))
        bargainPrice = try c.decode(Double.self, forKey: .bargainPrice)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(vendorId, forKey: .vendorId)
        try c.encodeIfPresent(vendorName, forKey: .vendorName)
        try c.encode(name, forKey: .name)
        try c.encodeIfPresent(description, forKey: .description)
        try c.encode(thumbnail, forKey: .thumbnail)
        try c.encode(currency, forKey: .currency)
        try c.encode(price, forKey: .price)
        try c.encode(discountedPrice, forKey: .discountedPrice)
        try c.encode(bargainPrice, forKey: .bargainPrice)
        try c.encode(bargainPriceCorrected, forKey: .bargainPriceCorrected)
        try c.encode(stock, forKey: .stock)
        try c.encode(createdAt, forKey: .createdAt)
        try c.encode(issuedAt, forKey: .issuedAt)
        try c.encode(images, forKey: .images)
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
