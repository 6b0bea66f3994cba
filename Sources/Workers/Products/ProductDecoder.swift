/// Decodes open-market products from both API eras in one pass: a single product, or a page
/// (old snake_case `page_no`…, new camelCase `pageNo`…, both with `pages: [product]`).
///
/// The root object is read once; product fields and page fields are collected together and the
/// presence of `pages` decides what it was, so key order does not matter.
///
/// Validation: `id`, `vendor_id`, `name`, `thumbnail`, `currency`, `price`, `stock`,
/// `created_at`, `issued_at` are required; `currency` is KRW or USD; prices and stock are not
/// negative; `discounted_price` is not above `price`; at most ``maxImages`` images.
public struct ProductDecoder: Sendable {
    public var limits: DecodeLimits
    /// Offset of zone-less upstream dates (Korean time by default).
    public var utcOffsetSeconds: Int
    /// The marketplace allows at most 5 images per product.
    public var maxImages: Int

    public init(limits: DecodeLimits = .default, utcOffsetSeconds: Int = 9 * 3600, maxImages: Int = 5) {
        self.limits = limits
        self.utcOffsetSeconds = utcOffsetSeconds
        self.maxImages = maxImages
    }

    public func decode(_ bytes: [UInt8]) throws(DecodeFailure) -> [Product] { try decode(bytes[...]) }

    /// The products in one message (one, or one per page entry; an empty page gives none).
    public func decode(_ bytes: ArraySlice<UInt8>) throws(DecodeFailure) -> [Product] {
        try JSONScanner.withScanner(bytes, limits: limits) { s throws(DecodeFailure) in
            // One buffer for the text of every product in the message (a copy of it); the products
            // get it once it is complete (sharing it earlier would copy it again on an escaped string).
            var text = try s.messageText()
            var products: [Product] = []
            if var single = try decodeObject(&s, text: &text, allowPage: true, pageOut: &products) {
                single.adopt(text)
                return [single]
            }
            for i in products.indices { products[i].adopt(text) }
            return products
        }
    }

    private enum Field: Int {
        case id, vendorId, vendorName, name, description, thumbnail, currency, price, bargainPrice
        case discountedPrice, stock, createdAt, issuedAt, images, vendors, pages
    }

    /// In the order the open market sends them (the order the scanner expects; any order decodes).
    private static let keys = KeyTable([
        ("id", Field.id.rawValue), ("vendor_id", Field.vendorId.rawValue), ("vendorName", Field.vendorName.rawValue),
        ("name", Field.name.rawValue), ("description", Field.description.rawValue),
        ("thumbnail", Field.thumbnail.rawValue), ("currency", Field.currency.rawValue),
        ("price", Field.price.rawValue), ("bargain_price", Field.bargainPrice.rawValue),
        ("discounted_price", Field.discountedPrice.rawValue), ("stock", Field.stock.rawValue),
        ("images", Field.images.rawValue), ("vendors", Field.vendors.rawValue),
        ("created_at", Field.createdAt.rawValue), ("issued_at", Field.issuedAt.rawValue), ("pages", Field.pages.rawValue),
    ])

    private enum ImageField: Int { case id, url, thumbnailURL, issuedAt }
    private static let imageKeys = KeyTable([
        ("id", ImageField.id.rawValue), ("url", ImageField.url.rawValue),
        ("thumbnail_url", ImageField.thumbnailURL.rawValue), ("issued_at", ImageField.issuedAt.rawValue),
    ])

    private static let vendorKeys = KeyTable([("id", KeyTable.ignored), ("name", 0), ("created_at", KeyTable.ignored)])

