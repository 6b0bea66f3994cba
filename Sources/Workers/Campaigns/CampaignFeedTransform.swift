/// The seven category tabs of the campaign list.
public enum FeedCategory: String, Sendable, Hashable, Codable, CaseIterable {
    case all, animals, children, elderly, environment, disabilities, global
}

/// Public (no organizations) or corporate (some).
public enum FeedSegment: String, Sendable, Hashable, Codable, CaseIterable {
    case `public`, corporate
}

/// One row of a feed snapshot.
public struct FeedEntry: Sendable, Hashable, Codable {
    public var id: Int64
    public var name: String
    public var ratio: Int64
    public var ongoing: Bool
    /// Completed and its result story is published.
    public var resultPosted: Bool
    public var endDate: Int64
    public var thumbnail: String?
}

/// The feed's order: ongoing campaigns first, then ascending participation ratio, then id.
public func feedOrder(_ a: Campaign, _ b: Campaign, now: Int64) -> Bool {
    let ao = a.isOngoing(at: now), bo = b.isOngoing(at: now)
    if ao != bo { return ao }
    if a.ratio != b.ratio { return a.ratio < b.ratio }
    return a.id < b.id
}

/// `campaigns.feed`: keeps, for each segment × category, the ordered top-N feed the app shows
/// and emits a new snapshot (output `campaigns.feed`, key `segment/category`) only when it
/// changes; also the "campaigns I took part in" list per user (output `campaigns.mine`, key:
/// user) when the record identifies the user (``UserSource``) and the campaign's `my` shows
/// donated steps.
///
/// "Ongoing" is judged at ``TransformContext/now`` (the event time). Campaign updates are upserts
/// by id, newest record timestamp wins, so redelivery changes nothing and emits nothing.
public struct CampaignFeedTransform: Transform {
    /// Where the user of a "my campaigns" event comes from.
    public enum UserSource: Sendable, Hashable, Codable {
        case header(String)
        case key
    }

    public struct State: Codable, Sendable, Equatable {
        public var campaigns: [Int64: Campaign] = [:]
        /// Campaign id → timestamp of the record its current version came from.
        public var versions: [Int64: Int64] = [:]
        /// `segment/category` → last emitted snapshot.
        public var feeds: [String: [FeedEntry]] = [:]
        /// user → campaign ids taken part in.
        public var participation: [String: Set<Int64>] = [:]
        /// user → last emitted list.
        public var mine: [String: [FeedEntry]] = [:]
        public init() {}
    }

    public var topN: Int
    /// `categoryId` → tab; ids not listed appear only under `all`.
    public var categories: [Int64: FeedCategory]
    public var user: UserSource
    public var decoder: CampaignDecoder

    public static let defaultCategories: [Int64: FeedCategory] = [
        1: .animals, 2: .children, 3: .elderly, 4: .environment, 5: .disabilities, 6: .global,
    ]

    public init(
        topN: Int = 60, categories: [Int64: FeedCategory] = CampaignFeedTransform.defaultCategories,
        user: UserSource = .header("user-id"), decoder: CampaignDecoder = CampaignDecoder()
    ) {
        self.topN = topN
        self.categories = categories
        self.user = user
        self.decoder = decoder
    }

    public var name: String { "campaigns.feed" }
    public var initialState: State { State() }

    public func process(_ record: InputRecord, state: inout State, context: TransformContext, into out: inout TransformOutput) {
        guard let value = record.value else { return }
        let campaigns: [Campaign]
        do { campaigns = try decoder.decode(value) } catch { return out.fail(error) }
        for c in campaigns {
            // Last writer by record timestamp wins: a redelivered older record must not bring
            // back an older version (and emit a snapshot nobody saw before).
            if let seen = state.versions[c.id], record.timestamp < seen { continue }
            state.versions[c.id] = record.timestamp
            state.campaigns[c.id] = c
        }
        out.append(contentsOf: refreshFeeds(&state, now: context.now))
        if let user = userID(of: record) {
            out.append(contentsOf: refreshMine(user, campaigns, &state, now: context.now))
        }
    }

    /// Re-evaluates the feeds at a later time (campaigns end without an update).
    public func advance(state: inout State, context: TransformContext, into out: inout TransformOutput) {
        out.append(contentsOf: refreshFeeds(&state, now: context.now))
    }

    /// The ordered feed for one tab at `now` (all of it; the transform keeps the first ``topN``).
    public func feed(_ segment: FeedSegment, _ category: FeedCategory, in state: State, now: Int64) -> [Campaign] {
        state.campaigns.values
            .filter { ($0.isCorporate ? FeedSegment.corporate : .public) == segment }
            .filter { category == .all || categories[$0.categoryId] == category }
            .sorted { feedOrder($0, $1, now: now) }
    }

    private func entry(_ c: Campaign, now: Int64) -> FeedEntry {
        FeedEntry(
            id: c.id, name: c.name, ratio: c.ratio, ongoing: c.isOngoing(at: now), resultPosted: c.resultPosted(at: now),
            endDate: c.endDate, thumbnail: c.thumbnail)
    }

