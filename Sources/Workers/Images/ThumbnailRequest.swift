/// One source image that needs thumbnails: what it belongs to and where it is.
///
/// Request transforms (`products.thumbnails`, `challenges.thumbnails`, `hangouts.thumbnails`) emit
/// one per image on `thumbnails.requests`, keyed by the owner (product id, `record-<id>`,
/// `hangout-<id>`), so the requests of
/// one owner stay in order on one partition. The thumbnail worker renders every size its
/// topology configures: sizes belong to the worker, not to the request.
///
/// JSON: `{"owner":"product","owner_id":"522","image_index":0,"source_url":"…","dedupe_key":"…"}`.
public struct ThumbnailRequest: Sendable, Hashable {
    /// What kind of item the image belongs to.
    public enum Owner: String, Sendable, Hashable, CaseIterable {
        /// A marketplace product post.
        case product
        /// A no-spend challenge spending record (its proof photos).
        case record
        /// A meetup (its cover image).
        case hangout
    }

    public var owner: Owner
    public var ownerId: String
    /// Position of the image in the owner's image list (0 is the cover / list image).
    public var imageIndex: Int
    public var sourceURL: String
    /// `thumb:<owner>:<id>:<index>:<url hash>`: the same for the same image, new when the URL changes.
    public var dedupeKey: String

    public init(owner: Owner, ownerId: String, imageIndex: Int, sourceURL: String) {
        self.owner = owner
        self.ownerId = ownerId
        self.imageIndex = imageIndex
        self.sourceURL = sourceURL
        self.dedupeKey = "thumb:\(owner.rawValue):\(ownerId):\(imageIndex):\(stableHash(sourceURL))"
    }

    /// The record key requests and ready events of this owner travel under.
    public var recordKey: String {
        switch owner {
        case .product: ownerId
        case .record: "record-\(ownerId)"
        case .hangout: "hangout-\(ownerId)"
        }
    }

    /// The request as a `thumbnails.requests` output record.
    public func outputRecord() -> OutputRecord {
        OutputRecord(output: "thumbnails.requests", key: Array(recordKey.utf8), value: jsonBytes(), dedupeKey: dedupeKey)
    }

    public func jsonBytes() -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.key("owner"); w.string(owner.rawValue)
        w.key("owner_id"); w.string(ownerId)
        w.key("image_index"); w.int(imageIndex)
        w.key("source_url"); w.string(sourceURL)
        w.key("dedupe_key"); w.string(dedupeKey)
        w.endObject()
        return w.bytes
    }

    private enum Field: Int { case owner, ownerId, imageIndex, sourceURL, dedupeKey }
    private static let keys = KeyTable([
        ("owner", Field.owner.rawValue), ("owner_id", Field.ownerId.rawValue), ("image_index", Field.imageIndex.rawValue),
        ("source_url", Field.sourceURL.rawValue), ("dedupe_key", Field.dedupeKey.rawValue),
    ])

    /// Reads a request; the dedupe key is recomputed (one definition), a sent one is ignored.
    public static func decode(_ bytes: [UInt8], limits: DecodeLimits = .default) throws(DecodeFailure) -> ThumbnailRequest {
        try decode(bytes[...], limits: limits)
    }

    /// ``decode(_:limits:)-([UInt8],_)`` over a slice (a consumed record's value).
    public static func decode(_ bytes: ArraySlice<UInt8>, limits: DecodeLimits = .default) throws(DecodeFailure) -> ThumbnailRequest {
        try JSONScanner.withScanner(bytes, limits: limits) { s throws(DecodeFailure) in
            try s.beginObject()
            var owner: String?, ownerId: String?, index: Int64?, url: String?
            var first = true
            var expected = Self.keys.firstExpected
            while let key = try s.nextKey(&first, in: Self.keys, expected: &expected) {
                do throws(DecodeFailure) {
                    switch Field(rawValue: key.field) {
                    case .owner: owner = try s.readOptionalString()
                    case .ownerId: ownerId = try s.readOptionalString()
                    case .imageIndex: index = try s.readOptionalInt()
                    case .sourceURL: url = try s.readOptionalString()
                    case .dedupeKey, nil: try s.skipValue()
                    }
                } catch {
                    throw error.under(s.keyName(key))
                }
            }
            guard let owner else { throw missing("owner") }
            guard let kind = Owner(rawValue: owner) else {
                throw invalid("owner", "expected one of \(Owner.allCases.map(\.rawValue).joined(separator: ", ")), got \(owner.prefix(40))")
            }
            guard let ownerId, !ownerId.isEmpty else { throw missing("owner_id") }
            guard let index else { throw missing("image_index") }
            guard (0...1_000).contains(index) else { throw invalid("image_index", "must be 0...1000, got \(index)") }
            guard let url, !url.isEmpty else { throw missing("source_url") }
            return ThumbnailRequest(owner: kind, ownerId: ownerId, imageIndex: Int(index), sourceURL: url)
        }
    }
}

