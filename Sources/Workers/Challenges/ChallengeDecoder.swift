/// Decodes the iGoMoney stream (formats.md §5) into ``ChallengeEvent``s: one object or a bare
/// array of them (the API has no envelope), each a challenge (`ChallengeResponse`, or the
/// create form with its new `id`), a spending record, or a captured path-only request
/// `{"method","path"}`: `POST challenges/apply/{challengeId}/{userId}` (join),
/// `POST challenges/giveup/{userId}`, `DELETE records/delete/{id}`.
///
/// Quirks accepted: numbers as strings (form-urlencoded and multipart writes), the client's
/// `targetMoney` for `targetAmount` and `image[]` for `image` (a list, or one URL), the create
/// form's `userId` for `leaderId`, dates as `yyyy-MM-dd` (Spring's `LocalDate` default) or the
/// iOS client's `yy.MM.dd`, request paths with leading or trailing slashes. Not guessed: a
/// client edit (`PATCH records/edit`) puts the challenge id into `recordId`, so it cannot name
/// its record and fails; error bodies (`{timestamp,status,error,code,detail}`) fail.
///
/// Validation: ids are integers; amounts (`targetAmount`, `cost`) are non-negative integers;
/// `categoryId` is 1–5; `term` is 1–365 days (default 7); the competitor is not the leader;
/// image URLs are http(s).
public struct ChallengeDecoder: Sendable {
    public var limits: DecodeLimits

    public init(limits: DecodeLimits = .default) { self.limits = limits }

    public func decode(_ bytes: [UInt8]) throws(DecodeFailure) -> [ChallengeEvent] { try decode(bytes[...]) }

    public func decode(_ bytes: ArraySlice<UInt8>) throws(DecodeFailure) -> [ChallengeEvent] {
        try JSONScanner.withScanner(bytes, limits: limits) { s throws(DecodeFailure) in
            guard try s.peek() == UInt8(ascii: "[") else { return [try event(try readObject(&s, path: ""))] }
            try s.beginArray()
            var out: [ChallengeEvent] = []
            var first = true
            while try s.nextElement(&first) {
                guard out.count < s.limits.maxArrayElements else { throw s.tooManyElements().under("$") }
                let path = "[\(out.count)]"
                do throws(DecodeFailure) {
                    out.append(try event(try readObject(&s, path: path)))
                } catch {
                    // Scanning failures carry a path relative to the element; validation ones are complete.
                    throw error.field.hasPrefix(path) ? error : error.under(path)
                }
            }
            return out
        }
    }

    private struct Raw {
        var path: String
        var id: Int64?, leaderId: Int64?, competitorId: Int64?, userId: Int64?, challengeId: Int64?, recordId: Int64?
        var title: String?, content: String?, targetAmount: Int64?, categoryId: Int64?, startDate: CalendarDay?
        var term: Int64?, cost: Int64?, images: [String]?, date: CalendarDay?, hide: Bool?
        var method: String?, requestPath: String?, sawError = false

        init(path: String) { self.path = path }
        func field(_ name: String) -> String { path.isEmpty ? name : path + "." + name }
    }

    private enum Field: Int {
        case id, leaderId, competitorId, userId, challengeId, recordId, title, content, targetAmount, categoryId
        case startDate, term, cost, image, date, hide, method, path, form, error, ignored
    }

    private static let keys = KeyTable([
        ("id", Field.id.rawValue), ("leaderId", Field.leaderId.rawValue), ("competitorId", Field.competitorId.rawValue),
        ("userId", Field.userId.rawValue), ("challengeId", Field.challengeId.rawValue),
        ("recordId", Field.recordId.rawValue), ("title", Field.title.rawValue), ("content", Field.content.rawValue),
        ("targetAmount", Field.targetAmount.rawValue), ("targetMoney", Field.targetAmount.rawValue),
        ("categoryId", Field.categoryId.rawValue), ("startDate", Field.startDate.rawValue), ("term", Field.term.rawValue),
        ("cost", Field.cost.rawValue), ("image", Field.image.rawValue), ("image[]", Field.image.rawValue),
        ("date", Field.date.rawValue), ("hide", Field.hide.rawValue), ("method", Field.method.rawValue),
        ("path", Field.path.rawValue), ("form", Field.form.rawValue), ("error", Field.error.rawValue),
        ("timestamp", Field.error.rawValue),
        // Present in ChallengeResponse but never filled upstream.
        ("winnerId", Field.ignored.rawValue), ("endDate", Field.ignored.rawValue),
    ])