    private func refreshFeeds(_ state: inout State, now: Int64) -> [OutputRecord] {
        var records: [OutputRecord] = []
        for segment in FeedSegment.allCases {
            for category in FeedCategory.allCases {
                let key = "\(segment.rawValue)/\(category.rawValue)"
                let snapshot = feed(segment, category, in: state, now: now).prefix(topN).map { entry($0, now: now) }
                guard state.feeds[key, default: []] != snapshot else { continue }
                state.feeds[key] = snapshot
                records.append(OutputRecord(
                    output: "campaigns.feed", key: Array(key.utf8), value: Self.json(snapshot),
                    dedupeKey: "feed:\(key):\(stableHash(String(decoding: Self.json(snapshot), as: UTF8.self)))"))
            }
        }
        return records
    }

    private func refreshMine(_ user: String, _ campaigns: [Campaign], _ state: inout State, now: Int64) -> [OutputRecord] {
        var ids = state.participation[user] ?? []
        for c in campaigns where (c.my?.donatedSteps ?? 0) > 0 { ids.insert(c.id) }
        state.participation[user] = ids
        let list = ids.compactMap { state.campaigns[$0] }.sorted { feedOrder($0, $1, now: now) }.map { entry($0, now: now) }
        guard state.mine[user, default: []] != list else { return [] }
        state.mine[user] = list
        let value = Self.json(list)
        return [OutputRecord(
            output: "campaigns.mine", key: Array(user.utf8), value: value,
            dedupeKey: "mine:\(user):\(stableHash(String(decoding: value, as: UTF8.self)))")]
    }

    private func userID(of record: InputRecord) -> String? {
        switch user {
        case .header(let name): return record.headers.string(named: name).flatMap { $0.isEmpty ? nil : $0 }
        case .key: return record.key.flatMap { String(validating: $0, as: UTF8.self) }.flatMap { $0.isEmpty ? nil : $0 }
        }
    }

    static func json(_ entries: [FeedEntry]) -> [UInt8] {
        var w = JSONWriter()
        w.beginArray()
        for e in entries {
            w.beginObject()
            w.key("id"); w.int(e.id)
            w.key("name"); w.string(e.name)
            w.key("ratio"); w.int(e.ratio)
            w.key("ongoing"); w.bool(e.ongoing)
            w.key("resultPosted"); w.bool(e.resultPosted)
            w.key("endDate"); w.string(LocalDateTime.isoUTC(e.endDate))
            w.key("thumbnail"); w.optional(e.thumbnail)
            w.endObject()
        }
        w.endArray()
        return w.bytes
    }
}

/// `campaigns.notifications`: goal reached (ratio crosses 100), ending within 24 hours, result
/// posted; each at most once per campaign, to the topic `campaign-<id>`.
///
/// A goal is "reached" only when the transform saw the ratio below 100 before (a campaign first
/// seen at 120 % did not cross while we watched). "Ending soon" is judged at
/// ``TransformContext/now``.
public struct CampaignNotificationTransform: Transform {
    public struct Sent: Codable, Sendable, Equatable {
        public var lastRatio: Int64
        public var goal = false
        public var endingSoon = false
        public var resultPosted = false
    }

    public struct State: Codable, Sendable, Equatable {
        public var campaigns: [Int64: Sent] = [:]
        public init() {}
    }

    public var endingWithinMillis: Int64
    public var decoder: CampaignDecoder

    public init(endingWithinMillis: Int64 = 86_400_000, decoder: CampaignDecoder = CampaignDecoder()) {
        self.endingWithinMillis = endingWithinMillis
        self.decoder = decoder
    }

    public var name: String { "campaigns.notifications" }
    public var initialState: State { State() }

    public func process(_ record: InputRecord, state: inout State, context: TransformContext, into out: inout TransformOutput) {
        guard let value = record.value else { return }
        let campaigns: [Campaign]
        do { campaigns = try decoder.decode(value) } catch { return out.fail(error) }
        let now = context.now
        for c in campaigns {
            var sent = state.campaigns[c.id] ?? Sent(lastRatio: c.ratio, goal: c.ratio >= 100)
            func notify(_ kind: String, _ title: String, _ body: String) {
                out.append(PushNotification(
                    recipient: .topic("campaign-\(c.id)"), title: title, body: body,
                    data: ["campaign_id": String(c.id), "kind": kind], collapseKey: "campaign-\(c.id)-\(kind)",
                    dedupeKey: "campaign:\(c.id):\(kind)"
                ).outputRecord())
            }
            if !sent.goal, sent.lastRatio < 100, c.ratio >= 100 {
                sent.goal = true
                notify("goal-reached", "Goal reached!", "\(c.name) reached \(c.ratio)% of its goal. Thank you for walking!")
            }
            if !sent.endingSoon, c.isOngoing(at: now), c.endDate.saturatingSub(now) <= endingWithinMillis {
                sent.endingSoon = true
                notify("ending-soon", "Ending soon", "\(c.name) ends within 24 hours, at \(c.ratio)% of its goal.")
            }
            if !sent.resultPosted, c.resultPosted(at: now) {
                sent.resultPosted = true
                notify("result-posted", "Result posted", "See what \(c.name) achieved.")
            }
            sent.lastRatio = c.ratio
            state.campaigns[c.id] = sent
        }
    }
}

extension CampaignFeedTransform {
    /// `feed-top-n`: campaigns per user feed (default 60).
    public static let options = [
        TransformOption.utcOffset,
        TransformOption("feed-top-n") { value, options throws(OptionError) in options.feedTopN = try value.int() },
    ]
}

extension CampaignNotificationTransform {
    public static let options = [TransformOption.utcOffset]
}
