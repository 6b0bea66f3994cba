/// Decodes Bigwalk campaign objects: one object, or a bare array of them.
///
/// Validation: `id`, `name`, `status` (START/END), `ratio` (>= 0), `startDate`, `endDate`
/// (not before the start) and `categoryId` are required; counts are not negative. Zone-less
/// dates are read at ``utcOffsetSeconds`` (Korean time by default). `formattedStartDate` /
/// `formattedEndDate` (a 12-hour clock without AM/PM) are deliberately ignored.
public struct CampaignDecoder: Sendable {
    public var limits: DecodeLimits
    public var utcOffsetSeconds: Int

    public init(limits: DecodeLimits = .default, utcOffsetSeconds: Int = 9 * 3600) {
        self.limits = limits
        self.utcOffsetSeconds = utcOffsetSeconds
    }

    public func decode(_ bytes: [UInt8]) throws(DecodeFailure) -> [Campaign] { try decode(bytes[...]) }

    public func decode(_ bytes: ArraySlice<UInt8>) throws(DecodeFailure) -> [Campaign] {
        try JSONScanner.withScanner(bytes, limits: limits) { s throws(DecodeFailure) in
            guard try s.peek() == UInt8(ascii: "[") else { return [try decodeObject(&s)] }
            try s.beginArray()
            var out: [Campaign] = []
            var first = true
            while try s.nextElement(&first) {
                guard out.count < s.limits.maxArrayElements else { throw s.tooManyElements().under("$") }
                do throws(DecodeFailure) {
                    out.append(try decodeObject(&s))
                } catch {
                    throw error.under("[\(out.count)]")
                }
            }
            return out
        }
    }

    private enum Field: Int {
        case id, name, status, ratio, donatedSteps, goalPoint, participantCount, startDate, endDate, categoryId
        case organizations, campaignPromoter, my, small, medium, detail
    }

    private static let keys = KeyTable([
        ("id", Field.id.rawValue), ("name", Field.name.rawValue), ("status", Field.status.rawValue),
        ("ratio", Field.ratio.rawValue), ("donatedSteps", Field.donatedSteps.rawValue),
        ("goalPoint", Field.goalPoint.rawValue), ("participantCount", Field.participantCount.rawValue),
        ("startDate", Field.startDate.rawValue), ("endDate", Field.endDate.rawValue),
        ("categoryId", Field.categoryId.rawValue), ("organizations", Field.organizations.rawValue),
        ("campaignPromoter", Field.campaignPromoter.rawValue), ("my", Field.my.rawValue),
        ("smallListThumbnailImagePath", Field.small.rawValue), ("mediumListThumbnailImagePath", Field.medium.rawValue),
        ("detailThumbnailImagePath", Field.detail.rawValue),
    ])

    private enum MyField: Int { case donatedSteps, ranking, lastDonated, story }
    private static let myKeys = KeyTable([
        ("donatedSteps", MyField.donatedSteps.rawValue), ("ranking", MyField.ranking.rawValue),
        ("lastDonatedDateTime", MyField.lastDonated.rawValue), ("story", MyField.story.rawValue),
    ])
    private static let idKey = KeyTable([("id", 0)])
    private static let nameKey = KeyTable([("name", 0)])

    private func decodeObject(_ s: inout JSONScanner) throws(DecodeFailure) -> Campaign {
        try s.beginObject()
        var id: Int64?, name: String?, status: Campaign.Status?, ratio: Int64?
        var donatedSteps: Int64?, goalPoint: Int64?, participantCount: Int64?
        var startDate: Int64?, endDate: Int64?, categoryId: Int64?
        var organizations: [Int64] = []
        var promoter: String?, my: Campaign.Participation?
        var small: String?, medium: String?, detail: String?

        var first = true
        var expected = Self.keys.firstExpected
        while let key = try s.nextKey(&first, in: Self.keys, expected: &expected) {
            do throws(DecodeFailure) {
                guard let field = Field(rawValue: key.field) else {
                    try s.skipValue()
                    continue
                }
                switch field {
                case .id: id = try s.readOptionalInt()
                case .name: name = try s.readOptionalString()
                case .status:
                    if try s.consumeNull() { break }
                    let span = try s.readStringSpan()
                    if s.spanEquals(span, "START") { status = .start }
                    else if s.spanEquals(span, "END") { status = .end }
                    else { throw invalid("", "expected START or END") }
                case .ratio: ratio = try nonNegativeInt(&s)
                case .donatedSteps: donatedSteps = try nonNegativeInt(&s)
                case .goalPoint: goalPoint = try nonNegativeInt(&s)
                case .participantCount: participantCount = try nonNegativeInt(&s)
                case .startDate: startDate = try s.readDateTime(offsetSeconds: utcOffsetSeconds)
                case .endDate: endDate = try s.readDateTime(offsetSeconds: utcOffsetSeconds)
                case .categoryId: categoryId = try s.readOptionalInt()
                case .organizations:
                    if try s.consumeNull() { break }
                    organizations = try decodeIds(&s)
                case .campaignPromoter:
                    if try s.consumeNull() { break }
                    promoter = try decodeName(&s)
                case .my:
                    if try s.consumeNull() { break }
                    my = try decodeMy(&s)
                case .small: small = try s.readOptionalString()
                case .medium: medium = try s.readOptionalString()
                case .detail: detail = try s.readOptionalString()
                }
            } catch {
                throw error.under(s.keyName(key))
            }
        }
        guard let id else { throw missing("id") }
        guard let name, !name.isEmpty else { throw missing("name") }
        guard let status else { throw missing("status") }
        guard let ratio else { throw missing("ratio") }
        guard let startDate else { throw missing("startDate") }
        guard let endDate else { throw missing("endDate") }
        guard endDate >= startDate else { throw invalid("endDate", "endDate is before startDate") }
        guard let categoryId else { throw missing("categoryId") }
        return Campaign(
            id: id, name: name, status: status, ratio: ratio, donatedSteps: donatedSteps, goalPoint: goalPoint,
            participantCount: participantCount ?? 0, startDate: startDate, endDate: endDate, categoryId: categoryId,
            organizationIds: organizations, promoterName: promoter, thumbnail: medium ?? small ?? detail, my: my)
    }

