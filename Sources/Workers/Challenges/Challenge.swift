/// A calendar date without time or zone (Java's `LocalDate`), as days since 1970-01-01.
public struct CalendarDay: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var daysSinceEpoch: Int

    public init(daysSinceEpoch: Int) { self.daysSinceEpoch = daysSinceEpoch }

    public init?(year: Int, month: Int, day: Int) {
        guard (1...9999).contains(year), (1...12).contains(month), day >= 1, day <= LocalDateTime.daysInMonth(year, month)
        else { return nil }
        daysSinceEpoch = LocalDateTime.daysFromCivil(year, month, day)
    }

    /// The day `now` (epoch ms) falls on at `offsetSeconds` from UTC.
    public init(epochMillis now: Int64, offsetSeconds: Int) {
        let local = now.saturatingAdd(Int64(offsetSeconds) * 1000)
        var days = local / 86_400_000
        if local % 86_400_000 < 0 { days -= 1 }
        daysSinceEpoch = Int(clamping: days)
    }

    /// Reads `yyyy-MM-dd` (Spring's default for `LocalDate`) or `yy.MM.dd` (the iOS client's
    /// format; years 2000–2099).
    static func parse(_ raw: UnsafeRawBufferPointer) -> CalendarDay? {
        func digits(_ from: Int, _ len: Int) -> Int? {
            var v = 0
            for i in from..<(from + len) {
                let d = raw[i] &- 0x30
                guard d < 10 else { return nil }
                v = v * 10 + Int(d)
            }
            return v
        }
        if raw.count == 10, raw[4] == UInt8(ascii: "-"), raw[7] == UInt8(ascii: "-"),
            let y = digits(0, 4), let m = digits(5, 2), let d = digits(8, 2)
        {
            return CalendarDay(year: y, month: m, day: d)
        }
        if raw.count == 8, raw[2] == UInt8(ascii: "."), raw[5] == UInt8(ascii: "."),
            let y = digits(0, 2), let m = digits(3, 2), let d = digits(6, 2)
        {
            return CalendarDay(year: 2000 + y, month: m, day: d)
        }
        return nil
    }

    public func adding(days: Int) -> CalendarDay { CalendarDay(daysSinceEpoch: daysSinceEpoch &+ days) }

    /// Epoch ms of this day's midnight at `offsetSeconds` from UTC.
    /// Saturates instead of trapping for days no date string can name (clocks at `Int64.min`).
    public func startMillis(offsetSeconds: Int) -> Int64 {
        let (ms, overflow) = Int64(daysSinceEpoch).multipliedReportingOverflow(by: 86_400_000)
        if overflow { return daysSinceEpoch < 0 ? .min : .max }
        return ms.saturatingSub(Int64(offsetSeconds) * 1000)
    }

    /// `yyyy-MM-dd`.
    public var description: String {
        let (y, m, d) = LocalDateTime.civilFromDays(daysSinceEpoch)
        func pad(_ v: Int, _ w: Int) -> String {
            let s = String(v)
            return s.count >= w ? s : String(repeating: "0", count: w - s.count) + s
        }
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))"
    }

    public static func < (a: CalendarDay, b: CalendarDay) -> Bool { a.daysSinceEpoch < b.daysSinceEpoch }
}

/// `categoryId`: what the challenge is about.
public enum ChallengeCategory: Int64, Sendable, Hashable, Codable, CaseIterable {
    case living = 1, food, transport, shopping, hobby
}

/// A no-spend challenge (`ChallengeResponse`): always one against one, the leader (creator)
/// and one competitor.
public struct Challenge: Sendable, Hashable, Codable {
    public var id: Int64
    public var leaderId: Int64
    /// Nil until someone joins.
    public var competitorId: Int64?
    public var title: String
    public var content: String?
    /// Target in won (KRW; the API has no currency field).
    public var targetAmount: Int64
    public var category: ChallengeCategory
    public var startDate: CalendarDay
    /// Length in days (default 7).
    public var term: Int

    public init(
        id: Int64, leaderId: Int64, competitorId: Int64? = nil, title: String, content: String? = nil,
        targetAmount: Int64, category: ChallengeCategory, startDate: CalendarDay, term: Int = 7
    ) {
        self.id = id
        self.leaderId = leaderId
        self.competitorId = competitorId
        self.title = title
        self.content = content
        self.targetAmount = targetAmount
        self.category = category
        self.startDate = startDate
        self.term = term
    }