/// What transforms downstream of the thumbnail worker read from a `thumbnails.ready` event: whose
/// image it is and where each size is stored (`name` → `uri`).
public struct ThumbnailReady: Sendable, Hashable {
    public var owner: String
    public var ownerId: String
    public var imageIndex: Int
    /// Size name → URI of the stored thumbnail.
    public var uris: [String: String]

    private enum Field: Int { case owner, ownerId, imageIndex, thumbnails }
    private static let keys = KeyTable([
        ("owner", Field.owner.rawValue), ("owner_id", Field.ownerId.rawValue), ("image_index", Field.imageIndex.rawValue),
        ("thumbnails", Field.thumbnails.rawValue),
    ])
    private enum ThumbField: Int { case name, uri }
    private static let thumbKeys = KeyTable([("name", ThumbField.name.rawValue), ("uri", ThumbField.uri.rawValue)])

    public static func decode(_ bytes: [UInt8], limits: DecodeLimits = .default) throws(DecodeFailure) -> ThumbnailReady {
        try decode(bytes[...], limits: limits)
    }

    /// ``decode(_:limits:)-([UInt8],_)`` over a slice (a consumed record's value).
    public static func decode(_ bytes: ArraySlice<UInt8>, limits: DecodeLimits = .default) throws(DecodeFailure) -> ThumbnailReady {
        try JSONScanner.withScanner(bytes, limits: limits) { s throws(DecodeFailure) in
            try s.beginObject()
            var owner: String?, ownerId: String?, index: Int64?
            var uris: [String: String] = [:]
            var first = true
            var expected = Self.keys.firstExpected
            while let key = try s.nextKey(&first, in: Self.keys, expected: &expected) {
                do throws(DecodeFailure) {
                    switch Field(rawValue: key.field) {
                    case .owner: owner = try s.readOptionalString()
                    case .ownerId: ownerId = try s.readOptionalString()
                    case .imageIndex: index = try s.readOptionalInt()
                    case .thumbnails:
                        try s.beginArray()
                        var firstThumb = true
                        while try s.nextElement(&firstThumb) {
                            try s.beginObject()
                            var name: String?, uri: String?
                            var firstField = true
                            var expectedField = Self.thumbKeys.firstExpected
                            while let k = try s.nextKey(&firstField, in: Self.thumbKeys, expected: &expectedField) {
                                switch ThumbField(rawValue: k.field) {
                                case .name: name = try s.readOptionalString()
                                case .uri: uri = try s.readOptionalString()
                                case nil: try s.skipValue()
                                }
                            }
                            if let name, let uri { uris[name] = uri }
                        }
                    case nil: try s.skipValue()
                    }
                } catch {
                    throw error.under(s.keyName(key))
                }
            }
            guard let owner else { throw missing("owner") }
            guard let ownerId else { throw missing("owner_id") }
            guard let index else { throw missing("image_index") }
            return ThumbnailReady(owner: owner, ownerId: ownerId, imageIndex: Int(index), uris: uris)
        }
    }
}