    private func readObject(_ s: inout JSONScanner, path: String) throws(DecodeFailure) -> Raw {
        var raw = Raw(path: path)
        try readFields(&s, into: &raw)
        return raw
    }

    private func readFields(_ s: inout JSONScanner, into raw: inout Raw) throws(DecodeFailure) {
        try s.beginObject()
        var first = true
        var expected = Self.keys.firstExpected
        while let key = try s.nextKey(&first, in: Self.keys, expected: &expected) {
            do throws(DecodeFailure) {
                guard let field = Field(rawValue: key.field) else {
                    try s.skipValue()
                    continue
                }
                switch field {
                case .id: raw.id = try readInt(&s)
                case .leaderId: raw.leaderId = try readInt(&s)
                case .competitorId: raw.competitorId = try readInt(&s)
                case .userId: raw.userId = try readInt(&s)
                case .challengeId: raw.challengeId = try readInt(&s)
                case .recordId: raw.recordId = try readInt(&s)
                case .title: raw.title = try s.readOptionalString()
                case .content: raw.content = try s.readOptionalString()
                case .targetAmount: raw.targetAmount = try readAmount(&s)
                case .categoryId: raw.categoryId = try readInt(&s)
                case .startDate: raw.startDate = try readDay(&s)
                case .term: raw.term = try readInt(&s)
                case .cost: raw.cost = try readAmount(&s)
                case .image: raw.images = try readImages(&s)
                case .date: raw.date = try readDay(&s)
                case .hide: raw.hide = try readFlexBool(&s)
                case .method: raw.method = try s.readOptionalString()
                case .path: raw.requestPath = try s.readOptionalString()
                case .form:
                    if try s.consumeNull() { break }
                    try readFields(&s, into: &raw)
                case .error: raw.sawError = true; try s.skipValue()
                case .ignored: try s.skipValue()
                }
            } catch {
                throw error.under(s.keyName(key))
            }
        }
    }

    // MARK: Values

    /// An integer, or a string holding one (form values travel as text).
    private func readInt(_ s: inout JSONScanner) throws(DecodeFailure) -> Int64? {
        guard try s.peek() == UInt8(ascii: "\"") else { return try s.readOptionalInt() }
        let text = try s.readString()
        guard let v = Int64(text) else { throw invalid("", "expected an integer, got \(text.prefix(40))") }
        return v
    }

    private func readAmount(_ s: inout JSONScanner) throws(DecodeFailure) -> Int64? {
        guard let v = try readInt(&s) else { return nil }
        guard v >= 0 else { throw invalid("", "must not be negative, got \(v)") }
        return v
    }

    private func readFlexBool(_ s: inout JSONScanner) throws(DecodeFailure) -> Bool? {
        guard try s.peek() == UInt8(ascii: "\"") else { return try s.readOptionalBool() }
        switch try s.readString() {
        case "true": return true
        case "false": return false
        case let other: throw invalid("", "expected true or false, got \(other.prefix(20))")
        }
    }

    private func readDay(_ s: inout JSONScanner) throws(DecodeFailure) -> CalendarDay? {
        if try s.consumeNull() { return nil }
        return try s.withStringBytes { raw throws(DecodeFailure) in
            guard let day = CalendarDay.parse(raw) else {
                throw invalid("", "expected yyyy-MM-dd or yy.MM.dd, got \(String(decoding: raw.prefix(40), as: UTF8.self))")
            }
            return day
        }
    }

    private func readImages(_ s: inout JSONScanner) throws(DecodeFailure) -> [String] {
        func checked(_ url: String) throws(DecodeFailure) -> String {
            guard url.hasPrefix("https://") || url.hasPrefix("http://") else {
                throw invalid("", "expected an http(s) URL, got \(url.prefix(60))")
            }
            return url
        }
        switch try s.peek() {
        case UInt8(ascii: "n"): _ = try s.consumeNull(); return []
        case UInt8(ascii: "\""): return [try checked(try s.readString())]
        default:
            try s.beginArray()
            var out: [String] = []
            var first = true
            while try s.nextElement(&first) {
                guard out.count < s.limits.maxArrayElements else { throw s.tooManyElements() }
                do throws(DecodeFailure) { out.append(try checked(try s.readString())) } catch {
                    throw error.under("[\(out.count)]")
                }
            }
            return out
        }
    }

