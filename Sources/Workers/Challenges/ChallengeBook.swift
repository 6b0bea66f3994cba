/// How a finished challenge ended.
public struct ChallengeResult: Sendable, Hashable, Codable {
    public enum Kind: String, Sendable, Hashable, Codable {
        /// One participant won (`winnerId`).
        case decided
        /// Equal totals (the backend writes `winnerId` -1).
        case tie
        /// Both gave up or missed too many days: nobody wins.
        case bothLost = "both-lost"
        /// Nobody joined before the term ended.
        case unmatched
    }

    /// Per participant.
    public enum Outcome: String, Sendable, Hashable, Codable { case win, lose, tie }

    public var kind: Kind
    public var winnerId: Int64?
    /// `lower-total`, `equal-total`, `gave-up`, `missing-records`, `no-competitor`.
    public var reason: String

    public func outcome(for user: Int64) -> Outcome? {
        switch kind {
        case .decided: return user == winnerId ? .win : .lose
        case .tie: return .tie
        case .bothLost: return .lose
        case .unmatched: return nil
        }
    }
}

/// One participant's running position.
public struct ParticipantStanding: Sendable, Hashable, Codable {
    public var userId: Int64
    /// Won spent on days of the term.
    public var totalCost: Int64
    /// Days of the term with at least one record (today included).
    public var daysWithRecords: Int
    /// Finished days of the term without a record.
    public var daysWithoutRecords: Int
    public var gaveUp: Bool
}

/// A challenge's standings at one moment.
public struct ChallengeStandings: Sendable, Hashable, Codable {
    public var challengeId: Int64
    public var startDate: CalendarDay
    /// The first day after the term.
    public var endDate: CalendarDay
    /// Leader first, then the competitor.
    public var participants: [ParticipantStanding]
    public var result: ChallengeResult?

    public func jsonBytes() -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.key("challengeId"); w.int(challengeId)
        w.key("startDate"); w.string(startDate.description)
        w.key("endDate"); w.string(endDate.description)
        w.key("participants")
        w.beginArray()
        for p in participants {
            w.beginObject()
            w.key("userId"); w.int(p.userId)
            w.key("totalCost"); w.int(p.totalCost)
            w.key("daysWithRecords"); w.int(p.daysWithRecords)
            w.key("daysWithoutRecords"); w.int(p.daysWithoutRecords)
            w.key("gaveUp"); w.bool(p.gaveUp)
            w.endObject()
        }
        w.endArray()
        w.key("result")
        if let r = result {
            w.beginObject()
            w.key("kind"); w.string(r.kind.rawValue)
            w.key("winnerId"); w.optional(r.winnerId)
            w.key("reason"); w.string(r.reason)
            w.endObject()
        } else {
            w.null()
        }
        w.endObject()
        return w.bytes
    }
}

/// What the challenge transforms know about every challenge: a value both ``ChallengeStandingsTransform``
/// and ``ChallengeNotificationTransform`` keep in their state (each transform owns its copy).
///
/// Rules (the backend's day-7 midnight job, formats.md §5): the term is `term` days from the
/// start date, in ``offsetSeconds`` local time (Korean time); only records dated within the term
/// count; the result is due at midnight after the last day: giving up, or ``missingDaysToLose``
/// finished days without a record, loses; otherwise the lower total wins and equal totals tie.
/// A result is final: later events for that challenge change nothing.
///
/// Order independence: records are upserts by record id (a newer record timestamp wins, equal
/// ones are broken by content), totals are sums and days are sets, so the standings do not
/// depend on the order records arrive in.
public struct ChallengeBook: Sendable, Hashable, Codable {
    public struct Entry: Sendable, Hashable, Codable {
        public var challenge: Challenge?
        /// Record timestamp of the challenge object.
        public var version: Int64?
        /// Competitor learnt from a join request (the object's `competitorId` wins when present).
        public var joinedCompetitor: Int64?
        public var records: [Int64: SpendingRecord] = [:]
        /// Record id → (record timestamp, content hash) of the version kept.
        public var recordVersions: [Int64: RecordVersion] = [:]
        public var gaveUp: Set<Int64> = []
        public var result: ChallengeResult?
        public var firstSeen: Int64

        public var competitorId: Int64? { challenge?.competitorId ?? joinedCompetitor }
        public var participantIds: [Int64] {
            guard let c = challenge else { return Array(Set(records.values.map(\.userId))).sorted() }
            return [c.leaderId] + (competitorId.map { [$0] } ?? [])
        }
    }

    public struct RecordVersion: Sendable, Hashable, Codable {
        public var timestamp: Int64
        public var hash: String
        func newer(than o: RecordVersion) -> Bool { (timestamp, hash) > (o.timestamp, o.hash) }
    }

    public var entries: [Int64: Entry] = [:]
    /// Record id → challenge id (deletions name only the record).
    public var recordChallenge: [Int64: Int64] = [:]

    public init() {}

