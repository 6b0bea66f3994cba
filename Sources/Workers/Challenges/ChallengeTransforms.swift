/// `challenges.decode`: iGoMoney messages (see ``ChallengeDecoder``) → one typed event each on
/// `challenges.events`, keyed by the challenge id (records by their challenge, so one
/// challenge's events stay in order on one partition; a give-up, which names only the user, by
/// `user-<id>`), with an `event-type` header. Values are upstream shapes the decoder reads back.
/// Tombstones carry nothing in this stream and are ignored. Stateless.
public struct ChallengeDecodeTransform: Transform {
    public var decoder: ChallengeDecoder

    public init(decoder: ChallengeDecoder = ChallengeDecoder()) { self.decoder = decoder }

    public var name: String { "challenges.decode" }

    public func process(_ record: InputRecord, state: inout NoState, context: TransformContext, into out: inout TransformOutput) {
        guard let value = record.value else { return }
        let events: [ChallengeEvent]
        do { events = try decoder.decode(value) } catch { return out.fail(error) }
        let id = record.identity
        out.append(contentsOf: events.enumerated().map { i, e in
            OutputRecord(
                output: "challenges.events", key: Array(e.key.utf8), value: e.jsonBytes(),
                headers: [RecordHeader("event-type", e.kind)], dedupeKey: "challenge:\(e.kind):\(e.key):\(id)#\(i)")
        })
    }
}

/// `challenges.standings`: per challenge, each participant's total spend and days with and
/// without records (``ChallengeBook``), emitted on `challenges.standings` (key: challenge id)
/// whenever they change; when the term has ended, the result, once, on `challenges.results`.
///
/// Records change the challenges they touch at once; the passing of days (a day without a
/// record, the end of the term) shows through ``advance`` (or the challenge's next event).
/// Decided challenges are forgotten ``retainMillis`` after their end.
public struct ChallengeStandingsTransform: Transform {
    public struct State: Codable, Sendable, Equatable {
        public var book = ChallengeBook()
        /// Challenge id → hash of the last standings emitted.
        public var emitted: [Int64: String] = [:]
        /// The largest `now` seen.
        public var clock: Int64 = .min
        public init() {}
    }

    public var offsetSeconds: Int
    public var missingDaysToLose: Int
    public var retainMillis: Int64
    public var decoder: ChallengeDecoder

    public init(
        offsetSeconds: Int = 9 * 3600, missingDaysToLose: Int = 3, retainMillis: Int64 = 7 * 86_400_000,
        decoder: ChallengeDecoder = ChallengeDecoder()
    ) {
        self.offsetSeconds = offsetSeconds
        self.missingDaysToLose = missingDaysToLose
        self.retainMillis = retainMillis
        self.decoder = decoder
    }

    public var name: String { "challenges.standings" }
    public var initialState: State { State() }

    public func process(_ record: InputRecord, state: inout State, context: TransformContext, into out: inout TransformOutput) {
        guard let value = record.value else { return }
        let events: [ChallengeEvent]
        do { events = try decoder.decode(value) } catch { return out.fail(error) }
        state.clock = max(state.clock, context.now)
        // Terms that ended by this record's time are decided before it counts, as the midnight
        // job would have: the result depends on event time, not on when `advance` last ran.
        var touched: [Int64] = []
        for e in events { for id in state.book.ids(affectedBy: e) where !touched.contains(id) { touched.append(id) } }
        let early = state.book.resolve(touched, now: state.clock, offsetSeconds: offsetSeconds, missingDaysToLose: missingDaysToLose)
        for e in events {
            for id in state.book.apply(e, version: record.timestamp, now: state.clock) where !touched.contains(id) {
                touched.append(id)
            }
        }
        out.append(contentsOf: publish(touched, decided: Set(early), &state))
    }

    public func advance(state: inout State, context: TransformContext, into out: inout TransformOutput) {
        state.clock = max(state.clock, context.now)
        var records = publish(state.book.entries.keys.sorted(), decided: [], &state)
        state.book.evict(now: state.clock, offsetSeconds: offsetSeconds, retainMillis: retainMillis)
        state.emitted = state.emitted.filter { state.book.entries[$0.key] != nil }
        records.sort { $0.dedupeKey < $1.dedupeKey }
        out.append(contentsOf: records)
    }

    /// The current standings of one challenge.
    public func standings(_ id: Int64, in state: State) -> ChallengeStandings? {
        state.book.standings(id, now: state.clock, offsetSeconds: offsetSeconds)
    }