    // MARK: Events

    private func event(_ raw: Raw) throws(DecodeFailure) -> ChallengeEvent {
        let whole = raw.path.isEmpty ? "$" : raw.path
        if raw.method != nil || raw.requestPath != nil { return try request(raw) }
        if raw.sawError { throw invalid(whole, "an error response carries no event") }
        if raw.cost != nil || raw.challengeId != nil { return .record(try record(raw)) }
        if raw.leaderId != nil || raw.targetAmount != nil || raw.startDate != nil || raw.categoryId != nil {
            return .challenge(try challenge(raw))
        }
        throw invalid(whole, "not a challenge, spending record or request")
    }

    private func challenge(_ raw: Raw) throws(DecodeFailure) -> Challenge {
        guard let id = raw.id else { throw missing(raw.field("id")) }
        guard let leader = raw.leaderId ?? raw.userId else { throw missing(raw.field("leaderId")) }
        guard let title = raw.title, !title.isEmpty else { throw missing(raw.field("title")) }
        guard let target = raw.targetAmount else { throw missing(raw.field("targetAmount")) }
        guard let categoryId = raw.categoryId else { throw missing(raw.field("categoryId")) }
        guard let category = ChallengeCategory(rawValue: categoryId) else {
            throw invalid(raw.field("categoryId"), "expected 1 to 5, got \(categoryId)")
        }
        guard let start = raw.startDate else { throw missing(raw.field("startDate")) }
        let term = raw.term ?? 7
        guard (1...365).contains(term) else { throw invalid(raw.field("term"), "expected 1 to 365 days, got \(term)") }
        if let c = raw.competitorId, c == leader {
            throw invalid(raw.field("competitorId"), "the competitor is the leader")
        }
        return Challenge(
            id: id, leaderId: leader, competitorId: raw.competitorId, title: title, content: raw.content,
            targetAmount: target, category: category, startDate: start, term: Int(term))
    }

    private func record(_ raw: Raw) throws(DecodeFailure) -> SpendingRecord {
        guard let recordId = raw.recordId else { throw missing(raw.field("recordId")) }
        guard let challengeId = raw.challengeId else { throw missing(raw.field("challengeId")) }
        guard let userId = raw.userId else { throw missing(raw.field("userId")) }
        guard let title = raw.title else { throw missing(raw.field("title")) }
        guard let cost = raw.cost else { throw missing(raw.field("cost")) }
        guard let date = raw.date else { throw missing(raw.field("date")) }
        return SpendingRecord(
            recordId: recordId, challengeId: challengeId, userId: userId, title: title, content: raw.content, cost: cost,
            images: raw.images ?? [], date: date, hidden: raw.hide ?? false)
    }

    private func request(_ raw: Raw) throws(DecodeFailure) -> ChallengeEvent {
        guard let method = raw.method?.uppercased() else { throw missing(raw.field("method")) }
        guard let path = raw.requestPath else { throw missing(raw.field("path")) }
        let parts = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        func id(_ i: Int) throws(DecodeFailure) -> Int64 {
            guard let v = Int64(parts[i]) else { throw invalid(raw.field("path"), "expected a numeric id, got \(parts[i].prefix(20))") }
            return v
        }
        switch (method, parts.count, parts.first, parts.count > 1 ? parts[1] : "") {
        case ("POST", 4, "challenges", "apply"): return .joined(challengeId: try id(2), userId: try id(3))
        case ("POST", 3, "challenges", "giveup"): return .gaveUp(userId: try id(2))
        case ("DELETE", 3, "records", "delete"): return .recordDeleted(recordId: try id(2))
        case ("PATCH", 2, "records", "edit"):
            throw invalid(raw.field("recordId"), "the client's edit puts the challenge id into recordId: the record is unknown")
        default:
            throw invalid(raw.field("path"), "unsupported request \(method) \(path.prefix(60))")
        }
    }
}