    private func nonNegativeInt(_ s: inout JSONScanner) throws(DecodeFailure) -> Int64? {
        guard let v = try s.readOptionalInt() else { return nil }
        guard v >= 0 else { throw invalid("", "must not be negative, got \(v)") }
        return v
    }

    /// `[{id}, …]`
    private func decodeIds(_ s: inout JSONScanner) throws(DecodeFailure) -> [Int64] {
        try s.beginArray()
        var ids: [Int64] = []
        var first = true
        while try s.nextElement(&first) {
            guard ids.count < s.limits.maxArrayElements else { throw s.tooManyElements() }
            do throws(DecodeFailure) {
                try s.beginObject()
                var id: Int64?
                var firstKey = true
                var expected = Self.idKey.firstExpected
                while let key = try s.nextKey(&firstKey, in: Self.idKey, expected: &expected) {
                    if key.field >= 0 {
                        do throws(DecodeFailure) { id = try s.readOptionalInt() } catch { throw error.under("id") }
                    } else {
                        try s.skipValue()
                    }
                }
                guard let id else { throw missing("id") }
                ids.append(id)
            } catch {
                throw error.under("[\(ids.count)]")
            }
        }
        return ids
    }

    private func decodeName(_ s: inout JSONScanner) throws(DecodeFailure) -> String? {
        try s.beginObject()
        var name: String?
        var first = true
        var expected = Self.nameKey.firstExpected
        while let key = try s.nextKey(&first, in: Self.nameKey, expected: &expected) {
            if key.field >= 0 {
                do throws(DecodeFailure) { name = try s.readOptionalString() } catch { throw error.under("name") }
            } else {
                try s.skipValue()
            }
        }
        return name
    }

    private func decodeMy(_ s: inout JSONScanner) throws(DecodeFailure) -> Campaign.Participation {
        try s.beginObject()
        var steps: Int64?, ranking: Int64?, last: Int64?, story = false
        var first = true
        var expected = Self.myKeys.firstExpected
        while let key = try s.nextKey(&first, in: Self.myKeys, expected: &expected) {
            do throws(DecodeFailure) {
                switch MyField(rawValue: key.field) {
                case .donatedSteps: steps = try nonNegativeInt(&s)
                case .ranking: ranking = try s.readOptionalInt()
                case .lastDonated: last = try s.readDateTime(offsetSeconds: utcOffsetSeconds)
                case .story:
                    // The API's shape for a story varies (flag, text, object): any non-empty value
                    // means the result story is published; null, false and "" mean it is not.
                    switch try s.peek() {
                    case UInt8(ascii: "t"), UInt8(ascii: "f"): story = try s.readBool()
                    case UInt8(ascii: "n"): _ = try s.consumeNull(); story = false
                    case UInt8(ascii: "\""): story = !(try s.readString().isEmpty)
                    case UInt8(ascii: "{"), UInt8(ascii: "["): try s.skipValue(); story = true
                    default: throw s.wrongType("boolean, string or object")
                    }
                case nil: try s.skipValue()
                }
            } catch {
                throw error.under(s.keyName(key))
            }
        }
        return Campaign.Participation(donatedSteps: steps ?? 0, ranking: ranking, lastDonatedAt: last, storyPublished: story)
    }
}