    private func publish(_ ids: [Int64], decided early: Set<Int64>, _ state: inout State) -> [OutputRecord] {
        let now = state.clock
        let decided = early.union(state.book.resolve(ids, now: now, offsetSeconds: offsetSeconds, missingDaysToLose: missingDaysToLose))
        var out: [OutputRecord] = []
        for id in ids {
            guard let s = state.book.standings(id, now: now, offsetSeconds: offsetSeconds) else { continue }
            let value = s.jsonBytes()
            let hash = stableHash(String(decoding: value, as: UTF8.self))
            if state.emitted[id] != hash {
                state.emitted[id] = hash
                out.append(OutputRecord(
                    output: "challenges.standings", key: Array(String(id).utf8), value: value,
                    dedupeKey: "standings:\(id):\(hash)"))
            }
            if decided.contains(id) {
                out.append(OutputRecord(
                    output: "challenges.results", key: Array(String(id).utf8), value: value, dedupeKey: "result:\(id)"))
            }
        }
        return out
    }
}

/// `challenges.notifications`: the app's pushes in its FCM shape (notification `title` and
/// `body`, data `{"userId": "<id>"}`), as ``PushNotification``s on `notifications` for
/// ``NotificationRenderTransform``, to the topic `challenges-user-<id>` (the stream carries no FCM
/// tokens; the sender maps the topic to the user's token):
///
/// - **matched** (title "챌린지 현황", challenge status): the leader hears that a competitor
///   joined — when the transform sees the join (a join request, or the challenge before and after);
/// - **reminder** ("챌린지 현황"): from ``reminderHour`` local time on each day of a running,
///   matched challenge, each participant who has not recorded that day, once per day;
/// - **result** ("챌린지 결과", challenge result): win, lose or tie, once per participant.
public struct ChallengeNotificationTransform: Transform {
    public struct Sent: Codable, Sendable, Equatable {
        public var matched = false
        /// `user:day` reminders sent.
        public var reminders: Set<String> = []
        public var result = false
    }

    public struct State: Codable, Sendable, Equatable {
        public var book = ChallengeBook()
        public var sent: [Int64: Sent] = [:]
        public var clock: Int64 = .min
        public init() {}
    }

    public var offsetSeconds: Int
    /// Local hour (0–23) from which the day's reminder goes out.
    public var reminderHour: Int
    public var missingDaysToLose: Int
    public var retainMillis: Int64
    public var decoder: ChallengeDecoder

    public static let statusTitle = "챌린지 현황"
    public static let resultTitle = "챌린지 결과"

    public init(
        offsetSeconds: Int = 9 * 3600, reminderHour: Int = 21, missingDaysToLose: Int = 3,
        retainMillis: Int64 = 7 * 86_400_000, decoder: ChallengeDecoder = ChallengeDecoder()
    ) {
        self.offsetSeconds = offsetSeconds
        self.reminderHour = min(max(reminderHour, 0), 23)
        self.missingDaysToLose = missingDaysToLose
        self.retainMillis = retainMillis
        self.decoder = decoder
    }

    public var name: String { "challenges.notifications" }
    public var initialState: State { State() }

    public func process(_ record: InputRecord, state: inout State, context: TransformContext, into out: inout TransformOutput) {
        guard let value = record.value else { return }
        let events: [ChallengeEvent]
        do { events = try decoder.decode(value) } catch { return out.fail(error) }
        state.clock = max(state.clock, context.now)
        // As in the standings: terms that ended by now are decided before this record counts.
        var touched: [Int64] = []
        for e in events { for id in state.book.ids(affectedBy: e) where !touched.contains(id) { touched.append(id) } }
        _ = state.book.resolve(touched, now: state.clock, offsetSeconds: offsetSeconds, missingDaysToLose: missingDaysToLose)
        for e in events {
            let before: Int64?? = {
                switch e {
                case .joined(let id, _): return .some(state.book.entries[id]?.competitorId)
                case .challenge(let c):
                    guard let entry = state.book.entries[c.id] else { return nil }
                    // A join seen before the challenge itself: the match is news once the challenge is known.
                    if entry.challenge == nil { return entry.joinedCompetitor == nil ? nil : .some(nil) }
                    return .some(entry.competitorId)
                default: return nil
                }
            }()
            let ids = state.book.apply(e, version: record.timestamp, now: state.clock)
            touched.append(contentsOf: ids.filter { !touched.contains($0) })
            // Matched only when the transform saw it happen: nobody before, somebody now.
            if let before, before == nil, let id = ids.first, let entry = state.book.entries[id],
                let c = entry.challenge, let competitor = entry.competitorId, entry.result == nil,
                state.sent[id]?.matched != true
            {
                state.sent[id, default: Sent()].matched = true
                out.append(push(
                    to: c.leaderId, challenge: id, kind: "matched", title: Self.statusTitle,
                    body: "'\(c.title)' 챌린지에 상대가 참가했어요. \(c.startDate)부터 시작해요.",
                    dedupe: "challenge:\(id):matched:\(competitor)"))
            }
        }
        out.append(contentsOf: due(touched, &state))
    }