    /// Reads one object. Returns the product, or nil if it was a page (products appended to `pageOut`).
    private func decodeObject(
        _ s: inout JSONScanner, text: inout TextBuffer, allowPage: Bool, pageOut: inout [Product]
    ) throws(DecodeFailure) -> Product? {
        try s.beginObject()
        var id: Int64?, vendorId: Int64?, vendorName: TextBuffer.Slice?, vendorsName: TextBuffer.Slice?
        var name: TextBuffer.Slice?, description: TextBuffer.Slice?, thumbnail: TextBuffer.Slice?
        var currency: Product.Currency?
        var price: Double?, bargainPrice: Double?, discountedPrice: Double?, stock: Int64?
        var createdAt: Int64?, issuedAt: Int64?
        var images: [Product.Image] = []
        var sawPages = false

        // Read once: each use of a static goes through its lazy initialisation check (swift_once).
        let keys = Self.keys
        var expected = keys.firstExpected
        var first = true
        while let key = try s.nextKey(&first, in: keys, expected: &expected) {
            do throws(DecodeFailure) {
                guard let field = Field(rawValue: key.field) else {
                    try s.skipValue()
                    continue
                }
                switch field {
                case .id: id = try s.readOptionalInt()
                case .vendorId: vendorId = try s.readOptionalInt()
                case .vendorName: vendorName = try s.readOptionalText(into: &text)
                case .name: name = try s.readOptionalText(into: &text)
                case .description: description = try s.readOptionalText(into: &text)
                case .thumbnail: thumbnail = try s.readOptionalText(into: &text)
                case .currency:
                    if try s.consumeNull() { break }
                    let span = try s.readStringSpan()
                    if s.spanEquals(span, "KRW") { currency = .krw }
                    else if s.spanEquals(span, "USD") { currency = .usd }
                    else { throw invalid("", "unknown currency \(s.keyName(span).prefix(20)); expected KRW or USD") }
                case .price: price = try s.readNonNegative()
                case .bargainPrice: bargainPrice = try s.readNonNegative()
                case .discountedPrice: discountedPrice = try s.readNonNegative()
                case .stock:
                    stock = try s.readOptionalInt()
                    if let v = stock, v < 0 { throw invalid("", "must not be negative, got \(v)") }
                case .createdAt: createdAt = try s.readDateTime(offsetSeconds: utcOffsetSeconds)
                case .issuedAt: issuedAt = try s.readDateTime(offsetSeconds: utcOffsetSeconds)
                case .images:
                    if try s.consumeNull() { break }
                    images = try decodeImages(&s, text: &text)
                case .vendors:
                    if try s.consumeNull() { break }
                    vendorsName = try decodeVendorName(&s, text: &text)
                case .pages:
                    guard allowPage else { try s.skipValue(); break }
                    sawPages = true
                    if try s.consumeNull() { break }
                    try s.beginArray()
                    var firstElement = true
                    var index = 0
                    while try s.nextElement(&firstElement) {
                        guard index < s.limits.maxArrayElements else { throw s.tooManyElements() }
                        do throws(DecodeFailure) {
                            var unused: [Product] = []
                            if let p = try decodeObject(&s, text: &text, allowPage: false, pageOut: &unused) { pageOut.append(p) }
                        } catch {
                            throw error.under("[\(index)]")
                        }
                        index += 1
                    }
                }
            } catch {
                throw error.under(s.keyName(key))
            }
        }
        if sawPages { return nil }

        guard let id else { throw missing("id") }
        guard let vendorId else { throw missing("vendor_id") }
        guard let name, name.count > 0 else { throw missing("name") }
        guard let thumbnail, thumbnail.count > 0 else { throw missing("thumbnail") }
        guard let currency else { throw missing("currency") }
        guard let price else { throw missing("price") }
        guard let stock else { throw missing("stock") }
        guard let createdAt else { throw missing("created_at") }
        guard let issuedAt else { throw missing("issued_at") }
        let discount = discountedPrice ?? 0
        guard discount <= price else {
            throw invalid("discounted_price", "discounted_price \(discount) is above price \(price)")
        }
        // Upstream sometimes sends a bargain price that is not price - discount: recompute it
        // and say so, instead of trusting either number silently.
        let corrected = bargainPrice.map { abs($0 - (price - discount)) > 0.005 } ?? false
        return Product(
            id: id, vendorId: vendorId, text: TextBuffer(), vendorName: vendorName ?? vendorsName, name: name,
            description: description, thumbnail: thumbnail, currency: currency, price: price, discountedPrice: discount,
            bargainPriceCorrected: corrected, stock: stock, createdAt: createdAt, issuedAt: issuedAt, images: images)
    }

    /// The images, their text in `text` (not yet theirs: ``Product/adopt(_:)``).
    private func decodeImages(_ s: inout JSONScanner, text: inout TextBuffer) throws(DecodeFailure) -> [Product.Image] {
        try s.beginArray()
        // Read once: each use of a static goes through its lazy initialisation check (swift_once).
        let imageKeys = Self.imageKeys
        var images: [Product.Image] = []
        var first = true
        while try s.nextElement(&first) {
            guard images.count < maxImages else {
                throw invalid("", "more than \(maxImages) images")
            }
            if images.isEmpty { images.reserveCapacity(min(maxImages, 8)) }  // one allocation, not one per doubling
            do throws(DecodeFailure) {
                try s.beginObject()
                var id: Int64?, url: TextBuffer.Slice?, thumb: TextBuffer.Slice?, issued: Int64?
                var expected = imageKeys.firstExpected
                var firstKey = true
                while let key = try s.nextKey(&firstKey, in: imageKeys, expected: &expected) {
                    do throws(DecodeFailure) {
                        switch ImageField(rawValue: key.field) {
                        case .id: id = try s.readOptionalInt()
                        case .url: url = try s.readOptionalText(into: &text)
                        case .thumbnailURL: thumb = try s.readOptionalText(into: &text)
                        case .issuedAt: issued = try s.readDateTime(offsetSeconds: utcOffsetSeconds)
                        case nil: try s.skipValue()
                        }
                    } catch {
                        throw error.under(s.keyName(key))
                    }
                }
                guard let id else { throw missing("id") }
                guard let url, url.count > 0 else { throw missing("url") }
                images.append(Product.Image(id: id, text: TextBuffer(), url: url, thumbnailURL: thumb, issuedAt: issued))
            } catch {
                throw error.under("[\(images.count)]")
            }
        }
        return images
    }

    private func decodeVendorName(_ s: inout JSONScanner, text: inout TextBuffer) throws(DecodeFailure) -> TextBuffer.Slice? {
        try s.beginObject()
        var name: TextBuffer.Slice?
        let vendorKeys = Self.vendorKeys
        var expected = vendorKeys.firstExpected
        var first = true
        while let key = try s.nextKey(&first, in: vendorKeys, expected: &expected) {
            do throws(DecodeFailure) {
                if key.field >= 0 {
                    name = try s.readOptionalText(into: &text)
                } else {
                    try s.skipValue()
                }
            } catch {
                throw error.under(s.keyName(key))
            }
        }
        return name
    }
}

extension Product {
    /// Takes `text` as the buffer of its text and its images' (the decoder's, once complete).
    fileprivate mutating func adopt(_ text: TextBuffer) {
        self.text = text
        for i in images.indices { images[i].text = text }
    }
}
