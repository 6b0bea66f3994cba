/// A validated Bigwalk walking-donation campaign.
public struct Campaign: Sendable, Hashable, Codable {
    public enum Status: String, Sendable, Hashable, Codable { case start = "START", end = "END" }

    /// The requesting user's participation (`my`), present when the API was called for a user.
    public struct Participation: Sendable, Hashable, Codable {
        public var donatedSteps: Int64
        public var ranking: Int64?
        /// Epoch ms.
        public var lastDonatedAt: Int64?
        /// The campaign's result story is published (`my.story` is true, a non-empty string or an object).
        public var storyPublished: Bool

        public init(donatedSteps: Int64, ranking: Int64? = nil, lastDonatedAt: Int64? = nil, storyPublished: Bool = false) {
            self.donatedSteps = donatedSteps
            self.ranking = ranking
            self.lastDonatedAt = lastDonatedAt
            self.storyPublished = storyPublished
        }
    }

    public var id: Int64
    public var name: String
    /// START while running, END once finished.
    public var status: Status
    /// Integer percent of the goal; can exceed 100.
    public var ratio: Int64
    /// Steps donated so far.
    public var donatedSteps: Int64?
    /// Goal in points (steps).
    public var goalPoint: Int64?
    public var participantCount: Int64
    /// Epoch ms (upstream: Korean local time without a zone).
    public var startDate: Int64
    public var endDate: Int64
    /// Upstream category; ``CampaignFeedTransform/categories`` maps it to a tab.
    public var categoryId: Int64
    /// Empty: public campaign; non-empty: corporate.
    public var organizationIds: [Int64]
    /// `campaignPromoter.name`.
    public var promoterName: String?
    /// Medium list thumbnail, else small, else detail.
    public var thumbnail: String?
    /// `my`: the requesting user's participation, when the API was called for a user.
    public var my: Participation?

    public init(
        id: Int64, name: String, status: Status, ratio: Int64, donatedSteps: Int64? = nil, goalPoint: Int64? = nil,
        participantCount: Int64 = 0, startDate: Int64, endDate: Int64, categoryId: Int64,
        organizationIds: [Int64] = [], promoterName: String? = nil, thumbnail: String? = nil, my: Participation? = nil
    ) {
        self.id = id
        self.name = name
        self.status = status
        self.ratio = ratio
        self.donatedSteps = donatedSteps
        self.goalPoint = goalPoint
        self.participantCount = participantCount
        self.startDate = startDate
        self.endDate = endDate
        self.categoryId = categoryId
        self.organizationIds = organizationIds
        self.promoterName = promoterName
        self.thumbnail = thumbnail
        self.my = my
    }

    public var isCorporate: Bool { !organizationIds.isEmpty }
    /// Shown on top of the feed: running and not past its end at `now`.
    public func isOngoing(at now: Int64) -> Bool { status == .start && endDate > now }
    /// The "result posted" badge.
    public func resultPosted(at now: Int64) -> Bool { !isOngoing(at: now) && (my?.storyPublished ?? false) }

    /// camelCase JSON like the API, dates in UTC with `Z` (the decoder reads it back unchanged).
    public func jsonBytes() -> [UInt8] {
        var w = JSONWriter(capacity: 400)
        write(to: &w)
        return w.bytes
    }

    func write(to w: inout JSONWriter) {
        w.beginObject()
        w.key("id"); w.int(id)
        w.key("name"); w.string(name)
        w.key("status"); w.string(status.rawValue)
        w.key("ratio"); w.int(ratio)
        if let donatedSteps { w.key("donatedSteps"); w.int(donatedSteps) }
        if let goalPoint { w.key("goalPoint"); w.int(goalPoint) }
        w.key("participantCount"); w.int(participantCount)
        w.key("startDate"); w.string(LocalDateTime.isoUTC(startDate))
        w.key("endDate"); w.string(LocalDateTime.isoUTC(endDate))
        w.key("categoryId"); w.int(categoryId)
        w.key("organizations")
        w.beginArray()
        for o in organizationIds { w.beginObject(); w.key("id"); w.int(o); w.endObject() }
        w.endArray()
        if let promoterName { w.key("campaignPromoter"); w.beginObject(); w.key("name"); w.string(promoterName); w.endObject() }
        if let thumbnail { w.key("mediumListThumbnailImagePath"); w.string(thumbnail) }
        if let my {
            w.key("my")
            w.beginObject()
            w.key("donatedSteps"); w.int(my.donatedSteps)
            if let r = my.ranking { w.key("ranking"); w.int(r) }
            if let l = my.lastDonatedAt { w.key("lastDonatedDateTime"); w.string(LocalDateTime.isoUTC(l)) }
            w.key("story"); w.bool(my.storyPublished)
            w.endObject()
        }
        w.endObject()
    }
}