    public func advance(state: inout State, context: TransformContext, into out: inout TransformOutput) {
        state.clock = max(state.clock, context.now)
        out.append(contentsOf: due(state.book.entries.keys.sorted(), &state))
        state.book.evict(now: state.clock, offsetSeconds: offsetSeconds, retainMillis: retainMillis)
        state.sent = state.sent.filter { state.book.entries[$0.key] != nil }
    }

    /// Results and reminders due at the transform's clock for these challenges.
    private func due(_ ids: [Int64], _ state: inout State) -> [OutputRecord] {
        let now = state.clock
        var out: [OutputRecord] = []
        _ = state.book.resolve(ids, now: now, offsetSeconds: offsetSeconds, missingDaysToLose: missingDaysToLose)
        let today = CalendarDay(epochMillis: now, offsetSeconds: offsetSeconds)
        let reminderFrom = today.startMillis(offsetSeconds: offsetSeconds).saturatingAdd(Int64(reminderHour) * 3_600_000)
        for id in ids {
            guard let e = state.book.entries[id], let c = e.challenge else { continue }
            var sent = state.sent[id] ?? Sent()
            if let r = e.result, !sent.result {
                sent.result = true
                for user in e.participantIds {
                    guard let outcome = r.outcome(for: user) else { continue }
                    let body: String
                    switch outcome {
                    case .win: body = "'\(c.title)' 챌린지에서 승리했어요!"
                    case .lose: body = "'\(c.title)' 챌린지에서 아쉽게 패배했어요."
                    case .tie: body = "'\(c.title)' 챌린지가 무승부로 끝났어요."
                    }
                    out.append(push(
                        to: user, challenge: id, kind: "result", title: Self.resultTitle, body: body,
                        dedupe: "challenge:\(id):result:\(user)"))
                }
            } else if e.result == nil, e.competitorId != nil, today >= c.startDate, today < c.endDay, now >= reminderFrom {
                for user in e.participantIds where !e.gaveUp.contains(user) {
                    let recorded = e.records.values.contains { $0.userId == user && $0.date == today }
                    let key = "\(user):\(today)"
                    guard !recorded, !sent.reminders.contains(key) else { continue }
                    sent.reminders.insert(key)
                    out.append(push(
                        to: user, challenge: id, kind: "reminder", title: Self.statusTitle,
                        body: "오늘의 지출을 기록해 주세요. 기록 없는 날이 \(missingDaysToLose)일이면 패배해요.",
                        dedupe: "challenge:\(id):reminder:\(user):\(today)"))
                }
            }
            state.sent[id] = sent
        }
        return out
    }

    private func push(to user: Int64, challenge: Int64, kind: String, title: String, body: String, dedupe: String) -> OutputRecord {
        PushNotification(
            recipient: .topic("challenges-user-\(user)"), title: title, body: body, data: ["userId": String(user)],
            collapseKey: "challenge-\(challenge)-\(kind)", dedupeKey: dedupe
        ).outputRecord()
    }
}

/// `challenges.thumbnails`: every image of a visible spending record becomes one
/// ``ThumbnailRequest`` on `thumbnails.requests` (key `record-<id>`), for the thumbnail worker.
/// Hidden (reported) records get none. Stateless; an unchanged image gets the same dedupe key
/// on every edit.
public struct ChallengeThumbnailTransform: Transform {
    public var decoder: ChallengeDecoder

    public init(decoder: ChallengeDecoder = ChallengeDecoder()) {
        self.decoder = decoder
    }

    public var name: String { "challenges.thumbnails" }

    public func process(_ record: InputRecord, state: inout NoState, context: TransformContext, into out: inout TransformOutput) {
        guard let value = record.value else { return }
        let events: [ChallengeEvent]
        do { events = try decoder.decode(value) } catch { return out.fail(error) }
        for case .record(let r) in events where !r.hidden {
            for (index, url) in r.images.enumerated() {
                out.append(
                    ThumbnailRequest(owner: .record, ownerId: String(r.recordId), imageIndex: index, sourceURL: url).outputRecord())
            }
        }
    }
}

extension ChallengeStandingsTransform {
    public static let options = [TransformOption.utcOffset]
}

extension ChallengeNotificationTransform {
    public static let options = [TransformOption.utcOffset]
}