    /// Applies one event; returns the ids of the challenges it touched.
    public mutating func apply(_ event: ChallengeEvent, version: Int64, now: Int64) -> [Int64] {
        switch event {
        case .challenge(let c):
            var e = entries[c.id] ?? Entry(firstSeen: now)
            guard e.result == nil else { return [] }
            if let v = e.version, version < v { return [] }
            e.version = version
            e.challenge = c
            entries[c.id] = e
            return [c.id]
        case .joined(let id, let user):
            var e = entries[id] ?? Entry(firstSeen: now)
            guard e.result == nil, e.joinedCompetitor == nil, e.challenge?.leaderId != user else { return [] }
            e.joinedCompetitor = user
            entries[id] = e
            return [id]
        case .gaveUp(let user):
            var touched: [Int64] = []
            for id in entries.keys.sorted() {
                guard var e = entries[id], e.result == nil, e.participantIds.contains(user), !e.gaveUp.contains(user) else { continue }
                e.gaveUp.insert(user)
                entries[id] = e
                touched.append(id)
            }
            return touched
        case .record(let r):
            var e = entries[r.challengeId] ?? Entry(firstSeen: now)
            guard e.result == nil else { return [] }
            let v = RecordVersion(timestamp: version, hash: stableHash(String(decoding: r.jsonBytes(), as: UTF8.self)))
            if let old = e.recordVersions[r.recordId], !v.newer(than: old) { return [] }
            // A record moved to another challenge (an edit) leaves the old one.
            if let previous = recordChallenge[r.recordId], previous != r.challengeId {
                entries[previous]?.records[r.recordId] = nil
                entries[previous]?.recordVersions[r.recordId] = nil
            }
            e.records[r.recordId] = r
            e.recordVersions[r.recordId] = v
            entries[r.challengeId] = e
            recordChallenge[r.recordId] = r.challengeId
            return [r.challengeId]
        case .recordDeleted(let rid):
            guard let id = recordChallenge[rid], var e = entries[id], e.result == nil, e.records[rid] != nil else { return [] }
            e.records[rid] = nil
            // The version stays, so a redelivered older copy of the record does not come back.
            entries[id] = e
            return [id]
        }
    }

    /// The challenges an event would touch (before it is applied).
    public func ids(affectedBy event: ChallengeEvent) -> [Int64] {
        switch event {
        case .challenge(let c): return [c.id]
        case .joined(let id, _): return [id]
        case .record(let r):
            if let previous = recordChallenge[r.recordId], previous != r.challengeId { return [r.challengeId, previous] }
            return [r.challengeId]
        case .recordDeleted(let rid): return recordChallenge[rid].map { [$0] } ?? []
        case .gaveUp(let user): return entries.keys.sorted().filter { entries[$0]?.participantIds.contains(user) == true }
        }
    }

    /// The standings of a challenge at `now` (nil until the challenge itself has been seen).
    public func standings(_ id: Int64, now: Int64, offsetSeconds: Int) -> ChallengeStandings? {
        guard let e = entries[id], let c = e.challenge else { return nil }
        let today = CalendarDay(epochMillis: now, offsetSeconds: offsetSeconds)
        let finished = max(0, min(c.term, today.daysSinceEpoch - c.startDate.daysSinceEpoch))
        let lastFinished = c.startDate.adding(days: finished)  // exclusive
        let participants = e.participantIds.map { user -> ParticipantStanding in
            var total: Int64 = 0
            var days = Set<Int>()
            for r in e.records.values where r.userId == user && r.date >= c.startDate && r.date < c.endDay {
                total = total.saturatingAdd(r.cost)
                days.insert(r.date.daysSinceEpoch)
            }
            let recordedFinished = days.filter { $0 < lastFinished.daysSinceEpoch }.count
            return ParticipantStanding(
                userId: user, totalCost: total, daysWithRecords: days.count,
                daysWithoutRecords: finished - recordedFinished, gaveUp: e.gaveUp.contains(user))
        }
        return ChallengeStandings(
            challengeId: id, startDate: c.startDate, endDate: c.endDay, participants: participants, result: e.result)
    }

    /// Decides the challenges whose term has ended by `now`; returns the newly decided ids.
    public mutating func resolve(
        _ ids: [Int64]? = nil, now: Int64, offsetSeconds: Int, missingDaysToLose: Int
    ) -> [Int64] {
        var decided: [Int64] = []
        for id in ids ?? entries.keys.sorted() {
            guard let e = entries[id], e.result == nil, let c = e.challenge,
                now >= c.endDay.startMillis(offsetSeconds: offsetSeconds),
                let s = standings(id, now: now, offsetSeconds: offsetSeconds)
            else { continue }
            entries[id]?.result = Self.decide(s, missingDaysToLose: missingDaysToLose)
            decided.append(id)
        }
        return decided
    }

    static func decide(_ s: ChallengeStandings, missingDaysToLose: Int) -> ChallengeResult {
        guard s.participants.count == 2 else { return ChallengeResult(kind: .unmatched, reason: "no-competitor") }
        let (a, b) = (s.participants[0], s.participants[1])
        func out(_ p: ParticipantStanding) -> String? {
            p.gaveUp ? "gave-up" : p.daysWithoutRecords >= missingDaysToLose ? "missing-records" : nil
        }
        switch (out(a), out(b)) {
        case (let ra?, let rb?): return ChallengeResult(kind: .bothLost, reason: ra == rb ? ra : "\(ra),\(rb)")
        case (let ra?, nil): return ChallengeResult(kind: .decided, winnerId: b.userId, reason: ra)
        case (nil, let rb?): return ChallengeResult(kind: .decided, winnerId: a.userId, reason: rb)
        case (nil, nil):
            if a.totalCost == b.totalCost { return ChallengeResult(kind: .tie, winnerId: -1, reason: "equal-total") }
            return ChallengeResult(
                kind: .decided, winnerId: a.totalCost < b.totalCost ? a.userId : b.userId, reason: "lower-total")
        }
    }

    /// Forgets challenges decided more than `retainMillis` ago and ones known only from records
    /// or joins for that long.
    public mutating func evict(now: Int64, offsetSeconds: Int, retainMillis: Int64) {
        entries = entries.filter { _, e in
            if let c = e.challenge, e.result != nil {
                return c.endDay.startMillis(offsetSeconds: offsetSeconds).saturatingAdd(retainMillis) >= now
            }
            if e.challenge == nil { return e.firstSeen.saturatingAdd(retainMillis) >= now }
            return true
        }
        recordChallenge = recordChallenge.filter { entries[$0.value] != nil }
    }
}