    /// The first day after the term; the result is due at its midnight.
    public var endDay: CalendarDay { startDate.adding(days: term) }

    /// The API's shape (`winnerId`, `recordId`, `endDate` are never filled upstream and are omitted).
    public func jsonBytes() -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.key("id"); w.int(id)
        w.key("leaderId"); w.int(leaderId)
        w.key("competitorId"); w.optional(competitorId)
        w.key("title"); w.string(title)
        if let content { w.key("content"); w.string(content) }
        w.key("targetAmount"); w.int(targetAmount)
        w.key("categoryId"); w.int(category.rawValue)
        w.key("startDate"); w.string(startDate.description)
        w.key("term"); w.int(term)
        w.endObject()
        return w.bytes
    }
}

/// A spending proof: what a participant spent on one day, with photos.
public struct SpendingRecord: Sendable, Hashable, Codable {
    public var recordId: Int64
    public var challengeId: Int64
    public var userId: Int64
    public var title: String
    public var content: String?
    /// Won, not negative.
    public var cost: Int64
    /// Full image URLs (S3).
    public var images: [String]
    /// The day spent (the server's today when it was recorded).
    public var date: CalendarDay
    /// Hidden once reported.
    public var hidden: Bool

    public init(
        recordId: Int64, challengeId: Int64, userId: Int64, title: String, content: String? = nil, cost: Int64,
        images: [String] = [], date: CalendarDay, hidden: Bool = false
    ) {
        self.recordId = recordId
        self.challengeId = challengeId
        self.userId = userId
        self.title = title
        self.content = content
        self.cost = cost
        self.images = images
        self.date = date
        self.hidden = hidden
    }

    public func jsonBytes() -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.key("recordId"); w.int(recordId)
        w.key("challengeId"); w.int(challengeId)
        w.key("userId"); w.int(userId)
        w.key("title"); w.string(title)
        if let content { w.key("content"); w.string(content) }
        w.key("cost"); w.int(cost)
        w.key("image"); w.beginArray(); for i in images { w.string(i) }; w.endArray()
        w.key("date"); w.string(date.description)
        w.key("hide"); w.bool(hidden)
        w.endObject()
        return w.bytes
    }
}

/// One typed event from the iGoMoney stream.
public enum ChallengeEvent: Sendable, Hashable, Codable {
    /// A challenge as the API returns it (created, or read again): an upsert by id.
    case challenge(Challenge)
    /// `POST challenges/apply/{challengeId}/{userId}`: a competitor joined.
    case joined(challengeId: Int64, userId: Int64)
    /// `POST challenges/giveup/{userId}`: the user gave up their active challenge.
    case gaveUp(userId: Int64)
    /// A spending record (created or edited): an upsert by record id.
    case record(SpendingRecord)
    /// `DELETE records/delete/{id}`.
    case recordDeleted(recordId: Int64)

    /// Record key: the challenge id when the event names one, else `user-<id>` / `record-<id>`.
    public var key: String {
        switch self {
        case .challenge(let c): return String(c.id)
        case .joined(let c, _): return String(c)
        case .record(let r): return String(r.challengeId)
        case .gaveUp(let u): return "user-\(u)"
        case .recordDeleted(let r): return "record-\(r)"
        }
    }

    public var kind: String {
        switch self {
        case .challenge: return "challenge"
        case .joined: return "joined"
        case .gaveUp: return "gave-up"
        case .record: return "record"
        case .recordDeleted: return "record-deleted"
        }
    }

    /// An upstream shape ``ChallengeDecoder`` reads back to the same event (path-only requests as
    /// `{"method","path"}` captures).
    public func jsonBytes() -> [UInt8] {
        func request(_ method: String, _ path: String) -> [UInt8] {
            var w = JSONWriter()
            w.beginObject(); w.key("method"); w.string(method); w.key("path"); w.string(path); w.endObject()
            return w.bytes
        }
        switch self {
        case .challenge(let c): return c.jsonBytes()
        case .record(let r): return r.jsonBytes()
        case .joined(let c, let u): return request("POST", "challenges/apply/\(c)/\(u)")
        case .gaveUp(let u): return request("POST", "challenges/giveup/\(u)")
        case .recordDeleted(let r): return request("DELETE", "records/delete/\(r)")
        }
    }
}
